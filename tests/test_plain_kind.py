"""A third server kind, of the tests only (tests/plain_kind): a plain OpenAI-compatible server
(tests/standin/plain_server.py), registered as a kind shipped outside nccl-launch is, by the
entry point of an installed distribution (written here) for the console script, and by
`kinds.register` in this process. `run` (dry, and a real exec), `preflight`, `check`, `bench`
and `tune` take it; nothing of nccl_launch/ names it."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from nccl_launch import kinds
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, Server, free_port
from tests.plain_kind.kind import PLAIN

PROFILE = """
schema = 1
name = "plain"
version = 1
[nccl]
PROTO = "LL"
ALGO = "Ring"
[server]
kind = "plain"
python = "{python}"
model_path = "/models/m"
port = {port}
"""
BENCH = ("--max-tokens", "60", "--runs", "2", "--warmup", "1")
# tune's short trials, each rated by the NCCL environment it started with: LL128 doubles it.
TRIALS = ("--max-tokens", "40", "--runs", "3", "--warmup", "0", "--ready-timeout", "10")
RATED = {
    "STANDIN_TUNE_MODEL": "1",
    "STANDIN_SEED": "0",
    "STANDIN_TOKEN_RATE": "100",
    "STANDIN_TUNE_FACTORS": json.dumps({"NCCL_PROTO": {"LL128": 2.0}}),
}


@pytest.fixture
def plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The kind registered here and, through its entry point, in every process started (the
    console script finds the kind, the server its module)."""
    info = tmp_path / "plugins" / "plain_kind-1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plain-kind\nVersion: 1\n")
    point = "plain = tests.plain_kind.kind:PLAIN"  # the kind's one registration line
    (info / "entry_points.txt").write_text(f"[{kinds.ENTRY_POINTS}]\n{point}\n")
    monkeypatch.setenv("PYTHONPATH", f"{info.parent}:{Path(__file__).parent.parent}:{STANDIN}")
    kinds.register(PLAIN)
    try:
        yield
    finally:
        kinds.unregister(PLAIN)


@pytest.fixture
def started(plain: None, write_profile: WriteProfile) -> Iterator[Server]:
    """The plain server started by `nccl-launch run plain`, the console script's exec."""
    port = free_port()
    write_profile("plain", PROFILE.format(python=sys.executable, port=port))
    env = {"PYTHONPATH": os.environ["PYTHONPATH"], "STANDIN_TOKEN_RATE": "300"}
    server = Server([console_script(), "run", "plain"], env, port)
    yield server
    server.stop()


@pytest.mark.usefixtures("plain")
def test_run_dry_shows_the_argv_the_kind_builds(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("plain", PROFILE.format(python=sys.executable, port=8123))
    dry = run_cli("run", "--dry-run", "plain")
    assert dry.returncode == 0, dry.stderr
    assert "-m plain_server --model /models/m --port 8123" in dry.stdout
    repeated = run_cli("run", "--dry-run", "plain", "--", "--port", "9")
    assert repeated.returncode == 2
    assert "--port repeats the field port, which `--` cannot change" in repeated.stderr


@pytest.mark.usefixtures("plain")
def test_preflight_asks_the_installed_server(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("plain", PROFILE.format(python=sys.executable, port=free_port()))
    result = run_cli("preflight", "plain", "--format", "json", "--skip", "gpus")
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["plain"]["status"] == "ok", checks
    assert checks["argv"]["status"] == "ok", checks


def test_run_execs_the_server_and_check_finds_no_drift(started: Server, run_cli: RunCli) -> None:
    main = psutil.Process(started.process.pid)  # run exec'd: the server is the process started
    assert main.cmdline()[1:4] == ["-m", "plain_server", "--model"]
    assert (main.environ()["NCCL_PROTO"], main.environ()["NCCL_ALGO"]) == ("LL", "Ring")
    result = run_cli("check", "plain", "--port", str(started.port))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "no drift in 1 process"


def test_bench_measures_the_server(started: Server, run_cli: RunCli) -> None:
    result = run_cli("bench", "plain", *BENCH, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert (document["status"], document["server"]) == ("measured", "plain")
    assert (document["server_version"], document["model"]) == (None, "/models/m")
    assert [run["tokens"] for run in document["runs"]] == [60, 60]


@pytest.mark.slow
@pytest.mark.own_pid_namespace
@pytest.mark.usefixtures("plain")
def test_tune_finds_the_value_that_rates_best_and_writes_it(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("plain", PROFILE.format(python=sys.executable, port=free_port()))
    result = run_cli("tune", "plain", "--try", "PROTO=LL128", *TRIALS, "--write", env=RATED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "winner (changes PROTO=LL128): " in result.stdout, result.stdout
    written = tomllib.loads((tmp_path / "profiles" / "plain-2.toml").read_text())
    assert (written["server"]["kind"], written["nccl"]["PROTO"]) == ("plain", "LL128")
