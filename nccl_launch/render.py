"""Text renderings of reports and plans; JSON comes straight from the models."""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nccl_launch.drift import DriftEntry, DriftKind, DriftReport, is_secret

if TYPE_CHECKING:
    from nccl_launch.check import LiveReport, ProcessReport
    from nccl_launch.checks import PreflightReport
    from nccl_launch.ncclog import LogReport

_MARKS: dict[DriftKind, str] = {"changed": "~", "missing": "-", "undeclared": "+"}


def shown(key: str, value: str | None) -> str:
    """A value as reports print it: quoted, `unset`, or masked when it looks like a secret."""
    if value is None:
        return "unset"
    return '"***"' if is_secret(key) else json.dumps(value)


def _entry_value(entry: DriftEntry) -> str:
    if entry.kind == "undeclared":
        return shown(entry.key, entry.actual)
    return f"{shown(entry.key, entry.expected)} -> {shown(entry.key, entry.actual)}"


def drift_lines(entries: Sequence[DriftEntry]) -> list[str]:
    """One aligned line per entry: mark, key, values, then where the value came from and why."""
    if not entries:
        return []
    key_width = max(len(entry.key) for entry in entries)
    value_width = max(len(_entry_value(entry)) for entry in entries)
    lines = []
    for entry in entries:
        details = [text for text in (entry.source, entry.note) if text]
        if entry.tolerated:
            details.append("tolerated")
        suffix = f"  ({'; '.join(details)})" if details else ""
        key, value = entry.key.ljust(key_width), _entry_value(entry).ljust(value_width)
        lines.append(f"  {_MARKS[entry.kind]} {key}  {value}{suffix}".rstrip())
    return lines


def summary(report: DriftReport) -> str:
    """`3 drift (1 changed, 2 undeclared), 4 match`, naming only the kinds present."""
    drifted = report.drifted
    counts = Counter(entry.kind for entry in drifted)
    kinds = ", ".join(f"{counts[kind]} {kind}" for kind in _MARKS if counts[kind])
    text = f"{len(drifted)} drift ({kinds})" if drifted else "no drift"
    tolerated = len(report.entries) - len(drifted)
    if tolerated:
        text += f", {tolerated} tolerated"
    return f"{text}, {len(report.matched)} match"


def drift_text(report: DriftReport, header: str) -> str:
    """The diff of DESIGN.md: a header, one line per entry, a summary."""
    return "\n".join([header, *drift_lines(report.entries), summary(report)])


def env_changes(
    calling: Mapping[str, str], env: Mapping[str, str], sources: Mapping[str, str]
) -> list[str]:
    """What the child's environment adds, changes and removes relative to the calling one."""
    rows = []
    for key in sorted(set(calling) | set(env)):
        if key not in env:
            rows.append(("-", key, "", f"was {shown(key, calling[key])}"))
        elif key not in calling:
            rows.append(("+", key, shown(key, env[key]), sources[key]))
        elif calling[key] != env[key]:
            was = shown(key, calling[key])
            rows.append(("~", key, shown(key, env[key]), f"was {was}; {sources[key]}"))
    key_width = max((len(key) for _, key, _, _ in rows), default=0)
    # Long values (the digest) are left to overhang rather than push every column right.
    value_width = max((len(value) for _, _, value, _ in rows if len(value) <= 24), default=0)
    return [
        f"  {mark} {key.ljust(key_width)}  {value.ljust(value_width)}  ({detail})"
        for mark, key, value, detail in rows
    ]


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def changes_text(changes: Sequence[tuple[str, str | None, str | None]]) -> list[str]:
    """Lines for differences between two profiles: `~` changed, `-` only in A, `+` only in B."""
    width = max((len(key) for key, _, _ in changes), default=0)
    lines = []
    for key, old, new in changes:
        if old is None:
            lines.append(f"  + {key.ljust(width)}  {shown(key, new)}")
        elif new is None:
            lines.append(f"  - {key.ljust(width)}  {shown(key, old)}")
        else:
            lines.append(f"  ~ {key.ljust(width)}  {shown(key, old)} -> {shown(key, new)}")
    return lines


def preflight_lines(report: PreflightReport) -> list[str]:
    """One line per check, details indented beneath, then the verdict."""
    width = max(len(check.name) for check in report.checks)
    lines = []
    for check in report.checks:
        lines.append(f"{check.status:<4}  {check.name.ljust(width)}  {check.message}")
        lines += [f"      {line}" for line in check.detail]
    failed = sum(check.status == "fail" for check in report.checks)
    warned = sum(check.status == "warn" for check in report.checks)
    verdict = "failed" if failed else "passed"
    lines.append(
        f"preflight {verdict}: {failed} failed, {warned} warning{'' if warned == 1 else 's'}"
    )
    return lines


def _process_lines(process: ProcessReport) -> list[str]:
    lines = [f"pid {process.pid}  {process.title}"]
    if not process.readable:
        return [*lines, f"  unreadable: {process.reason}"]
    lines += drift_lines(process.drifted)
    owned = [entry.key for entry in process.entries if entry.tolerated]
    tolerated = f", tolerated: {', '.join(owned)}" if owned else ""
    status = "drift" if process.drifted else "no drift"
    return [*lines, f"  {status}, {len(process.matched)} match{tolerated}"]


def live_text(report: LiveReport) -> str:
    """The text form of `check`: a header, each process with its entries, a verdict."""
    lines = [f"check {report.profile} ({report.digest[:15]}) from {report.path}"]
    if report.running_profile is None:
        lines.append(f"pid {report.main_pid} was not started by nccl-launch")
    elif report.digest_differs:
        running = f"{report.running_profile} ({(report.running_digest or '')[:15]})"
        lines.append(f"server runs {running}, the file is {report.profile} ({report.digest[:15]})")
    for process in report.processes:
        lines += _process_lines(process)
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
    return "\n".join(lines)


_LOG_STATUS = {"ok": "ok", "mismatch": "fail", "unconfirmed": "fail", "not-logged": "note"}


def log_lines(report: LogReport) -> list[str]:
    """verify-log's text: one line per declared key, then undeclared values NCCL applied."""
    count = len(report.processes)
    header = f"verify-log {report.profile} ({report.digest[:15]}) against {report.source}"
    lines = [f"{header}: {count} NCCL process{'' if count == 1 else 'es'}"]
    width = max([len(key.key) for key in report.keys] + [len(key) for key in report.undeclared])
    for key in report.keys:
        status = _LOG_STATUS[key.verdict]
        lines.append(
            f"{status:<4}  {key.key.ljust(width)}  {json.dumps(key.expected)}: {key.detail}"
        )
    for name, seen in report.undeclared.items():
        values = ", ".join(sorted({json.dumps(value) for value in seen.values()}))
        lines.append(
            f"warn  {name.ljust(width)}  undeclared, applied as {values} by {len(seen)} of them"
        )
    failed = sum(key.verdict in ("mismatch", "unconfirmed") for key in report.keys)
    checked = sum(key.verdict != "not-logged" for key in report.keys)
    if not report.processes:
        lines.append("no NCCL INFO lines: start the server with nccl-launch run --nccl-debug")
    verdict = "passed" if report.ok else "failed"
    lines.append(f"verify-log {verdict}: {checked - failed} of {checked} loggable values confirmed")
    return lines
