"""The server's process held by a pidfd (live/resolve.py finds it): its tree read from /proc,
stopped when asked."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from nccl_launch.findings import Finding, Refused
from nccl_launch.live.environ import OVERWRITTEN, getenv_view
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import secret_words

PROC = Path("/proc")
PF_KTHREAD = 0x00200000  # the kernel's flag of its own threads (include/linux/sched.h)


@dataclass(frozen=True)
class ProcessSnapshot:
    """One process as read from /proc: its environment, or why it could not be read; its
    command line, each word masking's rules hide a `Secret` (`command_words`), shown as its title
    once the profile's secrets are known (`compare.title`)."""

    pid: int
    create_time: float
    argv: tuple[str | Secret, ...]
    env: dict[str, str] | None
    unreadable: str | None = None
    uid: int | None = None  # its effective uid: whose files it writes


@dataclass(frozen=True)
class HeldProcess:
    """The server's main process, held while it is checked: a pidfd names this one process,
    never another that later takes its PID; `create_time` is what psutil read of it."""

    pid: int
    create_time: float
    pidfd: int

    def running(self) -> bool:
        """Whether the process still runs: its pidfd turns readable once it has exited."""
        poll = select.poll()
        poll.register(self.pidfd, select.POLLIN)
        return not poll.poll(0)

    def send(self, number: signal.Signals) -> None:
        """Send `number` through the pidfd: to this process or, once it has exited, to none."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, number)

    def process(self) -> psutil.Process | None:
        """psutil's view of the held process, or None once it has exited."""
        try:
            process = psutil.Process(self.pid)
            same = process.create_time() == self.create_time
        except psutil.NoSuchProcess:
            return None
        # Still running after the look: the PID was never free, so it was read of this one.
        return process if same and self.running() else None

    def gone(self) -> Finding:
        """Why the held process can no longer be checked: it exited, its PID maybe reused."""
        try:  # not by create time: two processes started in one clock tick share it
            reused = psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            reused = False
        also = ", and its PID now names another process" if reused else ""
        return Finding("process-ended", "", f"pid {self.pid} ended{also}", cause="host")

    def denied(self) -> Finding:
        """Why the held process cannot be read: another user's."""
        message, fix = f"permission denied reading process {self.pid}", "run as its user or root"
        return Finding("process-denied", "", message, fix, cause="host")


def readable(text: str) -> str:
    """psutil decodes /proc with surrogateescape; a byte that is not UTF-8 is shown as `\\xff`
    instead, so that every format (JSON included) can print it, and NCCL's reading of the
    value (its leading digits, say) is still what is compared."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def command_words(process: psutil.Process) -> tuple[str | Secret, ...]:
    """The command line's words, each that masking's rules hide wrapped (`secret_words`)
    before any quoting (once quoted, `'sk x y'` is three words to a rule that splits at
    spaces); its name alone where the command line cannot be read."""
    try:
        return tuple(secret_words([readable(part) for part in process.cmdline() if part]))
    except psutil.AccessDenied:
        return (readable(process.name()),)


def kernel_thread(pid: int, proc: Path = PROC) -> str | None:
    """The name of `pid` if it is a kernel thread (kthreadd, a kworker), else None: it runs
    no program and has no environment (its /proc/PID/environ answers as an ended process's)."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except OSError:  # ended: no thread of any kind now
        return None
    # The name may hold any byte, ')' included; after it: state, ppid, pgrp, session, tty,
    # tpgid, then the flags.
    name, _, rest = stat.partition(b" (")[2].rpartition(b")")
    return readable(os.fsdecode(name)) if int(rest.split()[6]) & PF_KTHREAD else None


def _snapshot(process: psutil.Process) -> ProcessSnapshot:
    """Raises psutil.NoSuchProcess when it vanished; the caller decides what that means."""
    with process.oneshot():
        create_time, uid = process.create_time(), process.uids().effective
        argv = command_words(process)
    try:
        env = getenv_view(process.pid)
    except psutil.AccessDenied:
        return ProcessSnapshot(process.pid, create_time, argv, None, "permission denied", uid)
    if env is None:
        return ProcessSnapshot(process.pid, create_time, argv, None, OVERWRITTEN, uid)
    readable_env = {readable(key): readable(value) for key, value in env.items()}
    return ProcessSnapshot(process.pid, create_time, argv, readable_env, uid=uid)


def descendants(main: psutil.Process, proc: Path = PROC) -> list[psutil.Process]:
    """Every live descendant of `main`, breadth-first.

    Read from /proc/PID/task/TID/children: each thread's file lists the children that
    thread created, so only the tree is read, where psutil's recursive children() reads
    every process of the host. Kernels without CONFIG_PROC_CHILDREN lack the file: psutil.
    """
    if not (proc / str(main.pid) / "task" / str(main.pid) / "children").exists():
        return main.children(recursive=True)
    found: list[psutil.Process] = []
    seen = {main.pid}
    parents = [main]
    while parents:
        parent = parents.pop(0)
        pids = _child_pids(proc / str(parent.pid) / "task")
        if not parent.is_running():  # its PID was taken by another: those are not ours
            continue
        for pid in pids:
            if pid not in seen and (child := _child(pid, parent, main)) is not None:
                seen.add(pid)
                found.append(child)
                parents.append(child)
    return found


def _child(pid: int, parent: psutil.Process, main: psutil.Process) -> psutil.Process | None:
    """The process `pid` if it is still the child listed, not a newcomer reusing the PID."""
    try:
        child = psutil.Process(pid)
        # psutil's own check: a process older than the main one is none of its descendants.
        if child.ppid() != parent.pid or child.create_time() < main.create_time():
            return None
    except psutil.NoSuchProcess:  # ended meanwhile (ZombieProcess is one too)
        return None
    return child


def _child_pids(tasks: Path) -> list[int]:
    """The children every thread under /proc/PID/task created; none when the process ended."""
    pids: list[int] = []
    try:
        threads = list(tasks.iterdir())
    except OSError:  # the process ended meanwhile
        return pids
    for thread in threads:
        try:
            text = (thread / "children").read_text(encoding="ascii")
        except OSError:  # the thread ended meanwhile
            continue
        pids.extend(int(pid) for pid in text.split())
    return pids


def snapshot_tree(server: HeldProcess) -> list[ProcessSnapshot]:
    """The main process and every descendant; processes that end meanwhile are skipped.

    Refused when the held process has exited: what its PID names now is not read.
    """
    try:
        main = psutil.Process(server.pid)
        snapshots = [_snapshot(main)]
        children = descendants(main)
    except psutil.NoSuchProcess:
        raise Refused(server.gone()) from None
    except psutil.AccessDenied:
        raise Refused(server.denied()) from None
    # Still running after the reads: the PID was never free, so they were of this process.
    if snapshots[0].create_time != server.create_time or not server.running():
        raise Refused(server.gone())
    for child in children:
        try:
            snapshots.append(_snapshot(child))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return snapshots


def _same(snapshot: ProcessSnapshot) -> psutil.Process | None:
    """The live process a snapshot was taken of, never another that reuses its PID."""
    try:
        process = psutil.Process(snapshot.pid)
        if process.create_time() != snapshot.create_time:
            return None
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except psutil.NoSuchProcess:
        return None


def _alive(snapshots: list[ProcessSnapshot]) -> list[psutil.Process]:
    return [process for process in map(_same, snapshots) if process is not None]


def _wait(server: HeldProcess, children: list[ProcessSnapshot], seconds: float) -> list[int]:
    """The PIDs of the tree still alive once all ended or `seconds` passed."""
    deadline = time.monotonic() + seconds
    while True:
        left = [process.pid for process in _alive(children)]
        if server.running():
            left.insert(0, server.pid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _servers(snapshot: ProcessSnapshot, user: int | None) -> bool:
    """Whether a descendant is the server's to stop: it runs as the main process's `user`
    (any, under root's server). One of another user (a setuid program, `sudo`) is not the
    server's, and that user could not signal it itself: root's stop must not either."""
    return user == 0 or snapshot.uid == user


def stop_tree(server: HeldProcess, snapshots: list[ProcessSnapshot], grace: float) -> int:
    """SIGTERM the main process, SIGKILL what remains after `grace`; returns how many ended.

    The main process is signalled through its pidfd; a worker only while its create time
    still matches its snapshot, and only one of the main process's user (`_servers`).
    """
    user = snapshots[0].uid
    children = [each for each in snapshots[1:] if _servers(each, user)]
    main = server.process()
    if main is not None:  # take in the workers started since the last look
        known = {snapshot.pid for snapshot in snapshots}
        for child in descendants(main):
            if child.pid not in known:
                try:
                    snapshot = _snapshot(child)
                except psutil.NoSuchProcess:
                    continue
                if _servers(snapshot, user):
                    children.append(snapshot)
    server.send(signal.SIGTERM)
    if _wait(server, children, grace):
        server.send(signal.SIGKILL)
        for process in _alive(children):
            with contextlib.suppress(psutil.NoSuchProcess):  # psutil checks the create time
                process.kill()
    left = _wait(server, children, 5)
    if left:
        pids = ", ".join(map(str, left))
        survived = f"processes {pids} survived SIGKILL"
        raise Refused(Finding("survived-sigkill", "", survived, cause="host"))
    return 1 + len(children)
