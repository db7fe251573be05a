"""Asking a program of the host (systemctl, nvidia-smi, ldconfig, a server's interpreter) and
reading its answer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence


def ask(
    argv: Sequence[str],
    timeout: float,
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """What `argv` printed, as text: a byte that is not UTF-8 is read as U+FFFD, never a
    crash; it reads no input. OSError or subprocess.TimeoutExpired when it cannot answer.
    It runs in a process group of its own, killed whole when its time is up (or Ctrl-C
    stops the wait): nothing it started outlives a question it left unanswered."""
    with subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        cwd=cwd,
        env=None if env is None else dict(env),
        process_group=0,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            if process.returncode is None:  # not reaped: its PID, the group's ID, is still its
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(list(argv), process.returncode, stdout, stderr)
