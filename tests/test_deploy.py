"""Deployment artefacts read back by their consumers: the exports (python-dotenv, bash,
systemd, Kubernetes JSON) and the systemd unit (systemd-analyze)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

from tests.conftest import RunCli, WriteProfile

TRICKY = {
    "SPACES": "two words",
    "QUOTES": 'it\'s "quoted"',
    "BACKSLASH": "C:\\new\\table",
    "DOLLAR": "$HOME and 100%",
    "NEWLINE": "line one\nline two",
    "EQUALS_HASH": "a=b # not a comment",
}
PROFILE = """
schema = 1
name = "tricky"
version = 3
[nccl]
PROTO = "ll"
BUFFSIZE = "16MiB"
[env]
""" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in TRICKY.items())


@pytest.fixture
def expected(write_profile: WriteProfile, nccl_launch: RunCli) -> dict[str, str]:
    write_profile("tricky", PROFILE)
    shown = json.loads(nccl_launch("show", "tricky", "--format", "json").stdout)
    env: dict[str, str] = shown["env"] | shown["markers"]
    assert env["NCCL_PROTO"] == "LL"
    assert env["NCCL_BUFFSIZE"] == "16777216"
    return env


def show(nccl_launch: RunCli, fmt: str) -> str:
    result = nccl_launch("show", "tricky", "--format", fmt)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dotenv_reads_back_the_same_values(expected: dict[str, str], nccl_launch: RunCli) -> None:
    text = show(nccl_launch, "dotenv")
    assert dict(dotenv_values(stream=io.StringIO(text))) == expected


def test_dotenv_refuses_what_dotenv_readers_would_expand(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile("tricky", PROFILE + 'TEMPLATE = "${HOME}/x"\n')
    result = nccl_launch("show", "tricky", "--format", "dotenv")
    assert result.returncode == 2
    assert "TEMPLATE: '${HOME}/x' holds '${', which dotenv readers expand" in result.stderr


def test_bash_sources_the_shell_form(
    expected: dict[str, str], nccl_launch: RunCli, tmp_path: Path
) -> None:
    exports = tmp_path / "profile.sh"
    exports.write_text(show(nccl_launch, "shell"))
    dump = f'{sys.executable} -c "import json, os; print(json.dumps(dict(os.environ)))"'
    done = subprocess.run(["bash", "-c", f". {exports} && {dump}"], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)  # fmt: skip
    sourced = json.loads(done.stdout)
    assert {key: sourced[key] for key in expected} == expected


def test_systemd_parses_the_environment_lines(
    expected: dict[str, str], nccl_launch: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    lines = show(nccl_launch, "systemd-env")
    assert 'Environment="QUOTES=it\'s \\"quoted\\""' in lines.splitlines()
    assert 'Environment="DOLLAR=$HOME and 100%%"' in lines.splitlines()
    unit = tmp_path / "tricky.service"
    body = "[Unit]\nDescription=t\n\n[Service]\nType=exec\n{env}ExecStart=/bin/true\n"
    unit.write_text(body.format(env=lines))
    done = subprocess.run([systemd_analyze, "verify", str(unit)], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    # The same check does notice a badly quoted line: it really parses Environment=.
    unit.write_text(body.format(env='Environment="A=x y" "B=q"uote" "=x"\n'))
    done = subprocess.run([systemd_analyze, "verify", str(unit)], capture_output=True, text=True)
    assert "Invalid syntax" in done.stderr


def test_k8s_env_list_is_json_and_yaml(expected: dict[str, str], nccl_launch: RunCli) -> None:
    items = json.loads(show(nccl_launch, "k8s"))
    assert items == [{"name": key, "value": value} for key, value in expected.items()]


def test_plain_env_lists_every_variable(expected: dict[str, str], nccl_launch: RunCli) -> None:
    text = show(nccl_launch, "env")
    assert text.startswith("NCCL_PROTO=LL\nNCCL_BUFFSIZE=16777216\nSPACES=two words\n")


# The systemd unit.

SERVER = """
schema = 1
name = "served"
version = 2
description = "Kimi-K2.5 at 100% on 8 GPUs"
[server]
python = "{python}"
model_path = "/models/Kimi-K2.5"
tp_size = 8
cwd = "/srv/my models"
"""


def test_systemd_unit_passes_systemd_analyze(
    write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    path = write_profile("served", SERVER.format(python=sys.executable))
    result = nccl_launch("systemd", "served", "--user", "root")
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    lines = unit.splitlines()
    assert "Type=exec" in lines
    assert "User=root" in lines
    assert "WorkingDirectory=/srv/my models" in lines
    assert any(
        line.startswith("ExecStartPre=") and line.endswith(f"preflight {path}") for line in lines
    )
    assert any(line.startswith("ExecStart=") and line.endswith(f"run {path}") for line in lines)
    assert "Description=Kimi-K2.5 at 100%% on 8 GPUs (served@2)" in lines
    assert {"TimeoutStartSec=1800", "Restart=on-failure", "KillMode=mixed"} <= set(lines)
    target = tmp_path / "units" / "sglang-served.service"
    written = nccl_launch("systemd", "served", "--output", str(target))
    assert written.returncode == 0
    done = subprocess.run([systemd_analyze, "verify", str(target)], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    again = nccl_launch("systemd", "served", "--output", str(target))
    assert (again.returncode, again.stderr) == (
        2,
        f"nccl-launch: {target} exists; pass --force to replace it\n",
    )


def test_systemd_needs_a_server_table(write_profile: WriteProfile, nccl_launch: RunCli) -> None:
    write_profile("env-only", 'schema = 1\nname = "env-only"\nversion = 1\n')
    result = nccl_launch("systemd", "env-only")
    assert result.returncode == 2
    assert "no [server] table, so no server to run as a service" in result.stderr
