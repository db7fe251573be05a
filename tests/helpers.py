"""Shared by the real-process tests: a free port, waiting for an event, the SGLang stand-in."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import pytest

STANDIN = Path(__file__).parent / "standin"
# `python -m sglang.launch_server` with PYTHONPATH=STANDIN; run as a script, it is any command.
STANDIN_SERVER = STANDIN / "sglang" / "launch_server.py"

T = TypeVar("T")


class Record(TypedDict):
    """What the stand-in received, as it writes it to $STANDIN_RECORD."""

    pid: int
    argv: list[str]
    cwd: str
    env: dict[str, str]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (now: the caller binds it soon)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    condition: Callable[[], T],
    what: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    timeout: float = 30,
) -> T:
    """Poll `condition` until it returns something true, and return that.

    With `process`, fail as soon as it has exited (a launch that was refused, a server that
    crashed) with its exit code and stderr, instead of waiting out `timeout`.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if process is not None and process.poll() is not None:
            pytest.fail(
                f"waiting for {what}: {process.args!r} exited with {process.returncode}"
                f"{_stderr(process)}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"waiting for {what}: not within {timeout} s")
        time.sleep(0.02)


def _stderr(process: subprocess.Popen[Any]) -> str:
    """What an exited process wrote to a captured stderr."""
    if process.stderr is None:
        return " (stderr not captured)"
    try:
        _, err = process.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        return " (its stderr is still held open by a process it started)"
    text = err.decode(errors="replace") if isinstance(err, bytes) else str(err or "")
    return f"; stderr:\n{text}" if text else "; stderr is empty"


def read_record(path: Path) -> Record:
    """The stand-in's record at `path`: written whole, so it exists only when complete."""
    record: Record = json.loads(path.read_text(encoding="utf-8"))
    return record


def wait_for_record(
    path: Path, process: subprocess.Popen[Any] | None = None, timeout: float = 30
) -> Record:
    """The record once the stand-in has written it (a server started in the background)."""
    wait_for(path.exists, f"the stand-in to write {path.name}", process=process, timeout=timeout)
    return read_record(path)
