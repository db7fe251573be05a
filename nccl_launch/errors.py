"""Exit codes (docs/commands.md, "Exit codes"), and whose problem earns which.

Every problem a user meets is a `findings.Finding`, raised as `findings.Refused` where it stops
a command; its `cause` says whose it is, and this map the exit code that follows.
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
# no input fixes: this host's, wherever a file is written.
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
