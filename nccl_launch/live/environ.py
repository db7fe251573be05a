"""The environment of a running process as NCCL reads it: with glibc's getenv."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

OVERWRITTEN = (
    "environment overwritten by setproctitle; start the server with SPT_NOENV=1 "
    "(nccl-launch run sets it)"
)


def getenv_view(pid: int, proc: Path = Path("/proc")) -> dict[str, str] | None:
    """Each name of /proc/PID/environ with the value getenv returns for it: the FIRST entry
    of that name (getenv scans in order and stops at a match; a later duplicate, which
    psutil and Python's os.environ take, is never read), past any entry without '=' (an
    empty one too: psutil stops there). Decoded as psutil does (surrogateescape).

    None when setproctitle cleared the memory the file shows: bytes remain, all zero, with
    no entry among them (a truly empty environment, env -i, has no bytes). Raises
    psutil.NoSuchProcess once the process ended, psutil.AccessDenied for another's process.
    """
    try:
        data = (proc / str(pid) / "environ").read_bytes()
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    except (FileNotFoundError, ProcessLookupError):
        raise psutil.NoSuchProcess(pid) from None
    env: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals and name:
            env.setdefault(os.fsdecode(name), os.fsdecode(value))
    return None if data and not env else env
