"""`bench` against the stand-in SGLang server (a real process tree streaming real HTTP on
loopback): the measured rate, the checks before and after, the stamp, the history, the
baseline, the errors; the pieces (GPU facts, history lines, the verdict) on plain data."""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from nccl_launch.bench.client import Client
from nccl_launch.bench.gpus import parse_gpus
from nccl_launch.bench.history import opened, read_history
from nccl_launch.bench.result import BenchReport, Method, RunFigure, judge, summarize
from nccl_launch.findings import Refused
from nccl_launch.live.url import server_url, url_address
from nccl_launch.profile.model import Baseline
from nccl_launch.report import SCHEMA_VERSION
from nccl_launch.secrets.url import Url
from nccl_launch.sglang.kind import SGLANG
from nccl_launch.sglang.server import Server as ServerTable
from tests.benching import FAST, MEAN, PROFILE, Ticks, default_history, history_lines
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, Server, free_port, wait_for
from tests.standins import Started, url

RUN_LINE = re.compile(
    r"Run (\d+)/(\d+): (\d+) tokens in \d+\.\d\d s, the first at \d+\.\d{3} s: (\d+\.\d) tok/s"
)
IMPOSSIBLE = "/v1/completions: the server reported an impossible token count"
DEEP = "[" * 5000 + "]" * 5000  # deeper than Python's recursion limit
# What nvidia-smi printed on an H200 host (see tests/standin/bin/nvidia-smi).
H200 = "0, NVIDIA H200, 143771 MiB, 580.159.04, 00000000:00:06.0\n"


def nothing_recorded(tmp_path: Path) -> bool:
    """The history was opened before measuring (so it may exist), but holds no line."""
    path = default_history(tmp_path / "home")
    return not path.exists() or path.read_bytes() == b""


# The real-time smoke test of bench: a real stream on the host's clock, whose figures depend
# on how late a busy host wakes the server or bench; what is asserted of them holds whatever
# the host does (the figures themselves: the test below, on a clock of its own).
def test_bench_measures_a_real_stream_and_records_what_it_printed(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(rate=100)
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = RUN_LINE.findall(result.stdout)
    assert [(number, total, tokens) for number, total, tokens, _ in runs] == [
        ("1", "2", "60"),
        ("2", "2", "60"),
    ]
    found = MEAN.search(result.stdout)
    assert found is not None, result.stdout
    assert float(found.group(1)) > 0
    assert "Warmup 1/1: 60 tokens in " in result.stdout
    assert "(not counted)" in result.stdout
    assert "checked before: pid " in result.stdout
    assert "checked after: pid " in result.stdout
    assert "SGLang 0.5.23, model /models/m" in result.stdout
    recorded = history_lines(default_history(tmp_path / "home"))
    assert len(recorded) == 1
    assert recorded[0]["mean_tok_s"] == pytest.approx(float(found.group(1)), abs=0.05)


def test_bench_figures_are_the_times_of_its_clock(
    start: Started, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each look a quarter second after the one before: a run's first text 0.25 s after its
    # request, its [DONE] 0.5 s after: its 59 tokens after the first in 0.25 s, 236 tok/s.
    monkeypatch.setattr(Client, "clock", staticmethod(Ticks(0.25)))
    server = start()
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--runs", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    run = "60 tokens in 0.50 s, the first at 0.250 s: 236.0 tok/s"
    assert [line for line in result.stdout.splitlines() if line.startswith("Run ")] == [
        f"Run {number}/3: {run}" for number in (1, 2, 3)
    ]
    found = MEAN.search(result.stdout)
    assert found is not None, result.stdout
    assert found.group(1) == "236.0"
    [recorded] = history_lines(default_history(tmp_path / "home"))
    assert recorded["mean_tok_s"] == 236.0
    assert [figure["tok_s"] for figure in recorded["runs"]] == [236.0] * 3


@pytest.mark.parametrize("end", ["\r", "\r\n"], ids=["cr", "crlf"])
def test_events_may_end_their_lines_with_cr_or_crlf(
    end: str, start: Started, run_cli: RunCli
) -> None:
    server = start(env={"STANDIN_LINE_END": end})
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [tokens for _, _, tokens, _ in RUN_LINE.findall(result.stdout)] == ["60", "60"]


def test_a_crlf_split_between_two_chunks_ends_one_line() -> None:
    chunks = [b"data: a\r", b"\ndata: b\r", b"", b"\n\rdata: c\n"]
    with Client(Url("http://127.0.0.1:1"), 1, SGLANG) as client:
        lines = list(client._lines("/v1/completions", iter(chunks)))
    assert lines == ["data: a", "data: b", "", "data: c"]


def test_what_the_server_does_wrong_is_a_finding_of_this_hosts() -> None:
    port = free_port()  # nothing listens there
    with Client(Url(f"http://127.0.0.1:{port}"), 1, SGLANG) as client:
        with pytest.raises(Refused) as refused:
            client.complete({"max_tokens": 1, "prompt": "x"})
        with pytest.raises(Refused) as long_line:
            list(client._lines("/v1/completions", iter([b"x" * (1 << 20) + b"x\n"])))
    (finding,) = refused.value.findings
    assert (finding.code, finding.cause, refused.value.exit_code) == ("cannot-connect", "host", 3)
    assert finding.where == f"http://127.0.0.1:{port}/v1/completions"
    assert [each.code for each in long_line.value.findings] == ["long-stream-line"]


def test_a_raw_started_server_is_refused_without_any_figure(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(launcher=False)
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "refusing to measure: the server does not run standin@1 as declared" in result.stdout
    assert "- NCCL_PROTO" in result.stdout  # the drift report says why, a line per line
    assert result.stdout.startswith("check standin@1 (") and "\\n" not in result.stdout
    assert "tok/s" not in result.stdout
    as_json = run_cli("bench", "standin", "--url", url(server), *FAST, "--format", "json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert (document["status"], document["runs"], document["mean_tok_s"]) == ("refused", [], None)
    assert document["drift"]["main_pid"] == server.process.pid  # check's own JSON report
    assert nothing_recorded(tmp_path)


def test_a_worker_drifting_during_the_runs_discards_them(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    # The second request (the first measured run) starts a scheduler with NCCL_PROTO=Simple.
    server = start(env={"STANDIN_DRIFT_AT_REQUEST": "2", "STANDIN_LATE_DRIFT": "NCCL_PROTO=Simple"})
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "checked before: pid " in result.stdout
    assert "Run 2/2: " in result.stdout  # measured, then thrown away
    assert '~ NCCL_PROTO  "LL" -> "Simple"' in result.stdout
    assert "\\n" not in result.stdout  # check's report printed line by line, not escaped whole
    assert "discarding 2 runs: the server drifted from standin@1 while measured" in result.stdout
    assert "mean" not in result.stdout
    assert nothing_recorded(tmp_path)


@pytest.mark.parametrize(
    ("decode_tok_s", "code", "verdict"),
    [
        (250, 0, "baseline 250.0 tok/s less 5% = 237.5 tok/s: met"),
        (600, 1, "baseline 600.0 tok/s less 5% = 570.0 tok/s: missed"),
    ],
)
def test_the_baseline_passes_above_and_fails_below(
    decode_tok_s: int,
    code: int,
    verdict: str,
    start: Started,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    server = start(baseline=f"[baseline]\ndecode_tok_s = {decode_tok_s}\n")  # streams 300 tok/s
    state = tmp_path / "state"
    result = run_cli(
        "bench", "standin", "--url", url(server), *FAST, env={"XDG_STATE_HOME": str(state)}
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert verdict in result.stdout
    assert ("below the baseline: mean " in result.stdout) == bool(code)
    recorded = history_lines(state / "nccl-launch" / "bench.jsonl")  # a miss is kept too
    assert recorded[0]["baseline"]["met"] is (not code)


def test_the_verdict_is_on_the_right_side_of_the_floor() -> None:
    baseline = Baseline(decode_tok_s=100.0, tolerance=0.1)
    method = Method(max_tokens=500, runs=5, warmup=1, prompt="p")
    assert judge(baseline, 90.0, method).met is True  # exactly the floor
    assert judge(baseline, 89.99, method).met is False
    assert judge(Baseline(decode_tok_s=100.0, tolerance=0), 100.0, method).met is True
    assert judge(Baseline(decode_tok_s=100.0, tolerance=0), 99.99, method).met is False
    other = Baseline(decode_tok_s=100.0, max_tokens=200)
    assert judge(other, 1.0, method).met is None  # another method: not compared
    assert "max_tokens=200 (this bench: 500)" in str(judge(other, 1.0, method).note)


def test_the_baselines_method_is_the_default_and_another_is_not_compared(
    start: Started, run_cli: RunCli
) -> None:
    server = start(baseline="[baseline]\ndecode_tok_s = 600\nmax_tokens = 30\nruns = 1\n")
    same = run_cli("bench", "standin", "--url", url(server), "--warmup", "0")
    assert same.returncode == 1, same.stdout + same.stderr  # 300 tok/s: below 600
    assert RUN_LINE.findall(same.stdout) == [("1", "1", "30", RUN_LINE.findall(same.stdout)[0][3])]
    other = run_cli("bench", "standin", "--url", url(server), "--max-tokens", "20")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "not compared: the baseline was measured with max_tokens=30 (this bench: 20)" in (
        other.stdout
    )


@pytest.mark.parametrize(
    ("env", "options", "message"),
    [
        ({"STANDIN_COMPLETIONS_STATUS": "500"}, (), "/v1/completions answered HTTP 500: "),
        ({"STANDIN_EMPTY_STREAM": "1"}, (), "/v1/completions streamed no tokens"),
        ({"STANDIN_STALL": "1"}, ("--timeout", "0.5"), "no answer within 0.5 s (--timeout)"),
        *[
            ({"STANDIN_USAGE_TOKENS": count}, (), IMPOSSIBLE)
            for count in ("-60", "true", "1" + "0" * 400, "1" + "0" * 320, "1e300", "61", "0")
        ],
        ({"STANDIN_EVENT": DEEP}, (), "/v1/completions streamed an event that is not JSON"),
        ({"STANDIN_INFO": DEEP}, (), "/server_info answered something not JSON"),
        ({"STANDIN_INFO_ENDLESS": "1"}, (), "/server_info answered more than 1 MiB"),
        (
            {"STANDIN_INFO_ENDLESS": "1", "STANDIN_INFO_STATUS": "500"},
            (),
            '/server_info answered HTTP 500: {"version": "aaaa',
        ),
        ({"STANDIN_LONG_LINE": "1"}, (), "/v1/completions streamed a line longer than 1 MiB"),
        (
            {"STANDIN_ENDLESS": "1"},
            ("--timeout", "0.5", "--max-tokens", "1"),  # 0.5 s + 1 token at 1 tok/s
            "/v1/completions: answer not complete within 1.5 s (--timeout + max_tokens at 1 ",
        ),
        (
            {"STANDIN_CLOSE_BEFORE_DONE": "1"},
            (),
            "/v1/completions: the server closed the stream before [DONE]",
        ),
    ],
    ids=[
        "http-500",
        "empty-stream",
        "timeout",
        "negative-tokens",
        "boolean-tokens",
        "10**400-tokens",
        "10**320-tokens",
        "float-tokens",
        "more-tokens-than-asked",
        "zero-tokens",
        "deep-event",
        "deep-info",
        "endless-info",
        "endless-error-body",
        "endless-line",
        "endless-stream",
        "close-before-done",
    ],
)
def test_server_errors_exit_3_with_one_line(
    env: dict[str, str],
    options: tuple[str, ...],
    message: str,
    start: Started,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    server = start(env=env)
    result = run_cli("bench", "standin", "--url", url(server), *FAST, *options)
    assert result.returncode == 3, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"nccl-launch: http://127.0.0.1:{server.port}")
    assert message in result.stderr
    assert nothing_recorded(tmp_path)


@pytest.mark.parametrize("with_pid", [False, True], ids=["port", "pid"])
def test_no_server_on_the_urls_address_exits_3(
    with_pid: bool, start: Started, run_cli: RunCli
) -> None:
    server = start()  # a server, on another port: --pid names it, yet the URL is not its
    nobody = f"127.0.0.1:{free_port()}"
    pid = ("--pid", str(server.process.pid)) if with_pid else ()
    result = run_cli("bench", "standin", "--url", f"http://{nobody}", *pid, *FAST)
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr == f"nccl-launch: no process listens on {nobody}\n"


def test_ctrl_c_prints_the_runs_so_far_and_records_nothing(start: Started, tmp_path: Path) -> None:
    server = start(rate=200)
    process = subprocess.Popen(
        [
            console_script(),
            "bench",
            "standin",
            "--url",
            url(server),
            "--max-tokens",
            "40",
            "--runs",
            "50",
            "--warmup",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # unbuffered: a line read ahead here would be lost to communicate()'s os.read
    )
    assert process.stdout is not None
    seen = []
    for raw in process.stdout:  # wait for the first run to end, then press Ctrl-C
        seen.append(raw.decode())
        if raw.startswith(b"Run 1/50: "):
            break
    process.send_signal(signal.SIGINT)
    out_bytes, err_bytes = process.communicate(timeout=30)
    out, err = out_bytes.decode(), err_bytes.decode()
    assert process.returncode == 130, "".join(seen) + out + err
    summary = re.search(r"interrupted after (\d+) of 50 runs: mean \d+\.\d tok/s", out)
    assert summary is not None, out
    assert int(summary.group(1)) == len(RUN_LINE.findall("".join(seen) + out))
    assert out.rstrip().endswith("nothing recorded")
    assert "Traceback" not in err
    assert nothing_recorded(tmp_path)


JSON_KEYS = {
    "schema_version",
    "status",
    "profile",
    "digest",
    "profile_path",
    "url",
    "host",
    "time",
    "server",
    "server_version",
    "sglang_version",
    "model",
    "gpus",
    "gpus_note",
    "method",
    "runs",
    "mean_tok_s",
    "interval_tok_s",
    "min_tok_s",
    "max_tok_s",
    "ttft_s",
    "prefill_tok_s",
    "prefill_interval_tok_s",
    "min_prefill_tok_s",
    "max_prefill_tok_s",
    "output_tok_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "baseline",
    "failed",
    "drift",
    "written",
}


def test_json_is_a_versioned_document_stamped_with_profile_server_and_gpus(
    start: Started, run_cli: RunCli
) -> None:
    server = start(baseline="[baseline]\ndecode_tok_s = 250\n")
    path = f"{STANDIN / 'bin'}{os.pathsep}{os.environ['PATH']}"  # nvidia-smi's real answer
    result = run_cli(
        "bench", "standin", "--url", url(server), *FAST, "--format", "json", env={"PATH": path}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert set(document) == JSON_KEYS
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["status"] == "measured"
    assert document["profile"] == "standin@1"
    assert document["digest"].startswith("sha256:")
    assert document["profile_path"] == str(Path.cwd() / "profiles" / "standin.toml")
    assert (document["server"], document["server_version"]) == ("sglang", "0.5.23")
    assert (document["sglang_version"], document["model"]) == ("0.5.23", "/models/m")
    assert document["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_total": "143771 MiB",
            "driver_version": "580.159.04",
            "pci_bus_id": "00000000:00:06.0",
        }
    ]
    assert document["method"] == {
        "max_tokens": 60,
        "runs": 2,
        "warmup": 1,
        "prompt": document["method"]["prompt"],
        "prompt_tokens": None,
        "concurrency": 1,
    }
    figures = {"tokens", "seconds", "ttft_s", "tok_s", "prompt_tokens", "started_s"}
    assert [set(run) for run in document["runs"]] == [figures | {"prefill_tok_s"}] * 2
    # The stand-in counts the default prompt's words.
    assert [run["prompt_tokens"] for run in document["runs"]] == [15, 15]
    verdict = {"decode_tok_s", "tolerance", "floor", "met", "note", "prefill_tok_s"}
    assert set(document["baseline"]) == verdict | {"prefill_floor", "short"}
    assert document["failed"] == []
    assert document["drift"] is None
    assert document["written"] is None  # only --write-baseline writes
    assert "Run 1/2: " in result.stderr  # progress beside JSON goes to stderr
    assert "recorded in " in result.stderr


def test_without_nvidia_smi_the_gpus_are_empty_and_say_why(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    (tmp_path / "no-tools").mkdir()
    result = run_cli(
        "bench",
        "standin",
        "--url",
        url(server),
        *FAST,
        "--format",
        "json",
        env={"PATH": str(tmp_path / "no-tools")},
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["gpus"], document["gpus_note"]) == ([], "no nvidia-smi on PATH")


def test_a_server_with_only_get_server_info_is_stamped_from_it(
    start: Started, run_cli: RunCli
) -> None:
    server = start(env={"STANDIN_OLD_INFO": "1"})
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["sglang_version"], document["model"]) == ("0.5.23", "/models/m")


def test_nvidia_smis_lines_are_read_and_a_name_may_hold_a_comma() -> None:
    (gpu,) = parse_gpus(H200)
    assert (gpu.index, gpu.name, gpu.memory_total) == (0, "NVIDIA H200", "143771 MiB")
    assert (gpu.driver_version, gpu.pci_bus_id) == ("580.159.04", "00000000:00:06.0")
    (odd,) = parse_gpus("3, Vendor GPU, rev 2, 80 MiB, 1.0, 0000:01:00.0\n")
    assert (odd.index, odd.name) == (3, "Vendor GPU, rev 2")
    with pytest.raises(ValueError, match="not a line of"):
        parse_gpus("No devices were found\n")


def test_history_prints_a_table_per_profile_and_digest(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    for _ in range(2):
        assert run_cli("bench", "standin", "--url", url(server), *FAST).returncode == 0
    record = default_history(tmp_path / "home")
    older = json.loads(record.read_text().splitlines()[0])  # as version 0 of another digest
    older |= {"profile": "standin@0", "digest": "sha256:" + "0" * 64}
    del older["server"], older["server_version"]  # as written before vLLM: sglang_version only
    with record.open("a") as history:
        history.write(json.dumps(older) + "\n")
    shown = run_cli("bench", "--history")
    assert shown.returncode == 0, shown.stderr
    tables = shown.stdout.split("\n\n")
    assert [table.splitlines()[0] for table in tables] == [
        f"standin@1 {json.loads(record.read_text().splitlines()[0])['digest'][:15]}: 2 results",
        "standin@0 sha256:00000000: 1 result",
    ]
    header = tables[0].splitlines()[1].split()
    assert header[:4] == ["WHEN", "RUNS", "MEAN", "TOK/S"]
    assert tables[0].splitlines()[2].split()[1] == "2x60"
    assert header[8:12] == ["PREFILL", "TOK/S", "SERVER", "BASELINE"]
    assert tables[1].splitlines()[2].split()[5:8] == ["-", "SGLang", "0.5.23"]
    one = run_cli("bench", "--history", "standin@0")
    assert one.stdout.startswith("standin@0 ") and "standin@1" not in one.stdout
    by_name = run_cli("bench", "--history", "standin")
    assert by_name.stdout.count("standin@") == 2
    none = run_cli("bench", "--history", "other")
    assert none.stdout == f"no results of other in {record}\n"


def test_a_bad_history_line_is_named_with_its_number_and_skipped(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    record = tmp_path / "h.jsonl"
    record.write_text('{"not": "a result"}\n')
    with record.open("ab") as history:
        history.write(b"\xff garbage without a newline")  # a line torn by a crash
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--record", str(record))
    assert result.returncode == 0, result.stderr
    assert len(record.read_bytes().splitlines()) == 3  # the torn line stays a line of its own
    shown = run_cli("bench", "--history", "--record", str(record), "--format", "json")
    assert shown.returncode == 0
    assert [line.split(" (")[0] for line in shown.stderr.splitlines()] == [
        f"nccl-launch: warning: {record}: line 1: not a bench result",
        f"nccl-launch: warning: {record}: line 2: not a bench result",
    ]
    document = json.loads(shown.stdout)
    assert set(document) == {"schema_version", "path", "results", "problems"}
    assert [result["profile"] for result in document["results"]] == ["standin@1"]
    assert len(document["problems"]) == 2


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink(path: Path) -> None:
    path.symlink_to(path.with_name("target.jsonl"))


def _directory(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize(
    ("make", "kind"),
    [(_fifo, "a FIFO"), (_symlink, "a symlink"), (_directory, "a directory")],
    ids=["fifo", "symlink", "directory"],
)
def test_a_history_that_is_no_regular_file_is_refused_before_measuring(
    make: Any, kind: str, run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1))
    record = tmp_path / "history.jsonl"
    make(record)
    args = ("bench", "standin", "--url", "http://127.0.0.1:1", "--record", str(record))
    result = run_cli(*args)  # nothing listens on port 1: the record is refused first
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"nccl-launch: bench history {record}: {kind}")
    assert len(result.stderr.splitlines()) == 1
    assert not record.with_name("target.jsonl").exists()


def test_a_record_file_is_created_by_its_first_result_only(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1))
    record = tmp_path / "new" / "history.jsonl"
    args = ("bench", "standin", "--url", "http://127.0.0.1:1", "--record", str(record))
    result = run_cli(*args)  # nothing listens on port 1: nothing to record
    assert result.returncode == 3, result.stderr
    assert not (tmp_path / "new").exists()


def measured() -> BenchReport:
    """A result of one run: 1 token in 0.5 s."""
    runs = [RunFigure(tokens=1, seconds=0.5, ttft_s=0.1)]
    stamp = {
        "status": "measured",
        "profile": "p@1",
        "digest": "sha256:x",
        "profile_path": "/p.toml",
        "url": "http://127.0.0.1:1",
        "host": "h",
        "time": "2026-12-01T06:00:00+00:00",
        "method": Method(max_tokens=1, runs=1, warmup=0, prompt="p"),
    }
    return BenchReport.model_validate({**stamp, "runs": runs, **summarize(runs)})


def test_a_line_is_appended_whole_after_a_torn_one(tmp_path: Path) -> None:
    record = tmp_path / "h.jsonl"
    record.write_bytes(b'{"torn')
    report = measured()
    with opened(record) as recorder:
        recorder.append(report)
    lines = record.read_bytes().split(b"\n")
    assert lines[0] == b'{"torn'
    assert json.loads(lines[1])["runs"][0]["tok_s"] == 2.0
    assert lines[2] == b""
    found = read_history(record)
    assert [result.profile for result in found.results] == ["p@1"]
    assert found.problems[0].line().startswith(f"{record}: line 1: not a bench result")


def test_a_history_run_too_short_for_a_finite_rate_is_skipped(tmp_path: Path) -> None:
    record = tmp_path / "h.jsonl"
    line = json.loads(measured().model_dump_json())
    line["runs"][0]["seconds"] = 1e-320  # 1 token in it is an infinite rate
    record.write_text(json.dumps(line) + "\n" + measured().model_dump_json() + "\n")
    found = read_history(record)
    assert len(found.results) == 1
    assert [problem.line() for problem in found.problems] == [
        f"{record}: line 1: not a bench result (runs.0.seconds: Input should be greater than or "
        "equal to 0.000001); skipped"
    ]


# A history line as nccl-launch wrote it before a bad line was a finding.
WRITTEN_BEFORE = (
    '{"schema_version":1,"status":"measured","profile":"p@1","digest":"sha256:x",'
    '"profile_path":"/p.toml","url":"http://127.0.0.1:1","host":"h",'
    '"time":"2026-12-01T06:00:00+00:00","server":null,"server_version":null,"model":null,'
    '"gpus":[],"gpus_note":null,"method":{"max_tokens":1,"runs":1,"warmup":0,"prompt":"p",'
    '"prompt_tokens":null,"concurrency":1},"runs":[{"tokens":1,"seconds":0.5,"ttft_s":0.1,'
    '"prompt_tokens":null,"started_s":null,"tok_s":2.0,"prefill_tok_s":null}],'
    '"mean_tok_s":2.0,"min_tok_s":2.0,"max_tok_s":2.0,"ttft_s":0.1,"baseline":null,'
    '"failed":[],"interval_tok_s":null,"prefill_interval_tok_s":null,"prefill_tok_s":null,'
    '"min_prefill_tok_s":null,"max_prefill_tok_s":null,"output_tok_s":null,"ttft_p50_s":0.1,'
    '"ttft_p99_s":0.1,"sglang_version":null}'
)


def test_an_earlier_history_reads_and_its_bad_line_is_a_finding_said_as_a_string(
    run_cli: RunCli, tmp_path: Path
) -> None:
    record = tmp_path / "h.jsonl"
    record.write_text(f"{WRITTEN_BEFORE}\n{{torn\n")
    shown = run_cli("bench", "--history", "--record", str(record), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert [result["mean_tok_s"] for result in document["results"]] == [2.0]
    said = f"{record}: line 2: not a bench result (Invalid JSON: key must be a string at line 1 "
    said += "column 2); skipped"
    assert document["problems"] == [said]  # the documented shape: each a string
    assert shown.stderr == f"nccl-launch: warning: {said}\n"
    (problem,) = read_history(record).problems
    assert (problem.code, problem.where, problem.file) == (
        "bad-history-line",
        "line 2",
        str(record),
    )
    assert (problem.severity, problem.cause) == ("warning", "host")


def test_history_goes_under_xdg_state_home_when_it_is_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nccl_launch.bench.history import default_path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_path() == tmp_path / "state" / "nccl-launch" / "bench.jsonl"
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # the spec says to ignore it
    assert default_path() == Path.home() / ".local" / "state" / "nccl-launch" / "bench.jsonl"


@pytest.mark.parametrize("home", ["", "relative"])
def test_an_empty_or_relative_home_is_ignored_for_the_user_databases(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nccl_launch.bench.history import default_path

    monkeypatch.setenv("HOME", home)
    known = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    assert default_path() == known / ".local" / "state" / "nccl-launch" / "bench.jsonl"


def test_no_usable_home_at_all_is_a_host_problem(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    result = run_cli("bench", "--history", env={"HOME": "relative"})
    assert result.returncode == 3, result.stderr
    assert result.stderr == (
        f"nccl-launch: no home directory: HOME is relative (relative) and the user database "
        f"has none for uid {os.geteuid()}; set HOME or XDG_STATE_HOME to an absolute path\n"
    )


ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="root writing in another user's home")
OTHER_UID = 12345


def owned_by_others(home: Path) -> Path:
    """The folders of `home` down to the state home, given to another user; the last one."""
    state = home / ".local" / "state"
    state.mkdir(parents=True)
    for folder in (home, home / ".local", state):
        os.chown(folder, OTHER_UID, OTHER_UID)
    return state


@ROOT_ONLY
@pytest.mark.parametrize("plant", [True, False], ids=["symlink", "empty-home"])
def test_root_writes_nothing_in_another_users_home(
    plant: bool, run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """`sudo -E bench`: root with HOME of a user, who planted a symlink to a folder root owns."""
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1))
    home, target = tmp_path / "alice", tmp_path / "root-owns"
    home.mkdir()
    target.mkdir()
    os.chown(home, OTHER_UID, OTHER_UID)
    if plant:
        (owned_by_others(home) / "nccl-launch").symlink_to(target)
        os.lchown(home / ".local" / "state" / "nccl-launch", OTHER_UID, OTHER_UID)
    args = ("bench", "standin", "--url", "http://127.0.0.1:1")
    result = run_cli(*args, env={"HOME": str(home)})  # nothing listens: the record fails first
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"nccl-launch: bench history {home}/.local/state/nccl-launch/bench.jsonl: {home} (uid "
        f"{OTHER_UID}, mode 0755) is not root's alone, and root writes nothing in another "
        "user's folder; set XDG_STATE_HOME to a folder of your own, or name the file with "
        "--record FILE\n"
    )
    assert list(target.iterdir()) == []
    assert [path for path in home.rglob("*") if path.lstat().st_uid != OTHER_UID] == []


def test_a_symlink_of_another_user_under_the_state_home_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even in a home of one's own: a symlink another user could place is not followed."""
    state, target = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir()
    target.mkdir()
    (state / "nccl-launch").symlink_to(target)
    os.lchown(state / "nccl-launch", OTHER_UID, OTHER_UID)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    refused = rf"{state}/nccl-launch: a symlink of uid {OTHER_UID}, not followed"
    with pytest.raises(Refused, match=refused), opened(None):
        pass
    assert list(target.iterdir()) == []


def test_ones_own_symlink_is_followed_and_new_folders_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~/.local on another disk, as many set it up: the history goes there, folders 0700."""
    home, elsewhere = tmp_path / "user", tmp_path / "disk"
    home.mkdir()
    elsewhere.mkdir()
    (home / ".local").symlink_to(elsewhere)
    monkeypatch.setenv("HOME", str(home))
    with opened(None) as recorder:
        recorder.append(measured())
    assert recorder.path == home / ".local" / "state" / "nccl-launch" / "bench.jsonl"
    assert [result.profile for result in read_history(recorder.path).results] == ["p@1"]
    for folder in (elsewhere / "state", elsewhere / "state" / "nccl-launch"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@ROOT_ONLY
def test_root_with_another_users_home_records_under_its_own_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "alice"
    home.mkdir()
    os.chown(home, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "root-state"))
    with opened(None) as recorder:
        recorder.append(measured())
    assert recorder.path == tmp_path / "root-state" / "nccl-launch" / "bench.jsonl"
    assert list(home.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--url", "http://127.0.0.1:1"), "name the PROFILE (or use --history)"),
        (("bare",), "bare.toml: no [server] table to find the server at; pass --url"),
        (("standin", "--url", "ftp://127.0.0.1:1"), "not an http:// or https:// URL"),
        (("standin", "--url", "http://127.0.0.1:99999"), "not a valid port"),
        (("standin", "--url", "http://192.0.2.1:30000"), "192.0.2.1 is not this host"),
        (("--history", "--url", "http://127.0.0.1:1"), "--history reads the record only"),
        (("standin", "--url", "http://127.0.0.1:1", "--runs", "0"), "Invalid value for '--runs'"),
    ],
)
def test_bad_options_exit_2_with_one_line(
    args: tuple[str, ...], message: str, run_cli: RunCli, write_profile: WriteProfile
) -> None:
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1))
    write_profile("bare", BASELINE_PROFILE)
    result = run_cli("bench", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


BASELINE_PROFILE = 'schema = 1\nname = "b"\nversion = 1\n[nccl]\nPROTO = "LL"\n'


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ("decode_tok_s = 0", "baseline.decode_tok_s: Input should be greater than 0"),
        ("decode_tok_s = nan", "baseline.decode_tok_s: Input should be a finite number"),
        ("decode_tok_s = 88.8\ntolerance = 1", "baseline.tolerance: Input should be less than 1"),
        ("decode_tok_s = 88.8\nruns = 0", "baseline.runs: Input should be greater than or equal"),
        ("tolerance = 0.1", "baseline.decode_tok_s: required key is missing"),
        (
            "decode_tok_s = 88.8\ntok_s = 1",
            "baseline.tok_s: unknown key; valid in [baseline]: decode_tok_s, tolerance, "
            "max_tokens, runs",
        ),
    ],
)
def test_validate_refuses_a_bad_baseline_naming_the_key(
    table: str, problem: str, run_cli: RunCli, write_profile: WriteProfile
) -> None:
    path = write_profile("b", BASELINE_PROFILE + "[baseline]\n" + table + "\n")
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert f"{path}: {problem}" in result.stderr


def test_show_includes_the_baseline_and_the_digest_ignores_it(
    run_cli: RunCli, write_profile: WriteProfile
) -> None:
    plain = write_profile("plain", BASELINE_PROFILE)
    kept = write_profile("kept", BASELINE_PROFILE + "[baseline]\ndecode_tok_s = 88.8\n")
    shown = run_cli("show", str(kept))
    assert "[baseline]\ndecode_tok_s = 88.8\ntolerance = 0.05\n" in shown.stdout
    assert run_cli("validate", str(kept)).stdout.endswith(", baseline 88.8 tok/s)\n")
    assert "baseline" not in run_cli("validate", str(plain)).stdout
    digests = [
        json.loads(run_cli("show", str(path), "--format", "json").stdout)["digest"]
        for path in (plain, kept)
    ]
    assert digests[0] == digests[1]


def test_the_shipped_kimi_profile_records_its_tuned_figure(run_cli: RunCli) -> None:
    kimi = Path(__file__).parent.parent / "profiles" / "kimi-k25-rtx6000bw-tp8-eagle3.toml"
    shown = json.loads(run_cli("show", str(kimi), "--format", "json").stdout)
    assert shown["resolved"]["baseline"] == {"decode_tok_s": 88.8, "tolerance": 0.05}


def test_history_of_a_fifo_is_refused_without_blocking(run_cli: RunCli, tmp_path: Path) -> None:
    record = tmp_path / "history.jsonl"
    os.mkfifo(record)  # no writer: an open that blocked would hang until the timeout
    result = run_cli("bench", "--history", "--record", str(record))
    assert result.returncode == 2
    assert (
        result.stderr
        == f"nccl-launch: bench history {record}: a FIFO; only regular files are read\n"
    )


def test_a_server_that_stops_short_is_named_and_never_judged(
    start: Started, run_cli: RunCli
) -> None:
    server = start(baseline="[baseline]\ndecode_tok_s = 250\n", env={"STANDIN_TOKENS": "20"})
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.splitlines()[0] == (
        "nccl-launch: warning: the server returned 20 tokens of the 60 asked (it ignores "
        "ignore_eos): a figure of shorter runs, not comparable with runs of 60"
    )
    assert "over 2 runs of 20 tokens (60 asked)" in result.stdout
    assert "runs of 60" not in result.stdout
    assert (
        "not compared: the baseline was measured with max_tokens=60 (the server stopped at 20)"
        in (result.stdout)
    )
    table = run_cli("bench", "--history").stdout
    assert table.splitlines()[2].split()[1] == "2x20"


LEAKY = "s3cr/et#?x"  # a password with what ends a URL's authority, unencoded


@pytest.mark.parametrize(
    ("address", "message"),
    [
        (f"http://user:{LEAKY}@127.0.0.1:1", "--url http://***@127.0.0.1:1: holds user info"),
        ("http://127.0.0.1:1/\n\x1b[31mFAKE", "--url http://127.0.0.1:1/\\n\\x1b[31mFAKE: holds a"),
        ("http://127.0.0.1:1/" + "a" * 70_000, "characters"),
        ("http://127.0.0.1:1/\udcff", "--url http://127.0.0.1:1/\\udcff: holds a"),
        ("http://u:s3cret@[::1:18081", "--url http://***@[::1:18081: not a valid URL"),
        ("ftp://127.0.0.1:1/?token=s3cret", "--url ftp://127.0.0.1:1/?token=***: not an http"),
        ("http://127.0.0.1:1/?api_key=s3cret", "--url http://127.0.0.1:1/?api_key=***: holds a"),
        ("http://127.0.0.1:1#x", "--url http://127.0.0.1:1#x: holds a path, query or fragment"),
        ("http://127.0.0.1:1/v1", "--url http://127.0.0.1:1/v1: holds a path, query or"),
        ("http://127.0.0.1:0", "--url http://127.0.0.1:0: not a valid port"),
    ],
    ids=[
        *("password", "control", "long", "not-utf-8", "bad-ipv6", "token"),
        *("query", "fragment", "path", "port-0"),
    ],
)
def test_a_bad_url_exits_2_with_one_masked_line(
    address: str, message: str, run_cli: RunCli, write_profile: WriteProfile
) -> None:
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1))
    result = run_cli("bench", "standin", "--url", address)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert message in result.stderr
    assert "s3cr" not in result.stderr
    assert len(result.stderr) < 300


@pytest.mark.parametrize("userinfo", ["user:s3cret", "s3cret", "user:s3cr/et"])
def test_user_info_in_the_url_is_refused_as_no_key_of_the_server(
    userinfo: str, start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    # An HTTP client sends it as Basic auth in place of the Bearer header that carries the
    # server's --api-key, the only credential SGLang checks: the 401 would blame the key.
    server = start(server_args=("--api-key", KEY))
    address = f"http://{userinfo}@127.0.0.1:{server.port}"
    result = run_cli("bench", "standin", "--url", address, *FAST)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        f"nccl-launch: --url http://***@127.0.0.1:{server.port}: holds user info (USER:PASSWORD@)"
        ", which the server does not read; bench sends the API key the server was started with "
        "itself; valid: http://127.0.0.1:30000\n"
    )
    assert nothing_recorded(tmp_path)


def test_a_credential_in_the_prompt_is_masked_in_the_history_as_in_json(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    prompt = ("--prompt", "password=promptpw3 http://a:urlpw66@h/")
    result = run_cli("bench", "standin", "--url", url(server), *FAST, *prompt, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    history = default_history(tmp_path / "home").read_text()
    assert "pw3" not in history + result.stdout and "pw66" not in history + result.stdout
    assert json.loads(history)["method"] == json.loads(result.stdout)["method"]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--timeout", "nan"), "--timeout nan: valid: 0 < SECONDS <= 86400"),
        (("--timeout", "inf"), "--timeout inf: valid: 0 < SECONDS <= 86400"),
        (("--timeout", "0"), "--timeout 0: valid: 0 < SECONDS <= 86400"),
        (("--prompt", "a\udcffb"), "--prompt: holds the byte \\xff, which is not UTF-8"),
        (("--max-tokens", str(2**31)), "Invalid value for '--max-tokens'"),
    ],
    ids=["nan", "inf", "zero", "prompt", "max-tokens"],
)
def test_bad_numbers_and_bytes_exit_2_before_any_request(
    option: tuple[str, ...], message: str, start: Started, run_cli: RunCli
) -> None:
    server = start(env={"STANDIN_COMPLETIONS_STATUS": "500"})  # a request would exit 3
    result = run_cli("bench", "standin", "--url", url(server), *FAST, *option)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 or "Invalid value" in message, result.stderr
    assert message in result.stderr


def _result_line(**runs: object) -> str:
    report = measured()
    document = json.loads(report.model_dump_json())
    document["runs"][0] |= runs
    return json.dumps(document) + "\n"


def test_a_history_line_whose_rate_cannot_be_computed_is_a_bad_line(
    run_cli: RunCli, tmp_path: Path
) -> None:
    record = tmp_path / "h.jsonl"
    lines = [_result_line(seconds=0), _result_line(tokens=10**400), _result_line()]
    record.write_text("".join(lines))
    for fmt in ("json", "text"):
        shown = run_cli("bench", "--history", "--record", str(record), "--format", fmt)
        assert shown.returncode == 0, shown.stderr
        assert [line.split(" (")[0] for line in shown.stderr.splitlines()] == [
            f"nccl-launch: warning: {record}: line 1: not a bench result",
            f"nccl-launch: warning: {record}: line 2: not a bench result",
        ]
    assert len(json.loads(shown.stdout if fmt == "json" else "{}").get("results", [])) == 0
    document = json.loads(
        run_cli("bench", "--history", "--record", str(record), "--format", "json").stdout
    )
    assert [run["tok_s"] for run in document["results"][0]["runs"]] == [2.0]


@pytest.mark.parametrize(
    "change",
    [
        {"mean_tok_s": math.nan},
        {"mean_tok_s": math.inf},
        {"time": "not a time"},
        {"time": "2026-12-01T06:00:00"},
        {"schema_version": 99},
        {"runs": []},
        {"mean_tok_s": 3.0},
        {"method": {"max_tokens": 1, "runs": 0, "warmup": 0, "prompt": "p"}},
        {"method": {"max_tokens": -5, "runs": 1, "warmup": 0, "prompt": "p"}},
    ],
    ids=["nan", "inf", "time", "naive-time", "schema", "no-runs", "mean", "runs-0", "tokens"],
)
def test_a_history_line_that_is_no_result_is_named_and_skipped(
    change: dict[str, object], run_cli: RunCli, tmp_path: Path
) -> None:
    record = tmp_path / "h.jsonl"
    good = json.loads(measured().model_dump_json())
    record.write_text(json.dumps(good | change) + "\n" + json.dumps(good) + "\n")
    shown = run_cli("bench", "--history", "--record", str(record), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.startswith(f"nccl-launch: warning: {record}: line 1: not a bench result (")
    assert len(shown.stderr.splitlines()) == 1, shown.stderr
    assert len(json.loads(shown.stdout)["results"]) == 1


INJECTED = {"version": "0.5\nFAKE: all good", "model_path": "m\rX\x1b[31m"}


def test_what_a_server_or_history_says_cannot_forge_a_line(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(env={"STANDIN_INFO": json.dumps(INJECTED)})
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SGLang 0.5\\nFAKE: all good, model m\\rX\\x1b[31m" in result.stdout
    assert not [line for line in result.stdout.splitlines() if line.startswith("FAKE")]
    record = default_history(tmp_path / "home")
    kept = json.loads(record.read_text())
    assert (kept["sglang_version"], kept["model"]) == (INJECTED["version"], INJECTED["model_path"])
    with record.open("a") as history:
        history.write(json.dumps(kept | {"host": "x\nFAKE ROW"}) + "\n")
    table = run_cli("bench", "--history")
    assert table.returncode == 0, table.stderr
    assert not [line for line in table.stdout.splitlines() if line.startswith("FAKE")]
    assert "\x1b" not in table.stdout and "\r" not in table.stdout
    assert table.stdout.count("0.5\\nFAKE: all good") == 2
    assert "x\\nFAKE ROW" in table.stdout


def test_nvidia_smi_bytes_that_are_not_utf_8_are_replaced(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '0, NVIDIA \\377 H200, {H200.split(', ', 2)[2]}'\n")
    smi.chmod(0o755)
    path = f"{tools}{os.pathsep}{os.environ['PATH']}"
    result = run_cli(
        "bench", "standin", "--url", url(server), *FAST, "--format", "json", env={"PATH": path}
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["gpus"][0]["name"] == "NVIDIA \ufffd H200"


@pytest.fixture
def raw_on_ipv6(start: Started) -> Iterator[tuple[Server, int]]:
    """The checked server on 127.0.0.1:PORT, and a raw process on [::1]:PORT, another tree."""
    server = start()
    raw = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "::1", str(server.port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        return any(c.status == "LISTEN" for c in psutil.Process(raw.pid).net_connections())

    wait_for(listening, "a raw server on [::1]", process=raw)
    yield server, raw.pid
    raw.kill()
    raw.wait()


def test_the_process_checked_is_the_one_listening_where_bench_connects(
    raw_on_ipv6: tuple[Server, int], run_cli: RunCli, tmp_path: Path
) -> None:
    server, raw = raw_on_ipv6
    ipv6 = f"http://[::1]:{server.port}"
    result = run_cli("bench", "standin", "--url", ipv6, *FAST, "--format", "json")
    assert result.returncode == 1, result.stdout + result.stderr  # the raw one: refused
    assert json.loads(result.stdout)["drift"]["main_pid"] == raw
    pid = str(server.process.pid)
    named = run_cli("bench", "standin", "--url", ipv6, "--pid", pid, *FAST)
    assert named.returncode == 3, named.stdout + named.stderr
    assert named.stderr == (
        f"nccl-launch: --pid {pid}: pid {raw} listens on [::1]:{server.port}, and it is not in "
        f"pid {pid}'s tree; the server measured must be the one checked\n"
    )
    checked = run_cli("bench", "standin", "--url", url(server), "--pid", pid, *FAST)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert nothing_recorded(tmp_path) is False


def test_a_history_under_a_file_or_near_its_cap_is_refused_before_measuring(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1))
    good = tmp_path / "good.jsonl"
    good.write_text("")
    full = tmp_path / "full.jsonl"
    with full.open("wb") as history:
        history.truncate((63 << 20) + 1)  # sparse: 1 MiB and 1 byte short of the cap
    for record, why in [
        (good / "x", "cannot append: a folder on its path is a file, not a directory"),
        (full, f"{(63 << 20) + 1} bytes, near the 64 MiB --history reads; keep it aside"),
    ]:
        args = ("bench", "standin", "--url", "http://127.0.0.1:1", "--record", str(record))
        result = run_cli(*args)  # nothing listens on port 1: the record is refused first
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"nccl-launch: bench history {record}: {why}")
        assert len(result.stderr.splitlines()) == 1


def test_listeners_of_two_trees_where_bench_connects_are_refused(
    start: Started, run_cli: RunCli
) -> None:
    server = start()
    # An IPv6-only socket on the wildcard, in a process of another tree: bench cannot see
    # the V6ONLY flag, so it counts this listener as taking 127.0.0.1 too, and refuses.
    script = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_INET6)\n"
        "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
        f"s.bind(('::', {server.port})); s.listen(); print(flush=True); sys.stdin.read()\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert other.stdout is not None and other.stdout.readline() == b"\n"  # listening
    result = run_cli("bench", "standin", "--url", url(server), *FAST)
    other.communicate()
    assert result.returncode == 3, result.stdout + result.stderr
    first, second = sorted([server.process.pid, other.pid])  # each named, with its title
    assert result.stderr.startswith(
        f"nccl-launch: processes of different trees listen on 127.0.0.1:{server.port}: "
        f"pid {first} ("
    )
    assert f"), pid {second} (" in result.stderr
    assert result.stderr.endswith(
        "); name one address in --url (e.g. 127.0.0.1), or the server with --pid\n"
    )


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        (None, None, "http://127.0.0.1:30000"),
        ("0.0.0.0", 8000, "http://127.0.0.1:8000"),  # noqa: S104 - a profile value
        ("::", 8000, "http://[::1]:8000"),
        ("fd00::7", 8000, "http://[fd00::7]:8000"),
        ("gpu-3.lan", 8000, "http://gpu-3.lan:8000"),
    ],
)
def test_server_url_reaches_the_profiles_server_from_this_host(
    host: str | None, port: int | None, url: str
) -> None:
    found = server_url(ServerTable(model_path="/m", host=host, port=port))
    assert str(found) == url
    assert url_address(found) == (url.rpartition(":")[0].split("//")[1].strip("[]"), port or 30000)


def test_without_url_bench_measures_the_server_at_the_profiles_port(
    start: Started, run_cli: RunCli
) -> None:
    server = start()
    result = run_cli("bench", "standin", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"server  http://127.0.0.1:{server.port}: SGLang 0.5.23" in result.stdout


KEY = "sk-standin-7f3a9c"


@pytest.mark.parametrize(
    ("server_args", "after"),
    [((f"--api-key={KEY}",), ()), ((), ("--api-key", KEY))],
    ids=["in-the-profile", "after-dashes"],
)
def test_a_server_with_an_api_key_is_sent_its_own_key_and_nothing_shows_it(
    server_args: tuple[str, ...],
    after: tuple[str, ...],
    start: Started,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    # The key is read from the server's command line, so one given after `--` (as a unit
    # does from an EnvironmentFile) is sent too.
    server = start(server_args=server_args, after=after)
    assert httpx.get(f"{url(server)}/server_info").status_code == httpx.codes.UNAUTHORIZED
    text = run_cli("bench", "standin", *FAST)
    as_json = run_cli("bench", "standin", *FAST, "--format", "json")
    assert (text.returncode, as_json.returncode) == (0, 0), text.stdout + text.stderr
    assert json.loads(as_json.stdout)["status"] == "measured"
    checked = run_cli("check", "standin", "--pid", str(server.process.pid), "--format", "json")
    shown = [text.stdout, text.stderr, as_json.stdout, as_json.stderr, checked.stdout]
    history = default_history(tmp_path / "home").read_text()
    assert KEY not in "".join(shown) + history


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["python", "-m", "sglang.launch_server", "--api-key", "a", "--port", "1"], "a"),
        (["--api-key=a=b"], "a=b"),
        (["--ap", "a"], "a"),  # SGLang's parser takes a prefix down to --ap
        (["--a", "a"], None),  # ambiguous there: 12 flags start so
        (["--api-key", "a", "--api-key", "b"], "b"),  # the last one wins
        (["--api-key", ""], None),  # an empty key checks nothing
        (["--admin-api-key", "a", "--api-keys", "b"], None),
    ],
)
def test_the_api_key_is_read_as_sglangs_parser_reads_it(argv: list[str], key: str | None) -> None:
    assert SGLANG.credentials.request_key(argv, {"VLLM_API_KEY": "v"}) == key


def test_a_key_no_http_header_carries_is_refused_without_showing_it(
    start: Started, run_cli: RunCli
) -> None:
    start(server_args=("--api-key", "k\u00e9y "))
    result = run_cli("bench", "standin", *FAST)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "its --api-key holds a character an HTTP header cannot carry" in result.stderr
    assert "k\u00e9y" not in result.stdout + result.stderr
