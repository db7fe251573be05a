"""One tune: the base profile, its journal and candidates, the search driven by real trials,
and the winner written as the next version."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Any, Protocol

from nccl_launch.bench.measure import Progress
from nccl_launch.bench.result import Method
from nccl_launch.bench.stats import (
    Noise,
    Start,
    interval_text,
    outward,
    pooled_noise,
    prefill_starts,
)
from nccl_launch.findings import Finding, Refused
from nccl_launch.nccl.catalog import PREFIX
from nccl_launch.profile.chain import read_chain
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.profile.model import Baseline
from nccl_launch.profile.plan import short_digest
from nccl_launch.profile.search import find_profile
from nccl_launch.tune import journal
from nccl_launch.tune.candidates import Candidates, changes
from nccl_launch.tune.result import CandidateRow, Confirmation, Estimate, Gain, TrialRow, TuneReport
from nccl_launch.tune.search import Plan, Space, Values, confirm, defaults, descend, grid, planned
from nccl_launch.tune.trial import TrialOutcome, TrialSettings, run_trial


class TuneProgress(Progress, Protocol):
    """Told as the tune goes: bench's progress within each trial, and each trial's ends."""

    def began(self, label: str, journal: Path, done: int) -> None: ...

    def started(self, number: int, changes: str, digest: str, confirm: bool) -> None: ...

    def ended(self, row: TrialRow) -> None: ...

    def warn(self, problem: Finding) -> None: ...

    def planned(self, plan: Plan) -> None: ...


def confirming_method(base: LoadedProfile, method: Method) -> Method:
    """The confirmation's method: the max_tokens and runs of the profile's [baseline] where
    it records them (its figure is then measured as its own was), else the tune's."""
    baseline = base.profile.baseline
    return method.model_copy(
        update={
            "max_tokens": (baseline and baseline.max_tokens) or method.max_tokens,
            "runs": (baseline and baseline.runs) or method.runs,
        }
    )


def tune_folder(base: LoadedProfile, method: Method) -> PurePath:
    """The tune's folder under the state home: one per profile digest and method (the
    confirmation's with it), so that the same command finds its journal, and another method
    never reads its figures."""
    confirming = confirming_method(base, method)
    document = json.dumps(
        {
            "digest": base.plan.digest,
            # A field a later nccl-launch added, left at its default, keeps the folder's key.
            "method": method.model_dump(exclude_defaults=True),
            "confirm": confirming.model_dump(exclude_defaults=True),
        }
    )
    key = hashlib.sha256(document.encode()).hexdigest()[:12]
    return PurePath("nccl-launch", "tune", f"{base.plan.label}-{key}")


class _Trials:
    """The search's objective: a candidate's digest names it; one start of it replays the
    journal's next line of that candidate (and phase: `confirm`), else runs a real trial
    and appends its outcome. A variable a trial's NCCL log says no communicator of the server
    reads (NCCL_PROTO where each has one rank) is kept as the profile declares it from then
    on: its other values are the same server, never started again, never written."""

    def __init__(
        self,
        candidates: Candidates,
        done: journal.Journal,
        settings: TrialSettings,
        progress: TuneProgress,
        start: Values,
        confirm: bool = False,
        rows: list[TrialRow] | None = None,
        unread: set[str] | None = None,
    ) -> None:
        self.candidates = candidates
        self.journal = done
        self.settings = settings
        self.progress = progress
        self.start = start
        self.confirm = confirm
        self.rows = [] if rows is None else rows
        self.unread = set() if unread is None else unread  # names, kept as `start` has them

    def confirming(self, settings: TrialSettings) -> _Trials:
        """The confirmation's objective: its starts marked, measured with `settings`."""
        return _Trials(
            self.candidates, self.journal, settings, self.progress, self.start, True, self.rows,
            self.unread,
        )  # fmt: skip

    def _as_run(self, values: Values) -> Values:
        return values | {name: self.start[name] for name in self.unread}

    def key(self, values: Values) -> str:
        return self.candidates.get(self._as_run(values)).digest

    def _not_read(self, outcome: TrialOutcome) -> None:
        """Keep what `outcome` says the server does not read as declared; say so once."""
        names = {key.removeprefix(PREFIX) for key in outcome.not_read} & self.start.keys()
        if names - self.unread:
            self.unread |= names
            said = ", ".join(f"{PREFIX}{name}" for name in sorted(self.unread))
            why = "not read by the server, whose NCCL communicators have one rank each (NCCL "
            why += "reads them only for two or more ranks)"
            kept = "kept as the profile declares them"
            self.progress.warn(Finding("unread-by-server", said, why, kept, "warning"))

    def measure(self, values: Values) -> Start | None:
        values = self._as_run(values)
        candidate = self.candidates.get(values)
        number = len(self.rows) + 1
        line = self.journal.replay(candidate.digest, self.confirm)
        said = changes(values, self.start)
        fresh = line is None
        if line is None:
            self.progress.started(number, said, candidate.digest, self.confirm)
            path = self.candidates.write(candidate, self.journal.path.parent)
            log = path.with_suffix(".log")
            owner = self.journal.owner(candidate.digest, values, path, log)
            outcome = run_trial(str(path), self.settings, log, self.progress, owner)
            line = journal.FinishedLine(
                time=journal.now(),
                digest=candidate.digest,
                values=values,
                candidate=str(path),
                log=str(log),
                outcome=outcome,
                confirm=self.confirm,
            )
            self.journal.append(line)
        self._not_read(line.outcome)
        row = TrialRow(
            number=number,
            digest=candidate.digest,
            values=values,
            changes=said,
            candidate=line.candidate,
            log=line.log,
            from_journal=not fresh,
            confirm=self.confirm,
            outcome=line.outcome,
        )
        self.rows.append(row)
        self.progress.ended(row)
        return row.start


def _grouped(rows: list[TrialRow]) -> dict[str, list[TrialRow]]:
    """The rows of each candidate, in the order first tried."""
    groups: dict[str, list[TrialRow]] = {}
    for row in rows:
        groups.setdefault(row.digest, []).append(row)
    return groups


def _figures(rows: list[TrialRow]) -> list[Start]:
    return [row.start for row in rows if row.start is not None]


def _noise(groups: dict[str, list[TrialRow]], prefill: bool = False) -> Noise:
    """The noise of a start's decode figure, or with `prefill` its prefill figure's."""
    figures = (_figures(rows) for rows in groups.values())
    return pooled_noise(prefill_starts(found) if prefill else found for found in figures)


def _candidates(
    groups: dict[str, list[TrialRow]], noise: Noise, refused: tuple[str, ...] = ()
) -> list[CandidateRow]:
    prefill = _noise(groups, prefill=True)
    return [
        CandidateRow(
            digest=digest,
            values=rows[0].values,
            changes=rows[0].changes,
            trials=[row.number for row in rows],
            estimate=Estimate.of(_figures(rows), noise),
            prefill_tok_s=Estimate.of(prefill_starts(_figures(rows)), prefill),
            prefill_refused=digest in refused,
        )
        for digest, rows in groups.items()
    ]


def open_base(ref: str) -> Candidates:
    """The candidates of profile `ref`; refused unless tune can start its server here,
    alone."""
    candidates = Candidates(read_chain(find_profile(ref)))
    label = candidates.base.plan.label
    server = candidates.base.profile.server
    if server is None:
        said = f"{label} has no [server] table: tune starts the server it measures, so the "
        said += "profile must say how"
        raise Refused(Finding("no-server-table", "", said))
    if server.nnodes > 1:
        said = f"{label} is a multi-node profile (nnodes = {server.nnodes}): tune starts one "
        said += "server on this host and cannot start the other nodes"
        fix = "tune a single-node profile of the same GPUs, then carry the values over"
        raise Refused(Finding("multi-node-profile", "", said, fix))
    return candidates


def run_tune(
    candidates: Candidates,
    space: Space,
    settings: TrialSettings,
    budget: int | None,
    use_grid: bool,
    rounds: int,
    write: bool,
    progress: TuneProgress,
    tolerance: float | None = None,
) -> TuneReport:
    """Search `space` from the base profile's values, resuming from its journal, and confirm
    the winner over `rounds`; with `write`, a confirmed winner becomes the profile's next
    version. With a prefill `tolerance` (a long prompt), no candidate whose prefill costs more
    than it wins (search.py), and the confirmation judges the winner's prefill too."""
    base = candidates.base
    if write:
        candidates.next_path()  # a version that is taken fails now, not after the tune
    confirming = replace(settings, method=confirming_method(base, settings.method))
    with journal.opened(tune_folder(base, settings.method), settings) as opened:
        for stopped in opened.stop_leftovers():  # before anything else: it holds the port
            progress.warn(stopped)
        for problem in opened.problems:
            progress.warn(problem)
        lockdown = candidates.lockdown()
        if lockdown is not None:
            progress.warn(lockdown)
        progress.began(base.plan.label, opened.path, len(opened.done))
        start = candidates.start(list(space))
        progress.planned(planned(start, space, use_grid, budget, rounds))
        trials = _Trials(candidates, opened, settings, progress, start)
        found = (grid if use_grid else descend)(start, space, trials, budget, tolerance)
        searched = _grouped(trials.rows)
        ends = (trials.key(start), trials.key(defaults(space)))  # the profile's, NCCL's
        if found.best is not None:  # each once: the profile's values, the winner, the defaults
            chosen = {ends[0]: start, found.best: searched[found.best][0].values}
            chosen.setdefault(ends[1], defaults(space))
            measured = [values for key, values in chosen.items() if _figures(searched.get(key, []))]
            confirm(measured, rounds, trials.confirming(confirming))
    noise = _noise(searched)
    report = TuneReport(
        profile=base.plan.label,
        digest=base.plan.digest,
        path=str(base.path),
        journal=str(opened.path),
        method=settings.method,
        space={name: list(values) for name, values in space.items()},
        strategy="grid" if use_grid else "descent",
        budget=budget,
        stop=found.stop,
        noise=noise.sd,
        dof=noise.dof,
        prefill_tolerance=tolerance,
        prefill_noise=_noise(searched, prefill=True).sd if tolerance is not None else None,
        trials=trials.rows,
        candidates=_candidates(searched, noise, found.refused),
        # The base's values as a candidate: its digest is the base's (but where its next
        # version names an env file by another path: `Candidates.moved_note`).
        profile_candidate=_tried(ends[0], searched),
        defaults_candidate=_tried(ends[1], searched),
        winner=found.best,
        confirmation=_confirmation(trials.rows, confirming.method, rounds, found.best, ends),
        undecided=list(found.undecided),
        untried=[changes(values, start) for values in found.untried],
        untried_count=found.untried_count,
        budget_to_decide=found.to_decide,
    )
    report = report.model_copy(update={"baseline": _baseline(report, base)})
    if not write or report.baseline is None:
        return report
    if report.confirmed is False:
        return report.model_copy(update={"kept": True})
    if report.winner == report.profile_candidate:
        return report.model_copy(update={"unchanged": True})
    winner = searched[found.best or ""][0].values
    path, plan = candidates.write_next(
        candidates.get(winner),
        report.baseline.model_dump(exclude_unset=True),
        _provenance(report, report.baseline),
    )
    moved = candidates.moved_note()
    if moved is not None:
        progress.warn(moved)
    try:
        looked_up = find_profile(plan.label).resolve() == path.resolve()
    except Refused:  # no profile of that label is found
        looked_up = False
    ref = plan.label if looked_up else str(path)
    return report.model_copy(update={"written": str(path), "written_ref": ref})


def _tried(key: str, groups: dict[str, list[TrialRow]]) -> str | None:
    return key if key in groups else None


def _confirmation(
    rows: list[TrialRow], method: Method, rounds: int, winner: str | None, ends: tuple[str, str]
) -> Confirmation | None:
    """The confirmation's figures: its candidates' estimates, the winner's gains over the
    profile's values and NCCL's defaults (`ends`), pooled over its starts alone."""
    groups = _grouped([row for row in rows if row.confirm])
    if winner is None or not groups:
        return None
    noise, prefill = _noise(groups), _noise(groups, prefill=True)
    mine = _figures(groups.get(winner, []))
    over = [
        Gain.of(mine, _figures(groups.get(key, [])), noise) if key != winner else None
        for key in ends
    ]
    theirs = prefill_starts(_figures(groups.get(ends[0], [])))
    prefill_over = Gain.of(prefill_starts(mine), theirs, prefill) if ends[0] != winner else None
    return Confirmation(
        method=method,
        rounds=rounds,
        noise=noise.sd,
        dof=noise.dof,
        candidates=_candidates(groups, noise),
        gain_over_profile=over[0],
        gain_over_defaults=over[1],
        prefill_over_profile=prefill_over,
    )


def _baseline(report: TuneReport, base: LoadedProfile) -> Baseline | None:
    """The winner's [baseline]: the confirmation's figure of it, its starts and interval
    (rounded outward), the method it was measured with, the profile's tolerance kept."""
    confirmation = report.confirmation
    candidates = confirmation.candidates if confirmation else []
    row = next((row for row in candidates if row.digest == report.winner), None)
    if confirmation is None or row is None or row.estimate is None:
        return None
    estimate = row.estimate
    fields: dict[str, Any] = {"decode_tok_s": round(estimate.mean, 1)}
    if base.profile.baseline is not None:
        fields["tolerance"] = base.profile.baseline.tolerance
    method = confirmation.method
    fields |= {"max_tokens": method.max_tokens, "runs": method.runs, "starts": estimate.starts}
    if row.prefill_tok_s is not None:  # with the prompt it was measured with
        fields |= {"prefill_tok_s": round(row.prefill_tok_s.mean, 1)}
        fields |= {"prompt_tokens": method.prompt_tokens}
    if method.concurrency != 1:
        fields["concurrency"] = method.concurrency
    if estimate.interval is not None:
        fields["interval"] = list(outward(estimate.interval))
    return Baseline(**fields)


def _provenance(report: TuneReport, baseline: Baseline) -> dict[str, str]:
    """What the written version says of where it came from."""
    confirmation = report.confirmation
    gains = confirmation.gains(report.profile) if confirmation else []
    within = f", 95% interval {interval_text(baseline.interval)}" if baseline.interval else ""
    measured = (
        f"{baseline.decode_tok_s:.1f} tok/s decode (mean of {baseline.starts} server starts "
        f"of {baseline.runs} runs of {baseline.max_tokens} tokens{within}) by nccl-launch tune"
    )
    if baseline.prefill_tok_s is not None:
        prompts = f"prompts of {baseline.prompt_tokens} tokens"
        measured += f", {baseline.prefill_tok_s:.1f} tok/s prefill of {prompts}"
    winner = report.candidate(report.winner)
    changed = winner.changes if winner else "none"
    return {
        "measured": ", ".join([measured, *gains]),
        "date": datetime.now(UTC).date().isoformat(),
        "source": (
            f"nccl-launch tune {report.profile} ({short_digest(report.digest)}, {report.path}): "
            f"{len(report.trials)} trials ({report.strategy}, {report.stop}, then "
            f"{confirmation.rounds if confirmation else 0} rounds of confirmation), changed "
            f"{changed}; journal {report.journal}"
        ),
    }
