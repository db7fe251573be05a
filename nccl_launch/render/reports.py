"""The text of the reports `preflight`, `check` and `verify-log` print."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from nccl_launch.env.drift import DriftEntry, Reason
from nccl_launch.live.nccl_logs import LOOK_LIMIT, SOURCE
from nccl_launch.profile.plan import short_digest
from nccl_launch.render.drift import LATE_LINE, details, drift_lines, fix_lines, restart_line
from nccl_launch.secrets.masking import for_people
from nccl_launch.secrets.values import shown

if TYPE_CHECKING:  # each command renders its own report: check loads no preflight model
    from nccl_launch.launch.preflight_report import PreflightReport
    from nccl_launch.live.compare import LiveReport, ProcessReport
    from nccl_launch.live.verify_log import LogReport


def preflight_lines(report: PreflightReport) -> list[str]:
    """One line per check, details indented beneath, then the verdict. What a check quotes
    (SGLang's own error about an `args` word, the interpreter's answer) is masked here, and
    escaped, so that it cannot forge a check's line or drive the terminal."""
    width = max(len(check.name) for check in report.checks)
    lines = []
    for check in report.checks:
        lines.append(f"{check.status:<4}  {check.name.ljust(width)}  {shown(check.message)}")
        drift = check.drift
        if drift is not None:
            detail = drift_lines(drift.entries) + fix_lines(drift.entries)
        else:
            detail = [] if check.finding is None else list(check.finding.details)
        lines += [f"      {line}" for line in detail]
    failed = sum(check.status == "fail" for check in report.checks)
    warned = sum(check.status == "warn" for check in report.checks)
    verdict = "failed" if failed else "passed"
    lines.append(
        f"preflight {verdict}: {failed} failed, {warned} warning{'' if warned == 1 else 's'}"
    )
    return lines


def _process_lines(process: ProcessReport, verbose: bool) -> list[str]:
    lines = [f"pid {process.pid}  {process.title}"]
    if not process.readable:
        return [*lines, f"  unreadable: {process.reason}"]
    # Someone else's variables (an image's NCCL_VERSION) are shown as what they are: here
    # when `verbose`, else once for the whole tree (`_others_lines`).
    shown = [e for e in process.entries if e.reason == "drift" or (verbose and _others(e))]
    lines += drift_lines(shown)
    owned = [entry.key for entry in process.entries if entry.tolerated and not _others(entry)]
    tolerated = f", tolerated: {', '.join(owned)}" if owned else ""
    status = "drift" if process.drifted else "no drift"
    lines.append(f"  {status}, {len(process.matched)} match{tolerated}")
    log = process.nccl_log
    if log is not None:
        unread = f"; never read by its communicators: {', '.join(log.not_read)}"
        said = {
            "read": f"{len(log.confirmed)} applied as the profile{unread * bool(log.not_read)}",
            "none-yet": "nothing of the process's own yet (NCCL has not started in it)",
            "unreadable": f"unreadable: {log.reason}",
        }
        part = ""
        if log.read_bytes < log.size_bytes:
            part = (
                f"; read the first {_mib(log.read_bytes)} of its {_mib(log.size_bytes)} so far"
                f" (at most {_mib(LOOK_LIMIT)} of the tree's logs a look)"
            )
        lines.append(f"  NCCL's log {log.file}: {said[log.state]}{part}")
    return lines


def _others(entry: DriftEntry) -> bool:
    return entry.reason == "not-nccl"


def _others_lines(processes: list[ProcessReport]) -> list[str]:
    """Someone else's variables (an image's NCCL_VERSION, a pod's service links), each said
    once for the tree with how many of its processes carry it: every process of a pod has
    them all."""
    carried: dict[DriftEntry, int] = {}
    for entry in (entry for process in processes for entry in process.entries):
        if _others(entry):
            carried[entry] = carried.get(entry, 0) + 1
    lines = []
    total = len(processes)
    for count in sorted(set(carried.values()), reverse=True):
        where = f"all {total}" if count == total > 1 else f"{count} of {total}"
        lines.append(f"not NCCL's, left as they are, in {where} process{'es' * (total > 1)}:")
        lines += drift_lines([entry for entry, carriers in carried.items() if carriers == count])
    return lines


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB"


def live_text(report: LiveReport, verbose: bool = False) -> str:
    """The text form of `check`, each line as people see it (masked, escaped), for a
    terminal or the file of `-o`."""
    return "\n".join(map(for_people, live_lines(report, verbose)))


def live_lines(report: LiveReport, verbose: bool = False) -> list[str]:
    """A header, each process with its entries, what is not NCCL's (in each process when
    `verbose`, else once for the tree), a verdict."""
    lines = [f"check {report.profile} ({short_digest(report.digest)}) from {report.path}"]
    if report.profile_problem is not None:
        why = report.profile_problem
        lines.append(f"profile invalid now, checked against this last good version: {why}")
    lines += [f"not checked: {why.line()}" for why in report.unchecked_env_files]
    if report.running_profile is None:
        if report.processes[0].readable:  # else its markers could not be read
            lines.append(f"pid {report.main_pid} was not started by nccl-launch")
    elif report.digest_differs:
        running = f"{report.running_profile} ({short_digest(report.running_digest or '')})"
        file = f"{report.profile} ({short_digest(report.digest)})"
        lines.append(f"server runs {running}, the file is {file}")
    for process in report.processes:
        lines += _process_lines(process, verbose)
    if not verbose:
        lines += _others_lines(report.processes)
    drifted = sum(bool(process.drifted) for process in report.processes)
    unreadable = len(report.unreadable)
    count = len(report.processes)
    total = f"{count} process" + ("" if count == 1 else "es")
    if report.ok:
        lines.append(f"no drift in {total}")
    else:
        parts = [f"{drifted} drift"] if drifted else []
        parts += [f"{unreadable} unreadable"] if unreadable else []
        parts += ["another digest running"] if report.digest_differs else []
        lines.append(f"drift: {', '.join(parts)}, of {total}")
    entries = [entry for process in report.processes for entry in process.drifted]
    said = [entry for entry in entries if entry.source == SOURCE]  # by NCCL's log
    drifted_entries = [entry for entry in entries if entry.source != SOURCE]
    if drifted_entries or report.digest_differs:
        undeclared = any(
            entry.kind == "undeclared" and entry.read_by_nccl for entry in drifted_entries
        )
        lines.append(restart_line(report.path, report.server, undeclared))
    if said:
        lines.append(LATE_LINE)
    return lines


_LOG_STATUS = {
    "ok": "ok",
    "mismatch": "fail",
    "unconfirmed": "fail",
    "not-read": "note",
    "not-logged": "note",
}


def _undeclared_line(name: str, seen: dict[str, str], reason: Reason, width: int) -> str:
    """A value no key declares, said as `check` says it (`server-owned; tolerated`): one
    value in every process it applied in, or one each (a value set per rank, `NCCL_HOSTID`,
    is no value a profile can declare)."""
    entry = DriftEntry(
        key=name, kind="undeclared", expected=None, actual=None, note="undeclared", reason=reason
    )
    what = "; ".join(details(entry))
    values = sorted({json.dumps(value) for value in seen.values()})
    if len(values) == 1 or len(values) < len(seen):
        status = "note" if entry.tolerated else "warn"
        said = f"{what}, applied as {', '.join(values)} by {len(seen)} of them"
        return f"{status:<4}  {name.ljust(width)}  {said}"
    each = ", ".join(f"{json.dumps(value)} by {process}" for process, value in seen.items())
    return f"note  {name.ljust(width)}  {what}, one value per process: {each}"


def log_lines(report: LogReport) -> list[str]:
    """verify-log's text: one line per declared key, then undeclared values NCCL applied,
    then NCCL's own warnings of each process."""
    count = len(report.processes)
    header = f"verify-log {report.profile} ({short_digest(report.digest)}) against {report.source}"
    files = len(report.files)
    where = f" in {files} file{'' if files == 1 else 's'}" if report.folder else ""
    lines = [f"{header}: {count} NCCL process{'' if count == 1 else 'es'}{where}"]
    names = [key.key for key in report.keys] + list(report.undeclared)
    width = max(map(len, names), default=0)  # a profile may declare no NCCL key at all
    for key in report.keys:
        status = _LOG_STATUS[key.verdict]
        lines.append(
            f"{status:<4}  {key.key.ljust(width)}  {json.dumps(key.expected)}: {key.detail}"
        )
    lines += [
        _undeclared_line(name, seen, report.reasons[name], width)
        for name, seen in report.undeclared.items()
    ]
    for process, warnings in report.warnings.items():
        lines += [f"warn  {process} NCCL WARN {warning}" for warning in warnings]
    failed = sum(key.verdict in ("mismatch", "unconfirmed") for key in report.keys)
    unread = sum(key.verdict == "not-read" for key in report.keys)
    checked = sum(key.verdict not in ("not-logged", "not-read") for key in report.keys)
    if report.folder:
        lines += [
            f"note  {name}: no NCCL INFO lines" for name, found in report.files.items() if not found
        ]
    if report.folder and not report.files:
        lines.append(f"no NCCL log in {report.source}: NCCL started in no process of that run")
    elif not report.processes:
        lines.append("no NCCL INFO lines: start the server with nccl-launch run --nccl-debug")
    verdict = "passed" if report.ok else "failed"
    tally = f"{checked - failed} of {checked} loggable values confirmed"
    if unread:
        tally += f", {unread} not read (one-rank communicators)"
    lines.append(f"verify-log {verdict}: {tally}")
    return lines
