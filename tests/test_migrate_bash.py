"""`convert` against bash itself: the profile it writes holds what bash exports to the server
(and the server's directory), or it refuses with the line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.nccl import catalog, rules
from tests.conftest import RunCli, run_in_process

SERVE = "python3 -m sglang.launch_server --model-path /m"
# Stands in for the server: what bash exported to it, and where it started.
DUMP = (
    f"{sys.executable} -c 'import json, os, sys; "
    'json.dump({"env": dict(os.environ), "cwd": os.getcwd()}, open(sys.argv[1], "w"))\''
)

# (script, the line convert refuses or None); {serve} is the launch line.
CORPUS = [
    ("export NCCL_PROTO=LL; export -n NCCL_PROTO\n{serve}", None),
    ("export -n NCCL_ALGO=Ring\n{serve}", None),
    ("export NCCL_PROTO; NCCL_PROTO=LL\n{serve}", None),
    ("readonly NCCL_ALGO=Ring; export NCCL_ALGO\n{serve}", None),
    ("readonly NCCL_ALGO=Ring\n{serve}", None),
    ("set -a\nNCCL_ALGO=Ring\n{serve}", None),
    ("set -o allexport\nNCCL_ALGO=Ring\n{serve}", None),
    ("set -eua\nNCCL_ALGO=Ring\nset +o allexport\nNCCL_PROTO=LL\n{serve}", None),
    ("set -a\nset +a\nNCCL_ALGO=Ring\n{serve}", None),
    ("export NCCL_TOPO_FILE=~/topo.xml\ncd ~/srv\n{serve}", None),
    ("export HF_HOME=~/hf:~/x NCCL_TOPO_FILE='~/t' SGLANG_X=\"~\" HF_Y=a~\ncd ~\n{serve}", None),
    ("cd ~root\n{serve}", 1),
    ("export NCCL_ALGO=Ring\nunset -f NCCL_ALGO\n{serve}", None),
    ("export NCCL_ALGO=Ring NCCL_PROTO=LL\nunset -v NCCL_ALGO\n{serve}", None),
    ("export NCCL_IB_HCA=mlx5_0\nNCCL_IB_HCA+=,mlx5_1\n{serve}", None),
    ("export NCCL_IB_HCA=mlx5_0\nexport NCCL_IB_HCA=$NCCL_IB_HCA,mlx5_1\n{serve}", None),
    ("NCCL_IB_HCA+=mlx5_0\nexport NCCL_IB_HCA\n{serve}", None),
    ('export NCCL_ALGO="Ri"\'ng\' HF_HOME="/data/hf cache"\n{serve}', None),
    ('A=LL; export NCCL_PROTO="$A" NCCL_ALGO=${B:-Ring}\n{serve}', None),
    ("declare -x NCCL_ALGO=Ring\ntypeset -x NCCL_PROTO=LL\n{serve}", None),
    ("declare NCCL_ALGO=Ring\ntypeset -r NCCL_PROTO=LL\n{serve}", None),
    ("declare -x NCCL_ALGO=Ring NCCL_PROTO=LL\ndeclare +x NCCL_ALGO\n{serve}", None),
    ("declare -rx NCCL_ALGO=Ring\n{serve}", None),
    ("declare -i NCCL_NTHREADS=256+256\nexport NCCL_NTHREADS\n{serve}", 1),
    ("local NCCL_ALGO=Ring\nexport NCCL_ALGO\n{serve}", None),
    ("export -p\nexport NCCL_ALGO=Ring\nexport -p >/dev/null\n{serve}", None),
    ("export NCCL_ALGO=Ring NCCL_PROTO=LL\nenv -u NCCL_ALGO {serve}", None),
    ("export NCCL_ALGO=Ring\nenv --unset=NCCL_ALGO NCCL_PROTO=LL {serve}", None),
    ("export NCCL_ALGO=Ring\nenv -i {serve}", 2),
    ("export NCCL_ALGO=Ring\nNCCL_PROTO=LL {serve}", None),
    ("export NCCL_PROTO=LL\nunset NCCL_PROTO\n{serve}", None),
    ("mkdir -p srv/a\ncd srv/a\ncd ..\n{serve}", None),
    ("export NCCL_ALGO=Ring\nexport -n NCCL_ALGO\nset -a\nNCCL_ALGO=Tree\n{serve}", None),
    ("readonly NCCL_ALGO=Ring\nNCCL_ALGO=Tree\nexport NCCL_ALGO\n{serve}", 2),
    ("readonly NCCL_ALGO=Ring\nunset NCCL_ALGO\n{serve}", 2),
    ("export NCCL_ALGO=Ring\nexport NCCL_ALGO+=,Tree\n{serve}", None),
    ("export -- NCCL_ALGO=Ring\nexport -f\ndeclare -p NCCL_ALGO\n{serve}", None),
    ("export NCCL_ALGO=Ring\nNCCL_ALGO=Tree {serve}", None),
    ("exec env NCCL_PROTO=LL NCCL_ALGO=Ring {serve}", None),
    ("export NCCL_ALGO=Ring\nlocal NCCL_PROTO=LL || export NCCL_PROTO=Simple\n{serve}", None),
    ("export 1NCCL_ALGO=Ring\n{serve}", 1),
    ("NCCL_ALGO=Ring export NCCL_ALGO\n{serve}", 1),
    ("export NCCL_ALGO=Ring\nexport NCCL_ALGO=\n{serve}", 2),
    ("set -a; NCCL_ALGO=Ring true\n{serve}", None),
    ("declare -x NCCL_ALGO\nNCCL_ALGO=Ring\n{serve}", None),
    ("typeset -gx NCCL_ALGO=Ring\n{serve}", None),
    ("export NCCL_ALGO=Ring\nreadonly NCCL_ALGO\nexport -n NCCL_ALGO\n{serve}", None),
    ("export NCCL_ALGO=\\Ring\n{serve}", None),
    ("export NCCL_ALGO=Ri\\\nng\n{serve}", None),
    ("command export NCCL_ALGO=Ring\n{serve}", 1),
    ("builtin export NCCL_ALGO=Ring\n{serve}", 1),
    ("eval export NCCL_ALGO=Ring\n{serve}", 1),
    ("export NCCL_ALGO=Ring >/dev/null\n{serve}", None),
    ("cd\n{serve}", None),
    ("cd - \n{serve}", 1),
    ("cd srv srv\n{serve}", 1),
    (". /dev/null\n{serve}", 1),
    ("printf -v NCCL_ALGO Ring; export NCCL_ALGO\n{serve}", 1),
    ("printf '%s\\n' started\nexport NCCL_ALGO=Ring\n{serve}", None),
    ("cd -P ~/srv\n{serve}", None),
    ("pushd ~/srv\n{serve}", 1),
    ("set -o allexport\nNCCL_ALGO=Ring env -u NCCL_ALGO true\n{serve}", None),
    ("declare -- NCCL_ALGO=Ring\nexport NCCL_ALGO\n{serve}", None),
    ("export NCCL_ALGO={Ring,Tree}\n{serve}", 1),
    ("X=Ring; export NCCL_ALGO=$X NCCL_PROTO=${X:+LL}\n{serve}", 1),
    ("export NCCL_ALGO=Ring &\nwait\n{serve}", None),
    ("NCCL_ALGO=Ring &\nexport NCCL_ALGO\n{serve}", None),
    ("cd ~/srv &\n{serve}", None),
    ("export NCCL_ALGO=Ring | cat\n{serve}", None),
    ("cd ~/srv | cat\n{serve}", None),
    ("export NCCL_PROTO=LL\n{serve} 2>&1 | cat", None),
    ('export "NCCL_ALGO=Ring"\n{serve}', None),
    ("declare -x NCCL_ALGO+=Ring\n{serve}", None),
    ("export NCCL_ALGO=Ring\ntrue && export -n NCCL_ALGO\n{serve}", None),
    ("set -o allexport -e\nNCCL_ALGO=Ring\n{serve}", None),
    ("export NCCL_ALGO=Ring\nexport NCCL_ALGO=Tree NCCL_ALGO+=,Ring\n{serve}", None),
    ("export NCCL_ALGO=Ring\nexec {serve} &\nwait\n", None),
    ('A=Ring; export "NCCL_ALGO=$A" \'NCCL_PROTO=~/LL\' "1A=2"\n{serve}', 1),
    ('A=Ring; export "NCCL_ALGO=$A" \'NCCL_TOPO_FILE=~/t\' "NCCL_IB_HCA"+=x\n{serve}', None),
    ("nohup env NCCL_ALGO=Ring {serve} > log 2>&1 &\nwait\n", None),
    ("export NCCL_DEBUG_SUBSYS=INIT,NET NCCL_SOCKET_IFNAME='^lo,docker'\n{serve}", None),
    ("export NCCL_ALGO=Ring\nset -- a b\nset -a\nNCCL_PROTO=LL\n{serve}", None),
    ("declare -x NCCL_ALGO=Ring\ndeclare -x -n NCCL_ALGO\n{serve}", 2),
    ("export -fn NCCL_ALGO\n{serve}", None),
]


def bash_exports(
    script: str, home: str, tmp_path: Path, caller: dict[str, str] | None = None
) -> tuple[dict[str, str], str]:
    """The environment and directory bash, called with `caller` added to the clean
    environment, gives the launch line of `script`."""
    out = tmp_path / "dump.json"
    out.unlink(missing_ok=True)
    path = tmp_path / "bash.sh"
    path.write_text(script.replace("{serve}", f"{DUMP} {out}") + "\n")
    calling = {"HOME": home, "PATH": os.environ["PATH"], **(caller or {})}
    subprocess.run(["bash", str(path)], env=calling, cwd=tmp_path, check=True, timeout=30)
    dumped = json.loads(out.read_text())
    return dumped["env"], dumped["cwd"]


def convert(script: str, run: RunCli) -> subprocess.CompletedProcess[str]:
    Path("start.sh").write_text(script.replace("{serve}", SERVE) + "\n")
    return run("convert", "start.sh", "-o", "out.toml", "--force")


def assert_profile_holds_what_bash_exports(script: str, tmp_path: Path) -> None:
    """Every variable out.toml declares has the value bash exported, every NCCL_* bash
    exported is declared, and the server starts where bash ran it."""
    home = os.environ["HOME"]
    (Path(home) / "srv").mkdir(exist_ok=True)
    profile = tomllib.loads((tmp_path / "out.toml").read_text())
    env, cwd = bash_exports(script, home, tmp_path)
    declared = {catalog.PREFIX + key: rules.canonical(catalog.PREFIX + key, value)
                for key, value in profile.get("nccl", {}).items()}  # fmt: skip
    declared |= profile.get("env", {})
    assert declared == {key: env[key] for key in declared if key in env}
    assert {key for key in env if key.startswith(catalog.PREFIX)} <= set(declared)
    assert os.path.normpath(tmp_path / profile["server"].get("cwd", ".")) == cwd


@pytest.mark.parametrize(("script", "refused"), CORPUS)
def test_convert_writes_what_bash_exports_or_refuses_with_the_line(
    script: str, refused: int | None, run_cli: RunCli, tmp_path: Path
) -> None:
    result = convert(script, run_cli)
    if refused is not None:
        assert result.returncode == 2, result.stderr
        assert f"start.sh: line {refused}: " in result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert_profile_holds_what_bash_exports(script, tmp_path)


NAMES = st.sampled_from(["NCCL_IB_HCA", "HF_HOME"])
VALUES = st.sampled_from(["a", "~/a", "'~'", '"${NCCL_IB_HCA:-x}"'])
LINES = st.sampled_from([
    "export {n}={v}", "{n}={v}", "export {n}", "export -n {n}", "export -n {n}={v}",
    "unset {n}", "declare -x {n}={v}", "declare +x {n}", "local {n}={v}", "set -a", "set +a",
    "{n}+=,{v}", "cd ~/srv", "export {n}={v} | cat", "readonly {n}", "env -u {n} {serve}",
])  # fmt: skip
SCRIPTS = st.lists(st.tuples(LINES, NAMES, VALUES), min_size=1, max_size=8).map(
    lambda lines: "\n".join(line.replace("{n}", n).replace("{v}", v) for line, n, v in lines)
)


@settings(max_examples=150, deadline=None)
@given(SCRIPTS)
def test_any_script_of_these_lines_converts_as_bash_runs_it(script: str) -> None:
    """Scripts drawn from the lines that change what bash exports, in any order."""
    tmp_path = Path.cwd()
    result = convert(script + "\n{serve}", run_in_process)
    if result.returncode == 2:
        assert re.search(r"start.sh: line \d+: ", result.stderr), result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert_profile_holds_what_bash_exports(script + "\n{serve}", tmp_path)


def test_a_variable_that_extends_the_callers_nccl_value_is_refused(run_cli: RunCli) -> None:
    """Bash exports the caller's value and more; a profile can hold only a whole value."""
    script = "export NCCL_IB_HCA=$NCCL_IB_HCA,mlx5_1\nNCCL_ALGO+=,Tree\n" + SERVE
    Path("start.sh").write_text(script + "\n")
    result = run_cli("convert", "start.sh", env={"NCCL_IB_HCA": "mlx5_0"})
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: start.sh: line 1: NCCL_IB_HCA extends the caller's value, which a "
        "profile cannot hold; write the whole value\n"
    )


def test_a_variable_unset_in_the_script_no_longer_has_the_callers_value(
    run_cli: RunCli, tmp_path: Path
) -> None:
    script = "unset NCCL_ALGO\nexport NCCL_PROTO=${NCCL_ALGO:-LL}\n{serve}"
    Path("start.sh").write_text(script.replace("{serve}", SERVE) + "\n")
    caller = {"NCCL_ALGO": "Tree"}
    assert run_cli("convert", "start.sh", "-o", "out.toml", env=caller).returncode == 0
    env, _ = bash_exports(script, os.environ["HOME"], tmp_path, caller)
    assert tomllib.loads(Path("out.toml").read_text())["nccl"] == {"PROTO": env["NCCL_PROTO"]}
