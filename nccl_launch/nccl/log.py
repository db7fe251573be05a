"""NCCL's own `NCCL_DEBUG=INFO` lines: which values each process says it applied."""

from __future__ import annotations

import re
from collections.abc import Iterable

from nccl_launch.nccl import catalog

# `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>`, anywhere in the line (journalctl prefixes).
_LINE = re.compile(r"(?:^|\s)([\w.-]+):(\d+):\d+ \[([^\]]*)\] NCCL INFO (.*?)\s*$")
_SET = re.compile(r"(NCCL_\w+) set by environment to (.*)$")
_INVALID = re.compile(r"Invalid (NCCL_\w+) (\S+) \((.*)\)\.?$")


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
