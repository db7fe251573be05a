"""What nccl-launch's `run` and one-shot `check` cost above their floors (docs/performance.md).

Run from the repository: python3 benchmarks/bench.py [--venv DIR] [--rounds N] [--sizes 11,100]

It measures a regular install (`pip install .`, not editable): one it builds in a temporary
folder from this checkout, or the venv given with --venv. A floor is what any command line built
on nccl-launch's declared dependencies costs before it does anything of its own: `run`'s imports
click and pydantic, builds and uses a model of the profile model's size, then execs what `run`
execs; `check`'s does the same, then reads the tree as a psutil script does. Every comparison is
interleaved: each round runs every command of its group once, in a fresh order, so a busy moment
of the machine hits all of them alike. Ratios are medians of the per-round ratios (paired), with
a 95% interval from their order statistics. It exits 1 when the median ratio of `run` is over
RUN_GUARD or that of `check` over CHECK_GUARD. Nothing here is a test: CI times nothing.
"""

from __future__ import annotations

import argparse
import json
import math
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
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLEEP = shutil.which("sleep") or "/bin/sleep"
PS = shutil.which("ps") or "/bin/ps"
# The guards: what nccl-launch adds above its floor, measured in the same interleaved rounds.
RUN_GUARD = 1.25
CHECK_GUARD = 1.5
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
# The profile model's shape as the installed nccl-launch has it: the number of fields of each
# model class reachable from `Profile` (its own first), so that the floor's model stays as
# large as the profile's when fields are added.
SHAPE = (
    "import json, typing, pydantic\n"
    "from nccl_launch.profile.model import Profile\n"
    "seen = []\n"
    "def walk(a):\n"
    "    if isinstance(a, type) and issubclass(a, pydantic.BaseModel):\n"
    "        if a in seen: return\n"
    "        seen.append(a)\n"
    "        for f in a.model_fields.values(): walk(f.annotation)\n"
    "    for x in typing.get_args(a): walk(x)\n"
    "walk(Profile)\n"
    "print(json.dumps([len(m.model_fields) for m in seen]))\n"
)
# The floor's field types, in turn: the kinds of field the profile model has.
FIELD_TYPES = (
    "str = 'x'",
    "int = pydantic.Field(default=1, ge=1)",
    "list[str] = pydantic.Field(default_factory=list)",
    "dict[str, str] = pydantic.Field(default_factory=dict)",
    "typing.Literal['refuse', 'warn'] = 'refuse'",
    "float | None = pydantic.Field(default=None, gt=0)",
)
# What `check --pid ROOT` reads at the least, as a script would: the tree under ROOT and each
# process's environment, with psutil (which check uses too); it compares nothing.
PSUTIL_TREE = (
    "import psutil, sys\n"
    "root = psutil.Process(int(sys.argv[1]))\n"
    "tree = [root, *root.children(recursive=True)]\n"
    "envs = [process.environ() for process in tree]\n"
)
THEN_EXEC = "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'pass'])\n"


def floor(shape: Sequence[int]) -> str:
    """click and pydantic imported with the collector off (as nccl-launch runs), then models of
    `shape`'s field counts (the first holding one of each other, as `Profile` does), strict and
    closed as nccl-launch's are, each with a field validator, validated from the bench profile's
    table: nothing of nccl-launch's own."""
    parts = [f"Part{index}" for index in range(1, len(shape))]
    lines = [
        "import gc",
        "gc.disable()",
        "import typing",
        "import click, pydantic",
        "STRICT = pydantic.ConfigDict(extra='forbid', strict=True, frozen=True)",
    ]
    for name, count in [*zip(parts, shape[1:], strict=True), ("Top", shape[0])]:
        lines += [f"class {name}(pydantic.BaseModel):", "    model_config = STRICT"]
        fields = (
            [f"{part.lower()}: {part} | None = None" for part in parts] if name == "Top" else []
        )
        fields += [f"f{i}: {FIELD_TYPES[i % len(FIELD_TYPES)]}" for i in range(count - len(fields))]
        lines += [f"    {field}" for field in fields]
        lines += [
            "    @pydantic.field_validator('f0')",
            "    @classmethod",
            "    def _check(cls, value: str) -> str:",
            "        if not value.strip(): raise ValueError('empty')",
            "        return value",
        ]
    table = {"f0": "bench", "f1": 1, "f3": {f"NCCL_{k}": v for k, v in KIMI.items()}}
    lines.append(f"Top.model_validate({table!r})")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Install:
    """The programs of one regular install of nccl-launch."""

    python: str
    nccl_launch: str
    dotenv: str | None


def regular_install(venv: Path | None, scratch: Path) -> Install:
    """The venv given, refused when nccl-launch is installed there editable; else a fresh venv
    in `scratch` with this checkout `pip install`ed into it."""
    if venv is None:
        venv = scratch / "venv"
        print(f"installing {REPO} into {venv} (pip install ., not editable)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(REPO)]
        done = subprocess.run(pip, capture_output=True, text=True, check=False)
        if done.returncode != 0:  # its warnings (an index it skips) only when it failed
            sys.exit(f"bench: pip install failed:\n{done.stdout}{done.stderr}")
    python = venv / "bin" / "python"
    infos = list((venv / "lib").glob("python*/site-packages/nccl_launch-*.dist-info"))
    if not python.exists() or not infos:
        sys.exit(f"bench: no nccl-launch installed in {venv}")
    for url in (info / "direct_url.json" for info in infos):
        if url.exists() and json.loads(url.read_text()).get("dir_info", {}).get("editable"):
            sys.exit(f"bench: nccl-launch is installed editable in {venv}; measure `pip install .`")
    dotenv = venv / "bin" / "dotenv"
    return Install(
        str(python), str(venv / "bin" / "nccl-launch"), str(dotenv) if dotenv.exists() else None
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


@dataclass(frozen=True)
class Ratio:
    """The median of paired per-round ratios, and a 95% interval of that median."""

    median: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def paired(times: Sequence[float], base: Sequence[float]) -> Ratio:
    """The interval of the median from the order statistics of the ratios: the ranks n/2 -
    0.98 sqrt(n) and 1 + n/2 + 0.98 sqrt(n), rounded outwards (the binomial count of ratios
    below the median, normal approximation), so no assumption on how the process starts'
    times are distributed."""
    ratios = sorted(a / b for a, b in zip(times, base, strict=True))
    n = len(ratios)
    half = 0.98 * math.sqrt(n)
    low = max(math.floor(n / 2 - half), 1)
    high = min(math.ceil(1 + n / 2 + half), n)
    return Ratio(statistics.median(ratios), ratios[low - 1], ratios[high - 1])


def compare(
    title: str,
    group: dict[str, list[str]],
    base: str,
    rounds: int,
    env: dict[str, str],
    cwd: Path,
) -> dict[str, Ratio]:
    """Interleaved rounds of `group`; print median ms and the paired ratio to `base`."""
    times: dict[str, list[float]] = {name: [] for name in group}
    for argv in group.values():  # one warm-up each: page cache, .pyc files
        wall(argv, env, cwd)
    for _ in range(rounds):
        order = list(group)
        random.shuffle(order)
        for name in order:
            times[name].append(wall(group[name], env, cwd))
    print(f"\n{title} ({rounds} interleaved rounds)")
    print(f"  {'command':<40} {'median ms':>9}   {'vs the floor, 95% interval':>26}")
    found = {}
    for name in group:
        found[name] = paired(times[name], times[base])
        median = statistics.median(times[name]) * 1000
        print(f"  {name:<40} {median:>9.1f}   {found[name]!s:>26}")
    return found


def start_tree(
    size: int, nccl_launch: str, env: dict[str, str], cwd: Path
) -> subprocess.Popen[str]:
    """A tree of `size` processes started through `run`, so each carries the profile's env."""
    argv = [nccl_launch, "run", "bench", "--", sys.executable, "-c", TREE, str(size)]
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


def check_vs_floor(
    install: Install,
    model: str,
    sizes: Sequence[int],
    rounds: int,
    env: dict[str, str],
    cwd: Path,
) -> dict[int, Ratio]:
    """Each tree size's paired ratio of `check --pid` to its floor."""
    found = {}
    for size in sizes:
        tree = start_tree(size, install.nccl_launch, env, cwd)
        try:
            pids = tree_pids(tree.pid)
            check = f"nccl-launch check --pid ({size})"
            base = f"floor: click, pydantic, psutil ({size})"
            group = {
                check: [install.nccl_launch, "check", "--pid", str(tree.pid), "bench"],
                base: [install.python, "-c", model + PSUTIL_TREE, str(tree.pid)],
                f"psutil script ({size})": [install.python, "-c", PSUTIL_TREE, str(tree.pid)],
                f"ps eww -p ({size})": [PS, "eww", "-p", ",".join(pids)],
            }
            title = f"one-shot check of a tree of {size} processes"
            found[size] = compare(title, group, base, rounds, env, cwd)[check]
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


def watch_ticks(
    install: Install, crowd: int, env: dict[str, str], cwd: Path, seconds: float
) -> None:
    """CPU per `check --watch 0.1` tick of an 11-process tree, beside `crowd` other processes:
    the CPU of a watch twice as long, less that of one as long, over the ticks between, so that
    start-up and exit cancel out (medians of three pairs)."""
    others = [subprocess.Popen([SLEEP, "600"]) for _ in range(crowd)]
    tree = start_tree(11, install.nccl_launch, env, cwd)
    try:
        argv = [install.nccl_launch, "check", "--pid", str(tree.pid), "bench", "--watch", "0.1"]
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


def max_rss_kib(python: str, argv: Sequence[str], env: dict[str, str], cwd: Path) -> int:
    """Max RSS of argv alone: measured in a fresh Python, whose only child it is."""
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], capture_output=True, check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run(
        [python, "-c", probe, *argv], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def describe(install: Install) -> None:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    python = platform.python_version()
    print(f"machine: {os.cpu_count()} CPUs ({model}), Python {python}, {platform.platform()}")
    print(f"load average: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"nccl-launch: {install.nccl_launch}")


def guard(what: str, ratio: Ratio, limit: float) -> str:
    """Print where `ratio` stands against its guard; return the complaint when it is over."""
    verdict = "within" if ratio.median <= limit else "OVER"
    print(f"  guard: {what} is {ratio} its floor, {verdict} the {limit:g}x guard")
    return f"{what} costs {ratio} its floor, over {limit:g}x" if ratio.median > limit else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, help="a venv with nccl-launch `pip install`ed")
    parser.add_argument("--quick", action="store_true", help="few rounds, a tree of 11 only")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 60, quick 15)")
    parser.add_argument("--sizes", default=None, help="tree sizes for check (default 11,100)")
    parser.add_argument("--more", action="store_true", help="also the watch CPU and memory")
    args = parser.parse_args()
    rounds = args.rounds or (15 if args.quick else 60)
    sizes = [int(s) for s in (args.sizes or ("11" if args.quick else "11,100")).split(",")]
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        install = regular_install(args.venv, scratch)
        describe(install)
        cwd = scratch / "work"
        cwd.mkdir()
        env = setup(cwd)
        shape = json.loads(
            subprocess.run(
                [install.python, "-c", SHAPE], capture_output=True, text=True, check=True
            ).stdout
        )
        model = floor(shape)
        print(f"the floor's model: {len(shape)} classes, {sum(shape)} fields, as the profile's")
        pass_ = [install.python, "-c", "pass"]
        run_ = "nccl-launch run bench -- python -c pass"
        base = "floor: click, pydantic, exec python"
        startup = {
            run_: [install.nccl_launch, "run", "bench", "--", *pass_],
            base: [install.python, "-c", model + THEN_EXEC],
            "python -c pass": pass_,
            "nccl-launch --version": [install.nccl_launch, "--version"],
        }
        if install.dotenv is not None:
            startup["dotenv run python -c pass"] = [
                install.dotenv,
                "-f",
                str(cwd / ".env"),
                "run",
                *pass_,
            ]
        over = [guard("run", compare("run", startup, base, rounds, env, cwd)[run_], RUN_GUARD)]
        for size, ratio in check_vs_floor(install, model, sizes, rounds, env, cwd).items():
            over.append(guard(f"check of {size}", ratio, CHECK_GUARD))
        if args.more:
            print("\ncheck --watch 0.1, CPU per tick (a 2T watch less a T watch, over T's ticks)")
            for crowd in (0, 1000):
                watch_ticks(install, crowd, env, cwd, 3.0)
            dry = [install.nccl_launch, "run", "--dry-run", "bench", "--", *pass_]
            rss = max_rss_kib(install.python, dry, env, cwd)
            print(f"\nmemory: max RSS of `run --dry-run` {rss / 1024:.1f} MiB")
    if any(over):
        sys.exit("bench: " + "; ".join(line for line in over if line))


if __name__ == "__main__":
    main()
