"""`check` and `check --watch`: find the server, read its tree, compare, maybe stop it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Literal

from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK, HostError, UsageError
from nccl_launch.live.compare import LiveReport, ProcessSnapshot, evaluate
from nccl_launch.live.processes import Target, main_pid, snapshot_tree, stop_tree
from nccl_launch.profile.load import LoadedProfile, load_profile
from nccl_launch.profile.markers import MARKER_PROFILE
from nccl_launch.profile.plan import build_plan

OnDrift = Literal["warn", "stop"]


def profile_of(main: ProcessSnapshot, ref: str | None) -> LoadedProfile:
    """The named profile, or the one the process says it was started with (current file)."""
    if ref is not None:
        return load_profile(ref)
    if main.env is None:
        raise HostError(
            f"cannot read the environment of pid {main.pid} ({main.unreadable}) to learn its "
            "profile; name the PROFILE"
        )
    label = main.env.get(MARKER_PROFILE)
    if label is None:
        raise UsageError(
            f"pid {main.pid} was not started by nccl-launch (no {MARKER_PROFILE}); "
            "name the PROFILE to check it against"
        )
    return load_profile(label.rpartition("@")[0])


def compare_tree(snapshots: list[ProcessSnapshot], ref: str | None) -> LiveReport:
    """A tree's snapshots compared with its profile (read again each time: it may change)."""
    loaded = profile_of(snapshots[0], ref)
    plan = build_plan(loaded.profile)
    return evaluate(plan, loaded.profile.policy, str(loaded.path), snapshots)


def check(target: Target, ref: str | None) -> LiveReport:
    """One look at the server's whole process tree."""
    return compare_tree(snapshot_tree(main_pid(target)), ref)


def watch(
    target: Target,
    ref: str | None,
    interval: float,
    on_drift: OnDrift,
    grace: float,
    emit: Callable[[LiveReport], None],
    say: Callable[[str], None],
) -> int:
    """Check every `interval` seconds, new processes included, until a signal or a stop.

    SIGINT and SIGTERM end the watch and never touch the server. On drift with
    `on_drift="stop"` the server's tree is stopped and the exit code is 1.
    """
    done = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: done.set())
    pid = main_pid(target)
    while not done.is_set():
        try:
            snapshots = snapshot_tree(pid)
        except HostError as error:
            say(f"server gone: {error}")
            return EXIT_HOST
        report = compare_tree(snapshots, ref)
        emit(report)
        if report.drifts and on_drift == "stop":
            ended = stop_tree(snapshots, grace)
            say(f"stopped the server: {ended} processes of pid {pid}'s tree ended")
            return EXIT_DRIFT
        done.wait(interval)
    return EXIT_OK
