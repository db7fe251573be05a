"""The history of results: one JSON line appended per measurement, read back with line numbers.

A line is whole or absent: each is one write to a file opened O_APPEND, and a line left torn
by a crash is closed with a newline first, so it stays one bad line and never spoils the next.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

from pydantic import ValidationError

from nccl_launch.bench.result import BenchReport
from nccl_launch.errors import EXIT_OK
from nccl_launch.escaping import escaped
from nccl_launch.files import (
    BaseDirectory,
    FileError,
    append_line,
    base_directory,
    open_beneath,
    read_text,
)
from nccl_launch.report import Report

FILE_NAME = "bench.jsonl"
IN_STATE = PurePath("nccl-launch", FILE_NAME)
_OTHER_FILE = "set XDG_STATE_HOME to a folder of your own, or name the file with --record FILE"
HISTORY_LIMIT = 64 << 20  # some 40,000 results; a larger file is not this history
ROOM = 1 << 20  # kept free by appending: a result line is a few KiB (its prompt included)
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


def state_home() -> BaseDirectory:
    """$XDG_STATE_HOME, else ~/.local/state, as the XDG Base Directory specification says."""
    return base_directory("XDG_STATE_HOME", ".local/state")


def default_path() -> Path:
    """$XDG_STATE_HOME/nccl-launch/bench.jsonl."""
    return state_home().path / IN_STATE


def _open_append(path: Path | None) -> tuple[Path, int]:
    """The history's path and a descriptor to append to it, a regular file (created if
    absent), never through a symlink (as root, one planted there would aim the write
    elsewhere), never blocking. None is the default path, under the state home."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    state = None
    if path is None:
        state = state_home()
        path = state.path / IN_STATE
    try:
        if state is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        else:
            fd = open_beneath(state, IN_STATE, flags, _OTHER_FILE)
    except FileError as error:
        raise FileError(f"bench history {path}: {error}") from None
    except OSError as error:
        with contextlib.suppress(OSError):
            _refuse_kind(path, os.lstat(path).st_mode)  # why, if it is no regular file
        why = error.strerror
        if isinstance(error, (FileExistsError, NotADirectoryError)):  # mkdir met a file
            why = "a folder on its path is a file, not a directory"
        raise FileError(f"bench history {path}: cannot append: {why}") from None
    try:
        _refuse_kind(path, os.fstat(fd).st_mode)
        _refuse_full(path, os.fstat(fd).st_size)
    except FileError:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return path, fd


def _refuse_full(path: Path, size: int) -> None:
    """A history `--history` could no longer read whole is not appended to."""
    if size + ROOM > HISTORY_LIMIT:
        raise FileError(
            f"bench history {path}: {size} bytes, near the {HISTORY_LIMIT >> 20} MiB --history "
            "reads; keep it aside and start another (--record FILE)"
        )


def _refuse_kind(path: Path, mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise FileError(f"bench history {path}: a symlink; name the file it points to")
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise FileError(f"bench history {path}: {kind}; only a regular file is appended to")


@contextlib.contextmanager
def opened(path: Path | None) -> Iterator[Recorder]:
    """The history (None: the default one), opened before measuring: a file that cannot
    take the result fails at once, not after the benchmark."""
    path, fd = _open_append(path)
    try:
        yield Recorder(path, fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Recorder:
    path: Path
    fd: int

    def append(self, report: BenchReport) -> None:
        """One line, in one write; after a torn last line, on a line of its own."""
        line = report.model_dump_json(exclude={"drift"}) + "\n"
        append_line(self.fd, line, f"bench history {self.path}")


class History(Report):
    """`bench --history`: the results of a history file, one problem per line that is none."""

    path: str
    results: list[BenchReport]
    problems: list[str]

    @property
    def exit_code(self) -> int:
        return EXIT_OK  # a bad line is reported and skipped: the others still count


def _matches(result: BenchReport, ref: str) -> bool:
    """PROFILE as `--history` takes it: NAME@VERSION exactly, or NAME in any version."""
    return result.profile == ref or result.profile.rpartition("@")[0] == ref


def read_history(path: Path, ref: str | None = None) -> History:
    """Every result in `path` (of profile `ref` if given); a bad line is reported with its
    number and skipped."""
    if not path.exists() and not path.is_symlink():
        return History(path=str(path), results=[], problems=[])
    text = read_text(path, "bench history", limit=HISTORY_LIMIT, errors="replace")
    results, problems = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            result = BenchReport.model_validate_json(line)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            why = f"{where}: {first['msg']}" if where else first["msg"]
            problems.append(escaped(f"{path}:{number}: not a bench result ({why}); skipped"))
            continue
        if ref is None or _matches(result, ref):
            results.append(result)
    return History(path=str(path), results=results, problems=problems)
