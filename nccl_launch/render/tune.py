"""`tune` as text: each trial as it ends, a chart of the candidates' rates and intervals, the
confirmation, the winner."""

from __future__ import annotations

from pathlib import Path

from nccl_launch.bench.stats import interval_text, outward
from nccl_launch.escaping import escaped, shell_word
from nccl_launch.profile.plan import short_digest
from nccl_launch.tune.result import CandidateRow, Confirmation, Estimate, TrialRow, TuneReport
from nccl_launch.tune.search import CAP, Plan
from nccl_launch.tune.trial import TrialOutcome, tail_lines

BAR = 24  # characters of a chart's scale
TAIL = 5  # log lines shown of a failed trial


def status_text(outcome: TrialOutcome) -> str:
    """`measured`, `exited 1`, `not-ready`, `drift`, `refused`, `failed`."""
    if outcome.status == "exited" and outcome.exit_code is not None:
        return f"exited {outcome.exit_code}"
    return outcome.status


def _figures(row: TrialRow) -> str:
    start = row.start
    if start is None:
        return f"{status_text(row.outcome)}: {row.outcome.detail}"
    runs = start.runs
    said = f"measured {start.rate:.1f} tok/s, spread {min(runs):.1f}-{max(runs):.1f}"
    prefill = start.prefill_start
    return said + (f", prefill {prefill.rate:.1f} tok/s" if prefill else "")


def began_line(label: str, journal: Path, done: int) -> str:
    """The first line: the profile, the journal, the trials it holds already."""
    return (
        f"tuning {label}; journal {journal} ({done} finished trial{'' if done == 1 else 's'} in it)"
    )


def plan_line(plan: Plan) -> str:
    """The starts the search takes at least and its confirmation at most, said before the
    first, and whether `--budget` ends the search sooner."""
    each = (
        f"each of the {plan.candidates} combinations once"
        if plan.whole
        else f"each of the {plan.candidates} candidates of a pass once"
    )
    more = f"up to {CAP} starts of a candidate not yet told from the best" + (
        "" if plan.whole else ", another pass after one that keeps a change"
    )
    line = (
        f"the search starts a server at least {plan.least} times (the profile's values twice, "
        f"NCCL's defaults once, {each}), more where it asks ({more}); the confirmation up to "
        f"{plan.confirming}"
    )
    if plan.budget is not None and plan.budget < plan.least:
        line += (
            f"; --budget {plan.budget} (the journal's trials included) ends the search before "
            "it can decide"
        )
    return line


def _trial(number: int, confirm: bool) -> str:
    return f"trial {number}{' (confirmation)' if confirm else ''}"


def started_line(number: int, changes: str, digest: str, confirm: bool) -> str:
    """`trial 3: starting sha256:7333272b, changes: PROTO=LL128`, before its server starts."""
    return f"{_trial(number, confirm)}: starting {short_digest(digest)}, changes: {changes}"


def ended_line(row: TrialRow) -> str:
    """`trial 3 in 1.2 s: measured 251.2 tok/s, spread 249.0-253.1; changes: PROTO=LL128`,
    as each ends."""
    where = " (from the journal)" if row.from_journal else f" in {row.outcome.seconds:.1f} s"
    return f"{_trial(row.number, row.confirm)}{where}: {_figures(row)}; changes: {row.changes}"


def _label(report: TuneReport, row: CandidateRow) -> str:
    words = [] if row.changes == "none" else [row.changes]
    if row.digest == report.profile_candidate:
        words.append(f"({report.profile} as is)")
    if row.digest == report.defaults_candidate:
        words.append("(NCCL's defaults)")
    if row.prefill_refused:
        words.append("(refused: prefill)")
    return " ".join(words)


def _scale(rows: list[CandidateRow]) -> tuple[float, float]:
    """The lowest and highest rate a chart of `rows` shows: their intervals' ends."""
    ends = [
        rate
        for row in rows
        if row.estimate is not None
        for rate in (row.estimate.interval or [row.estimate.mean])
    ]
    low, high = min(ends, default=0.0), max(ends, default=0.0)
    return (low, high) if high > low else (low * 0.99, high * 1.01 or 1.0)


def _column(rate: float, low: float, high: float) -> int:
    """Where `rate` falls on a bar from `low` to `high`."""
    return min(BAR - 1, max(0, round((rate - low) / (high - low) * (BAR - 1))))


def _bar(estimate: Estimate | None, low: float, high: float) -> str:
    """`|    [---#--]     |`: the interval and the mean, on the scale from `low` to `high`."""
    cells = [" "] * BAR
    if estimate is not None:
        if estimate.interval is not None:
            left, right = (_column(end, low, high) for end in estimate.interval)
            cells[left : right + 1] = "-" * (right - left + 1)
            cells[left], cells[right] = "[", "]"
        cells[_column(estimate.mean, low, high)] = "#"
    return "|" + "".join(cells) + "|"


def chart_lines(report: TuneReport, rows: list[CandidateRow]) -> list[str]:
    """Each candidate of `rows`, fastest first (those never measured last): its rate (the
    mean over its starts), its 95% interval as a whisker on one scale, with --prompt-tokens
    its prefill rate, its measured starts of all, the winner marked `*`; 80 columns but for
    the changes at the end."""
    low, high = _scale(rows)
    ends = [f"{end:.1f}" for end in outward((low, high))]  # as the intervals' are rounded
    scale = ends[0].ljust(BAR + 2 - len(ends[1])) + ends[1]
    prefill = report.prefill_tolerance is not None
    table: list[tuple[str, ...]] = [
        (
            " ",
            scale,
            "TOK/S",
            "95% INTERVAL",
            *(["PREFILL"] if prefill else []),
            "STARTS",
            "CANDIDATE",
        )
    ]
    measured = sorted((row for row in rows if row.estimate), key=lambda row: -_mean(row))
    for row in [*measured, *(row for row in rows if row.estimate is None)]:
        estimate = row.estimate
        interval = estimate.interval if estimate else None
        table.append(
            (
                "*" if row.digest == report.winner else " ",
                _bar(estimate, low, high),
                f"{estimate.mean:.1f}" if estimate else "-",
                interval_text(interval) if interval else "-",
                *([_rate(row.prefill_tok_s)] if prefill else []),
                f"{estimate.starts if estimate else 0}/{len(row.trials)}",
                escaped(_label(report, row)),
            )
        )
    widths = [max(len(cells[i]) for cells in table) for i in range(len(table[0]))]
    return [
        (cells[0] + " " + "  ".join(map(str.ljust, cells[1:], widths[1:]))).rstrip()
        for cells in table
    ]


def _mean(row: CandidateRow) -> float:
    return row.estimate.mean if row.estimate else 0.0


def _rate(estimate: Estimate | None) -> str:
    return f"{estimate.mean:.1f}" if estimate else "-"


def _refused_lines(report: TuneReport) -> list[str]:
    """Each candidate whose decode gain the prefill tolerance refused: its figures beside the
    profile's values'."""
    tolerance = report.prefill_tolerance
    profile = report.candidate(report.profile_candidate)
    theirs = f" ({_rate(profile.prefill_tok_s)} tok/s)" if profile else ""
    lines = []
    for row in report.candidates:
        if not row.prefill_refused or tolerance is None:
            continue
        mine = row.prefill_tok_s
        interval = f" [{interval_text(mine.interval)}]" if mine and mine.interval else ""
        lines.append(
            f"refused for its prefill cost: {escaped(row.changes)} won decode "
            f"({_rate(row.estimate)} tok/s) by the noise rule, but its prefill "
            f"{_rate(mine)} tok/s{interval} is below {report.profile}'s values'{theirs} by "
            f"more than {tolerance:.0%} at 95% confidence"
        )
    return lines


def _failures(report: TuneReport) -> list[str]:
    lines = []
    for row in report.trials:
        if row.start is not None:
            continue
        lines.append(
            f"{_trial(row.number, row.confirm)} {status_text(row.outcome)}: {row.outcome.detail}"
        )
        if row.outcome.status != "refused":  # nothing started: no log was written
            lines.append(f"  log {row.log}")
        lines += [f"  | {line}" for line in tail_lines(row.outcome.log_tail)[-TAIL:]]
    return lines


def _noise(noise: float, dof: int) -> str:
    if not dof:
        return "no start-to-start noise measured yet"
    return f"start-to-start noise {noise * 100:.1f}% ({dof} dof)"


def _prefill_rule(report: TuneReport) -> str:
    """`; prefill's 1.2%, a candidate's within 5% of standin's values'`, with --prompt-tokens."""
    if report.prefill_tolerance is None:
        return ""
    noise = f"prefill's {report.prefill_noise * 100:.1f}%, " if report.prefill_noise else ""
    return (
        f"; {noise}a candidate's prefill within {report.prefill_tolerance:.0%} of "
        f"{report.profile}'s values'"
    )


def _confirmation_lines(report: TuneReport, confirmation: Confirmation) -> list[str]:
    method = confirmation.method
    lines = [
        f"confirmation: {confirmation.rounds} rounds of fresh starts, {method.runs} runs of "
        f"{method.max_tokens} tokens each; {_noise(confirmation.noise, confirmation.dof)}",
        *chart_lines(report, confirmation.candidates),
    ]
    winner = next(row for row in confirmation.candidates if row.digest == report.winner)
    gains = confirmation.gains(report.profile)
    said = f"changes {winner.changes}" if winner.changes != "none" else f"{report.profile} as is"
    rate = f"{winner.estimate.mean:.1f} tok/s" if winner.estimate else "not measured"
    if winner.prefill_tok_s is not None:
        rate += f", prefill {winner.prefill_tok_s.mean:.1f} tok/s"
    prefill = confirmation.prefill_over_profile
    if prefill is not None:
        gains.append(f"prefill {prefill.over(report.profile)}")
    word = "winner" if report.decided else "best so far"
    lines.append(f"{word} ({said}): {rate}" + "".join(f", {gain}" for gain in gains))
    if report.prefill_confirmed is False:
        lines.append(_prefill_not_confirmed(report))
    elif report.confirmed is False:
        lines.append(_not_confirmed(report.profile, confirmation))
    return lines


def _prefill_not_confirmed(report: TuneReport) -> str:
    """Why the winner's prefill does not confirm it."""
    return (
        f"not confirmed: the interval of its prefill over {report.profile}'s values' does not "
        f"show it within the {report.prefill_tolerance or 0:.0%} tolerance; keep "
        f"{report.profile}'s values"
    )


def _not_confirmed(profile: str, confirmation: Confirmation) -> str:
    """Why the winner's gain over the profile's values is not confirmed."""
    gain = confirmation.gain_over_profile
    if gain is None:
        why = f"{profile}'s values were not measured in the confirmation, so nothing confirms it"
        return f"not confirmed: {why}; keep them"
    if gain.interval[1] < 0:
        return f"the confirmation found it slower than {profile}'s values: keep them"
    return (
        f"no difference the noise allows: keep {profile}'s values (the interval of the gain "
        "over them holds 0)"
    )


def summary_lines(report: TuneReport) -> list[str]:
    """The search, why failed trials failed, the chart of its candidates, the confirmation's
    chart, the winner and its gains, what was written."""
    reused = sum(row.from_journal for row in report.trials)
    strategy = "grid" if report.strategy == "grid" else "coordinate descent"
    count = sum(not row.confirm for row in report.trials)
    lines = [
        f"tune {report.profile}: {strategy}, {report.stop} after {count} "
        f"trial{'' if count == 1 else 's'} ({reused} of all from the journal); "
        f"{_noise(report.noise, report.dof)}{_prefill_rule(report)}",
        *_failures(report),
        *chart_lines(report, report.candidates),
        *_refused_lines(report),
    ]
    if report.winner is None or report.confirmation is None:
        if report.trials and all(row.outcome.status == "refused" for row in report.trials):
            return [*lines, "every trial was refused before its server started: no winner"]
        return [*lines, "no trial was measured: no winner"]
    lines += _confirmation_lines(report, report.confirmation)
    lines.append(f"journal {report.journal}")
    if report.written is not None and report.written_ref is not None:
        lines += _adopting(report.profile, report.written, report.written_ref)
    if report.kept:
        lines.append(f"nothing written: {report.profile}'s values are kept")
    baseline = report.baseline
    if report.unchanged and baseline is not None:
        table = ", ".join(
            f"{key} = {value}" for key, value in baseline.model_dump(exclude_unset=True).items()
        )
        won = "own values won" if report.decided else "values are the best so far"
        lines.append(
            f"nothing written: {report.profile}'s {won}; to record the figure, set in "
            f"[baseline] of {report.path}: {table}"
        )
    return [*lines, *undecided_lines(report)]


def undecided_lines(report: TuneReport) -> list[str]:
    """Where the budget ended the search first: what it left undecided and untried, and the
    budget its plan says would decide them; nothing where it decided."""
    if report.stop != "budget spent":
        return []
    lines = [
        f"undecided: --budget {report.budget} was spent (the journal's trials included) before "
        "the search decided"
    ]
    best = report.candidate(report.winner)
    for digest in report.undecided:
        row = report.candidate(digest)
        if row is not None and row.estimate is not None and best is not None:
            lines.append(
                f"  not yet told from the best so far by the noise: {escaped(row.changes)} "
                f"({_rate(row.estimate)} tok/s over {row.estimate.starts} starts, the best "
                f"{_rate(best.estimate)} over {best.estimate.starts if best.estimate else 0})"
            )
    if report.untried:
        more = report.untried_count - len(report.untried)
        listed = ", ".join(escaped(changes) for changes in report.untried)
        lines.append(f"  never started: {listed}" + (f" and {more} more" if more else ""))
    if report.budget_to_decide is not None:
        lines.append(
            f"  about {report.budget_to_decide} starts would decide them (an estimate from the "
            f"search's plan: each untried candidate once, each undecided one and the best up to "
            f"{CAP}; a change kept asks for another pass): the same command with --budget "
            f"{report.budget_to_decide} resumes from the journal"
        )
    return lines


def _adopting(base: str, written: str, ref: str) -> list[str]:
    """How to adopt the written version: run it; a unit pinned to the base's digest runs the
    base until it is written again."""
    word = shell_word(ref)
    return [
        f"wrote {written}: the winner with its confirmed [baseline]; start it with: "
        f"nccl-launch run {word}",
        f"a systemd unit pinned to {base}'s digest keeps running {base} until it is written "
        f"again: nccl-launch systemd {word} -o UNIT --force",
    ]
