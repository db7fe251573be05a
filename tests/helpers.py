"""Shared by the tests: a free port, waiting for an event, the SGLang stand-in and a profile
that starts it, processes that end with the test, a container's environment, the docs'
examples."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import psutil
import pytest

REPO = Path(__file__).parent.parent
STANDIN = Path(__file__).parent / "standin"
# `python -m sglang.launch_server` with PYTHONPATH=STANDIN; run as a script, it is any command.
STANDIN_SERVER = STANDIN / "sglang" / "launch_server.py"

T = TypeVar("T")


class Record(TypedDict):
    """What the stand-in received, as it writes it to $STANDIN_RECORD."""

    pid: int
    argv: list[str]
    cwd: str
    env: dict[str, str]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (now: the caller binds it soon)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    condition: Callable[[], T],
    what: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    timeout: float = 30,
) -> T:
    """Poll `condition` until it returns something true, and return that.

    With `process`, fail as soon as it has exited (a launch that was refused, a server that
    crashed) with its exit code and stderr, instead of waiting out `timeout`.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if process is not None and process.poll() is not None:
            pytest.fail(
                f"waiting for {what}: {process.args!r} exited with {process.returncode}"
                f"{_stderr(process)}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"waiting for {what}: not within {timeout} s")
        time.sleep(0.02)


def _stderr(process: subprocess.Popen[Any]) -> str:
    """What an exited process wrote to a captured stderr."""
    if process.stderr is None:
        return " (stderr not captured)"
    try:
        _, err = process.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        return " (its stderr is still held open by a process it started)"
    text = err.decode(errors="replace") if isinstance(err, bytes) else str(err or "")
    return f"; stderr:\n{text}" if text else "; stderr is empty"


def read_record(path: Path) -> Record:
    """The stand-in's record at `path`: written whole, so it exists only when complete."""
    record: Record = json.loads(path.read_text(encoding="utf-8"))
    return record


def wait_for_record(
    path: Path, process: subprocess.Popen[Any] | None = None, timeout: float = 30
) -> Record:
    """The record once the stand-in has written it (a server started in the background)."""
    wait_for(path.exists, f"the stand-in to write {path.name}", process=process, timeout=timeout)
    return read_record(path)


def while_running(
    argv: list[str], env: Mapping[str, str], cwd: Path, record: Path, then: Callable[[int], T]
) -> T:
    """`then(pid)` once the stand-in started with `argv` has written `record`; the stand-in
    is stopped after, whatever `then` does."""
    process = subprocess.Popen(argv, env=env, cwd=cwd)
    try:
        wait_for_record(record, process)
        return then(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)


PROFILE = """
schema = 1
name = "standin"
version = {version}
[nccl]
PROTO = "LL"
ALGO = "Ring"
BUFFSIZE = "{buffsize}"
[server]
python = "{python}"
model_path = "/models/m"
tp_size = 2
port = {port}
"""
# A profile of the least: a check of a process another user or an older nccl-launch started.
EVIL = 'schema = 1\nname = "evil"\nversion = 1\n[nccl]\nPROTO = "LL"\n'


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class Server:
    """One stand-in server started in its own session; everything in it dies at teardown."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(
            argv,
            env={**os.environ, "PYTHONPATH": str(STANDIN), **env},
            start_new_session=True,
            stderr=subprocess.PIPE,
        )
        wait_for(lambda: healthy(port), "the stand-in to answer /health", process=self.process)
        self.tree = [self.process.pid, *(c.pid for c in self.children())]

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


@contextlib.contextmanager
def sleeper(env: dict[bytes, bytes], *title: bytes) -> Iterator[int]:
    """A real process with exactly `env` (bytes: it may hold what is not UTF-8); its PID."""
    argv = [b"python", b"-c", b"import time; time.sleep(60)", *title]  # a title of any checkout
    process = subprocess.Popen(argv, executable=sys.executable, env=env)  # once exec succeeded
    try:
        # Popen returns once exec has begun, which is before the kernel sets where the new
        # command line and environment lie: /proc reads them empty until then.
        whole = b"".join(key + b"=" + value + b"\0" for key, value in env.items())
        proc = Path(f"/proc/{process.pid}")

        def set_up() -> bool:
            command_line = (proc / "cmdline").read_bytes()  # set before the environment
            return bool(command_line) and (proc / "environ").read_bytes() == whole

        wait_for(set_up, "the sleeper's environment", process=process)
        yield process.pid
    finally:
        process.kill()
        process.wait()


def descendant_pids() -> set[int]:
    """The PIDs below this process, from the kernel's lists of each thread's children: cheap
    enough to read around every test (psutil's walk reads every process on the host)."""
    found: set[int] = set()
    parents = [os.getpid()]
    while parents:
        for children in Path(f"/proc/{parents.pop()}/task").glob("*/children"):
            with contextlib.suppress(OSError):  # the process or thread has ended
                new = {int(word) for word in children.read_text().split()} - found
                found |= new
                parents += new
    return found


def stop_left(kept: Collection[int] = ()) -> list[psutil.Process]:
    """This process's descendants still running, but those in `kept`: each killed, then
    reaped (or, where another is its parent, waited for); the list of them."""
    if descendant_pids() <= set(kept):
        return []
    left = [process for process in psutil.Process().children(recursive=True)
            if process.pid not in kept and _running(process)]  # fmt: skip
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(left, timeout=10)
    return left


def _running(process: psutil.Process) -> bool:
    """Whether `process` is still there and not a zombie (one exited, waiting to be reaped)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# What NVIDIA's CUDA image exports (its Dockerfiles' ENV lines).
IMAGE = {
    "NCCL_VERSION": "2.28.3-1", "CUDA_VERSION": "13.0.1", "NVARCH": "x86_64",
    "NV_LIBNCCL_PACKAGE_NAME": "libnccl2", "NV_LIBNCCL_PACKAGE_VERSION": "2.28.3-1",
    "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
}  # fmt: skip
# What PyTorch's and nccl-tests' builds read.
BUILD = {
    "NCCL_HOME": "/opt/nccl", "NCCL_ROOT": "/opt/nccl", "NCCL_LIB_DIR": "/opt/nccl/lib",
    "NCCL_INCLUDE_DIR": "/opt/nccl/include",
}  # fmt: skip
# What Kubernetes gives every pod of the namespace of a Service named nccl-proxy, port 8080
# named `grpc`.
LINKS = {
    "NCCL_PROXY_SERVICE_HOST": "10.0.0.7", "NCCL_PROXY_SERVICE_PORT": "8080",
    "NCCL_PROXY_SERVICE_PORT_GRPC": "8080", "NCCL_PROXY_PORT": "tcp://10.0.0.7:8080",
    "NCCL_PROXY_PORT_8080_TCP": "tcp://10.0.0.7:8080", "NCCL_PROXY_PORT_8080_TCP_PROTO": "tcp",
    "NCCL_PROXY_PORT_8080_TCP_PORT": "8080", "NCCL_PROXY_PORT_8080_TCP_ADDR": "10.0.0.7",
}  # fmt: skip
CONTAINER = IMAGE | BUILD | LINKS


def documented(command: str, page: str = "commands.md", nth: int = 0) -> tuple[list[str], int]:
    """The lines `page` prints after its `nth` (from 0) `$ command` up to the next prompt or
    the block's end, and the exit code its `$ echo $?` shows (0 when it shows none)."""
    after = (REPO / "docs" / page).read_text().split(f"$ {command}\n")[nth + 1]
    block = after.split("```", 1)[0]
    output, *prompts = re.split(r"^\$ ", block, flags=re.MULTILINE)
    shown = prompts[0].splitlines() if prompts else []
    code = int(shown[1]) if shown and shown[0] == "echo $?" else 0
    return output.splitlines(), code
