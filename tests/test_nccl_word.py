"""NCCL's word in `check`: each process of a tree started by `run --nccl-debug` writes its own
NCCL log, which `check` follows beside /proc. NCCL itself cannot run here: the stand-in
servers write its lines as NCCL 2.28.9 did on an H200 (tests/standin)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nccl_launch.env.drift import DriftEntry
from nccl_launch.live.compare import evaluate
from nccl_launch.live.nccl_logs import LOOK_LIMIT, NcclLog, NcclLogs, expanded
from nccl_launch.live.processes import ProcessSnapshot
from nccl_launch.profile.load import load_profile
from nccl_launch.profile.model import Policy
from nccl_launch.render.reports import live_lines
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import PROFILE, STANDIN, free_port, while_running

LINE = "vm:{pid}:{pid} [1] NCCL INFO NCCL_PROTO set by environment to {value}\n"


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("/s/%h.%p.log", "/s/vm.42.log"),
        ("/s/100%%/%h", "/s/100%/vm"),
        ("/s/%x%p", "/s/%x42"),  # NCCL echoes what it does not understand
        ("/s/end%", "/s/end%"),
    ],
)
def test_the_file_name_is_expanded_as_nccl_expands_it(pattern: str, path: str) -> None:
    assert expanded(pattern, 42, "vm") == path


PID = os.getpid()


def _snapshot(path: Path, pid: int = PID, **env: str) -> ProcessSnapshot:
    """A process whose NCCL writes `path`: this one, whose /proc/PID/root is the test's."""
    marked = {"NCCL_LAUNCH_NCCL_DEBUG": "1", "NCCL_DEBUG_FILE": str(path), **env}
    return ProcessSnapshot(pid, 0.0, ("rank",), {"NCCL_PROTO": "LL", **marked}, uid=os.geteuid())


def _look(logs: NcclLogs, snapshot: ProcessSnapshot) -> tuple[NcclLog, list[DriftEntry]]:
    """One look of `logs` at the one process of `snapshot`, judged against PROTO=LL."""
    logs.look([snapshot])
    log, entries = logs.judge(snapshot, {"NCCL_PROTO": "LL"}, Policy())
    assert log is not None
    return log, entries


def _judge(logs: NcclLogs, snapshot: ProcessSnapshot) -> tuple[str, list[str]]:
    log, entries = _look(logs, snapshot)
    return log.state, [f"{e.key}={e.actual} {e.note}" for e in entries if not e.tolerated]


def test_a_growing_file_is_read_on_and_a_partial_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "vm.4242.log"
    logs = NcclLogs()
    assert _judge(logs, _snapshot(path)) == ("none-yet", [])  # NCCL has not started
    path.write_text(LINE.format(pid=PID, value="LL"))
    assert _judge(logs, _snapshot(path)) == ("read", [])
    with path.open("r+") as file:  # rewritten in place: a look never reads it again
        file.write(LINE.format(pid=PID, value="ZZ"))  # were it read again: drift
    assert _judge(logs, _snapshot(path)) == ("read", [])
    late = LINE.format(pid=PID, value="Simple")
    with path.open("a") as file:
        file.write(late[:-4])  # a line NCCL has not ended yet
    assert _judge(logs, _snapshot(path)) == ("read", [])
    with path.open("a") as file:
        file.write(late[-4:])
    said = "NCCL_PROTO=Simple NCCL_PROTO set by environment to Simple"
    assert _judge(logs, _snapshot(path)) == ("read", [said])


def test_a_replaced_or_shrunk_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "vm.4242.log"
    path.write_text(LINE.format(pid=PID, value="Simple") * 3)
    logs = NcclLogs()
    assert _judge(logs, _snapshot(path))[1] != []
    path.write_text(LINE.format(pid=PID, value="LL"))  # shorter: a new start of NCCL
    assert _judge(logs, _snapshot(path)) == ("read", [])
    other = tmp_path / "new"
    other.write_text(LINE.format(pid=PID, value="Simple"))
    other.replace(path)  # another file of the same size
    assert _judge(logs, _snapshot(path))[1] != []


def test_a_file_of_its_own_that_cannot_be_read_is_said_not_fatal(tmp_path: Path) -> None:
    logs = NcclLogs()
    target = tmp_path / "secret"
    target.write_text(LINE.format(pid=PID, value="Simple"))
    link = tmp_path / "vm.4242.log"
    link.symlink_to(target)
    log, entries = _look(logs, _snapshot(link))
    assert entries == []
    assert (log.state, log.reason) == ("unreadable", "a symlink, not followed")
    link.unlink()
    os.mkfifo(link)
    log, _ = _look(logs, _snapshot(link))
    assert log.reason == "a FIFO; only regular files are read"


def test_a_process_that_comes_to_name_a_read_file_has_its_earlier_lines_judged(
    tmp_path: Path,
) -> None:
    """A file one process names is read to its end; once a second names it too (a worker
    started later), the file is read again from its start, so the second's earlier lines
    count: each judged by its own PID's lines alone."""
    path = tmp_path / "shared.log"
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            path.write_text(
                LINE.format(pid=PID, value="LL") + LINE.format(pid=other.pid, value="Simple")
            )
            logs, alone = NcclLogs(), _snapshot(path)
            assert _judge(logs, alone) == ("read", [])
            both = [alone, _snapshot(path, other.pid)]
            logs.look(both)
            said = [logs.judge(snapshot, {"NCCL_PROTO": "LL"}, Policy()) for snapshot in both]
            assert [[e.actual for e in entries] for _, entries in said] == [[], ["Simple"]]
        finally:
            other.kill()


def test_only_what_proc_cannot_see_is_an_entry_of_nccls_word(
    tmp_path: Path, write_profile: WriteProfile
) -> None:
    text = 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\nBUFFSIZE = "16MiB"\n'
    loaded = load_profile(str(write_profile("p", text)))
    path = tmp_path / "vm.7.log"
    path.write_text(
        f"vm:{PID}:7 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.\n"
        f"vm:{PID}:7 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_1\n"  # set in itself
        f"vm:{PID}:7 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo\n"  # /proc has it
    )
    env = {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216", "NCCL_SOCKET_IFNAME": "lo"}
    snapshot = _snapshot(path, os.getpid(), **env)
    report = evaluate(loaded.plan, loaded.profile.policy, "p.toml", [snapshot])
    [process] = report.processes
    word = [(e.key, e.kind, e.source) for e in process.entries if e.source == "NCCL's log"]
    assert word == [("NCCL_IB_HCA", "undeclared", "NCCL's log")]
    assert process.nccl_log is not None and process.nccl_log.confirmed == ["NCCL_BUFFSIZE"]
    assert report.exit_code == 1


def test_a_value_nccls_log_contradicts_is_no_match(
    tmp_path: Path, write_profile: WriteProfile
) -> None:
    """/proc shows the profile's NCCL_PROTO, the rank's NCCL applied another: the process's
    count of matches leaves it out, in the JSON's `matched` and the text alike."""
    text = 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\nBUFFSIZE = "16MiB"\n'
    loaded = load_profile(str(write_profile("p", text)))
    pid = os.getpid()
    path = tmp_path / f"vm.{pid}.log"
    path.write_text(LINE.format(pid=pid, value="Simple"))
    snapshot = _snapshot(path, pid, NCCL_BUFFSIZE="16777216")
    report = evaluate(loaded.plan, loaded.profile.policy, "p.toml", [snapshot])
    [process] = report.processes
    assert process.matched == ["NCCL_BUFFSIZE"]
    assert [line for line in live_lines(report) if " match" in line] == [
        "  drift, 1 match, tolerated: NCCL_DEBUG_FILE"
    ]


# The stand-in's tree started by the console script's `run --nccl-debug`, checked and stopped
# in a PID namespace of the test's own: PID 1 is this driver, and everything left dies with it.
DRIVER = """
import json, os, subprocess, sys, time, urllib.request

script, profile, port, late, private = sys.argv[1:]
env = dict(os.environ)
if late:
    env |= {"STANDIN_LATE_EXPORT_RANK": "1", "STANDIN_LATE_EXPORT": late}
argv = [script, "run", "--nccl-debug", profile]
if private:  # the server's files where only its mount namespace sees them, as a container's
    mount = f'mount -t tmpfs -o mode=0700 tmpfs {private} && exec "$@"'
    argv = ["unshare", "--mount", "sh", "-c", mount, "sh", *argv]
server = subprocess.Popen(argv, env=env)

def healthy():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False

deadline = time.monotonic() + 30
while not healthy():
    assert server.poll() is None and time.monotonic() < deadline, "the server never came up"
    time.sleep(0.05)

def check(*args):
    argv = [script, "check", "--pid", str(server.pid), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}

found = {"text": check(), "json": check("--format", "json")}
found["prometheus"] = check("--format", "prometheus")
if late:
    found["watch"] = check("--watch", "0.2", "--on-drift", "stop", "--grace", "5")
    server.wait(timeout=10)
    found["left"] = [  # orphans come to PID 1, which reaps none: a zombie has ended
        pid for pid in os.listdir("/proc") if pid.isdigit() and pid != "1"
        and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    ]
print(json.dumps(found))
"""


def in_own_pid_namespace(
    profile: Path, port: int, late: str = "", private: str = ""
) -> dict[str, Any]:
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER,
            console_script(), str(profile), str(port), late, private]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(STANDIN)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _samples(text: str, name: str, label: str = "state") -> dict[str, float]:
    [family] = [f for f in text_string_to_metric_families(text) if f.name == name]
    return {sample.labels[label]: sample.value for sample in family.samples}


def _standin(write_profile: WriteProfile, tp_size: int = 2) -> tuple[Path, int]:
    port = free_port()
    text = PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
    return write_profile("standin", text.replace("tp_size = 2", f"tp_size = {tp_size}")), port


def test_a_ranks_late_export_is_drift_by_nccls_word_and_stops_the_tree(
    write_profile: WriteProfile,
) -> None:
    profile, port = _standin(write_profile)
    found = in_own_pid_namespace(profile, port, "NCCL_PROTO=Simple")
    report = json.loads(found["json"]["out"])
    [rank1] = [p for p in report["processes"] if p["title"] == "sglang::scheduler_TP1"]
    pid = rank1["pid"]
    line = "NCCL_PROTO set by environment to Simple"
    assert found["text"]["code"] == 1, found["text"]
    text = found["text"]["out"].splitlines()
    at = text.index(f"pid {pid}  sglang::scheduler_TP1")
    assert text[at + 1] == f'  ~ NCCL_PROTO  "LL" -> "Simple"  (NCCL\'s log; {line})'
    assert text[-1].startswith("fix: NCCL's log says what the process set inside itself")
    # /proc sees nothing (the rank started with the profile's value), yet no match: NCCL's
    # word wins.
    assert "NCCL_PROTO" not in rank1["matched"]
    [entry] = [e for e in rank1["entries"] if not e["tolerated"]]
    assert (entry["source"], entry["actual"]) == ("NCCL's log", "Simple")
    assert rank1["nccl_log"]["file"].endswith(f".{pid}.log")
    assert rank1["nccl_log"]["state"] == "read"
    folder = Path(rank1["nccl_log"]["file"]).parent
    assert (folder / "pid").read_text() == f"{report['main_pid']}\n"
    assert [oct(f.stat().st_mode & 0o777) for f in (folder, folder.parent)] == ["0o700"] * 2
    rank0 = next(p for p in report["processes"] if p["title"] == "sglang::scheduler_TP0")
    assert rank0["nccl_log"]["confirmed"] == ["NCCL_PROTO", "NCCL_ALGO", "NCCL_BUFFSIZE"]
    assert _samples(found["prometheus"]["out"], "nccl_launch_drift_variables", "kind") == {
        "changed": 1, "missing": 0, "undeclared": 0}  # fmt: skip
    watch = found["watch"]
    assert watch["code"] == 1, watch
    stopped = watch["out"].splitlines()[-1]
    assert stopped.startswith("stopped the server: 5 processes of pid ")
    assert stopped.endswith(f"; drift: pid {pid} NCCL_PROTO by NCCL's log")
    assert found["left"] == []


def test_check_reads_each_log_as_the_process_sees_it_from_another_mount_namespace(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    """The server's state home is a tmpfs of its own mount namespace, as a container's files
    are to a sidecar or the host: check still finds rank 1's late export."""
    profile, port = _standin(write_profile)
    state = tmp_path / "home" / ".local" / "state"
    state.mkdir(parents=True, exist_ok=True)
    found = in_own_pid_namespace(profile, port, "NCCL_PROTO=Simple", str(state))
    assert not (state / "nccl-launch").exists()  # not here: in the server's namespace
    assert found["text"]["code"] == 1, found["text"]["out"]
    assert "(NCCL's log; NCCL_PROTO set by environment to Simple)" in found["text"]["out"]
    assert found["watch"]["out"].splitlines()[-1].endswith("NCCL_PROTO by NCCL's log")


def test_a_tree_whose_ranks_keep_the_profile_has_no_drift(write_profile: WriteProfile) -> None:
    profile, port = _standin(write_profile)
    found = in_own_pid_namespace(profile, port)
    assert found["text"]["code"] == 0, found["text"]["out"]
    report = json.loads(found["json"]["out"])
    states = sorted(p["nccl_log"]["state"] for p in report["processes"])
    assert states == ["none-yet", "none-yet", "none-yet", "read", "read"]
    assert _samples(found["prometheus"]["out"], "nccl_launch_nccl_logs") == {
        "read": 2, "none-yet": 3, "unreadable": 0}  # fmt: skip


def test_a_one_rank_communicator_that_never_logs_proto_or_algo_is_no_drift(
    write_profile: WriteProfile,
) -> None:
    profile, port = _standin(write_profile, tp_size=1)
    found = in_own_pid_namespace(profile, port)
    assert found["text"]["code"] == 0, found["text"]["out"]
    report = json.loads(found["json"]["out"])
    [rank] = [p for p in report["processes"] if p["title"] == "sglang::scheduler_TP0"]
    assert rank["nccl_log"]["confirmed"] == ["NCCL_BUFFSIZE"]
    assert rank["nccl_log"]["not_read"] == ["NCCL_PROTO", "NCCL_ALGO"]
    said = f"  NCCL's log {rank['nccl_log']['file']}: 1 applied as the profile; never read by "
    assert f"{said}its communicators: NCCL_PROTO, NCCL_ALGO" in found["text"]["out"]
    text = Path(rank["nccl_log"]["file"]).read_text()
    assert "nranks 1" in text and "NCCL_PROTO" not in text


def test_run_nccl_debug_writes_the_logs_in_a_new_folder_of_its_own(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    profile, _ = _standin(write_profile)
    result = run_cli("run", "--dry-run", "--nccl-debug", str(profile))
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if "NCCL_DEBUG_FILE" in line]
    folder = tmp_path / "home" / ".local" / "state" / "nccl-launch" / "nccl-debug"
    assert f'"{folder}/' in line and line.endswith('/%h.%p.log"  (--nccl-debug)')
    assert not folder.exists()  # a dry run creates nothing
    declared = write_profile("declared", 'schema = 1\nname = "declared"\nversion = 1\n'
                                         '[nccl]\nDEBUG_FILE = "/tmp/x"\n')  # fmt: skip
    result = run_cli("run", "--nccl-debug", str(declared), "--", "true")
    said = "nccl-launch: the profile declares NCCL_DEBUG_FILE; drop it or --nccl-debug\n"
    assert (result.returncode, result.stderr) == (2, said)


def test_nccl_debug_in_the_calling_environment_names_the_option(
    run_cli: RunCli, write_profile: WriteProfile
) -> None:
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    result = run_cli("run", "p", "--", "true", env={"NCCL_DEBUG": "INFO"})
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "fix + (undeclared): for NCCL's log use nccl-launch run --nccl-debug (each process "
        "writes a file of its own, which check reads), unset it in the calling environment "
        "(the shell, the unit's Environment=), or let the server have it: [policy] "
        'undeclared_nccl = "warn"'
    )


def test_nccl_debug_replaces_the_calling_environments_logging_and_a_stale_marker(
    nccl_launch: RunCli, write_profile: WriteProfile
) -> None:
    """With --nccl-debug, NCCL's logging is nccl-launch's to set: the caller's NCCL_DEBUG and
    NCCL_DEBUG_FILE are replaced, not refused with a fix that names the option already given.
    Without it, a marker inherited from another run never reaches the server, whose check
    would otherwise tolerate NCCL_DEBUG by it."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    caller = {
        "NCCL_DEBUG": "WARN",
        "NCCL_DEBUG_FILE": "/tmp/elsewhere.%p",
        "NCCL_DEBUG_SUBSYS": "ALL",
    }
    result = nccl_launch("run", "--nccl-debug", "p", "--", "env", env=caller)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,ENV"} <= set(lines)
    [debug_file] = [line for line in lines if line.startswith("NCCL_DEBUG_FILE=")]
    assert debug_file.endswith("/%h.%p.log") and "elsewhere" not in debug_file
    result = nccl_launch("run", "p", "--", "env", env={"NCCL_LAUNCH_NCCL_DEBUG": "1"})
    assert result.returncode == 0, result.stderr
    assert "NCCL_LAUNCH_NCCL_DEBUG=1" not in result.stdout.splitlines()


def test_a_run_whose_log_folder_cannot_be_made_starts_with_nccls_log_in_its_output(
    nccl_launch: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    state = tmp_path / "home" / ".local" / "state"
    state.parent.mkdir(parents=True)
    state.write_text("")  # a file where the folder goes
    result = nccl_launch("run", "--nccl-debug", "p", "--", "env")
    assert result.returncode == 0, result.stderr
    assert "NCCL_DEBUG=INFO" in result.stdout.splitlines()
    assert "NCCL_DEBUG_FILE=" not in result.stdout
    folder = state / "nccl-launch" / "nccl-debug"
    assert result.stderr.startswith(
        f"nccl-launch: warning: cannot create NCCL's log folder {folder}/"
    )
    assert result.stderr.endswith(
        "; NCCL's log goes to the server's output, where check cannot read it\n"
    )


def test_a_run_that_never_starts_its_server_leaves_no_log_folder(
    nccl_launch: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """The exec fails (a program run's checks pass but the kernel cannot load: no ELF, no
    `#!`): nothing will ever write in the run's folder, so it goes again."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    program = tmp_path / "not-a-program"
    program.write_bytes(b"\x00\x01")
    program.chmod(0o755)
    result = nccl_launch("run", "--nccl-debug", "p", "--", str(program))
    said = f"nccl-launch: cannot execute {program}: Exec format error\n"
    assert (result.returncode, result.stderr) == (3, said)
    folder = tmp_path / "home" / ".local" / "state" / "nccl-launch" / "nccl-debug" / "p"
    assert list(folder.iterdir()) == []


def test_a_run_whose_log_folder_cannot_be_written_leaves_none_and_starts(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    """A full disk, as a file size limit of 0 makes it (`ulimit -f 0`: writing the folder's
    pid file fails with EFBIG where a full disk gives ENOSPC): a warning, the server started
    with NCCL's log in its output, no folder left behind."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    result = subprocess.run(
        ["bash", "-c", 'ulimit -f 0 && exec "$0" "$@"', console_script(),
         "run", "--nccl-debug", "p", "--", "env"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "NCCL_DEBUG=INFO" in result.stdout.splitlines()
    assert "NCCL_DEBUG_FILE=" not in result.stdout
    folder = tmp_path / "home" / ".local" / "state" / "nccl-launch" / "nccl-debug" / "p"
    assert result.stderr.startswith(
        f"nccl-launch: warning: cannot write in NCCL's log folder {folder}/"
    )
    assert result.stderr.endswith(
        ": File too large; NCCL's log goes to the server's output, where check cannot read it\n"
    )
    assert list(folder.iterdir()) == []


def test_capture_of_a_server_started_with_nccl_debug_leaves_out_what_it_added(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """Not NCCL_DEBUG=INFO and the old run's NCCL_DEBUG_FILE in [nccl]: every later run would
    write into that folder, and run --nccl-debug would refuse the profile."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    out = tmp_path / "server.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(STANDIN),
        "STANDIN_RECORD": str(out),
        "STANDIN_WAIT": "1",
    }
    argv = [console_script(), "run", "--nccl-debug", "p", "--", sys.executable, "-m",
            "sglang.launch_server", "--model", "/m"]  # fmt: skip
    result = while_running(
        argv,
        env,
        tmp_path,
        out,
        lambda pid: run_cli("capture", "--pid", str(pid), "-o", "live.toml"),
    )
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("live.toml").read_text())["nccl"] == {"PROTO": "LL"}
    assert (
        "nccl-launch: warning: left out what run --nccl-debug added (run the profile with "
        "--nccl-debug for them): NCCL_DEBUG, NCCL_DEBUG_FILE, NCCL_DEBUG_SUBSYS"
    ) in result.stderr.splitlines()
    assert run_cli("run", "--dry-run", "--nccl-debug", "live.toml").returncode == 0


# Processes of uid 65534, each a `sleep` whose NCCL_DEBUG_FILE names a file of the test's,
# checked by root's console script in a PID namespace of the test's own (PID 1 is this
# driver: everything left dies with it). The driver writes each process's NCCL lines for it
# (its PID in their prefix) and says which watched files anyone opened (inotify: an O_PATH
# look opens nothing).
OTHERS_DRIVER = r"""
import ctypes, json, os, struct, subprocess, sys, time

script, profile, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
inotify = libc.inotify_init1(os.O_NONBLOCK)
watched = {libc.inotify_add_watch(inotify, path.encode(), 0x20): path  # IN_OPEN
           for path in spec["watch"]}
children = spec["children"]
shell = " ".join(f"CHILD={n} NCCL_DEBUG_FILE='{child['file']}' sleep 600 &"
                 for n, child in enumerate(children))
env = {"PATH": "/usr/bin:/bin", "NCCL_LAUNCH_NCCL_DEBUG": "1", "NCCL_PROTO": "LL"}
nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
root = subprocess.Popen([*nobody, "sh", "-c", shell + " wait"], env=env)
pids = {}  # the child's index -> its pid
deadline = time.monotonic() + 30
while len(pids) < len(children):
    assert root.poll() is None and time.monotonic() < deadline, "the tree never came up"
    for pid in open(f"/proc/{root.pid}/task/{root.pid}/children").read().split():
        try:  # its environment is read once its exec is done (until then: none, or sh's)
            if os.readlink(f"/proc/{pid}/exe").endswith("/sleep"):
                environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                for child in (e for e in environ if e.startswith(b"CHILD=")):
                    pids[int(child[6:])] = int(pid)
        except OSError:
            pass
    time.sleep(0.05)
for n, child in enumerate(children):  # in order, each process's lines under its own PID
    if not child["lines"]:  # never opened here: a FIFO would wait for a reader
        continue
    with open(child["file"], "a") as file:
        file.write("".join(line.format(pid=pids[n]) for line in child["lines"]))
for path, size in spec.get("pad", {}).items():
    with open(path, "a") as file:
        file.write(("vm:1:1 [0] NCCL INFO padding " + "x" * 90 + "\n") * (size // 121))

def check(*args):
    argv = [script, "check", "--pid", str(root.pid), profile, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}

found = {"text": check(), "json": check("--format", "json")}
found["pids"] = [pids[n] for n in range(len(children))]
events = b""
while True:
    try:
        events += os.read(inotify, 65536)
    except BlockingIOError:
        break
opened = set()
while events:
    wd, _, _, length = struct.unpack("iIII", events[:16])
    opened.add(watched[wd])
    events = events[16 + length:]
found["opened"] = sorted(opened)
print(json.dumps(found))
"""


def by_nobody(
    profile: Path, children: list[dict[str, Any]], watch: list[Path], pad: dict[str, int]
) -> dict[str, Any]:
    """OTHERS_DRIVER's findings: `children` ({"file", "lines"}) as processes of uid 65534."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (processes of another user) and setpriv (to act as a user)")
    spec = {"children": children, "watch": [str(path) for path in watch], "pad": pad}
    # --kill-child: the namespace's PID 1 (and with it all else) dies with unshare, a timeout's
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-c",
            OTHERS_DRIVER, console_script(), str(profile), json.dumps(spec)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


NOBODY = 65534
PROTO_LINE = "vm:{pid}:{pid} [0] NCCL INFO NCCL_PROTO set by environment to "


def test_a_file_processes_share_is_read_once_a_look_each_judged_by_its_own_lines(
    tmp_path: Path, write_profile: WriteProfile
) -> None:
    """Three processes of one user name one NCCL_DEBUG_FILE (no %p): each line belongs to the
    PID in its prefix; the file is read once a look, the first LOOK_LIMIT bytes of it, and
    every process's record says so."""
    profile = write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    shared = tmp_path / "shared.log"
    shared.touch()
    os.chown(shared, NOBODY, NOBODY)
    children = [
        {"file": str(shared), "lines": [PROTO_LINE + value + "\n"]}
        for value in ("LL", "Simple", "LL")
    ]
    found = by_nobody(profile, children, [], {str(shared): LOOK_LIMIT + (1 << 20)})
    size = shared.stat().st_size
    assert found["json"]["code"] == 1, found["json"]
    report = json.loads(found["json"]["out"])
    logs = {p["pid"]: p for p in report["processes"] if p["nccl_log"] is not None}
    first, drifted, third = (logs[pid] for pid in found["pids"])
    for each in (first, third):
        assert each["nccl_log"]["confirmed"] == ["NCCL_PROTO"]
        assert [e for e in each["entries"] if not e["tolerated"]] == []
    [entry] = [e for e in drifted["entries"] if not e["tolerated"]]
    assert (entry["actual"], entry["source"]) == ("Simple", "NCCL's log")
    for each in (first, drifted, third):  # the one file read once, as far as the bound
        assert (each["nccl_log"]["read_bytes"], each["nccl_log"]["size_bytes"]) == (
            LOOK_LIMIT, size)  # fmt: skip
    said = f"  NCCL's log {shared}: 1 applied as the profile; read the first 4.0 MiB of its "
    assert found["text"]["out"].count(f"{said}{size / (1 << 20):.1f} MiB so far") == 2


def test_check_looks_at_a_file_before_opening_it_and_tells_nothing_of_others_files(
    tmp_path: Path, write_profile: WriteProfile
) -> None:
    """Processes of uid 65534 name root's files as their NCCL logs: a regular file, a
    device, a FIFO. None is opened, and each reads in the report as a file that is not
    there: what root owns is not told to whoever reads the report. A FIFO of the user's own
    is said, unopened too; a regular file of its own is read."""
    profile = write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    secret, device, fifo = tmp_path / "secret", tmp_path / "device", tmp_path / "fifo"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    os.mkfifo(fifo, 0o600)
    own_fifo, own = tmp_path / "own-fifo", tmp_path / "own"
    os.mkfifo(own_fifo, 0o600)
    own.touch()
    for path in (own_fifo, own):
        os.chown(path, NOBODY, NOBODY)
    files = [secret, device, fifo, tmp_path / "missing", own_fifo, own]
    children = [{"file": str(path), "lines": []} for path in files]
    children[-1]["lines"] = [PROTO_LINE + "LL\n"]
    found = by_nobody(profile, children, [secret, device, fifo, own_fifo, own], {})
    assert found["opened"] == [str(own)]
    report = json.loads(found["json"]["out"])
    logs = {Path(p["nccl_log"]["file"]).name: p["nccl_log"] for p in report["processes"]
            if p["nccl_log"] is not None}  # fmt: skip
    nothing: dict[str, Any] = {"state": "none-yet", "reason": None, "confirmed": [], "not_read": [],
               "read_bytes": 0, "size_bytes": 0}  # fmt: skip
    for name in ("secret", "device", "fifo", "missing"):
        assert logs[name] == nothing | {"file": str(tmp_path / name)}
        said = f"  NCCL's log {tmp_path / name}: nothing of the process's own yet (NCCL has not"
        assert f"{said} started in it)\n" in found["text"]["out"]
    assert logs["own-fifo"]["reason"] == "a FIFO; only regular files are read"
    assert (logs["own"]["state"], logs["own"]["confirmed"]) == ("read", ["NCCL_PROTO"])
