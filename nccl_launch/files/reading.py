"""Reading: only regular files, with a size cap, never blocking on a FIFO; streams line by
line, a line never held past its cap; a read the host fails (EIO) is this host's problem."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from nccl_launch.files.paths import kind_of
from nccl_launch.files.trust import check_trusted
from nccl_launch.findings import Finding, Refused

# A profile, env file, nccl.conf or pidfile is a few KiB; anything larger is a mistake.
MAX_BYTES = 1 << 20
# A line read from a stream is held in memory: NCCL's INFO lines and a server's events are
# some 200 bytes, so a longer line than this is none of them.
LINE_LIMIT = 1 << 20
LINE_END = re.compile(rb"\r\n|\r|\n")
CHUNK = 1 << 16


def _open_regular(path: Path, what: str, trusted: bool, folder: int | None = None) -> int:
    """A descriptor of `path` when it is a regular file (and trusted, if asked). It is looked
    at before it is opened: an O_PATH descriptor opens nothing (a FIFO's open would wake a
    writer waiting on it, a device's may start what it drives, a watchdog), and only a
    regular file is then opened, through /proc/self/fd: the very file looked at, even if
    its path changed meanwhile. In an open `folder`, the file of its name there, never
    followed if a symlink."""
    look = os.O_PATH | os.O_CLOEXEC | (0 if folder is None else os.O_NOFOLLOW)
    try:
        fd = os.open(path if folder is None else path.name, look, dir_fd=folder)
    except ValueError:  # a NUL in the path
        message = "a path cannot hold a NUL byte"
        raise Refused(Finding("nul-in-path", f"{what} {str(path)!r}", message)) from None
    except OSError as error:
        raise _unreadable(f"{what} {path}", error) from None
    try:
        status = os.fstat(fd)
        regular = "only regular files are read"
        if stat.S_ISLNK(status.st_mode):  # only with O_NOFOLLOW: a name in `folder`
            message = "a symlink, not followed"
            raise Refused(Finding("symlink", f"{what} {path}", message, regular))
        if not stat.S_ISREG(status.st_mode):
            kind = kind_of(status.st_mode)
            raise Refused(Finding("not-regular", f"{what} {path}", kind, regular))
        if trusted:
            check_trusted(path, status, what)
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        raise _unreadable(f"{what} {path}", error) from None
    finally:
        os.close(fd)


def _unreadable(where: str, error: OSError) -> Refused:
    return Refused(Finding("unreadable", where, f"cannot read: {error.strerror}"))


def read_text(
    path: Path, what: str, *, trusted: bool = False, limit: int = MAX_BYTES, errors: str = "strict"
) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; Refused names `what` and
    the path. With `trusted`, a root process also refuses a file others could have written."""
    fd = _open_regular(path, what, trusted)
    with os.fdopen(fd, "rb") as handle:
        data = _read(handle, limit + 1, f"{what} {path}")
    if len(data) > limit:
        raise _too_large(f"{what} {path}", limit, what)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as error:
        message = f"not UTF-8 text (byte {error.start})"
        raise Refused(Finding("not-utf8", f"{what} {path}", message)) from None


def _too_large(where: str, limit: int, what: str) -> Refused:
    message, fix = f"larger than {limit} bytes", f"this is not a {what}"
    return Refused(Finding("too-large", where, message, fix))


def _read(stream: BinaryIO, size: int, name: str) -> bytes:
    """At most `size` bytes of `stream` (the file `name`); Refused, this host's problem, when
    the host fails it."""
    try:
        return stream.read(size)
    except OSError as error:
        message = f"cannot read: {error.strerror}"
        raise Refused(Finding("read-failed", name, message, cause="host")) from None


def read_stdin(limit: int, what: str) -> bytes:
    """Standard input, `limit` bytes at most: Refused when larger (it is no `what`) or
    closed, or when the host fails the read."""
    data = _read(stdin_bytes(), limit + 1, "stdin")
    if len(data) > limit:
        raise _too_large("stdin", limit, what)
    return data


def split_lines(chunks: Iterable[bytes]) -> Iterator[bytes | None]:
    """The lines of a byte stream without their ends (LF, CRLF or CR, as universal newlines
    and server-sent events have them; a CRLF may be split between two chunks), and None in
    place of a line longer than LINE_LIMIT, said as soon as it passes the limit and dropped
    as it comes: a line is held in memory, so an endless one must never be."""
    pending = bytearray()
    after_cr = too_long = False
    for whole in chunks:
        # The LF of a CRLF whose CR ended the chunk before ends no second line.
        chunk = whole[1:] if after_cr and whole.startswith(b"\n") else whole
        after_cr = chunk.endswith(b"\r") or (after_cr and not chunk)
        *ended, rest = LINE_END.split(chunk)
        for part in ended:
            if not too_long:
                pending += part
                yield None if len(pending) > LINE_LIMIT else bytes(pending)
            pending.clear()
            too_long = False
        if not too_long:
            pending += rest
        if len(pending) > LINE_LIMIT and not too_long:
            yield None
            pending.clear()
            too_long = True
    if pending:
        yield bytes(pending)


class StreamLines:
    """The lines of a binary stream (the file `name`) as text (undecodable bytes replaced),
    those longer than LINE_LIMIT skipped and counted: `skipped` of them, the first at line
    `first_skipped`."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self._chunks = iter(lambda: _read(stream, CHUNK, name), b"")
        self.skipped = 0
        self.first_skipped: int | None = None

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(split_lines(self._chunks), 1):
            if line is not None:
                yield line.decode("utf-8", "replace")
                continue
            self.skipped += 1
            if self.first_skipped is None:
                self.first_skipped = number


def stdin_bytes() -> BinaryIO:
    """Standard input as bytes; Refused when the caller closed it (`<&-`)."""
    if sys.stdin is None:
        fix = "give a file, or '-' with something on standard input"
        raise Refused(Finding("stdin-closed", "stdin", "closed", fix))
    return sys.stdin.buffer


@contextlib.contextmanager
def open_stream(path: str, what: str, folder: int | None = None) -> Iterator[StreamLines]:
    """The lines of a regular file (or `-`, standard input) read as they come: for logs,
    which may be large; devices and FIFOs are refused like elsewhere, and in an open
    `folder` (`path` names a file in it) a symlink too."""
    if path == "-":
        yield StreamLines(stdin_bytes(), "stdin")
        return
    fd = _open_regular(Path(path), what, trusted=False, folder=folder)
    with os.fdopen(fd, "rb") as handle:
        yield StreamLines(handle, f"{what} {path}")
