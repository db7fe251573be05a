"""The journal of a tune: one JSON line appended per trial server started (its identity,
before it is measured) and per finished trial (one start of a candidate's server; a candidate
may have several), under the XDG state directory, read back at the start and replayed in order
so that the same command resumes where it stopped, to the same decisions, and stops a server a
killed tune left running.

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

from pydantic import BaseModel, Field, model_validator

from nccl_launch.findings import Finding, Refused
from nccl_launch.jsonlines import STATE_FIX, append_line, open_store, parse_lines, state_home
from nccl_launch.profile.plan import DIGEST
from nccl_launch.tune.orphans import Owner, StartedServer, stop_leftover
from nccl_launch.tune.search import Values
from nccl_launch.tune.trial import TrialOutcome, TrialSettings

FILE_NAME = "journal.jsonl"
WHAT = "tune journal"
LIMIT = 64 << 20  # some 20,000 trials: a larger file is not a journal


class JournalLine(BaseModel):
    """One line of a trial: the candidate (its values, digest, file), its log, and either its
    server's identity (the line written as the server starts) or its outcome (as it ends);
    `confirm`: a start of the confirmation of the winner, not of the search."""

    time: str
    digest: str = Field(pattern=DIGEST.pattern)
    values: Values
    candidate: str
    log: str
    server: StartedServer | None = None
    outcome: TrialOutcome | None = None
    confirm: bool = False

    @model_validator(mode="after")
    def _started_or_finished(self) -> JournalLine:
        if (self.server is None) == (self.outcome is None):
            raise ValueError("a trial line has a server or an outcome, and not both")
        return self


class FinishedLine(JournalLine):
    """The line of a finished trial."""

    outcome: TrialOutcome


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Journal:
    """The journal open for appending, and what it held when opened: the lines of finished
    trials whose outcome is final for a tune of `settings` (TrialOutcome.final), in order, the
    servers started and never finished, and a finding per line that is no trial."""

    path: Path
    fd: int
    settings: TrialSettings
    done: list[FinishedLine] = field(default_factory=list)
    started: dict[str, JournalLine] = field(default_factory=dict)
    problems: list[Finding] = field(default_factory=list)

    def append(self, line: JournalLine) -> None:
        append_line(self.fd, line.model_dump_json() + "\n", f"{WHAT} {self.path}")

    def _keep(self, line: JournalLine) -> None:
        if line.outcome is None:
            self.started[line.digest] = line
            return
        self.started.pop(line.digest, None)
        if line.outcome.final(self.settings):
            self.done.append(FinishedLine.model_validate(dict(line)))

    def replay(self, digest: str, confirm: bool) -> FinishedLine | None:
        """The next line not yet replayed of that candidate and phase, in order; None when
        all are: its next start is measured afresh."""
        for index, line in enumerate(self.done):
            if (line.digest, line.confirm) == (digest, confirm):
                return self.done.pop(index)
        return None

    def owner(self, digest: str, values: Values, candidate: Path, log: Path) -> Owner:
        """Whose the server of candidate `digest`'s trial is: as it starts, a line of its own
        records its identity."""

        def started(server: StartedServer) -> None:
            line: dict[str, object] = {"digest": digest, "values": values, "server": server}
            line |= {"time": now(), "candidate": str(candidate), "log": str(log)}
            self.append(JournalLine.model_validate(line))

        return Owner(self.path, digest, values, started)

    def stop_leftovers(self) -> list[Finding]:
        """Stop every server a killed tune of this journal left running; a warning of each."""
        grace = self.settings.stop_grace
        found = [
            stop_leftover(line.server, self.path, digest, grace)
            for digest, line in self.started.items()
            if line.server is not None
        ]
        return [said for said in found if said is not None]

    def read_lines(self, text: str) -> None:
        lines, self.problems = parse_lines(
            "bad-journal-line", text, self.path, JournalLine, "trial"
        )
        for line in lines:
            self._keep(line)


_ASIDE = "move it aside to start the tune afresh"


def _full(size: int) -> str | None:
    return f"larger than a journal; {_ASIDE}" if size > LIMIT else None


def _open(folder: PurePath) -> tuple[Path, int]:
    """The journal in `folder` (under the state home), a regular file opened for appending,
    created if absent with the folders to it (0700), never through a symlink, and locked:
    Refused (this host's) while another tune holds it."""
    state = state_home()
    path = state.path / folder / FILE_NAME
    busy = (
        "another tune of this profile and method is running (it holds the journal); wait for "
        "it, or stop it and run this again to resume"
    )  # two tunes of one journal would race for the port
    beneath = (state, folder / FILE_NAME, STATE_FIX)
    return path, open_store(WHAT, path, full=_full, beneath=beneath, busy=busy, aside=_ASIDE)


@contextlib.contextmanager
def opened(folder: PurePath, settings: TrialSettings) -> Iterator[Journal]:
    """The journal of the tune in `folder` with `settings`, read, and open to append to until
    the end."""
    path, fd = _open(folder)
    try:
        try:
            data = os.pread(fd, LIMIT, 0)
        except OSError as error:
            said = f"{WHAT} {path}: cannot read: {error.strerror}"
            raise Refused(Finding("unreadable-journal", "", said, cause="host")) from None
        journal = Journal(path, fd, settings)
        journal.read_lines(data.decode("utf-8", "replace"))
        yield journal
    finally:
        os.close(fd)
