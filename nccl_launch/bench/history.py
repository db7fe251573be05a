"""The history of results: one JSON line appended per measurement, read back with line numbers.

A line is whole or absent: each is one write to a file opened O_APPEND, and a line left torn
by a crash is closed with a newline first, so it stays one bad line and never spoils the next.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import PlainSerializer

from nccl_launch.bench.result import BenchReport
from nccl_launch.errors import EXIT_OK
from nccl_launch.escaping import escaped
from nccl_launch.files.paths import status_of
from nccl_launch.files.reading import read_text
from nccl_launch.findings import Finding
from nccl_launch.jsonlines import (
    STATE,
    STATE_FIX,
    absent,
    append_line,
    open_store,
    parse_lines,
    state_home,
)
from nccl_launch.profile.search import split_reference
from nccl_launch.report import Report
from nccl_launch.secrets.masking import masked_json

FILE_NAME = "bench.jsonl"
WHAT = "bench history"
IN_STATE = STATE / FILE_NAME
_OTHER_FILE = f"{STATE_FIX}, or name the file with --record FILE"
HISTORY_LIMIT = 64 << 20  # some 40,000 results; a larger file is not this history
ROOM = 1 << 20  # kept free by appending: a result line is a few KiB (its prompt included)


def _said(problems: list[Finding]) -> list[str]:
    return [escaped(each.line()) for each in problems]


def default_path() -> Path:
    """$XDG_STATE_HOME/nccl-launch/bench.jsonl."""
    return state_home().path / IN_STATE


def _full(size: int) -> str | None:
    """A history `--history` could no longer read whole is not appended to."""
    if size + ROOM <= HISTORY_LIMIT:
        return None
    return (
        f"{size} bytes, near the {HISTORY_LIMIT >> 20} MiB --history reads; keep it aside and "
        "start another (--record FILE)"
    )


def _open(path: Path) -> int:
    return open_store(WHAT, path, full=_full)


@contextlib.contextmanager
def opened(path: Path | None) -> Iterator[Recorder]:
    """The history (None: the default one, under the state home), checked before measuring:
    a file that cannot take the result fails at once, not after the benchmark; a file named
    with --record is created by the first result only."""
    fd: int | None
    if path is None:
        state = state_home()
        path = state.path / IN_STATE
        fd = open_store(WHAT, path, full=_full, beneath=(state, IN_STATE, _OTHER_FILE))
    else:
        fd = None if absent(WHAT, path) else _open(path)
    recorder = Recorder(path, fd)
    try:
        yield recorder
    finally:
        if recorder.fd is not None:
            os.close(recorder.fd)


@dataclass
class Recorder:
    path: Path
    fd: int | None  # None until the first result creates the file

    def append(self, report: BenchReport) -> None:
        """One line, in one write; after a torn last line, on a line of its own."""
        if self.fd is None:
            self.fd = _open(self.path)
        line = masked_json(report, indent=None, exclude={"drift", "written"}) + "\n"
        append_line(self.fd, line, f"{WHAT} {self.path}")


class History(Report):
    """`bench --history`: the results of a history file, a finding per line that is none (in
    JSON each its line as people read it, escaped, as documented)."""

    path: str
    results: list[BenchReport]
    problems: Annotated[list[Finding], PlainSerializer(_said)]

    @property
    def exit_code(self) -> int:
        return EXIT_OK  # a bad line is reported and skipped: the others still count


def _matches(result: BenchReport, ref: str) -> bool:
    """PROFILE as `--history` takes it: NAME@VERSION exactly, or NAME in any version."""
    return result.profile == ref or split_reference(result.profile)[0] == ref


def read_history(path: Path, ref: str | None = None) -> History:
    """Every result in `path` (of profile `ref` if given); a bad line is reported with its
    number and skipped."""
    if status_of(path, WHAT) is None and not path.is_symlink():
        return History(path=str(path), results=[], problems=[])
    text = read_text(path, WHAT, limit=HISTORY_LIMIT, errors="replace")
    found, problems = parse_lines("bad-history-line", text, path, BenchReport, "bench result")
    results = [result for result in found if ref is None or _matches(result, ref)]
    return History(path=str(path), results=results, problems=problems)
