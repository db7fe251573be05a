"""`show`, `diff`, `list`, help and error mapping, through the installed console script."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from nccl_launch import cli
from nccl_launch.profile import overview
from tests.conftest import Isolation, RunCli, WriteProfile

V1 = """
schema = 1
name = "tuned"
version = 1

[nccl]
PROTO = "Simple"
BUFFSIZE = "4MiB"
"""

V2 = """
schema = 1
name = "tuned"
version = 2
description = "after tuning"
extends = "base"

[nccl]
PROTO = "LL"
BUFFSIZE = "16MiB"

[env]
HF_TOKEN = "hf_secret"

[server]
python = "/opt/ml-env/bin/python3"
model_path = "/models/Kimi-K2.5"
tp_size = 8
"""

BASE = """
schema = 1
name = "base"
version = 1

[nccl]
P2P_LEVEL = "SYS"
MAX_NCHANNELS = 16

[policy]
undeclared_nccl = "warn"
"""


@pytest.fixture
def versions(write_profile: WriteProfile) -> None:
    write_profile("base", BASE)
    write_profile("tuned", V2)
    write_profile("tuned-v1", V1, folder="archive")


def test_show_toml_is_the_resolved_profile_and_reads_back(
    versions: None, nccl_launch: RunCli, tmp_path: Path
) -> None:
    result = nccl_launch("show", "tuned")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# tuned@2 sha256:")
    data = tomllib.loads(result.stdout)
    assert data["nccl"] == {
        "P2P_LEVEL": "SYS",
        "MAX_NCHANNELS": "16",
        "PROTO": "LL",
        "BUFFSIZE": "16777216",
    }
    assert data["policy"]["undeclared_nccl"] == "warn"
    # The output is itself a valid profile with the same digest.
    (tmp_path / "profiles" / "copy.toml").write_text(
        result.stdout.replace('extends = "base"\n', "")
    )
    digest = result.stdout.split()[2]
    again = nccl_launch("show", "profiles/copy.toml")
    assert again.stdout.split()[2] == digest


def test_show_env_is_what_the_child_gets(versions: None, nccl_launch: RunCli) -> None:
    result = nccl_launch("show", "tuned", "--format", "env")
    lines = result.stdout.splitlines()
    assert "NCCL_BUFFSIZE=16777216" in lines
    assert "NCCL_P2P_LEVEL=SYS" in lines
    assert "HF_TOKEN=hf_secret" in lines  # an export for the user's own deployment, not a report
    assert "NCCL_LAUNCH_PROFILE=tuned@2" in lines
    assert "SPT_NOENV=1" in lines


def test_show_json_has_versioned_keys(versions: None, nccl_launch: RunCli) -> None:
    data = json.loads(nccl_launch("show", "tuned", "--format", "json").stdout)
    assert set(data) == {
        "schema_version", "profile", "digest", "path", "chain", "env", "sources",
        "markers", "argv", "warnings", "resolved",
    }  # fmt: skip
    assert data["schema_version"] == 1
    assert data["chain"] == ["profiles/base.toml", "profiles/tuned.toml"]
    assert data["sources"]["NCCL_P2P_LEVEL"] == "profiles/base.toml"
    assert data["argv"][:4] == [
        "/opt/ml-env/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
    ]
    assert data["warnings"] == [
        "NCCL_MAX_NCHANNELS is deprecated (Maximum channels/CTAs; deprecated in favor of "
        "NCCL_MAX_CTAS)"
    ]


def test_diff_two_versions_by_name(versions: None, nccl_launch: RunCli, tmp_path: Path) -> None:
    env = {"NCCL_LAUNCH_PATH": str(tmp_path / "archive")}
    result = nccl_launch("diff", "tuned@1", "tuned@2", env=env)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("--- tuned@1 (sha256:")
    assert lines[0].endswith(str(tmp_path / "archive" / "tuned-v1.toml"))
    assert lines[1].startswith("+++ tuned@2 (sha256:")
    assert '  ~ NCCL_BUFFSIZE           "4194304" -> "16777216"' in lines
    assert '  + NCCL_P2P_LEVEL          "SYS"' in lines
    assert '  + HF_TOKEN                "***"' in lines
    assert ["+", "argv", '"/opt/ml-env/bin/python3', "-m"] in [line.split()[:4] for line in lines]
    assert '  ~ policy.undeclared_nccl  "refuse" -> "warn"' in lines
    assert lines[-1] == "7 differences"


def test_diff_of_equal_meaning_is_empty(write_profile: WriteProfile, nccl_launch: RunCli) -> None:
    write_profile("a", 'schema = 1\nname = "a"\nversion = 1\n[nccl]\nBUFFSIZE = "16MiB"\n')
    write_profile("b", 'schema = 1\nname = "b"\nversion = 7\n[nccl]\nBUFFSIZE = 16777216\n')
    result = nccl_launch("diff", "a", "b")
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == "0 differences"


def test_list_shows_the_search_path(
    versions: None, write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path
) -> None:
    write_profile("broken", "schema = 1\nname = ")
    result = nccl_launch("list", env={"NCCL_LAUNCH_PATH": str(tmp_path / "archive")})
    assert result.returncode == 0
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["NAME", "VERSION", "DIGEST", "PATH"]
    names = [(row[0], row[1]) for row in rows[1:] if row[0] != "(invalid)"]
    assert names == [("base", "1"), ("tuned", "2"), ("tuned", "1")]
    assert any(row[0] == "(invalid)" and row[-1] == "profiles/broken.toml" for row in rows)


def test_list_with_nothing_says_where_it_looked(nccl_launch: RunCli, isolated: Isolation) -> None:
    result = nccl_launch("list")
    assert result.returncode == 0
    assert result.stdout.startswith(f"no profiles in profiles, {isolated.system_dir}")


def test_name_lookup_finds_a_declared_name_in_another_file(
    versions: None, nccl_launch: RunCli, tmp_path: Path
) -> None:
    env = {"NCCL_LAUNCH_PATH": str(tmp_path / "archive")}
    assert nccl_launch("show", "tuned@1", env=env).stdout.startswith("# tuned@1 ")
    assert nccl_launch("show", "tuned@3", env=env).returncode == 2
    assert nccl_launch("show", "tuned@x", env=env).returncode == 2


COMMANDS = sorted(cli.cli.commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, nccl_launch: RunCli) -> None:
    result = nccl_launch(command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"Usage: nccl-launch {command}")
    assert cli.cli.commands[command].help


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_documented_with_its_current_help(
    command: str, nccl_launch: RunCli
) -> None:
    reference = (Path(__file__).parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    assert f"## `nccl-launch {command}`" in reference
    help_text = nccl_launch(command, "--help", env={"COLUMNS": "80"}).stdout
    assert help_text in reference, f"docs/commands.md has stale help for {command}"


def test_usage_errors_exit_2(nccl_launch: RunCli) -> None:
    result = nccl_launch("frobnicate")
    assert result.returncode == 2
    assert "No such command 'frobnicate'" in result.stderr
    assert nccl_launch("--version").stdout.startswith("nccl-launch, version ")


def test_python_dash_m_runs_the_same_cli(nccl_launch: RunCli) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "nccl_launch", "--help"], capture_output=True, text=True, check=False
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
    from nccl_launch.env.drift import DriftEntry
    from nccl_launch.launch.preflight_report import Check, PreflightReport
    from nccl_launch.live.compare import LiveReport, ProcessReport
    from nccl_launch.live.verify_log import KeyReport, LogReport

    contracts: dict[type[BaseModel], list[str]] = {
        LiveReport: ["schema_version", "profile", "digest", "path", "main_pid",
                     "running_profile", "running_digest", "processes"],
        ProcessReport: ["pid", "title", "readable", "reason", "entries", "matched"],
        DriftEntry: ["key", "kind", "expected", "actual", "source", "note", "reason",
                     "tolerated"],
        PreflightReport: ["schema_version", "profile", "digest", "argv", "checks", "sglang"],
        Check: ["name", "status", "message", "detail", "drift"],
        LogReport: ["schema_version", "profile", "digest", "source", "processes", "keys",
                    "undeclared"],
        KeyReport: ["key", "expected", "verdict", "detail"],
    }  # fmt: skip
    for model, keys in contracts.items():
        assert [*model.model_fields, *model.model_computed_fields] == keys, model.__name__
