"""`run` through the installed console script: real exec, real child processes, real env."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, STANDIN_SERVER, read_record, wait_for_record

TUNED = """
schema = 1
name = "tuned"
version = 2
extends = "pcie-base"

[nccl]
PROTO = "LL"
ALGO = "Ring"
MAX_NCHANNELS = 16
BUFFSIZE = "16MiB"
NTHREADS = 512

[env]
HF_HUB_OFFLINE = "1"
"""

BASE = """
schema = 1
name = "pcie-base"
version = 1

[nccl]
P2P_LEVEL = "SYS"
"""


@pytest.fixture
def tuned(write_profile: WriteProfile) -> Path:
    write_profile("pcie-base", BASE)
    return write_profile("tuned", TUNED)


# Any command: the stand-in run as a script records what it received to $STANDIN_RECORD.
CHILD_ARGS = ["--", sys.executable, str(STANDIN_SERVER), "--flag", "value with space"]


def test_run_execs_the_command_in_place_with_the_profile_env(tuned: Path, tmp_path: Path) -> None:
    out = tmp_path / "child.json"
    env = {"STANDIN_RECORD": str(out), "STANDIN_WAIT": "1", "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen(
        [console_script(), "run", "tuned", *CHILD_ARGS],
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
    )
    try:
        child = wait_for_record(out, process)
        assert child["pid"] == process.pid  # exec: no wrapper process in between
        assert child["argv"] == [str(STANDIN_SERVER), "--flag", "value with space"]
        received = child["env"]
        assert received["NCCL_PROTO"] == "LL"
        assert received["NCCL_ALGO"] == "Ring"
        assert received["NCCL_P2P_LEVEL"] == "SYS"  # from the profile it extends
        assert received["NCCL_MAX_NCHANNELS"] == "16"
        assert received["NCCL_BUFFSIZE"] == "16777216"
        assert received["NCCL_NTHREADS"] == "512"
        assert received["HF_HUB_OFFLINE"] == "1"
        assert received["NCCL_LAUNCH_PROFILE"] == "tuned@2"
        assert received["NCCL_LAUNCH_DIGEST"].startswith("sha256:")
        assert received["SPT_NOENV"] == "1"
        assert received["PATH"] == "/usr/bin:/bin"
        process.send_signal(signal.SIGTERM)  # the signal reaches the server itself
        assert process.wait(timeout=10) == 7
    finally:
        process.kill()
        process.communicate()


def test_exit_code_belongs_to_the_command(tuned: Path, nccl_launch: RunCli) -> None:
    result = nccl_launch("run", "tuned", "--", sys.executable, "-c", "raise SystemExit(42)")
    assert result.returncode == 42


def test_drift_refuses_and_the_command_never_runs(
    tuned: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    out = tmp_path / "child.json"
    env = {"STANDIN_RECORD": str(out), "NCCL_PROTO": "Simple", "NCCL_PROTOCOL": "LL"}
    result = run_cli("run", "tuned", *CHILD_ARGS, env=env)
    assert result.returncode == 1
    assert not out.exists()
    lines = result.stderr.splitlines()
    assert lines[0].startswith("refusing to start: environment drifts from tuned@2 (sha256:")
    assert lines[1].split()[:5] == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"']
    assert "(calling environment)" in lines[1]
    assert lines[2].split()[:3] == ["+", "NCCL_PROTOCOL", '"LL"']
    assert "did you mean NCCL_PROTO?" in lines[2]
    assert lines[3:] == [
        "2 drift (1 changed, 1 undeclared), 0 match",
        "fix ~ (changed): put the value the server should get in the profile, unset it in the "
        "calling environment (the shell, the unit's Environment=), or start with the profile's "
        'value anyway: [policy] conflict = "warn"',
        "fix + (unknown to NCCL): NCCL reads no such name, so it is most likely misspelled "
        "(see its did-you-mean): unset it in the calling environment (the shell, the unit's "
        "Environment=)",
    ]


def test_same_meaning_in_the_calling_env_is_not_drift(
    tuned: Path, tmp_path: Path, nccl_launch: RunCli
) -> None:
    out = tmp_path / "child.json"
    env = {"STANDIN_RECORD": str(out), "NCCL_BUFFSIZE": "0x1000000", "NCCL_PROTO": "ll"}
    result = nccl_launch("run", "tuned", *CHILD_ARGS, env=env)
    assert result.returncode == 0, result.stderr
    assert read_record(out)["env"]["NCCL_BUFFSIZE"] == "16777216"


def test_env_files_reach_the_child_and_their_drift_names_them(
    tuned: Path, tmp_path: Path, nccl_launch: RunCli
) -> None:
    out = tmp_path / "child.json"
    first, second = tmp_path / "site.env", tmp_path / "node.env"
    first.write_text("# site settings\nHF_HOME=/cache\nexport MODEL_DIR='/models'\n")
    second.write_text("HF_HOME=/fast-cache\n")
    files = ["--env-file", str(first), "--env-file", str(second)]
    result = nccl_launch("run", *files, "tuned", *CHILD_ARGS, env={"STANDIN_RECORD": str(out)})
    assert result.returncode == 0, result.stderr
    received = read_record(out)["env"]
    assert received["HF_HOME"] == "/fast-cache"
    assert received["MODEL_DIR"] == "/models"

    second.write_text("NCCL_NTHREADS=256\n")
    out.unlink()
    result = nccl_launch("run", *files, "tuned", *CHILD_ARGS, env={"STANDIN_RECORD": str(out)})
    assert result.returncode == 1
    assert f"(env file {second})" in result.stderr
    assert not out.exists()


NOT_A_NAME = "(no '=', spaces or control characters)"
NOT_SHOWN = "(not shown: an env file holds secrets)"
VALID = "valid: KEY=VALUE, export KEY=VALUE, a # comment or a blank line"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "env file bad.env: cannot read: No such file or directory"),
        ("A=1\nthis is not dotenv\n", f"bad.env:2: not a KEY=VALUE line {NOT_SHOWN}; {VALID}"),
        ("A=1\nB\n", f"bad.env:2: a name without =VALUE {NOT_SHOWN}; {VALID}"),
        ("'A\nB'=1\n", f"bad.env:1: not a variable name {NOT_SHOWN}; {VALID}"),
        ("'A B'=1\n", f"bad.env:1: not a variable name {NOT_SHOWN}; {VALID}"),
        ("A=1\nB=x\0y\n", "bad.env:2: B: a NUL byte cannot be in a value"),
    ],
)
def test_bad_env_file_is_a_usage_error_naming_the_line(
    tuned: Path, run_cli: RunCli, content: str | None, message: str
) -> None:
    if content is not None:
        Path("bad.env").write_text(content)
    result = run_cli("run", "--env-file", "bad.env", "tuned", "--", "true")
    assert result.returncode == 2
    assert result.stderr == f"nccl-launch: {message}\n"


def test_every_bad_line_of_every_env_file_is_said_at_once(tuned: Path, run_cli: RunCli) -> None:
    Path("a.env").write_text("A=1\nnot dotenv\nB\nC=3\n")
    Path("b.env").write_text("'D E'=1\n")
    files = ["--env-file", "a.env", "--env-file", "missing.env", "--env-file", "b.env"]
    result = run_cli("run", *files, "tuned", "--", "true")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"nccl-launch: a.env:2: not a KEY=VALUE line {NOT_SHOWN}; {VALID}",
        f"nccl-launch: a.env:3: a name without =VALUE {NOT_SHOWN}; {VALID}",
        "nccl-launch: env file missing.env: cannot read: No such file or directory",
        f"nccl-launch: b.env:1: not a variable name {NOT_SHOWN}; {VALID}",
    ]


def test_policy_warn_and_strip_let_the_command_start(
    write_profile: WriteProfile, tmp_path: Path, nccl_launch: RunCli
) -> None:
    write_profile(
        "lenient",
        """
        schema = 1
        name = "lenient"
        version = 1
        [nccl]
        PROTO = "LL"
        [policy]
        conflict = "warn"
        undeclared_nccl = "strip"
        """,
    )
    out = tmp_path / "child.json"
    env = {"STANDIN_RECORD": str(out), "NCCL_PROTO": "Simple", "NCCL_IB_HCA": "mlx5_0"}
    result = nccl_launch("run", "lenient", *CHILD_ARGS, env=env)
    assert result.returncode == 0, result.stderr
    received = read_record(out)["env"]
    assert received["NCCL_PROTO"] == "LL"
    assert "NCCL_IB_HCA" not in received
    warning, *entries = result.stderr.splitlines()
    assert (
        warning
        == "nccl-launch: warning: environment differs from lenient@1, tolerated by [policy]:"
    )
    assert [entry.split()[:2] for entry in entries] == [["~", "NCCL_PROTO"], ["+", "NCCL_IB_HCA"]]


def test_server_profile_builds_the_sglang_command(
    write_profile: WriteProfile, tmp_path: Path, nccl_launch: RunCli
) -> None:
    write_profile(
        "server",
        f"""
        schema = 1
        name = "server"
        version = 1
        [nccl]
        PROTO = "LL"
        [server]
        python = "{sys.executable}"
        model_path = "/models/Kimi-K2.5"
        tp_size = 8
        port = 8000
        args = ["--disable-custom-all-reduce", "--num-continuous-decode-steps", "4"]
        [server.speculative]
        algorithm = "EAGLE3"
        draft_model_path = "/models/Kimi-K2.5-EAGLE3"
        num_steps = 2
        eagle_topk = 1
        num_draft_tokens = 3
        """,
    )
    out = tmp_path / "child.json"
    env = {"PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out)}
    result = nccl_launch("run", "server", "--", "--log-level", "info", env=env)
    assert result.returncode == 0, result.stderr
    assert read_record(out)["argv"][1:] == [
        *("--model-path", "/models/Kimi-K2.5", "--tp-size", "8", "--port", "8000"),
        *("--speculative-algorithm", "EAGLE3"),
        *("--speculative-draft-model-path", "/models/Kimi-K2.5-EAGLE3"),
        *("--speculative-num-steps", "2", "--speculative-eagle-topk", "1"),
        *("--speculative-num-draft-tokens", "3"),
        *("--disable-custom-all-reduce", "--num-continuous-decode-steps", "4"),
        *("--log-level", "info"),
    ]


def test_dry_run_prints_changes_and_argv_without_running(
    tuned: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    out = tmp_path / "child.json"
    env = {"STANDIN_RECORD": str(out), "NCCL_BUFFSIZE": "16777216", "API_TOKEN": "hunter2"}
    result = run_cli("run", "--dry-run", "tuned", *CHILD_ARGS, env=env)
    assert result.returncode == 0, result.stderr
    assert not out.exists()
    lines = result.stdout.splitlines()
    assert lines[0].startswith("profile tuned@2 (sha256:")
    rows = [line.split() for line in lines]
    assert ["+", "NCCL_PROTO", '"LL"', "(profiles/tuned.toml)"] in rows
    assert ["+", "NCCL_P2P_LEVEL", '"SYS"', "(profiles/pcie-base.toml)"] in rows
    assert ["+", "SPT_NOENV", '"1"', "(nccl-launch)"] in rows
    assert "NCCL_BUFFSIZE" not in result.stdout  # inherited with the same value: no change
    assert lines[-1] == f"  {sys.executable} {STANDIN_SERVER} --flag 'value with space'"
    assert "hunter2" not in result.stdout


@pytest.mark.parametrize("command", ["run", "preflight"])
def test_own_options_count_anywhere_before_the_dashes(
    command: str, tuned: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    """`run PROFILE --dry-run` must dry-run, never hand `--dry-run` to the server."""
    out = tmp_path / "child.json"
    env_file = tmp_path / "site.env"
    env_file.write_text("HF_HOME=/cache\n")
    own = ["--dry-run"] if command == "run" else ["--format", "json"]
    result = run_cli(
        command, "tuned", *own, "--env-file", str(env_file), *CHILD_ARGS,
        env={"STANDIN_RECORD": str(out)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not out.exists()  # nothing ran
    if command == "run":
        rows = [line.split()[:3] for line in result.stdout.splitlines()]
        assert ["+", "HF_HOME", '"/cache"'] in rows  # the env file was read
        assert result.stdout.splitlines()[-1].endswith("--flag 'value with space'")
    else:
        assert json.loads(result.stdout)["argv"][-2:] == ["--flag", "value with space"]


@pytest.mark.parametrize("command", ["run", "preflight"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--log-level", "info"], "No such option '--log-level'."),
        (["--dryrun"], "No such option '--dryrun'. Did you mean '--dry-run'?"),
        (["stray"], "Unexpected argument 'stray'."),
        (["--api-key", "sk-live-1"], "No such option '--api-key'."),
    ],
)
def test_server_arguments_before_the_dashes_are_a_usage_error(
    command: str, args: list[str], message: str, tuned: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    if command == "preflight" and args == ["--dryrun"]:
        message = "No such option '--dryrun'."
    out = tmp_path / "child.json"
    result = run_cli(command, "tuned", *args, env={"STANDIN_RECORD": str(out)})
    assert result.returncode == 2
    assert not out.exists()
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"Error: {message}")
    shown = " ".join(args).replace("sk-live-1", '"$API_KEY"')  # the value, or a variable
    hint = f"Arguments for the server go after '--': nccl-launch {command} PROFILE -- {shown}"
    assert error.endswith(hint)


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["preflight"]])
@pytest.mark.parametrize("args", [["--api-key", ""], ["--ap="], ["--admin-api-key", ""]])
def test_an_empty_credential_is_refused_before_the_server_starts(
    command: list[str], args: list[str], run_cli: RunCli
) -> None:
    """SGLang takes `--api-key ''` as no key and serves every request: what a unit's
    `${API_KEY}` becomes when no EnvironmentFile= sets it."""
    result = run_cli(*command, "kimi-k25-rtx6000bw-tp8-eagle3", "--", *args)
    assert (result.returncode, result.stdout) == (2, "")
    option = args[0].removesuffix("=")
    assert result.stderr == (
        f"nccl-launch: -- ARGS: {option}'s value is empty, which SGLang takes as no key "
        "(every request served); pass the key after '--' (a unit's ${NAME} that no "
        "EnvironmentFile= sets is empty)\n"
    )


def test_an_empty_key_in_the_profiles_args_is_refused_by_validate_as_by_run(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("keyless", KEYLESS)
    refusal = (
        f"{Path('profiles/keyless.toml')}: server.args: --api-key's value is empty, which "
        "SGLang takes as no key (every request served); refer to the key (--api-key "
        "${API_KEY}) and give it a value in an env file the profile names\n"
    )
    for command in (["validate", str(path)], ["run", "--dry-run", "keyless"]):
        result = run_cli(*command)
        assert (result.returncode, result.stdout) == (2, ""), command
        assert result.stderr.endswith(refusal), result.stderr


KEYLESS = """
schema = 1
name = "keyless"
version = 1
[server]
python = "/usr/bin/python3"
model_path = "/m"
args = ["--api-key", ""]
"""


def test_a_key_flag_ending_the_profiles_args_takes_the_first_word_after_the_dashes(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("keyless", KEYLESS.replace('args = ["--api-key", ""]', 'args = ["--api-key"]'))
    result = run_cli("run", "--dry-run", "keyless", "--", "")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("nccl-launch: -- ARGS: --api-key's value is empty")


NO_VALUE = (
    "--api-key has no value (another option follows, or nothing), which SGLang refuses at "
    'start; give the key after it; quote a variable ("$API_KEY"): unquoted, an unset one is '
    "dropped\n"
)


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["preflight"]])
@pytest.mark.parametrize("args", [["--api-key"], ["--api-key", "--log-level", "info"]])
def test_a_credential_flag_without_a_value_is_refused_before_the_server_starts(
    command: list[str], args: list[str], run_cli: RunCli
) -> None:
    """`-- --api-key $API_KEY` in a shell where it is unset: the shell drops the word."""
    result = run_cli(*command, "kimi-k25-rtx6000bw-tp8-eagle3", "--", *args)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"nccl-launch: -- ARGS: {NO_VALUE}")  # fmt: skip


def test_a_key_flag_followed_by_another_in_the_profile_is_refused_by_validate_as_by_run(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """A key flag that ends the profile's args is valid: the key may come after `--`."""
    write_profile("keyless", KEYLESS.replace('"--api-key", ""', '"--api-key", "--log-level"'))
    for command in (["validate", "keyless"], ["run", "--dry-run", "keyless", "--", "info"]):
        result = run_cli(*command)
        assert (result.returncode, result.stdout) == (2, ""), command
        assert result.stderr.endswith(f"server.args: {NO_VALUE}"), result.stderr
    write_profile("keyless", KEYLESS.replace('"--api-key", ""', '"--api-key"'))
    assert run_cli("validate", "keyless").returncode == 0


def test_everything_after_the_dashes_is_the_servers(
    tuned: Path, tmp_path: Path, nccl_launch: RunCli
) -> None:
    out = tmp_path / "child.json"
    argv = ["--", sys.executable, str(STANDIN_SERVER), "--dry-run", "--", "--env-file", "x"]
    result = nccl_launch("run", "tuned", *argv, env={"STANDIN_RECORD": str(out)})
    assert result.returncode == 0, result.stderr
    assert read_record(out)["argv"][1:] == ["--dry-run", "--", "--env-file", "x"]


def test_dry_run_refuses_like_run(tuned: Path, run_cli: RunCli) -> None:
    result = run_cli("run", "--dry-run", "tuned", "--", "true", env={"NCCL_ALGO": "Tree"})
    assert result.returncode == 1
    assert "~ NCCL_ALGO" in result.stderr


def test_profile_without_server_needs_a_command(tuned: Path, run_cli: RunCli) -> None:
    result = run_cli("run", "tuned")
    assert result.returncode == 2
    assert "has no [server] table; give the command after '--'" in result.stderr


def test_command_that_cannot_execute_is_a_host_error(tuned: Path, nccl_launch: RunCli) -> None:
    result = nccl_launch("run", "tuned", "--", "/nonexistent/python3")
    assert result.returncode == 3
    assert result.stderr == "nccl-launch: command /nonexistent/python3 does not exist\n"


def test_a_command_that_cannot_start_leaves_no_nccl_log_folder(
    tuned: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {"XDG_STATE_HOME": str(state)}
    result = run_cli("run", "--nccl-debug", "tuned", "--", "/nonexistent/python3", env=env)
    assert (result.returncode, result.stderr) == (
        3,
        "nccl-launch: command /nonexistent/python3 does not exist\n",
    )
    assert not state.exists()


def test_run_warns_where_the_server_will_not_honour_the_profile(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile(
        "connections",
        """
        schema = 1
        name = "connections"
        version = 1
        [env]
        CUDA_DEVICE_MAX_CONNECTIONS = "1"
        [server]
        python = "true"
        entrypoint = ""
        model_path = "/m"
        """,
    )
    result = nccl_launch("run", "connections")
    assert result.returncode == 0
    assert result.stderr == (
        "nccl-launch: warning: env.CUDA_DEVICE_MAX_CONNECTIONS: "
        "SGLang always sets it to 8 in its workers\n"
    )


def test_unknown_profile_lists_where_it_looked(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("run", "nope", "--", "true", env={"NCCL_LAUNCH_PATH": str(tmp_path / "x")})
    assert result.returncode == 2
    assert "profile 'nope' not found; searched profiles, " in result.stderr
    assert str(tmp_path / "x") in result.stderr


def test_invalid_profile_refuses_to_run(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("bad", 'schema = 1\nname = "bad"\nversion = 1\n[nccl]\nBUFFSIZE = "16MB"\n')
    result = run_cli("run", "bad", "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("profiles/bad.toml: nccl.BUFFSIZE: '16MB' is not a size")
    assert "Traceback" not in result.stderr


def test_eagle_without_draft_is_judged_by_the_host_not_by_validate(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """validate reads the file alone (a profiles repo's CI has no model); run reads config.json."""
    model = tmp_path / "model"
    model.mkdir()
    path = write_profile(
        "mtp",
        f"""
        schema = 1
        name = "mtp"
        version = 1
        [server]
        python = "/bin/true"
        model_path = "{model}"
        [server.speculative]
        algorithm = "eagle3"
        """,
    )
    validated = run_cli("validate", str(path))
    assert validated.returncode == 0, validated.stderr
    assert "the model must have built-in MTP layers" in validated.stderr
    refused = run_cli("run", "--dry-run", "mtp")
    assert refused.returncode == 2
    assert refused.stderr == (
        "profiles/mtp.toml: server.speculative.draft_model_path: EAGLE3 needs a draft model "
        "unless the model has built-in MTP layers (DeepSeek-V3 style); the model's architecture "
        "is unknown (no readable config.json)\n"
    )
    (model / "config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"]}')
    assert run_cli("run", "--dry-run", "mtp").returncode == 0


def test_a_fifo_or_device_as_env_file_is_refused_without_blocking(
    tuned: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "fifo.env")
    result = run_cli("run", "--env-file", "fifo.env", "tuned", "--", "true")
    assert (result.returncode, result.stderr) == (
        2,
        "nccl-launch: env file fifo.env: a FIFO; only regular files are read\n",
    )
    result = run_cli("run", "--env-file", "/dev/zero", "tuned", "--", "true")
    assert result.returncode == 2
    assert "a character device; only regular files are read" in result.stderr


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_an_empty_command_word_is_a_usage_error(
    tuned: Path, run_cli: RunCli, dry_run: tuple[str, ...]
) -> None:
    result = run_cli("run", *dry_run, "tuned", "--", "", "x")
    assert (result.returncode, result.stderr) == (
        2,
        "nccl-launch: the command after '--' is an empty word; give the program to run\n",
    )


def test_an_empty_server_python_is_refused_before_exec(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    body = 'schema = 1\nname = "empty"\nversion = 1\n[server]\npython = ""\nmodel_path = "/m"\n'
    write_profile("empty", body)
    for command in ("run", "preflight", "validate"):
        result = run_cli(command, "empty" if command != "validate" else "profiles/empty.toml")
        assert result.returncode == 2, (command, result.stderr)
        assert "server.python: empty; valid: the server's Python" in result.stderr


def test_a_nul_in_a_profile_value_never_reaches_exec(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("nul", 'schema = 1\nname = "nul"\nversion = 1\n[env]\nHF_HOME = "/c\\u0000"\n')
    result = run_cli("run", "nul", "--", "true")
    assert (result.returncode, result.stderr) == (
        2,
        "profiles/nul.toml: env.HF_HOME: holds a NUL byte, which no argument, path or "
        "environment value can carry\n",
    )


@pytest.mark.parametrize("name", ["NCCL_NTHREADS", "NCCL_BUFFSIZE", "NCCL_P2P_LEVEL", "NCCL_NET"])
def test_a_value_of_thousands_of_digits_in_the_calling_env_is_drift(
    tuned: Path, run_cli: RunCli, name: str
) -> None:
    result = run_cli("run", "tuned", "--", "true", env={name: "9" * 5000})
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("refusing to start: environment drifts from tuned@2")
    assert "Traceback" not in result.stderr


# As root, nothing others could have written shapes the child (sshd's StrictModes).

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
NOBODY = 65534
PRELOAD = 'schema = 1\nname = "{name}"\nversion = 1\n{extends}[env]\nLD_PRELOAD = "/tmp/evil.so"\n'


def _shared_folder(tmp_path: Path) -> Path:
    """A directory any user may write to, not sticky: anyone can replace its files."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


@AS_ROOT
def test_root_refuses_a_profile_others_could_write(tmp_path: Path, run_cli: RunCli) -> None:
    profile = _shared_folder(tmp_path) / "evil.toml"
    profile.write_text(PRELOAD.format(name="evil", extends=""))
    profile.chmod(0o666)
    os.chown(profile, NOBODY, NOBODY)
    ran = tmp_path / "ran"
    result = run_cli("run", str(profile), "--", "touch", str(ran))
    assert result.returncode == 2
    assert result.stderr.startswith(f"nccl-launch: profile {profile}: owned by uid {NOBODY}")
    assert "chown root and chmod go-w" in result.stderr
    assert not ran.exists()
    # Found by name on the search path, it is skipped, never used.
    env = {"NCCL_LAUNCH_PATH": str(profile.parent)}
    result = run_cli("run", "evil@1", "--", "touch", str(ran), env=env)
    assert result.returncode == 2
    assert "profile 'evil@1' not found" in result.stderr
    assert f"first: profile {profile}: owned by uid {NOBODY}" in result.stderr
    assert not ran.exists()


@AS_ROOT
def test_root_refuses_an_extends_parent_others_could_write(
    write_profile: WriteProfile, tmp_path: Path, run_cli: RunCli
) -> None:
    parent = write_profile("parent", PRELOAD.format(name="parent", extends=""))
    parent.chmod(0o666)
    write_profile("child", PRELOAD.format(name="child", extends='extends = "parent"\n'))
    ran = tmp_path / "ran"
    result = run_cli("run", "child", "--", "touch", str(ran))
    assert result.returncode == 2
    assert result.stderr.startswith(
        "nccl-launch: profile profiles/parent.toml: writable by group or others (mode 0666)"
    )
    assert not ran.exists()


@AS_ROOT
def test_root_refuses_an_env_file_others_could_write(
    tuned: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    env_file = tmp_path / "site.env"
    env_file.write_text("LD_PRELOAD=/tmp/evil.so\n")
    os.chown(env_file, NOBODY, NOBODY)
    ran = tmp_path / "ran"
    result = run_cli("run", "--env-file", str(env_file), "tuned", "--", "touch", str(ran))
    assert result.returncode == 2
    assert result.stderr.startswith(f"nccl-launch: env file {env_file}: owned by uid {NOBODY}")
    assert not ran.exists()


def test_a_bad_env_file_line_never_shows_a_secret(
    tuned: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    env_file = tmp_path / "site.env"
    for line in ["HF_TOKEN hf_abc123", "DB postgres://u:abc123@db/x", 'B="abc123', "hf_abc123",
                 "'hf abc123'=1"]:  # fmt: skip
        env_file.write_text(f"A=1\n{line}\n")
        result = run_cli("run", "tuned", "--env-file", str(env_file), *CHILD_ARGS)
        assert result.returncode == 2
        assert result.stderr.startswith(f"nccl-launch: {env_file}:2: ")
        assert result.stderr.endswith(f" {NOT_SHOWN}; {VALID}\n")
        assert "abc123" not in result.stderr


def test_a_model_config_that_is_no_regular_file_is_unknown(
    write_profile: WriteProfile, tmp_path: Path, run_cli: RunCli
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    os.mkfifo(model / "config.json")  # would hang a plain read
    write_profile(
        "mtp",
        f"""
        schema = 1
        name = "mtp"
        version = 1
        [server]
        model_path = "{model}"
        [server.speculative]
        algorithm = "EAGLE"
        """,
    )
    result = run_cli("run", "--dry-run", "mtp")
    assert result.returncode == 2
    assert "the model's architecture is unknown (no readable config.json)" in result.stderr


# The profile's own env files (`env_files`): read at start, their variables declared by them.

SECRETS = """
schema = 1
name = "served"
version = 1
extends = "../base/pcie-base.toml"
env_files = ["served.env"]

[nccl]
PROTO = "LL"
"""


@pytest.fixture
def served(write_profile: WriteProfile, tmp_path: Path) -> Path:
    base = BASE.replace("[nccl]", 'env_files = ["site.env"]\n[nccl]')
    write_profile("pcie-base", base, folder="base")
    (tmp_path / "base" / "site.env").write_text("HF_HOME=/site-cache\nHF_TOKEN=hf_site\n")
    path = write_profile("served", SECRETS.replace("[nccl]", "[env]\nHF_HUB_OFFLINE = '1'\n[nccl]"))
    (tmp_path / "profiles" / "served.env").write_text("HF_TOKEN=hf_served123\n")
    return path


def test_the_profiles_env_files_and_the_env_files_given_are_refused_together(
    served: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    """Every problem of the profile's files (this host's) and of those given (the command
    line's, so exit 2), each line of each, the profile's first."""
    served_env = tmp_path / "profiles" / "served.env"
    served_env.write_text("HF_TOKEN\nNCCL_ALGO=Ring\nHF_HUB_OFFLINE=0\n")
    Path("given.env").write_text("X\n")
    result = run_cli("run", "served", "--env-file", "given.env", "--", "true")
    assert result.returncode == 2
    at = "nccl-launch: profiles/served.toml: env_files:"
    assert result.stderr.splitlines() == [
        f"{at} {served_env}:1: a name without =VALUE {NOT_SHOWN}; {VALID}",
        f"{at} env file {served_env}: NCCL_ALGO: NCCL variables belong in [nccl], validated: "
        "ALGO = 'Ring'",
        f"{at} env file {served_env}: HF_HUB_OFFLINE: the profile declares it too; keep it in "
        "one place",
        f"nccl-launch: given.env:1: a name without =VALUE {NOT_SHOWN}; {VALID}",
    ]


def test_the_profiles_env_files_reach_the_child_before_any_env_file_given(
    served: Path, tmp_path: Path, nccl_launch: RunCli
) -> None:
    out = tmp_path / "child.json"
    given = tmp_path / "given.env"
    given.write_text("MODEL_DIR=/models\n")
    # systemd's EnvironmentFile= gives the calling env the same value: a match, not drift.
    env = {"STANDIN_RECORD": str(out), "HF_TOKEN": "hf_served123"}
    result = nccl_launch("run", "served", "--env-file", str(given), *CHILD_ARGS, env=env)
    assert result.returncode == 0, result.stderr
    received = read_record(out)["env"]
    # The parent's file first (relative to the parent's folder), then the child's.
    assert received["HF_HOME"] == "/site-cache"
    assert received["HF_TOKEN"] == env["HF_TOKEN"]
    assert received["MODEL_DIR"] == "/models"
    assert "hf_" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("where", "value"),
    [("calling environment", {"HF_TOKEN": "hf_old"}), ("env file", None)],
)
def test_another_value_of_an_env_files_variable_is_drift_shown_masked(
    served: Path, tmp_path: Path, run_cli: RunCli, where: str, value: dict[str, str] | None
) -> None:
    given = tmp_path / "given.env"
    given.write_text("HF_TOKEN=hf_old\n")
    options = [] if value else ["--env-file", str(given)]
    result = run_cli("run", "served", *options, "--", "true", env=value)
    assert result.returncode == 1
    source = where if value else f"env file {given}"
    assert result.stderr.splitlines()[1] == (
        f'  ~ HF_TOKEN  "***" -> "***"  ({source}; declared by env file '
        f"{tmp_path}/profiles/served.env)"
    )
    assert "hf_" not in result.stderr
    # The fix names the file that holds the secret, never the profile, which is shown,
    # diffed and committed.
    assert result.stderr.splitlines()[3].startswith(
        "fix ~ (changed): put the value the server should get in env file "
        f"{tmp_path}/profiles/served.env, "
    )


def test_run_dry_run_names_the_env_file_of_each_value_and_masks_every_value_of_one(
    served: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    """An env file of the profile is where its secrets live, under any name (a converted
    `SK` holding `--api-key "$SK"`'s key): each of its values is masked."""
    result = run_cli("run", "--dry-run", "served", "--", "true")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f'  + HF_HOME                   "***"       (env file {tmp_path}/base/site.env)' in lines
    assert "/site-cache" not in result.stdout
    assert (
        f'  + HF_TOKEN                  "***"       (env file {tmp_path}/profiles/served.env)'
        in lines
    )
    assert "hf_" not in result.stdout


@pytest.mark.parametrize("command", [["run"], ["run", "--dry-run"], ["preflight"]])
def test_a_missing_env_file_of_the_profile_is_a_host_error_naming_it(
    served: Path, tmp_path: Path, run_cli: RunCli, command: list[str]
) -> None:
    (tmp_path / "profiles" / "served.env").unlink()
    result = run_cli(*command, "served", "--", "true")
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"nccl-launch: profiles/served.toml: env_files: env file {tmp_path}/profiles/served.env: "
        "cannot read: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "NCCL_PROTO=Simple",
            "NCCL_PROTO: NCCL variables belong in [nccl], validated: PROTO = 'Simple'",
        ),
        ("HF_HUB_OFFLINE=0", "HF_HUB_OFFLINE: the profile declares it too; keep it in one place"),
        ("SPT_NOENV=0", "SPT_NOENV: nccl-launch sets this variable itself"),
    ],
)
def test_an_env_file_of_the_profile_holds_only_what_env_may(
    served: Path, tmp_path: Path, run_cli: RunCli, line: str, message: str
) -> None:
    env_file = tmp_path / "profiles" / "served.env"
    env_file.write_text(f"{line}\n")
    result = run_cli("run", "served", "--", "true")
    assert (result.returncode, result.stderr) == (
        3,
        f"nccl-launch: profiles/served.toml: env_files: env file {env_file}: {message}\n",
    )


@AS_ROOT
def test_root_refuses_an_env_file_of_the_profile_others_could_write(
    served: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    env_file = tmp_path / "profiles" / "served.env"
    env_file.chmod(0o666)
    ran = tmp_path / "ran"
    result = run_cli("run", "served", "--", "touch", str(ran))
    assert result.returncode == 3
    assert result.stderr.startswith(
        f"nccl-launch: profiles/served.toml: env_files: env file {env_file}: writable by group"
    )
    assert not ran.exists()


def test_preflight_counts_the_variables_of_the_profiles_env_files(
    served: Path, run_cli: RunCli
) -> None:
    skip = [word for check in ("nccl.conf", "env-plugin", "gpus", "port", "paths", "sglang")
            for word in ("--skip", check)]  # fmt: skip
    result = run_cli("preflight", "served", *skip, env={"HF_HOME": "/site-cache"})
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[1] == (
        "ok    environment  no drift: the profile sets 5 variables (2 from its env files), "
        "1 already inherited"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
@pytest.mark.parametrize("mode", [0o1777, 0o777])
def test_root_starts_no_python_in_a_folder_others_may_create_files_in(
    mode: int, write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path
) -> None:
    """`python -m` and `-c` import from their working directory first: an `sglang/` another
    user makes in /tmp would run as root, in the server (`run`) and in preflight's question
    to it. A sticky folder is no excuse: anyone may create a new name there."""
    shared = tmp_path / "shared"
    (shared / "sglang").mkdir(parents=True)
    ran = tmp_path / "imported"
    (shared / "sglang" / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    shared.chmod(mode)
    write_profile(
        "cwd",
        f'schema = 1\nname = "cwd"\nversion = 1\n[server]\npython = "{sys.executable}"\n'
        f'model_path = "/models/m"\ncwd = "{shared}"\n',
    )
    said = (
        f"the server's working directory {shared} (uid 0, mode {mode:04o}) lets another user "
        "create files in it, which Python imports before the server's own (-m and -c put it "
        "first on sys.path); start it from a folder root alone writes, or set [server] cwd to one"
    )
    started = nccl_launch("run", "cwd")
    assert (started.returncode, started.stderr) == (3, f"nccl-launch: {said}\n")
    asked = nccl_launch("preflight", "cwd", "--skip", "gpus", "--skip", "paths")
    assert asked.returncode == 3
    assert f"fail  sglang       {said}\n" in asked.stdout
    assert not ran.exists()
    shared.chmod(0o755)  # root's alone: what is there is root's own
    assert nccl_launch("run", "cwd").returncode != 3
    assert ran.exists()
