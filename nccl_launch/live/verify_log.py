"""`verify-log`: NCCL's own log as proof that each process applied every declared value."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, Field

from nccl_launch.env.drift import Reason, classify
from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.nccl import catalog
from nccl_launch.nccl.log import ProcessLog, judge, read_log
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.report import Report

# What verify-log says of one declared value over every process (`ProcessVerdict`s summed up:
# a process's "differs" makes "mismatch", a "pending" one "unconfirmed").
KeyVerdict = Literal["ok", "mismatch", "unconfirmed", "not-read", "not-logged"]


class KeyReport(BaseModel):
    key: str
    expected: str
    verdict: KeyVerdict
    detail: str


class LogReport(Report):
    """The result of `verify-log`; exit 1 on a value applied differently or never confirmed."""

    profile: str
    digest: str
    source: str
    processes: list[str]
    keys: list[KeyReport]
    undeclared: dict[str, dict[str, str]]  # key -> process -> value NCCL applied
    # key -> why an undeclared value is there, as `check` says it (`classify`): "drift", or
    # why it is tolerated ("server-owned": the server sets it itself)
    reasons: dict[str, Reason]
    communicators: dict[str, dict[str, int]]  # process -> communicator -> nranks
    warnings: dict[str, list[str]]  # process -> NCCL's WARN lines, `file:line message`
    files: dict[str, list[str]]  # each file read (of a folder: its name) -> its processes
    folder: bool = Field(default=False, exclude=True)  # `source` is a folder of files

    @property
    def ok(self) -> bool:
        passing = ("ok", "not-read", "not-logged")
        return bool(self.processes) and all(k.verdict in passing for k in self.keys)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_DRIFT


def _processes(count: int) -> str:
    return f"{count} process{'' if count == 1 else 'es'}"


def _verdict(key: str, expected: str, logs: dict[str, ProcessLog]) -> KeyReport:
    """One declared value against every process: each judged on all its communicators."""
    unlogged = judge(key, expected, ProcessLog())
    if unlogged.verdict == "not-logged":
        return KeyReport(key=key, expected=expected, verdict="not-logged", detail=unlogged.detail)
    judged = {process: judge(key, expected, log) for process, log in logs.items()}
    if not logs:
        detail = "never reported by any process (no NCCL INFO lines)"
        return KeyReport(key=key, expected=expected, verdict="unconfirmed", detail=detail)
    wrong, silent, unread = [], [], []
    for process, judgement in judged.items():
        if judgement.verdict == "not-read":
            unread.append(judgement.detail)
        elif judgement.verdict == "pending" and logs[process].communicators:
            silent.append(f"{process} (its init never completed)")  # NCCL will say no more
        elif judgement.verdict == "pending" or judgement.detail == "never reported":
            silent.append(process)
        elif judgement.verdict != "ok":
            wrong.append(f"{process} {judgement.detail}")
    differs = any(judgement.verdict == "differs" for judgement in judged.values())
    if silent:
        wrong.append(f"never reported by {', '.join(silent)}")
    if wrong:
        verdict: KeyVerdict = "mismatch" if differs else "unconfirmed"
        return KeyReport(key=key, expected=expected, verdict=verdict, detail="; ".join(wrong))
    unread_in = f"{unread[0]} ({_processes(len(unread))})" if unread else ""
    if len(unread) == len(judged):
        return KeyReport(key=key, expected=expected, verdict="not-read", detail=unread_in)
    confirmed = len(judged) - len(unread)
    detail = f"confirmed by {'all ' if confirmed > 1 else ''}{_processes(confirmed)}"
    if unread:
        detail = f"confirmed by {_processes(confirmed)}; {unread_in}"
    return KeyReport(key=key, expected=expected, verdict="ok", detail=detail)


def _process_order(process: str) -> tuple[str, int, str]:
    """By host, then PID as a number: compared as digit strings, so any length sorts."""
    host, _, rest = process.partition(":")
    pid = rest.split(" ", 1)[0].lstrip("0")
    return host, len(pid), pid


def verify(loaded: LoadedProfile, lines: Iterable[str], source: str) -> LogReport:
    """`judge_logs` of the processes of one log, `source`."""
    logs = read_log(lines)
    return judge_logs(loaded, logs, source, {source: list(logs)})


def verify_files(
    loaded: LoadedProfile, files: Iterable[tuple[str, Iterable[str]]], source: str
) -> LogReport:
    """`judge_logs` of the processes of each of the `files` (name, lines) of the folder
    `source`, each process named with its file."""
    logs: dict[str, ProcessLog] = {}
    read: dict[str, list[str]] = {}
    for name, lines in files:
        found = {f"{process} ({name})": log for process, log in read_log(lines).items()}
        logs |= found
        read[name] = list(found)
    return judge_logs(loaded, logs, source, read, folder=True)


def judge_logs(
    loaded: LoadedProfile,
    found: Mapping[str, ProcessLog],
    source: str,
    files: dict[str, list[str]],
    folder: bool = False,
) -> LogReport:
    """Every declared NCCL value against what each process `found` in the `files` read (of
    the `folder` `source`, or of the log `source`) says it applied; each undeclared one judged
    as `check` judges it in a running server (a log of NCCL's INFO lines is one `run
    --nccl-debug` asked for)."""
    plan, policy = loaded.plan, loaded.profile.policy
    logs = dict(sorted(found.items(), key=lambda item: _process_order(item[0])))
    declared = {key: value for key, value in plan.env.items() if key.startswith(catalog.PREFIX)}
    keys = [_verdict(key, value, logs) for key, value in declared.items()]
    undeclared: dict[str, dict[str, str]] = {}
    for process, log in logs.items():
        for key in log.applied:
            if key not in declared:
                undeclared.setdefault(key, {})[process] = log.values(key)[-1]
    reasons = {
        key: classify(
            key, "undeclared", policy, "live", nccl_debug=True, value=next(iter(seen.values()))
        )
        for key, seen in undeclared.items()
    }
    return LogReport(
        profile=plan.label,
        digest=plan.digest,
        source=source,
        processes=list(logs),
        keys=keys,
        undeclared=undeclared,
        reasons=reasons,
        communicators={process: log.communicators for process, log in logs.items()},
        warnings={process: log.warn_lines for process, log in logs.items() if log.warn_lines},
        files=files,
        folder=folder,
    )
