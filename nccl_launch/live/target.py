"""How a user names a running server: the target (a PID, a port, a pidfile, a systemd unit, a
URL), and the numbers it may hold (a fact, read by the options without importing psutil)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nccl_launch.secrets.url import Url

PID_LIMIT = (1 << 22) - 1  # pid_max is at most 2**22 (PID_MAX_LIMIT), and PIDs stay below it
PORT_LIMIT = 65535


@dataclass(frozen=True)
class Target:
    """How the user named the server: exactly one of pid, port, pidfile and unit; or a url,
    with the pid of the process that must own its listener when it is given."""

    pid: int | None = None
    port: int | None = None
    pidfile: Path | None = None
    unit: str | None = None
    url: Url | None = None
