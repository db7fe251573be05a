"""NCCL's own log (`NCCL_DEBUG=INFO`): what each process says it applied, its communicators
and warnings, and the one judgement of a declared value against it.

Used for a whole log file (`verify-log`), each trial of `tune`, and a process's own
`NCCL_DEBUG_FILE` read as it grows (`check`): `LogReader` takes lines one at a time, in any
order of processes, and keeps a bounded part of each (the last value of each name per
communicator, the first warnings), so that a log of any length costs little memory. The
formats are those of NCCL's `src/debug.cc`, the communicator lines those of `src/init.cc`, and
which names are logged, and when, is `catalog.Logged` (the data in
`data/nccl-env-logged.tsv`); docs/explanation.md cites the source.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Literal

from nccl_launch.nccl import catalog, rules

# `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>` and `<host>:<pid>:<tid> [<cudaDev>]
# <file>:<line> [(<func>)] NCCL WARN <msg>`, anywhere in the line (journalctl prefixes, NCCL's
# own timestamp before a WARN). Found by plain string search and parsed from that point with
# patterns matched against one word each: no pattern is tried at every position of the line,
# so a line of megabytes costs a few passes over it, never one per character.
_INFO = " NCCL INFO "
_WARN = " NCCL WARN "
_ORIGIN = re.compile(r"([\w.-]+):([0-9]+):([0-9]+)", re.ASCII)
_SET = re.compile(r"(NCCL_\w+) set by environment to (.*)$", re.ASCII)
_INVALID = re.compile(r"Invalid (NCCL_\w+) (\S+) \((.*)\)\.?$", re.ASCII)
# ncclLoadParam when strtoll overflows: NCCL keeps its default.
_OVERFLOW = re.compile(r"Invalid value (\S*) for (NCCL_\w+), using default (-?[0-9]+)\.$", re.ASCII)
_LINE_END = "\r\n"  # only: a value NCCL read may end in a blank ("LL ", which it rejects)
_INIT_ENDS = (" Init START", " Init COMPLETE", "- Init START", "- Init COMPLETE")

_PROCESS = ""  # the slot of a value NCCL logs once a process, or outside a communicator's init
# What one process's log says of one declared value; `verify_log.KeyVerdict` sums these up
# over every process.
ProcessVerdict = Literal["ok", "differs", "not-read", "pending", "unconfirmed", "not-logged"]

# What one process's log keeps, whatever its length: NCCL's INIT,ENV lines of a rank are some
# 10 KiB (a handful of communicators, a few dozen names), so a log beyond these is not NCCL's
# alone; its first communicators, values and lines are kept, and a value already kept is
# always brought up to date.
COMMUNICATORS_KEPT = 64
VALUES_KEPT = 128  # (name, communicator) pairs
UNKNOWN_KEPT = 4  # names the catalog does not know (a newer NCCL's): each costs a did-you-mean
LINES_KEPT = 16  # warnings, and `Invalid` lines
VALUE_LIMIT = 1024  # characters of a value: NCCL's are names, numbers and short lists


@dataclass
class ProcessLog:
    """What NCCL said in one process (`host:pid [dev]`), within the bounds above."""

    # NCCL_X -> communicator (or _PROCESS) -> the last value, the latest set last
    applied: dict[str, dict[str, str]] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)  # "Invalid NCCL_NTHREADS 100 (...)"
    # NCCL's own `NCCL WARN` lines, data it printed, not our findings: "graph/tuning.cc:104 <msg>"
    warn_lines: list[str] = field(default_factory=list)
    communicators: dict[str, int] = field(default_factory=dict)  # comm address -> nranks
    completed: set[str] = field(default_factory=set)  # communicators that logged Init COMPLETE
    starting: dict[str, str] = field(default_factory=dict)  # thread -> comm in its init
    kept: int = 0  # values kept, of VALUES_KEPT
    unknown: int = 0  # names kept that the catalog does not know, of UNKNOWN_KEPT

    @property
    def complete(self) -> bool:
        """Some communicator of the process logged `Init COMPLETE`."""
        return bool(self.completed)

    def values(self, key: str) -> list[str]:
        """The last value NCCL applied for `key` in each communicator (or once), the latest
        last."""
        return list(self.applied.get(key, {}).values())

    def apply(self, key: str, value: str, thread: str) -> None:
        """NCCL set `key` to `value` in `thread`: in the communicator that thread is
        initialising where NCCL reads `key` per communicator, else once for the process."""
        logged = _logged(key)
        per_communicator = logged is not None and logged.per == "communicator"
        slot = self.starting.get(thread, _PROCESS) if per_communicator else _PROCESS
        slots = self.applied.get(key)
        if slots is None and catalog.lookup(key) is None:
            if self.unknown >= UNKNOWN_KEPT:
                return
            self.unknown += 1
        if slots is None or slot not in slots:
            if self.kept >= VALUES_KEPT:
                return
            self.kept += 1
        slots = self.applied.setdefault(key, {})
        slots.pop(slot, None)  # the latest set last
        slots[slot] = value if len(value) <= VALUE_LIMIT else value[:VALUE_LIMIT] + "..."

    def keep(self, lines: list[str], line: str) -> None:
        """`line` kept in `lines` (NCCL's warnings or invalid) while fewer than LINES_KEPT."""
        if len(lines) < LINES_KEPT:
            lines.append(line[: VALUE_LIMIT * 2])

    def init(self, comm: str, nranks: int, complete: bool, thread: str) -> None:
        """A communicator's `Init START` or `Init COMPLETE`, said by `thread`."""
        if comm not in self.communicators and len(self.communicators) >= COMMUNICATORS_KEPT:
            return
        self.communicators[comm] = nranks
        if complete:
            self.completed.add(comm)
            if self.starting.get(thread) == comm:
                del self.starting[thread]
        elif thread in self.starting or len(self.starting) < COMMUNICATORS_KEPT:
            self.starting[thread] = comm


@dataclass(frozen=True)
class Judgement:
    """One declared value against what one process's NCCL said."""

    verdict: ProcessVerdict
    detail: str
    said: tuple[str, ...] = ()  # NCCL's own lines where it differs
    value: str | None = None  # where it differs: the last value NCCL applied, else rejected


def _origin(head: str) -> tuple[str, str, str, str] | None:
    """`(host, pid, tid, device)` from the text before NCCL's level word, ending
    `... [<dev>]`."""
    before, bracket, device = head.rpartition(" [")
    if not bracket or not device.endswith("]") or "]" in device[:-1]:
        return None
    if not before or before[-1].isspace():
        return None
    origin = _ORIGIN.fullmatch(before.rsplit(maxsplit=1)[-1])
    if origin is None:
        return None
    host, pid, tid = origin.groups()
    return host, pid, tid, device[:-1]


def parse_line(line: str) -> tuple[str, str, str, str, str, str] | None:
    """`(level, host, pid, tid, device, message)` of an NCCL INFO or WARN line, else None; a
    WARN's message starts with NCCL's `file:line`."""
    at = line.find(_INFO)
    if at >= 0:
        origin = _origin(line[:at])
        if origin is None:
            return None
        return ("INFO", *origin, line[at + len(_INFO) :].rstrip(_LINE_END))
    at = line.find(_WARN)
    if at < 0:
        return None
    # `[<dev>] <file>:<line>` or, since 2.29, `[<dev>] <file>:<line> (<func>)`
    head, space, where = line[:at].rpartition("] ")
    words = where.split()
    if not space or not 1 <= len(words) <= 2 or ":" not in words[0]:
        return None
    origin = _origin(head + "]")
    if origin is None:
        return None
    return ("WARN", *origin, f"{words[0]} {line[at + len(_WARN) :].rstrip(_LINE_END)}")


def _communicator(message: str) -> tuple[str, int, bool] | None:
    """`(comm, nranks, complete)` of an `Init START` or `Init COMPLETE` line of src/init.cc:
    `[[Rank R] ]<func> comm 0x.. rank R nranks N ... - Init START` (older NCCL: no func)."""
    if not message.endswith(_INIT_ENDS):
        return None
    words = message.split(maxsplit=9)[:9]
    if words[:1] == ["[Rank"]:
        words = words[2:]
    if words[:1] != ["comm"]:
        words = words[1:]
    if len(words) < 6 or (words[0], words[2], words[4]) != ("comm", "rank", "nranks"):
        return None
    if not words[5].isdigit() or not words[5].isascii():
        return None
    return words[1], int(words[5]), message.endswith("COMPLETE")


def _logged(key: str) -> catalog.Logged | None:
    var = catalog.lookup(key)
    return var.logged if var is not None else None


class LogReader:
    """NCCL's lines fed one at a time (a whole file, or a file read as it grows). With `pids`,
    only the lines of those PIDs are kept, one log each whatever the host (`log_of`): a file
    several processes write holds each one's lines under its own PID."""

    def __init__(self, pids: Collection[str] | None = None) -> None:
        self.processes: dict[str, ProcessLog] = {}
        self._names: dict[str, str] = {}
        self._pids = pids

    def log_of(self, pid: int) -> ProcessLog | None:
        """The log of the lines of `pid` (of the PIDs the reader keeps), None before any."""
        name = self._names.get(str(pid))
        return None if name is None else self.processes[name]

    def feed(self, line: str) -> None:
        parsed = parse_line(line)
        if parsed is None:
            return
        level, host, pid, tid, device, message = parsed
        if self._pids is not None and pid not in self._pids:
            return
        origin = f"{host}:{pid}" if self._pids is None else pid
        process = self._names.setdefault(origin, f"{host}:{pid} [{device}]")
        log = self.processes.setdefault(process, ProcessLog())
        if level == "WARN":
            log.keep(log.warn_lines, message)
        elif found := _SET.match(message):
            key, value = found.groups()
            logged = _logged(key)
            if value.endswith(".") and logged is not None and logged.period:
                value = value[:-1]
            log.apply(key, value, tid)
        elif found := _INVALID.match(message):
            log.keep(log.invalid, message.removesuffix("."))
        elif found := _OVERFLOW.match(message):
            value, key, default = found.groups()
            log.keep(
                log.invalid, f"Invalid {key} {value} (overflow: NCCL keeps its default {default})"
            )
        elif communicator := _communicator(message):
            log.init(*communicator, tid)


def read_log(lines: Iterable[str]) -> dict[str, ProcessLog]:
    """Per process (`host:pid [dev]`), what NCCL said in `lines`."""
    reader = LogReader()
    for line in lines:
        reader.feed(line)
    return reader.processes


def judge(key: str, expected: str, log: ProcessLog) -> Judgement:
    """`expected` for `key` against one process's NCCL log.

    `differs`: NCCL applied another value or rejected it (`said` holds its lines);
    `not-read`: every communicator of the process is smaller than those that read it
    (`NCCL_PROTO` in a one-rank communicator); `pending`: no communicator that would read it
    has completed its init yet; `unconfirmed`: one has, and NCCL never said it applied it;
    `not-logged`: NCCL never logs the name."""
    logged = _logged(key)
    if logged is None:
        return Judgement("not-logged", "NCCL does not log it; a log cannot confirm it")
    period = "." if logged.period else ""
    values = log.values(key)
    wrong = [value for value in values if not rules.same_meaning(key, expected, value)]
    invalid = [text for text in log.invalid if text.startswith(f"Invalid {key} ")]
    if wrong or invalid:
        said = tuple(f"{key} set by environment to {value}{period}" for value in wrong)
        shown = [f'applied "{value}"' for value in dict.fromkeys(wrong)]
        shown += [f'said "{text}"' for text in invalid]
        value = wrong[-1] if wrong else invalid[-1].split()[2]
        return Judgement("differs", ", ".join(shown), said + tuple(invalid), value)
    reading = {comm: n for comm, n in log.communicators.items() if n >= logged.min_ranks}
    done = [comm for comm in reading if comm in log.completed]
    if values and logged.per == "communicator" and len(values) < len(done):
        detail = f"reported for {len(values)} of its {len(done)} communicators that read it"
        return Judgement("unconfirmed", detail)
    if values:
        return Judgement("ok", "confirmed")
    if log.communicators and not reading:
        return Judgement("not-read", "not read: one-rank communicator")  # min_ranks: 2
    if not done:
        return Judgement("pending", "NCCL has not completed a communicator that reads it")
    return Judgement("unconfirmed", "never reported")
