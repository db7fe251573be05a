"""Real processes seen from a test: `check --watch`'s output as it comes, a file's opens,
which of a tree's PIDs are alive, who listens on a port; the console script as a user."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import psutil
import pytest

from tests.conftest import console_script


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` still running (a zombie is not)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


class Watcher:
    """`check --watch` in the background, its output read line by line as it comes."""

    def __init__(self, *args: str, ignoring: str = "") -> None:
        # `ignoring` a signal as `nohup` or a script's background job does: sh's trap "",
        # which exec keeps.
        self.process = subprocess.Popen(
            (["sh", "-c", f'trap "" {ignoring}; exec "$0" "$@"'] if ignoring else [])
            + [console_script(), "check", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,  # a few warning lines at most: never fills the pipe
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()  # None: the output ended
        self.seen: list[str] = []
        assert self.process.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for_line(self, text: str, timeout: float = 30) -> None:
        """Block until a line equal to `text` was printed (so the watcher is up and looking)."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                pytest.fail(f"never printed {text!r} within {timeout} s: {self.seen}")
            if line is None:
                code = self.process.wait()
                pytest.fail(f"exited with {code} before printing {text!r}: {self.seen}")
            self.seen.append(line)

    def wait_for_start(self, prefix: str, timeout: float = 30) -> str:
        """Block until a line starting with `prefix` was printed; that line."""
        deadline = time.monotonic() + timeout
        while not (found := [line for line in self.seen if line.startswith(prefix)]):
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0))
            assert line is not None, f"exited before printing {prefix!r}: {self.seen}"
            self.seen.append(line)
        return found[0]

    def finish(self, timeout: float = 30) -> str:
        """Everything it printed, once it has exited and its output has been read to the end."""
        self.process.wait(timeout=timeout)
        self.reader.join(timeout=timeout)
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.seen.append(line)
        return "\n".join(self.seen)


IN_CLOSE_NOWRITE, IN_OPEN = 0x10, 0x20
_EVENT = struct.Struct("iIII")  # struct inotify_event without its name: wd, mask, cookie, len


class Opens:
    """Counts the opens of one file with inotify: each `check` round reads the profile again."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        # Closes are watched too: two opens in a row would be merged into one event.
        if libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN | IN_CLOSE_NOWRITE) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"inotify cannot watch {path}")

    def __enter__(self) -> Opens:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    def wait(self, count: int, process: subprocess.Popen[str], timeout: float = 30) -> None:
        """Block until the file is opened `count` times; fail at once if `process` exits."""
        deadline = time.monotonic() + timeout
        opened = 0
        while opened < count:
            assert process.poll() is None, f"exited with {process.returncode}"
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"opened {opened} of {count} times within {timeout} s"
            opened += self.seen(min(remaining, 1.0))

    def seen(self, timeout: float = 0) -> int:
        """The opens reported so far (waiting up to `timeout` for the first report). An
        O_PATH descriptor, which opens nothing, is none."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        data = os.read(self.fd, 4096) if ready else b""
        opened = 0
        for offset in range(0, len(data), _EVENT.size):
            _, mask, _, name_size = _EVENT.unpack_from(data, offset)
            assert name_size == 0  # a watched file, not a directory: events carry no name
            opened += bool(mask & IN_OPEN)
        return opened


def free(port: int) -> bool:
    """Whether a server could bind the port now (as SGLang does: TIME_WAIT is no listener)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listeners(port: int) -> set[str]:
    """The addresses listening on `port` (TCP), from the kernel's tables of this network
    namespace: each line's local address as hex bytes (in host order per 32-bit word), then
    `:PORT`; state 0A is LISTEN. Cheap enough to read every 20 ms, where psutil's
    net_connections reads every process's file descriptors."""
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        lines = Path("/proc/net", table).read_text().splitlines()[1:]
        for local, state in (line.split()[1:4:2] for line in lines):
            address, _, number = local.partition(":")
            if state == "0A" and int(number, 16) == port:
                raw = bytes.fromhex(address)
                words = b"".join(raw[at : at + 4][::-1] for at in range(0, len(raw), 4))
                found.add(socket.inet_ntop(family, words))
    return found


@contextlib.contextmanager
def listening(port: int) -> Iterator[set[str]]:
    """The addresses seen listening on `port` (TCP) while the block runs."""
    seen: set[str] = set()
    done = threading.Event()

    def look() -> None:
        while not done.wait(0.02):
            seen.update(listeners(port))

    looking = threading.Thread(target=look)
    looking.start()
    try:
        yield seen
    finally:
        done.set()
        looking.join()


# Root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: a folder's mode holds for it as for
# any user.
AS_A_USER = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


def as_a_user(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script, as a user the folder's mode refuses."""
    return subprocess.run(
        [*AS_A_USER, console_script(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
