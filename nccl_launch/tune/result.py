"""What `tune` found, as data: every trial with its outcome, the winner, its gains."""

from __future__ import annotations

from statistics import fmean
from typing import Literal

from pydantic import BaseModel, computed_field

from nccl_launch.bench.result import Method
from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.report import Report
from nccl_launch.tune.search import Score, Stop
from nccl_launch.tune.trial import TrialOutcome


class TrialRow(BaseModel):
    """One candidate tried: its searched values, those that differ from the profile's
    (`changes`), its file and log, whether it came from the journal, and its outcome."""

    number: int
    digest: str
    values: dict[str, str | None]
    changes: str
    candidate: str
    log: str
    from_journal: bool
    outcome: TrialOutcome

    @property
    def score(self) -> Score | None:
        """Mean, lowest and highest rate of its runs; None when it was not measured."""
        runs = self.outcome.runs
        if self.outcome.status != "measured" or not runs:
            return None
        return Score(mean=fmean(runs), low=min(runs), high=max(runs))


EXIT_NOTHING = EXIT_DRIFT  # no candidate measured: every trial failed, drifted or was refused


class TuneReport(Report):
    """`tune`'s result: exit 0 with a winner, 1 when no candidate could be measured."""

    profile: str
    digest: str
    path: str
    journal: str
    method: Method
    space: dict[str, list[str | None]]
    strategy: Literal["descent", "grid"]
    budget: int | None
    stop: Stop
    noise: float
    trials: list[TrialRow]
    # Trial numbers: the profile as it is, NCCL's defaults (every searched variable unset),
    # the winner; None where the budget ended the search first, or nothing was measured.
    profile_trial: int | None
    defaults_trial: int | None
    winner: int | None
    written: str | None = None  # --write's file
    # --write found the profile's own values fastest: a version of the same values is not new
    unchanged: bool = False
    # With --write, the winner's [baseline]: written with it, or to record when unchanged.
    baseline: dict[str, float] | None = None
    # How `run` names it: NAME@VERSION where the search path finds it there, else its path.
    written_ref: str | None = None

    def row(self, number: int | None) -> TrialRow | None:
        return next((row for row in self.trials if row.number == number), None)

    def _gain(self, number: int | None) -> float | None:
        winner, other = self.row(self.winner), self.row(number)
        mine, theirs = (row.score if row else None for row in (winner, other))
        return None if mine is None or theirs is None else mine.mean / theirs.mean - 1

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gain_over_profile(self) -> float | None:
        """The winner's mean over the profile's, less 1."""
        return self._gain(self.profile_trial)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gain_over_defaults(self) -> float | None:
        """The winner's mean over that of NCCL's defaults, less 1."""
        return self._gain(self.defaults_trial)

    @property
    def exit_code(self) -> int:
        """0 with a winner; 1 when no trial could be measured."""
        return EXIT_OK if self.winner is not None else EXIT_NOTHING
