"""`tune` as text: each trial as it ends, the table of every trial with a bar, the winner."""

from __future__ import annotations

from pathlib import Path

from nccl_launch.escaping import escaped, shell_word
from nccl_launch.profile.plan import short_digest
from nccl_launch.tune.result import TrialRow, TuneReport
from nccl_launch.tune.trial import TrialOutcome

BAR = 24  # characters of the fastest trial's bar
TAIL = 5  # log lines shown of a failed trial


def status_text(outcome: TrialOutcome) -> str:
    """`measured`, `exited 1`, `not-ready`, `drift`, `refused`, `failed`."""
    if outcome.status == "exited" and outcome.exit_code is not None:
        return f"exited {outcome.exit_code}"
    return outcome.status


def _figures(row: TrialRow) -> str:
    score = row.score
    if score is None:
        return f"{status_text(row.outcome)}: {row.outcome.detail}"
    return f"measured {score.mean:.1f} tok/s, spread {score.low:.1f}-{score.high:.1f}"


def began_line(label: str, journal: Path, done: int) -> str:
    """The first line: the profile, the journal, the trials it holds already."""
    return (
        f"tuning {label}; journal {journal} ({done} finished trial{'' if done == 1 else 's'} in it)"
    )


def started_line(number: int, changes: str, digest: str) -> str:
    """`trial 3: starting sha256:7333272b, changes: PROTO=LL128`, before its server starts."""
    return f"trial {number}: starting {short_digest(digest)}, changes: {changes}"


def ended_line(row: TrialRow) -> str:
    """`trial 3: measured 251.2 tok/s, spread 249.0-253.1 (PROTO=LL128)`, as each ends."""
    where = " (from the journal)" if row.from_journal else f" in {row.outcome.seconds:.1f} s"
    return f"trial {row.number}{where}: {_figures(row)}; changes: {row.changes}"


def _label(report: TuneReport, row: TrialRow) -> str:
    words = [] if row.changes == "none" else [row.changes]
    if row.number == report.profile_trial:
        words.append(f"({report.profile} as is)")
    if row.number == report.defaults_trial:
        words.append("(NCCL's defaults)")
    return " ".join(words)


def _sort_key(row: TrialRow) -> tuple[bool, float, int]:
    score = row.score
    return (score is None, -(score.mean if score else 0.0), row.number)


HEADER = ("", "#", "TOK/S", "", "SPREAD", "STATUS", "CHANGES")


def table_lines(report: TuneReport) -> list[str]:
    """Every trial, fastest first (those not measured last), a bar scaled to the fastest,
    the winner marked `*`."""
    fastest = max((row.score.mean for row in report.trials if row.score), default=0.0)
    rows: list[tuple[str, ...]] = [HEADER]
    for row in sorted(report.trials, key=_sort_key):
        score = row.score
        bar = "#" * round(BAR * score.mean / fastest) if score else ""
        cells = (
            "*" if row.number == report.winner else "",
            str(row.number),
            f"{score.mean:.1f}" if score else "-",
            bar,
            f"{score.low:.1f}-{score.high:.1f}" if score else "-",
            status_text(row.outcome),
            _label(report, row),
        )
        rows.append(tuple(map(escaped, cells)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _failures(report: TuneReport) -> list[str]:
    lines = []
    for row in report.trials:
        if row.score is not None:
            continue
        lines.append(f"trial {row.number} {status_text(row.outcome)}: {row.outcome.detail}")
        if row.outcome.status != "refused":  # nothing started: no log was written
            lines.append(f"  log {row.log}")
        lines += [f"  | {line}" for line in row.outcome.log_tail[-TAIL:]]
    return lines


def _gain(gain: float | None, what: str, row: TrialRow | None) -> str | None:
    if gain is None or row is None or row.score is None:
        return None
    return f"{gain * 100:+.1f}% over {what} ({row.score.mean:.1f} tok/s)"


def summary_lines(report: TuneReport) -> list[str]:
    """The search, the table, why failed trials failed, the winner and its gains."""
    reused = sum(row.from_journal for row in report.trials)
    strategy = "grid" if report.strategy == "grid" else "coordinate descent"
    count = len(report.trials)
    lines = [
        f"tune {report.profile}: {strategy}, {report.stop} after {count} "
        f"trial{'' if count == 1 else 's'} ({reused} from the journal), noise "
        f"{report.noise * 100:.1f}%",
        *table_lines(report),
        *_failures(report),
    ]
    winner = report.row(report.winner)
    if winner is None or winner.score is None:
        return [*lines, "no trial was measured: no winner"]
    gains = [
        _gain(report.gain_over_profile, report.profile, report.row(report.profile_trial)),
        _gain(report.gain_over_defaults, "NCCL's defaults", report.row(report.defaults_trial)),
    ]
    said = f"changes {winner.changes}" if winner.changes != "none" else f"{report.profile} as is"
    lines.append(
        f"winner: trial {winner.number} ({said}): {winner.score.mean:.1f} tok/s"
        + "".join(f", {gain}" for gain in gains if gain)
    )
    lines.append(f"journal {report.journal}")
    if report.written is not None and report.written_ref is not None:
        lines += _adopting(report.profile, report.written, report.written_ref)
    if report.unchanged and report.baseline is not None:
        table = ", ".join(f"{key} = {value}" for key, value in report.baseline.items())
        lines.append(
            f"nothing written: {report.profile}'s own values won; to record the figure, set "
            f"in [baseline] of {report.path}: {table}"
        )
    return lines


def _adopting(base: str, written: str, ref: str) -> list[str]:
    """How to adopt the written version: run it; a unit pinned to the base's digest runs the
    base until it is written again."""
    word = shell_word(ref)
    return [
        f"wrote {written}: the winner with its measured [baseline]; start it with: "
        f"nccl-launch run {word}",
        f"a systemd unit pinned to {base}'s digest keeps running {base} until it is written "
        f"again: nccl-launch systemd {word} -o UNIT --force",
    ]
