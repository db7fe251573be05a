"""`verify-log`: NCCL's own log as proof that each process applied every declared value."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.nccl import catalog, rules
from nccl_launch.nccl.log import read_log
from nccl_launch.profile.load import load_profile
from nccl_launch.profile.plan import ProfilePlan
from nccl_launch.report import Report

Verdict = Literal["ok", "mismatch", "unconfirmed", "not-logged"]


class KeyReport(BaseModel):
    key: str
    expected: str
    verdict: Verdict
    detail: str


class LogReport(Report):
    """The result of `verify-log`; exit 1 on a value applied differently or never confirmed."""

    profile: str
    digest: str
    source: str
    processes: list[str]
    keys: list[KeyReport]
    undeclared: dict[str, dict[str, str]]  # key -> process -> value NCCL applied

    @property
    def ok(self) -> bool:
        return bool(self.processes) and all(k.verdict in ("ok", "not-logged") for k in self.keys)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_DRIFT


def _verdict(
    key: str, expected: str, applied: dict[str, dict[str, list[str]]], invalid: dict[str, list[str]]
) -> KeyReport:
    var = catalog.lookup(key)
    if var is None or not var.logged:
        detail = "NCCL does not log it; a log cannot confirm it"
        return KeyReport(key=key, expected=expected, verdict="not-logged", detail=detail)
    wrong, silent = [], []
    for process, values in applied.items():
        notices = [text for text in invalid.get(process, []) if text.startswith(f"{key} ")]
        others = [
            value for value in values.get(key, []) if not rules.same_meaning(key, expected, value)
        ]
        if notices or others:
            shown = ", ".join([*(f'"{value}"' for value in dict.fromkeys(others)), *notices])
            wrong.append(f"{process} applied {shown}")
        elif key not in values:
            silent.append(process)
    if not applied:
        detail = "never reported by any process (no NCCL INFO lines)"
        return KeyReport(key=key, expected=expected, verdict="unconfirmed", detail=detail)
    if silent:
        wrong.append(f"never reported by {', '.join(silent)}")
    if wrong:
        verdict: Verdict = "mismatch" if len(wrong) > bool(silent) else "unconfirmed"
        return KeyReport(key=key, expected=expected, verdict=verdict, detail="; ".join(wrong))
    detail = f"confirmed by all {len(applied)} processes"
    return KeyReport(key=key, expected=expected, verdict="ok", detail=detail)


def _process_order(process: str) -> tuple[str, int, str]:
    """By host, then PID as a number: compared as digit strings, so any length sorts."""
    host, _, rest = process.partition(":")
    pid = rest.split(" ", 1)[0].lstrip("0")
    return host, len(pid), pid


def verify(plan: ProfilePlan, lines: Iterable[str], source: str) -> LogReport:
    """Every declared NCCL value against what each process of the log says it applied."""
    applied, invalid = read_log(lines)
    applied = dict(sorted(applied.items(), key=lambda item: _process_order(item[0])))
    declared = {key: value for key, value in plan.env.items() if key.startswith(catalog.PREFIX)}
    keys = [_verdict(key, value, applied, invalid) for key, value in declared.items()]
    undeclared: dict[str, dict[str, str]] = {}
    for process, values in applied.items():
        for key, seen in values.items():
            if key not in declared:
                undeclared.setdefault(key, {})[process] = seen[-1]
    return LogReport(
        profile=plan.label,
        digest=plan.digest,
        source=source,
        processes=list(applied),
        keys=keys,
        undeclared=undeclared,
    )


def verify_profile(ref: str, lines: Iterable[str], source: str) -> LogReport:
    """`verify` against the profile `ref` names."""
    return verify(load_profile(ref).plan, lines, source)
