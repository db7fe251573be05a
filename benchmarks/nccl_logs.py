"""What `check` costs beside NCCL logs of any size: root's one-shot `check`, and a `--watch`,
of a tree of another user's processes that all name one large NCCL_DEBUG_FILE
(docs/performance.md#nccl-logs-of-any-size).

Run as root: .venv/bin/python benchmarks/nccl_logs.py [--processes 51] [--mib 200] [--rounds 5]

The tree: `sh` and its `sleep` children as uid 65534 (setpriv), each with the profile's
variables, NCCL_LAUNCH_NCCL_DEBUG=1 and one NCCL_DEBUG_FILE (no %p: the one file for all). The
file is the user's own: first each process's NCCL lines as NCCL 2.28.9 wrote them for a rank of
two (tests/logs), under its own PID, then lines up to the size that each say something new
(a value of every name NCCL reads and of names it never reads, a communicator, a warning) for
one process after another. Figures: the wall time and
max RSS of each one-shot `check --pid ROOT bench` (median and max of the rounds), and the max
RSS of a `check --watch 0.2` run for --watch-seconds. Exit 1 when the one-shot check is over
GUARD_SECONDS or GUARD_BYTES. Nothing here is a test: CI does not time anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import KIMI, NCCL_LAUNCH, PYTHON, describe, setup

from nccl_launch.nccl import catalog

GUARD_SECONDS = 5.0
GUARD_BYTES = 100_000_000  # 100 MB
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
RANK_LOG = Path(__file__).parent.parent / "tests" / "logs" / "nccl-2.28.9-two-ranks.log"
# Runs argv, stops it with SIGINT after argv[1] seconds (none: let it end), prints its max RSS.
PROBE = (
    "import resource, signal, subprocess, sys, time\n"
    "seconds, argv = float(sys.argv[1]), sys.argv[2:]\n"
    "child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "if seconds:\n"
    "    time.sleep(seconds)\n"
    "    child.send_signal(signal.SIGINT)\n"
    "child.wait()\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def start_tree(count: int, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`count` processes of uid 65534 (sh and count-1 sleeps) that all name `log`."""
    tree_env = {f"NCCL_{key}": value for key, value in KIMI.items()} | {
        "PATH": "/usr/bin:/bin",
        "NCCL_LAUNCH_NCCL_DEBUG": "1",
        "NCCL_DEBUG_FILE": str(log),
    }
    shell = "sleep 600 & " * (count - 1) + "wait"
    tree = subprocess.Popen([*NOBODY, "sh", "-c", shell], env=tree_env)
    deadline = time.monotonic() + 30
    while len(children(tree.pid)) < count - 1 or not all(
        Path(f"/proc/{pid}/exe").readlink().name == "sleep" for pid in children(tree.pid)
    ):
        if time.monotonic() > deadline or tree.poll() is not None:
            sys.exit("nccl_logs: the tree did not start")
        time.sleep(0.05)
    return tree


def children(pid: int) -> list[int]:
    return [int(each) for each in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def write_log(log: Path, pids: list[int], size: int) -> None:
    """Each process's NCCL lines of a rank under its own PID, then new facts up to `size`."""
    rank = [line for line in RANK_LOG.read_text().splitlines() if line.startswith("vm:512:")]
    names = [*sorted(catalog.catalog()), *(f"NCCL_X{n}" for n in range(1000))]
    with log.open("w") as file:
        for pid in pids:
            file.write("".join(line.replace("vm:512:", f"vm:{pid}:") + "\n" for line in rank))
        n = 0
        while file.tell() < size:
            lines = []
            for _ in range(10_000):
                pid = pids[n % len(pids)]
                head = f"vm:{pid}:{pid} [0]"
                lines.append(
                    (
                        f"{head} NCCL INFO {names[n // 4 % len(names)]} set by environment to {n}",
                        f"{head} NCCL INFO ncclCommInitRankConfig comm 0x{n:x} rank 0 nranks 2"
                        " cudaDev 0 nvmlDev 0 busId 60 commId 0x1 - Init START",
                        f"[2026-12-04 18:03:05] {head} misc/x.cc:{n} NCCL WARN flood {n}",
                        f"{head} NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
                    )[n % 4]
                )
                n += 1
            file.write("\n".join(lines) + "\n")
    os.chown(log, 65534, 65534)


def measured(argv: list[str], env: dict[str, str], cwd: Path, seconds: float) -> tuple[float, int]:
    """Wall seconds and max RSS in bytes of argv, stopped after `seconds` (0: let it end)."""
    start = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-c", PROBE, str(seconds), *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start, int(done.stdout) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=51, help="processes (default 51)")
    parser.add_argument("--mib", type=int, default=200, help="size of the log (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="one-shot checks (default 5)")
    parser.add_argument("--watch-seconds", type=float, default=10.0, help="(default 10)")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        sys.exit("nccl_logs: run as root, with setpriv: the tree is another user's")
    describe()
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        env = setup(cwd)
        log = cwd / "shared.log"
        log.touch()
        tree = start_tree(args.processes, log, env)
        try:
            write_log(log, [tree.pid, *children(tree.pid)], args.mib << 20)
            size = log.stat().st_size
            print(
                f"a tree of {args.processes} processes of uid 65534 naming one NCCL_DEBUG_FILE"
                f" of {size / 1e6:.1f} MB ({size / (1 << 20):.1f} MiB)"
            )
            check = [NCCL_LAUNCH, "check", "--pid", str(tree.pid), "bench"]
            subprocess.run(check, env=env, cwd=cwd, capture_output=True, check=False)  # warm-up
            rounds = [measured(check, env, cwd, 0) for _ in range(args.rounds)]
            walls, rsses = [wall for wall, _ in rounds], [rss for _, rss in rounds]
            print(f"\none-shot check ({args.rounds} rounds)")
            print(f"  wall    median {statistics.median(walls):6.2f} s   max {max(walls):6.2f} s")
            print(
                f"  max RSS median {statistics.median(rsses) / 1e6:6.1f} MB  "
                f"max {max(rsses) / 1e6:6.1f} MB"
            )
            said = subprocess.run(
                check, env=env, cwd=cwd, capture_output=True, text=True, check=False
            )
            lines = [line for line in said.stdout.splitlines() if line.startswith("  NCCL's log")]
            print(f"  what it says of the file, for pid {tree.pid}:\n  {lines[0]}")
            watch = [*check, "--watch", "0.2"]
            _, rss = measured(watch, env, cwd, args.watch_seconds)
            print(f"\ncheck --watch 0.2, stopped after {args.watch_seconds:g} s")
            print(f"  max RSS {rss / 1e6:6.1f} MB")
        finally:
            for pid in children(tree.pid):
                os.kill(pid, signal.SIGTERM)
            tree.wait(timeout=30)
    over = []
    if max(walls) > GUARD_SECONDS:
        over.append(f"one-shot check took {max(walls):.2f} s, over {GUARD_SECONDS:g} s")
    if max(rsses) > GUARD_BYTES:
        over.append(f"one-shot check used {max(rsses) / 1e6:.1f} MB, over 100 MB")
    if over:
        sys.exit("nccl_logs: " + "; ".join(over))


if __name__ == "__main__":
    main()
