"""Isolation for every test, and helpers to run the installed console script for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CHILD = HERE / "helpers" / "child.py"
_CLEARED_PREFIXES = ("NCCL_", "SGLANG_", "SPT_", "SLURM_", "LWS_")

# A venv with the real SGLang 0.5.23 (made by .ci/sglang-venv); read before isolation clears it.
SGLANG_PYTHON = os.environ.get("NCCL_LAUNCH_TEST_SGLANG_PYTHON")
# Set by CI and the README's test command: a missing tool is then a failure, not a skip.
REQUIRE_TOOLS = os.environ.get("NCCL_LAUNCH_REQUIRE_TOOLS") == "1"


def require(found: str | None, message: str) -> str:
    """`found`, or fail (under NCCL_LAUNCH_REQUIRE_TOOLS=1) or skip with `message`."""
    if found:
        return found
    if REQUIRE_TOOLS:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def sglang_python() -> str:
    """The interpreter of a real SGLang install."""
    message = "set NCCL_LAUNCH_TEST_SGLANG_PYTHON=$(.ci/sglang-venv) to run SGLang's parser"
    return require(SGLANG_PYTHON, message)


@pytest.fixture
def systemd_analyze() -> str:
    """Debian's systemd-analyze, which parses unit files like systemd does."""
    return require(shutil.which("systemd-analyze"), "install Debian's systemd package")


def console_script() -> str:
    """The `nccl-launch` installed next to this interpreter (the real entry point, not click)."""
    script = Path(sys.executable).with_name("nccl-launch")
    found = str(script) if script.exists() else shutil.which("nccl-launch")
    if found is None:
        pytest.fail("nccl-launch is not installed; run: pip install -e '.[test]'")
    return found


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No NCCL/SGLang variables from the host, no ~/.nccl.conf of the host's user, no
    system profiles, and `./profiles` is an empty temp directory."""
    for key in list(os.environ):
        if key.startswith(_CLEARED_PREFIXES):
            monkeypatch.delenv(key)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NCCL_LAUNCH_SYSTEM_DIR", str(tmp_path / "etc-profiles"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    return tmp_path


WriteProfile = Callable[..., Path]


@pytest.fixture
def write_profile(tmp_path: Path) -> WriteProfile:
    """Write `profiles/NAME.toml` (or `folder/NAME.toml`) from dedented TOML text."""

    def write(name: str, text: str, folder: str = "profiles") -> Path:
        path = tmp_path / folder / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    return write


RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def nccl_launch() -> RunCli:
    """Run the console script with the (isolated) environment plus `env` overrides."""

    def run(
        *args: str, env: dict[str, str] | None = None, stdin_path: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script(), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            input=stdin_path.read_text() if stdin_path else None,
            timeout=60,
            check=False,
        )

    return run
