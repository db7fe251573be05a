"""Writing: atomic, respecting the umask and keeping the mode of the file replaced; the one
writer of every file a command writes."""

from __future__ import annotations

import itertools
import os
import stat
import tempfile
from pathlib import Path

from nccl_launch.errors import HOST_ERRNOS, Cause
from nccl_launch.files.paths import kind_of
from nccl_launch.files.trust import check_write_way
from nccl_launch.findings import Finding, Refused


def atomic_write(path: Path, text: str, *, replace: bool, mode: int | None = None) -> None:
    """Write `text` to `path` through a temporary file, so that a reader sees the old content
    or the new, never half; without `replace` an existing file is never touched.

    The mode is `mode` when given (0600 for secrets), else that of the file replaced when it
    is this user's, else 0666 less the umask, as a plain write would create it. On any error
    (a full disk) the temporary file is removed. A path that is no regular file (a device, a
    FIFO, a directory, or a symlink to one) is refused, never replaced. Raises
    FileExistsError when `replace` is false and the file exists, even if it appears
    meanwhile: the last step is then a hard link, which fails rather than overwrite.
    """
    data = text.encode("utf-8")  # an unencodable text fails here, before any file exists
    refuse_special(path)
    if not replace and path.exists():
        raise FileExistsError(path)
    if mode is None:
        try:
            replaced = path.stat()
        except OSError:
            replaced = None
        if replaced is not None and replaced.st_uid == os.geteuid():
            mode = stat.S_IMODE(replaced.st_mode)
        else:  # a mode another user chose (0666 in /tmp) is theirs, not this file's
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    missing = list(itertools.takewhile(lambda folder: not folder.is_dir(), path.parents))
    for folder in reversed(missing):  # never writable by others, whatever the umask: as root,
        folder.mkdir(mode=0o755, exist_ok=True)  # `run` would refuse what lies in them
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if replace:
            temporary.replace(path)
        else:
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def refuse_special(path: Path) -> None:
    """Refused when `path` (through symlinks) exists and is no regular file: a device, a
    FIFO or a directory is never replaced by a file (as root, /dev/null would be)."""
    try:
        status = path.stat()
    except (OSError, ValueError):  # absent (or a dangling symlink): a file is created
        return
    if not stat.S_ISREG(status.st_mode):
        fix = "only a regular file is written"
        raise Refused(Finding("not-regular", str(path), kind_of(status.st_mode), fix))


def check_output(path: Path, *, replace: bool, fix: str = "pass --force to replace it") -> None:
    """What `write_output` would refuse of `path`, said now (an existing file kept without
    `replace` with the caller's `fix`): a command writing two files says it before it writes
    either, one that validates first says it before that."""
    refuse_special(path)
    if not replace and os.path.lexists(path):
        raise Refused(Finding("exists", "", f"{path} exists", fix))


def write_output(path: Path, text: str, *, replace: bool, mode: int | None = None) -> None:
    """`atomic_write`, the writer of every file a command writes: any OSError is refused,
    naming the path (a folder this user may not write), an existing file kept without
    `replace` one that says to pass --force."""
    check_write_way(path)
    try:
        atomic_write(path, text, replace=replace, mode=mode)
    except FileExistsError as error:
        if error.errno is None or error.filename2 is not None:  # the file, not a folder
            message = f"{path} exists"
            raise Refused(Finding("exists", "", message, "pass --force to replace it")) from None
        message = f"cannot write: {error.filename} is not a directory"
        raise Refused(Finding("unwritable", str(path), message)) from None
    except PermissionError as error:
        fix = f"it is replaced by a new file written in {path.parent}, so that folder must be "
        fix += "writable by this user"
        message = f"cannot write: {error.strerror}"
        raise Refused(Finding("unwritable", str(path), message, fix)) from None
    except OSError as error:
        cause: Cause = "host" if error.errno in HOST_ERRNOS else "profile"
        message = f"cannot write: {error.strerror}"
        raise Refused(Finding("unwritable", str(path), message, cause=cause)) from None
