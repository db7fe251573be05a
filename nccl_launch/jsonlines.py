"""A JSON-lines store, under bench's history and tune's journal: a regular file appended to
one whole line at a time (`append_line`), under a size cap, never through a symlink,
optionally locked, and read back with each line that is no record named by its number; and
the state home where they (and `run --nccl-debug`'s NCCL logs) live."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from nccl_launch.errors import HOST_ERRNOS, Cause
from nccl_launch.files.base_dirs import BaseDirectory, base_directory, open_beneath
from nccl_launch.files.paths import kind_of, status_of
from nccl_launch.files.trust import check_write_way
from nccl_launch.findings import Finding, Refused, said_of

Record = TypeVar("Record", bound=BaseModel)
STATE = PurePath("nccl-launch")  # nccl-launch's folder under the state home
_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


# What to do where the state home is refused (another user's folder or symlink on its way).
STATE_FIX = "set XDG_STATE_HOME to a folder of your own"


def state_home() -> BaseDirectory:
    """$XDG_STATE_HOME, else ~/.local/state, as the XDG Base Directory specification says."""
    return base_directory("XDG_STATE_HOME", ".local/state")


def open_store(
    what: str,
    path: Path,
    *,
    full: Callable[[int], str | None],
    beneath: tuple[BaseDirectory, PurePath, str] | None = None,
    busy: str | None = None,
    aside: str | None = None,
) -> int:
    """A descriptor to append to the store `what` at `path`, a regular file, created with the
    folders to it when absent; or at `beneath` (a base directory, the name under it, the fix
    of a refusal), as files.open_beneath opens it. `full(size)` is why a file of that size
    takes no more lines, None while it does. With `busy`, the file is locked until closed:
    refused (this host's problem, `busy` its words) while another holds it. `aside`, when
    given, is the fix said of a symlink or a file that is no regular one."""
    flags = _FLAGS | os.O_CREAT
    try:
        if beneath is None:
            check_write_way(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        else:
            fd = open_beneath(beneath[0], beneath[1], flags, beneath[2])
    except Refused as error:
        raise said_of(f"{what} {path}", error) from None
    except OSError as error:
        with contextlib.suppress(OSError):
            _refuse_kind(what, path, os.lstat(path).st_mode, aside)  # why, if it is no regular file
        why = error.strerror
        if isinstance(error, (FileExistsError, NotADirectoryError)):  # mkdir met a file
            why = "a folder on its path is a file, not a directory"
        cause: Cause = "host" if error.errno in HOST_ERRNOS else "profile"
        found = Finding("unappendable", f"{what} {path}", f"cannot append: {why}", cause=cause)
        raise Refused(found) from None
    try:
        status = os.fstat(fd)
        _refuse_kind(what, path, status.st_mode, aside)
        refused = full(status.st_size)
        if refused is not None:
            raise Refused(Finding("store-full", f"{what} {path}", refused))
        if busy is not None:
            _lock(fd, f"{what} {path}", busy)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def absent(what: str, path: Path) -> bool:
    """Whether no file is at `path`, for a store created by its first line only; Refused
    at once when none could be created there (a folder on the path is a file, or one this
    user may not write)."""
    if os.path.lexists(path):
        return False
    folder = next(folder for folder in path.absolute().parents if os.path.lexists(folder))
    status = status_of(folder, f"{what} {path}: its folder")
    if status is None or not stat.S_ISDIR(status.st_mode):
        why = "a folder on its path is a file, not a directory"
    elif not os.access(folder, os.W_OK | os.X_OK):
        why = os.strerror(errno.EACCES)  # as the open would fail
    else:
        return True
    raise Refused(Finding("unappendable", f"{what} {path}", f"cannot append: {why}"))


def _refuse_kind(what: str, path: Path, mode: int, aside: str | None) -> None:
    if stat.S_ISLNK(mode):
        fix = aside or "name the file it points to"
        raise Refused(Finding("symlink", f"{what} {path}", "a symlink", fix))
    if not stat.S_ISREG(mode):
        fix = aside or "only a regular file is appended to"
        raise Refused(Finding("not-regular", f"{what} {path}", kind_of(mode), fix))


def _lock(fd: int, where: str, busy: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise Refused(Finding("store-busy", where, busy, cause="host")) from None


def parse_lines(
    code: str, text: str, path: Path, model: type[Record], noun: str
) -> tuple[list[Record], list[Finding]]:
    """Each line of `text` that is a `model`, and a warning `code` in `path` naming each
    other line but blank ones by its number: `PATH: line N: not a NOUN (why); skipped`."""
    found, problems = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            found.append(model.model_validate_json(line))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            why = f"{where}: {first['msg']}" if where else first["msg"]
            message = f"not a {noun} ({why}); skipped"
            problems.append(
                Finding(code, f"line {number}", message, "", "warning", "host", str(path))
            )
    return found, problems


def append_line(fd: int, line: str, what: str) -> None:
    """Append `line` (ending with a newline) to the file open at `fd` in one write, so it is
    whole or absent; after a last line left torn (a crash), on a line of its own. Refused
    (a host problem, exit 3) names `what` when the system refuses it or takes only part (a
    full disk)."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        line = "\n" + line
    data = line.encode()
    try:
        written = os.write(fd, data)
    except OSError as error:
        message = f"cannot append: {error.strerror}"
        raise Refused(Finding("unappendable", what, message, cause="host")) from None
    if written != len(data):  # a full disk: say so rather than leave it unsaid
        message = f"only {written} of {len(data)} bytes written"
        raise Refused(Finding("unappendable", what, message, cause="host"))
