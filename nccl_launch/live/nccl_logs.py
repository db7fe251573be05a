"""NCCL's own word, per process: `run --nccl-debug` has each process of the tree write its
NCCL log to a file of its own (NCCL_DEBUG_FILE, with NCCL's %h and %p) in a folder of the run
under the state home; `check` follows each file as it grows and judges what NCCL says it
applied, which a process may have changed inside itself where /proc cannot see it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from nccl_launch.env.drift import DriftEntry, diff_env
from nccl_launch.files.base_dirs import open_beneath
from nccl_launch.files.paths import kind_of
from nccl_launch.files.reading import LINE_LIMIT
from nccl_launch.findings import Finding, Refused, said_of
from nccl_launch.jsonlines import STATE, STATE_FIX, state_home
from nccl_launch.nccl import catalog, rules
from nccl_launch.nccl.log import LogReader, ProcessLog, judge
from nccl_launch.profile.markers import MARKER_NCCL_DEBUG, NCCL_DEBUG_FILE
from nccl_launch.profile.model import Policy

if TYPE_CHECKING:  # read from /proc by live/processes.py, which imports psutil
    from nccl_launch.live.processes import ProcessSnapshot

FOLDER = STATE / "nccl-debug"
LOG_NAME = "%h.%p.log"  # expanded by NCCL in each process: its host and its PID
# What follows from a run folder that could not be made: NCCL writes as without the file.
LOG_LOST = "NCCL's log goes to the server's output, where check cannot read it"
# Read of all the tree's files at one look, shared evenly between them: NCCL's INIT,ENV lines
# are some 10 KiB a rank, written at each communicator's init, from the start of the file on.
LOOK_LIMIT = 4 << 20
SOURCE = "NCCL's log"
_LOOK = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC

LogState = Literal["read", "none-yet", "unreadable"]


class NcclLog(BaseModel):
    """One process's NCCL log: its file, whether NCCL has written there yet (or why it cannot
    be read), the declared keys NCCL said it applied as the profile has them and those it
    never reads there. What NCCL applied otherwise is among the process's entries, with
    NCCL's line as their note."""

    file: str
    state: LogState
    reason: str | None = None
    confirmed: list[str] = []
    not_read: list[str] = []  # declared keys its communicators never read (one rank: PROTO)
    read_bytes: int = 0  # of the file, from its start, judged so far
    size_bytes: int = 0  # the file's size at the look


def run_folder(name: str, pid: int, now: float | None = None) -> PurePath:
    """The folder, under the state home, of the NCCL logs of the run of `pid` started `now`
    with the profile `name`: a new one per run, so that no file of an earlier run is ever
    read as this one's, among the profile's runs (`verify-log --latest` takes the newest)."""
    return FOLDER / name / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{pid}"


def debug_file(folder: PurePath) -> str:
    """NCCL_DEBUG_FILE for the run's `folder`: its path, any `%` in it doubled (NCCL would
    expand it), then LOG_NAME."""
    return str(folder).replace("%", "%%") + "/" + LOG_NAME


def _make_run_folder(folder: PurePath, pid: int) -> Path:
    """Create `folder` under the state home (0700, as every folder on the way), with a file
    `pid` holding the run's PID, and return the folder's resolved path: NCCL opens its log by
    name, later, so no symlink on the way may point it elsewhere meanwhile. Refused when
    it exists already (never shared by two runs) or cannot be written (a full disk), leaving
    no folder of its own behind."""
    state = state_home()
    where = state.path / folder
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = open_beneath(state, folder / "pid", flags, STATE_FIX)
    except Refused as error:
        raise said_of(f"NCCL's log folder {where}", error) from None
    except OSError as error:
        with contextlib.suppress(OSError):  # made on the way, empty; another run's is not
            where.rmdir()
        unmade = f"cannot create NCCL's log folder {where}: {error.strerror}"
        raise Refused(Finding("nccl-debug", "", unmade, cause="host")) from None
    try:
        # The folder as the kernel found it, whatever symlinks led there.
        resolved = Path(f"/proc/self/fd/{fd}").readlink().parent
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(f"{pid}\n")
    except OSError as error:
        remove_run_folder(folder)
        unwritten = f"cannot write in NCCL's log folder {where}: {error.strerror}"
        raise Refused(Finding("nccl-debug", "", unwritten, cause="host")) from None
    return resolved


def remove_run_folder(folder: PurePath) -> None:
    """Remove the run's folder where its server never started: its `pid` file, then the
    folder, unless something else is in it."""
    where = state_home().path / folder
    with contextlib.suppress(OSError):
        (where / "pid").unlink()
        where.rmdir()


def with_run_folder(
    env: Mapping[str, str], folder: PurePath, pid: int
) -> tuple[dict[str, str], Finding | None]:
    """The server's `env` once the run's folder is made, NCCL_DEBUG_FILE naming it by its
    resolved path; else `env` without NCCL_DEBUG_FILE (NCCL then prints to the server's
    output, as it does when it cannot open the file) and why: a start never fails for want
    of a log folder, and NCCL never writes where the folder was refused: a warning. Where the
    start then fails, `remove_run_folder` takes it away."""
    kept = {key: value for key, value in env.items() if key != NCCL_DEBUG_FILE}
    try:
        resolved = _make_run_folder(folder, pid)
    except Refused as error:
        found = error.findings[0]
        fix = f"{found.fix}; {LOG_LOST}" if found.fix else LOG_LOST
        return kept, dataclasses.replace(found, severity="warning", fix=fix)
    return {**env, NCCL_DEBUG_FILE: debug_file(resolved)}, None


def nccl_host() -> str:
    """This host's name as NCCL puts it in a log file's name: up to the first dot, '%' and '/'
    made '-'."""
    return socket.gethostname().split(".", 1)[0].replace("%", "-").replace("/", "-")


def expanded(pattern: str, pid: int, host: str) -> str:
    """NCCL_DEBUG_FILE as NCCL expands it in process `pid` on `host`: `%h`, `%p`, `%%` one
    `%`, any other `%X` kept as it is."""
    codes = {"%": "%", "h": host, "p": str(pid)}
    parts, chars = [], iter(pattern)
    for char in chars:
        code = next(chars, "") if char == "%" else None
        parts.append(char if code is None else codes.get(code, char + code))
    return "".join(parts)


@dataclass
class _Followed:
    """One file followed: which one (device, inode), whose lines it keeps (the PIDs of the
    processes that write it), how far it was read and its size at the last look, the line
    begun and not yet ended, and NCCL's lines read so far."""

    identity: tuple[int, int]
    pids: frozenset[str]
    offset: int = 0
    size: int = 0
    begun: bytes = b""
    skipping: bool = False  # inside a line longer than LINE_LIMIT, dropped as it comes
    reader: LogReader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = LogReader(self.pids)

    def feed(self, data: bytes) -> None:
        *ended, rest = (self.begun + data).split(b"\n")
        for number, line in enumerate(ended):
            if not (self.skipping and number == 0):
                self.reader.feed(line.decode("utf-8", "replace"))
        self.skipping = (self.skipping and not ended) or len(rest) > LINE_LIMIT
        self.begun = b"" if self.skipping else rest


def judged(
    log: ProcessLog, declared: Mapping[str, str], proc: Mapping[str, str], policy: Policy
) -> tuple[list[DriftEntry], list[str], list[str]]:
    """What one process's NCCL said against the profile (`declared`), by nccl/log.py's one
    judgement, classified by drift's one rule: the entries where NCCL applied a value
    otherwise (a declared one, or one the profile does not declare) and /proc (`proc`) does
    not already show it; the declared keys NCCL confirmed; those its communicators never read
    (PROTO and ALGO in a one-rank communicator). A key NCCL has not reached yet is neither."""
    said: dict[str, str] = {}  # key -> NCCL's value
    lines: dict[str, str] = {}  # key -> NCCL's line
    confirmed, not_read = [], []
    for key, expected in declared.items():
        if not key.startswith(catalog.PREFIX):
            continue
        judgement = judge(key, expected, log)
        if judgement.verdict == "ok":
            confirmed.append(key)
        elif judgement.verdict == "not-read":
            not_read.append(key)
        elif judgement.verdict == "differs" and judgement.value is not None:
            said[key], lines[key] = judgement.value, judgement.said[-1]
    for key in log.applied:
        if key not in declared:
            last = log.values(key)[-1]
            said[key], lines[key] = last, f"{key} set by environment to {last}"
    profile = {key: declared[key] for key in said if key in declared}
    entries, _ = diff_env(profile, said, {}, policy, "live", nccl_debug=True)
    unseen = [
        entry.model_copy(update={"source": SOURCE, "note": lines[entry.key]})
        for entry in entries
        if entry.key not in proc
        or not rules.same_meaning(entry.key, proc[entry.key], said[entry.key])
    ]
    return unseen, confirmed, not_read


# What one look found of a process's log: its file read (on), why it cannot be, or None where
# its user has no file there yet.
_Found = _Followed | str | None


class NcclLogs:
    """The NCCL log files of a tree, followed from look to look: at each look (`look`) each
    file is read on once, however many processes write it, from where the last look stopped
    (from the start again once replaced or shrunk, or once another process writes it), and at
    most LOOK_LIMIT bytes of all files together; `judge` then judges each process on its own
    lines."""

    def __init__(self) -> None:
        self._followed: dict[tuple[int, int], _Followed] = {}
        self._found: dict[int, tuple[str, _Found]] = {}  # pid -> its file, what was found
        self.host = nccl_host()

    def file_of(self, snapshot: ProcessSnapshot) -> str | None:
        """The file NCCL writes in a process started by `run --nccl-debug`, else None."""
        env = snapshot.env or {}
        if env.get(MARKER_NCCL_DEBUG) != "1" or NCCL_DEBUG_FILE not in env:
            return None
        return expanded(env[NCCL_DEBUG_FILE], snapshot.pid, self.host)

    def look(self, snapshots: Sequence[ProcessSnapshot]) -> None:
        """One look at the logs of the processes of `snapshots`: each one's file found, each
        file read on once, within its share of LOOK_LIMIT; the files no process of them
        writes any longer forgotten."""
        located: dict[int, tuple[str, tuple[int, int] | str | None]] = {}
        opened: dict[tuple[int, int], int] = {}  # identity -> an O_PATH descriptor
        writers: dict[tuple[int, int], set[str]] = {}
        try:
            for snapshot in snapshots:
                path = self.file_of(snapshot)
                if path is None:
                    continue
                try:
                    where = _locate(path, snapshot.pid, snapshot.uid)
                except _Unreadable as problem:
                    located[snapshot.pid] = (path, str(problem))
                    continue
                if where is None:
                    located[snapshot.pid] = (path, None)
                    continue
                identity, fd = where
                if identity in opened:
                    os.close(fd)
                else:
                    opened[identity] = fd
                writers.setdefault(identity, set()).add(str(snapshot.pid))
                located[snapshot.pid] = (path, identity)
            self._followed = {
                identity: each for identity, each in self._followed.items() if identity in opened
            }
            share = LOOK_LIMIT // max(len(opened), 1)
            read: dict[tuple[int, int], _Followed | str] = {}
            for identity, fd in opened.items():
                try:
                    read[identity] = self._read(identity, fd, frozenset(writers[identity]), share)
                except _Unreadable as problem:
                    self._followed.pop(identity, None)
                    read[identity] = str(problem)
        finally:
            for fd in opened.values():
                os.close(fd)
        self._found = {
            pid: (path, read[what] if isinstance(what, tuple) else what)
            for pid, (path, what) in located.items()
        }

    def judge(
        self, snapshot: ProcessSnapshot, declared: Mapping[str, str], policy: Policy
    ) -> tuple[NcclLog | None, list[DriftEntry]]:
        """The state of the process's NCCL log at the last look and its entries (see
        `judged`), by the lines of its own PID alone."""
        path, found = self._found.get(snapshot.pid, (None, None))
        if path is None:
            return None, []
        if isinstance(found, str):
            return NcclLog(file=path, state="unreadable", reason=found), []
        if found is None:
            return NcclLog(file=path, state="none-yet"), []
        said = NcclLog(file=path, state="none-yet", read_bytes=found.offset, size_bytes=found.size)
        log = found.reader.log_of(snapshot.pid)
        if log is None:  # no NCCL line of this process yet
            return said, []
        entries, confirmed, not_read = judged(log, declared, snapshot.env or {}, policy)
        update = {"state": "read", "confirmed": confirmed, "not_read": not_read}
        return said.model_copy(update=update), entries

    def _read(
        self, identity: tuple[int, int], fd: int, pids: frozenset[str], limit: int
    ) -> _Followed:
        """The file of `identity` (its O_PATH descriptor `fd`) read on by at most `limit`
        bytes, keeping the lines of `pids`."""
        try:
            size = os.fstat(fd).st_size
            followed = self._followed.get(identity)
            if followed is None or not pids <= followed.pids or size < followed.offset:
                followed = self._followed[identity] = _Followed(identity, pids)
            reading = os.open(f"/proc/self/fd/{fd}", _READ)  # the file looked at, none other
            try:
                data = os.pread(reading, limit, followed.offset)
            finally:
                os.close(reading)
        except OSError as error:
            raise _Unreadable(error.strerror) from None
        followed.offset += len(data)
        followed.size = max(size, followed.offset)
        followed.feed(data)
        return followed


def _locate(path: str, pid: int, uid: int | None) -> tuple[tuple[int, int], int] | None:
    """The process's own file at `path`, as it sees it (through /proc/PID/root: a sidecar's
    `check` has other files at that path than the server's container), looked at before it is
    opened: an O_PATH descriptor (a device or a FIFO is never opened, a symlink at its name
    never followed) and the file's identity. None where its user has no file there: nothing,
    or a file of another user, of any kind; a report says no more of what others own than
    that nothing of the process's is there. _Unreadable: a file of its own but no regular
    file."""
    if not path.startswith("/"):
        raise _Unreadable("not an absolute path")
    try:
        fd = os.open(f"/proc/{pid}/root{path}", _LOOK)
    except OSError:  # nothing there, or a folder on the way that is none of the process's
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if (uid is None or status.st_uid == uid) and stat.S_ISREG(status.st_mode):
        return (status.st_dev, status.st_ino), fd
    os.close(fd)
    if uid is not None and status.st_uid != uid:
        return None
    if stat.S_ISLNK(status.st_mode):
        raise _Unreadable("a symlink, not followed")
    raise _Unreadable(f"{kind_of(status.st_mode)}; only regular files are read")


class _Unreadable(Exception):
    """Why a process's NCCL log cannot be read: said in the report, never fatal."""
