"""One tune: the base profile, its journal and candidates, the search driven by real trials,
and the winner written as the next version."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Protocol

from nccl_launch.bench.measure import Progress
from nccl_launch.bench.result import Method
from nccl_launch.errors import UsageError
from nccl_launch.profile.chain import read_chain
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.profile.plan import short_digest
from nccl_launch.profile.search import find_profile
from nccl_launch.tune import journal
from nccl_launch.tune.candidates import Candidates, changes
from nccl_launch.tune.result import TrialRow, TuneReport
from nccl_launch.tune.search import Score, Space, Values, defaults, descend, grid
from nccl_launch.tune.trial import TrialSettings, run_trial


class TuneProgress(Progress, Protocol):
    """Told as the tune goes: bench's progress within each trial, and each trial's ends."""

    def began(self, label: str, journal: Path, done: int) -> None: ...

    def started(self, number: int, changes: str, digest: str) -> None: ...

    def ended(self, row: TrialRow) -> None: ...

    def warn(self, problem: str) -> None: ...


def tune_folder(base: LoadedProfile, method: Method) -> PurePath:
    """The tune's folder under the state home: one per profile digest and method, so that
    the same command finds its journal, and another method never reads its figures."""
    document = json.dumps({"digest": base.plan.digest, "method": method.model_dump()})
    key = hashlib.sha256(document.encode()).hexdigest()[:12]
    return PurePath("nccl-launch", "tune", f"{base.plan.label}-{key}")


class _Trials:
    """The search's objective: a candidate's digest names it; measuring it reads the journal,
    else runs a real trial and appends its outcome."""

    def __init__(
        self,
        candidates: Candidates,
        done: journal.Journal,
        settings: TrialSettings,
        progress: TuneProgress,
        start: Values,
    ) -> None:
        self.candidates = candidates
        self.journal = done
        self.settings = settings
        self.progress = progress
        self.start = start
        self.rows: list[TrialRow] = []

    def key(self, values: Values) -> str:
        return self.candidates.get(values).digest

    def measure(self, values: Values) -> Score | None:
        candidate = self.candidates.get(values)
        number = len(self.rows) + 1
        line = self.journal.done.get(candidate.digest)
        said = changes(values, self.start)
        fresh = line is None
        if line is None:
            self.progress.started(number, said, candidate.digest)
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
            )
            self.journal.append(line)
        row = TrialRow(
            number=number,
            digest=candidate.digest,
            values=values,
            changes=said,
            candidate=line.candidate,
            log=line.log,
            from_journal=not fresh,
            outcome=line.outcome,
        )
        self.rows.append(row)
        self.progress.ended(row)
        return row.score


def open_base(ref: str) -> Candidates:
    """The candidates of profile `ref`; UsageError unless tune can start its server here,
    alone."""
    candidates = Candidates(read_chain(find_profile(ref)))
    label = candidates.base.plan.label
    server = candidates.base.profile.server
    if server is None:
        raise UsageError(
            f"{label} has no [server] table: tune starts the server it measures, so the "
            "profile must say how"
        )
    if server.nnodes > 1:
        raise UsageError(
            f"{label} is a multi-node profile (nnodes = {server.nnodes}): tune starts one "
            "server on this host and cannot start the other nodes; tune a single-node "
            "profile of the same GPUs, then carry the values over"
        )
    return candidates


def run_tune(
    candidates: Candidates,
    space: Space,
    settings: TrialSettings,
    budget: int | None,
    use_grid: bool,
    write: bool,
    progress: TuneProgress,
) -> TuneReport:
    """Search `space` from the base profile's values, resuming from its journal; with
    `write`, the winner becomes the profile's next version."""
    base = candidates.base
    if write:
        candidates.next_path()  # a version that is taken fails now, not after the tune
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
        trials = _Trials(candidates, opened, settings, progress, start)
        found = (grid if use_grid else descend)(start, space, trials, budget)
    numbers = {row.digest: row.number for row in trials.rows}
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
        noise=found.noise,
        trials=trials.rows,
        # The base's values as a candidate: its digest is the base's (but where its next
        # version names an env file by another path: `Candidates.moved_note`).
        profile_trial=numbers.get(candidates.get(start).digest),
        defaults_trial=numbers.get(candidates.get(defaults(space)).digest),
        winner=numbers.get(found.best) if found.best is not None else None,
    )
    winner = report.row(report.winner)
    score = winner.score if winner is not None else None
    if not write or winner is None or score is None:
        return report
    baseline: dict[str, float] = {"decode_tok_s": round(score.mean, 1)}
    if base.profile.baseline is not None:  # the profile's own tolerance stays
        baseline["tolerance"] = base.profile.baseline.tolerance
    method = settings.method
    baseline |= {"max_tokens": method.max_tokens, "runs": method.runs}
    report = report.model_copy(update={"baseline": baseline})
    if winner.number == report.profile_trial:
        return report.model_copy(update={"unchanged": True})
    provenance = _provenance(report, winner, score)
    path, plan = candidates.write_next(candidates.get(winner.values), baseline, provenance)
    moved = candidates.moved_note()
    if moved is not None:
        progress.warn(moved)
    try:
        looked_up = find_profile(plan.label).resolve() == path.resolve()
    except UsageError:
        looked_up = False
    ref = plan.label if looked_up else str(path)
    return report.model_copy(update={"written": str(path), "written_ref": ref})


def _provenance(report: TuneReport, winner: TrialRow, score: Score) -> dict[str, str]:
    """What the written version says of where it came from."""
    gains = [
        f"{gain * 100:+.1f}% over {what}"
        for gain, what in (
            (report.gain_over_profile, report.profile),
            (report.gain_over_defaults, "NCCL's defaults"),
        )
        if gain is not None
    ]
    method = report.method
    measured = (
        f"{score.mean:.1f} tok/s decode (mean of {method.runs} runs of "
        f"{method.max_tokens} tokens) by nccl-launch tune"
    )
    return {
        "measured": ", ".join([measured, *gains]),
        "date": datetime.now(UTC).date().isoformat(),
        "source": (
            f"nccl-launch tune {report.profile} ({short_digest(report.digest)}, {report.path}): "
            f"{len(report.trials)} trials ({report.strategy}, {report.stop}), changed "
            f"{winner.changes}; journal {report.journal}"
        ),
    }
