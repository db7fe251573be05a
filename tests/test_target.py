"""A running server named by PID, pidfile, port or URL is found by one resolver and held by a
pidfd while it is read: each target problem is one line with exit 3, worded the same by
every command that meets it, and a process that ends (or whose PID is taken) between the
resolve and the read is reported, never read."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.profile.load import load_profile
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import EVIL, PROFILE, free_port, sleeper, wait_for

MISSING = "4194303"  # the highest PID Linux gives: unused here
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


@pytest.fixture
def standin(write_profile: WriteProfile) -> None:
    write_profile("standin", PROFILE.format(version=1, python=sys.executable, port=1,
                                            buffsize="4MiB"))  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("check", "--pid", MISSING),
        ("capture", "--pid", MISSING),
        # A URL of another host: bench checks the process --pid names.
        ("bench", "standin", "--url", "http://192.0.2.1:30000", "--pid", MISSING),
    ],
    ids=["check", "capture", "bench"],
)
def test_a_pid_that_names_no_process_is_one_line_and_exit_3_for_every_command(
    args: tuple[str, ...], standin: None, run_cli: RunCli
) -> None:
    result = run_cli(*args)
    assert (result.returncode, result.stdout, result.stderr) == (
        3, "", f"nccl-launch: no process with pid {MISSING}\n")  # fmt: skip


def a_kernel_thread() -> tuple[int, str]:
    """A kernel thread's PID and name (kthreadd is PID 2 on a host, absent in a container)."""
    for pid in sorted(int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()):
        with contextlib.suppress(OSError):
            name, _, rest = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")
            if int(rest.split()[6]) & 0x00200000:  # PF_KTHREAD
                return pid, name.partition(b" (")[2].decode()
    pytest.skip("no kernel thread is visible here (a container's PID namespace)")


@pytest.mark.parametrize("command", ["check", "capture"])
def test_a_kernel_thread_is_said_to_be_one_never_a_reused_pid(
    command: str, run_cli: RunCli
) -> None:
    pid, name = a_kernel_thread()
    result = run_cli(command, "--pid", str(pid))
    assert (result.returncode, result.stdout, result.stderr) == (
        3,
        "",
        f"nccl-launch: pid {pid} is a kernel thread ({name}), not a server: it runs no program "
        "and has no environment; name the server's main process\n",
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [("", "''"), ("4194304\n", "'4194304'"), ("12 13\n", "'12 13'")],
)
def test_a_pidfile_that_holds_no_pid_is_a_target_problem(
    content: str, said: str, run_cli: RunCli
) -> None:
    Path("server.pid").write_text(content)
    result = run_cli("check", "--pidfile", "server.pid")
    assert (result.returncode, result.stderr) == (
        3, f"nccl-launch: pidfile server.pid holds {said}, not a PID\n")  # fmt: skip


@pytest.fixture
def listener() -> Iterator[tuple[int, int]]:
    """A process listening on 127.0.0.1: its PID and port."""
    port = free_port()
    script = (
        "import socket, sys\n"
        f"s = socket.create_server(('127.0.0.1', {port})); print(flush=True); sys.stdin.read()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"\n"  # listening
        yield process.pid, port
    finally:
        process.communicate(timeout=10)


def test_bench_refuses_a_pid_that_does_not_own_the_urls_listener(
    listener: tuple[int, int], standin: None, run_cli: RunCli
) -> None:
    owner, port = listener
    with sleeper({b"NCCL_PROTO": b"LL"}) as other:  # a sibling: the listener is not its child
        result = run_cli("bench", "standin", "--url", f"http://127.0.0.1:{port}",
                         "--pid", str(other))  # fmt: skip
    assert (result.returncode, result.stderr) == (
        3,
        f"nccl-launch: --pid {other}: pid {owner} listens on 127.0.0.1:{port}, and it is not "
        f"in pid {other}'s tree; the server measured must be the one checked\n",
    )


def test_a_url_whose_host_cannot_be_resolved_is_a_target_problem(
    standin: None, run_cli: RunCli
) -> None:
    host = "a" * 64 + ".example"  # a label longer than DNS allows: refused without a network
    result = run_cli("bench", "standin", "--url", f"http://{host}:30000")
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith(f"nccl-launch: --url: cannot resolve {host}: ")
    assert len(result.stderr.splitlines()) == 1


def test_capture_of_another_users_process_is_denied_in_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (a process of another user's) and setpriv (to act as a user)")
    with sleeper({b"NCCL_PROTO": b"LL"}) as pid:  # root's: nobody may not read its /proc
        done = subprocess.run(
            [*AS_NOBODY, console_script(), "capture", "--pid", str(pid), "-o", str(tmp_path / "p")],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        )  # fmt: skip
    if "Permission denied" in done.stderr and "nccl-launch:" not in done.stderr:
        pytest.skip(f"the console script cannot run as nobody here: {done.stderr}")
    denied = f"permission denied reading process {pid}; run as its user or root"
    assert (done.returncode, done.stderr) == (3, f"nccl-launch: {denied}\n")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("file", ["root-only.toml", "missing.toml"])
def test_a_profile_file_another_users_process_records_is_read_only_where_that_user_may(
    file: str, tmp_path: Path, run_cli: RunCli
) -> None:
    """Its environment is its user's to write: a root-only TOML file it names as the profile
    it was started from is neither read nor quoted by root's `check`, and reads as a file
    that is not there."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (beside another user's process) and setpriv (to act as a user)")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "root-only.toml").write_text('schema = 1\nname = "q"\nversion = "hunter-2x"\n')
    (private / "root-only.toml").chmod(0o600)
    markers = ["NCCL_LAUNCH_PROFILE=q@1", f"NCCL_LAUNCH_PROFILE_FILE={private / file}"]
    process = subprocess.Popen([*AS_NOBODY, "env", "-i", *markers, "sleep", "60"])
    try:
        wait_for(lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes() == b"sleep\x0060\x00",
                 "the process to start")  # fmt: skip
        result = run_cli("check", "--pid", str(process.pid))
    finally:
        process.kill()
        process.wait()
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("nccl-launch: profile 'q' not found; searched "), result.stderr


# Between the resolve and the read: the console script stops itself once it holds the
# process (a sitecustomize wraps the resolver's hold, nothing else), the server ends or
# a newcomer takes its PID, and the script goes on. In a PID namespace of the test's own,
# where writing ns_last_pid chooses the next PID; the driver is its PID 1, and every process
# left in it dies with the driver.

PAUSE = """
import contextlib, os, signal
from nccl_launch.live import resolve

held = resolve.hold_pid

@contextlib.contextmanager
def paused(pid, create_time=None):
    with held(pid, create_time) as server:
        os.kill(os.getpid(), signal.SIGSTOP)
        yield server

resolve.hold_pid = paused
"""

BETWEEN = """
import json, os, signal, subprocess, sys

script, site, out, mode = sys.argv[1:]
old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                       env={"NCCL_PROTO": "LL"})
capture = subprocess.Popen([script, "capture", "--pid", str(old.pid), "-o", out],
                           env={**os.environ, "PYTHONPATH": site},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
_, status = os.waitpid(capture.pid, os.WUNTRACED)
assert os.WIFSTOPPED(status), status  # it holds the process, and has read nothing yet
old.kill()
old.wait()
if mode == "reused":
    with open("/proc/sys/kernel/ns_last_pid", "w") as file:
        file.write(str(old.pid - 1))
    argv = ["sleep", "1000"]
    newcomer = subprocess.Popen(argv, env={"NCCL_PROTO": "Simple", "HF_TOKEN": "hf_newcomer"})
    assert newcomer.pid == old.pid, (newcomer.pid, old.pid)
capture.send_signal(signal.SIGCONT)
stdout, stderr = capture.communicate(timeout=30)
found = {"pid": old.pid, "code": capture.returncode, "out": stdout, "err": stderr}
print(json.dumps({**found, "written": os.path.exists(out)}))
"""


def between_resolve_and_read(mode: str, tmp_path: Path) -> dict[str, Any]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSE)
    out = str(tmp_path / "captured.toml")
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", BETWEEN,
            console_script(), str(site), out, mode]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize(
    ("mode", "said"),
    [("ended", "ended"), ("reused", "ended, and its PID now names another process")],
)
def test_capture_reads_nothing_of_a_process_that_ended_between_resolve_and_read(
    mode: str, said: str, tmp_path: Path
) -> None:
    found = between_resolve_and_read(mode, tmp_path)
    assert (found["code"], found["out"], found["written"]) == (3, "", False), found["err"]
    assert found["err"] == f"nccl-launch: pid {found['pid']} {said}\n"
    assert "hf_newcomer" not in found["err"]


# Which process a pidfile may name, as root: a red team beside two users, one of whom writes a
# pidfile naming the other's server. In a PID namespace of the test's own (the driver is its
# PID 1: every process left in it dies with the driver); the server runs as `user` by setpriv.

PIDFILE = """
import json, os, subprocess, sys, time

config = json.loads(sys.argv[1])
user = config["user"]
as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
server = subprocess.Popen([*as_user, "sleep", "600"], env=config["env"])
comm = f"/proc/{server.pid}/comm"
for _ in range(600):  # until setpriv has become the server
    if open(comm).read() == "sleep\\n":
        break
    time.sleep(0.05)
folder, pidfile = config["folder"], os.path.join(config["folder"], "server.pid")
os.makedirs(folder)
os.chown(folder, config["folder_owner"], config["folder_owner"])
with open(pidfile, "w") as file:
    file.write(f"{server.pid}\\n")
os.chown(pidfile, config["owner"], config["owner"])
os.chmod(pidfile, config["mode"])
argv = [config["script"], "check", "--pidfile", pidfile, *config["args"]]
done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
found = {"pid": server.pid, "pidfile": pidfile, "code": done.returncode, "out": done.stdout}
print(json.dumps({**found, "err": done.stderr, "alive": server.poll() is None}))
"""

USER, OTHER = 1000, 65534  # the server's user, and the one who writes the pidfile
STOP = ("evil", "--watch", "0.2", "--on-drift", "stop", "--grace", "1")


def pidfile_check(
    tmp_path: Path, env: dict[str, str], *args: str, owner: int, mode: int, folder_owner: int = 0
) -> dict[str, Any]:
    """`check --pidfile F ARGS` as root of a server run by USER with `env`, F owned by `owner`
    with `mode` in a folder of `folder_owner`'s; the driver's findings."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("unshare") is None:
        pytest.skip("needs root, setpriv (a server of another user's) and unshare")
    config = {
        "user": USER, "env": env, "folder": str(tmp_path / "run"), "folder_owner": folder_owner,
        "owner": owner, "mode": mode, "script": console_script(), "args": args,
    }  # fmt: skip
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PIDFILE,
            json.dumps(config)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def started_as_evil(write_profile: WriteProfile, digest: str | None = None) -> dict[str, str]:
    """A drifted environment of a server that `run` started as evil@1 (of `digest`, else the
    profile's own)."""
    path = write_profile("evil", EVIL)
    own = load_profile(str(path)).plan.digest
    markers = {"NCCL_LAUNCH_PROFILE": "evil@1", "NCCL_LAUNCH_DIGEST": digest or own}
    return {"NCCL_PROTO": "Simple", **markers}


FIX = "chown root and chmod go-w, or move it out of reach of other users"


@pytest.mark.parametrize(
    ("owner", "mode", "folder_owner", "said"),
    [
        (OTHER, 0o644, 0, f"owned by uid {OTHER}, not root or uid {USER}; chown root and chmod "
                          "go-w (chgrp the service's group and chmod 0640 where its User= must "
                          f"read it), or run this as uid {OTHER}"),
        (USER, 0o664, USER, f"writable by group or others (mode 0664); {FIX}"),
        (0, 0o644, OTHER, f"its directory {{folder}} (uid {OTHER}, mode 0755) lets other users "
                          f"replace it; {FIX}"),
    ],
    ids=["another-users", "group-writable", "in-another-users-folder"],
)  # fmt: skip
def test_as_root_a_pidfile_another_user_could_write_is_refused_and_nothing_signalled(
    owner: int, mode: int, folder_owner: int, said: str, write_profile: WriteProfile,
    tmp_path: Path,
) -> None:  # fmt: skip
    env = started_as_evil(write_profile)  # what --on-drift stop would end, named rightly
    found = pidfile_check(tmp_path, env, *STOP, owner=owner, mode=mode, folder_owner=folder_owner)
    assert (found["code"], found["out"], found["alive"]) == (3, "", True), found["err"]
    why = said.format(folder=tmp_path / "run")
    assert found["err"] == f"nccl-launch: pidfile {found['pidfile']}: {why}\n"


def test_as_root_the_pidfile_a_services_own_user_writes_is_trusted(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    # `User=svc` writing its PID into its own /run/svc: checked, never refused.
    env = started_as_evil(write_profile)
    found = pidfile_check(tmp_path, env, "evil", owner=USER, mode=0o644, folder_owner=USER)
    assert (found["code"], found["alive"]) == (1, True), found["err"]
    assert '~ NCCL_PROTO  "LL" -> "Simple"' in found["out"]


def test_on_drift_stop_never_signals_another_profiles_server_of_the_same_name(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    # The second user's own profile named evil, of another digest: the pidfile is that user's
    # own and trusted, and the server is not the profile's.
    other = "sha256:" + "0" * 64
    env = started_as_evil(write_profile, other)
    found = pidfile_check(tmp_path, env, *STOP, owner=USER, mode=0o644, folder_owner=USER)
    assert (found["code"], found["out"], found["alive"]) == (3, "", True), found["err"]
    digest = load_profile("profiles/evil.toml").plan.short_digest
    assert found["err"] == (
        f"nccl-launch: pid {found['pid']} was not started by nccl-launch as evil@1: it runs "
        f"'evil@1 (sha256:00000000)', the profile is {digest}; --on-drift stop signals only such "
        "a server (a stale pidfile names another process)\n"
    )


def test_capture_of_another_users_process_reads_no_env_file_that_user_may_not(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """A process of uid 65534 naming a profile it may read, whose env file only root may:
    what that file holds is never compared with the process's words (an oracle of root's
    secret), so the word it guessed right is written as the process gave it."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (beside another user's process) and setpriv (to act as a user)")
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # tmp_path is root's 0700: none may read there
    try:
        folder.chmod(0o755)
        (folder / "sglang").mkdir()
        (folder / "sglang" / "__init__.py").write_text("")
        (folder / "sglang" / "launch_server.py").write_text("import time; time.sleep(60)\n")
        (folder / "p.env").write_text("TENANT=root-secret-7\n")
        (folder / "p.env").chmod(0o600)
        profile = folder / "p.toml"
        profile.write_text(
            'schema = 1\nname = "p"\nversion = 1\nenv_files = ["p.env"]\n[server]\n'
            'python = "/usr/bin/python3"\nmodel_path = "/m"\n'
            'args = ["--served-model-name", "${TENANT}"]\n'
        )
        argv = [word.replace("${TENANT}", "root-secret-7") for word in
                load_profile(str(profile)).plan.argv]  # fmt: skip
        env = ["env", "-i", f"PYTHONPATH={folder}", "NCCL_LAUNCH_PROFILE=p@1",
               f"NCCL_LAUNCH_PROFILE_FILE={profile}"]  # fmt: skip
        process = subprocess.Popen([*AS_NOBODY, *env, *argv])
        try:
            wait_for(lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[:-1]
                     == [os.fsencode(word) for word in argv], "the process to start")  # fmt: skip
            result = run_cli("capture", "--pid", str(process.pid), "-o", str(tmp_path / "c.toml"))
        finally:
            process.kill()
            process.wait()
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stderr
    captured = tomllib.loads((tmp_path / "c.toml").read_text())
    assert "env_files" not in captured
    assert captured["server"]["args"][-2:] == ["--served-model-name", "root-secret-7"]


def test_check_of_another_users_process_by_its_markers_reads_no_file_that_user_may_not(
    run_cli: RunCli,
) -> None:
    """A process of uid 65534 naming a profile it may read, whose env file only root may:
    root's check never compares that file's value with the process's (a drift or a match
    would tell the user whether it guessed root's secret)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (beside another user's process) and setpriv (to act as a user)")
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # tmp_path is root's 0700: none may read there
    try:
        folder.chmod(0o755)
        (folder / "p.env").write_text("HF_TOKEN=root-secret-7\n")
        (folder / "p.env").chmod(0o600)
        profile = folder / "p.toml"
        profile.write_text('schema = 1\nname = "p"\nversion = 1\nenv_files = ["p.env"]\n')
        env = ["env", "-i", "NCCL_LAUNCH_PROFILE=p@1", f"NCCL_LAUNCH_PROFILE_FILE={profile}",
               "HF_TOKEN=a-guess"]  # fmt: skip
        process = subprocess.Popen([*AS_NOBODY, *env, "sleep", "60"])
        try:
            cmdline = Path(f"/proc/{process.pid}/cmdline")
            wait_for(lambda: cmdline.read_bytes() == b"sleep\x0060\x00", "the process to start")
            result = run_cli("check", "--pid", str(process.pid))
        finally:
            process.kill()
            process.wait()
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "HF_TOKEN" not in result.stdout + result.stderr


def test_a_target_problem_is_a_finding_with_a_code_and_whose_problem_it_is() -> None:
    """The resolver refuses with findings: a target that names no process is this host's
    (exit 3), a URL that is no server's the command line's (exit 2)."""
    from nccl_launch.findings import Refused
    from nccl_launch.live.resolve import hold_pid, main_pid
    from nccl_launch.live.target import Target
    from nccl_launch.live.url import checked_url

    with pytest.raises(Refused) as gone:
        hold_pid(int(MISSING)).__enter__()
    [found] = gone.value.findings
    assert (found.code, found.cause, gone.value.exit_code) == ("no-process", "host", 3)
    with pytest.raises(Refused) as both:
        main_pid(Target(pid=1, port=80))
    assert [each.code for each in both.value.findings] == ["target-count"]
    with pytest.raises(Refused) as url:
        checked_url("http://user:secret@127.0.0.1:30000")
    [found] = url.value.findings
    where = "--url http://***@127.0.0.1:30000"
    assert (found.code, found.where, url.value.exit_code) == ("url-user-info", where, 2)
