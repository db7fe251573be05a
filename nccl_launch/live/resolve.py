"""The one resolver of a target: the server's main process found by its PID, the socket it
listens on (a port, a URL's address and port), a pidfile or a systemd unit, and held by a
pidfd for as long as a command reads it. Every target problem is worded here, or by the held
process once it has ended or is not this user's to read (`HeldProcess.gone`, `.denied`):
one finding, refused with exit 3 (2 where the command line names no one target)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from nccl_launch.digits import is_ascii_digits
from nccl_launch.files.reading import read_text
from nccl_launch.files.trust import check_trusted
from nccl_launch.findings import Finding, Refused, of_host
from nccl_launch.live.compare import title
from nccl_launch.live.environ import getenv_view
from nccl_launch.live.processes import HeldProcess, command_words, descendants, kernel_thread
from nccl_launch.live.target import PID_LIMIT, Target
from nccl_launch.live.url import url_address
from nccl_launch.profile.markers import MARKER_DIGEST, MARKER_PROFILE
from nccl_launch.secrets.url import Url
from nccl_launch.secrets.values import Secrets
from nccl_launch.tools import ask

PIDFILE_LIMIT = 64  # a PID and a newline; anything longer is not a pidfile

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _no_process(pid: int) -> Refused:
    """The one wording of a PID that names no process (any longer)."""
    return Refused(Finding("no-process", "", f"no process with pid {pid}", cause="host"))


def _target(code: str, message: str, fix: str = "") -> Refused:
    """A target that cannot be found or held here: this host's (exit 3)."""
    return Refused(Finding(code, "", message, fix, cause="host"))


def any_address(address: str) -> bool:
    """Every address of a port: where `check --port` looks."""
    return True


def listening_pids(port: int, where: str, accepts: Callable[[str], bool] = any_address) -> set[int]:
    """The PIDs listening on `port` at an address `accepts` takes; `where` names the place in
    the error raised when none listens there or a listener is not this user's to see."""
    try:
        connections = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:
        raise _target(
            "sockets-denied", f"permission denied listing sockets to find {where}"
        ) from None
    pids = {
        connection.pid
        for connection in connections
        if connection.status == psutil.CONN_LISTEN
        and connection.laddr
        and connection.laddr.port == port
        and accepts(connection.laddr.ip)
    }
    if not pids:
        raise _target("no-listener", f"no process listens on {where}")
    if None in pids:
        hidden = f"the process listening on {where} is not visible"
        raise _target("hidden-listener", hidden, "run as its user")
    return {pid for pid in pids if pid is not None}


def listener_title(
    port: int, secrets: Secrets | None = None, digest: str | None = None
) -> str | None:
    """Who listens on `port`, as `pid N (its command line)` (`_title_of`), the `secrets` of the
    launch of `digest` masked in it when it is a server of that launch; None when that cannot
    be seen."""
    try:
        pid = min(listening_pids(port, f"port {port}"))
    except Refused:
        return None
    said = _title_of(pid, secrets, digest)
    return None if said == "ended" else f"pid {pid} ({said})"


def tree_pids(pid: int) -> set[int]:
    """`pid` and every live descendant's PID."""
    try:
        return {pid} | {child.pid for child in descendants(psutil.Process(pid))}
    except psutil.Error:
        return {pid}


def listening_server(
    port: int, where: str, hint: str, accepts: Callable[[str], bool] = any_address
) -> int:
    """The main process of the one tree listening on `port` at an address `accepts` takes:
    the listener whose tree holds the others. Listeners of different trees (a stranger on
    another address of the port) are refused, each named, with `hint` on naming one."""
    owners = listening_pids(port, where, accepts)
    for pid in sorted(owners):
        if owners <= tree_pids(pid):
            return pid
    named = ", ".join(f"pid {pid} ({_title_of(pid)})" for pid in sorted(owners))
    raise _target("listeners", f"processes of different trees listen on {where}: {named}", hint)


def _title_of(pid: int, secrets: Secrets | None = None, digest: str | None = None) -> str:
    """A listener as named where its profile is not loaded: by its command line, unless
    nccl-launch started it (its markers say so) other than as the launch of `digest`, whose
    `secrets` are masked, or its environment cannot be read to tell. A `${NAME}` of a
    profile's args may have been filled there with a secret file's value that no rule of
    masking knows (`--served-model-name`), so such a process is named by its program, and
    the profile it runs."""
    try:
        words = command_words(psutil.Process(pid))
        env = getenv_view(pid)
    except psutil.AccessDenied:
        env = None
    except psutil.Error:
        return "ended"
    ours = env is not None and digest is not None and env.get(MARKER_DIGEST) == digest
    if env is not None and (MARKER_PROFILE not in env or ours):
        return title(words, secrets)
    program = title(words[:1])
    if env is None:
        return f"{program} ..., whose environment cannot be read"
    return f"started by nccl-launch as {env[MARKER_PROFILE]}: {program} ..."


def _unit_pid(unit: str) -> int:
    # `--` ends systemctl's options: a unit named `-H host` is not another machine's.
    command = ["systemctl", "show", "--property", "MainPID", "--value", "--", unit]
    try:
        done = ask(command, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise _target("systemctl", f"cannot ask systemd for {unit}: {error}") from None
    value = done.stdout.strip()
    if done.returncode != 0 or not is_ascii_digits(value):
        # Its first line is the reason (without systemd: "System has not been booted with
        # systemd..."); the next ones repeat it ("Failed to connect to bus").
        said = (done.stderr.strip() or value or f"exit {done.returncode}").splitlines()[0]
        raise _target("systemctl", f"systemctl show {unit} failed: {said}")
    if value == "0":
        raise _target("unit-not-running", f"unit {unit} has no running main process")
    return int(value)


def _pidfile_pid(path: Path) -> int:
    try:
        text = read_text(path, "pidfile", limit=PIDFILE_LIMIT).strip()
    except Refused as error:  # the server's file, not the user's input: a target problem
        raise of_host(error) from None
    if not is_ascii_digits(text) or not 0 < int(text) <= PID_LIMIT:
        raise _target("not-a-pid", f"pidfile {path} holds {text!r}, not a PID")
    return int(text)


def _check_pidfile(path: Path, held: HeldProcess) -> None:
    """As root, refuses a pidfile that a user other than root and the one the `held` process
    it names runs as could have written (files/trust.py's rule, that user trusted beside
    root): it would have root read, and `--on-drift stop` signal, any process. A `User=svc`
    service's own pidfile, in its own folder, is trusted."""
    process = held.process()
    if process is None:
        raise Refused(held.gone())
    try:
        user = process.uids().effective
        # After the read: the way to the file must still lead to this one (check_trusted).
        status = path.stat()
        check_trusted(path, status, "pidfile", owners=(user,))
    except psutil.NoSuchProcess:
        raise Refused(held.gone()) from None
    except Refused as error:
        raise of_host(error) from None
    except OSError as error:
        unread = f"cannot read: {error.strerror}"
        raise Refused(Finding("unreadable", f"pidfile {path}", unread, cause="host")) from None


def _ip(address: str) -> IPAddress:
    """An address as the kernel lists it; IPv4 mapped into IPv6 as IPv4, a zone dropped."""
    ip = ipaddress.ip_address(address.split("%")[0])
    return (ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else ip


def _resolved(host: str, port: int) -> set[IPAddress]:
    """The addresses a connection to `host` may go to (httpx tries each in turn)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        unresolved = Finding("unresolved", "--url", f"cannot resolve {host}: {error}", cause="host")
        raise Refused(unresolved) from None
    return {_ip(str(info[4][0])) for info in infos}


def _serves(listener: IPAddress, address: IPAddress) -> bool:
    """Whether a socket listening on `listener` takes a connection to `address`: its own
    address, or the wildcard of its family (`::` takes IPv4 too, unless IPV6_V6ONLY)."""
    if listener.is_unspecified:
        return listener.version == 6 or address.version == 4
    return listener == address


def _is_here(addresses: set[IPAddress]) -> bool:
    local = {
        _ip(found.address)
        for nic in psutil.net_if_addrs().values()
        for found in nic
        if found.family in (socket.AF_INET, socket.AF_INET6)
    }
    return any(address.is_loopback or address in local for address in addresses)


def _url_pid(url: Url, pid: int | None) -> int:
    """The server of `url`: the process listening on the address and port a connection to
    the URL lands on (which must be on this host), or `pid`, which must own that listener
    when the URL is local. Listeners of several trees there are refused: the one measured
    might not be the one checked."""
    host, port = url_address(url)
    addresses = _resolved(host, port)
    if not _is_here(addresses):
        if pid is None:
            elsewhere = f"{host} is not this host, whose processes nccl-launch checks"
            fix = "run bench on the server's host, or name its process with --pid"
            raise Refused(Finding("remote-url", f"--url {url}", elsewhere, fix))
        return pid
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def accepts(ip: str) -> bool:
        return any(_serves(_ip(ip), address) for address in addresses)

    if pid is None:
        hint = "name one address in --url (e.g. 127.0.0.1), or the server with --pid"
        return listening_server(port, where, hint, accepts)
    strangers = sorted(listening_pids(port, where, accepts) - tree_pids(pid))
    if strangers:
        stranger = f"pid {strangers[0]} listens on {where}, and it is not in pid {pid}'s tree"
        fix = "the server measured must be the one checked"
        raise Refused(Finding("foreign-listener", f"--pid {pid}", stranger, fix, cause="host"))
    return pid


def main_pid(target: Target) -> int:
    """The PID of the server's main process, from whichever target was given."""
    if target.url is not None:  # bench's and tune's: a --pid beside it must own its listener
        return _url_pid(target.url, target.pid)
    given = [value for value in vars(target).values() if value is not None]
    if len(given) != 1:
        targets = "name the server with exactly one of --pid, --port, --pidfile, --unit"
        raise Refused(Finding("target-count", "", targets))
    if target.pid is not None:
        return target.pid
    if target.port is not None:
        where = f"port {target.port}"
        return listening_server(target.port, where, "name the server with --pid")
    if target.unit is not None:
        return _unit_pid(target.unit)
    if target.pidfile is not None:
        return _pidfile_pid(target.pidfile)
    raise AssertionError("unreachable: one target is set")


@contextlib.contextmanager
def hold_pid(pid: int, create_time: float | None = None) -> Iterator[HeldProcess]:
    """Process `pid` held by a pidfd until the block ends: the one started at `create_time`
    (a process recorded earlier), else the one psutil reads now, which must still run."""
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, OverflowError):  # OverflowError: past any pid_t
        raise _no_process(pid) from None
    except OSError as error:
        raise _target("pidfd", f"cannot hold pid {pid} (pidfd_open): {error.strerror}") from None
    try:
        yield _held(pid, pidfd, create_time)
    finally:
        os.close(pidfd)


def _held(pid: int, pidfd: int, create_time: float | None) -> HeldProcess:
    try:
        held = HeldProcess(pid, psutil.Process(pid).create_time(), pidfd)
    except psutil.NoSuchProcess:
        raise _no_process(pid) from None
    # Exited since pidfd_open (the create time may be another's), or another process.
    if held.process() is None or create_time not in (None, held.create_time):
        raise _no_process(pid)
    thread = kernel_thread(pid)
    if thread is not None:  # not "ended": its environment reads as an ended process's
        thread_of = f"pid {pid} is a kernel thread ({thread}), not a server: it runs no program "
        thread_of += "and has no environment"
        raise _target("kernel-thread", thread_of, "name the server's main process")
    return held


@contextlib.contextmanager
def hold(target: Target) -> Iterator[HeldProcess]:
    """The server's main process, held by a pidfd until the block ends (named by a pidfile
    root may trust: the held process's user's or root's alone)."""
    with hold_pid(main_pid(target)) as held:
        if target.pidfile is not None and os.geteuid() == 0:
            _check_pidfile(target.pidfile, held)
        yield held
