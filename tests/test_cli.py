"""The CLI as a whole: help for every command, the docs' copy of it, exit codes, JSON keys."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from nccl_launch import cli
from nccl_launch.profile import overview
from tests.conftest import RunCli, console_script
from tests.helpers import sleeper

COMMANDS = sorted(cli.cli.commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, run_cli: RunCli) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"Usage: nccl-launch {command}")
    assert cli.cli.commands[command].help


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_documented_with_its_current_help(command: str, run_cli: RunCli) -> None:
    reference = (Path(__file__).parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    assert f"## `nccl-launch {command}`" in reference
    help_text = run_cli(command, "--help", env={"COLUMNS": "80"}).stdout
    assert help_text in reference, f"docs/commands.md has stale help for {command}"


def test_usage_errors_exit_2(run_cli: RunCli) -> None:
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "No such command 'frobnicate'" in result.stderr
    assert run_cli("--version").stdout.startswith("nccl-launch, version ")


def test_python_dash_m_runs_the_same_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nccl_launch", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0
    assert "Usage: nccl-launch" in result.stdout


def test_internal_error_exits_4_with_a_short_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bug cannot be provoked from outside on purpose, so one is planted in-process.
    def broken(ref: str) -> None:
        raise KeyError("planted")

    monkeypatch.setattr(overview, "load_profile", broken)
    assert cli.main(["validate", "anything"]) == 4
    err = capsys.readouterr().err
    assert err == (
        "nccl-launch: internal error: KeyError: 'planted' (a bug; rerun with --debug for the "
        "traceback)\n"
    )
    assert cli.main(["--debug", "validate", "anything"]) == 4
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_json_outputs_keep_their_keys() -> None:
    """The versioned JSON contracts: changing a key must change this test (and the version)."""
    from nccl_launch.env.drift import DriftEntry, DriftReport
    from nccl_launch.findings import Finding
    from nccl_launch.launch.preflight_report import Check, PreflightReport
    from nccl_launch.live.compare import LiveReport, ProcessReport
    from nccl_launch.live.nccl_logs import NcclLog
    from nccl_launch.live.verify_log import KeyReport, LogReport
    from nccl_launch.profile.overview import ValidatedFile, Validation
    from nccl_launch.report import ReportedFinding

    contracts: dict[type[BaseModel], list[str]] = {
        LiveReport: ["schema_version", "profile", "digest", "path", "main_pid",
                     "running_profile", "running_digest", "processes", "profile_error",
                     "unchecked_env_files"],
        ProcessReport: ["pid", "title", "readable", "reason", "entries", "matched", "nccl_log"],
        NcclLog: ["file", "state", "reason", "confirmed", "not_read", "read_bytes",
                  "size_bytes"],
        PreflightReport: ["schema_version", "profile", "digest", "argv", "checks"],
        LogReport: ["schema_version", "profile", "digest", "source", "processes", "keys",
                    "undeclared", "reasons", "communicators", "warnings", "files"],
        KeyReport: ["key", "expected", "verdict", "detail"],
        Validation: ["schema_version", "files", "invalid"],
        ValidatedFile: ["path", "profile", "digest", "valid", "findings", "accepted"],
        ReportedFinding: [
            "code", "severity", "file", "location", "message", "fix", "cause", "details"
        ],
        DriftReport: ["profile", "digest", "entries", "matched"],
        DriftEntry: ["key", "kind", "expected", "actual", "source", "note", "reason",
                     "declared_by", "tolerated"],
    }  # fmt: skip
    for model, keys in contracts.items():
        shown = [name for name, field in model.model_fields.items() if not field.exclude]
        assert [*shown, *model.model_computed_fields] == keys, model.__name__
    entry = DriftEntry(key="NCCL_PROTO", kind="changed", expected="LL", actual="Simple")
    assert list(entry.model_dump(mode="json")) == contracts[DriftEntry]
    # A check is a pass or a finding, written as one documented shape.
    found = Finding("port", "", "in use", cause="host", details=("pid 1",))
    documented = ["name", "status", "message", "detail", "drift"]
    for check in (Check(name="port", passed="free"), Check(name="port", finding=found)):
        assert list(check.model_dump(mode="json")) == documented
    # Then one key per server kind: what its own parser made of the argv.
    report = PreflightReport(profile="p@1", digest="sha256:0", argv=[], checks=[])
    assert list(report.model_dump(mode="json")) == [*contracts[PreflightReport], "sglang", "vllm"]


@pytest.mark.parametrize("entry", [["nccl-launch"], [sys.executable, "-m", "nccl_launch"]])
def test_a_reader_that_goes_away_ends_it_by_sigpipe_not_exit_1(entry: list[str]) -> None:
    # `nccl-launch check ... | grep -q X` closes the pipe early; exit 1 would read as drift.
    if entry == ["nccl-launch"]:
        entry = [console_script()]
    reader, writer = os.pipe()
    os.close(reader)  # gone before the first write
    done = subprocess.run(
        [*entry, "schema"],
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=120,
    )
    os.close(writer)
    assert done.returncode == -signal.SIGPIPE
    assert done.stderr == ""


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize(
    "command",
    [
        ["show", "--format", "json", "p.toml"],
        ["validate", "p.toml"],
        ["check", "p.toml", "--pid", "PID"],  # a drifted process: exit 1 unless unseen
        ["--help"],
    ],
)
def test_output_that_standard_output_cannot_take_is_exit_3(
    command: list[str], buffered: bool, tmp_path: Path
) -> None:
    """`> /dev/full` (a full disk): the reader has seen nothing, whatever the command's
    outcome; one line, never an internal error nor the interpreter's traceback at exit."""
    (tmp_path / "p.toml").write_text('schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    env |= {} if buffered else {"PYTHONUNBUFFERED": "1"}
    with sleeper({b"NCCL_PROTO": b"Simple"}) as pid, open("/dev/full", "w") as full:  # noqa: PTH123
        argv = [console_script(), *(str(pid) if word == "PID" else word for word in command)]
        result = subprocess.run(
            argv, stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
            timeout=120, check=False,
        )  # fmt: skip
    assert (result.returncode, result.stderr) == (
        3,
        "nccl-launch: standard output: cannot write: No space left on device\n",
    )


# Runs its arguments as a shell left in a deleted directory does (`gone` under the test's cwd).
IN_A_DELETED_DIRECTORY = 'cd gone && rmdir ../gone && exec "$@"'


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["validate", "rtx6000bw-pcie-tp8"], 0),
        (["list"], 0),
        (["run", "--dry-run", "kimi-k25-rtx6000bw-tp8-eagle3"], 0),
        (["validate", "profiles/gone.toml"], 2),
        (["new", "mine"], 2),
    ],
)
def test_a_deleted_current_directory_is_no_internal_error(
    args: list[str], code: int, tmp_path: Path
) -> None:
    """A shell left in a deleted directory: `./profiles` holds nothing, other paths work."""
    (tmp_path / "gone").mkdir()
    result = subprocess.run(
        ["sh", "-c", IN_A_DELETED_DIRECTORY, "sh", console_script(), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == code, result.stderr
    assert "internal error" not in result.stderr


def test_completion_in_a_deleted_current_directory_offers_the_shipped_names(
    tmp_path: Path,
) -> None:
    (tmp_path / "gone").mkdir()
    env = {"_NCCL_LAUNCH_COMPLETE": "bash_complete", "COMP_WORDS": "nccl-launch validate rtx"}
    result = subprocess.run(
        ["sh", "-c", IN_A_DELETED_DIRECTORY, "sh", console_script()],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "COMP_CWORD": "2"},
        check=False,
        timeout=120,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert "plain,rtx6000bw-pcie-tp8" in result.stdout.splitlines()
