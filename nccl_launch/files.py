"""Files in and out: only regular files are read, with a size cap, and as root only trusted
ones; writes are atomic, respect the umask and keep the mode of the file they replace."""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO

from nccl_launch.errors import HOST_ERRNOS, HostError, UsageError

# A profile, env file, nccl.conf or pidfile is a few KiB; anything larger is a mistake.
MAX_BYTES = 1 << 20
# A line read from a stream is held in memory: NCCL's INFO lines and a server's events are
# some 200 bytes, so a longer line than this is none of them.
LINE_LIMIT = 1 << 20
LINE_END = re.compile(rb"\r\n|\r|\n")
CHUNK = 1 << 16
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


class FileError(UsageError):
    """A file that is not read: missing, not a regular file, too large, untrusted, not text."""


def kind_of(mode: int) -> str:
    """What a file of `mode` that is no regular file is, in words ("a FIFO")."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _open_regular(path: Path, what: str, trusted: bool) -> int:
    """A descriptor of `path` when it is a regular file (and trusted, if asked); never blocks:
    O_NONBLOCK keeps a FIFO from hanging the open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except ValueError:  # a NUL in the path
        raise FileError(f"{what} {str(path)!r}: a path cannot hold a NUL byte") from None
    except OSError as error:
        raise FileError(f"{what} {path}: cannot read: {error.strerror}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = kind_of(status.st_mode)
            raise FileError(f"{what} {path}: {kind}; only regular files are read")
        if trusted:
            check_trusted(path, status, what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_text(
    path: Path, what: str, *, trusted: bool = False, limit: int = MAX_BYTES, errors: str = "strict"
) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; FileError names `what` and
    the path. With `trusted`, a root process also refuses a file others could have written."""
    fd = _open_regular(path, what, trusted)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileError(f"{what} {path}: larger than {limit} bytes; this is not a {what}")
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as error:
        raise FileError(f"{what} {path}: not UTF-8 text (byte {error.start})") from None


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
    """The lines of a binary stream as text (undecodable bytes replaced), those longer than
    LINE_LIMIT skipped and counted: `skipped` of them, the first at line `first_skipped`."""

    def __init__(self, stream: BinaryIO) -> None:
        self._chunks = iter(lambda: stream.read(CHUNK), b"")
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
    """Standard input as bytes; FileError when the caller closed it (`<&-`)."""
    if sys.stdin is None:
        raise FileError("stdin: closed; give a file, or '-' with something on standard input")
    return sys.stdin.buffer


@contextlib.contextmanager
def open_stream(path: str, what: str) -> Iterator[StreamLines]:
    """The lines of a regular file (or `-`, standard input) read as they come: for logs,
    which may be large; devices and FIFOs are refused like elsewhere."""
    if path == "-":
        yield StreamLines(stdin_bytes())
        return
    fd = _open_regular(Path(path), what, trusted=False)
    with os.fdopen(fd, "rb") as handle:
        yield StreamLines(handle)


def _writable_by_others(path: Path, status: os.stat_result) -> bool:
    """Whether group or others may write `path`: by its mode, on a mount that is not read-only
    (a configMap volume's folder shows 0777, and no one writes there)."""
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        with contextlib.suppress(OSError, ValueError):
            return not os.statvfs(path).f_flag & os.ST_RDONLY
        return True
    return False


def _owner_ok(status: os.stat_result) -> bool:
    return status.st_uid in (0, os.geteuid())


def check_trusted(path: Path, status: os.stat_result, what: str) -> None:
    """As root, refuse what another user could have written (sshd's StrictModes): a file that
    is group- or world-writable or owned by another user, or that sits, through any
    directory up to `/` (as given and as resolved), in one other users may write, sticky
    directories (/tmp) and read-only mounts (a configMap volume) aside. Other users are not
    checked: what they may write, they could run themselves."""
    if os.geteuid() != 0:
        return
    fix = "chown root and chmod go-w, or move it out of reach of other users"
    if not _owner_ok(status):
        uid = status.st_uid
        raise FileError(
            f"{what} {path}: owned by uid {uid}, not root; chown root and chmod go-w (chgrp "
            f"the service's group and chmod 0640 where its User= must read it), or run this as "
            f"uid {uid}"
        )
    if _writable_by_others(path, status):
        raise FileError(
            f"{what} {path}: writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
            f"; {fix}"
        )
    found = _folder_of_others(path)
    if found is not None:
        folder, folder_status = found
        mode = stat.S_IMODE(folder_status.st_mode)
        raise FileError(
            f"{what} {path}: its directory {folder} (uid {folder_status.st_uid}, mode "
            f"{mode:04o}) lets other users replace it; {fix}"
        )


def _folder_of_others(path: Path) -> tuple[Path, os.stat_result] | None:
    """The first directory above `path` (as given, then as it resolves) that another user
    owns or may write, sticky directories such as /tmp aside; None when there is none."""
    try:  # the directories as given, before symlinks are followed
        given = path if path.is_absolute() else Path.cwd() / path
    except FileNotFoundError:  # a deleted current directory: no file has a relative path
        return None
    for folder in dict.fromkeys([*given.parents, *given.resolve().parents]):
        try:
            folder_status = folder.stat()
        except OSError:
            continue
        sticky = bool(folder_status.st_mode & stat.S_ISVTX)
        writable = _writable_by_others(folder, folder_status) and not sticky
        if not _owner_ok(folder_status) or writable:
            return folder, folder_status
    return None


def atomic_write(path: Path, text: str, *, replace: bool, mode: int | None = None) -> None:
    """Write `text` to `path` through a temporary file, so that a reader sees the old content
    or the new, never half; without `replace` an existing file is never touched.

    The mode is `mode` when given (0600 for secrets), else that of the file replaced, else
    0666 less the umask, as a plain write would create it. On any error (a full disk) the
    temporary file is removed. A path that is no regular file (a device, a FIFO, a directory,
    or a symlink to one) is refused, never replaced. Raises FileExistsError when `replace` is
    false and the file exists, even if it appears meanwhile: the last step is then a hard
    link, which fails rather than overwrite.
    """
    data = text.encode("utf-8")  # an unencodable text fails here, before any file exists
    refuse_special(path)
    if not replace and path.exists():
        raise FileExistsError(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
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
    """FileError when `path` (through symlinks) exists and is no regular file: a device, a
    FIFO or a directory is never replaced by a file (as root, /dev/null would be)."""
    try:
        status = path.stat()
    except (OSError, ValueError):  # absent (or a dangling symlink): a file is created
        return
    if not stat.S_ISREG(status.st_mode):
        raise FileError(f"{path}: {kind_of(status.st_mode)}; only a regular file is written")


def check_output(path: Path, *, replace: bool, fix: str = "pass --force to replace it") -> None:
    """What `write_output` would refuse of `path`, said now (an existing file kept without
    `replace` with the caller's `fix`): a command writing two files says it before it writes
    either, one that validates first says it before that."""
    refuse_special(path)
    if not replace and os.path.lexists(path):
        raise FileError(f"{path} exists; {fix}")


def write_output(path: Path, text: str, *, replace: bool, mode: int | None = None) -> None:
    """`atomic_write`, the writer of every file a command writes: any OSError is a FileError
    naming the path (a folder this user may not write), an existing file kept without
    `replace` one that says to pass --force."""
    try:
        atomic_write(path, text, replace=replace, mode=mode)
    except FileExistsError as error:
        if error.errno is None or error.filename2 is not None:  # the file, not a folder
            raise FileError(f"{path} exists; pass --force to replace it") from None
        raise FileError(f"{path}: cannot write: {error.filename} is not a directory") from None
    except PermissionError as error:
        raise FileError(
            f"{path}: cannot write: {error.strerror}; it is replaced by a new file written in "
            f"{path.parent}, so that folder must be writable by this user"
        ) from None
    except OSError as error:
        failed = HostError if error.errno in HOST_ERRNOS else FileError
        raise failed(f"{path}: cannot write: {error.strerror}") from None


@dataclass(frozen=True)
class BaseDirectory:
    """An XDG base directory: `given`, an absolute path from the environment, followed as its
    user wrote it; `below`, the folders under it that nccl-launch walks itself."""

    given: Path
    below: PurePath

    @property
    def path(self) -> Path:
        return self.given / self.below


def _home(variable: str) -> Path:
    """$HOME when absolute, else the effective user's home in the user database."""
    home = os.environ.get("HOME", "")
    if Path(home).is_absolute():
        return Path(home)
    try:
        known = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        known = ""
    if not Path(known).is_absolute():
        said = f"relative ({home})" if home else "empty"
        raise HostError(
            f"no home directory: HOME is {said} and the user database has none for uid "
            f"{os.geteuid()}; set HOME or {variable} to an absolute path"
        )
    return Path(known)


def base_directory(variable: str, default: str) -> BaseDirectory:
    """$`variable` when absolute, else ~/`default`: the XDG Base Directory specification
    holds an empty or relative path invalid, to be ignored (HOME too)."""
    value = os.environ.get(variable, "")
    if Path(value).is_absolute():
        return BaseDirectory(Path(value), PurePath())
    return BaseDirectory(_home(variable), PurePath(default))


def _refuse_others(folder: Path, status: os.stat_result, fix: str) -> None:
    """As root, a folder another user owns or may write: root creates nothing there."""
    if os.geteuid() == 0 and (status.st_uid != 0 or _writable_by_others(folder, status)):
        mode = stat.S_IMODE(status.st_mode)
        raise FileError(
            f"{folder} (uid {status.st_uid}, mode {mode:04o}) is not root's alone, and root "
            f"writes nothing in another user's folder; {fix}"
        )


def _folder_beneath(parent: int, name: str, folder: Path, fix: str) -> int:
    """A descriptor of the folder `name` in `parent`, created 0700 if missing; a symlink is
    followed only when the user's own."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    link = os.stat(name, dir_fd=parent, follow_symlinks=False)
    follow = stat.S_ISLNK(link.st_mode)
    if follow and link.st_uid != os.geteuid():
        raise FileError(f"{folder}: a symlink of uid {link.st_uid}, not followed; {fix}")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(name, flags, dir_fd=parent)
    try:
        _refuse_others(folder, os.fstat(fd), fix)
    except FileError:
        os.close(fd)
        raise
    return fd


def open_beneath(base: BaseDirectory, name: PurePath, flags: int, fix: str) -> int:
    """A descriptor of `name` under `base`, opened with `flags` but never through a symlink;
    the folders missing on the way are created 0700, as the specification says. Below
    `base.given` only the user's own symlinks are followed, and as root every folder from
    `base.given` down must be root's alone. FileError is a refusal ending with `fix`;
    OSError, the system's answer."""
    existing = next(folder for folder in (base.given, *base.given.parents) if folder.is_dir())
    parts = [*base.given.relative_to(existing).parts, *base.below.parts, *name.parent.parts]
    fd = os.open(existing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _refuse_others(existing, os.fstat(fd), fix)
        found = _folder_of_others(existing) if os.geteuid() == 0 else None
        if found is not None:
            _refuse_others(*found, fix)
        folder = existing
        for part in parts:
            folder /= part
            parent, fd = fd, -1
            try:
                fd = _folder_beneath(parent, part, folder, fix)
            finally:
                os.close(parent)
        return os.open(name.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)
