"""Exit codes (docs/commands.md, "Exit codes"), and whose problem earns which.

Every problem a user meets is a `findings.Finding`; its `cause` says whose it is, and this map
the exit code that follows. The classes below `NcclLaunchError` are the old prose errors, left
until nothing raises them: raise `findings.Refused` instead.
"""

from __future__ import annotations

import errno
from typing import Literal

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_USAGE = 2
EXIT_HOST = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130
# Whose problem it is: the profile or the command line (exit 2: fixed there, on every host),
# this host (exit 3: a file or value of this machine; the same profile is valid elsewhere), or
# a profile that changed since its digest was pinned (exit 1, as drift is).
Cause = Literal["profile", "host", "drift"]
EXIT_CODES: dict[Cause, int] = {"drift": EXIT_DRIFT, "profile": EXIT_USAGE, "host": EXIT_HOST}
# A write that fails with one of these fails for the host (a full disk, a spent quota), which
# no input fixes: HostError, wherever a file is written.
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class NcclLaunchError(Exception):
    """Root of every error a user can cause; `lines()` is what they see, one line each once
    escaped (a path or a key may hold a newline)."""

    exit_code = EXIT_INTERNAL
    prefix = "nccl-launch: "

    def lines(self) -> list[str]:
        return [f"{self.prefix}{self}"]


class UsageError(NcclLaunchError):
    exit_code = EXIT_USAGE


class ProfileError(NcclLaunchError):
    """An invalid profile: each entry of `problems` is one line naming file, key and fix."""

    exit_code = EXIT_USAGE
    prefix = ""  # every line starts with the file's name

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems

    def lines(self) -> list[str]:
        return self.problems


class HostError(NcclLaunchError):
    exit_code = EXIT_HOST
