"""Looking at a path a user names (`[server] python`, a model, a cwd, a library folder): what
is there, or a finding saying why this user cannot look, never an OSError."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from nccl_launch.findings import Finding, Refused

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def kind_of(mode: int) -> str:
    """What a file of `mode` that is no regular file is, in words ("a FIFO")."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def status_of(path: Path, what: str, *, report_too_long: bool = True) -> os.stat_result | None:
    """The status of `path` (through symlinks), which the user named as `what`; None when
    nothing is there (a dangling symlink, a file on the way where a folder should be; with
    `report_too_long` False, a name longer than the system takes, which no file can have).
    Refused, this host's problem, names `what`, the path and the system's reason when this
    user cannot tell (a folder on its way it may not search, a name too long, a loop)."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # a NUL byte: nothing a kernel takes
        message = "a path cannot hold a NUL byte"
        found = Finding("nul-in-path", f"{what} {str(path)!r}", message, cause="host")
        raise Refused(found) from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG and not report_too_long:
            return None
        fix = ""
        if isinstance(error, PermissionError):
            fix = f"every folder on its way must be searchable by uid {os.geteuid()}, the user "
            fix += "running this"
        message = f"cannot look at it: {error.strerror}"
        raise Refused(
            Finding("cannot-look", f"{what} {path}", message, fix, cause="host")
        ) from None


def is_regular(path: Path) -> bool:
    """Whether `path` is a regular file (through symlinks) for a lookup that passes over what
    this user cannot look at, as bash's PATH search and the dynamic loader do."""
    try:
        status = status_of(path, str(path))
    except Refused:
        return False
    return status is not None and stat.S_ISREG(status.st_mode)
