"""Start-up, check and memory figures of nccl-launch beside its alternatives
(docs/performance.md).

Run: .venv/bin/python benchmarks/bench.py [--quick] [--rounds N] [--sizes 11,100,1000]

Every comparison is interleaved: each round runs every command of the group once, in a fresh
order, so a busy moment of the machine hits all of them alike. Figures are medians of wall time
per command, and ratios are medians of the per-round ratios (paired), not ratios of medians.
Nothing here is a test: CI does not time anything.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

BIN = Path(sys.executable).parent
NCCL_LAUNCH = str(BIN / "nccl-launch")
PYTHON = sys.executable
SLEEP = shutil.which("sleep") or "/bin/sleep"
PS = shutil.which("ps") or "/bin/ps"
# The start-up guards, each measured in the same interleaved rounds as what it is held to:
# `run` (which validates the profile every time) costs at most RUN_GUARD times `dotenv run`,
# and a one-shot `check` of a tree at most CHECK_GUARD times a psutil script that reads the
# environment of every process of the same tree.
RUN_GUARD = 2.0
CHECK_GUARD = 3.0
# The six variables of the Kimi profile, the same in the profile and in the .env file.
KIMI = {
    "PROTO": "LL",
    "ALGO": "Ring",
    "P2P_LEVEL": "SYS",
    "MAX_NCHANNELS": "16",
    "BUFFSIZE": "16777216",
    "NTHREADS": "512",
}
# A tree's root: starts N-1 sleeping children with its own environment, says so, then waits.
TREE = (
    "import subprocess, sys\n"
    "kids = [subprocess.Popen(['sleep', '600']) for _ in range(int(sys.argv[1]) - 1)]\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
    "for k in kids: k.kill()\n"
    "for k in kids: k.wait()\n"
)
# The least a command line that validates with pydantic costs: click imported and one model of
# one field built and used, with the collector off as nccl-launch runs (the floor of `run`
# and `check`: nothing of nccl-launch's own). `run`'s floor then execs what `run` does.
FLOOR = (
    "import gc\n"
    "gc.disable()\n"
    "import click, pydantic\n"
    "class Model(pydantic.BaseModel):\n"
    "    x: int\n"
    "Model(x=1)\n"
)
THEN_EXEC = "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'pass'])\n"
# What `check --pid ROOT` reads at the least, as a script would: the tree under ROOT and each
# process's environment, with psutil (which check uses too); it compares nothing.
PSUTIL_TREE = (
    "import psutil, sys\n"
    "root = psutil.Process(int(sys.argv[1]))\n"
    "tree = [root, *root.children(recursive=True)]\n"
    "envs = [process.environ() for process in tree]\n"
)


def setup(root: Path) -> dict[str, str]:
    """A profile and a .env file with the six variables, and an environment that finds them."""
    profiles = root / "profiles"
    profiles.mkdir()
    lines = "".join(f'{key} = "{value}"\n' for key, value in KIMI.items())
    (profiles / "bench.toml").write_text(
        f'schema = 1\nname = "bench"\nversion = 1\n\n[nccl]\n{lines}', encoding="utf-8"
    )
    dotenv = "".join(f"NCCL_{key}={value}\n" for key, value in KIMI.items())
    (root / ".env").write_text(dotenv, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    # `profiles/` in the working directory is on the search path; keep the host's /etc out.
    return env | {"NCCL_LAUNCH_SYSTEM_DIR": str(root / "etc"), "HOME": str(root)}


def wall(argv: Sequence[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    quiet = subprocess.DEVNULL  # the profile's deprecation warning would flood the table
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=quiet, stderr=quiet, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(argv)} exited {done.returncode}")
    return elapsed


def compare(
    title: str,
    group: dict[str, list[str]],
    base: str,
    rounds: int,
    env: dict[str, str],
    cwd: Path,
) -> dict[str, float]:
    """Interleaved rounds of `group`; print median ms and the paired ratio to `base`, and
    return each command's median ratio."""
    times: dict[str, list[float]] = {name: [] for name in group}
    for argv in group.values():  # one warm-up each: page cache, .pyc files
        wall(argv, env, cwd)
    for _ in range(rounds):
        order = list(group)
        random.shuffle(order)
        for name in order:
            times[name].append(wall(group[name], env, cwd))
    print(f"\n{title} ({rounds} interleaved rounds)")
    print(f"  {'command':<44} {'median ms':>10} {'vs ' + base:>16}")
    found = {}
    for name in group:
        ratios = [a / b for a, b in zip(times[name], times[base], strict=True)]
        found[name] = statistics.median(ratios)
        median = statistics.median(times[name]) * 1000
        print(f"  {name:<44} {median:>10.1f} {found[name]:>15.2f}x")
    return found


def start_tree(size: int, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """A tree of `size` processes started through `run`, so each carries the profile's env."""
    argv = [NCCL_LAUNCH, "run", "bench", "--", PYTHON, "-c", TREE, str(size)]
    tree = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    if tree.stdout is None or tree.stdout.readline().strip() != "ready":
        sys.exit("bench: the process tree did not start")
    return tree


def stop_tree(tree: subprocess.Popen[str]) -> None:
    if tree.stdin is not None:
        tree.stdin.close()
    tree.wait(timeout=60)


def tree_pids(root: int) -> list[str]:
    children = Path(f"/proc/{root}/task/{root}/children").read_text().split()
    return [str(root), *children]


def check_vs_script(
    sizes: Sequence[int], rounds: int, env: dict[str, str], cwd: Path
) -> dict[int, float]:
    """Each tree size's paired ratio of `check --pid` to the psutil script."""
    found = {}
    for size in sizes:
        tree = start_tree(size, env, cwd)
        try:
            pids = tree_pids(tree.pid)
            check = f"nccl-launch check --pid ({size} processes)"
            script = f"psutil script ({size} processes)"
            group = {
                check: [NCCL_LAUNCH, "check", "--pid", str(tree.pid), "bench"],
                f"ps eww -p ({size} processes)": [PS, "eww", "-p", ",".join(pids)],
                script: [PYTHON, "-c", PSUTIL_TREE, str(tree.pid)],
                f"click + pydantic + psutil script ({size})": [
                    PYTHON,
                    "-c",
                    FLOOR + PSUTIL_TREE,
                    str(tree.pid),
                ],
            }
            title = f"check vs a psutil script, a tree of {size}"
            found[size] = compare(title, group, script, rounds, env, cwd)[check]
        finally:
            stop_tree(tree)
    return found


def cpu_of(argv: Sequence[str], env: dict[str, str], cwd: Path, seconds: float | None) -> float:
    """CPU seconds (user + system) of one run of argv; stopped with SIGINT after `seconds`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if seconds is not None:
        time.sleep(seconds)  # the duration itself is what is measured here
        proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def watch_ticks(crowd: int, env: dict[str, str], cwd: Path, seconds: float) -> None:
    """CPU per `check --watch 0.1` tick of an 11-process tree, beside `crowd` other processes:
    the CPU of a watch twice as long, less that of one as long, over the ticks between, so that
    start-up and exit cancel out (medians of three pairs)."""
    others = [subprocess.Popen([SLEEP, "600"]) for _ in range(crowd)]
    tree = start_tree(11, env, cwd)
    try:
        argv = [NCCL_LAUNCH, "check", "--pid", str(tree.pid), "bench", "--watch", "0.1"]
        extra = [
            cpu_of(argv, env, cwd, 2 * seconds) - cpu_of(argv, env, cwd, seconds) for _ in range(3)
        ]
        per_tick = max(statistics.median(extra), 0.0) / (seconds / 0.1) * 1000
        print(f"  watch tick, 11-process tree beside {crowd:>4} others: {per_tick:6.2f} ms CPU")
    finally:
        stop_tree(tree)
        for other in others:
            other.kill()
        for other in others:
            other.wait()


def max_rss_kib(argv: Sequence[str], env: dict[str, str], cwd: Path) -> int:
    """Max RSS of argv alone: measured in a fresh Python, whose only child it is."""
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], capture_output=True, check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", probe, *argv], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def describe() -> None:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    python = platform.python_version()
    print(f"machine: {os.cpu_count()} CPUs ({model}), Python {python}, {platform.platform()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds, trees of 11 only")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 30, quick 8)")
    parser.add_argument("--sizes", default=None, help="tree sizes for check (default 11,100,1000)")
    args = parser.parse_args()
    rounds = args.rounds or (8 if args.quick else 30)
    sizes = [int(s) for s in (args.sizes or ("11" if args.quick else "11,100,1000")).split(",")]
    dotenv = shutil.which("dotenv", path=str(BIN)) or shutil.which("dotenv")
    if dotenv is None:
        sys.exit(
            "bench: no `dotenv` command; install it: .venv/bin/pip install 'python-dotenv[cli]'"
        )
    describe()
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        env = setup(cwd)
        pass_ = [PYTHON, "-c", "pass"]
        run_ = [NCCL_LAUNCH, "run", "bench", "--", *pass_]
        env_vars = [f"NCCL_{key}={value}" for key, value in KIMI.items()]
        startup = {
            "nccl-launch run bench -- python -c pass": run_,
            "env NCCL_...=... python -c pass": ["env", *env_vars, *pass_],
            "python -c pass": pass_,
            "nccl-launch --version": [NCCL_LAUNCH, "--version"],
            "nccl-launch --help": [NCCL_LAUNCH, "--help"],
            "click + pydantic, exec python -c pass": [PYTHON, "-c", FLOOR + THEN_EXEC],
            "dotenv run python -c pass": [dotenv, "-f", str(cwd / ".env"), "run", *pass_],
        }
        ratios = compare("start-up", startup, "dotenv run python -c pass", rounds, env, cwd)
        run_ratio = ratios["nccl-launch run bench -- python -c pass"]
        over = [guard("run", run_ratio, "dotenv run", RUN_GUARD)]
        for size, ratio in check_vs_script(sizes, rounds, env, cwd).items():
            over.append(guard(f"check of {size}", ratio, "the psutil script", CHECK_GUARD))
        print("\ncheck --watch 0.1, CPU per tick (a 2T watch less a T watch, over T's ticks)")
        for crowd in (0, 1000) if not args.quick else (0,):
            watch_ticks(crowd, env, cwd, 1.0 if args.quick else 3.0)
        rss = max_rss_kib([NCCL_LAUNCH, "run", "--dry-run", "bench", "--", *pass_], env, cwd)
        print(f"\nmemory: max RSS of `run --dry-run` {rss / 1024:.1f} MiB")
    if any(over):
        sys.exit("bench: " + "; ".join(line for line in over if line))


def guard(what: str, ratio: float, reference: str, limit: float) -> str:
    """Print where `ratio` stands against its guard; return the complaint when it is over."""
    verdict = "within" if ratio <= limit else "OVER"
    print(f"  guard: {what} is {ratio:.2f}x {reference}, {verdict} the {limit:g}x guard")
    return f"{what} costs {ratio:.2f}x {reference}, over {limit:g}x" if ratio > limit else ""


if __name__ == "__main__":
    main()
