"""The search, on any objective: coordinate descent from the profile's values (or the whole
grid), and the confirmation of its winner, within a budget of trials (one trial: one start of
a candidate's server). Pure: `tune` gives it trials of real servers, tests a function.

The noise rule works on ln(rate), where the noise lives: between two starts of the same
server (NCCL builds its rings, the server captures its CUDA graphs at every start). A candidate's
estimate is the mean of its starts' figures (`stats.Start.figure`); the variance of one
start's figure is pooled over every candidate with two starts or more. The profile's values
are started twice first, so that there is such a candidate; NCCL's defaults once. A change
is kept only when the one-sided 95% lower bound of (candidate - best) is above 0; where the
candidate's estimate is above the best's but its bound is not yet, the one of the two with
fewer starts (the candidate on a tie) is started again, each at most CAP times, before the
change is refused as no difference the noise allows.

A budget may end the search before it decides: what it leaves open is then said (`Found`):
the candidates the noise rule has not yet told from the best (undecided), and those a pass
from the best would start that never were (untried).

With a prefill tolerance (tune --prompt-tokens), a change the rule keeps is refused still
where its prefill costs more than the tolerance: where the one-sided 95% upper bound of its
prefill over the profile's values' (the reference: the first candidate measured where they
fail) is below 1 - tolerance, the noise of prefill pooled as decode's. The guard adds no
starts; the confirmation asks the winner to show its prefill within the tolerance.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from nccl_launch.bench.stats import (
    CONFIDENCE,
    Start,
    lower_bound,
    mean_figure,
    pooled_noise,
    prefill_starts,
)

# A candidate's value of each searched variable; None: unset, NCCL's default.
Values = dict[str, str | None]
# Each variable's values in the order given, canonical as the child gets them.
Space = dict[str, tuple[str | None, ...]]
# "nothing measured": no start of any candidate could be measured, whatever ended the search.
Stop = Literal["converged", "grid done", "budget spent", "nothing measured"]
CAP = 4  # starts of one candidate, at most, while a decision asks for more
SHOWN = 20  # untried candidates listed, at most: a grid may hold billions


class Objective(Protocol):
    """What the search measures: `key` names a candidate (the same key, the same candidate);
    `measure` starts it once, None when it could not be measured."""

    def key(self, values: Values) -> str: ...

    def measure(self, values: Values) -> Start | None: ...


@dataclass(frozen=True)
class Found:
    """Every start of each key tried, in the order first tried (None: a start that could
    not be measured); the winner's key (None: nothing measured); why the search stopped.
    Where the budget stopped it: the keys it had not decided, the candidates it never
    started (the first SHOWN of `untried_count`), and the starts a budget would need, by the
    search's plan, to decide them (`to_decide`)."""

    starts: dict[str, list[Start | None]]
    best: str | None
    stop: Stop
    refused: tuple[str, ...] = ()  # keys whose decode gain was refused for their prefill
    undecided: tuple[str, ...] = ()
    untried: tuple[Values, ...] = ()
    untried_count: int = 0
    to_decide: int | None = None


def measured(starts: list[Start | None]) -> list[Start]:
    return [start for start in starts if start is not None]


class _Spent(Exception):
    """The budget holds no more trials."""


class _Trials:
    """The objective's starts of each key, at most `budget` in all."""

    def __init__(self, objective: Objective, budget: int | None, tolerance: float | None) -> None:
        self.objective = objective
        self.budget = budget
        self.tolerance = tolerance  # of prefill below the reference's; None: not judged
        self.starts: dict[str, list[Start | None]] = {}
        self.values: dict[str, Values] = {}  # each key's values, as first started
        self.spent = 0
        self.decided: dict[tuple[str, str], bool] = {}
        self.guarded: dict[str, bool] = {}  # each key's prefill, judged once
        self.best: Values | None = None  # the best so far
        self.reference: Values | None = None  # whose prefill the guard holds to

    def again(self, values: Values) -> None:
        """One more start of `values`."""
        if self.budget is not None and self.spent >= self.budget:
            raise _Spent
        self.spent += 1
        key = self.objective.key(values)  # the candidate started, whatever its start teaches
        found = self.objective.measure(values)
        self.starts.setdefault(key, []).append(found)
        self.values.setdefault(key, values)

    def figures(self, values: Values, first: int = 1) -> list[Start]:
        """The measured starts of `values`, started `first` times where it never was."""
        key = self.objective.key(values)
        while len(self.starts.get(key, [])) < first:
            self.again(values)
        return measured(self.starts[key])

    def kept(self, candidate: Values) -> bool:
        """Whether `candidate` beats the best so far, and its prefill costs no more than the
        tolerance; it then becomes the best (and the reference where there is none)."""
        if self.beats(candidate, self.best) and self.within(candidate):
            self.best = candidate
            if self.reference is None:
                self.reference = candidate
            return True
        return False

    def within(self, candidate: Values) -> bool:
        """False where the one-sided CONFIDENCE bound says `candidate`'s prefill is below
        (1 - tolerance) x the reference's: the upper bound of (candidate - reference) in ln."""
        if self.tolerance is None or self.reference is None:
            return True
        key = self.objective.key(candidate)
        if key not in self.guarded:
            mine = prefill_starts(self.figures(candidate))
            theirs = prefill_starts(self.figures(self.reference))
            noise = pooled_noise(prefill_starts(measured(found)) for found in self.starts.values())
            below = lower_bound(theirs, mine, noise, CONFIDENCE) if mine and theirs else None
            self.guarded[key] = below is None or below <= -math.log(1 - self.tolerance)
        return self.guarded[key]

    def beats(self, candidate: Values, best: Values | None) -> bool:
        """Whether `candidate` beats `best` by the noise rule (anything measured beats
        nothing), starting either again where the data asks for it."""
        if not self.figures(candidate):
            return False
        if best is None:
            return True
        pair = (self.objective.key(candidate), self.objective.key(best))
        if pair not in self.decided:  # a later pass asks again: the same decision
            self.decided[pair] = self._beats(candidate, best)
        return self.decided[pair]

    def _beats(self, candidate: Values, best: Values) -> bool:
        # Each look at the figures is a chance of a false change: the decision's error is
        # split over the most looks it can take (Bonferroni), so that it stays 1 - CONFIDENCE.
        left = sum(CAP - self._count(values) for values in (candidate, best))
        confidence = 1 - (1 - CONFIDENCE) / (1 + max(0, left))
        while True:
            mine, theirs = self.figures(candidate), self.figures(best)
            noise = pooled_noise(measured(starts) for starts in self.starts.values())
            bound = lower_bound(mine, theirs, noise, confidence)
            if bound is not None and bound > 0:
                return True
            if mean_figure(mine) <= mean_figure(theirs):
                return False
            again = self._more(candidate, best)
            if again is None:
                return False  # no difference the noise allows
            self.again(again)

    def _more(self, candidate: Values, best: Values) -> Values | None:
        """The one of the two to start again: fewer starts first (the candidate on a tie),
        none past CAP."""
        order = sorted((candidate, best), key=self._count)  # stable: a tie keeps the order
        return next((values for values in order if self._count(values) < CAP), None)

    def _count(self, values: Values) -> int:
        """How many times `values` was started."""
        return len(self.starts.get(self.objective.key(values), []))

    def found(self, stop: Stop, pending: Pending | None = None) -> Found:
        """What the search found; where the budget stopped it, what of `pending` (the
        candidates it would still judge against the best) it left open."""
        if not any(measured(starts) for starts in self.starts.values()):
            stop = "nothing measured"
        best = self.best
        key = self.objective.key(best) if best is not None else None
        if key is not None and not measured(self.starts.get(key, [])):
            key = None
        refused = tuple(found for found, within in self.guarded.items() if not within)
        if stop != "budget spent" or best is None or pending is None:
            return Found(dict(self.starts), key, stop, refused)
        started = {
            name: values for name, values in self.values.items() if pending.holds(values, best)
        }
        undecided = [
            values
            for name, values in started.items()
            if name != key and name not in refused and self._open(values, best)
        ]
        # NCCL's defaults, where the budget ended the search before their start.
        first = [] if pending.holds(nccl := defaults(pending.space), best) else [nccl]
        untried = (
            values
            for values in itertools.chain(first, pending.each(best))
            if self.objective.key(values) not in self.starts
        )
        count = pending.count(best) - len(started)
        count += sum(self.objective.key(values) not in self.starts for values in first)
        # The plan: each untried candidate started once (as one slower than the best is),
        # each undecided one and the best up to CAP times.
        more = sum(CAP - self._count(values) for values in undecided)
        more += CAP - self._count(best) if undecided else 0
        return Found(
            dict(self.starts), key, stop, refused,
            tuple(self.objective.key(values) for values in undecided),
            tuple(itertools.islice(untried, SHOWN)), count, self.spent + more + count,
        )  # fmt: skip

    def _open(self, candidate: Values, best: Values) -> bool:
        """Whether the noise rule has yet to decide `candidate` against `best`: no decision
        made, its estimate above the best's, and either may be started again."""
        if (self.objective.key(candidate), self.objective.key(best)) in self.decided:
            return False
        mine, theirs = self.figures(candidate), self.figures(best)
        above = bool(mine) and mean_figure(mine) > mean_figure(theirs)
        return above and self._more(candidate, best) is not None


@dataclass(frozen=True)
class Pending:
    """The candidates a search judges against its best: each combination of the space's
    values (`whole`, the grid), or each change of one variable of the best (a pass)."""

    space: Space
    whole: bool

    def holds(self, values: Values, best: Values) -> bool:
        if not all(values[name] in choices for name, choices in self.space.items()):
            return False
        return self.whole or sum(values[name] != best[name] for name in self.space) == 1

    def each(self, best: Values) -> Iterator[Values]:
        """Lazily: a grid may hold billions."""
        if self.whole:
            for combination in itertools.product(*self.space.values()):
                yield dict(zip(self.space, combination, strict=True))
            return
        for name, choices in self.space.items():
            for value in choices:
                if value != best[name]:
                    yield best | {name: value}

    def count(self, best: Values) -> int:
        if self.whole:
            return math.prod(len(choices) for choices in self.space.values())
        return sum(value != best[name] for name, choices in self.space.items() for value in choices)


def defaults(space: Space) -> Values:
    """Every searched variable unset: NCCL's defaults, the reference."""
    return dict.fromkeys(space)


@dataclass(frozen=True)
class Plan:
    """What a search from `start` costs where no decision asks for more starts and no pass
    keeps a change (`least` starts: the start's values twice, NCCL's defaults once, each of
    `candidates` once, those of a pass or the `whole` grid), its `budget`, and the most
    starts its confirmation takes (`confirming`)."""

    least: int
    candidates: int
    whole: bool
    budget: int | None
    confirming: int


def planned(start: Values, space: Space, whole: bool, budget: int | None, rounds: int) -> Plan:
    """The plan of a search from `start` and its confirmation of `rounds` (of the start's
    values, the winner and NCCL's defaults)."""
    pending = Pending(space, whole)
    ends = [start] + ([defaults(space)] if defaults(space) != start else [])
    candidates = pending.count(start)
    least = 1 + candidates + sum(not pending.holds(end, start) for end in ends)
    return Plan(least, candidates, whole, budget, rounds * (len(ends) + 1))


def _begin(trials: _Trials, start: Values, space: Space) -> None:
    """The profile's values started twice (once where they fail), NCCL's defaults once;
    the best the better by the noise rule (the defaults where the profile's values fail)."""
    if trials.figures(start):
        trials.best = trials.reference = start
        trials.figures(start, first=2)
    trials.kept(defaults(space))


def descend(
    start: Values,
    space: Space,
    objective: Objective,
    budget: int | None,
    tolerance: float | None = None,
) -> Found:
    """Coordinate descent: from the better of `start` and NCCL's defaults, each variable in
    turn takes the value that beats the best so far by the noise rule, the others held;
    passes repeat until one changes nothing. Stops early, with the best so far, when the
    budget is spent; with a `tolerance`, a candidate whose prefill costs more is never
    kept."""
    trials = _Trials(objective, budget, tolerance)
    try:
        _begin(trials, start, space)
        current = trials.best or start  # nothing measured yet: any candidate that is wins
        changed = True
        while changed:
            changed = False
            for name, values in space.items():
                held = current  # the other variables, as this one's values are tried
                for value in values:
                    candidate = held | {name: value}
                    if value != held[name] and trials.kept(candidate):
                        current, changed = candidate, True
    except _Spent:
        return trials.found("budget spent", Pending(space, whole=False))
    return trials.found("converged")


def grid(
    start: Values,
    space: Space,
    objective: Objective,
    budget: int | None,
    tolerance: float | None = None,
) -> Found:
    """Every combination of the space's values, after `start` and NCCL's defaults, each
    kept over the best so far by the noise rule (and the prefill `tolerance`)."""
    trials = _Trials(objective, budget, tolerance)
    try:
        _begin(trials, start, space)
        # Lazy: a budget ends a grid of billions of combinations without making them all.
        for combination in itertools.product(*space.values()):
            trials.kept(dict(zip(space, combination, strict=True)))
    except _Spent:
        return trials.found("budget spent", Pending(space, whole=True))
    return trials.found("grid done")


def confirm(
    candidates: list[Values], rounds: int, objective: Objective
) -> dict[str, list[Start | None]]:
    """`rounds` fresh starts of each candidate, interleaved, the order rotated each round
    (a drift of the host over the rounds reaches each alike); each key's starts."""
    starts: dict[str, list[Start | None]] = {}
    for number in range(rounds):
        shift = number % len(candidates)
        for values in candidates[shift:] + candidates[:shift]:
            starts.setdefault(objective.key(values), []).append(objective.measure(values))
    return starts
