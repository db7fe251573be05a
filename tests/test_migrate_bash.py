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
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.env.env_files import env_file_lines
from nccl_launch.nccl import catalog, rules
from nccl_launch.serving import references
from tests.conftest import RunCli, run_in_process
from tests.helpers import STANDIN
from tests.standins import EAGLE, vllm_reads, vllm_standins

SERVE = "python3 -m sglang.launch_server --model-path /m"
# Stands in for the server: what bash exported to it, where it started, and the arguments
# it got after those of the launch line.
DUMP = (
    f"{sys.executable} -c 'import json, os, sys; json.dump("
    '{"env": dict(os.environ), "cwd": os.getcwd(), "args": sys.argv[2:]}, open(sys.argv[1], "w"))\''
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
    ("NCCL_IB_HCA=a\nset -a\nreadonly NCCL_IB_HCA\ndeclare NCCL_IB_HCA\n{serve}", None),
    # Read as bash reads it: only LF ends a line, a CR is part of its word.
    ("# tuned\rexport NCCL_PROTO=Simple\n{serve}", None),
    ("export HF_HOME=/data\r\n{serve} a\r", None),
    ("export NCCL_PROTO=LL\r\n{serve}", 1),
    ("X=a\\\r\nexport HF_HOME=$X\n{serve}", None),
    # A byte that is not UTF-8 (a surrogate here): fine where it is only a comment or data,
    # refused where it would reach the profile.
    ("# caf\udce9\necho caf\udce9\nexport NCCL_ALGO=Ring\n{serve}", None),
    ("export HF_HOME=/caf\udce9\n{serve}", 1),
    ("X=\udce9\n{serve} $X", 2),
    # Words as bash makes them: IFS, empty unquoted expansions, braces, globs.
    ("IFS=,\nX='a b'\n{serve} $X", None),
    ("IFS=\nX='a,b c'\n{serve} $X", None),
    ("IFS=,\nX=a,b\n{serve} $X", 3),
    ("IFS=,\nunset IFS\nX='a b'\n{serve} $X", 4),
    ('IFS=,\nexport HF_HOME=a,b\n{serve} "$HF_HOME"', None),
    ("E=\n{serve} $E a \"$E\" '' $E$E", None),
    ("E=\nexport NCCL_ALGO=Ring\n$E {serve}", None),
    ("{serve} {a,b}", 1),
    ("{serve} x{1..2}", 1),
    ("export HF_HOME={a,b}\n{serve}", 1),
    ("HF_HOME={a,b} {serve} '{a,b}' \"{a,b}\" {c} a{b} \\{a,b}", None),
    ("{serve} *.json", 1),
    ("{serve} a?", 1),
    ("{serve} [ab]", 1),
    ("X='*'\n{serve} $X", 2),
    ("set -f\nX='*'\n{serve} $X *.json\nset +f", None),
    ("set -o noglob\nset +o noglob\n{serve} *.json", 3),
    ("cd $NOWHERE\n{serve}", 1),
    ("X='*'\nexport HF_HOME=*\n{serve} \"$X\" '*' \\? \"[ab]\" a[", None),
    # A default word is expanded as bash expands it: tilde, variables, arithmetic, quotes;
    # only when it is used; split and globbed where it is not quoted.
    ('B=/models\nexport HF_HOME=${U:-$B/hf}\n{serve} "${U:-$B/l}" "${U:-${V:-z}}" ${U:-~}', None),
    ('export HF_HOME=${U:-a:~/b} SGLANG_X=${U:-a=~}\n{serve} x${U:-~/a} ${U:-~"/a"}', None),
    ('{serve} ${U:-$((2*3))} "${U:-$((1+1))}" "${U:-~}" ${U:-{a}} ${U:-#x}', None),
    ('{serve} "${U:-\'a b\'}" ${U:-"a  b"} "${U:-"q r"}" ${U:-\'}\'} "${U:-\\}}"', None),
    ('E=\nexport HF_HOME=${E-~/x} NCCL_ALGO=${U-Ring}\n{serve} ${E-d} ${E:-d} ${U:-""}', None),
    ("Y=set\n{serve} ${Y:-$(hostname)} ${Y-`hostname`} ${U:-'*'} \"${U:-*}\"", None),
    ('{serve} "${U:-$(hostname)}"', 1),
    ("export HF_HOME=${U:-`hostname`}\n{serve}", 1),
    ("{serve} ${U:-a b}", 1),
    ("B='a b'\n{serve} ${U:-$B}", 2),
    ("IFS=,\n{serve} ${U:-a,b}", 2),
    ("{serve} ${U:-*.json}", 1),
    ("export HF_HOME=${U:=/a}\n{serve}", 1),
    ("{serve} ${U+a} ${U:?a}", 1),
    # A `$` bash passes as it is stays itself once the profile's args are filled.
    ("{serve} '$HOME' 'a$$b' '${X}' \"\\${Y}\" '$' '${' '$${' \"a\\$\"", None),
    ('X=\'${A} $$ $\'\n{serve} "$X" --served-model-name="$X"', None),
    ('X=\'$A $$ $\'\n{serve} "$X" --api-key "$X"x --admin-api-key="$X"', None),
    ("{serve} --api-key 'sk-$$1$' --admin-api=\"a b\" --ssl-keyfile-password=p", None),
]


def script_bytes(script: str, serve: str) -> bytes:
    """`script` with its launch line, as a file holds it: a surrogate stands for a byte that
    is not UTF-8, and a CR stays a CR."""
    return (script.replace("{serve}", serve) + "\n").encode("utf-8", "surrogateescape")


def bash_exports(
    script: str, home: str, tmp_path: Path, caller: dict[str, str] | None = None
) -> tuple[dict[str, str], str, list[str]]:
    """The environment, directory and arguments (after `--model-path /m`) bash, called with
    `caller` added to the clean environment, gives the launch line of `script`."""
    out = tmp_path / "dump.json"
    out.unlink(missing_ok=True)
    path = tmp_path / "bash.sh"
    path.write_bytes(script_bytes(script, f"{DUMP} {out}"))
    calling = {"HOME": home, "PATH": os.environ["PATH"], **(caller or {})}
    subprocess.run(["bash", str(path)], env=calling, cwd=tmp_path, check=True, timeout=30)
    dumped = json.loads(out.read_text())
    return dumped["env"], dumped["cwd"], dumped["args"]


def convert(script: str, run: RunCli) -> subprocess.CompletedProcess[str]:
    Path("start.sh").write_bytes(script_bytes(script, SERVE))
    return run("convert", "start.sh", "-o", "out.toml", "--force")


def env_files_values(profile: dict[str, Any], folder: Path) -> dict[str, str]:
    """What the env files a profile names (from its `folder`) hold, read as `run` reads them."""
    return {
        each.key: each.value
        for named in profile.get("env_files", [])
        for each in env_file_lines(folder / named)
    }


def secret_files_values(profile: dict[str, Any], folder: Path) -> dict[str, str]:
    """What the files of a profile's `secret_files` (from its `folder`) give, as `run` reads
    them: the text less its trailing newlines."""
    files = profile.get("secret_files", {})
    return {key: (folder / file).read_text().rstrip("\n") for key, file in files.items()}


def assert_profile_holds_what_bash_exports(script: str, tmp_path: Path) -> None:
    """Every variable out.toml declares has the value bash exported, and so has each its env
    files and secret files hold that bash exported; every NCCL_* bash exported is declared,
    and the server starts where bash ran it, with the arguments bash gave it once its args
    are filled from its env files and secret files."""
    home = os.environ["HOME"]
    (Path(home) / "srv").mkdir(exist_ok=True)
    profile = tomllib.loads((tmp_path / "out.toml").read_text())
    env, cwd, args = bash_exports(script, home, tmp_path)
    declared = {catalog.PREFIX + key: rules.canonical(catalog.PREFIX + key, value)
                for key, value in profile.get("nccl", {}).items()}  # fmt: skip
    values = env_files_values(profile, tmp_path) | secret_files_values(profile, tmp_path)
    declared |= profile.get("env", {})
    assert declared == {key: env[key] for key in declared if key in env}
    assert {key: value for key, value in values.items() if key in env} == {
        key: env[key] for key in values if key in env
    }
    assert {key for key in env if key.startswith(catalog.PREFIX)} <= set(declared)
    assert os.path.normpath(tmp_path / profile["server"].get("cwd", ".")) == cwd
    assert [references.fill(word, values) for word in profile["server"].get("args", [])] == args


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
VALUES = st.sampled_from([
    "a", "~/a", "'~'", '"${NCCL_IB_HCA:-x}"', "a,b", "'a b'", "''", "{a,b}", "'*'", "a\r",
    "\udce9", "${NCCL_IB_HCA:-~/$HF_HOME}", '"${HF_HOME-${NCCL_IB_HCA:-\'a b\'}}"',
])  # fmt: skip
LINES = st.sampled_from([
    "export {n}={v}", "{n}={v}", "export {n}", "export -n {n}", "export -n {n}={v}",
    "unset {n}", "declare -x {n}={v}", "declare +x {n}", "local {n}={v}", "set -a", "set +a",
    "{n}+=,{v}", "cd ~/srv", "export {n}={v} | cat", "readonly {n}", "env -u {n} {serve}",
    ". ~/sub.sh", "IFS=,", "IFS=", "unset IFS", "# {v}\r{n}={v}", "{n}={v} {serve} ${n}",
    "set -f", "set +o noglob", ". ~/keys.env", "KEY={v}", "unset KEY",
    "KEY=$(cat {k})", "export KEY=$(< {k})", 'declare -r KEY="$(cat {k})"',
])  # fmt: skip
# What `. ~/sub.sh` runs, in the script's shell: its `set -a` stays on after it.
SUB = "NCCL_IB_HCA=s\nexport HF_HOME=~/s\nset -a\n"
# What `. ~/keys.env` sets: a variable the server's args refer to, kept in that file.
KEYS_ENV = "KEY='k ${x} $$'\n"
# What `$(cat {k})` reads: a secret in a file that holds just it (a Secret volume's).
KEY_FILE = "k-$ecret\n\n"
SCRIPTS = st.lists(st.tuples(LINES, NAMES, VALUES), min_size=1, max_size=8).map(
    lambda lines: "\n".join(line.replace("{n}", n).replace("{v}", v) for line, n, v in lines)
)


@settings(max_examples=150, deadline=None)
@given(SCRIPTS)
def test_any_script_of_these_lines_converts_as_bash_runs_it(script: str) -> None:
    """Scripts drawn from the lines that change what bash exports, in any order."""
    tmp_path = Path.cwd()
    Path(os.environ["HOME"], "sub.sh").write_text(SUB)
    Path(os.environ["HOME"], "keys.env").write_text(KEYS_ENV)
    key_file = Path(os.environ["HOME"], "key")
    key_file.write_text(KEY_FILE)
    script = script.replace("{k}", str(key_file)) + '\n{serve} $HF_HOME "${KEY-}"'
    result = convert(script, run_in_process)
    if result.returncode == 2:
        assert re.search(r"start.sh: line \d+: ", result.stderr), result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert_profile_holds_what_bash_exports(script, tmp_path)


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
    env, _, _ = bash_exports(script, os.environ["HOME"], tmp_path, caller)
    assert tomllib.loads(Path("out.toml").read_text())["nccl"] == {"PROTO": env["NCCL_PROTO"]}


# (files the script sources, by path from its directory or `~/`; script; the line convert
# refuses or None). A sourced file runs in the script's shell: its assignments, `set -a`,
# `cd` and `return` act as if written there, and a relative path is from the directory
# the shell is in, not the sourcing file's.
ALGO = "export NCCL_ALGO=Ring\n"
KEYS = "API_KEY=sk-live-1234\nNAME='kimi ${x} $$'\n"
SOURCED = [
    ({"nccl.env": "NCCL_PROTO=LL\nNCCL_ALGO=Ring\n"},
     "set -a; source nccl.env; set +a\nNCCL_BUFFSIZE=1\n{serve}", None),
    ({"vars.sh": ALGO + "PROTO=LL\n"}, ". ./vars.sh\nexport NCCL_PROTO=$PROTO\n{serve}", None),
    ({"vars.sh": ALGO}, "source vars.sh\n{serve}", None),
    ({"srv/x.sh": ALGO + "cd ..\n"}, "cd srv\nsource x.sh\n{serve}", None),
    ({"a/one.sh": ALGO + "source a/two.sh\n", "a/two.sh": "export NCCL_PROTO=LL\n"},
     "source a/one.sh\n{serve}", None),
    ({"r.sh": ALGO + "return\nexport NCCL_PROTO=LL\n"}, "source r.sh\n{serve}", None),
    ({"a.sh": "set -a\n"}, "source a.sh\nNCCL_ALGO=Ring\n{serve}", None),
    ({"~/bin/found.sh": ALGO}, "PATH=~/bin:$PATH\nsource found.sh\n{serve}", None),
    ({"vars.sh": ALGO}, "source vars.sh &\nwait\n{serve}", None),
    ({"vars.sh": ALGO}, "true && . vars.sh\n{serve}", None),
    ({"vars.sh": ALGO}, "source vars.sh x\n{serve}", 1),
    ({}, "source missing.sh\n{serve}", 1),
    ({}, "source $NOWHERE/x.sh\n{serve}", 1),
    ({"loop.sh": "source loop.sh\n"}, "source loop.sh\n{serve}", 1),
    ({"srv/x.sh": ""}, "source srv\n{serve}", 1),
    ({"if.sh": "if true; then export NCCL_ALGO=Ring; fi\n"},
     "export NCCL_PROTO=LL\nsource if.sh\n{serve}", 2),
    # read as the script is: bytes, only LF ends a line
    ({"cr.sh": "# tuned\rexport NCCL_PROTO=Simple\nexport HF_HOME=/x\r\n"}, ". ./cr.sh\n{serve}",
     None),
    ({"latin1.sh": "# caf\udce9\nexport NCCL_ALGO=Ring\n"}, ". ./latin1.sh\n{serve}", None),
    # A key from a sourced file: `${NAME}` in args, the file named in env_files.
    ({"secrets.env": KEYS}, ". ./secrets.env\n{serve} --api-key \"$API_KEY\"", None),
    ({"secrets.env": KEYS}, "set -a; . ./secrets.env; set +a\n{serve} --api-key=$API_KEY", None),
    ({"k/s.env": KEYS}, "cd k\nsource ./s.env\ncd ..\n{serve} x\"$NAME\"' $'y --ap \"$API_KEY\"",
     None),
    ({"secrets.env": KEYS}, ". ./secrets.env\nAPI_KEY=sk-2\n{serve} --api-key \"$API_KEY\"", None),
    # ... or, where the file cannot be an env file of the profile, its values
    ({"secrets.env": KEYS + "export NCCL_ALGO=Ring\n"},
     ". ./secrets.env\n{serve} --api-key $API_KEY", None),
    ({"secrets.env": "API_KEY=\"a\\$b\"\n"},
     ". ./secrets.env\n{serve} --api-key \"$API_KEY\"", None),
    ({"secrets.env": KEYS + "export HF_HOME=/a\n"},
     ". ./secrets.env\nexport HF_HOME=/b\n{serve} --api-key \"$API_KEY\"", None),
]  # fmt: skip


def write_sourced(files: dict[str, str]) -> None:
    for name, text in files.items():
        path = Path(os.environ["HOME"], name[2:]) if name.startswith("~/") else Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize(("files", "script", "refused"), SOURCED)
def test_convert_follows_a_sourced_file_as_bash_does_or_refuses_with_the_line(
    files: dict[str, str], script: str, refused: int | None, run_cli: RunCli, tmp_path: Path
) -> None:
    write_sourced(files)
    result = convert(script, run_cli)
    if refused is not None:
        assert result.returncode == 2, result.stderr
        assert f"start.sh: line {refused}: " in result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert_profile_holds_what_bash_exports(script, tmp_path)


def test_a_byte_that_is_not_utf8_is_refused_where_it_reaches_the_profile(run_cli: RunCli) -> None:
    """Bash passes the byte; a profile is UTF-8 text, so convert names the file and line that
    set it. In a comment, or in what only `echo` prints, the byte changes nothing."""
    write_sourced({"latin1.sh": "# caf\udce9\nexport HF_HOME=/caf\udce9\n"})
    refusals = {
        "echo caf\udce9\n. ./latin1.sh\n{serve}": "start.sh: latin1.sh line 2: HF_HOME holds "
        "the byte \\xe9",
        "X=caf\udce9\n{serve} $X": "start.sh: line 2: the server's command holds the byte \\xe9",
        "cd \udce9\n{serve}": "start.sh: line 1: cd holds the byte \\xe9",
    }
    for script, why in refusals.items():
        result = convert(script, run_cli)
        assert (result.returncode, result.stderr) == (
            2,
            f"nccl-launch: {why}, which is not UTF-8; a profile is UTF-8 text: write it in UTF-8\n",
        )


def test_each_sourced_value_names_its_file_and_line(run_cli: RunCli) -> None:
    """In the profile's comments and in an error on the value, as for the script's own."""
    write_sourced({"nccl.env": "# tuned\nNCCL_PROTO=LL\nNCCL_ALGO=Ring\n"})
    result = convert("set -a\n. ./nccl.env\nexport NCCL_BUFFSIZE=4096\n{serve}", run_cli)
    assert result.returncode == 0, result.stderr
    lines = Path("out.toml").read_text().splitlines()
    assert 'ALGO = "Ring"  # nccl.env line 3' in lines
    assert 'PROTO = "LL"  # nccl.env line 2' in lines
    assert 'BUFFSIZE = "4KiB"  # line 3' in lines
    write_sourced({"nccl.env": "NCCL_PROTOCOL=LL\n"})
    result = convert("set -a\n. ./nccl.env\n{serve}", run_cli)
    assert result.returncode == 2
    assert result.stderr == (
        "start.sh: nccl.env line 1: NCCL_PROTOCOL is not a variable NCCL documents or reads "
        "(NCCL ignores it); did you mean NCCL_PROTO?\n"
    )


def test_an_nccl_value_set_without_export_is_left_out_as_bash_leaves_it_with_a_note(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """A sourced file without `set -a`, a plain assignment or `export -n`: bash gives the
    server none of them, so neither does the profile, and each is named with its line, since
    a value the script meant to apply and NCCL never sees is what this tool exists to catch."""
    write_sourced({"nccl.env": "NCCL_PROTO=LL\n"})
    script = (
        ". ./nccl.env\nNCCL_ALGO=Ring\nexport NCCL_BUFFSIZE=4096\nexport -n NCCL_BUFFSIZE\n"
        "HF_HOME=/x\nNCCL_IB_HCA=mlx5_0 {serve}"
    )
    result = convert(script, run_cli)
    assert result.returncode == 0, result.stderr
    assert_profile_holds_what_bash_exports(script, tmp_path)
    assert tomllib.loads(Path("out.toml").read_text())["nccl"] == {"IB_HCA": "mlx5_0"}
    left_out = [line for line in result.stderr.splitlines() if "not exported" in line]
    assert left_out == [
        f"nccl-launch: warning: {where}: {name} is not exported: bash gives the server this "
        "value only if the caller exported it (never after export -n); left out (export it "
        "to keep it)"
        for where, name in (
            ("line 2", "NCCL_ALGO"),
            ("line 3", "NCCL_BUFFSIZE"),
            ("nccl.env line 1", "NCCL_PROTO"),
        )
    ]


def test_a_second_server_command_names_where_the_first_is(run_cli: RunCli) -> None:
    write_sourced({"serve.sh": "export NCCL_ALGO=Ring\n" + SERVE + "\n"})
    result = convert(". ./serve.sh\n{serve}", run_cli)
    assert (result.returncode, result.stderr) == (
        2,
        "nccl-launch: start.sh: line 2: a second server command (the first: serve.sh line 2)\n",
    )


def test_a_sourced_file_that_cannot_be_followed_is_refused_with_why(run_cli: RunCli) -> None:
    """Never a profile that lacks what the file sets: missing, not a regular file (a symlink
    is resolved first), a path from a variable the script does not set, a construct not
    followed inside it, or sourced files nested deeper than 8."""
    Path("dev.sh").symlink_to("/dev/null")
    write_sourced({"real.sh": "export NCCL_ALGO=Ring\n", "if.sh": "if true; then :; fi\n"})
    Path("link.sh").symlink_to("real.sh")
    assert convert("source link.sh\n{serve}", run_cli).returncode == 0
    write_sourced({f"d{depth}.sh": f"source d{depth + 1}.sh\n" for depth in range(9)})
    write_sourced({"loop.sh": "source back.sh\n", "back.sh": ". ./loop.sh\n"})
    refusals = {
        "source missing.sh": "sourced file missing.sh: cannot read: No such file or directory",
        ". dev.sh": "sourced file dev.sh: a character device; only regular files are read",
        "source $CONF_DIR/nccl.sh": "sourced file $CONF_DIR/nccl.sh: $CONF_DIR is not set in "
        "the script or this environment",
        "source if.sh": "if.sh: line 1: `if` is not followed; convert the branch that runs, "
        "or write the profile by hand",
        "source d1.sh": "d1.sh: line 1: d2.sh: line 1: d3.sh: line 1: d4.sh: line 1: d5.sh: "
        "line 1: d6.sh: line 1: d7.sh: line 1: d8.sh: line 1: sourced file d9.sh: sourced "
        "files nest more than 8 deep (does one source itself?)",
        "source loop.sh": "loop.sh: line 1: back.sh: line 1: sourced file loop.sh: already "
        "being read (loop.sh -> back.sh -> loop.sh): bash would loop",
    }
    for line, why in refusals.items():
        result = convert(f"{line}\n{{serve}}", run_cli)
        assert (result.returncode, result.stderr) == (2, f"nccl-launch: start.sh: line 1: {why}\n")


@pytest.mark.parametrize(
    ("script", "name"),
    [
        ("source venv/bin/activate", "python3"),
        (". ./venv/bin/activate", "python"),
        ("cd venv\nsource bin/activate\ncd ..", "python3"),
        ("export PATH=~/ml/bin:$PATH", "python3"),
        ("PATH=/nowhere:$PATH\nsource venv/bin/activate", "python3"),
    ],
)
def test_the_servers_python_is_the_one_bash_finds_on_the_path_the_script_set(
    script: str, name: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A virtual environment's `activate` is not run: its bin goes first on PATH, as the
    real file (made by `python -m venv`) puts it for bash."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "venv"], check=True)
    fake = Path(os.environ["HOME"], "ml", "bin", "python3")
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    which = subprocess.run(["bash", "-c", f"{script}\ncommand -v {name}"], capture_output=True,
                           text=True, check=True, cwd=tmp_path, timeout=30)  # fmt: skip
    result = convert(f"{script}\n{name} -m sglang.launch_server --model-path /m", run_cli)
    assert result.returncode == 0, result.stderr
    python = tomllib.loads(Path("out.toml").read_text())["server"]["python"]
    assert python == which.stdout.strip()
    assert "is looked up on the PATH" not in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
def test_as_root_a_sourced_file_others_could_write_is_refused(run_cli: RunCli) -> None:
    write_sourced({"nccl.env": "export NCCL_ALGO=Ring\n"})
    Path("nccl.env").chmod(0o664)
    result = convert("source nccl.env\n{serve}", run_cli)
    assert result.returncode == 2
    assert result.stderr.startswith(
        "nccl-launch: start.sh: line 1: sourced file nccl.env: writable by group or others"
    )


# vLLM: a start script's `vllm serve` (or interpreter) line, and the line convert refuses or
# None. Its profile, run, must exec what bash execs, as vLLM's parser reads it.
NGRAM = '{"method":"ngram","num_speculative_tokens":3}'
VLLM_CORPUS = [
    ("vllm serve /models/m -tp 8 --port 8001 --enforce-eager", None),
    ("vllm serve --model /models/m --tensor_parallel_size=8 --max-model-len 8192", None),
    ("vllm serve -tp 8 --model=/models/m --served-model-name kimi k2", None),
    (f"M=/models/m\nvllm serve \"$M\" --speculative-config '{EAGLE}' --host 127.0.0.1", None),
    ("vllm serve /m -sc '" + NGRAM.replace("}", ',"prompt-lookup-max":4}') + "'", None),
    ("vllm serve /m -sc '" + NGRAM.replace("}", ',"x":[1]}') + "' -pp 2", None),
    (". ./secrets.env\nvllm serve /m --api-key \"$API_KEY\"", None),
    (". ./secrets.env\nvllm serve /m --api-key \"$API_KEY\" sk-live-2 --enforce-eager", None),
    ("vllm serve /m --api-key sk-live-1 sk-live-2 --api_key sk-live-3 sk-live-4", None),
    ("export VLLM_API_KEY=sk-live-1234\nvllm serve /m", None),
    ("HF_TOKEN=hf_x VLLM_API_KEY=sk-live-1234 vllm serve /m --api-key=sk-other-99", None),
    ("python3 -m vllm.entrypoints.cli.main serve /m --master-addr 10.0.0.1 --master-port 29500 "
     "-n 2 -r 1 -tp 16", None),
    ("python3 -m vllm.entrypoints.openai.api_server --model /m -tp=2 --master-addr h", None),
    (f"vllm serve /m --speculative_config='{EAGLE}' --master-addr=h --master-port=5 -n=2 -tp=4"
     " -r=1",
     None),
    ("vllm serve /m --spec-method ngram --spec_tokens=3", None),
    ("vllm serve /m -sc '" + NGRAM.replace(":3", ":99999999999999999999999") + "'", None),
    ("vllm serve /m -sc '" + NGRAM.replace("}", ',"prompt_lookup_max":NaN}') + "'", None),
    ("vllm serve /m -sc '{\"method\":\"ngram\"}' --spec-tokens 3", None),
    ("vllm serve /m -sc '" + NGRAM + "' --spec-tokens 3", 1),  # vLLM: mutually exclusive
    ("vllm serve --port 8000 /m", 1),
    ("X=1\nvllm serve /m -sc '{bad'", 2),
    ("vllm serve /m -sc '[1]'", 1),
    ("vllm serve /m --model /n", 1),
    ("vllm serve /m -tp eight", 1),
]  # fmt: skip


@pytest.mark.parametrize(("script", "refused"), VLLM_CORPUS)
def test_a_vllm_script_converts_to_a_profile_whose_run_execs_what_bash_execs(
    script: str, refused: int | None, run_cli: RunCli, nccl_launch: RunCli, tmp_path: Path
) -> None:
    """The profile's argv reads as bash's does to vLLM's parser, and the server gets the
    variables bash gave it, the key among them from an env file, never from the profile."""
    out = tmp_path / "vllm.json"
    path = vllm_standins(tmp_path, out)
    write_sourced({"secrets.env": "API_KEY=sk-live-1234\n"})
    result = convert(script, run_cli)
    if refused is not None:
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"nccl-launch: start.sh: line {refused}: "), result.stderr
        assert len(result.stderr.splitlines()) == 1
        return
    assert result.returncode == 0, result.stderr
    text = Path("out.toml").read_text()
    assert "sk-" not in text and "hf_x" not in text
    assert tomllib.loads(text)["server"]["kind"] == "vllm"
    subprocess.run(["bash", "start.sh"], env={"HOME": os.environ["HOME"], "PATH": path},
                   cwd=tmp_path, check=True, timeout=30)  # fmt: skip
    bash = json.loads(out.read_text())
    out.unlink()
    launched = nccl_launch("run", "out.toml", env={"PATH": path})
    assert launched.returncode == 0, launched.stderr
    run = json.loads(out.read_text())
    assert run["argv"][0] == bash["argv"][0]
    assert vllm_reads(run["argv"]) == vllm_reads(bash["argv"])
    given = {key for key in bash["env"] if key.startswith(("VLLM_", "HF_"))}
    assert {key: run["env"].get(key) for key in given} == {key: bash["env"][key] for key in given}


# (script, the line convert refuses or None): a secret read from a file as a container's
# start script reads it (Docker's and Kubernetes' /run/secrets/NAME, systemd's credentials).
SECRET_CORPUS = [
    ('{serve} --api-key "$(cat secrets/api_key)"', None),
    ("{serve} --api-key $(< secrets/api_key)", None),
    ("{serve} --api-key=$(cat 'secrets/api_key')", None),
    ('{serve} --api-key "$(<secrets/api_key)" --admin-api-key "$(cat "secrets/admin key")"', None),
    ('mkdir -p srv\ncd srv\n{serve} --api-key "$(cat ../secrets/api_key)"', None),
    ('{serve} --api-key "Bearer $(cat secrets/api_key)"', None),
    ('{serve} --api-key "$(head -c 64 secrets/api_key)"', 1),
    ('{serve} --api-key "$(cat secrets/api_key secrets/admin\\ key)"', 1),
    # A variable read from the file, then used or exported, as bash runs it.
    ('KEY=$(cat secrets/api_key)\n{serve} --api-key "$KEY"', None),
    ('export API_KEY=$(cat secrets/api_key)\n{serve} --api-key "$API_KEY"', None),
    ("API_KEY=$(< secrets/api_key)\nexec {serve} --api-key $API_KEY", None),
    ('declare -x API_KEY="$(<secrets/api_key)"\n{serve}', None),
    ("export API_KEY=$(cat secrets/api_key)\nexport -n API_KEY\n{serve}", None),
    ('K="$(cat "secrets/admin key")"\n{serve} --admin-api-key="$K" --api-key "Bearer ${K}"', None),
    ('mkdir -p srv\ncd srv\nKEY=$(cat ../secrets/api_key)\ncd ..\n{serve} --api-key "$KEY"', None),
    ('KEY=$(cat secrets/api_key)\nKEY=sk-plain\n{serve} --api-key "$KEY"', None),
    ("export KEY=$(cat secrets/api_key)\nunset KEY\n{serve}", None),
    ('KEY=$(cat secrets/api_key)\nAUTH="Bearer $KEY"\n{serve} --api-key "$AUTH"', 2),
    ('KEY="Bearer $(cat secrets/api_key)"\n{serve} --api-key "$KEY"', 1),
    ('KEY=$(cat secrets/api_key)\nenv API_KEY="$KEY" {serve}', 2),
    ("KEY=$(cat secrets/api_key)\nAPI_KEY=$KEY {serve}", 2),
]


@pytest.mark.parametrize(("script", "refused"), SECRET_CORPUS)
def test_a_secret_read_from_a_file_is_a_secret_file_the_server_gets_as_bash_gives_it(
    script: str, refused: int | None, run_cli: RunCli, nccl_launch: RunCli, tmp_path: Path
) -> None:
    """`$(cat FILE)` and `$(< FILE)` become `secret_files`: the profile holds the path, never
    the value, and `run` gives the server the arguments bash gives it (trailing newlines
    dropped, as command substitution drops them); any other command is refused with the
    form that is followed."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "api_key").write_text("sk-live-1234\n\n")
    (secrets / "admin key").write_text("adm in\n")
    result = convert(script, run_cli)
    if refused is not None:
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"nccl-launch: start.sh: line {refused}: "), result.stderr
        assert "$(cat FILE) or $(< FILE), which becomes the profile's secret_files" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    text = Path("out.toml").read_text()
    assert "sk-live" not in text and "adm in" not in text
    env, _, args = bash_exports(script, os.environ["HOME"], tmp_path)
    out = tmp_path / "record.json"
    launched = nccl_launch(
        "run", "out.toml", env={"PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out)}
    )
    assert launched.returncode == 0, launched.stderr
    record = json.loads(out.read_text())
    argv = record["argv"]
    assert argv[1:5] == ["--model-path", "/m", "--tp-size", "1"]  # the profile adds tp_size
    assert argv[5:] == args
    # What bash exports, the server's environment holds, but for a secret that fills its
    # arguments: the profile gives it there alone (no process's environment carries it).
    words = " ".join(tomllib.loads(text)["server"].get("args", []))
    exported = {key: env[key] for key in ("API_KEY", "KEY", "K") if key in env}
    given = {key: None if f"${{{key}}}" in words else value for key, value in exported.items()}
    assert {key: record["env"].get(key) for key in exported} == given
