"""NCCL's own word, per process: `run --nccl-debug` has each process of the tree write its
NCCL log to a file of its own (NCCL_DEBUG_FILE, with NCCL's %h and %p) in a folder of the run
under the state home; `check` follows each file as it grows and judges what NCCL says it
applied, which a process may have changed inside itself where /proc cannot see it."""

from __future__ import annotations

import contextlib
import errno
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
from nccl_launch.errors import HostError
from nccl_launch.files.base_dirs import open_beneath
from nccl_launch.files.paths import FileError, kind_of
from nccl_launch.files.reading import LINE_LIMIT
from nccl_launch.jsonlines import STATE, state_home
from nccl_launch.nccl import catalog, rules
from nccl_launch.nccl.log import LogReader, ProcessLog, judge
from nccl_launch.profile.markers import MARKER_NCCL_DEBUG, NCCL_DEBUG_FILE
from nccl_launch.profile.model import Policy

if TYPE_CHECKING:  # read from /proc by live/processes.py, which imports psutil
    from nccl_launch.live.processes import ProcessSnapshot

FOLDER = STATE / "nccl-debug"
LOG_NAME = "%h.%p.log"  # expanded by NCCL in each process: its host and its PID
READ_LIMIT = 4 << 20  # of one file at one look: NCCL's INIT,ENV lines are some 10 KiB a rank
SOURCE = "NCCL's log"
_FIX = "set XDG_STATE_HOME to a folder of your own"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

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
    name, later, so no symlink on the way may point it elsewhere meanwhile. HostError when
    it exists already (never shared by two runs) or cannot be written (a full disk), leaving
    no folder of its own behind."""
    state = state_home()
    where = state.path / folder
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = open_beneath(state, folder / "pid", flags, _FIX)
    except FileError as error:
        raise FileError(f"NCCL's log folder {where}: {error}") from None
    except OSError as error:
        with contextlib.suppress(OSError):  # made on the way, empty; another run's is not
            where.rmdir()
        raise HostError(f"cannot create NCCL's log folder {where}: {error.strerror}") from None
    try:
        # The folder as the kernel found it, whatever symlinks led there.
        resolved = Path(f"/proc/self/fd/{fd}").readlink().parent
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(f"{pid}\n")
    except OSError as error:
        remove_run_folder(folder)
        raise HostError(f"cannot write in NCCL's log folder {where}: {error.strerror}") from None
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
) -> tuple[dict[str, str], str | None]:
    """The server's `env` once the run's folder is made, NCCL_DEBUG_FILE naming it by its
    resolved path; else `env` without NCCL_DEBUG_FILE (NCCL then prints to the server's
    output, as it does when it cannot open the file) and why: a start never fails for want
    of a log folder, and NCCL never writes where the folder was refused. Where the start then
    fails, `remove_run_folder` takes it away."""
    try:
        resolved = _make_run_folder(folder, pid)
    except (FileError, HostError) as error:
        kept = {key: value for key, value in env.items() if key != NCCL_DEBUG_FILE}
        return kept, f"{error}; NCCL's log goes to the server's output, where check cannot read it"
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
    """One file followed: which one (device, inode), how far it was read, the line begun and
    not yet ended, and NCCL's lines read so far."""

    identity: tuple[int, int]
    offset: int = 0
    begun: bytes = b""
    skipping: bool = False  # inside a line longer than LINE_LIMIT, dropped as it comes
    reader: LogReader = field(default_factory=LogReader)

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
    for key, values in log.applied.items():
        if key not in declared:
            said[key], lines[key] = values[-1], f"{key} set by environment to {values[-1]}"
    profile = {key: declared[key] for key in said if key in declared}
    entries, _ = diff_env(profile, said, {}, policy, "live", nccl_debug=True)
    unseen = [
        entry.model_copy(update={"source": SOURCE, "note": lines[entry.key]})
        for entry in entries
        if entry.key not in proc
        or not rules.same_meaning(entry.key, proc[entry.key], said[entry.key])
    ]
    return unseen, confirmed, not_read


class NcclLogs:
    """The NCCL log files of a tree, followed from look to look: each file is read on from
    where the last look stopped, from the start again once replaced or shrunk."""

    def __init__(self) -> None:
        self._followed: dict[str, _Followed] = {}
        self.host = nccl_host()

    def forget_others(self, snapshots: Sequence[ProcessSnapshot]) -> None:
        """Drop the files of processes no longer in the tree."""
        kept = {self.file_of(snapshot) for snapshot in snapshots}
        self._followed = {path: each for path, each in self._followed.items() if path in kept}

    def file_of(self, snapshot: ProcessSnapshot) -> str | None:
        """The file NCCL writes in a process started by `run --nccl-debug`, else None."""
        env = snapshot.env or {}
        if env.get(MARKER_NCCL_DEBUG) != "1" or NCCL_DEBUG_FILE not in env:
            return None
        return expanded(env[NCCL_DEBUG_FILE], snapshot.pid, self.host)

    def judge(
        self, snapshot: ProcessSnapshot, declared: Mapping[str, str], policy: Policy
    ) -> tuple[NcclLog | None, list[DriftEntry]]:
        """The state of the process's NCCL log and its entries (see `judged`)."""
        path = self.file_of(snapshot)
        if path is None:
            return None, []
        try:
            followed = self._read(path, snapshot.pid, snapshot.uid)
        except _Unreadable as problem:
            self._followed.pop(path, None)
            return NcclLog(file=path, state="unreadable", reason=str(problem)), []
        logs = list(followed.reader.processes.values()) if followed is not None else []
        if not logs:  # no NCCL line yet
            return NcclLog(file=path, state="none-yet"), []
        entries, confirmed, not_read = judged(logs[0], declared, snapshot.env or {}, policy)
        log = NcclLog(file=path, state="read", confirmed=confirmed, not_read=not_read)
        return log, entries

    def _read(self, path: str, pid: int, uid: int | None) -> _Followed | None:
        """The file at `path` read on; None while it does not exist. Only a regular file of
        the process's own user is read (never through a symlink at its name), and as the
        process sees it, through /proc/PID/root: a sidecar's `check` has other files at that
        path than the server's container."""
        if not path.startswith("/"):
            raise _Unreadable("not an absolute path")
        try:
            fd = os.open(f"/proc/{pid}/root{path}", _READ)
        except FileNotFoundError:
            return None
        except OSError as error:
            why = "a symlink, not followed" if error.errno == errno.ELOOP else error.strerror
            raise _Unreadable(why) from None
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise _Unreadable(f"{kind_of(status.st_mode)}; only regular files are read")
            if uid is not None and status.st_uid != uid:
                raise _Unreadable(f"owned by uid {status.st_uid}, not by the process's {uid}")
            followed = self._followed.get(path)
            identity = (status.st_dev, status.st_ino)
            same = followed is not None and followed.identity == identity
            if followed is None or not same or status.st_size < followed.offset:
                followed = self._followed[path] = _Followed(identity)
            data = os.pread(fd, READ_LIMIT, followed.offset)
        except OSError as error:
            raise _Unreadable(error.strerror) from None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        followed.offset += len(data)
        followed.feed(data)
        return followed


class _Unreadable(Exception):
    """Why a process's NCCL log cannot be read: said in the report, never fatal."""
