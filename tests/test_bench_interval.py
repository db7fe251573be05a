"""`bench`'s 95% interval of a mean, decode and prefill, t-based on ln(rate) as tune's: what
`--history` shows of a line an nccl-launch before the interval wrote, and what bench prints
of the stand-in's runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from statistics import fmean, stdev

import pytest

from nccl_launch.bench.result import BenchReport, Method, RunFigure, summarize
from tests.benching import FAST
from tests.conftest import RunCli
from tests.standins import Started, url

T_975_4 = 2.7764451051977987  # Student's t, 97.5th percentile, 4 degrees of freedom (tables)
RATES = [88.0, 90.0, 91.0, 89.0, 92.0]  # decode tok/s of five runs
TTFTS = [0.10, 0.11, 0.09, 0.10, 0.12]  # s: prefill 1000 prompt tokens / TTFT


def _interval(rates: list[float]) -> list[float]:
    """exp(ln(mean) -/+ t * sd(ln rate) / sqrt(n)), n = 5."""
    half = T_975_4 * stdev(math.log(rate) for rate in rates) / math.sqrt(len(rates))
    return [fmean(rates) * math.exp(-half), fmean(rates) * math.exp(half)]


def _older_line() -> dict[str, object]:
    """A history line of five runs as an nccl-launch before the interval wrote it."""
    runs = [
        RunFigure(
            tokens=101, seconds=ttft + 100 / rate, ttft_s=ttft, prompt_tokens=1000, started_s=i
        )
        for i, (rate, ttft) in enumerate(zip(RATES, TTFTS, strict=True))
    ]
    report = BenchReport.model_validate(
        {
            "status": "measured",
            "profile": "p@1",
            "digest": "sha256:" + "0" * 64,
            "profile_path": "/p.toml",
            "url": "http://127.0.0.1:1",
            "host": "h",
            "time": "2026-12-01T06:00:00+00:00",
            "method": Method(max_tokens=101, runs=5, warmup=0, prompt="", prompt_tokens=1000),
            "runs": runs,
            **summarize(runs),
        }
    )
    line = report.model_dump(mode="json")
    del line["interval_tok_s"], line["prefill_interval_tok_s"]
    return line


def test_an_older_history_line_is_shown_with_the_interval_of_its_runs(
    run_cli: RunCli, tmp_path: Path
) -> None:
    record = tmp_path / "history.jsonl"
    record.write_text(json.dumps(_older_line()) + "\n")
    shown = run_cli("bench", "--history", "--record", str(record), "--format", "json")
    assert (shown.returncode, shown.stderr) == (0, "")
    [result] = json.loads(shown.stdout)["results"]
    decode = _interval(RATES)
    prefill = _interval([1000 / ttft for ttft in TTFTS])
    assert result["interval_tok_s"] == pytest.approx(decode, rel=1e-9)
    assert result["prefill_interval_tok_s"] == pytest.approx(prefill, rel=1e-9)
    table = run_cli("bench", "--history", "--record", str(record)).stdout.splitlines()
    assert table[1].split()[4:6] == ["95%", "INTERVAL"]
    # Rounded outward, as every interval is shown (and a [baseline] records one).
    low, high = math.floor(decode[0] * 10) / 10, math.ceil(decode[1] * 10) / 10
    assert table[2].split()[3] == f"{low:.1f}-{high:.1f}"


def test_bench_prints_each_means_interval_and_one_run_has_none(
    start: Started, run_cli: RunCli
) -> None:
    server = start()
    args = ("bench", "standin", "--url", url(server), *FAST, "--prompt-tokens", "20")
    result = run_cli(*args, "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    rates = [run["tok_s"] for run in document["runs"]]
    low, high = document["interval_tok_s"]
    assert low <= document["mean_tok_s"] <= high
    half = 12.706204736174707 * stdev(map(math.log, rates)) / math.sqrt(2)  # t, 1 dof
    assert [low, high] == pytest.approx([fmean(rates) * math.exp(s * half) for s in (-1, 1)])
    text = run_cli(*args).stdout
    summary = re.search(r"^mean .* 95% interval (\S+)-(\S+) tok/s, time to first", text, re.M)
    assert summary is not None, text
    assert re.search(r"^prefill mean .*\), 95% interval \S+-\S+ tok/s$", text, re.M), text
    one = run_cli("bench", "standin", "--url", url(server), "--max-tokens", "20", "--runs", "1")
    assert ", no 95% interval (one run), time to first token " in one.stdout
