"""`convert` and `capture`: real scripts run by bash and real processes, against the profiles."""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
from dotenv import dotenv_values
from hypothesis import given
from hypothesis import strategies as st

from nccl_launch.migrate.server_table import server_table
from nccl_launch.nccl import rules
from nccl_launch.serving import references
from nccl_launch.sglang import facts
from tests.conftest import HERE, RunCli, console_script
from tests.helpers import STANDIN, Record, read_record, sleeper, wait_for_record, while_running
from tests.standins import EAGLE, start_standin, vllm_reads, vllm_standins

SCRIPTS = HERE / "scripts"
SERVE = "python3 -m sglang.launch_server --model-path /m\n"


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    """`python3 -m sglang.launch_server` runs the stand-in; scripts cd to SERVER_DIR."""
    server_dir = tmp_path / "srv"
    server_dir.mkdir()
    return {"PYTHONPATH": str(STANDIN), "SERVER_DIR": str(server_dir)}


def canonical_flags(argv: list[str]) -> Counter[tuple[str, str | None]]:
    """(flag, value) pairs with SGLang's aliases and prefixes resolved, order ignored.

    `argv` is what the stand-in recorded: its own path, then the flags.
    """
    pairs: Counter[tuple[str, str | None]] = Counter()
    flags = argv[1:]
    index = 0
    while index < len(flags):
        name, equals, value = flags[index].partition("=")
        if not equals and index + 1 < len(flags) and not flags[index + 1].startswith("--"):
            value, index = flags[index + 1], index + 1
        flag = facts.flag_for(name)
        if flag is not None and flag.field == "speculative.algorithm":
            value = value.upper()  # SGLang compares algorithm names case-blind
        pairs[(flag.canonical if flag else name, value or None)] += 1
        index += 1
    return pairs


def run_original(script: Path, env: dict[str, str], out: Path) -> Record:
    """What the server of `script`, run by bash, received (some scripts start it in the
    background: their server may record after bash is done)."""
    subprocess.run(["bash", str(script)], env={**os.environ, **env, "STANDIN_RECORD": str(out)},
                   check=True, capture_output=True, timeout=30)  # fmt: skip
    return wait_for_record(out)


@pytest.mark.parametrize("script", ["start_kimi.sh", "serve_llama_eagle.sh", "guarded_start.sh"])
def test_convert_then_run_reproduces_the_scripts_env_and_argv(
    script: str, nccl_launch: RunCli, server_env: dict[str, str], tmp_path: Path
) -> None:
    original = run_original(SCRIPTS / script, server_env, tmp_path / "original.json")

    converted = nccl_launch("convert", str(SCRIPTS / script), "--name", "converted", env=server_env)
    assert converted.returncode == 0, converted.stderr
    profile = tomllib.loads(Path("profiles/converted.toml").read_text())

    out = tmp_path / "converted.json"
    launched = nccl_launch("run", "converted", env={**server_env, "STANDIN_RECORD": str(out)})
    assert launched.returncode == 0, launched.stderr
    again = read_record(out)  # run execs the server: it has recorded by the time run returns

    declared = {f"NCCL_{key}" for key in profile.get("nccl", {})} | set(profile.get("env", {}))
    assert declared
    for key in declared:
        assert again["env"][key] == original["env"][key], key
    assert again["env"]["NCCL_LAUNCH_PROFILE"] == "converted@1"
    assert canonical_flags(again["argv"]) == canonical_flags(original["argv"])
    assert again["cwd"] == original["cwd"] == server_env["SERVER_DIR"]


def test_convert_reads_exports_prefixes_and_flags_into_the_right_tables(
    run_cli: RunCli, server_env: dict[str, str]
) -> None:
    result = run_cli("convert", str(SCRIPTS / "start_kimi.sh"), env=server_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wrote profiles/start_kimi.toml (start_kimi@1, sha256:")
    assert "PATH extends the caller's value; not converted" in result.stderr
    profile = tomllib.loads(Path("profiles/start_kimi.toml").read_text())
    assert profile["nccl"] == {
        "ALGO": "Ring", "BUFFSIZE": "16MiB", "MAX_NCHANNELS": 16, "NTHREADS": 512,
        "P2P_LEVEL": "SYS", "PROTO": "LL",
    }  # fmt: skip
    assert profile["env"] == {"HF_HUB_OFFLINE": "1"}
    server = profile["server"]
    assert (server["python"], server["entrypoint"]) == ("python3", "-m sglang.launch_server")
    assert (server["model_path"], server["tp_size"], server["port"]) == (
        "/models/Kimi-K2.5",
        8,
        8000,
    )
    assert server["speculative"] == {
        "algorithm": "EAGLE3", "draft_model_path": "/models/Kimi-K2.5-EAGLE3",
        "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3,
    }  # fmt: skip
    assert server["args"] == ["--disable-custom-all-reduce", "--num-continuous-decode-steps", "4"]


def test_a_converted_start_script_round_trips_to_integers_and_the_same_digest(
    run_cli: RunCli, server_env: dict[str, str]
) -> None:
    converted = run_cli("convert", str(SCRIPTS / "start_kimi.sh"), env=server_env)
    assert converted.returncode == 0, converted.stderr
    text = Path("profiles/start_kimi.toml").read_text()
    # Typed as a person writes them, each with the script line it came from.
    for line in ['PROTO = "LL"  # line 5', 'P2P_LEVEL = "SYS"  # line 6',
                 "MAX_NCHANNELS = 16  # line 7", 'BUFFSIZE = "16MiB"  # line 7',
                 "NTHREADS = 512  # line 7", 'HF_HUB_OFFLINE = "1"  # line 13']:  # fmt: skip
        assert line in text.splitlines()
    data = tomllib.loads(text)
    assert type(data["nccl"]["MAX_NCHANNELS"]) is int
    assert type(data["nccl"]["NTHREADS"]) is int
    # The same profile with every value as the text the script exported (what convert wrote
    # before) has the same digest: the child gets the same strings.
    strings = data | {"nccl": {key: rules.canonical(f"NCCL_{key}", value)
                               for key, value in data["nccl"].items()}}  # fmt: skip
    assert strings["nccl"]["BUFFSIZE"] == "16777216"
    Path("profiles/as-text.toml").write_text(tomli_w.dumps(strings | {"name": "as-text"}))
    digests = {
        json.loads(run_cli("show", "--format", "json", name).stdout)["digest"][:15]
        for name in ("start_kimi", "as-text")
    }
    assert digests == {converted.stdout.split()[3].rstrip(");")}


@pytest.mark.parametrize(
    ("name", "raw", "stored"),
    [
        ("NCCL_MAX_NCHANNELS", "16", 16),
        ("NCCL_NTHREADS", "512", 512),
        ("NCCL_BUFFSIZE", "16777216", "16MiB"),
        ("NCCL_BUFFSIZE", "4096", "4KiB"),
        ("NCCL_BUFFSIZE", "1000", 1000),
        ("NCCL_BUFFSIZE", "1073741824", "1GiB"),
        ("NCCL_WORK_ARGS_BYTES", "3221225472", "3GiB"),
        ("NCCL_P2P_DISABLE", "1", True),
        ("NCCL_P2P_DISABLE", "0", False),
        ("NCCL_P2P_LEVEL", "SYS", "SYS"),
        ("NCCL_PROTO", "LL", "LL"),
        ("NCCL_SOCKET_IFNAME", "eth0", "eth0"),
    ],
)
def test_typed_values_read_best_and_mean_the_same(name: str, raw: str, stored: object) -> None:
    written = rules.reading(name, raw).toml()
    assert written == stored
    assert written is not None
    assert type(written) is type(stored)
    assert rules.canonical(name, written) == rules.canonical(name, raw)


@given(st.integers(min_value=1, max_value=2**31 - 1))
def test_every_buffsize_keeps_its_bytes_when_typed(number: int) -> None:
    written = rules.reading("NCCL_BUFFSIZE", str(number)).toml()
    assert written is not None
    assert rules.canonical("NCCL_BUFFSIZE", written) == str(number)


def test_convert_a_raw_line_from_stdin(run_cli: RunCli) -> None:
    line = Path("line.sh")
    line.write_text(
        "NCCL_PROTO=ll NCCL_BUFFSIZE=4M python -m sglang.launch_server --model /m --tp-size=2\n"
    )
    result = run_cli("convert", "-", "--name", "raw", "-o", "raw.toml", stdin_path=line)
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("raw.toml").read_text())
    # NCCL reads `4M` as 4 (strtoll stops at the M): the profile keeps that, and says so.
    assert profile["nccl"] == {"PROTO": "ll", "BUFFSIZE": 4}
    assert "NCCL_BUFFSIZE=4M: NCCL reads 4; stored 4" in result.stderr
    assert profile["server"]["tp_size"] == 2
    assert profile["provenance"]["source"] == "stdin"


def test_convert_reads_stdin_as_bash_reads_a_pipe_bytes_where_only_lf_ends_a_line() -> None:
    """A lone CR keeps a comment a comment, a CR before LF stays in its word, and a byte that
    is not UTF-8 in a comment changes nothing. A real process: the in-process runner passes
    stdin as text, which would turn the CRs into line ends before convert sees them."""
    line = (
        b"# caf\xe9, tuned\rexport NCCL_PROTO=Simple\n"
        b"export NCCL_ALGO=Ring HF_HOME=/data\r\n"
        b"python3 -m sglang.launch_server --model-path /m\n"
    )
    command = [console_script(), "convert", "-", "--name", "raw", "-o", "raw.toml"]
    result = subprocess.run(command, input=line, capture_output=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("raw.toml").read_text())
    assert (profile["nccl"], profile["env"]) == ({"ALGO": "Ring"}, {"HF_HOME": "/data\r"})


def test_a_size_whose_unit_nccl_dropped_is_said_by_convert_and_validate(run_cli: RunCli) -> None:
    """`16MiB` is 16 bytes to NCCL (strtoll stops at the M), which it runs with: convert keeps
    what ran and says what was meant; validate then warns, with the id to accept it by. A
    plain count that small is said too; a size a unit wrote, or 0, is not."""
    script = Path("start.sh")
    script.write_text(
        "export NCCL_BUFFSIZE=16MiB NCCL_P2P_NET_CHUNKSIZE=512 NCCL_IB_AR_THRESHOLD=0\n"
        "export NCCL_CHUNK_SIZE=16K\n"
        "/opt/ml/bin/python -m sglang.launch_server --model /m\n"
    )
    result = run_cli("convert", "start.sh", "--name", "slip", "-o", "slip.toml")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "nccl-launch: warning: line 1: NCCL_BUFFSIZE=16MiB: NCCL reads 16; stored 16 (16 "
        "bytes is under 1/64 of NCCL's default 4194304; for 16MiB (16777216 bytes) write "
        '"16MiB")\n'
        "nccl-launch: warning: line 2: NCCL_CHUNK_SIZE=16K: NCCL reads 16; stored "
        "16\n"  # its default is "0 (auto)": nothing to measure against
        "nccl-launch: warning: line 1: NCCL_P2P_NET_CHUNKSIZE=512: 512 bytes is under 1/64 of "
        'NCCL\'s default 131072; for 512KiB (524288 bytes) write "512KiB"\n'
    )
    nccl = tomllib.loads(Path("slip.toml").read_text())["nccl"]
    assert nccl == {"BUFFSIZE": 16, "P2P_NET_CHUNKSIZE": 512, "IB_AR_THRESHOLD": 0,
                    "CHUNK_SIZE": 16}  # fmt: skip
    result = run_cli("validate", "slip.toml")
    assert result.returncode == 0
    assert result.stderr == (
        "nccl-launch: warning: slip.toml: NCCL_BUFFSIZE: 16 bytes is under 1/64 of NCCL's "
        'default 4194304; for 16MiB (16777216 bytes) write "16MiB" [accept: "NCCL_BUFFSIZE '
        'size"]\n'
        "nccl-launch: warning: slip.toml: NCCL_P2P_NET_CHUNKSIZE: 512 bytes is under 1/64 of "
        'NCCL\'s default 131072; for 512KiB (524288 bytes) write "512KiB" [accept: '
        '"NCCL_P2P_NET_CHUNKSIZE size"]\n'
    )
    text = Path("slip.toml").read_text().replace("BUFFSIZE = 16 ", 'BUFFSIZE = "16MiB" ')
    text = text.replace("P2P_NET_CHUNKSIZE = 512", 'P2P_NET_CHUNKSIZE = "1KiB"')  # 1024 bytes
    Path("slip.toml").write_text(text)
    result = run_cli("validate", "slip.toml")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    # A count of bytes with no unit, far below: the unit nearest NCCL's default (4MiB, not 4KiB).
    Path("four.toml").write_text('schema = 1\nname = "four"\nversion = 1\n[nccl]\nBUFFSIZE = 4\n')
    assert 'for 4MiB (4194304 bytes) write "4MiB"' in run_cli("validate", "four.toml").stderr
    accepted = Path("four.toml").read_text() + '[policy]\naccept = ["NCCL_BUFFSIZE size"]\n'
    Path("four.toml").write_text(accepted)
    assert run_cli("validate", "four.toml").stderr == ""  # meant so, and said once


def test_a_key_read_from_a_file_is_named_after_the_file_as_masking_hides_it(
    run_cli: RunCli,
) -> None:
    """`api_key` gives API_KEY; a name masking would show gets _SECRET (validate refuses a
    credential under a shown name); a second file of the same name, a number."""
    Path("start.sh").write_text(
        "/opt/ml/bin/python -m sglang.launch_server --model /m --api-key $(< /run/secrets/k) "
        '--admin-api-key "$(cat /etc/keys/k)" --hf-token=$(cat /run/secrets/api_key)\n'
    )
    result = run_cli("convert", "start.sh", "--name", "named", "-o", "named.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("named.toml").read_text())
    assert profile["secret_files"] == {
        "K_SECRET": "/run/secrets/k",
        "K_SECRET_2": "/etc/keys/k",
        "API_KEY": "/run/secrets/api_key",
    }
    assert profile["server"]["args"] == [
        *("--api-key", "${K_SECRET}", "--admin-api-key", "${K_SECRET_2}"),
        "--hf-token=${API_KEY}",
    ]


def test_a_key_file_named_relative_to_the_script_is_the_file_the_written_profile_reads(
    run_cli: RunCli,
) -> None:
    """`$(cat key)` reads ./key where the script runs, as a sourced file is read; a profile
    written into another folder names that same file from its own folder."""
    Path("key").write_text("sk-relative-0123456789\n")
    Path("start.sh").write_text(
        '/opt/ml/bin/python -m sglang.launch_server --model /m --api-key "$(cat key)"\n'
    )
    Path("out").mkdir()
    result = run_cli("convert", "start.sh", "--name", "rel", "-o", "out/rel.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("out/rel.toml").read_text())
    assert profile["secret_files"] == {"KEY": "../key"}


def test_a_key_file_and_a_sourced_file_both_fill_the_args(run_cli: RunCli) -> None:
    """A secret file's variable beside a sourced env file's, in the same command line: the
    one in secret_files, the other's file in env_files."""
    Path("site.env").write_text("MODEL_ALIAS=alias\n")
    Path("start.sh").write_text(
        ". ./site.env\nT=$(cat /run/secrets/tenant)\n"
        '/opt/ml/bin/python -m sglang.launch_server --model /m --served-model-name "$T" '
        '"$MODEL_ALIAS"\n'
    )
    result = run_cli("convert", "start.sh", "--name", "both", "-o", "both.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("both.toml").read_text())
    assert profile["secret_files"] == {"T_SECRET": "/run/secrets/tenant"}
    assert profile["env_files"] == ["site.env"]
    assert profile["server"]["args"] == ["--served-model-name", "${T_SECRET}", "${MODEL_ALIAS}"]


def test_convert_of_16mb_says_what_nccl_read_and_what_was_probably_meant(run_cli: RunCli) -> None:
    line = Path("line.sh")
    line.write_text("NCCL_BUFFSIZE=16MB /opt/ml/bin/python -m sglang.launch_server --model /m\n")
    result = run_cli("convert", "-", "--name", "mb", "-o", "mb.toml", stdin_path=line)
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("mb.toml").read_text())["nccl"] == {"BUFFSIZE": 16}
    assert result.stderr == (
        "nccl-launch: warning: line 1: NCCL_BUFFSIZE=16MB: NCCL reads 16; stored 16 (MB "
        "is ambiguous: for 16MiB = 16777216 bytes (what NCCL users almost always mean) write "
        '"16MiB" or 16777216; for 16000000 bytes write 16000000)\n'
    )


def test_slurm_script_leaves_placement_to_run_time(
    nccl_launch: RunCli, server_env: dict[str, str], tmp_path: Path
) -> None:
    result = nccl_launch("convert", str(SCRIPTS / "slurm_node.sh"), "--name", "ds", env=server_env)
    assert result.returncode == 0, result.stderr
    assert "--node-rank comes from the caller's environment; left to run time" in result.stderr
    server = tomllib.loads(Path("profiles/ds.toml").read_text())["server"]
    assert (server["tp_size"], server["nnodes"]) == (16, 2)
    assert "node_rank" not in server
    assert "dist_init_addr" not in server

    node = {"SLURM_NODEID": "1", "HEAD_NODE": "10.0.0.1"}
    original = run_original(SCRIPTS / "slurm_node.sh", {**server_env, **node}, tmp_path / "a.json")
    out = tmp_path / "b.json"
    launched = nccl_launch("run", "--dist-init-addr", "10.0.0.1:5000", "ds",
                           env={**server_env, **node, "STANDIN_RECORD": str(out)})  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert canonical_flags(read_record(out)["argv"]) == canonical_flags(original["argv"])


BAD = "nccl-launch: bad.sh: "  # a script's error names it


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("export NCCL_PROTOCOL=LL\npython3 -m sglang.launch_server --model-path /m\n",
         "bad.sh: line 1: NCCL_PROTOCOL is not a variable NCCL documents or reads (NCCL ignores "
         "it); did you mean NCCL_PROTO?"),
        ("export NCCL_NTHREADS=0x201\npython3 -m sglang.launch_server --model-path /m\n",
         "bad.sh: line 1: NCCL_NTHREADS: '0x201' (NCCL reads 513): 513 is not valid; valid: a "
         "decimal integer from 64 to 512 and a multiple of 32"),
        ("export NCCL_P2P_LEVEL=2147483648\npython3 -m sglang.launch_server --model-path /m\n",
         "bad.sh: line 1: NCCL_P2P_LEVEL: '2147483648': NCCL reads it as the legacy level "
         "-2147483648 (strtol truncated to an int), outside its table: undefined behaviour"),
        ("HOST=$(hostname)\npython3 -m sglang.launch_server --model-path /m\n",
         BAD + "line 1: command substitution is not supported"),
        ("echo hello\n", BAD + "no server command found (`python -m sglang.launch_server`, "
         "`sglang serve`, `python -m vllm.entrypoints.cli.main serve`, "
         "`python -m vllm.entrypoints.openai.api_server`, `vllm serve`)"),
        ("python3 -m sglang.launch_server --model-path $MODEL_DIR\n",
         BAD + "line 1: $MODEL_DIR is not set in the script or this environment"),
        ("cd /srv\nNCCL_ALGO=$NOPE " + SERVE,
         BAD + "line 2: $NOPE is not set in the script or this environment"),
        ("env NCCL_ALGO=$NOPE " + SERVE,
         BAD + "line 1: $NOPE is not set in the script or this environment"),
        ("python3 -m sglang.launch_server --model-path /m --speculative-num-steps 2\n",
         "bad.sh: server.speculative.algorithm: required key is missing"),
        ('python3 -m sglang.launch_server --model-path "/m\n',
         BAD + 'line 1: unterminated "'),
        ("python3 -m sglang.launch_server --model-path /m\npython3 -m sglang.launch_server\n",
         BAD + "line 2: a second server command (the first: line 1)"),
        ("source <(echo export NCCL_ALGO=Ring)\n" + SERVE, BAD + "line 1: process "
         "substitution <(...) is not followed; put what it gives in the script"),
        ("set -e\nif [ -d /opt/ib ]; then\n  export NCCL_IB_DISABLE=0\nfi\n" + SERVE,
         BAD + "line 2: `if` is not followed; convert the branch that runs, or write the "
         "profile by hand\n"),
        ("for i in 1 2; do\n  echo $i\ndone\n" + SERVE, BAD + "line 1: `for` is not "
         "followed"),
        ("while true; do sleep 1; done\n" + SERVE, BAD + "line 1: `while` is not followed"),
        ('case "$1" in\n  *) ;;\nesac\n' + SERVE, BAD + "line 1: `case` is not followed"),
        ("(\n  cd /srv && " + SERVE + ")\n", BAD + "line 1: a subshell `( ... )` is not "
         "followed"),
        ("cd /srv && (\n  export NCCL_PROTO=LL\n)\n" + SERVE, BAD + "line 1: a subshell "
         "`( ... )` is not followed"),
        ("true || if true; then :; fi\n" + SERVE, BAD + "line 1: `if` is not followed"),
        ("tune() {\n  export NCCL_PROTO=LL\n}\n\ntune\n" + SERVE,
         BAD + "line 5: `tune` calls the function defined on line 1, which is not "
         "followed; put what it does in the script, or write the profile by hand\n"),
        ('[ -n "${IB:-}" ] && export NCCL_IB_HCA=mlx5_0\n' + SERVE,
         BAD + "line 1: whether this runs depends on how the command before `&&` ends; "
         "convert the branch that runs, or write the profile by hand\n"),
        ("export NCCL_NTHREADS=$((2 ** 9))\n" + SERVE,
         BAD + "line 1: $((2 ** 9)): only + - * / % ( ), decimal numbers and variables "
         "are evaluated; write the value\n"),
        ("export NCCL_NTHREADS=$((512 / 0))\n" + SERVE,
         BAD + "line 1: $((512 / 0)): division by 0\n"),
        ("cd /srv\n" + SERVE.replace("/m", "/m\x00x"), BAD + "line 2: a NUL byte; a start "
         "script is text\n"),
        # An Arabic-Indic 3: str.isdigit() and int() take it, SGLang's argparse does not.
        (SERVE.replace("\n", " --tp-size ٣\n"), BAD + "line 1: --tp-size '٣' is not an integer\n"),
        ('NAME="my model"\npython3 -m sglang.launch_server --served-model-name $NAME\n',
         BAD + "line 2: $NAME holds blanks and is not quoted, so bash splits it into "
         'several arguments; quote it ("$NAME") or write the words out\n'),
    ],
)  # fmt: skip
def test_convert_refuses_what_it_cannot_reproduce(
    script: str, message: str, run_cli: RunCli
) -> None:
    Path("bad.sh").write_text(script)
    result = run_cli("convert", "bad.sh")
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert not Path("profiles/bad.toml").exists()


def test_convert_never_overwrites_without_force(
    run_cli: RunCli, server_env: dict[str, str]
) -> None:
    target = Path("profiles/start_kimi.toml")
    target.write_text("# hand-edited\n")
    result = run_cli("convert", str(SCRIPTS / "start_kimi.sh"), env=server_env)
    assert result.returncode == 2
    assert result.stderr.endswith("profiles/start_kimi.toml exists; pass --force to replace it\n")
    assert target.read_text() == "# hand-edited\n"
    assert list(Path("profiles").iterdir()) == [target]  # no temporary file left behind
    forced = run_cli("convert", "--force", str(SCRIPTS / "start_kimi.sh"), env=server_env)
    assert forced.returncode == 0
    assert tomllib.loads(target.read_text())["name"] == "start_kimi"


def test_convert_keeps_secrets_in_an_env_file_that_run_reads_back(
    run_cli: RunCli, nccl_launch: RunCli, server_env: dict[str, str], tmp_path: Path
) -> None:
    secret = "hf_" + "script"  # an HF token as a script exports it
    script = tmp_path / "start.sh"
    script.write_text(
        f"export HF_TOKEN={secret} NCCL_PROTO=LL\n"
        "python3 -m sglang.launch_server --model-path /models/m --tp 2\n"
    )
    options = ["-o", "out/kimi.toml", "--secrets-file", "secrets/kimi.env"]
    result = run_cli("convert", str(script), *options, env=server_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "wrote secrets HF_TOKEN to secrets/kimi.env (0600); the profile names it in env_files"
    )
    text = Path("out/kimi.toml").read_text()
    assert tomllib.loads(text)["env_files"] == ["../secrets/kimi.env"]
    assert secret not in text + result.stdout + result.stderr
    assert Path("secrets/kimi.env").stat().st_mode & 0o777 == 0o600
    out = tmp_path / "child.json"
    launched = nccl_launch("run", "out/kimi.toml", env={**server_env, "STANDIN_RECORD": str(out)})
    assert launched.returncode == 0, launched.stderr
    assert read_record(out)["env"]["HF_TOKEN"] == secret
    Path("out/kimi.toml").unlink()  # the env file is still there: nothing is written
    again = run_cli("convert", str(script), *options, env=server_env)
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == "nccl-launch: secrets/kimi.env exists; pass --force to replace it\n"
    assert not Path("out/kimi.toml").exists()


@pytest.mark.parametrize(
    ("secrets", "force", "what"),
    [
        ("out/p.toml", False, "the profile out/p.toml"),
        ("out/p.toml", True, "the profile out/p.toml"),
        ("out/link.env", True, "the profile out/p.toml"),  # a symlink to the profile
        ("out/hard.env", True, "the profile out/p.toml"),  # a hard link to it
        ("start.sh", True, "the script read, start.sh"),
        ("out/script.env", True, "the script read, start.sh"),  # a symlink to the script
    ],
)
def test_convert_refuses_a_secrets_file_that_is_the_profile_or_the_script(
    secrets: str, force: bool, what: str, run_cli: RunCli, server_env: dict[str, str]
) -> None:
    Path("start.sh").write_text(
        "export HF_TOKEN=hf_9z\npython3 -m sglang.launch_server --model-path /m\n"
    )
    Path("out").mkdir()
    if force:
        Path("out/p.toml").write_text("# hand-edited\n")
        os.link("out/p.toml", "out/hard.env")
    Path("out/link.env").symlink_to("p.toml")
    Path("out/script.env").symlink_to("../start.sh")
    before = {path: path.read_bytes() for path in Path().rglob("*") if path.is_file()}
    options = ["-o", "out/p.toml", "--secrets-file", secrets, *(["--force"] if force else [])]
    result = run_cli("convert", "start.sh", *options, env=server_env)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        f"nccl-launch: secrets file {secrets} is {what}; name another with --secrets-file\n"
    )
    assert {path: path.read_bytes() for path in Path().rglob("*") if path.is_file()} == before


RunningServer = tuple[subprocess.Popen[bytes], Record]


@pytest.fixture
def running_server(tmp_path: Path) -> Iterator[RunningServer]:
    """The stand-in started the old way: NCCL values exported, flags in their short spellings."""
    out = tmp_path / "server.json"
    env = {
        **os.environ, "PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out), "STANDIN_WAIT": "1",
        "NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "16777216",
        "CUDA_VISIBLE_DEVICES": "0,1", "UNRELATED_SECRET": "x",
    }  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model", "/models/m", "--tp", "2",
            "--speculative-algorithm", "NGRAM", "--trust-remote-code"]  # fmt: skip
    process = subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        yield process, wait_for_record(out, process)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)


def test_capture_writes_the_running_servers_profile_and_it_reproduces(
    running_server: RunningServer,
    nccl_launch: RunCli,
    tmp_path: Path,
) -> None:
    process, original = running_server
    result = nccl_launch("capture", "--pid", str(process.pid), "--name", "live")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("profiles/live.toml").read_text())
    assert profile["nccl"] == {"PROTO": "LL", "ALGO": "Ring", "BUFFSIZE": "16MiB"}
    assert profile["env"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert profile["server"]["python"] == sys.executable
    assert profile["server"]["tp_size"] == 2
    assert profile["server"]["speculative"] == {"algorithm": "NGRAM"}
    assert profile["server"]["cwd"] == str(tmp_path)
    assert profile["provenance"]["source"] == f"pid {process.pid}"
    text = Path("profiles/live.toml").read_text().splitlines()
    assert f'BUFFSIZE = "16MiB"  # pid {process.pid}' in text
    assert f'CUDA_VISIBLE_DEVICES = "0,1"  # pid {process.pid}' in text

    out = tmp_path / "again.json"
    env = {"PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out)}
    launched = nccl_launch("run", "live", env=env)
    assert launched.returncode == 0, launched.stderr
    again = read_record(out)
    for key in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_BUFFSIZE", "CUDA_VISIBLE_DEVICES"):
        assert again["env"][key] == original["env"][key]
    assert canonical_flags(again["argv"]) == canonical_flags(original["argv"])


def test_capture_names_what_it_left_out_never_the_values(run_cli: RunCli, tmp_path: Path) -> None:
    """Every variable neither NCCL_* nor under a captured prefix, by name only, on one line;
    nccl-launch's own markers are not listed (run sets them again)."""
    out = tmp_path / "server.json"
    env = {
        "PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out), "STANDIN_WAIT": "1",
        "LC_ALL": "C.UTF-8", "NCCL_PROTO": "LL", "HF_HOME": "/hf", "API_TOKEN": "hunter2",
        "NCCL_LAUNCH_PROFILE": "old@1", "ODD\udcff": "x",
    }  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model", "/m"]
    result = while_running(
        argv,
        env,
        tmp_path,
        out,
        lambda pid: run_cli("capture", "--pid", str(pid), "-o", "live.toml"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "nccl-launch: warning: left out 6 variables of the process (neither NCCL_* nor a "
        "captured prefix such as CUDA_ or HF_; add to [env] what the server needs): API_TOKEN, "
        "LC_ALL, ODD\\udcff, PYTHONPATH, STANDIN_RECORD, STANDIN_WAIT"
    )
    assert "hunter2" not in result.stderr + Path("live.toml").read_text()
    assert set(tomllib.loads(Path("live.toml").read_text())["env"]) == {"HF_HOME"}
    # Its marker names a profile that is gone: what it filled from secret files is unknown.
    assert "its profile filled from secret files cannot be told" in result.stderr
    assert Path("live.toml").stat().st_mode & 0o777 == 0o600


def test_capture_of_a_missing_process_is_a_target_error(run_cli: RunCli) -> None:
    result = run_cli("capture", "--pid", "4194303")  # the highest PID Linux gives: unused here
    assert result.returncode == 3
    assert result.stderr == "nccl-launch: no process with pid 4194303\n"


def test_convert_follows_unset_and_says_what_it_did_not_follow(run_cli: RunCli) -> None:
    Path("start.sh").write_text(
        "umask 022\n"
        "export NCCL_DEBUG=INFO NCCL_PROTO=LL\n"
        "unset NCCL_DEBUG\n"
        "ulimit -n 65536\n"
        "numactl --interleave=all true\n"
        "/opt/ml/bin/python3 -m sglang.launch_server --model-path /m\n"
    )
    result = run_cli("convert", "start.sh")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["nccl-launch: warning: line 5: ignored `numactl`"]
    assert tomllib.loads(Path("profiles/start.toml").read_text())["nccl"] == {"PROTO": "LL"}


def test_a_process_that_is_no_sglang_server_is_captured_with_its_key_masked(
    run_cli: RunCli,
) -> None:
    """The note that says how to run it is printed and kept in the profile's provenance."""
    with sleeper({b"NCCL_PROTO": b"LL"}, b"--api-key", b"sk-live-77") as pid:
        result = run_cli("capture", "--pid", str(pid), "-o", "live.toml")
    assert result.returncode == 0, result.stderr
    written = Path("live.toml").read_text()
    assert "sk-live-77" not in result.stdout + result.stderr + written
    assert "--api-key ***" in written


@pytest.mark.parametrize(
    ("name", "said"),
    [("x.toml", "--name: 'x.toml': give the name without .toml, as in 'x'"),
     ("a" * 201, "--name: 201 characters; a profile name has at most 200")],
    ids=["toml", "long"],
)  # fmt: skip
def test_convert_and_capture_hold_a_name_to_news_rule(
    name: str, said: str, run_cli: RunCli
) -> None:
    """`x.toml` would be written as profiles/x.toml.toml, which `show x.toml` cannot find."""
    Path("start.sh").write_text(
        "export NCCL_PROTO=LL\npython3 -m sglang.launch_server --model-path /m\n"
    )
    with sleeper({b"NCCL_PROTO": b"LL"}) as pid:
        results = [run_cli("convert", "start.sh", "--name", name),
                   run_cli("capture", "--pid", str(pid), "--name", name)]  # fmt: skip
    for result in results:
        assert (result.returncode, result.stderr) == (2, f"nccl-launch: {said}\n")
    new = run_cli("new", name)  # the rule's own words there: its argument is NAME
    assert (new.returncode, new.stderr) == (2, f"nccl-launch: {said.replace('--name', 'NAME')}\n")
    assert list(Path().rglob("*.toml")) == []


def test_convert_reads_only_a_regular_script_of_at_most_1_mib(run_cli: RunCli) -> None:
    os.mkfifo("fifo.sh")  # opening it for reading would wait for a writer forever
    Path("big.sh").write_text(" " * (2 << 20) + "\n")
    refused = {
        "fifo.sh": "nccl-launch: script fifo.sh: a FIFO; only regular files are read\n",
        "/dev/zero": "nccl-launch: script /dev/zero: a character device; only regular files are "
        "read\n",
        "big.sh": "nccl-launch: script big.sh: larger than 1048576 bytes; this is not a script\n",
    }
    for path, message in refused.items():
        result = run_cli("convert", path, "--name", "x")
        assert (result.returncode, result.stderr) == (2, message), path
    piped = run_cli("convert", "-", "--name", "x", stdin_path=Path("big.sh"))
    assert piped.returncode == 2
    assert piped.stderr == ("nccl-launch: stdin: larger than 1048576 bytes; this is not a script\n")
    assert list(Path("profiles").iterdir()) == []


@pytest.mark.parametrize("pid", ["-3", "0", "4194304", "99999999999999999999"])
def test_capture_of_a_pid_that_cannot_be_one_is_a_usage_error(pid: str, run_cli: RunCli) -> None:
    result = run_cli("capture", "--pid", pid)
    assert result.returncode == 2
    assert f"Invalid value for '--pid': {pid} is not in the range 1<=x<=4194303." in result.stderr
    assert "internal error" not in result.stderr


@pytest.mark.parametrize(
    ("env", "flags", "options", "mode", "secrets"),
    [
        ({"HF_TOKEN": "hf_x", "NCCL_PROTO": "LL"}, [], [], 0o644, {"HF_TOKEN": "hf_x"}),
        ({"SGLANG_DB_URL": "postgres://u:pw@db/x"}, [], [], 0o644,
         {"SGLANG_DB_URL": "postgres://u:pw@db/x"}),
        ({"HF_TOKEN": "hf_x", "HF_HOME": "/c"}, [], ["--secrets-in-profile"], 0o600, {}),
        ({"NCCL_PROTO": "LL"}, ["--api-key", "sk-x"], [], 0o644, {"API_KEY": "sk-x"}),
        ({"NCCL_PROTO": "LL"}, ["--api-key", "sk-x"], ["--secrets-in-profile"], 0o600, {}),
        ({"HF_TOKEN": "hf_x"}, ["--admin-api=sk-x", "--api-key", "sk-y", "--api-key=sk-z"], [],
         0o644, {"HF_TOKEN": "hf_x", "ADMIN_API_KEY": "sk-x", "API_KEY": "sk-y",
                 "API_KEY_2": "sk-z"}),
        ({"NCCL_PROTO": "LL", "TOKENIZERS_PARALLELISM": "false"}, ["--enable-metrics"], [], 0o644,
         {}),
    ],
)  # fmt: skip
def test_capture_keeps_secrets_in_an_env_file_readable_by_its_owner_only(
    env: dict[str, str],
    flags: list[str],
    options: list[str],
    mode: int,
    secrets: dict[str, str],
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    process = start_standin(tmp_path, env, flags)
    try:
        old = os.umask(0o022)  # the console script inherits it
        try:
            result = run_cli("capture", "--pid", str(process.pid), "--name", "live", *options)
        finally:
            os.umask(old)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert result.returncode == 0, result.stderr
    written, env_file = Path("profiles/live.toml"), Path("profiles/live.env")
    assert written.stat().st_mode & 0o777 == mode
    profile = tomllib.loads(written.read_text())
    assert profile.get("env", {}) == {
        key: value
        for key, value in env.items()
        if not key.startswith("NCCL_") and key not in secrets
    }
    assert profile.get("env_files") == (["live.env"] if secrets else None)
    args = profile["server"].get("args", [])
    assert [references.fill(word, secrets) for word in args] == flags
    printed = written.read_text() + result.stdout + result.stderr
    assert not any(value in printed for value in secrets.values())
    if secrets:
        assert env_file.stat().st_mode & 0o777 == 0o600
        assert dotenv_values(env_file) == secrets
        assert result.stdout.startswith(
            f"wrote secrets {', '.join(secrets)} to {env_file} (0600); the profile names it in "
            "env_files\n"
        )
    else:
        assert not env_file.exists()


def test_convert_takes_only_the_code_that_runs(run_cli: RunCli, server_env: dict[str, str]) -> None:
    """Here-docs are data, an uncalled function's body never runs, `cd ... || exit 1` does not
    exit, arithmetic is computed, nothing after `exec` runs; quoted words stay one word; the
    bare `python3` is left to the PATH of whoever starts the server, and said so."""
    result = run_cli("convert", str(SCRIPTS / "guarded_start.sh"), env=server_env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "nccl-launch: warning: line 19: `python3` is looked up on the PATH of whoever starts "
        "the server (systemd's is not this shell's); written as is: put the interpreter's "
        "absolute path in [server] python\n"
    )
    profile = tomllib.loads(Path("profiles/guarded_start.toml").read_text())
    assert profile["nccl"] == {"PROTO": "LL", "ALGO": "Ring", "MAX_NCHANNELS": 16}
    server = profile["server"]
    prefix = f"pycache_prefix={server_env['SERVER_DIR']}/py cache"
    assert shlex.split(server["entrypoint"]) == ["-X", prefix, "-m", "sglang.launch_server"]
    assert (server["model_path"], server["tp_size"]) == ("/models/m", 2)
    assert server["args"] == ["--served-model-name", "my model"]


def test_convert_stops_at_exit_without_reading_further(run_cli: RunCli) -> None:
    Path("start.sh").write_text(
        "export NCCL_PROTO=LL\n"
        "python3 -m sglang.launch_server --model-path /m &\n"
        "wait\n"
        "exit 0\n"
        "export NCCL_PROTO=Simple\n"
        'echo "unterminated\n'
    )
    result = run_cli("convert", "start.sh")
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("profiles/start.toml").read_text())["nccl"] == {"PROTO": "LL"}


def test_convert_takes_time_linear_in_the_script(run_cli: RunCli) -> None:
    """A long word and long runs of blanks, nearly 1 MiB in all (the old reader took minutes:
    it grew each word one character at a time)."""
    name, blanks = "m" * 300_000, " " * 300_000
    Path("big.sh").write_text(
        f"{blanks}python3 -m sglang.launch_server --model-path /m{blanks}--served-model-name"
        f" {name}\n"
    )
    result = run_cli("convert", "big.sh")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("profiles/big.toml").read_text())
    assert profile["server"]["args"] == ["--served-model-name", name]


@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({"HF_HOME": "/x\udcff"}, [], "$HF_HOME"),
        ({}, ["--served-model-name", "a\udcffb"], "argument 6 of its command line"),
    ],
)
def test_capture_refuses_what_is_not_utf8_text(
    env: dict[str, str], flags: list[str], message: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A byte that is not UTF-8 (os.fsencode makes `\\udcff` the byte 0xff) has no TOML form."""
    process = start_standin(tmp_path, env, flags)
    try:
        result = run_cli("capture", "--pid", str(process.pid), "--name", "live")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert result.returncode == 3, result.stderr
    assert result.stderr == (
        f"nccl-launch: process {process.pid}: {message} is not UTF-8 text, which a profile "
        "cannot hold; write the profile by hand\n"
    )
    assert list(Path("profiles").iterdir()) == []


def test_capture_stores_what_nccl_read_with_a_note(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "server.json"
    env = {
        **os.environ, "PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out), "STANDIN_WAIT": "1",
        "NCCL_BUFFSIZE": "010", "NCCL_NTHREADS": "0x200", "NCCL_P2P_LEVEL": "4294967299",
    }  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model", "/models/m"]
    process = subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        wait_for_record(out, process)
        result = run_cli("capture", "--pid", str(process.pid), "--name", "live")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("profiles/live.toml").read_text())
    assert profile["nccl"] == {"BUFFSIZE": 8, "NTHREADS": 512, "P2P_LEVEL": "PHB"}
    text = Path("profiles/live.toml").read_text().splitlines()
    assert f'BUFFSIZE = 8  # pid {process.pid}: "010" (NCCL reads 8)' in text
    for note in ["NCCL_BUFFSIZE=010: NCCL reads 8; stored 8",
                 "NCCL_NTHREADS=0x200: NCCL reads 512; stored 512",
                 "NCCL_P2P_LEVEL=4294967299: NCCL reads PHB; stored PHB"]:  # fmt: skip
        assert note in result.stderr
        assert note in profile["provenance"]["notes"]


def no_space_left(limit: int) -> None:
    """In the child: writes past `limit` bytes fail with EFBIG, as a full disk fails them."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


@pytest.mark.parametrize(
    ("output", "force", "cause"),
    [
        ("/proc/self/x.toml", True, "cannot write: No such file or directory"),
        ("adir", True, "a directory; only a regular file is written"),
        ("realfile/x.toml", True, "cannot write: realfile is not a directory"),
        ("realfile/x.toml", False, "cannot write: realfile is not a directory"),
        ("full.toml", False, "cannot write: File too large"),
    ],
)
def test_convert_and_capture_say_why_the_output_cannot_be_written(
    output: str, force: bool, cause: str, tmp_path: Path
) -> None:
    Path("adir").mkdir()
    Path("realfile").write_text("a file\n")
    Path("start.sh").write_text(f"export NCCL_PROTO=LL\n{SERVE}")
    process = start_standin(tmp_path, {"NCCL_PROTO": "LL"}, [])
    limit = 64 if output == "full.toml" else resource.RLIM_INFINITY
    try:
        for source in (["convert", "start.sh"], ["capture", "--pid", str(process.pid)]):
            argv = [console_script(), *source, "-o", output, *(["--force"] if force else [])]
            result = subprocess.run(
                argv, capture_output=True, text=True, check=False, timeout=60,
                preexec_fn=lambda: no_space_left(limit),
            )  # fmt: skip
            assert result.returncode == 2, result.stderr
            assert result.stderr == f"nccl-launch: {output}: {cause}\n"
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert Path("realfile").read_text() == "a file\n"
    assert list(Path("adir").iterdir()) == []
    assert not Path("full.toml").exists()
    assert [p.name for p in Path().iterdir() if p.name.startswith(".")] == []


def test_capture_escapes_the_names_it_quotes(run_cli: RunCli, tmp_path: Path) -> None:
    """A process's variable names are any text but `=` and NUL; a profile cannot hold one
    with a control character, and the line that says so shows it escaped."""
    forged = "NCCL_X\x1b]0;pwn\x07\nnccl-launch: wrote fake"
    process = start_standin(tmp_path, {forged: "1", "SGLANG_Y\r": "2"}, [])
    try:
        result = run_cli("capture", "--pid", str(process.pid))
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert result.returncode == 3
    assert result.stderr.startswith(
        f"nccl-launch: process {process.pid}: $NCCL_X\\x1b]0;pwn\\x07\\nnccl-launch: wrote fake: "
        "a variable's name holds a control character"
    ), result.stderr
    assert result.stderr.count("\n") == 1 and "\x1b" not in result.stderr
    assert list(Path("profiles").iterdir()) == []


def test_capture_escapes_c1_controls_in_the_profile(run_cli: RunCli, tmp_path: Path) -> None:
    """U+009B is a terminal's CSI: `cat` of the profile must not run what follows it."""
    process = start_standin(tmp_path, {"SGLANG_Y": "a\x9b2Jb"}, ["--served-model-name", "\x9b"])
    try:
        result = run_cli("capture", "--pid", str(process.pid), "--name", "live")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert result.returncode == 0, result.stderr
    text = Path("profiles/live.toml").read_text()
    assert "\x9b" not in text
    assert 'SGLANG_Y = "a\\u009b2Jb"  # pid' in text
    profile = tomllib.loads(text)
    assert profile["env"]["SGLANG_Y"] == "a\x9b2Jb"
    assert "\x9b" in profile["server"]["args"]


def test_convert_names_the_script_and_escapes_it(run_cli: RunCli) -> None:
    name = "start\x1b[2J\nok.sh"
    Path(name).write_text(f"X=$(id)\n{SERVE}")
    result = run_cli("convert", name)
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: start\\x1b[2J\\nok.sh: line 1: command substitution is not supported; "
        "only a secret read from a file in the server's command, or into a variable it uses "
        "(NAME=$(cat FILE)), is followed: $(cat FILE) or $(< FILE), which becomes the "
        "profile's secret_files\n"
    )
    Path(name).write_text(f"export NCCL_BUFFSIZE=0x400000\n/opt/ml/bin/{SERVE}")
    result = run_cli("convert", name, "-o", "out\x1b.toml")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "nccl-launch: warning: line 1: NCCL_BUFFSIZE=0x400000: NCCL reads 4194304; stored 4194304\n"
    )
    assert result.stdout.splitlines()[0].startswith("wrote out\\x1b.toml (")
    assert result.stdout.splitlines()[1] == "  nccl-launch run --dry-run $'out\\x1b.toml'"
    assert "\x1b" not in result.stdout


KEY = "sk-live-" + "1234"  # an API key as a sourced file or a script holds it


def holding(text: str, tmp_path: Path) -> list[str]:
    """The files under `tmp_path` whose bytes hold `text`."""
    return sorted(
        str(path.relative_to(tmp_path))
        for path in tmp_path.rglob("*")
        if path.is_file() and text.encode() in path.read_bytes()
    )


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
def test_a_key_from_a_sourced_file_stays_in_that_file_and_args_refer_to_it(
    absolute: bool, run_cli: RunCli, tmp_path: Path
) -> None:
    """The file is named in env_files as the script names it (a relative path from the
    profile's folder); the key is in no other byte convert writes or prints."""
    Path("conf").mkdir()
    Path("conf/secrets.env").write_text(f"API_KEY={KEY}\nMODEL_DIR=/models/kimi\n")
    sourced = tmp_path / "conf/secrets.env" if absolute else "./conf/secrets.env"
    Path("start.sh").write_text(
        f". {sourced}\nexport NCCL_PROTO=LL\n"
        'python3 -m sglang.launch_server --model-path "$MODEL_DIR" --api-key "$API_KEY" '
        "--enable-metrics\n"
    )
    result = run_cli("convert", "start.sh", "-o", "out/p.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("out/p.toml").read_text())
    assert profile["env_files"] == [str(sourced) if absolute else "../conf/secrets.env"]
    assert profile["server"]["model_path"] == "/models/kimi"
    assert profile["server"]["args"] == ["--api-key", "${API_KEY}", "--enable-metrics"]
    assert holding(KEY, tmp_path) == ["conf/secrets.env"]
    assert KEY not in result.stdout + result.stderr
    assert Path("out/p.toml").stat().st_mode & 0o077 == 0o044  # it holds no secret
    warnings = [line.removeprefix("nccl-launch: warning: ") for line in result.stderr.splitlines()]
    assert warnings[-2:] == [
        f"{str(sourced).removeprefix('./')} sets API_KEY, MODEL_DIR without export; named in "
        "env_files, it gives them to the server's env too",
        "--model-path ${MODEL_DIR}: written as its value, since only [server] args refer to an "
        "env file's variables",
    ]


def test_a_sourced_file_that_cannot_be_an_env_file_gives_its_key_to_the_secrets_file(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """An NCCL variable in it (a profile declares those in [nccl]): the key is moved as a
    literal one would be, and a note says why."""
    Path("secrets.env").write_text(f"API_KEY={KEY}\nexport NCCL_ALGO=Ring\n")
    Path("start.sh").write_text(
        '. ./secrets.env\npython3 -m sglang.launch_server --model-path /m --api-key "$API_KEY"\n'
    )
    result = run_cli("convert", "start.sh", "-o", "p.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("p.toml").read_text())
    assert profile["env_files"] == ["p.env"]
    assert profile["server"]["args"] == ["--api-key", "${API_KEY}"]
    assert dotenv_values("p.env") == {"API_KEY": KEY}
    assert holding(KEY, tmp_path) == ["p.env", "secrets.env"]
    assert KEY not in result.stdout + result.stderr
    assert result.stderr.splitlines()[1:] == [
        "nccl-launch: warning: secrets.env: not named in env_files (p.toml: env_files: env "
        "file secrets.env: NCCL_ALGO: NCCL variables belong in [nccl], validated: ALGO = "
        "'Ring'): its variables in [server] args are written as their values",
        "nccl-launch: warning: --api-key's value is kept in p.env as API_KEY: [server] args "
        "say ${API_KEY}",
    ]


def test_a_literal_key_in_the_servers_argv_moves_to_the_secrets_file(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """Under a name from its flag, numbered where the script's variables took it; the key is
    in no other byte convert writes or prints. --secrets-in-profile keeps it in args, 0600."""
    Path("start.sh").write_text(
        f"export API_KEY=other\npython3 -m sglang.launch_server --model-path /m --api-key {KEY} "
        "--admin-api=adm1n\n"
    )
    result = run_cli("convert", "start.sh", "-o", "p.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("p.toml").read_text())
    assert profile["env_files"] == ["p.env"]
    args = ["--api-key", "${API_KEY_2}", "--admin-api=${ADMIN_API_KEY}"]
    assert profile["server"]["args"] == args
    secrets = {"API_KEY": "other", "API_KEY_2": KEY, "ADMIN_API_KEY": "adm1n"}
    assert dotenv_values("p.env") == secrets
    assert Path("p.env").stat().st_mode & 0o777 == 0o600
    assert result.stdout.splitlines()[0] == (
        "wrote secrets API_KEY, API_KEY_2, ADMIN_API_KEY to p.env (0600); the profile names it "
        "in env_files"
    )
    assert holding(KEY, tmp_path) == ["p.env", "start.sh"]
    assert KEY not in result.stdout + result.stderr
    assert "--api-key's value is kept in p.env as API_KEY_2: [server] args say ${API_KEY_2}" in (
        result.stderr
    )
    kept = run_cli("convert", "start.sh", "-o", "q.toml", "--secrets-in-profile")
    assert kept.returncode == 0, kept.stderr
    assert tomllib.loads(Path("q.toml").read_text())["server"]["args"] == [
        "--api-key", KEY, "--admin-api=adm1n"
    ]  # fmt: skip
    assert Path("q.toml").stat().st_mode & 0o777 == 0o600
    Path("url.sh").write_text("python3 -m sglang.launch_server --model-path https://u:pw@hub/m\n")
    assert run_cli("convert", "url.sh", "-o", "url.toml").returncode == 0
    assert Path("url.toml").stat().st_mode & 0o777 == 0o600  # a password in a field


def test_the_secrets_file_is_never_a_sourced_file_the_profile_names(run_cli: RunCli) -> None:
    """Writing it would replace the key the profile refers to, even with --force."""
    Path("secrets.env").write_text(f"API_KEY={KEY}\n")
    Path("start.sh").write_text(
        ". ./secrets.env\npython3 -m sglang.launch_server --model-path /m --api-key "
        '"$API_KEY" --admin-api-key adm1n\n'
    )
    result = run_cli("convert", "start.sh", "--secrets-file", "secrets.env", "--force")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "nccl-launch: secrets file secrets.env is a file the script sources, secrets.env; name "
        "another with --secrets-file\n"
    )
    assert Path("secrets.env").read_text() == f"API_KEY={KEY}\n"


def test_run_of_a_converted_profile_gives_the_server_the_keys_bash_gave_it(
    run_cli: RunCli, nccl_launch: RunCli, server_env: dict[str, str], tmp_path: Path
) -> None:
    """Through the console scripts: `run --dry-run` shows the references, never a key, and
    `run` fills them, so the stand-in gets the argv bash gave it from the script."""
    Path("secrets.env").write_text(f"API_KEY={KEY}\n")
    script = tmp_path / "start.sh"
    script.write_text(
        '. ./secrets.env\ncd "$SERVER_DIR"\nexec python3 -m sglang.launch_server --model-path /m '
        "--api-key \"$API_KEY\" --admin-api=adm1n --served-model-name 'kimi ${v2} $$'\n"
    )
    original = run_original(script, server_env, tmp_path / "original.json")
    converted = run_cli("convert", str(script), "--name", "api", env=server_env)
    assert converted.returncode == 0, converted.stderr
    dry = nccl_launch("run", "--dry-run", "api", env=server_env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[-1].endswith(
        "--api-key '${API_KEY}' '--admin-api=${ADMIN_API_KEY}' --served-model-name "
        "'kimi $${v2} $$$'"
    )
    assert KEY not in dry.stdout + dry.stderr and "adm1n" not in dry.stdout
    out = tmp_path / "converted.json"
    launched = nccl_launch("run", "api", env={**server_env, "STANDIN_RECORD": str(out)})
    assert launched.returncode == 0, launched.stderr
    given, meant = canonical_flags(read_record(out)["argv"]), canonical_flags(original["argv"])
    assert given - meant == Counter({("--tp-size", "1"): 1})  # run writes the default out
    assert not meant - given
    assert ("--api-key", KEY) in given and ("--served-model-name", "kimi ${v2} $$") in given


def test_a_key_under_a_name_masking_shows_is_kept_under_one_it_masks(run_cli: RunCli) -> None:
    """A reference that fills a credential must be named as a secret (validate refuses it
    otherwise): a sourced MYVAL is written as its value, which then moves as a literal key
    does; --watermark-config's value goes under WATERMARK_CONFIG_SECRET."""
    Path("s.env").write_text(f"MYVAL={KEY}\n")
    Path("start.sh").write_text(
        '. ./s.env\npython3 -m sglang.launch_server --model-path /m --api-key "$MYVAL" '
        "--watermark-config '{\"k\": 1}'\n"
    )
    result = run_cli("convert", "start.sh", "-o", "p.toml")
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("p.toml").read_text())
    assert profile["env_files"] == ["p.env"]
    assert profile["server"]["args"] == [
        "--api-key", "${API_KEY}", "--watermark-config", "${WATERMARK_CONFIG_SECRET}"
    ]  # fmt: skip
    assert dotenv_values("p.env") == {"API_KEY": KEY, "WATERMARK_CONFIG_SECRET": '{"k": 1}'}
    assert (
        "nccl-launch: warning: --api-key ${MYVAL}: written as its value, since masking shows a "
        "variable named MYVAL (a name ending in KEY, TOKEN, SECRET or PASSWORD is masked)"
    ) in result.stderr.splitlines()


def test_capture_of_a_vllm_server_writes_a_vllm_profile_whose_run_execs_its_command_line(
    nccl_launch: RunCli, run_cli: RunCli, tmp_path: Path
) -> None:
    """A `vllm serve` process as /proc shows it (the interpreter its `#!` line names, then the
    script): its table, its VLLM_* variables, its key in the secrets file; run of the profile
    execs a command line vLLM reads as the process's."""
    out = tmp_path / "vllm.json"
    path = vllm_standins(tmp_path, out)
    script = str(tmp_path / "bin" / "vllm")
    argv = [script, "serve", "/models/m", "-tp", "2", "--master-addr", "10.0.0.1", "--master-port",
            "29500", "-sc", EAGLE, "--api-key", "sk-live-1234", "--enforce-eager"]  # fmt: skip
    env = {"PATH": path, "STANDIN_WAIT": "1", "NCCL_PROTO": "LL", "VLLM_USE_V1": "1"}
    process = subprocess.Popen(argv, env=env, cwd=tmp_path)
    try:
        original = wait_for_record(out, process)
        result = run_cli("capture", "--pid", str(process.pid), "--name", "live")
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 0, result.stderr
    text = Path("profiles/live.toml").read_text()
    assert "sk-live-1234" not in text + result.stdout + result.stderr
    profile = tomllib.loads(text)
    assert (profile["nccl"], profile["env"]) == ({"PROTO": "LL"}, {"VLLM_USE_V1": "1"})
    assert profile["server"] == {
        "kind": "vllm", "python": script, "entrypoint": "serve", "model_path": "/models/m",
        "tp_size": 2, "dist_init_addr": "10.0.0.1:29500", "speculative": json.loads(EAGLE),
        "args": ["--api-key", "${API_KEY}", "--enforce-eager"], "cwd": str(tmp_path),
    }  # fmt: skip
    out.unlink()
    launched = nccl_launch("run", "live")
    assert launched.returncode == 0, launched.stderr
    again = read_record(out)
    assert vllm_reads(again["argv"]) == vllm_reads(original["argv"])
    assert again["argv"][0] == original["argv"][0] == script
    assert again["env"]["VLLM_USE_V1"] == "1"


@pytest.mark.parametrize(
    ("line", "server", "note"),
    [
        ("vllm serve /m --master-port 29500", {"args": ["--master-port", "29500"]}, None),
        ("vllm serve /m -sc None", {"args": ["-sc", "None"]},
         "-sc: kept in [server] args as written: 'None' means none"),
        ("vllm serve /m -sc '{\"num_speculative_tokens\": 2}'",
         {"args": ["-sc", '{"num_speculative_tokens": 2}']},
         "-sc: kept in [server] args as written: [server.speculative] would refuse it (method: "
         "Field required)"),
        ("python3 -m vllm.entrypoints.openai.api_server /x --model /m", {"args": ["/x"]}, None),
        ("vllm serve /m --master-addr ::1 --master-port 5000", {"dist_init_addr": "[::1]:5000"},
         None),
    ],
)  # fmt: skip
def test_convert_keeps_in_args_what_a_vllm_table_cannot_hold_and_says_why(
    line: str, server: dict[str, object], note: str | None, run_cli: RunCli
) -> None:
    """A lone --master-addr or --master-port, a speculative config the table would refuse (its
    JSON must still be an object), a word the deprecated module reads as no model: each
    stays where it was, so the profile means what the line does."""
    Path("start.sh").write_text(line + "\n")
    result = run_cli("convert", "start.sh", "-o", "out.toml")
    assert result.returncode == 0, result.stderr
    table = tomllib.loads(Path("out.toml").read_text())["server"]
    assert {key: table[key] for key in server} == server
    assert "speculative" not in table
    warnings = [line for line in result.stderr.splitlines() if "looked up on the PATH" not in line]
    assert warnings == ([f"nccl-launch: warning: {note}"] if note else [])


def test_the_kind_says_why_a_flag_stays_in_args_as_a_finding_of_that_flag() -> None:
    _, (note,) = server_table(["/usr/bin/vllm", "serve", "/m", "-sc", "None"])
    assert (note.code, note.where, note.severity) == ("kept-in-args", "-sc", "warning")
    assert note.message == "kept in [server] args as written: 'None' means none"
