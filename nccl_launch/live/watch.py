"""`check` and `check --watch`: find the server, read its tree, compare, maybe stop it."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from nccl_launch.digits import is_ascii_digits
from nccl_launch.env.env_files import profile_layers
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK
from nccl_launch.files.paths import is_regular
from nccl_launch.findings import Finding, Refused, lines
from nccl_launch.live.compare import LiveReport, evaluate
from nccl_launch.live.nccl_logs import SOURCE, NcclLogs
from nccl_launch.live.processes import ProcessSnapshot, snapshot_tree, stop_tree
from nccl_launch.live.resolve import hold
from nccl_launch.live.signals import catching
from nccl_launch.live.target import Target
from nccl_launch.profile.load import LoadedProfile, check_pin, load_profile
from nccl_launch.profile.markers import MARKER_DIGEST, MARKER_PROFILE, MARKER_PROFILE_FILE
from nccl_launch.profile.plan import short_digest
from nccl_launch.profile.search import is_reference, split_reference

_DIGITS = 18  # of a version a marker may hold: more is no profile's (int() refuses 4,301)

OnDrift = Literal["warn", "stop"]
NAME_IT = "name the PROFILE to check it against"  # where the process cannot say its profile


def _started_name(pid: int, env: Mapping[str, str]) -> str:
    label = env.get(MARKER_PROFILE)
    if label is None:
        unmarked = f"pid {pid} was not started by nccl-launch (no {MARKER_PROFILE})"
        raise Refused(Finding("unmarked", "", unmarked, NAME_IT))
    name = _label_name(label)
    if name is None:
        marker = f"{MARKER_PROFILE} is {label!r}, not NAME@VERSION of a profile"
        raise Refused(Finding("bad-marker", f"pid {pid}", marker, NAME_IT))
    return name


def _label_name(label: str) -> str | None:
    """The profile's name in a NAME@VERSION marker; None when it is no such label, or one
    naming a path (`.toml` is one to find_profile): another user's process may say anything
    here."""
    name, version = split_reference(label)
    if name.endswith(".toml") or not is_ascii_digits(version) or len(version) > _DIGITS:
        return None
    return name if is_reference(name, int(version)) else None


def _stoppable(main: ProcessSnapshot, loaded: LoadedProfile) -> None:
    """Refuses a tree that nccl-launch did not start as `loaded`'s profile, its name and
    digest: a stale pidfile or a reused PID may name any process, and another user's profile
    of the same name is another profile; `--on-drift stop` must never signal them."""
    name = loaded.profile.name
    if main.env is None:
        said = f"its environment cannot be read ({main.unreadable})"
    elif MARKER_PROFILE not in main.env or MARKER_DIGEST not in main.env:
        said = f"it has no {MARKER_PROFILE} and {MARKER_DIGEST}"
    elif _label_name(main.env[MARKER_PROFILE]) != name:
        said = f"its {MARKER_PROFILE} is {main.env[MARKER_PROFILE]!r}"
    elif main.env[MARKER_DIGEST] != loaded.plan.digest:
        running = f"{main.env[MARKER_PROFILE]} ({short_digest(main.env[MARKER_DIGEST])})"
        said = f"it runs {running!r}, the profile is {loaded.plan.short_digest}"
    else:
        return
    stranger = f"pid {main.pid} was not started by nccl-launch as {loaded.profile.label}: {said}"
    fix = "--on-drift stop signals only such a server (a stale pidfile names another process)"
    raise Refused(Finding("not-stoppable", "", stranger, fix, cause="host"))


def _started_file(pid: int, env: Mapping[str, str]) -> str | None:
    """The file the server was started from, if it says so and the file is still there."""
    file = env.get(MARKER_PROFILE_FILE)
    if file is None:
        return None  # started by an nccl-launch that did not record it
    if not Path(file).is_absolute() or not file.endswith(".toml"):
        marker = f"{MARKER_PROFILE_FILE} is {file!r}, not the absolute path of a .toml file"
        raise Refused(Finding("bad-marker", f"pid {pid}", marker, NAME_IT))
    return file if user_may_read(pid, file) and is_regular(Path(file)) else None


def user_may_read(pid: int, file: str) -> bool:
    """Whether the user process `pid` runs as may read `file`. Its environment is its user's
    to write: as root, the file it records is read only where that user could read it (the
    kernel judges, in a child that takes on the process's ids: every folder on the way, its
    groups, ACLs), else another user's process would have root read, and quote, a root-only
    TOML file. A file that user may not read is as absent as one not there."""
    if os.geteuid() != 0:
        return True  # this user's own reads: what it may read, it could read itself
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return False
    fields = dict(line.partition(":")[::2] for line in status.splitlines())
    uid, gid = (int(fields[key].split()[1]) for key in ("Uid", "Gid"))  # effective ids
    if uid == 0:
        return True
    groups = [int(group) for group in fields.get("Groups", "").split()]
    child = os.fork()  # no program to exec: one this user may run may not exist
    if child == 0:
        try:
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os._exit(0 if os.access(file, os.R_OK) else 1)
        finally:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0


def profile_of(main: ProcessSnapshot, ref: str | None) -> LoadedProfile:
    """The named profile, or the one the process says it was started with: the file it
    records, else its name on the search path (the current file: the digest tells a change)."""
    if ref is not None:
        return load_profile(ref)
    if main.env is None:
        unread = f"cannot read the environment of pid {main.pid} ({main.unreadable}) to learn "
        unread += "its profile"
        raise Refused(Finding("environment-unread", "", unread, "name the PROFILE", cause="host"))
    return started_profile(main.pid, main.env)


def started_profile(pid: int, env: Mapping[str, str]) -> LoadedProfile:
    """The profile process `pid`, of environment `env`, says it was started with: the file it
    records, else its name on the search path (the current file: the digest tells a change);
    with only the env files and secret files the process's user may read."""
    name = _started_name(pid, env)
    file = _started_file(pid, env)
    loaded = load_profile(name if file is None else file)  # regular, capped, trusted
    if loaded.profile.name != name:
        renamed = f"pid {pid} runs {name}, but its {MARKER_PROFILE_FILE} {file} now declares "
        renamed += loaded.profile.name
        raise Refused(Finding("profile-renamed", "", renamed, NAME_IT))
    # Only the files its user may read: what root compares with the process's own values
    # would tell that user, by a drift or a match, a value of a file it may not read.
    env_files = tuple(path for path in loaded.env_files if user_may_read(pid, str(path)))
    secret_files = {
        key: path for key, path in loaded.secret_files.items() if user_may_read(pid, str(path))
    }
    return dataclasses.replace(loaded, env_files=env_files, secret_files=secret_files)


def compare_tree(
    snapshots: list[ProcessSnapshot],
    loaded: LoadedProfile,
    profile_error: Sequence[Finding] = (),
    logs: NcclLogs | None = None,
) -> LiveReport:
    """A tree's snapshots compared with a profile, the env files and secret files it names,
    and the NCCL logs `logs` follows; `profile_error` says why it is an older one. An env
    file this checker may not read (a monitoring user, a 0600 file) leaves its keys
    unchecked, said in the report, without failing it."""
    unchecked: list[Finding] = []
    env_files = profile_layers(loaded, unchecked)
    return evaluate(
        loaded.plan,
        loaded.profile.policy,
        str(loaded.path),
        snapshots,
        profile_error=profile_error,
        env_files=env_files,
        unchecked_env_files=unchecked,
        logs=logs,
    )


def check(target: Target, ref: str | None, pin: str | None = None) -> LiveReport:
    """One look at the server's whole process tree (a profile not of digest `pin` refused)."""
    with hold(target) as server:
        snapshots = snapshot_tree(server)
    return compare_tree(snapshots, check_pin(profile_of(snapshots[0], ref), pin))


def _reread(
    main: ProcessSnapshot, ref: str | None, good: LoadedProfile | None, pin: str | None
) -> tuple[LoadedProfile, list[Finding]]:
    """The profile as it is now (it may change), or the last good one and why it is kept: a
    file saved half-edited, or edited away from the pin, must not end the watch. Invalid at the
    first look, it is an error."""
    try:
        return check_pin(profile_of(main, ref), pin), []
    except Refused as error:
        if good is None:
            raise
        return good, error.findings


def _reason(report: LiveReport) -> str:
    """What drifted, in a few words: each process and its keys, NCCL's word said as such."""
    found = [
        f"pid {process.pid} {entry.key}" + (f" by {SOURCE}" if entry.source == SOURCE else "")
        for process in report.processes
        for entry in process.drifted
    ]
    return ", ".join(found)  # a stopped server runs the profile's digest: its keys drifted


def watch(
    target: Target,
    ref: str | None,
    interval: float,
    on_drift: OnDrift,
    grace: float,
    emit: Callable[[LiveReport], None],
    say: Callable[[str], None],
    warn: Callable[[Finding], None],
    pin: str | None = None,
) -> int:
    """Check every `interval` seconds, new processes included, until a signal or a stop.

    SIGINT and SIGTERM end the watch and never touch the server. On drift with
    `on_drift="stop"` the server's tree is stopped and the exit code is 1; a tree that
    nccl-launch did not start as the profile (its name and digest) is refused at each look,
    before any signal.
    While the profile is invalid, each round compares with its last good version and `warn`
    says why, once.
    """
    done = threading.Event()
    good: LoadedProfile | None = None
    problem: list[Finding] = []
    logs = NcclLogs()  # each NCCL log read on from where the last look stopped
    stopping = (signal.SIGINT, signal.SIGTERM)
    with catching(stopping, lambda *_: done.set()), hold(target) as server:
        while not done.is_set():
            try:
                snapshots = snapshot_tree(server)
            except Refused as error:
                say(f"server gone: {'; '.join(each.text() for each in error.findings)}")
                return EXIT_HOST
            good, now = _reread(snapshots[0], ref, good, pin)
            if now and now != problem:
                why = "; ".join(lines(now))
                kept = f"profile invalid, still checking against {good.profile.label}: {why}"
                warn(Finding("profile-invalid-kept", "", kept, severity="warning"))
            problem = now
            if on_drift == "stop":
                _stoppable(snapshots[0], good)
            report = compare_tree(snapshots, good, problem, logs)
            emit(report)
            if report.drifts and on_drift == "stop":
                ended = stop_tree(server, snapshots, grace)
                tree = f"{ended} processes of pid {server.pid}'s tree ended"
                say(f"stopped the server: {tree}; drift: {_reason(report)}")
                return EXIT_DRIFT
            done.wait(interval)
    return EXIT_OK
