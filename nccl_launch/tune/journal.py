"""The journal of a tune: one JSON line appended per finished trial (one start of a candidate's
server; a candidate may have several), under the XDG state directory, read back at the start
and replayed in order so that the same command resumes where it stopped, to the same
decisions.

A line is whole or absent (the JSON-lines store of nccl_launch.jsonlines); a line that is
not a trial (torn by a crash, edited) is a warning with its number, never the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePath

from pydantic import BaseModel, Field

from nccl_launch.bench.history import state_home
from nccl_launch.files import FileError, append_line
from nccl_launch.jsonlines import open_store, parse_lines
from nccl_launch.profile.plan import DIGEST
from nccl_launch.tune.trial import TrialOutcome

FILE_NAME = "journal.jsonl"
WHAT = "tune journal"
LIMIT = 64 << 20  # some 20,000 trials: a larger file is not a journal
_FIX = "set XDG_STATE_HOME to a folder of your own"


class JournalLine(BaseModel):
    """One finished trial: the candidate (its values, digest, file), its log, its outcome;
    `confirm`: a start of the confirmation of the winner, not of the search."""

    time: str
    digest: str = Field(pattern=DIGEST.pattern)
    values: dict[str, str | None]
    candidate: str
    log: str
    outcome: TrialOutcome
    confirm: bool = False


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Journal:
    """The journal open for appending, and what it held when opened: the lines whose trial
    is final (a launch refused for the calling environment is tried again, as nothing of the
    candidate ran), in order, and a problem per line that is no trial."""

    path: Path
    fd: int
    done: list[JournalLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def append(self, line: JournalLine) -> None:
        append_line(self.fd, line.model_dump_json() + "\n", f"{WHAT} {self.path}")

    def _keep(self, line: JournalLine) -> None:
        if line.outcome.status != "refused":
            self.done.append(line)

    def replay(self, digest: str, confirm: bool) -> JournalLine | None:
        """The next line not yet replayed of that candidate and phase, in order; None when
        all are: its next start is measured afresh."""
        for index, line in enumerate(self.done):
            if (line.digest, line.confirm) == (digest, confirm):
                return self.done.pop(index)
        return None

    def read_lines(self, text: str) -> None:
        lines, self.problems = parse_lines(text, self.path, JournalLine, "trial")
        for line in lines:
            self._keep(line)


_ASIDE = "move it aside to start the tune afresh"


def _full(size: int) -> str | None:
    return f"larger than a journal; {_ASIDE}" if size > LIMIT else None


def _open(folder: PurePath) -> tuple[Path, int]:
    """The journal in `folder` (under the state home), a regular file opened for appending,
    created if absent with the folders to it (0700), never through a symlink, and locked:
    HostError while another tune holds it."""
    state = state_home()
    path = state.path / folder / FILE_NAME
    busy = (
        "another tune of this profile and method is running (it holds the journal); wait for "
        "it, or stop it and run this again to resume"
    )  # two tunes of one journal would race for the port
    beneath = (state, folder / FILE_NAME, _FIX)
    return path, open_store(WHAT, path, full=_full, beneath=beneath, busy=busy, aside=_ASIDE)


@contextlib.contextmanager
def opened(folder: PurePath) -> Iterator[Journal]:
    """The journal of the tune in `folder`, read, and open to append to until the end."""
    path, fd = _open(folder)
    try:
        try:
            data = os.pread(fd, LIMIT, 0)
        except OSError as error:
            raise FileError(f"{WHAT} {path}: cannot read: {error.strerror}") from None
        journal = Journal(path, fd)
        journal.read_lines(data.decode("utf-8", "replace"))
        yield journal
    finally:
        os.close(fd)
