"""Asking a tool of the host (systemctl, nvidia-smi, ldconfig) and reading its answer."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


def ask(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """What `argv` printed, as text: a byte that is not UTF-8 is read as U+FFFD, never a
    crash; it reads no input. OSError or subprocess.TimeoutExpired when it cannot answer."""
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
    )
