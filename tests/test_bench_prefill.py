"""`bench --prompt-tokens` and `--concurrency` against the stand-in server (a real process tree
streaming on loopback, its prefill and decode paced at known rates): the prefill figure, the
streams at once, the baseline of both figures; the prompts and the figures on plain data."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

from nccl_launch.bench.client import Client
from nccl_launch.bench.result import BenchReport, Method, RunFigure, summarize
from nccl_launch.bench.streams import prompt_words
from tests.benching import PROFILE, Ticks, default_history, history_lines
from tests.conftest import RunCli, WriteProfile
from tests.standins import Started, url

PREFILL = re.compile(r"^prefill mean (\d+\.\d) tok/s of (\d+) prompt tokens", re.MULTILINE)


def test_prompt_tokens_report_the_servers_count_and_the_prefill_rate_of_bench_clock(
    start: Started, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each look a quarter second after the one before: a run's first token 0.25 s after its
    # request (1000 prompt tokens: 4000 tok/s), its 99 others in the next 0.25 s (396 tok/s).
    monkeypatch.setattr(Client, "clock", staticmethod(Ticks(0.25)))
    server = start()
    method = ("--max-tokens", "100", "--runs", "3", "--warmup", "0")
    result = run_cli("bench", "standin", "--url", url(server), *method, "--prompt-tokens", "1000")
    assert result.returncode == 0, result.stdout + result.stderr
    found = PREFILL.search(result.stdout)
    assert found is not None, result.stdout
    assert found.groups() == ("4000.0", "1000")  # the stand-in counts words: the server's count
    line = history_lines(default_history(tmp_path / "home"))[0]
    assert [run["prompt_tokens"] for run in line["runs"]] == [1000] * 3
    assert (line["method"]["prompt_tokens"], line["method"]["prompt"]) == (1000, "")
    assert (line["prefill_tok_s"], line["mean_tok_s"]) == (4000.0, 396.0)
    assert line["min_prefill_tok_s"] == line["prefill_tok_s"] == line["max_prefill_tok_s"]


def test_without_prompt_tokens_no_prefill_line_is_printed(start: Started, run_cli: RunCli) -> None:
    server = start()
    result = run_cli("bench", "standin", "--url", url(server), "--max-tokens", "20", "--runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "prefill" not in result.stdout
    assert "streams at once" not in result.stdout


def test_concurrent_streams_report_their_output_and_each_streams_rate(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    # 4 streams share the stand-in's decode: each at 100 / (1 + 0.25 * 3) = 57.1 tok/s,
    # 228.6 tok/s in all, a run of 60 tokens about 1 s. What is asserted of the figures
    # follows from the runs' own times, whatever a busy host delays.
    server = start(rate=100)
    method = ("--max-tokens", "60", "--runs", "8", "--warmup", "0")
    result = run_cli(
        "bench", "standin", "--url", url(server), *method, "--concurrency", "4",
        "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["method"]["concurrency"] == 4
    assert len(document["runs"]) == 8
    runs = sorted(document["runs"], key=lambda run: run["started_s"])
    ends = [run["started_s"] + run["seconds"] for run in runs]
    span = max(ends) - runs[0]["started_s"]
    assert document["output_tok_s"] == pytest.approx(8 * 60 / span)  # every token, wall time
    assert document["output_tok_s"] > 2 * document["mean_tok_s"]  # several streams at once
    assert 0 < document["ttft_p50_s"] <= document["ttft_p99_s"]
    # Four in flight at once: the first four were sent before any of them ended, the fifth
    # once one had.
    assert runs[3]["started_s"] < min(ends[:4]) <= runs[4]["started_s"]
    text = run_cli("bench", "standin", "--url", url(server), *method, "--concurrency", "4")
    assert text.returncode == 0, text.stdout + text.stderr
    assert re.search(r"^mean \d+\.\d tok/s per stream over 8 runs", text.stdout, re.MULTILINE)
    assert re.search(
        r"^4 streams at once: output \d+\.\d tok/s \(all streams' tokens over the wall time\), "
        r"time to first token \d\.\d{3} s median, \d\.\d{3} s p99$",
        text.stdout,
        re.MULTILINE,
    ), text.stdout


def test_a_failed_stream_is_reported_not_averaged_in_and_not_recorded(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(env={"STANDIN_FAIL_AT_REQUEST": "2"})  # the second request answers 500
    method = ("--max-tokens", "20", "--runs", "4", "--warmup", "0", "--concurrency", "2")
    result = run_cli("bench", "standin", "--url", url(server), *method)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "mean " in result.stdout and " over 3 runs " in result.stdout
    assert "1 request failed, not in the figures; nothing recorded:" in result.stdout
    assert "/v1/completions answered HTTP 500" in result.stdout
    (said,) = [line for line in result.stdout.splitlines() if line.startswith("  run request ")]
    assert re.fullmatch(r"  run request [1-4]: .*/v1/completions answered HTTP 500.*", said)
    assert "recorded in" not in result.stdout
    path = default_history(tmp_path / "home")
    assert not path.exists() or path.read_text() == ""


def test_one_stream_still_stops_at_its_first_failure(start: Started, run_cli: RunCli) -> None:
    server = start(env={"STANDIN_FAIL_AT_REQUEST": "2"})
    result = run_cli("bench", "standin", "--url", url(server), "--runs", "3", "--warmup", "0")
    assert result.returncode == 3
    assert "/v1/completions answered HTTP 500" in result.stderr
    assert "Run 1/3: " in result.stdout and "Run 2/3" not in result.stdout


def test_prompt_and_prompt_tokens_are_one_choice(run_cli: RunCli, start: Started) -> None:
    server = start()
    both = ("--prompt", "Hi", "--prompt-tokens", "10")
    result = run_cli("bench", "standin", "--url", url(server), *both)
    assert result.returncode == 2
    assert "--prompt and --prompt-tokens: give one" in result.stderr


def test_each_request_has_a_prompt_of_its_own_of_that_many_words() -> None:
    prompts = [prompt_words(1000, number) for number in range(1, 6)]
    assert {len(prompt.split()) for prompt in prompts} == {1000}
    # No two share a long prefix: a server's prefix cache cannot skip their prefill.
    assert len({prompt[:40] for prompt in prompts}) == 5
    assert prompt_words(1000, 3) == prompts[2]  # the same request, the same prompt


def test_throughput_and_ttft_percentiles_come_from_the_runs() -> None:
    runs = [
        RunFigure(tokens=10, seconds=1.0, ttft_s=ttft, started_s=start, prompt_tokens=100)
        for start, ttft in [(0.0, 0.1), (0.0, 0.2), (0.5, 0.3), (1.0, 0.4)]
    ]
    method = Method(max_tokens=10, runs=4, warmup=0, prompt="", prompt_tokens=100, concurrency=2)
    report = BenchReport.model_validate(
        {
            "status": "measured",
            "profile": "p@1",
            "digest": "sha256:" + "0" * 64,
            "profile_path": "/p.toml",
            "url": "http://127.0.0.1:1",
            "host": "h",
            "time": "2026-01-01T00:00:00+00:00",
            "method": method,
            "runs": runs,
            **summarize(runs),
        }
    )
    assert report.output_tok_s == pytest.approx(40 / 2.0)  # from 0.0 to the last end, 2.0
    assert report.ttft_p50_s == pytest.approx(0.25)
    assert report.ttft_p99_s == pytest.approx(0.4)  # nearest rank: the slowest of four
    assert report.prefill_tok_s == pytest.approx((1000 + 500 + 1000 / 3 + 250) / 4)
    old = report.model_copy(update={"runs": [RunFigure(tokens=10, seconds=1.0, ttft_s=0.1)]})
    assert (old.output_tok_s, old.prefill_tok_s) == (None, None)  # a line of an older bench
    assert old.runs[0].tok_s == 10.0  # whose figure was over the whole request
    assert runs[0].tok_s == pytest.approx(9 / 0.9)  # now: the tokens after the first


def test_a_baseline_of_both_figures_is_written_then_each_judged_by_its_own(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    # Decode and prefill each take 1 s a run (100 tokens at 100 tok/s, 1000 prompt tokens at
    # 1000); the second server's prefill takes 2 s, far more than a busy host delays a run.
    method = ("--max-tokens", "100", "--runs", "2", "--warmup", "0")
    first = start(rate=100, env={"STANDIN_PREFILL_RATE": "1000"})
    written = run_cli(
        "bench", "standin", "--url", url(first), *method, "--prompt-tokens", "1000",
        "--write-baseline",
    )  # fmt: skip
    assert written.returncode == 0, written.stdout + written.stderr
    said = re.search(
        r"prefill (\d+\.\d) tok/s \(prompts of 1000 tokens\) written to", written.stdout
    )
    assert said is not None, written.stdout
    path = tmp_path / "profiles" / "standin.toml"
    baseline = tomllib.loads(path.read_text())["baseline"]
    assert baseline["prompt_tokens"] == 1000
    assert baseline["prefill_tok_s"] == pytest.approx(float(said.group(1)), abs=0.05)
    assert "concurrency" not in baseline  # one stream: the default
    first.stop()
    table = "[baseline]\n" + "".join(f"{key} = {value}\n" for key, value in baseline.items())
    # The same decode, half the prefill (decode's figure, after the first token, holds): the
    # baseline's prompt_tokens is bench's default.
    slower = start(rate=100, env={"STANDIN_PREFILL_RATE": "500"}, baseline=table)
    judged = run_cli("bench", "standin", "--url", url(slower), *method)
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert "below the baseline: prefill mean " in judged.stdout
    assert "below the baseline: mean " not in judged.stdout  # decode met its own
    as_json = run_cli("bench", "standin", "--url", url(slower), *method, "--format", "json")
    verdict = json.loads(as_json.stdout)["baseline"]
    assert (as_json.returncode, verdict["met"], verdict["short"]) == (1, False, ["prefill_tok_s"])
    other = run_cli("bench", "standin", "--url", url(slower), *method, "--prompt-tokens", "500")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "not compared: the baseline was measured with prompt_tokens=1000 (this bench: 500)" in (
        other.stdout
    )


def test_a_prefill_baseline_without_its_prompt_tokens_is_refused(
    run_cli: RunCli, write_profile: WriteProfile
) -> None:
    text = PROFILE.format(version=1, python=sys.executable, port=1) + "args = []\n"
    write_profile("standin", text + "[baseline]\ndecode_tok_s = 100\nprefill_tok_s = 5000\n")
    shown = run_cli("show", "standin")
    assert shown.returncode == 2
    assert "baseline: prefill_tok_s: set without prompt_tokens" in shown.stderr


def test_a_worker_drifting_while_streams_run_at_once_discards_them(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    # The third request (one of the first two measured, in flight together) starts a
    # scheduler with NCCL_PROTO=Simple: the check after sees it.
    server = start(env={"STANDIN_DRIFT_AT_REQUEST": "3", "STANDIN_LATE_DRIFT": "NCCL_PROTO=Simple"})
    method = ("--max-tokens", "20", "--runs", "4", "--warmup", "1", "--concurrency", "2")
    result = run_cli("bench", "standin", "--url", url(server), *method)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '~ NCCL_PROTO  "LL" -> "Simple"' in result.stdout
    assert "discarding 4 runs: the server drifted from standin@1 while measured" in result.stdout
    path = default_history(tmp_path / "home")
    assert not path.exists() or path.read_text() == ""
