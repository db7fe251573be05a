"""No trial server outlives `tune`: it is started to die with tune (the kernel's parent-death
signal), tune adopts its orphaned workers while a trial runs (a child subreaper), and its
environment carries marks naming the tune's journal and candidate, so that the next tune of
that journal finds a server a killed tune left, by its identity, and stops it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import BaseModel, Field

from nccl_launch.findings import Finding, Refused
from nccl_launch.live.environ import getenv_view
from nccl_launch.live.processes import snapshot_tree, stop_tree
from nccl_launch.live.resolve import hold_pid
from nccl_launch.live.target import PID_LIMIT
from nccl_launch.profile.markers import MARKER_TUNE, MARKER_TUNE_DIGEST, MARKER_TUNE_JOURNAL
from nccl_launch.profile.plan import short_digest

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls it


class StartedServer(BaseModel):
    """A trial server's main process as the journal records it before it is measured."""

    pid: int = Field(ge=1, le=PID_LIMIT)  # a hand-edited line is no trial, not a crash
    create_time: float = Field(ge=0, allow_inf_nan=False)


@dataclass(frozen=True)
class Owner:
    """Whose trial a server is: the tune of `journal` trying candidate `digest`, whose
    searched `values` (NAME without the prefix: value, None for unset) the trial is about;
    `started` is told the server's identity once it runs, before it is measured."""

    journal: Path
    digest: str
    values: dict[str, str | None]
    started: Callable[[StartedServer], None]

    def marks(self) -> dict[str, str]:
        """The variables that name the server as this tune's (`tune`'s PID and start time)."""
        tune = f"{os.getpid()} {psutil.Process().create_time()}"
        return {
            MARKER_TUNE_JOURNAL: str(self.journal),
            MARKER_TUNE_DIGEST: self.digest,
            MARKER_TUNE: tune,
        }


@contextlib.contextmanager
def adopting() -> Iterator[None]:
    """This process the subreaper of what it starts until the block ends: a worker whose
    server exited meanwhile becomes tune's child, not init's, and is stopped with the trial."""
    before = ctypes.c_int(0)
    _LIBC.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
    if _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        said = f"cannot become the subreaper of trial servers: {os.strerror(error)}"
        raise Refused(Finding("no-subreaper", "", said, cause="host"))
    try:
        yield
    finally:
        _LIBC.prctl(PR_SET_CHILD_SUBREAPER, before.value, 0, 0, 0)


def die_with(parent: int) -> Callable[[], None]:
    """What the child runs between fork and exec: SIGKILL when `parent` dies (the signal
    survives the exec), and its end now if `parent` died already (it would never come)."""

    def arm() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def reap(pids: set[int]) -> None:
    """Reap those of `pids` that became tune's children (as their subreaper) and ended."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):  # not tune's child: its parent reaps it
            os.waitpid(pid, os.WNOHANG)


def stop_leftover(
    server: StartedServer, journal: Path, digest: str, grace: float
) -> Finding | None:
    """Stop the trial server an earlier tune of `journal` started for candidate `digest` and
    left running (it was killed): the process of that PID and start time whose environment
    carries both marks, never a PID alone. A warning of what was stopped, or None when none
    runs."""
    with contextlib.ExitStack() as stack:
        try:  # ended (meanwhile), another user's, or the PID names a process started since
            held = stack.enter_context(hold_pid(server.pid, server.create_time))
            env = getenv_view(server.pid) or {}
            tree = snapshot_tree(held)
        except (Refused, psutil.Error):
            return None
        if env.get(MARKER_TUNE_JOURNAL) != str(journal) or env.get(MARKER_TUNE_DIGEST) != digest:
            return None
        tune = env.get(MARKER_TUNE, "").partition(" ")[0] or "?"
        stopped = stop_tree(held, tree, grace)
    message = "stopped a trial server a killed tune of this journal left running: pid "
    message += f"{server.pid}, candidate {short_digest(digest)}, started by tune pid {tune} "
    message += f"({stopped} processes)"
    return Finding("stopped-leftover", "", message, severity="warning", cause="host")
