"""One trial of `tune`: start a candidate profile's server as `run` would (as a child, its output
in a log), wait until it is ready, measure it as `bench` does, stop its tree and wait until the
port and the GPU memory are free again; NCCL's own log (NCCL_DEBUG=INFO) then says which of
the candidate's values it applied. A server that exits, never gets ready or drifts is a
failed trial, not the end of the tune; what keeps the next trial from starting cleanly is, and
so is a trial that failed for the host (a full disk): the same command tries it again."""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Self

import psutil
from pydantic import BaseModel, Field, PlainSerializer, model_validator

from nccl_launch.bench.gpus import compute_pids
from nccl_launch.bench.measure import Progress, measure_decode
from nccl_launch.bench.result import Method
from nccl_launch.env.drift import DriftEntry
from nccl_launch.escaping import escaped
from nccl_launch.findings import Finding, Refused
from nccl_launch.launch.host import port_check
from nccl_launch.launch.prepare import LaunchPlan, prepare_launch, with_nccl_debug
from nccl_launch.live.compare import LiveReport
from nccl_launch.live.processes import HeldProcess, ProcessSnapshot, snapshot_tree, stop_tree
from nccl_launch.live.url import Address, server_url, url_address
from nccl_launch.live.verify_log import verify
from nccl_launch.nccl.catalog import PREFIX
from nccl_launch.profile.markers import NCCL_DEBUG_ENV, NCCL_DEBUG_KEYS
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import Quoted, Secrets
from nccl_launch.serving.table import ServerTable as Server
from nccl_launch.tune.orphans import Owner, StartedServer, adopting, die_with, reap

# "ignored": measured, but NCCL's own log says it did not apply a value of the candidate.
TrialStatus = Literal["measured", "ignored", "refused", "exited", "not-ready", "drift", "failed"]
POLL = 0.05  # seconds between two /health requests, and two looks at the freed port and GPUs
RELEASE_TIMEOUT = 10.0  # seconds for the port and the GPU memory to be free after the stop
TAIL_LINES = 20  # of the server's log, kept with a failed trial
TAIL_BYTES = 16384  # read from the log's end for them: a line longer is cut
FULL = 1 << 20  # bytes free on the log's file system under which a failed trial is the host's


@dataclass(frozen=True)
class TrialSettings:
    """The same for every trial of a tune."""

    method: Method  # bench's: max_tokens, runs, warmup, prompt
    ready_timeout: float  # seconds from start until /health answers 200
    request_timeout: float  # bench's --timeout for each request
    stop_grace: float  # seconds between SIGTERM and SIGKILL of the tree


# A run's tok/s: bounded so that a journal line (edited by hand, forged) cannot hold a rate
# whose mean, spread or gain fails to compute; no server decodes 10^12 tokens a second.
Rate = Annotated[float, Field(gt=0, lt=1e12, allow_inf_nan=False)]


def tail_lines(tail: list[str] | Quoted) -> list[str]:
    """A failed trial's log tail as people see it, on a terminal or in a journal: its last
    lines masked (`Quoted.lines`) and escaped; as it is when read back from a journal."""
    if isinstance(tail, Quoted):
        return [escaped(line) for line in tail.lines()[-TAIL_LINES:]]
    return tail


# The server's log quoted as it wrote it: masked where it is printed or written (`tail_lines`).
Tail = Annotated[list[str] | Quoted, PlainSerializer(tail_lines)]


class TrialOutcome(BaseModel):
    """What one trial found; `tune` writes it into its journal."""

    status: TrialStatus
    runs: list[Rate] = []  # tok/s of each measured run (status "measured" only)
    # With a long prompt (--prompt-tokens), the prefill tok/s of each run: prompt tokens over
    # time to first token; none in a journal of an earlier nccl-launch.
    prefill: list[Rate] = []
    detail: str = ""  # one line, masked and escaped: why it is not "measured"
    exit_code: int | None = None  # the server's, when it exited
    log_tail: Tail = []  # the last lines of its log, when it failed
    seconds: float = Field(ge=0, allow_inf_nan=False)  # wall time of the whole trial
    # NCCL's own log of the server: the candidate's NCCL keys it says every process applied;
    # those no communicator of the server reads (NCCL_PROTO where each has one rank); the
    # others (NCCL does not log them, the log holds no NCCL line, it applied another value).
    confirmed: list[str] = []
    not_read: list[str] = []
    unconfirmed: list[str] = []
    # The time the server was given to get ready, and each request to be answered.
    ready_timeout: float | None = None
    request_timeout: float | None = None

    @model_validator(mode="after")
    def _runs_when_measured(self) -> Self:
        if (self.status == "measured") != bool(self.runs):
            raise ValueError("a measured trial has runs, and only a measured one")
        if self.prefill and len(self.prefill) != len(self.runs):
            raise ValueError("a trial's prefill figures are one per run")
        return self

    def final(self, settings: TrialSettings) -> bool:
        """Whether a tune with `settings` takes this as the candidate's outcome, not to try
        again: a launch refused for the calling environment ran nothing of the candidate, and
        a trial that ran out of time (not ready, a request unanswered) gets more now."""
        if self.status == "refused":
            return False
        if self.status == "not-ready":
            return (self.ready_timeout or 0) >= settings.ready_timeout
        if self.status == "failed":
            return (self.request_timeout or 0) >= settings.request_timeout
        return True


def run_trial(
    ref: str, settings: TrialSettings, log: Path, progress: Progress, owner: Owner
) -> TrialOutcome:
    """Start the candidate profile `ref` (a file) through `run`'s launch path, marked as
    `owner`'s, measure it and stop it. Refused with what keeps `run` from starting it (its
    port taken included), and as this host's problem when its port (or GPU memory) is not free
    after the stop, or it failed on a full disk; KeyboardInterrupt stops the server first,
    then goes on."""
    start = time.monotonic()
    # tune sets NCCL's logging itself (below, or the profile does): the caller's is replaced
    # as run --nccl-debug replaces it, so its lines come where the trial reads them.
    calling = {key: value for key, value in os.environ.items() if key not in NCCL_DEBUG_KEYS}
    launch = prepare_launch(ref, [], [], calling)
    if not NCCL_DEBUG_ENV.keys() & launch.plan.env.keys():  # else the profile's own lines
        launch = dataclasses.replace(launch, merged=with_nccl_debug(launch.merged, launch.plan))
    server = launch.loaded.profile.server
    if server is None:
        said = f"profile {launch.plan.label} has no [server] table for tune to start"
        raise Refused(Finding("no-server-table", "", said))
    refusal = launch.refusal()
    if refusal is not None:
        detail = f"the calling environment drifts from the candidate: {_entries(refusal.drifted)}"
        return TrialOutcome(status="refused", detail=detail, seconds=time.monotonic() - start)
    # What would keep `run` from starting it, and a port another process holds.
    problems = launch.start_findings()
    held = port_check(server, launch.secrets, launch.plan.digest)
    problems += [held] if isinstance(held, Finding) else []
    if problems:
        raise Refused(problems)
    with _log_file(log) as fd, adopting(), _started(launch, fd, owner) as child:
        try:
            outcome = _trial(launch, server, child, settings, progress)
        finally:  # Ctrl-C included: the tree is stopped, then the interrupt goes on
            code = _stop(child, server, settings.stop_grace, launch.secrets)
        more: dict[str, object] = {"seconds": time.monotonic() - start}
        more |= {"ready_timeout": settings.ready_timeout}
        more |= {"request_timeout": settings.request_timeout}
        if outcome.status == "exited":
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            more |= {"exit_code": code, "detail": f"the server {how}"}
        if outcome.status in ("exited", "not-ready", "failed") and _full(fd):
            said = f"the trial's server failed, and the file system of its log {log} is full"
            fix = "the trial is not recorded: free some space, and the same command tries it again"
            raise Refused(Finding("log-disk-full", "", said, fix, cause="host"))
        searched = {f"{PREFIX}{name}" for name, value in owner.values.items() if value}
        more |= _proof(launch, fd, log, searched if outcome.status == "measured" else set())
        if more.get("status", outcome.status) not in ("measured", "drift"):
            more["log_tail"] = _tail(fd, launch.secrets)
    return outcome.model_copy(update=more)


def _full(fd: int) -> bool:
    """Whether the file system of the file open at `fd` has less than FULL bytes free."""
    found = os.fstatvfs(fd)
    return found.f_bavail * found.f_frsize < FULL


def _proof(launch: LaunchPlan, fd: int, log: Path, judged: set[str]) -> dict[str, object]:
    """What NCCL's own lines in the log say of the candidate's NCCL values, read as
    `verify-log` reads them: the keys it confirmed, those its communicators do not read (one
    rank each: a value the server never reads is no value of the candidate to reject), the
    others; and where NCCL contradicted a value of `judged` (the searched values of a measured
    trial) or, logging its values, left one out (it never read it, so it made no difference),
    the status "ignored" saying which: its figures are not the candidate's. A log without NCCL
    lines judges nothing."""
    with os.fdopen(os.dup(fd), encoding="utf-8", errors="replace") as text:
        text.seek(0)
        report = verify(launch.loaded, text, str(log))
    confirmed = [key.key for key in report.keys if key.verdict == "ok"]
    not_read = [key.key for key in report.keys if key.verdict == "not-read"]
    ignored = [
        key
        for key in report.keys
        if key.key in judged and report.processes and key.verdict in ("mismatch", "unconfirmed")
    ]
    found: dict[str, object] = {
        "confirmed": confirmed,
        "not_read": not_read,
        "unconfirmed": [key.key for key in report.keys if key.key not in confirmed + not_read],
    }
    if ignored:
        why = "; ".join(f"{key.key} {key.expected}: {key.detail}" for key in ignored)
        detail = escaped(f"NCCL did not apply the candidate's values: {why}")
        found |= {"status": "ignored", "runs": [], "prefill": [], "detail": detail}
    return found


def _entries(entries: list[DriftEntry]) -> str:
    """Drifted keys on one line: `NCCL_PROTO LL -> Simple`, values as people see them (a
    `Secret` masks itself), `unset` for none."""
    said = [f"{e.key} {_value(e.expected)} -> {_value(e.actual)}" for e in entries]
    return escaped("; ".join(said))


def _value(value: str | Secret | None) -> str:
    return "unset" if value is None else str(value)


def _live_drift(when: str, report: LiveReport) -> str:
    """Why the check `when` (before, after) failed, on one line."""
    if report.digest_differs:
        return escaped(f"checked {when}: the server runs digest {report.running_digest}")
    reasons = [
        f"pid {process.pid} {process.title}: "
        + (_entries(process.drifted) if process.readable else f"unreadable ({process.reason})")
        for process in report.processes
        if process.drifted or not process.readable
    ]
    return escaped(f"checked {when}: {'; '.join(reasons)}")


@contextlib.contextmanager
def _log_file(path: Path) -> Iterator[int]:
    """The trial's log, created 0600 (the server may print its secrets) or emptied: never
    through a symlink, only a regular file of this user's with no other name (a FIFO would
    block the server, a hard link would empty another file)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as error:
        raise _log_refused(f"cannot write the trial's log {path}: {error.strerror}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:
            raise _log_refused(f"the trial's log {path} is not a regular file with one name")
        if status.st_uid != os.geteuid():
            said = f"the trial's log {path} belongs to uid {status.st_uid}, not this user"
            raise _log_refused(said)
        os.ftruncate(fd, 0)
        os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


def _log_refused(message: str) -> Refused:
    return Refused(Finding("trial-log", "", message, cause="host"))


@dataclass
class _Child:
    """The server started for the trial, held by a pidfd, and its tree as last seen: once
    the main process has exited, its workers are known only from there."""

    process: subprocess.Popen[bytes]
    held: HeldProcess
    tree: list[ProcessSnapshot]

    def look(self) -> None:
        """Read the tree again while the main process runs."""
        with contextlib.suppress(Refused):  # it has exited: the last look stays
            self.tree = snapshot_tree(self.held)


@contextlib.contextmanager
def _started(launch: LaunchPlan, log: int, owner: Owner) -> Iterator[_Child]:
    """The server as `run` would exec it (argv, env, cwd) with `owner`'s marks, in a session
    of its own so that the terminal's Ctrl-C reaches only tune, dying with tune, held by a
    pidfd, told to `owner` before it is measured; reaped when the block ends."""
    argv, env = launch.command(), launch.merged.env | owner.marks()
    try:
        process = subprocess.Popen(
            argv, env=env, cwd=launch.cwd, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with(os.getpid()),
        )  # fmt: skip
    except OSError as error:
        where = f" in {launch.cwd}" if launch.cwd else ""
        said = f"cannot execute {argv[0]}{where}: {error.strerror}"
        raise Refused(Finding("trial-exec", "", said, cause="host")) from None
    pidfd = -1
    try:
        # Not yet reaped, so its PID names it alone, exited or not.
        pidfd = os.pidfd_open(process.pid)
        held = HeldProcess(process.pid, psutil.Process(process.pid).create_time(), pidfd)
        child = _Child(process, held, [])
        child.look()
        owner.started(StartedServer(pid=held.pid, create_time=held.create_time))
        yield child
    finally:
        if process.returncode is None:  # never stopped: its group, while it is not reaped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if pidfd >= 0:
            os.close(pidfd)


def _healthy(address: Address, timeout: float) -> bool:
    """Whether GET /health answers 200 now (stdlib: no proxy of the environment is asked)."""
    connection = http.client.HTTPConnection(address.host, address.port, timeout=timeout)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == http.client.OK
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _trial(
    launch: LaunchPlan, server: Server, child: _Child, settings: TrialSettings, progress: Progress
) -> TrialOutcome:
    """Wait for /health, then measure; the outcome's seconds are set by the caller."""
    url = server_url(server)
    address = url_address(url)
    deadline = time.monotonic() + settings.ready_timeout
    # One answer may take a while (SGLang's can generate a token): bounded by the deadline.
    while not _healthy(address, max(POLL, deadline - time.monotonic())):
        if not child.held.running():
            return TrialOutcome(status="exited", seconds=0)
        if time.monotonic() >= deadline:
            detail = f"no answer 200 from /health within {settings.ready_timeout:g} s"
            return TrialOutcome(status="not-ready", detail=detail, seconds=0)
        child.look()
        time.sleep(POLL)
    try:
        report = measure_decode(
            launch.loaded, url, child.held.pid, settings.method, settings.request_timeout, progress
        )
    except Refused as error:
        if not child.held.running():
            return TrialOutcome(status="exited", seconds=0)
        said = "; ".join(finding.text() for finding in error.findings)
        return TrialOutcome(status="failed", detail=escaped(said), seconds=0)
    if report.status == "interrupted":
        raise KeyboardInterrupt
    if report.drift is not None:
        when = "before" if report.status == "refused" else "after"
        return TrialOutcome(status="drift", detail=_live_drift(when, report.drift), seconds=0)
    # With a long prompt, each run's prefill, where the server counted every prompt.
    prefill = [run.prefill_tok_s for run in report.runs if run.prefill_tok_s is not None]
    if settings.method.prompt_tokens is None or len(prefill) < len(report.runs):
        prefill = []
    runs = [run.tok_s for run in report.runs]
    return TrialOutcome(status="measured", runs=runs, prefill=prefill, seconds=0)


def _stop(child: _Child, server: Server, grace: float, secrets: Secrets) -> int:
    """Stop the whole tree, reap the server, wait until its port and GPU memory are free;
    the server's exit code (negative: the signal that ended it). A port still held is said
    with the `secrets` of the launch masked."""
    child.look()
    stop_tree(child.held, child.tree, grace)
    code = child.process.wait()
    tree = {child.held.pid} | {snapshot.pid for snapshot in child.tree}
    reap(tree)
    _wait_released(server, tree, secrets)
    return code


def _wait_released(server: Server, pids: set[int], secrets: Secrets) -> None:
    """Until nothing listens on the server's port and, where nvidia-smi exists, none of
    `pids` holds GPU memory: the next trial must start on a clean host."""
    deadline = time.monotonic() + RELEASE_TIMEOUT
    while True:
        port = port_check(server, secrets)
        holding = compute_pids()
        ours = sorted(pids & holding) if holding is not None else []
        if isinstance(port, str) and not ours:
            return
        if time.monotonic() >= deadline:
            why = port.text() if isinstance(port, Finding) else f"pids {ours} still hold GPU memory"
            said = f"after the trial's server stopped: {why}"
            fix = "the next trial cannot start"
            raise Refused(Finding("not-released", "", said, fix, cause="host"))
        time.sleep(POLL)


def _tail(fd: int, secrets: Secrets) -> Quoted:
    """The end of the log, quoted: masked with the launch's `secrets` where it is printed and
    kept in the journal (`tail_lines`)."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))
    return secrets.quoting("", data.decode(errors="replace"))
