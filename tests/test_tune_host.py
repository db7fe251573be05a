"""`tune` and its host: no trial server outlives tune (killed with SIGKILL included), one a
killed tune left is stopped by the next tune of its journal, and a trial that failed for the
host (too little time to get ready, a full disk) is tried again, never journaled as the
candidate's outcome. On the stand-in SGLang server; kills in a PID namespace of their own, full
disks on a tmpfs in a mount namespace of their own: the host is never changed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, free_port
from tests.watching import free

pytestmark = pytest.mark.slow  # tunes: first in the run (tests/conftest.py)

PROFILE = """
schema = 1
name = "standin"
version = 1
[nccl]
PROTO = "LL"
ALGO = "Ring"
[server]
python = "{python}"
model_path = "/models/m"
tp_size = 2
port = {port}
"""
FAST = ["--max-tokens", "20", "--runs", "2", "--warmup", "0"]
STANDIN_ENV = {"PYTHONPATH": str(STANDIN), "STANDIN_TOKEN_RATE": "400"}


@pytest.fixture
def port(write_profile: WriteProfile) -> int:
    """profiles/standin.toml, its server the stand-in on this port."""
    port = free_port()
    write_profile("standin", PROFILE.format(python=sys.executable, port=port))
    return port


def tune_command(*more: str) -> list[str]:
    return [console_script(), "tune", "standin", "--try", "PROTO=LL128", *FAST, *more]


# PID 1 of a PID namespace: it runs each step's tune (killing it with SIGKILL once its trial's
# server listens, for a step that says so) and says, after each, what is left running in the
# namespace besides itself; whatever is left dies with it.
STEPS = """
import json, os, signal, socket, subprocess, sys, time
import psutil

def listening(port):
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0

def left():
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append({"pid": process.pid, "cmdline": process.cmdline()})
        except psutil.NoSuchProcess:
            pass
    return found

port, steps = int(sys.argv[1]), json.loads(sys.argv[2])
said = []
for step in steps:
    env = {**os.environ, **step["env"]}
    if step["kill"]:
        tune = subprocess.Popen(step["argv"], env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not listening(port) and time.monotonic() < deadline:
            time.sleep(0.02)
        tune.kill()
        tune.wait()
        deadline = time.monotonic() + 5  # what dies with it has this long
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        said.append({"left": left(), "listening": listening(port)})
    else:
        done = subprocess.run(step["argv"], env=env, capture_output=True, text=True, timeout=120)
        said.append({"code": done.returncode, "out": done.stdout, "err": done.stderr,
                     "left": left(), "listening": listening(port)})
print(json.dumps(said))
"""


def in_pid_namespace(port: int, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", STEPS]
    argv += [str(port), json.dumps(steps)]
    done = subprocess.run(
        argv, env={**os.environ, **STANDIN_ENV}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    said: list[dict[str, Any]] = json.loads(done.stdout)
    return said


# Trial 1's server listens, and stays unready while tune is killed.
SLOW = {"STANDIN_START_DELAY": "60"}


def test_a_tune_killed_with_sigkill_mid_trial_leaves_no_server(port: int) -> None:
    kill = {"argv": tune_command("--ready-timeout", "120"), "env": SLOW, "kill": True}
    (killed,) = in_pid_namespace(port, [kill])
    assert killed == {"left": [], "listening": False}
    assert free(port)


def test_a_server_a_killed_tune_left_is_stopped_by_the_next_tune_first(port: int) -> None:
    # A server that clears the parent-death signal outlives the tune killed meanwhile.
    kill = {
        "argv": tune_command("--ready-timeout", "120"),
        "env": SLOW | {"STANDIN_OUTLIVE_PARENT": "1"},
        "kill": True,
    }
    resume = {"argv": tune_command("--ready-timeout", "5"), "env": {}, "kill": False}
    killed, resumed = in_pid_namespace(port, [kill, resume])
    (server, *workers) = killed["left"]
    assert server["cmdline"][1:3] == ["-m", "sglang.launch_server"], killed
    assert killed["listening"], killed
    assert resumed["code"] == 0, resumed["err"]
    first, *_ = resumed["err"].splitlines()
    assert re.fullmatch(
        rf"nccl-launch: warning: stopped a trial server a killed tune of this journal left "
        rf"running: pid {server['pid']}, candidate sha256:[0-9a-f]{{8}}, started by tune pid "
        rf"\d+ \({1 + len(workers)} processes\)",
        first,
    ), resumed["err"]
    assert "trial 1: starting" in resumed["out"]  # it was never finished: tried again
    assert (resumed["left"], resumed["listening"]) == ([], False)


def test_a_trial_not_ready_in_time_is_tried_again_when_given_longer(
    port: int, run_cli: RunCli
) -> None:
    env = STANDIN_ENV | {"STANDIN_START_DELAY": "1.5"}  # ready after 1.5 s
    tune = ["tune", "standin", "--try", "PROTO=LL128", *FAST, "--budget", "1", "--ready-timeout"]
    short = run_cli(*tune, "1", env=env)
    assert short.returncode == 1, short.stdout + short.stderr
    assert "trial 1 not-ready: no answer 200 from /health within 1 s" in short.stdout
    shorter = run_cli(*tune, "0.5", env=env)  # given less: the journal's answer stands
    assert "trial 1 (from the journal): not-ready: " in shorter.stdout
    longer = run_cli(*tune, "5", env=env)
    assert longer.returncode == 1, longer.stdout + longer.stderr  # --budget 1: undecided
    assert "trial 1: starting" in longer.stdout
    assert re.search(r"^trial 1 in [\d.]+ s: measured ", longer.stdout, re.MULTILINE), longer.stdout


def test_a_trial_whose_request_timed_out_is_tried_again_when_given_longer(
    port: int, run_cli: RunCli
) -> None:
    env = STANDIN_ENV | {"STANDIN_TTFT": "0.5"}  # each request's first token after 0.5 s
    tune = ["tune", "standin", "--try", "PROTO=LL128", *FAST, "--budget", "1", "--timeout"]
    short = run_cli(*tune, "0.2", env=env)
    assert short.returncode == 1, short.stdout + short.stderr
    assert "trial 1 in " in short.stdout and ": failed: " in short.stdout, short.stdout
    longer = run_cli(*tune, "5", env=env)
    assert longer.returncode == 1, longer.stdout + longer.stderr  # --budget 1: undecided
    assert "trial 1: starting" in longer.stdout


STATE = "home/.local/state"


def on_a_full_disk(tmp_path: Path, script: str, env: dict[str, str]) -> str:
    """Run `script` (sh) in a mount namespace where the state folder is a 256 KiB tmpfs, with
    $CLI the console script and $STATE that folder; its output. FILL=1 fills it."""
    state = tmp_path / STATE
    state.mkdir(parents=True)
    head = 'mount -t tmpfs -o size=256k,mode=0700 tmpfs "$STATE"\n'
    head += 'if [ -n "$FILL" ]; then dd if=/dev/zero of="$STATE/fill" bs=4k 2>/dev/null || :; fi\n'
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", head + script],
        env={**os.environ, **env, "CLI": console_script(), "STATE": str(state)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(state.iterdir())  # the tmpfs went with the namespace
    return done.stdout


def test_a_full_disk_is_exit_3_for_tune_and_new(port: int, tmp_path: Path) -> None:
    script = """
    "$CLI" tune standin --try PROTO=LL128 --budget 1 2>&1; echo "exit $?"
    "$CLI" new copy --from standin --dir "$STATE" 2>&1; echo "exit $?"
    """
    out = on_a_full_disk(tmp_path, script, STANDIN_ENV | {"FILL": "1"})
    folder = next(line for line in out.splitlines() if line.startswith("tuning "))
    folder = folder.split("journal ")[1].rsplit("/", 1)[0]
    assert re.fullmatch(
        "tuning standin@1; journal .*\n"
        "the search starts a server at least 4 times .*\n"
        "trial 1: starting sha256:[0-9a-f]{8}, changes: none\n"
        f"nccl-launch: {folder}/[0-9a-f]{{16}}.toml: cannot write: No space left on device\n"
        "exit 3\n"
        f"nccl-launch: {tmp_path / STATE}/copy.toml: cannot write: No space left on device\n"
        "exit 3\n",
        out,
    ), out


def test_a_server_that_failed_on_a_full_disk_is_tried_again_not_journaled(
    port: int, tmp_path: Path
) -> None:
    # Trial 1 is measured; then the stand-in logs 1 MiB at start: on the 256 KiB disk its log
    # fills it, and it exits (the journal's last block still has room for a line).
    script = """
    tune() { "$CLI" tune standin --try PROTO=LL128 --max-tokens 20 --runs 2 "$@" 2>&1; }
    tune --budget 1 >/dev/null
    STANDIN_LOG_BYTES=1048576 tune --budget 2; echo "exit $?"
    echo ---
    cat "$STATE"/nccl-launch/tune/*/journal.jsonl
    echo ---
    mount -o remount,size=16m "$STATE"
    tune --budget 2; echo "exit $?"
    """
    full, journal, resumed = on_a_full_disk(tmp_path, script, STANDIN_ENV).split("---\n")
    folder = re.escape(f"{tmp_path / STATE}/nccl-launch/tune/standin@1-") + "[0-9a-f]{12}"
    assert re.search(
        r"\ntrial 2: starting sha256:(?P<short>[0-9a-f]{8}), changes: none\n"
        rf"nccl-launch: the trial's server failed, and the file system of its log {folder}/"
        r"(?P=short)[0-9a-f]{8}\.log is full; the trial is not recorded: free some space, and "
        r"the same command tries it again\nexit 3\n$",
        full,
    ), full
    lines = [json.loads(line) for line in journal.splitlines()]
    statuses = [(line["outcome"] or {}).get("status") for line in lines]
    # Each trial of the first tune (a start of the search, the confirmation's) started and
    # finished; the second's trial 2 (the profile's second start) started, and never finished.
    assert statuses == [None, "measured"] * (len(statuses) // 2) + [None]
    assert "trial 1 (from the journal): measured" in resumed, resumed
    assert "trial 2: starting" in resumed, resumed
    assert resumed.endswith("exit 1\n"), resumed  # --budget 2: undecided
