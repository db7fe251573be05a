"""Looking at a path a user names (`[server] python`, a model, a cwd, a library folder): what
is there, or one line saying why this user cannot look, never an OSError; and the error of a
file that is not read."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from nccl_launch.errors import EXIT_HOST, HostError, UsageError

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


class FileError(UsageError):
    """A file that is not read: missing, not a regular file, too large, untrusted, not text."""


class ReadFailed(FileError):
    """A file (or stdin) that opened but could not be read: an I/O error of this host (EIO),
    which no input fixes."""

    exit_code = EXIT_HOST


class PathError(HostError):
    """A path that cannot be looked at by this user: a folder on its way this user may not
    search (a venv under /root for a unit's User=), a name too long, a loop of symlinks."""


def kind_of(mode: int) -> str:
    """What a file of `mode` that is no regular file is, in words ("a FIFO")."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def status_of(path: Path, what: str, *, report_too_long: bool = True) -> os.stat_result | None:
    """The status of `path` (through symlinks), which the user named as `what`; None when
    nothing is there (a dangling symlink, a file on the way where a folder should be; with
    `report_too_long` False, a name longer than the system takes, which no file can have).
    PathError names `what`, the path and the system's reason when this user cannot tell."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # a NUL byte: nothing a kernel takes
        raise PathError(f"{what} {str(path)!r}: a path cannot hold a NUL byte") from None
    except PermissionError as error:
        raise PathError(
            f"{what} {path}: cannot look at it: {error.strerror}; every folder on its way must "
            f"be searchable by uid {os.geteuid()}, the user running this"
        ) from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG and not report_too_long:
            return None
        raise PathError(f"{what} {path}: cannot look at it: {error.strerror}") from None


def is_regular(path: Path) -> bool:
    """Whether `path` is a regular file (through symlinks) for a lookup that passes over what
    this user cannot look at, as bash's PATH search and the dynamic loader do."""
    try:
        status = status_of(path, str(path))
    except PathError:
        return False
    return status is not None and stat.S_ISREG(status.st_mode)
