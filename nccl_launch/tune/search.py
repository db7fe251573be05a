"""The search, on any objective: coordinate descent from the profile's values (or the whole
grid), NCCL's defaults measured once as the reference, each candidate tried at most once,
within a budget of trials. Pure: `tune` gives it trials of real servers, tests a function.

The noise rule: a trial's noise is how far its runs stray from their mean, half their
min-max spread over the mean; the tune's noise is the median of that over the trials measured
so far (the median: one trial disturbed by the host does not stall the search). A change is
kept only when its mean beats the best one's by more than that fraction.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from statistics import median
from typing import Literal, Protocol

# A candidate's value of each searched variable; None: unset, NCCL's default.
Values = dict[str, str | None]
# Each variable's values in the order given, canonical as the child gets them.
Space = dict[str, tuple[str | None, ...]]
Stop = Literal["converged", "grid done", "budget spent"]


@dataclass(frozen=True)
class Score:
    """A measured candidate: the mean of its runs and their lowest and highest rate."""

    mean: float
    low: float
    high: float

    @property
    def noise(self) -> float:
        """How far its runs stray from their mean: half their spread, over the mean."""
        return (self.high - self.low) / 2 / self.mean


class Objective(Protocol):
    """What the search measures: `key` names a candidate (the same key, the same candidate);
    `measure` tries it once, None when it could not be measured."""

    def key(self, values: Values) -> str: ...

    def measure(self, values: Values) -> Score | None: ...


@dataclass(frozen=True)
class Found:
    """The keys tried, in order; the winner's key (None: nothing measured); why the search
    stopped; the noise its last decision used."""

    tried: list[str]
    best: str | None
    stop: Stop
    noise: float


class _Spent(Exception):
    """The budget holds no more trials."""


class _Trials:
    """The objective, each key measured once, at most `budget` keys."""

    def __init__(self, objective: Objective, budget: int | None) -> None:
        self.objective = objective
        self.budget = budget
        self.scores: dict[str, Score | None] = {}

    def __call__(self, values: Values) -> Score | None:
        key = self.objective.key(values)
        if key not in self.scores:
            if self.budget is not None and len(self.scores) >= self.budget:
                raise _Spent
            self.scores[key] = self.objective.measure(values)
        return self.scores[key]

    @property
    def noise(self) -> float:
        """The median noise of the trials measured so far; 0 before any."""
        found = [score.noise for score in self.scores.values() if score]
        return median(found) if found else 0.0

    def beats(self, score: Score | None, best: Score | None) -> bool:
        """Whether `score` beats `best` by more than the noise (anything beats nothing)."""
        if score is None:
            return False
        return best is None or score.mean > best.mean * (1 + self.noise)

    def found(self, best: Values | None, stop: Stop) -> Found:
        key = self.objective.key(best) if best is not None else None
        if key is not None and self.scores.get(key) is None:
            key = None
        return Found(list(self.scores), key, stop, self.noise)


def defaults(space: Space) -> Values:
    """Every searched variable unset: NCCL's defaults, the reference."""
    return dict.fromkeys(space)


def descend(start: Values, space: Space, objective: Objective, budget: int | None) -> Found:
    """Coordinate descent: from `start`, each variable in turn takes the value that beats
    the best so far by more than the noise, the others held; passes repeat until one changes
    nothing. Stops early, with the best so far, when the budget is spent."""
    trials = _Trials(objective, budget)
    current = dict(start)
    try:
        best = trials(current)
        trials(defaults(space))
        changed = True
        while changed:
            changed = False
            for name, values in space.items():
                held = current  # the other variables, as this one's values are tried
                for value in values:
                    candidate = held | {name: value}
                    if value == held[name]:
                        continue
                    score = trials(candidate)
                    if trials.beats(score, best):
                        current, best = candidate, score
                        changed = True
    except _Spent:
        return trials.found(current, "budget spent")
    return trials.found(current, "converged")


def grid(start: Values, space: Space, objective: Objective, budget: int | None) -> Found:
    """Every combination of the space's values, after `start` and NCCL's defaults; the
    highest mean wins."""
    trials = _Trials(objective, budget)
    # Lazy: a budget ends a grid of billions of combinations without making them all.
    combinations = (dict(zip(space, values, strict=True)) for values in _product(space))
    every = itertools.chain([start, defaults(space)], combinations)
    stop: Stop = "grid done"
    best: tuple[Values, Score] | None = None
    for values in every:
        try:
            score = trials(values)
        except _Spent:
            stop = "budget spent"
            break
        if score is not None and (best is None or score.mean > best[1].mean):
            best = (values, score)
    return trials.found(best[0] if best else None, stop)


def _product(space: Space) -> itertools.product[tuple[str | None, ...]]:
    return itertools.product(*space.values())
