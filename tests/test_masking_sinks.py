"""Every place text leaves the program masks the secrets of the launch: a credential whose
value is a JSON or Python list or object, a quoted value with an escaped quote in it, a key
shorter than any value, and a secret file's value filled into a flag that is no credential's,
masked wherever it appears, through `run --dry-run`, `show`, `validate`, `systemd`,
`preflight`, `check`, `bench` and tune's failed-trial tail (terminal and journal). What a
server says is quoted apart from our prose (`Quoted`) and masked by each sink: a sink that
forgets fails these tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from nccl_launch.secrets.masking import MASK
from nccl_launch.secrets.values import secrets_of
from nccl_launch.tune.trial import TrialOutcome, tail_lines
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, Server, free_port, sleeper, wait_for

# `k3y` is the short key given to the server; each `-9z` ends a value of a credential, the
# password of DSN after an escaped quote, FILLED the value of a secret file filled into
# `--served-model-name`, which no rule of masking knows to hide.
LEAKY = """schema = 1
name = "leaky"
version = 1
description = 'token=["d-9z"]'
secret_files = {{ API_KEY = "api_key" }}
[nccl]
PROTO = "LL"
[env]
OTHER = '{{"api_key": ["e-9z"]}}'
DSN = 'password="pa\\"ss-9z"'
[server]
python = "{python}"
model_path = "/models/m"
port = {port}
args = [
    "--api-key", "k3y", "--served-model-name", "${{API_KEY}}",
    "--x", '{{"password": {{"v": "a-9z"}}}}',
]
"""
FILLED = 'Qx7v"jWk-9z'  # a quote in it: a rule that stops there would show its tail
SKIP_HOST = ("--skip", "gpus", "--skip", "paths", "--skip", "port")


def assert_masked(*texts: str) -> None:
    said = "".join(texts)
    assert "9z" not in said, said
    assert "k3y" not in said, said
    assert_unseen(FILLED, said)


def assert_unseen(secret: str, said: str) -> None:
    assert not shown_parts(secret, said), said


def shown_parts(secret: str, said: str) -> list[str]:
    """The parts of `secret` of 4 characters (a title cut in it, a tail after its quote) that
    are in `said`, as written or as JSON, Prometheus and systemd escape its quote."""
    forms = {said, said.replace('\\"', '"')}
    parts = {secret[start : start + 4] for start in range(len(secret) - 3)}
    return [part for part in parts for form in forms if part in form]


@pytest.fixture
def leaky(write_profile: WriteProfile, tmp_path: Path) -> dict[str, str]:
    """The profile, and an SGLang on the PYTHONPATH whose import fails quoting its secrets
    as a server quotes its arguments (preflight's probe prints what it says)."""
    path = write_profile("leaky", LEAKY.format(python=sys.executable, port=free_port()))
    (path.parent / "api_key").write_text(FILLED + "\n")
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    said = """args: {'api_key': ['k3y'], 'x': {"password": {"v": "a-9z"}}}; key k3y"""
    (package / "__init__.py").write_text(f"raise ImportError({said!r})\n")
    return {"PYTHONPATH": str(package.parent)}


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--dry-run"],
        ["show"],
        ["validate"],
        ["validate", "--format", "json"],
        ["systemd"],
        ["preflight", *SKIP_HOST],
        ["preflight", *SKIP_HOST, "--format", "json"],
    ],
    ids=["run", "show", "validate", "validate-json", "systemd", "preflight", "preflight-json"],
)
def test_a_command_masks_every_secret_of_the_profile_it_prints(
    command: list[str], leaky: dict[str, str], run_cli: RunCli
) -> None:
    result = run_cli(*command, "leaky", env=leaky)
    assert result.returncode in (0, 3), result.stdout + result.stderr  # 3: no SGLang
    assert_masked(result.stdout, result.stderr)
    if command[0] != "validate":  # which names no value
        assert MASK in result.stdout
    if command[0] == "run":  # DSN's password whole, as the line quotes it
        assert '+ DSN                       "password=\\"***\\""' in result.stdout


@pytest.mark.parametrize("fmt", ["json", "env", "dotenv", "shell", "systemd-env", "k8s"])
def test_shows_formats_for_the_server_hold_no_secret_files_value(
    fmt: str, leaky: dict[str, str], run_cli: RunCli
) -> None:
    """They print the profile's own values as the server gets them (DSN's password too), and
    never read the secret files: the reference is what they hold."""
    result = run_cli("show", "leaky", "--format", fmt, env=leaky)
    assert result.returncode == 0, result.stderr
    assert_unseen(FILLED, result.stdout + result.stderr)


def test_preflight_masks_what_the_server_says_of_its_secrets(
    leaky: dict[str, str], run_cli: RunCli
) -> None:
    result = run_cli("preflight", *SKIP_HOST, "leaky", "--format", "json", env=leaky)
    [check] = [check for check in json.loads(result.stdout)["checks"] if check["name"] == "sglang"]
    said = """args: {'api_key': ***, 'x': {"password": ***}}; key ***"""
    assert check["message"].endswith(f"ImportError: {said}")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_check_masks_a_process_title_holding_them(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    title = (b"--api-key", b"k3y", b'--x={"auth_token": ["t-9z"]}')
    with sleeper({b"NCCL_PROTO": b"LL"}, *title) as pid:
        result = run_cli("check", "p", "--pid", str(pid), "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert_masked(result.stdout, result.stderr)
    assert """--api-key '***' '--x={"auth_token": ***}'""" in result.stdout.replace('\\"', '"')


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.own_pid_namespace
def test_tunes_failed_trial_tail_masks_them_on_the_terminal_and_in_the_journal(
    fmt: str, leaky: dict[str, str], run_cli: RunCli, tmp_path: Path
) -> None:
    """The stand-in's parser refuses `--served-model-name` and `--x`, quoting their values,
    and exits at start."""
    args = ("--try", "PROTO=Simple", "--runs", "1", "--warmup", "0", "--ready-timeout", "2")
    env = {"PYTHONPATH": str(STANDIN)}
    result = run_cli("tune", "leaky", *args, "--format", fmt, env=env)
    assert result.returncode == 1, result.stdout + result.stderr  # nothing measured
    refused = (
        "launch_server.py: error: unrecognized arguments: "
        """--served-model-name *** --x {"password": ***}"""
    )
    assert refused in result.stdout.replace('\\"', '"')
    [journal] = (tmp_path / "home").rglob("journal.jsonl")
    assert "unrecognized arguments" in journal.read_text()
    assert_masked(result.stdout, result.stderr, journal.read_text())


# SGLang's parser as the probe imports it, quoting the argv it is given as a server may: in
# its error (`parse`), or in a value it reads back (`differs`: a check's detail lines).
SERVER_ARGS = """
import os
class Args:
    def __init__(self, argv):
        self.model_path = "/models/m " + " ".join(argv)
def prepare_server_args(argv):
    if os.environ["SAID"] == "parse":
        raise ValueError(f"cannot read {argv}")
    return Args(argv)
"""


@pytest.mark.parametrize("said", ["parse", "differs"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_preflight_masks_what_the_parser_says_and_keeps_its_own_prose(
    said: str, fmt: str, leaky: dict[str, str], run_cli: RunCli
) -> None:
    """The text sink (`preflight_lines`) and the JSON one (the report's serializers) each
    mask the quotes of a check's message, of its detail, and the server's answer."""
    package = Path(leaky["PYTHONPATH"]) / "sglang"
    (package / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (package / "srt").mkdir()
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(SERVER_ARGS)
    result = run_cli("preflight", *SKIP_HOST, "leaky", "--format", fmt, env=leaky | {"SAID": said})
    assert result.returncode == 3, result.stdout + result.stderr
    assert_masked(result.stdout, result.stderr)
    if fmt == "json":
        report = json.loads(result.stdout)
        assert MASK in json.dumps(report["sglang"])  # its error, or the model_path it read
        [argv] = [check for check in report["checks"] if check["name"] == "argv"]
        lines = [argv["message"], *argv["detail"]]
    else:
        lines = [line.strip() for line in result.stdout.splitlines()]
    prose, quote = {
        "parse": (
            "SGLang's parser rejects the argv: ValueError: ",
            """'--api-key', '***', '--served-model-name', '***', '--x'""",
        ),
        "differs": (
            "model_path: SGLang parsed '/models/m ",
            """--api-key *** --served-model-name *** --x {"password": ***}""",
        ),
    }[said]
    assert any(prose in line and quote in line for line in lines), "\n".join(lines)


def test_a_quote_is_masked_and_the_prose_around_it_never() -> None:
    quoted = secrets_of(["--api-key", "k3y"], {}).quoting("--api-key has no value: ", "key k3y")
    assert quoted.shown() == "--api-key has no value: key ***"
    with pytest.raises(TypeError):
        f"{quoted}"  # a sink that forgets to mask fails instead of leaking


def test_a_trials_tail_is_masked_in_the_journals_json_and_on_the_terminal() -> None:
    log = "start\n--api-key k3y\nServerArgs(api_key='k3y')\n\x1b[31mdone\n"
    tail = secrets_of(["--api-key", "k3y"], {}).quoting("", log)
    outcome = TrialOutcome(status="exited", log_tail=tail, seconds=1)
    shown = ["start", "--api-key ***", "ServerArgs(api_key='***')", r"\x1b[31mdone"]
    assert tail_lines(outcome.log_tail) == shown
    journaled = TrialOutcome.model_validate_json(outcome.model_dump_json())
    assert journaled.log_tail == shown
    assert tail_lines(journaled.log_tail) == shown  # read back, it is shown as written


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_validate_masks_a_password_in_a_key_it_names(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile(
        "keyed",
        'schema = 1\nname = "keyed"\nversion = 1\n[server]\nmodel_path = "/m"\n'
        '"https://u:hunter22@db/x" = 1\n',
    )
    result = run_cli("validate", str(path), "--format", fmt)
    assert result.returncode == 2
    assert "hunter22" not in result.stdout + result.stderr
    assert "https://***@db/x" in result.stdout + result.stderr


# The vLLM stand-in serving the name FILLED, a secret file's value: a name is no credential
# by any rule, and every view of the live server (its titles, what it says of itself) masks
# it as a value the profile's secret files hold.
SERVED = """schema = 1
name = "served"
version = 1
secret_files = {{ API_KEY = "api_key" }}
[nccl]
PROTO = "LL"
[server]
kind = "vllm"
python = "py"
model_path = "/m"
host = "127.0.0.1"
port = {port}
args = ["--served-model-name", "${{API_KEY}}"]
"""


@pytest.fixture
def served(write_profile: WriteProfile, tmp_path: Path) -> Iterator[tuple[Server, dict[str, str]]]:
    """The server started by `nccl-launch run served`, and the environment to call it with:
    its interpreter is `py` on the PATH, so that its title, cut at 100 characters, reaches
    the name it serves (this interpreter, given the packages of its environment)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "py").symlink_to(sys.executable)
    env = {
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": f"{STANDIN}{os.pathsep}{sysconfig.get_paths()['platlib']}",
        "STANDIN_TOKEN_RATE": "300",
    }
    port = free_port()
    path = write_profile("served", SERVED.format(port=port))
    (path.parent / "api_key").write_text(FILLED + "\n")
    server = Server([console_script(), "run", "served"], env, port)
    yield server, env
    server.stop()


def test_every_view_of_a_live_server_masks_a_secret_filled_into_a_name(
    served: tuple[Server, dict[str, str]], run_cli: RunCli
) -> None:
    server, env = served
    port, url = str(server.port), f"http://127.0.0.1:{server.port}"
    fast = ("--max-tokens", "8", "--runs", "1", "--warmup", "0")
    commands = {
        **{f"check {fmt}": ("check", "served", "--port", port, "--format", fmt)
           for fmt in ("text", "json", "prometheus")},
        **{f"preflight {fmt}": ("preflight", "served", "--skip", "gpus", "--skip", "paths",
                                "--skip", "vllm", "--format", fmt) for fmt in ("text", "json")},
        **{f"bench {fmt}": ("bench", "served", "--url", url, *fast, "--format", fmt)
           for fmt in ("text", "json")},
        **{f"history {fmt}": ("bench", "--history", "--format", fmt) for fmt in ("text", "json")},
    }  # fmt: skip
    said = {name: run_cli(*command, env=env) for name, command in commands.items()}
    assert {name: result.returncode for name, result in said.items()} == {
        **dict.fromkeys(commands, 0),
        "preflight text": 3,  # the port is taken: by the server, named by its title
        "preflight json": 3,
    }, {name: result.stdout + result.stderr for name, result in said.items()}
    shown = {name: result.stdout + result.stderr for name, result in said.items()}
    assert not {name: text for name, text in shown.items() if shown_parts(FILLED, text)}
    assert "--served-model-name '***'" in said["check text"].stdout
    assert "--served-model-name '***'" in said["preflight text"].stdout


def test_a_stranger_on_the_servers_port_is_named_without_its_secrets(
    served: tuple[Server, dict[str, str]], run_cli: RunCli
) -> None:
    """Before any profile is loaded, `check --port` names each tree listening on the port:
    the server nccl-launch started is named by the profile it runs, never by a command line
    whose secret-file values no rule knows yet."""
    server, env = served
    script = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_INET6)\n"
        "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
        f"s.bind(('::1', {server.port})); s.listen(); print(flush=True); sys.stdin.read()\n"
    )
    stranger = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert stranger.stdout is not None and stranger.stdout.readline() == b"\n"  # listening
        result = run_cli("check", "--port", str(server.port), env=env)
    finally:
        stranger.communicate()
    assert result.returncode == 3, result.stdout + result.stderr
    assert_unseen(FILLED, result.stdout + result.stderr)
    assert f"pid {server.process.pid} (started by nccl-launch as served@1: " in result.stderr
    assert f"pid {stranger.pid} ({sys.executable} -c " in result.stderr


def test_capture_of_a_server_keeps_a_secret_files_value_out_of_the_profile(
    served: tuple[Server, dict[str, str]], run_cli: RunCli, tmp_path: Path
) -> None:
    """What `run` filled in from a secret file is written as the reference the profile it
    runs says, its file named in secret_files, never as the value."""
    server, env = served
    out = tmp_path / "out"
    result = run_cli(
        "capture", "--pid", str(server.process.pid), "--name", "again", "-o",
        str(out / "again.toml"), env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = {path.name: path.read_text() for path in out.iterdir()}
    assert_unseen(FILLED, "".join(written.values()) + result.stdout + result.stderr)
    profile = tomllib.loads(written["again.toml"])
    assert profile["secret_files"] == {"API_KEY": str(Path("profiles/api_key").absolute())}
    # Its interpreter, `py`, is no server's: the command is in a note, to run after `--`.
    assert "--served-model-name ${API_KEY}" in profile["provenance"]["notes"]


def test_capture_keeps_a_secret_files_variable_in_the_environment_out_of_the_profile(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """A secret file's variable that `run` exported into the server's environment, under a
    name masking shows and a prefix capture keeps (VLLM_), is named by its file."""
    path = write_profile(
        "exported",
        'schema = 1\nname = "exported"\nversion = 1\nsecret_files = { VLLM_TENANT = "tenant" }\n',
    )
    (path.parent / "tenant").write_text(FILLED + "\n")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = subprocess.Popen([console_script(), "run", str(path), "--", *sleep])
    try:
        wait_for(
            lambda: b"VLLM_TENANT" in Path(f"/proc/{server.pid}/environ").read_bytes(),
            "the command to start",
            process=server,
        )
        result = run_cli("capture", "--pid", str(server.pid), "-o", str(tmp_path / "c.toml"))
    finally:
        server.kill()
        server.wait()
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "c.toml").read_text()
    assert_unseen(FILLED, written + result.stdout + result.stderr)
    assert tomllib.loads(written)["secret_files"] == {"VLLM_TENANT": str(path.parent / "tenant")}


def test_preflight_names_another_profiles_server_on_its_port_without_its_secrets(
    served: tuple[Server, dict[str, str]], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """The port is taken by a server of another launch: this profile's secrets are not
    its, so it is named by its program and the profile it runs."""
    server, env = served
    other = (
        SERVED.format(port=server.port)
        .replace('name = "served"', 'name = "other"')
        .replace('secret_files = { API_KEY = "api_key" }\n', "")
        .replace('args = ["--served-model-name", "${API_KEY}"]', "args = []")
    )
    write_profile("other", other)
    skips = ("--skip", "gpus", "--skip", "paths", "--skip", "vllm")
    result = run_cli("preflight", "other", *skips, env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert_unseen(FILLED, result.stdout + result.stderr)
    pid = server.process.pid
    assert f"is in use by pid {pid} (started by nccl-launch as served@1: py ...)" in result.stdout
