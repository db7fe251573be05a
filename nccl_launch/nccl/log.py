"""NCCL's own `NCCL_DEBUG=INFO` lines: which values each process says it applied."""

from __future__ import annotations

import re
from collections.abc import Iterable

from nccl_launch.nccl import catalog

# `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>`, anywhere in the line (journalctl
# prefixes). Found by plain string search and parsed from that point with patterns
# matched against one word each: no pattern is tried at every position of the line, so
# a line of megabytes costs a few passes over it, never one per character.
_MARK = " NCCL INFO "
_ORIGIN = re.compile(r"([\w.-]+):([0-9]+):[0-9]+", re.ASCII)
_SET = re.compile(r"(NCCL_\w+) set by environment to (.*)$", re.ASCII)
_INVALID = re.compile(r"Invalid (NCCL_\w+) (\S+) \((.*)\)\.?$", re.ASCII)


def parse_line(line: str) -> tuple[str, str, str, str] | None:
    """`(host, pid, device, message)` of one NCCL INFO line, or None for any other line."""
    at = line.find(_MARK)
    if at < 0:
        return None
    head, bracket, device = line[:at].rpartition(" [")
    if not bracket or not device.endswith("]") or "]" in device[:-1]:
        return None
    if not head or head[-1].isspace():
        return None
    origin = _ORIGIN.fullmatch(head.rsplit(maxsplit=1)[-1])
    if origin is None:
        return None
    host, pid = origin.groups()
    return host, pid, device[:-1], line[at + len(_MARK) :].rstrip()


def read_log(lines: Iterable[str]) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[str]]]:
    """Per process (`host:pid [dev]`): the values NCCL says it took, and its Invalid notices."""
    applied: dict[str, dict[str, list[str]]] = {}
    invalid: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        host, pid, device, message = parsed
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
