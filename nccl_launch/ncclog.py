"""`verify-log`: NCCL's own `NCCL_DEBUG=INFO` lines as proof that each declared value applied."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from nccl_launch import catalog, grammar
from nccl_launch.plan import LaunchPlan

# `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>`, anywhere in the line (journalctl prefixes).
_LINE = re.compile(r"(?:^|\s)([\w.-]+):(\d+):\d+ \[([^\]]*)\] NCCL INFO (.*?)\s*$")
_SET = re.compile(r"(NCCL_\w+) set by environment to (.*)$")
_INVALID = re.compile(r"Invalid (NCCL_\w+) (\S+) \((.*)\)\.?$")

Verdict = Literal["ok", "mismatch", "unconfirmed", "not-logged"]


class KeyReport(BaseModel):
    key: str
    expected: str
    verdict: Verdict
    detail: str


class LogReport(BaseModel):
    """The versioned result of `verify-log --format json`."""

    schema_version: int = 1
    profile: str
    digest: str
    source: str
    processes: list[str]
    keys: list[KeyReport]
    undeclared: dict[str, dict[str, str]]  # key -> process -> value NCCL applied

    @property
    def ok(self) -> bool:
        return bool(self.processes) and all(k.verdict in ("ok", "not-logged") for k in self.keys)


def read_log(lines: Iterable[str]) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[str]]]:
    """Per process (`host:pid [dev]`): the values NCCL says it took, and its Invalid notices."""
    applied: dict[str, dict[str, list[str]]] = {}
    invalid: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for line in lines:
        match = _LINE.search(line)
        if match is None:
            continue
        host, pid, device, message = match.groups()
        process = names.setdefault(f"{host}:{pid}", f"{host}:{pid} [{device}]")
        values = applied.setdefault(process, {})
        if found := _SET.match(message):
            key, value = found.groups()
            if value.endswith(".") and key not in catalog.LOGGED_STRINGS:
                value = value[:-1]  # integer parameters end their line with a period
            values.setdefault(key, []).append(value)
        elif found := _INVALID.match(message):
            key, value, why = found.groups()
            invalid.setdefault(process, []).append(f"{key} {value} ({why})")
    return applied, invalid


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
            value for value in values.get(key, []) if not grammar.same_meaning(key, expected, value)
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


def _process_order(process: str) -> tuple[str, int]:
    host, _, rest = process.partition(":")
    return host, int(rest.split(" ", 1)[0])


def verify(plan: LaunchPlan, lines: Iterable[str], source: str) -> LogReport:
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
