"""`tune --prompt-tokens`: decode stays the objective, but a candidate whose prefill costs more
than the tolerance cannot win. The guard on a pure objective (the search's own test), then the
real CLI on the stand-in SGLang server, whose prefill rate its NCCL environment changes
(STANDIN_PREFILL_FACTORS) as its decode rate (STANDIN_TUNE_FACTORS)."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.bench import DEFAULT_PROMPT
from nccl_launch.bench.stats import Start
from nccl_launch.tune.search import Values, descend, grid
from tests.conftest import RunCli
from tests.tuning import (
    CLEAR,
    FACTORS,
    FAST,
    MODEL,
    SPACE,
    START,
    Objective,
    Separable,
    chart,
    journal_lines,
    journals,
)

# Tunes, first in the run (tests/conftest.py); each trial's stop signals its server's tree:
# in a PID namespace of the test's own.
pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]

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
    for noise, drawn in ((0.0, 0), (0.01, 1), (0.02, 2)):
        objective = WithPrefill(PREFILL, noise=noise, seed=drawn)
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


# The command on the stand-in, its decision on a seeded objective (bench's clock,
# `Objective`): the seed (PROTO=LL, NTHREADS=512, ...) where PROTO=LL128 decodes 25% faster
# and prefills 40% slower, NTHREADS=256 decodes twice as fast and prefills 10% faster; each
# start up to NOISE faster or slower, drawn from a seed. The stand-in serves the tokens
# quickly, the clock says how long they took: the host's delays decide nothing.
DECODE = {"NCCL_PROTO": {"LL128": 1.25}, "NCCL_NTHREADS": {"256": 2.0}}
PREFILL_COST = {"NCCL_PROTO": {"LL128": 0.60}, "NCCL_NTHREADS": {"256": 1.10}}
NOISE = 0.02
QUICK = MODEL | {"STANDIN_TOKEN_RATE": "4000"}
TRADE_SPACE = ("--try", "PROTO=LL,LL128", "--try", "NTHREADS=256,512")
PROMPT = ("--prompt-tokens", "200")
# A server not ready within 30 s is late, not broken: a trial that failed for a busy host
# would change what the seed decides.
PATIENT = ("--ready-timeout", "30")


def test_tune_does_not_crown_a_decode_gain_that_loses_prefill_and_keeps_one_that_wins_both(
    seed: int, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objective = Objective(DECODE, 40, NOISE, seed=1, prefill_factors=PREFILL_COST, prompt=200)
    objective.install(monkeypatch)
    args = (*TRADE_SPACE, *FAST, *PATIENT, *PROMPT)
    result = run_cli("tune", "standin", *args, "--write", "--format", "json", env=QUICK)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    rows = {row["changes"]: row for row in document["candidates"]}
    winner = next(row for row in document["candidates"] if row["digest"] == document["winner"])
    assert winner["changes"] == "NTHREADS=256", result.stderr
    refused = rows["PROTO=LL128"]
    assert refused["prefill_refused"] is True
    # Its figures over the profile's: the factors 1.25 and 0.60, but for the seeded starts'
    # (each start's rates within NOISE of the true ones, and so each mean of them).
    spread = (1 + NOISE) / (1 - NOISE)
    decode = refused["estimate"]["mean"] / rows["none"]["estimate"]["mean"]
    prefill = refused["prefill_tok_s"]["mean"] / rows["none"]["prefill_tok_s"]["mean"]
    assert 1.25 / spread <= decode <= 1.25 * spread
    assert 0.60 / spread <= prefill <= 0.60 * spread
    assert document["prefill_tolerance"] == 0.05
    assert (document["confirmed"], document["prefill_confirmed"]) == (True, True)
    # Within the tolerance (what prefill_confirmed says), and reaching towards its 10% gain.
    low, high = document["confirmation"]["prefill_over_profile"]["interval"]
    assert -0.05 < low < high and high > 0
    # The written [baseline]: decode and prefill, with the prompt they were measured with.
    written = tomllib.loads((tmp_path / "profiles" / "standin-2.toml").read_text())
    baseline = written["baseline"]
    assert baseline["prompt_tokens"] == 200
    assert baseline["prefill_tok_s"] == round(winner_of(document)["prefill_tok_s"]["mean"], 1)
    assert written["nccl"]["PROTO"] == "LL"
    assert written["nccl"]["NTHREADS"] == 256
    # Each trial's prefill figures are in the journal: the same command shows them again,
    # every trial from it, as text.
    (path,) = journals(tmp_path)
    assert {len(line["outcome"]["prefill"]) for line in journal_lines(path)} == {3}
    again = run_cli("tune", "standin", *args, env=QUICK)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = chart(again.stdout)
    assert lines[0].endswith("TOK/S  95% INTERVAL  PREFILL  STARTS  CANDIDATE")
    assert lines[0].index("CANDIDATE") < 80  # 80 columns but for the changes
    assert re.search(
        r" {2}[0-9.]+ +[0-9]+/[0-9]+ +PROTO=LL128 \(refused: prefill\)$", "\n".join(lines), re.M
    )
    assert re.search(
        r"^refused for its prefill cost: PROTO=LL128 won decode \([0-9.]+ tok/s\) by the noise "
        r"rule, but its prefill [0-9.]+ tok/s \[[0-9.]+-[0-9.]+\] is below standin@1's values' "
        r"\([0-9.]+ tok/s\) by more than 5% at 95% confidence$",
        again.stdout,
        re.M,
    ), again.stdout
    assert re.search(
        r"^winner \(changes NTHREADS=256\): [0-9.]+ tok/s, prefill [0-9.]+ tok/s, \+[0-9.]+% .* "
        r"over NCCL's defaults, prefill \+[0-9.]+% \[[-+][0-9.]+%, \+[0-9.]+%\] over standin@1$",
        again.stdout,
        re.M,
    ), again.stdout


def test_a_winner_that_cannot_show_its_prefill_within_the_tolerance_is_not_written(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    # NTHREADS=256 decodes twice as fast (at CLEAR's rate: plain whatever the host's delays)
    # and prefills 1% slower, the tolerance 1%: in the search the data cannot show that it
    # costs more, in the confirmation they cannot show that it costs less (the starts
    # counted: the same draws at every run).
    env = CLEAR | {
        "STANDIN_TUNE_FACTORS": json.dumps({"NCCL_NTHREADS": {"256": 2.0}}),
        "STANDIN_PREFILL_FACTORS": json.dumps({"NCCL_NTHREADS": {"256": 0.99}}),
        "STANDIN_START_COUNT": str(tmp_path / "starts"),
    }
    args = ("--try", "NTHREADS=256,512", *FAST, *PROMPT, "--write", "--format", "json")
    result = run_cli("tune", "standin", *args, "--prefill-tolerance", "0.01", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert winner_of(document)["changes"] == "NTHREADS=256", result.stderr
    assert not document["candidates"][-1]["prefill_refused"]
    assert (document["confirmed"], document["prefill_confirmed"], document["kept"]) == (
        False,
        False,
        True,
    )
    assert not (tmp_path / "profiles" / "standin-2.toml").exists()


def test_a_prefill_tolerance_without_a_prompt_is_refused(seed: int, run_cli: RunCli) -> None:
    result = run_cli("tune", "standin", "--try", "PROTO=LL128", "--prefill-tolerance", "0.1")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: --prefill-tolerance: prefill is measured only with --prompt-tokens N (or a "
        "[baseline] that records prompt_tokens); give it too, or leave the tolerance out\n"
    )


def test_a_journal_of_an_earlier_nccl_launch_is_the_same_tunes_and_resumes(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    # Its folder is named by the digest and the method as nccl-launch wrote them before
    # --prompt-tokens (four fields); its lines hold no prefill.
    result = run_cli("tune", "standin", "--try", "PROTO=LL128", *FAST, env=MODEL)
    assert result.returncode == 0, result.stdout + result.stderr
    (path,) = journals(tmp_path)
    digest = json.loads(run_cli("show", "standin", "--format", "json").stdout)["digest"]
    method = {"max_tokens": 40, "runs": 3, "warmup": 0, "prompt": DEFAULT_PROMPT}
    document = json.dumps({"digest": digest, "method": method, "confirm": method})
    assert path.parent.name == f"standin@1-{hashlib.sha256(document.encode()).hexdigest()[:12]}"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line.get("outcome"):
            del line["outcome"]["prefill"]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    again = run_cli("tune", "standin", "--try", "PROTO=LL128", *FAST, env=MODEL)
    assert again.returncode == 0, again.stdout + again.stderr
    finished = len(journal_lines(path))
    assert f"({finished} of all from the journal)" in again.stdout, again.stdout
    assert "trial 1 (from the journal)" in again.stdout


def winner_of(document: dict[str, Any]) -> dict[str, Any]:
    """The winner's row of the confirmation."""
    rows = document["confirmation"]["candidates"]
    found: dict[str, Any] = next(row for row in rows if row["digest"] == document["winner"])
    return found
