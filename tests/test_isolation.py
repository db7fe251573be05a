"""The autouse fixture in conftest.py: nothing of the host's NCCL setup reaches a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_launch.nccl.conf import conf_paths
from nccl_launch.profile.search import search_dirs
from tests.conftest import HOST_NAMES, HOST_PREFIXES, HOSTILE_ETC, Isolation, RunCli


def test_the_host_files_are_not_where_nccl_launch_looks(isolated: Isolation) -> None:
    assert conf_paths(os.environ) == [isolated.home / ".nccl.conf", isolated.system_conf]
    assert Path("/etc/nccl.conf") not in conf_paths(os.environ)
    assert search_dirs(os.environ)[-1] == isolated.system_dir
    assert Path("/etc/nccl-launch/profiles") not in search_dirs(os.environ)


def test_the_host_variables_are_dropped_and_the_paths_moved() -> None:
    host = {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root", "NCCL_PROTO": "Simple",
        "NCCL_LAUNCH_PATH": "/srv/profiles", "NCCL_LAUNCH_SYSTEM_CONF": "/etc/nccl.conf",
        "SGLANG_ENABLE_TORCH_COMPILE": "1", "SPT_NOENV": "1", "SLURM_NODEID": "1",
        "LWS_WORKER_INDEX": "0", "CUDA_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "0",
        "PYTHONPATH": "/elsewhere", "OMP_NUM_THREADS": "1", "NCCL_VERSION": "2.28.3-1",
        "CUDA_VERSION": "13.0.1", "NVIDIA_VISIBLE_DEVICES": "all",
    }  # fmt: skip
    # An NVIDIA image's own NV_* and NVIDIA_* reach every test, as .ci/run exports them: no
    # command may trip on them. Its NCCL_VERSION is cleared with NCCL_*, and set by the tests
    # of containers.
    assert Isolation(Path("/t")).environ(host) == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "HOME": "/t/home",
        "NCCL_LAUNCH_SYSTEM_DIR": "/t/etc/nccl-launch/profiles",
        "NCCL_LAUNCH_SYSTEM_CONF": "/t/etc/nccl.conf",
    }


def test_a_subprocess_inherits_the_isolated_environment(isolated: Isolation) -> None:
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    done = subprocess.run(
        [sys.executable, "-c", dump], capture_output=True, text=True, check=True, timeout=120
    )
    seen: dict[str, str] = json.loads(done.stdout)
    assert seen["HOME"] == str(isolated.home)
    assert seen["NCCL_LAUNCH_SYSTEM_CONF"] == str(isolated.system_conf)
    assert seen["NCCL_LAUNCH_SYSTEM_DIR"] == str(isolated.system_dir)
    host = [key for key in seen if key.startswith(HOST_PREFIXES) or key in HOST_NAMES]
    assert sorted(host) == ["NCCL_LAUNCH_SYSTEM_CONF", "NCCL_LAUNCH_SYSTEM_DIR"]


@pytest.mark.skipif(not HOSTILE_ETC, reason="only .ci/run (as root) puts an /etc/nccl.conf here")
def test_the_hostile_etc_nccl_conf_of_ci_is_there_and_ignored(nccl_launch: RunCli) -> None:
    """.ci/run's /etc/nccl.conf sets NCCL_ALGO, which a profile that does not declare it
    would be refused for (an undeclared value from an nccl.conf): a real process ignores it."""
    assert "NCCL_ALGO=Tree" in Path("/etc/nccl.conf").read_text().splitlines()
    Path("profiles/plain.toml").write_text('schema = 1\nname = "plain"\nversion = 1\n')
    result = nccl_launch("run", "--dry-run", "plain", "--", "true")
    assert (result.returncode, result.stderr) == (0, "")


SIGNALS_OF_A_CHILD = """
import signal, subprocess
import tests.conftest  # what the suite does at start, started here with SIGHUP and SIGINT ignored
status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
mask = next(line for line in status.splitlines() if line.startswith("SigIgn:"))
ignored = int(mask.split()[1], 16)
print(sorted(n for n in (signal.SIGHUP, signal.SIGINT) if ignored & 1 << (n - 1)))
print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
"""


def test_a_process_the_suite_starts_gets_sighup_and_sigint_though_nohup_ignored_them() -> None:
    """`nohup` (or a script's background) starts the suite with SIGHUP (SIGINT) ignored, which
    each process it starts would inherit across exec: the Ctrl-C and closed-terminal tests
    would then wait for a signal their child never sees. The suite itself stays immune."""
    result = subprocess.run(
        ["bash", "-c", "trap '' HUP INT; exec \"$@\"", "nohup", sys.executable, "-c",
         SIGNALS_OF_A_CHILD],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "[]\nFalse\n"), result.stderr
