"""A server kind of this file's own, registered without a line of nccl_launch/ for it, taken
through `validate`, `run --dry-run`, masking and `check` of a real server of its kind: what
`serving.base.Kind` asks of a kind is all a kind needs.

The kind serves HTTP from a Python one-liner on loopback. In-process it is `register`ed for
the test and taken back after; the console script that starts its server finds it through
the entry point group `nccl_launch.kinds`, from a distribution's metadata written here."""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from nccl_launch import kinds
from nccl_launch.findings import Refused
from nccl_launch.kinds import ServerKind
from nccl_launch.serving.base import Api, CommandLine, Credentials, Kind
from nccl_launch.serving.flags import Flag
from nccl_launch.serving.table import Name, ServerTable
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import free_port, wait_for

# Listens on the port after `--listen` and answers nothing but its own errors.
SERVE = (
    "import http.server as h, sys; a = sys.argv; "
    "h.HTTPServer(('127.0.0.1', int(a[a.index('--listen') + 1])), h.BaseHTTPRequestHandler)"
    ".serve_forever()"
)
# Its credential: a flag no rule of masking would take for one by its name alone.
WORD_FLAG = "--magic-word"
PORT_FLAG = Flag("port", "--listen")


class EchoServer(ServerTable):
    """`[server]` of kind "echo"."""

    kind: Literal["echo"]
    entrypoint: Name = f"-c {shlex.quote(SERVE)}"


def echo_argv(server: EchoServer) -> list[str]:
    port = str(server.port or ECHO.api.default_port)
    model = ["--model", server.model_path or ""]
    words = [*shlex.split(server.entrypoint), *model, PORT_FLAG.canonical, port]
    return [server.python, *words, *server.args]


def field_flag(option: str) -> Flag | None:
    return PORT_FLAG if option == PORT_FLAG.canonical else None


# The kind: only how it differs from a plain OpenAI-compatible server.
ECHO = Kind(
    name="echo",
    title="Echo",
    table=EchoServer,
    env_prefix="ECHO_",
    command=CommandLine(
        script="echo-server", entrypoints=("-m echo_server",), argv=echo_argv, flag=field_flag
    ),
    probe=__name__,
    credentials=Credentials(api_key_flag=WORD_FLAG, flags=(WORD_FLAG,)),
    api=Api(default_port=8080),
)
PROFILE = f"""
schema = 1
name = "echo"
version = 1
[nccl]
PROTO = "LL"
[server]
kind = "echo"
python = "{sys.executable}"
model_path = "/models/m"
port = {{port}}
args = ["{WORD_FLAG}", "s3cr3t-word"]
"""


@pytest.fixture
def registered() -> Iterator[ServerKind]:
    """The kind, registered for the test and taken back out after it."""
    kinds.register(ECHO)
    try:
        yield ECHO
    finally:
        kinds.unregister(ECHO)


def test_a_registered_kind_is_validated_and_its_argv_run_dry(
    registered: ServerKind, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("echo", PROFILE.format(port=8123))
    validated = run_cli("validate", "echo")
    assert validated.returncode == 0, validated.stderr
    dry = run_cli("run", "--dry-run", "echo")
    assert dry.returncode == 0, dry.stderr
    assert f"{shlex.quote(sys.executable)} -c " in dry.stdout
    assert "--model /models/m --listen 8123" in dry.stdout
    # The kind's own rules are asked: a structured field repeated after `--`.
    repeated = run_cli("run", "--dry-run", "echo", "--", "--listen", "9")
    assert repeated.returncode == 2
    assert "--listen repeats the field port, which `--` cannot change" in repeated.stderr
    # A flag of its fields before `--` is said to belong in the profile, as the kind reads it.
    hint = run_cli("run", "echo", "--listen", "9")
    assert hint.returncode == 2
    assert "--listen is the field port: set port in [server] of the profile" in hint.stderr


def test_a_registered_kinds_table_is_read_as_its_own(
    registered: ServerKind, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    # A key it does not have, named with those it has; it has no [server.speculative].
    write_profile("other", PROFILE.format(port=8123).replace("[server]", "[server]\ntp = 2"))
    other = run_cli("validate", "other")
    assert other.returncode == 2
    assert other.stderr.splitlines() == [
        "profiles/other.toml: server.tp: unknown key; valid in [server]: python, entrypoint, "
        "model_path, tp_size, pp_size, host, port, nnodes, node_rank, dist_init_addr, cwd, args, "
        "kind"
    ]
    write_profile("draft", PROFILE.format(port=8123) + '[server.speculative]\nmodel = "/d"\n')
    draft = run_cli("validate", "draft")
    assert draft.returncode == 2
    assert "server.speculative: unknown key; valid in [server]:" in draft.stderr
    # Editors are told of it: the JSON Schema is built from the kinds registered.
    assert '"const": "echo"' in run_cli("schema").stdout


def test_the_kinds_credential_flag_is_masked_in_the_dry_run(
    registered: ServerKind, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("echo", PROFILE.format(port=8123))
    dry = run_cli("run", "--dry-run", "echo")
    assert dry.returncode == 0, dry.stderr
    assert f"{WORD_FLAG} '***'" in dry.stdout
    assert "s3cr3t-word" not in dry.stdout


def test_a_kind_taken_back_is_no_kind(
    registered: ServerKind, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("echo", PROFILE.format(port=8123))
    assert kinds.kind_named("echo") is registered
    kinds.unregister(registered)
    try:
        result = run_cli("validate", "echo")
    finally:
        kinds.register(registered)  # for the fixture to take back
    assert result.returncode == 2
    assert "server.kind: 'echo' is not a server kind; valid: sglang, vllm" in result.stderr


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_check_finds_no_drift_in_a_server_the_console_script_started(
    registered: ServerKind, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    port = free_port()
    write_profile("echo", PROFILE.format(port=port))
    # What an installed distribution of the kind would carry: its entry point.
    info = tmp_path / "plugins" / "echo_kind-1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-kind\nVersion: 1\n")
    point = f"[{kinds.ENTRY_POINTS}]\necho = {__name__}:ECHO\n"
    (info / "entry_points.txt").write_text(point)
    env = {**os.environ, "PYTHONPATH": f"{info.parent}:{Path(__file__).parent.parent}"}
    argv = [console_script(), "run", "echo"]
    process = subprocess.Popen(argv, env=env, start_new_session=True, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _listening(port), "the echo server to listen", process=process)
        result = run_cli("check", "echo", "--port", str(port))
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == "no drift in 1 process"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=10)


TWIN = dataclasses.replace(ECHO, name="vllm")


def _plugins(tmp_path: Path, points: str) -> dict[str, str]:
    """An environment whose Python finds an installed distribution with these entry points."""
    info = tmp_path / "plugins" / "broken_kind-1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-kind\nVersion: 1\n")
    (info / "entry_points.txt").write_text(f"[{kinds.ENTRY_POINTS}]\n{points}")
    return {**os.environ, "PYTHONPATH": f"{info.parent}:{Path(__file__).parent.parent}"}


@pytest.mark.parametrize(
    ("points", "said"),
    [
        (
            "gone = no_such_module:KIND\n",
            "nccl-launch: server kind 'gone' (no_such_module:KIND, entry point of "
            "nccl_launch.kinds) cannot be loaded: ModuleNotFoundError: No module named "
            "'no_such_module'\n",
        ),
        (
            f"vllm = {__name__}:TWIN\n",
            f"nccl-launch: server kind 'vllm' ({__name__}:TWIN, entry point of "
            "nccl_launch.kinds): a server kind named 'vllm' is registered already\n",
        ),
    ],
    ids=["cannot-load", "name-taken"],
)
def test_an_installed_kind_that_cannot_be_used_is_a_host_problem_said_in_one_line(
    points: str, said: str, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """Left out, its credentials would go unmasked: every command refuses, naming it."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    argv = [console_script(), "run", "--dry-run", "p", "--", "python3", "-c", "pass"]
    env = _plugins(tmp_path, points)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (3, said)


def test_a_kind_registered_under_a_taken_name_is_refused_as_this_hosts_problem() -> None:
    with pytest.raises(Refused) as refused:
        kinds.register(TWIN)
    [finding] = refused.value.findings
    assert (finding.code, finding.cause, refused.value.exit_code) == ("kind-name-taken", "host", 3)
    assert finding.message == "a server kind named 'vllm' is registered already"
