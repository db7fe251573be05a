"""`tune --prompt-tokens`: decode stays the objective, but a candidate whose prefill costs more
than the tolerance cannot win. The guard on a pure objective (the search's own test), then the
real CLI on the stand-in SGLang server, whose prefill rate its NCCL environment changes
(STANDIN_PREFILL_FACTORS) as its decode rate (STANDIN_TUNE_FACTORS)."""

from __future__ import annotations

from typing import Any

from nccl_launch.tune.search import Values, descend, grid
from nccl_launch.tune.stats import Start
from tests.test_tune import FACTORS, SPACE, START, Separable

# PROTO=LL128 wins decode by 12% and loses 40% of prefill; NTHREADS=256 wins both.
PREFILL: dict[str, dict[str | None, float]] = {"PROTO": {"LL128": 0.60}, "NTHREADS": {"256": 1.05}}
GUARDED: Values = {"PROTO": "LL", "MAX_NCHANNELS": "8", "NTHREADS": "256"}


class WithPrefill(Separable):
    """Separable's decode rate, and a prefill rate of 1000 times the `prefill` factors of its
    values and the same start's noise."""

    def __init__(self, prefill: dict[str, dict[str | None, float]], **kwargs: Any) -> None:
        super().__init__(FACTORS, **kwargs)
        self.prefill = prefill

    def measure(self, values: Values) -> Start | None:
        decode = super().measure(values)
        if decode is None:
            return None
        rate = decode.rate * 10
        for name, value in values.items():
            rate *= self.prefill.get(name, {}).get(value, 1.0) / self.factors[name].get(value, 1.0)
        return Start(decode.runs, (rate, rate))


def test_without_a_tolerance_the_decode_winner_wins_whatever_its_prefill() -> None:
    objective = WithPrefill(PREFILL)
    found = descend(START, SPACE, objective, None)
    assert found.best == objective.key({"PROTO": "LL128", "MAX_NCHANNELS": "8", "NTHREADS": "256"})
    assert found.refused == ()


def test_a_decode_gain_that_costs_prefill_is_refused_and_one_that_wins_both_kept() -> None:
    for noise, seed in ((0.0, 0), (0.01, 1), (0.02, 2)):
        objective = WithPrefill(PREFILL, noise=noise, seed=seed)
        found = descend(START, SPACE, objective, None, tolerance=0.05)
        assert found.best == objective.key(GUARDED), noise
        assert objective.key(START | {"PROTO": "LL128"}) in found.refused


def test_the_grid_refuses_every_combination_that_costs_prefill() -> None:
    objective = WithPrefill(PREFILL)
    found = grid(START, SPACE, objective, None, tolerance=0.05)
    assert found.best == objective.key(GUARDED)
    assert found.refused
    assert all("('PROTO', 'LL128')" in key for key in found.refused)


def test_a_prefill_loss_within_the_tolerance_is_not_refused() -> None:
    objective = WithPrefill({"PROTO": {"LL128": 0.97}}, noise=0.02, seed=3)
    found = descend(START, {"PROTO": ("LL", "LL128")}, objective, None, tolerance=0.05)
    assert found.best == objective.key(START | {"PROTO": "LL128"})
