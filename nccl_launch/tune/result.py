"""What `tune` found, as data: every trial (one start of a candidate's server) with its
outcome, each candidate's rate over its starts, the winner and its confirmed gains."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from nccl_launch.bench.result import Method
from nccl_launch.bench.stats import (
    Noise,
    Start,
    mean_figure,
    outward,
    rate_interval,
    ratio_interval,
)
from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.profile.model import Baseline
from nccl_launch.report import Report
from nccl_launch.tune.search import Stop
from nccl_launch.tune.trial import TrialOutcome


class TrialRow(BaseModel):
    """One start of a candidate: its searched values, those that differ from the profile's
    (`changes`), its file and log, whether it came from the journal, whether it was a start
    of the confirmation, and its outcome."""

    number: int
    digest: str
    values: dict[str, str | None]
    changes: str
    candidate: str
    log: str
    from_journal: bool
    confirm: bool
    outcome: TrialOutcome

    @property
    def start(self) -> Start | None:
        """Its runs (with their prefill figures); None when it was not measured."""
        outcome = self.outcome
        measured = outcome.status == "measured" and outcome.runs
        return Start(tuple(outcome.runs), tuple(outcome.prefill)) if measured else None


class Estimate(BaseModel):
    """A candidate's rate over its measured starts: the mean of their ln rates, as a rate,
    and its 95% interval [low, high] (None before the noise has a degree of freedom)."""

    starts: int
    mean: float
    interval: list[float] | None

    @classmethod
    def of(cls, starts: Sequence[Start], noise: Noise) -> Estimate | None:
        if not starts:
            return None
        interval = rate_interval(starts, noise)
        return cls(
            starts=len(starts),
            mean=math.exp(mean_figure(starts)),
            interval=list(interval) if interval else None,
        )


class CandidateRow(BaseModel):
    """One candidate: its values, its changes from the profile's, the numbers of its trials,
    its estimate (None: no start measured); with --prompt-tokens, its prefill's estimate and
    whether its decode gain was refused for its prefill's cost."""

    digest: str
    values: dict[str, str | None]
    changes: str
    trials: list[int]
    estimate: Estimate | None
    prefill_tok_s: Estimate | None = None
    prefill_refused: bool = False


class Gain(BaseModel):
    """One candidate's rate over another's, less 1, and its 95% interval (two-sided)."""

    gain: float
    interval: list[float]

    @classmethod
    def of(cls, mine: Sequence[Start], theirs: Sequence[Start], noise: Noise) -> Gain | None:
        interval = ratio_interval(mine, theirs, noise) if mine and theirs else None
        if interval is None:
            return None
        gain = math.exp(mean_figure(mine) - mean_figure(theirs)) - 1
        return cls(gain=gain, interval=[interval[0] - 1, interval[1] - 1])

    def over(self, what: str) -> str:
        """`+24.8% [+19.0%, +30.9%] over standin@1`."""
        low, high = (f"{end:+.1f}%" for end in outward([end * 100 for end in self.interval]))
        return f"{self.gain * 100:+.1f}% [{low}, {high}] over {what}"


class Confirmation(BaseModel):
    """The winner measured again against the profile's values and NCCL's defaults, over
    fresh starts interleaved in `rounds`, with `method`: only these starts judge the gains."""

    method: Method
    rounds: int
    noise: float  # the standard deviation of a start's ln rate, pooled over these starts
    dof: int
    candidates: list[CandidateRow]
    gain_over_profile: Gain | None
    gain_over_defaults: Gain | None
    # With --prompt-tokens: the winner's prefill over the profile's values' (less 1), its
    # noise pooled over these starts' prefill figures.
    prefill_over_profile: Gain | None = None

    def gains(self, profile: str) -> list[str]:
        """Its gains as people read them, over `profile`'s values, then NCCL's defaults."""
        over = ((self.gain_over_profile, profile), (self.gain_over_defaults, "NCCL's defaults"))
        return [gain.over(what) for gain, what in over if gain is not None]


# No candidate measured (every trial failed, drifted or was refused), or the budget ended the
# search before it decided: as `bench` below its baseline, no answer to act on.
EXIT_NO_ANSWER = EXIT_DRIFT


class TuneReport(Report):
    """`tune`'s result: exit 0 with a winner the search decided, 1 when no candidate could be
    measured or the budget ended the search first."""

    profile: str
    digest: str
    path: str
    journal: str
    method: Method
    space: dict[str, list[str | None]]
    strategy: Literal["descent", "grid"]
    budget: int | None
    stop: Stop
    # The standard deviation of a start's ln rate, pooled over the search's candidates of two
    # starts or more, and its degrees of freedom: the noise its decisions used.
    noise: float
    dof: int
    # With --prompt-tokens: how far below the profile's values' a candidate's prefill may be
    # (a fraction), judged by the noise of a start's ln prefill rate; else None.
    prefill_tolerance: float | None = None
    prefill_noise: float | None = None
    trials: list[TrialRow]
    candidates: list[CandidateRow]  # of the search, in the order first tried
    # Digests of candidates: the profile as it is, NCCL's defaults (every searched variable
    # unset), the winner; None where the budget ended the search first, or none was measured.
    profile_candidate: str | None
    defaults_candidate: str | None
    winner: str | None
    confirmation: Confirmation | None
    written: str | None = None  # --write's file
    # --write found the profile's own values fastest: a version of the same values is not new
    unchanged: bool = False
    # --write wrote nothing: the confirmation found no gain over the profile's values
    kept: bool = False
    # With --write, the confirmed [baseline] of the winner: written with it, or to record
    # when unchanged.
    baseline: Baseline | None = None
    # How `run` names it: NAME@VERSION where the search path finds it there, else its path.
    written_ref: str | None = None
    # Where the budget ended the search first: the digests of candidates the noise rule had
    # not yet told from the best, the changes of those a pass (or the grid) would start that
    # never were (the first `search.SHOWN` of `untried_count`), and the budget the search's
    # plan says would decide them: an estimate (`search.Found.to_decide`).
    undecided: list[str] = Field(default_factory=list)
    untried: list[str] = Field(default_factory=list)
    untried_count: int = 0
    budget_to_decide: int | None = None

    def candidate(self, digest: str | None) -> CandidateRow | None:
        return next((row for row in self.candidates if row.digest == digest), None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def confirmed(self) -> bool | None:
        """Whether the confirmation's 95% interval of the winner's gain over the profile lies
        above 0 (False too where the profile's values, measured by the search, failed in the
        confirmation: nothing confirms the gain); None where there is nothing to confirm (the
        winner is the profile's values, they were never measured, nothing was). With
        --prompt-tokens, its prefill must be confirmed too (`prefill_confirmed`)."""
        if not self._judged:
            return None
        gain = self.confirmation.gain_over_profile if self.confirmation else None
        return gain is not None and gain.interval[0] > 0 and self.prefill_confirmed is not False

    @property
    def _judged(self) -> bool:
        """Whether there is a winner to confirm: not the profile's values, which were
        measured."""
        profile = self.candidate(self.profile_candidate)
        return (
            self.winner not in (None, self.profile_candidate)
            and profile is not None
            and profile.estimate is not None
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefill_confirmed(self) -> bool | None:
        """With --prompt-tokens, whether the confirmation's 95% interval of the winner's
        prefill over the profile's values' lies above 1 - the tolerance: it shows its prefill
        costs no more (False where it was not measured); None without a prefill to judge, or
        nothing to confirm (as `confirmed`)."""
        if self.prefill_tolerance is None or not self._judged:
            return None
        gain = self.confirmation.prefill_over_profile if self.confirmation else None
        return gain is not None and gain.interval[0] > -self.prefill_tolerance

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decided(self) -> bool:
        """Whether the search ended by its own rule (converged, the grid done), not the budget
        or nothing measured."""
        return self.stop in ("converged", "grid done")

    @property
    def exit_code(self) -> int:
        """0 with a winner the search decided; 1 when no trial could be measured, or the
        budget ended the search first."""
        return EXIT_OK if self.winner is not None and self.decided else EXIT_NO_ANSWER
