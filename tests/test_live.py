"""`check` and `check --watch` against the stand-in SGLang server (a real process tree on
loopback), and the comparison itself on plain snapshots."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nccl_launch.live.compare import ProcessSnapshot, evaluate
from nccl_launch.profile.model import Policy, Profile
from nccl_launch.profile.plan import ProfilePlan, build_plan
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, free_port, wait_for

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


class StartServer(Protocol):
    def __call__(
        self, *, launcher: bool = True, nccl_debug: bool = False, **env: str
    ) -> Server: ...


@pytest.fixture
def start(write_profile: WriteProfile) -> Iterator[StartServer]:
    servers: list[Server] = []

    def start_server(*, launcher: bool = True, nccl_debug: bool = False, **env: str) -> Server:
        port = free_port()
        write_profile(
            "standin", PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
        )
        if launcher:
            argv = [console_script(), "run", *(["--nccl-debug"] * nccl_debug), "standin"]
        else:  # the old way: the raw line, NCCL values exported by hand or not at all
            argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m",
                    "--tp", "2", "--port", str(port)]  # fmt: skip
        server = Server(argv, env, port)
        servers.append(server)
        return server

    yield start_server
    for server in servers:
        server.stop()


def test_a_server_started_by_run_has_no_drift_in_any_process(
    start: StartServer, nccl_launch: RunCli
) -> None:
    server = start()
    result = nccl_launch("check", "standin", "--port", str(server.port))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("check standin@1 (sha256:")
    assert "sglang::scheduler_TP0" in result.stdout
    assert "sglang::scheduler_TP1" in result.stdout
    assert "sglang::detokenizer" in result.stdout
    assert "tolerated: NCCL_CUMEM_ENABLE, NCCL_GRAPH_REGISTER, NCCL_NVLS_ENABLE" in result.stdout
    assert lines[-1] == "no drift in 5 processes"


def test_without_profile_the_servers_own_marker_names_it(
    start: StartServer, nccl_launch: RunCli
) -> None:
    server = start()
    result = nccl_launch("check", "--pid", str(server.process.pid), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema_version"] == 1
    assert report["profile"] == report["running_profile"] == "standin@1"
    assert report["digest"] == report["running_digest"]
    assert {p["pid"] for p in report["processes"]} == set(server.tree)
    titles = sorted(p["title"] for p in report["processes"] if p["title"].startswith("sglang::"))
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert all(p["readable"] for p in report["processes"])
    drifted = [e for p in report["processes"] for e in p["entries"] if not e["tolerated"]]
    assert drifted == []


def test_the_old_way_names_missing_keys_and_unreadable_workers(
    start: StartServer, nccl_launch: RunCli
) -> None:
    server = start(launcher=False, NCCL_PROTO="LL")
    result = nccl_launch("check", "standin", "--port", str(server.port))
    assert result.returncode == 1
    text = result.stdout
    assert f"pid {server.process.pid} was not started by nccl-launch" in text
    assert '  - NCCL_ALGO      "Ring" -> unset' in text
    assert '  - NCCL_BUFFSIZE  "16777216" -> unset' in text
    assert text.count("unreadable: environment overwritten by setproctitle") == 3
    assert "NCCL_PROTO  " not in text.split("sglang::")[0]  # set by hand: it matches
    assert text.splitlines()[-1] == "drift: 2 drift, 3 unreadable, of 5 processes"


def test_one_drifted_worker_is_named(start: StartServer, nccl_launch: RunCli) -> None:
    server = start(STANDIN_DRIFT_RANK="1", STANDIN_DRIFT="NCCL_PROTO=Simple")
    result = nccl_launch("check", "--port", str(server.port))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    worker = next(i for i, line in enumerate(lines) if line.endswith("sglang::scheduler_TP1"))
    assert lines[worker + 1].split()[:5] == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"']
    assert lines[-1] == "drift: 1 drift, of 5 processes"


def test_prometheus_textfile_parses_and_says_drift(
    start: StartServer, nccl_launch: RunCli, tmp_path: Path
) -> None:
    server = start(STANDIN_DRIFT_RANK="0", STANDIN_DRIFT="NCCL_ALGO=")
    textfile = tmp_path / "textfile" / "nccl_launch.prom"
    result = nccl_launch("check", "--port", str(server.port), "--format", "prometheus",
                         "--output", str(textfile))  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(textfile.read_text())
        for sample in family.samples
    }
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for (name, label_pairs), value in samples.items():
        by_name.setdefault(name, []).append((dict(label_pairs), value))
    [(labels, drift)] = by_name["nccl_launch_drift"]
    assert drift == 1
    assert labels["profile"] == "standin"
    assert labels["version"] == "1"
    assert labels["digest"].startswith("sha256:")
    missing = [v for lab, v in by_name["nccl_launch_drift_variables"] if lab["kind"] == "missing"]
    assert missing == [1]
    [(running, one)] = by_name["nccl_launch_running_info"]
    assert (running["running_profile"], one) == ("standin@1", 1)
    assert running["running_digest"] == labels["digest"]
    states = {lab["state"]: v for lab, v in by_name["nccl_launch_processes"]}
    assert states == {"ok": 4, "drift": 1, "unreadable": 0}
    assert [path.name for path in textfile.parent.iterdir()] == ["nccl_launch.prom"]


def test_a_newer_profile_file_than_the_server_runs_is_reported(
    start: StartServer, write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    server = start()
    write_profile("standin", PROFILE.format(version=2, buffsize="32MiB", python=sys.executable,
                                            port=server.port))  # fmt: skip
    result = nccl_launch("check", "--pid", str(server.process.pid))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("check standin@2 (sha256:")
    assert lines[1].startswith("server runs standin@1 (sha256:")
    assert ", the file is standin@2 (sha256:" in lines[1]
    assert '  ~ NCCL_BUFFSIZE  "33554432" -> "16777216"' in lines
    assert lines[-1] == "drift: 5 drift, another digest running, of 5 processes"


def _alive(pids: list[int]) -> list[int]:
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

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [console_script(), "check", *args], stdout=subprocess.PIPE, text=True
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
            ready, _, _ = select.select([self.fd], [], [], min(remaining, 1.0))
            data = os.read(self.fd, 4096) if ready else b""
            for offset in range(0, len(data), _EVENT.size):
                _, mask, _, name_size = _EVENT.unpack_from(data, offset)
                assert name_size == 0  # a watched file, not a directory: events carry no name
                opened += bool(mask & IN_OPEN)


def test_watch_stops_the_whole_tree_when_a_late_worker_drifts(start: StartServer) -> None:
    server = start(STANDIN_LATE_DRIFT="NCCL_PROTO=Simple")
    pid = str(server.process.pid)
    watcher = Watcher("--pid", pid, "--watch", "0.2", "--on-drift", "stop", "--grace", "5")
    watcher.wait_for_line("no drift in 5 processes")
    os.kill(server.process.pid, signal.SIGUSR1)  # a scheduler that appears later, drifted
    out = watcher.finish()
    server.process.wait(timeout=10)  # reap it: we are its parent
    assert watcher.process.returncode == 1, out
    assert out.startswith("--- ")
    assert '"LL" -> "Simple"' in out  # the late worker, seen and stopped
    assert f"stopped the server: 6 processes of pid {pid}'s tree ended" in out
    assert _alive(server.tree) == []
    assert [p for p in psutil.process_iter(["cmdline"]) if any(
        str(server.port) in part for part in (p.info["cmdline"] or []))] == []  # fmt: skip


def test_sigterm_ends_the_watch_and_leaves_the_server_alone(start: StartServer) -> None:
    server = start()
    watcher = Watcher("--port", str(server.port), "--watch", "0.2")
    watcher.wait_for_line("no drift in 5 processes")
    with Opens(Path("profiles/standin.toml")) as profile_reads:
        profile_reads.wait(3, watcher.process)  # three more rounds: each reads the profile once
    watcher.process.send_signal(signal.SIGTERM)
    out = watcher.finish(timeout=10)
    assert watcher.process.returncode == 0
    assert out.count("--- ") == 1  # printed once: nothing changed
    assert _alive(server.tree) == server.tree


ONE_TARGET = "nccl-launch: name the server with exactly one of --pid, --port, --pidfile, --unit\n"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--pid", "999999999"], 3, "nccl-launch: no process with pid 999999999\n"),
        (["--pidfile", "missing.pid"], 3,
         "nccl-launch: cannot read pidfile missing.pid: No such file or directory\n"),
        ([], 2, ONE_TARGET),
        (["--pid", "1", "--port", "1"], 2, ONE_TARGET),
    ],
)  # fmt: skip
def test_target_errors(args: list[str], code: int, message: str, nccl_launch: RunCli) -> None:
    result = nccl_launch("check", *args)
    assert (result.returncode, result.stderr) == (code, message)


def test_port_nobody_listens_on_is_a_target_error(nccl_launch: RunCli) -> None:
    port = free_port()
    result = nccl_launch("check", "--port", str(port))
    assert (result.returncode, result.stderr) == (
        3,
        f"nccl-launch: no process listens on port {port}\n",
    )


def test_pidfile_and_systemd_unit_targets(
    start: StartServer, nccl_launch: RunCli, tmp_path: Path
) -> None:
    server = start()
    Path("server.pid").write_text(f"{server.process.pid}\n")
    assert nccl_launch("check", "--pidfile", "server.pid").returncode == 0
    # No systemd runs here, so `systemctl` is a stand-in that answers like `systemctl show`.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    show = "show --property MainPID --value"
    systemctl.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "{show} sglang.service" ] && echo {server.process.pid} && exit 0\n'
        f'[ "$*" = "{show} stopped.service" ] && echo 0 && exit 0\n'
        "exit 1\n"
    )
    systemctl.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    assert nccl_launch("check", "--unit", "sglang.service", env=env).returncode == 0
    stopped = nccl_launch("check", "--unit", "stopped.service", env=env)
    assert (stopped.returncode, stopped.stderr) == (
        3, "nccl-launch: unit stopped.service has no running main process\n")  # fmt: skip


# The comparison itself, on plain dicts.


def plan_and_policy(**policy: Any) -> tuple[ProfilePlan, Policy]:
    profile = Profile.model_validate({"schema": 1, "name": "p", "version": 3,
                                      "nccl": {"PROTO": "LL", "CUMEM_ENABLE": 1},
                                      "policy": policy})  # fmt: skip
    return build_plan(profile), profile.policy


def test_unreadable_is_never_reported_as_missing_keys() -> None:
    plan, policy = plan_and_policy()
    report = evaluate(plan, policy, "p.toml", [ProcessSnapshot(1, 0.0, "main", None, "denied")])
    [process] = report.processes
    assert (process.readable, process.reason, process.entries) == (False, "denied", [])
    assert not report.ok
    assert not report.drifts
    assert report.exit_code == 3  # nothing could be read: a target problem, not drift
    env = {"NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "1"}
    mixed = [ProcessSnapshot(1, 0.0, "main", env), ProcessSnapshot(2, 0.0, "w", None, "denied")]
    assert evaluate(plan, policy, "p.toml", mixed).exit_code == 1


def test_an_empty_environment_is_read_not_called_overwritten(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile("empty", 'schema = 1\nname = "empty"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    process = subprocess.Popen(["/usr/bin/env", "-i", "/bin/sleep", "30"])
    try:
        # Once `env` has exec'd sleep, the process holds the empty environment it was given.
        wait_for(lambda: psutil.Process(process.pid).cmdline()[:1] == ["/bin/sleep"],
                 "env -i to exec sleep", process=process)  # fmt: skip
        result = nccl_launch("check", "empty", "--pid", str(process.pid))
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 1
    assert '  - NCCL_PROTO  "LL" -> unset' in result.stdout.splitlines()
    assert "unreadable" not in result.stdout


def test_server_owned_and_undeclared_in_a_worker() -> None:
    plan, policy = plan_and_policy(undeclared_nccl="warn")
    env = {"NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "0", "NCCL_IB_HCA": "mlx5_0",
           "NCCL_NVLS_ENABLE": "0"}  # fmt: skip
    report = evaluate(plan, policy, "p.toml", [ProcessSnapshot(1, 0.0, "w", env)])
    [process] = report.processes
    assert [(e.key, e.reason, e.tolerated) for e in process.entries] == [
        ("NCCL_CUMEM_ENABLE", "server-owned", True),
        ("NCCL_IB_HCA", "policy", True),
        ("NCCL_NVLS_ENABLE", "server-owned", True),
    ]
    assert report.ok
    strict_plan, strict = plan_and_policy()
    assert not evaluate(strict_plan, strict, "p.toml", [ProcessSnapshot(1, 0.0, "w", env)]).ok


def test_nccl_debug_variables_are_tolerated_when_run_added_them(
    start: StartServer, nccl_launch: RunCli
) -> None:
    server = start(nccl_debug=True)
    result = nccl_launch("check", "--port", str(server.port))
    assert result.returncode == 0, result.stdout
    assert "no drift, 3 match, tolerated: NCCL_DEBUG, NCCL_DEBUG_SUBSYS" in result.stdout
