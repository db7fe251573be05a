"""`bench` as text: each run as it ends, the checks, the summary, the history tables."""

from __future__ import annotations

from pathlib import Path

from nccl_launch.bench.result import (
    BaselineVerdict,
    BenchReport,
    Method,
    RunFigure,
    WrittenBaseline,
)
from nccl_launch.bench.stats import CONFIDENCE, interval_text
from nccl_launch.escaping import escaped
from nccl_launch.kinds import kind_named
from nccl_launch.live.compare import LiveReport
from nccl_launch.profile.plan import short_digest
from nccl_launch.render.reports import live_lines


def run_line(kind: str, number: int, total: int, figure: RunFigure) -> str:
    """`Run 2/5: 500 tokens in 5.63 s, the first at 0.031 s: 88.8 tok/s` (decode, after the
    first token); a warm-up says it is not counted."""
    line = (
        f"{figure.tokens} tokens in {figure.seconds:.2f} s, the first at {figure.ttft_s:.3f} s: "
        f"{figure.tok_s:.1f} tok/s"
    )
    if kind == "warmup":
        return f"Warmup {number}/{total}: {line} (not counted)"
    return f"Run {number}/{total}: {line}"


def verified_line(when: str, report: LiveReport) -> str | None:
    """The check before or after, when it passed (a failed one is printed whole instead)."""
    if not report.ok:
        return None
    count = len(report.processes)
    return (
        f"checked {when}: pid {report.main_pid} runs {report.profile} "
        f"({short_digest(report.digest)}), "
        f"no drift in {count} process{'' if count == 1 else 'es'}"
    )


INTERVAL = f"{CONFIDENCE:.0%} interval"


def _interval(interval: list[float] | None, runs: int) -> str:
    """`95% interval 89.1-90.9 tok/s` of a mean, or why it has none."""
    if interval is None:
        return f"no {INTERVAL} ({'one run' if runs < 2 else 'a run of no rate'})"
    return f"{INTERVAL} {interval_text(interval)} tok/s"


def _verdict_line(verdict: BaselineVerdict) -> str:
    rule = (
        f"baseline {verdict.decode_tok_s:.1f} tok/s less {verdict.tolerance * 100:g}% = "
        f"{verdict.floor:.1f} tok/s"
    )
    if verdict.prefill_tok_s is not None and verdict.prefill_floor is not None:
        rule += (
            f", prefill {verdict.prefill_tok_s:.1f} tok/s less {verdict.tolerance * 100:g}% = "
            f"{verdict.prefill_floor:.1f} tok/s"
        )
    if verdict.met is None:
        return f"{rule}: {verdict.note}"
    return f"{rule}: {'met' if verdict.met else 'missed'}"


def _short_lines(report: BenchReport, verdict: BaselineVerdict) -> list[str]:
    """`below the baseline: ...`, a line for each figure that fell short."""
    figures = {
        "decode_tok_s": ("mean", report.mean_tok_s, verdict.floor),
        "prefill_tok_s": ("prefill mean", report.prefill_tok_s, verdict.prefill_floor),
    }
    lines = []
    for name in verdict.short:
        label, mean, floor = figures[name]
        measured = "not measured" if mean is None else f"{mean:.1f} tok/s"
        lines.append(f"below the baseline: {label} {measured} < {floor or 0:.1f} tok/s")
    return lines


def _more_figures(report: BenchReport) -> list[str]:
    """Prefill with --prompt-tokens; with --concurrency, all streams' output and the time to
    first token's median and p99; the requests that failed."""
    method, lines = report.method, []
    if method.prompt_tokens is not None:
        counted = sorted({run.prompt_tokens for run in report.runs if run.prompt_tokens})
        said = "-".join(str(count) for count in dict.fromkeys((counted[0], counted[-1])))
        if report.prefill_tok_s is None:
            lines.append("prefill: not measured (the server reported no prompt_tokens)")
        else:
            lines.append(
                f"prefill mean {report.prefill_tok_s:.1f} tok/s of {said} prompt tokens "
                f"(the server's count; {method.prompt_tokens} asked), "
                f"{_interval(report.prefill_interval_tok_s, len(report.runs))}"
            )
    if method.concurrency > 1 and report.output_tok_s is not None:
        lines.append(
            f"{method.concurrency} streams at once: output {report.output_tok_s:.1f} tok/s "
            f"(all streams' tokens over the wall time), time to first token "
            f"{report.ttft_p50_s:.3f} s median, {report.ttft_p99_s:.3f} s p99"
        )
    count = len(report.failed)
    if count:
        lines.append(
            f"{count} request{'' if count == 1 else 's'} failed, not in the figures; "
            "nothing recorded:"
        )
        lines += [f"  {reason.text()}" for reason in report.failed]
    return lines


def _server(report: BenchReport, unknown: str) -> str:
    """`SGLang 0.5.23`: the server's kind as people write it, and its version (or `unknown`)."""
    kind = kind_named(report.server or "")
    return f"{kind.title if kind else 'server'} {report.server_version or unknown}"


def _stamp(report: BenchReport) -> list[str]:
    if report.gpus:
        gpus = "; ".join(
            f"{gpu.index}: {gpu.name}, {gpu.memory_total}, driver {gpu.driver_version}"
            for gpu in report.gpus
        )
    else:
        gpus = f"none recorded ({report.gpus_note})"
    return [
        f"profile {report.profile} {report.digest}",
        f"server  {report.url}: {_server(report, 'unknown')}, model {report.model or 'unknown'}",
        f"GPUs    {gpus}",
        f"host    {report.host} at {report.time}",
    ]


def _returned(report: BenchReport) -> str:
    """The tokens each run returned: max_tokens, unless the server stopped short."""
    counts = sorted({run.tokens for run in report.runs}) or [report.method.max_tokens]
    return "-".join(str(count) for count in dict.fromkeys((counts[0], counts[-1])))


def summary_lines(report: BenchReport) -> list[str]:
    """What follows the run lines: the figures and their stamp, or why there are none."""
    done, total = len(report.runs), report.method.runs
    if report.status == "refused" and report.drift is not None:
        return [
            *live_lines(report.drift),
            f"refusing to measure: the server does not run {report.profile} as declared; "
            "no figure taken",
        ]
    if report.status == "discarded" and report.drift is not None:
        return [
            *live_lines(report.drift),
            f"discarding {done} runs: the server drifted from {report.profile} while measured",
        ]
    if report.mean_tok_s is None:
        return [f"interrupted before the first of {total} runs ended; nothing recorded"]
    returned, asked = _returned(report), report.method.max_tokens
    stream = " per stream" if report.method.concurrency > 1 else ""
    figures = (
        f"mean {report.mean_tok_s:.1f} tok/s{stream} over {done} run{'' if done == 1 else 's'} of "
        f"{returned} tokens{'' if returned == str(asked) else f' ({asked} asked)'}, "
        f"{_interval(report.interval_tok_s, done)}, time to first token {report.ttft_s:.3f} s "
        "(mean)"
    )
    if report.status == "interrupted":
        return [f"interrupted after {done} of {total} runs: {figures}; nothing recorded"]
    lines = [figures, *_more_figures(report), *_stamp(report)]
    if report.baseline is not None:
        lines.append(_verdict_line(report.baseline))
        lines += _short_lines(report, report.baseline)
    return lines


def written_line(written: WrittenBaseline, method: Method) -> str:
    """`baseline 88.8 -> 86.1 tok/s (500 tokens x 5 runs) written to FILE`, with a prefill
    figure `, prefill 4950.0 tok/s (prompts of 1000 tokens)`."""
    baseline = written.baseline
    figure = f"{baseline.decode_tok_s:.1f}"
    if written.previous is not None:
        figure = f"{written.previous:.1f} -> {figure}"
    runs = f"{method.max_tokens} tokens x {method.runs} run{'' if method.runs == 1 else 's'}"
    if baseline.concurrency is not None:
        runs += f", {baseline.concurrency} at once"
    prefill = ""
    if baseline.prefill_tok_s is not None:
        prefill = (
            f", prefill {baseline.prefill_tok_s:.1f} tok/s "
            f"(prompts of {baseline.prompt_tokens} tokens)"
        )
    return f"baseline {figure} tok/s ({runs}){prefill} written to {written.path}"


def unwritten_line(report: BenchReport, path: Path) -> str:
    """Why --write-baseline wrote nothing: no figure of a server proved to run the profile."""
    why = {
        "refused": "the server did not run it before the runs",
        "discarded": "the server drifted from it while measured",
        "interrupted": "the runs were interrupted",
    }
    reason = why.get(report.status, report.status)
    if report.status == "measured" and report.failed:
        reason = "requests failed"
    return f"nothing written to {path}: no figure, {reason}"


def _history_row(report: BenchReport) -> tuple[str, ...]:
    verdict, prefill, interval = report.baseline, report.prefill_tok_s, report.interval_tok_s
    met = "-" if verdict is None or verdict.met is None else ("met" if verdict.met else "missed")
    row = (
        report.time,
        f"{len(report.runs)}x{_returned(report)}",
        f"{report.mean_tok_s or 0:.1f}",
        "-" if interval is None else interval_text(interval),
        f"{report.ttft_s or 0:.3f}",
        "-" if prefill is None or report.method.prompt_tokens is None else f"{prefill:.1f}",
        _server(report, "-"),
        met,
        report.host,
    )
    return tuple(map(escaped, row))  # a history line's words cannot forge a row


HISTORY_HEADER = (
    "WHEN",
    "RUNS",
    "MEAN TOK/S",
    INTERVAL.upper(),
    "TTFT S",
    "PREFILL TOK/S",
    "SERVER",
    "BASELINE",
    "HOST",
)


def history_lines(results: list[BenchReport]) -> list[str]:
    """A table per profile and digest, in the order first measured; rows oldest first."""
    groups: dict[tuple[str, str], list[BenchReport]] = {}
    for result in results:
        groups.setdefault((result.profile, result.digest), []).append(result)
    lines: list[str] = []
    for (profile, digest), group in groups.items():
        rows = [HISTORY_HEADER, *map(_history_row, group)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(HISTORY_HEADER))]
        count = len(group)
        lines += [""] if lines else []  # a blank line between two tables
        lines.append(f"{profile} {short_digest(digest)}: {count} result{'' if count == 1 else 's'}")
        lines += [
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            for row in rows
        ]
    return [line.rstrip() for line in lines]
