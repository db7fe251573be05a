"""The statistics of measured rates, on ln(rate): a start's figure, its runs' own interval
(`bench`), the noise pooled between starts of the same candidate, Student's t (no scipy), and
the bounds and intervals `tune`'s search and confirmation decide by. Pure functions of
numbers, importing nothing of nccl-launch's."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Start:
    """One start of a candidate's server: the tok/s of each of its runs; with a long prompt,
    the prefill tok/s of each (prompt tokens over time to first token), else none."""

    runs: tuple[float, ...]
    prefill: tuple[float, ...] = ()

    @property
    def prefill_start(self) -> Start | None:
        """Its prefill figures as a start of their own (None without any): the same
        statistics judge them."""
        return Start(self.prefill) if self.prefill else None

    @property
    def rate(self) -> float:
        """The mean of its runs."""
        return fmean(self.runs)

    @property
    def figure(self) -> float:
        """ln of its rate: the scale on which a factor of speed is a difference."""
        return math.log(self.rate)


@dataclass(frozen=True)
class Noise:
    """The variance of one start's figure and its degrees of freedom (0: none measured)."""

    variance: float
    dof: int

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)


def _squares(values: Sequence[float]) -> float:
    middle = fmean(values)
    return sum((value - middle) ** 2 for value in values)


def pooled_noise(groups: Iterable[Sequence[Start]]) -> Noise:
    """The variance of a start's figure pooled over every candidate (a group of its starts)
    with two or more: the squared deviations of its starts' figures from their mean, over
    the sum of (starts - 1); never below the variance of a start's mean its own runs show
    (their ln, pooled over the starts of two runs or more, over the runs of a start)."""
    between = within = 0.0
    dof = within_dof = 0
    runs = 0
    for starts in groups:
        if len(starts) >= 2:
            between += _squares([start.figure for start in starts])
            dof += len(starts) - 1
        for start in starts:
            if len(start.runs) >= 2:
                within += _squares([math.log(run) for run in start.runs])
                within_dof += len(start.runs) - 1
                runs = min(runs or len(start.runs), len(start.runs))
    if not dof:
        return Noise(0.0, 0)
    floor = within / within_dof / runs if within_dof else 0.0
    return Noise(max(between / dof, floor), dof)


def t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for Student's t with `dof` (>= 1) degrees of freedom: the closed form of
    integer dof (Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan(abs(t) / math.sqrt(dof))
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    if dof % 2:
        term = total = 0.0 if dof == 1 else math.cos(theta)
        for k in range(3, dof - 1, 2):  # cos, 2/3 cos^3, 2*4/(3*5) cos^5, ...
            term *= cos2 * (k - 1) / k
            total += term
        central = 2 / math.pi * (theta + sin * total)
    else:
        term = total = 1.0
        for k in range(2, dof - 1, 2):  # 1, 1/2 cos^2, 1*3/(2*4) cos^4, ...
            term *= cos2 * (k - 1) / k
            total += term
        central = sin * total
    return (1 + math.copysign(central, t)) / 2


def t_quantile(p: float, dof: int) -> float:
    """The t with P(T <= t) = p (0.5 <= p < 1), by bisection on `t_cdf`."""
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        low, high = high, high * 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, dof) < p else (low, middle)
    return (low + high) / 2


def runs_interval(start: Start) -> tuple[float, float] | None:
    """The CONFIDENCE interval of one start's rate from its own runs, as `rate_interval` of
    the start with the variance its runs show (their ln, over the runs: `pooled_noise`'s
    floor); None with fewer than two runs, or a run of no rate (no ln)."""
    count = len(start.runs)
    if count < 2 or min(start.runs) <= 0:
        return None
    variance = _squares([math.log(run) for run in start.runs]) / (count - 1) / count
    return rate_interval([start], Noise(variance, count - 1))


def prefill_starts(starts: Iterable[Start]) -> list[Start]:
    """The prefill figures of those of `starts` that have them, each as a start."""
    return [found for start in starts if (found := start.prefill_start) is not None]


def mean_figure(starts: Sequence[Start]) -> float:
    """A candidate's estimate: the mean of its starts' figures."""
    return fmean(start.figure for start in starts)


def lower_bound(
    better: Sequence[Start], than: Sequence[Start], noise: Noise, confidence: float
) -> float | None:
    """The one-sided `confidence` lower bound of (better - than) in ln; None without a dof."""
    if not noise.dof:
        return None
    error = noise.sd * math.sqrt(1 / len(better) + 1 / len(than))
    difference = mean_figure(better) - mean_figure(than)
    return difference - t_quantile(confidence, noise.dof) * error


def outward(interval: Sequence[float]) -> tuple[float, float]:
    """`interval` rounded outward to a tenth, as every output shows it and a [baseline]
    records it, so that what is shown holds what was computed; a low end above 0 stays above
    0 (a rate's is)."""
    low, high = interval
    return math.floor(low * 10) / 10 or low, math.ceil(high * 10) / 10


def interval_text(interval: Sequence[float]) -> str:
    """`90.4-93.6`: `interval` rounded `outward`."""
    low, high = outward(interval)
    return f"{low:.1f}-{high:.1f}"


def _two_sided(center: float, error: float, noise: Noise) -> tuple[float, float]:
    """exp of center -/+ the two-sided CONFIDENCE half-width: an interval of rates or ratios."""
    half = t_quantile((1 + CONFIDENCE) / 2, noise.dof) * error
    return math.exp(center - half), math.exp(center + half)


def rate_interval(starts: Sequence[Start], noise: Noise) -> tuple[float, float] | None:
    """The CONFIDENCE interval of a candidate's rate; None without a dof."""
    if not noise.dof:
        return None
    return _two_sided(mean_figure(starts), noise.sd / math.sqrt(len(starts)), noise)


def ratio_interval(
    mine: Sequence[Start], theirs: Sequence[Start], noise: Noise
) -> tuple[float, float] | None:
    """The CONFIDENCE interval of mine's rate over theirs; None without a dof."""
    if not noise.dof:
        return None
    error = noise.sd * math.sqrt(1 / len(mine) + 1 / len(theirs))
    return _two_sided(mean_figure(mine) - mean_figure(theirs), error, noise)
