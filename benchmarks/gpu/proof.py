"""nccl-launch and NCCL on a real GPU: the proof of docs/proof.md, rerun on this machine.

Setup on a fresh GPU machine (an NVIDIA driver, Python 3.11 or newer with venv: in NVIDIA's
CUDA images, which are Ubuntu, `apt-get install -y python3-venv` first), from a clone of
nccl-launch (this script and its workload, allreduce.py, are not in the wheel):

    python3 -m venv /tmp/proof && /tmp/proof/bin/pip wheel --no-deps -w dist .
    /tmp/proof/bin/pip install dist/nccl_launch-*.whl torch
    /tmp/proof/bin/python benchmarks/gpu/proof.py OUT_DIR     # or: OUT=OUT_DIR ... proof.py

It runs a torch.distributed all-reduce (NCCL backend) through `nccl-launch run`, one rank and
two ranks on the first GPU, and writes to OUT_DIR what each command printed (one file per
step, the profiles, NCCL's logs) and summary.md: run --nccl-debug, check --pid of the live
tree, verify-log of its NCCL log, a rank's own late export of NCCL_PROTO (the two-rank job
hangs: check runs while it does, then the tree is killed), NCCL's reading of raw values beside
nccl-launch's, preflight, two message sizes under three profiles, and the start cost. Run it
in the environment to be proved (a container's own variables are part of the proof).

`--only ranks,late-export` runs only those sections (--help lists them).

Without a GPU (no nvidia-smi, no GPU listed, torch missing, or torch.cuda.is_available()
false) it says so in one line and exits 0, having tested nothing and written nothing. Every
command is bounded by a timeout, and every process it started is killed before it exits.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomli_w  # nccl-launch's own dependency

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "allreduce.py"
PYTHON = sys.executable
BIN = Path(PYTHON).parent
NCCL_LAUNCH = str(BIN / "nccl-launch")
TORCHRUN = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
STEP_TIMEOUT = 120.0  # one nccl-launch command, one init of NCCL
JOB_TIMEOUT = 300.0  # one measured workload
WATCH_TIMEOUT = 30.0  # check --watch --on-drift stop, given a hung job
HANG_AFTER = 30.0  # an all-reduce of 1 MiB not done by then is hung (it takes milliseconds)
SIZES = (14336, 1048576)  # one decode token of a 7168-wide model in bf16; a prefill-sized one
# The seed's six variables (the tuned Kimi-K2.5 profile), as the profiles here declare them.
SIX: dict[str, object] = {
    "PROTO": "LL",
    "ALGO": "Ring",
    "P2P_LEVEL": "SYS",
    "MAX_NCHANNELS": 16,
    "BUFFSIZE": "16MiB",
    "NTHREADS": 512,
}
LOOPBACK: dict[str, object] = {"SOCKET_IFNAME": "lo"}
PROFILES = {
    "proof-one": SIX,
    "proof-two": SIX | LOOPBACK,
    "proof-defaults": LOOPBACK,
    "proof-simple": SIX | LOOPBACK | {"PROTO": "Simple"},
}
# Raw values as a start script might export them: what NCCL does with each, beside what
# nccl-launch says of the same value.
RAW = [
    ("NCCL_BUFFSIZE", "16MB"),
    ("NCCL_BUFFSIZE", "16MiB"),
    ("NCCL_BUFFSIZE", "0x1000000"),
    ("NCCL_NTHREADS", "100"),
    ("NCCL_NTHREADS", "1024"),
    ("NCCL_NTHREADS", " 512"),
    ("NCCL_MAX_NCHANNELS", "16x"),
    ("NCCL_P2P_LEVEL", "5"),
    ("NCCL_P2P_LEVEL", "bogus"),
    ("NCCL_PROTO", "ll"),
    ("NCCL_ALGO", "ring"),
    ("NCCL_PROTO", "LL "),
    ("NCCL_PROTO", "LLL"),
    ("NCCL_ALGO", "Rings"),
    ("NCCL_PROTO", "^LL128"),
    ("NCCL_PROTO", "LL,Simple"),
    ("NCCL_ALGO", "allreduce:ring"),
    ("NCCL_ALGO", "Ring,Tree"),
    ("NCCL_ALGO", "^Tree"),
    ("NCCL_PROTOCOL", "LL"),
]
NCCL_DEBUG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
_TIMES = re.compile(r"^allreduce bytes=(\d+) us=([0-9.]+)$", re.MULTILINE)
_NCCL = re.compile(r" NCCL (INFO|WARN) (.*)$")


def nccl_says(log: str, name: str) -> Counter[str]:
    """NCCL's own words in `log` about `name` (`set by environment to`, `Invalid`) and every
    NCCL WARN, without the host:pid prefix, each with the number of lines that said it.

    NCCL's text as it stands, not nccl-launch's reading of it: that is the other column."""
    said: Counter[str] = Counter()
    for line in log.splitlines():
        found = _NCCL.search(line)
        if found is None:
            continue
        level, message = found.groups()
        if level == "WARN":
            said[f"WARN {message.strip()}"] += 1
        elif message.startswith(f"{name} set by environment to") or (
            message.startswith("Invalid") and re.search(rf"\b{name}\b", message)
        ):
            said[message.strip()] += 1
    return said


def allreduce_times(output: str) -> dict[int, float]:
    """Mean microseconds per message size, from the workload's `allreduce bytes=N us=T` lines."""
    return {int(size): float(us) for size, us in _TIMES.findall(output)}


@dataclass
class Done:
    """One bounded command: what it printed (stdout and stderr), its exit code (None: killed
    at its timeout) and its wall time."""

    shown: str
    code: int | None
    output: str
    seconds: float

    def outcome(self) -> str:
        """Its exit code and its last line but nccl-launch's `fix:` lines (its verdict)."""
        lines = [line for line in self.output.splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if not line.startswith("fix")), "")
        code = "timed out" if self.code is None else f"exit {self.code}"
        return f"{code}: {last.strip()}" if last else code


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and every descendant it still has."""
    import psutil  # nccl-launch's own dependency

    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        family = []
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()


def kill_leftovers() -> None:
    """Kill every descendant of this script, and reap them (orphans come back to a subreaper)."""
    import psutil

    for process in psutil.Process().children(recursive=True):
        kill_tree(process.pid)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def shown(argv: Sequence[str], extra: dict[str, str]) -> str:
    words = [f"{key}={shlex.quote(value)}" for key, value in extra.items()]
    words += ["nccl-launch" if argv[0] == NCCL_LAUNCH else shlex.quote(argv[0])]
    return " ".join([*words, *(shlex.quote(arg) for arg in argv[1:])])


def bounded(
    argv: Sequence[str],
    env: dict[str, str],
    cwd: Path | None,
    timeout: float,
    extra: dict[str, str] | None = None,
) -> Done:
    """Run argv (with `extra` over env) in a session of its own; kill its tree at the timeout."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env | (extra or {}),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    code: int | None
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, _ = proc.communicate()
        code = None
    kill_tree(proc.pid)  # what it left behind
    text = out.decode(errors="replace")
    return Done(shown(argv, extra or {}), code, text, time.perf_counter() - start)


def no_gpu() -> str | None:
    """Why this machine cannot run the proof, or None when it can."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi on PATH"
    listed = bounded([smi, "-L"], dict(os.environ), None, 60)
    if listed.code != 0 or "GPU " not in listed.output:
        return f"nvidia-smi -L lists no GPU ({listed.outcome()})"
    probe = "import torch; print('cuda', torch.cuda.is_available())"
    asked = bounded([PYTHON, "-c", probe], dict(os.environ), None, STEP_TIMEOUT)
    if "No module named 'torch'" in asked.output:
        return f"no torch in {PYTHON}"
    if asked.code != 0:
        return f"torch does not import ({asked.outcome()})"
    if "cuda True" not in asked.output:
        return "torch.cuda.is_available() is False"
    return None


class Tree:
    """A process tree started in the background, in a session of its own, its output in a file."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, marker: str, count: int, timeout: float) -> bool:
        """Whether the output shows `marker` `count` times within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.text().count(marker) >= count:
                return True
            time.sleep(0.2)
        return self.text().count(marker) >= count

    def wait_exec(self, name: str, timeout: float) -> None:
        """Until `run` has exec'd the program `name` (same PID), or ended, or `timeout`."""
        import psutil

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(self.proc.pid).name() == name:
                    return
            time.sleep(0.05)

    def finish(self, timeout: float) -> int | None:
        """Its exit code, or None when it was still running at `timeout` and was killed."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            kill_tree(self.proc.pid)
            self.proc.wait()


class Proof:
    """The output folder, the work folder (profiles, hold files) and the calling environment."""

    def __init__(self, out: Path, work: Path) -> None:
        self.out = out
        self.work = work
        self.env = dict(os.environ)
        (work / "profiles").mkdir()
        (out / "profiles").mkdir(exist_ok=True)
        for name, nccl in PROFILES.items():
            self.profile(name, nccl)

    def profile(self, name: str, nccl: dict[str, object], folder: str = "profiles") -> Path:
        """Write a profile without [server] (it runs the command after `--`)."""
        # The workload sets NCCL_HOSTID itself, one per rank: the server's own, as SGLang's are.
        policy: dict[str, object] = {"server_owned": ["NCCL_HOSTID"]}
        if "MAX_NCHANNELS" in nccl:
            policy["accept"] = ["NCCL_MAX_NCHANNELS deprecated"]
        table = {"schema": 1, "name": name, "version": 1, "nccl": nccl, "policy": policy}
        path = self.work / folder / f"{name}.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(tomli_w.dumps(table), encoding="utf-8")
        if folder == "profiles":
            shutil.copy(path, self.out / "profiles" / path.name)
        return path

    def say(self, line: str) -> None:
        print(line, flush=True)
        with (self.out / "summary.md").open("a", encoding="utf-8") as summary:
            summary.write(line + "\n")

    def record(self, step: str, done: Done) -> Done:
        with (self.out / f"{step}.txt").open("a", encoding="utf-8") as transcript:
            code = "timed out, killed" if done.code is None else f"exit {done.code}"
            transcript.write(f"$ {done.shown}\n{done.output}[{code}, {done.seconds:.2f} s]\n\n")
        return done

    def note(self, step: str, text: str) -> None:
        with (self.out / f"{step}.txt").open("a", encoding="utf-8") as transcript:
            transcript.write(f"{text}\n\n")

    def step_env(self, step: str) -> dict[str, str]:
        """The calling environment, with nccl-launch's state (NCCL's per-process logs of
        `run --nccl-debug`) in a folder of this step's."""
        return self.env | {"XDG_STATE_HOME": str(self.work / "state" / step)}

    def nccl_launch(
        self,
        step: str,
        *args: str,
        timeout: float = STEP_TIMEOUT,
        extra: dict[str, str] | None = None,
    ) -> Done:
        done = bounded([NCCL_LAUNCH, *args], self.step_env(step), self.work, timeout, extra)
        return self.record(step, done)

    def nccl_log(self, step: str, tree: Tree) -> Path:
        """NCCL's lines of the step: the tree's output where NCCL printed there, else the
        per-process files `run --nccl-debug` had NCCL write, one after the other."""
        if " NCCL INFO " in tree.text():
            return tree.log
        state = self.work / "state" / step
        if state.is_dir():  # the files `check` names, kept past the work folder
            shutil.copytree(state, self.out / "state" / step, dirs_exist_ok=True)
        joined = self.out / f"{step}-nccl.log"
        with joined.open("w", encoding="utf-8") as sink:
            for path in sorted(state.rglob("*")):
                text = path.read_text(errors="replace") if path.is_file() else ""
                if " NCCL INFO " in text:
                    sink.write(text)
        return joined

    def start(self, step: str, command: Sequence[str]) -> Tree:
        """Start command in the background, its output in STEP.log."""
        tree = Tree(command, self.step_env(step), self.work, self.out / f"{step}.log")
        self.note(step, f"$ {shown(command, {})} &\n(in the background: output in {step}.log)")
        return tree

    def live(self, step: str, profile: str, argv: Sequence[str], ranks: int) -> None:
        """Start argv through `run --nccl-debug`, check the live tree, let it end, verify-log."""
        hold = self.work / f"{step}.hold"
        command = [NCCL_LAUNCH, "run", "--nccl-debug", profile, "--", *argv, "--hold", str(hold)]
        tree = self.start(step, command)
        try:
            started = tree.wait_for("allreduce ok", ranks, JOB_TIMEOUT)
            checked = self.nccl_launch(step, "check", "--pid", str(tree.proc.pid), profile)
            hold.touch()
            code = tree.finish(STEP_TIMEOUT)
        finally:
            kill_tree(tree.proc.pid)
        self.note(step, f"(the background tree ended: exit {code})")
        verified = self.nccl_launch(step, "verify-log", profile, str(self.nccl_log(step, tree)))
        ran = "ran" if started else "did not finish its all-reduce"
        self.say(f"- {step}: the workload {ran} (exit {code}); check {checked.outcome()}")
        self.say(f"  verify-log {verified.outcome()}")


def machine(proof: Proof) -> None:
    smi = shutil.which("nvidia-smi") or "nvidia-smi"
    query = "--query-gpu=name,memory.total,driver_version,pci.bus_id"
    torch = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
    variables = "\n".join(f"{k}={v}" for k, v in sorted(proof.env.items()) if "NCCL" in k)
    for argv in (
        [smi, query, "--format=csv,noheader"],
        [PYTHON, "--version"],
        [PYTHON, "-c", torch],
        [NCCL_LAUNCH, "--version"],
    ):
        done = proof.record("machine", bounded(argv, proof.env, proof.work, STEP_TIMEOUT))
        proof.say(f"- {done.output.strip()}")
    proof.record("machine", Done("env | grep NCCL", 0, variables + "\n", 0))
    names = variables.replace("\n", " ") or "none"
    proof.say(f"- the calling environment's variables naming NCCL: {names}")


def one_and_two_ranks(proof: Proof) -> None:
    proof.live("one-rank", "proof-one", [PYTHON, str(WORKLOAD)], 1)
    proof.live("two-ranks", "proof-two", [*TORCHRUN, str(WORKLOAD), "--hostid"], 2)
    late = ["--late", "NCCL_PROTO=Simple"]
    proof.live("late-export-one-rank", "proof-one", [PYTHON, str(WORKLOAD), *late], 1)


def late_export_two_ranks(proof: Proof) -> None:
    """Rank 1 sets NCCL_PROTO=Simple inside itself; the ranks disagree and the all-reduce hangs.
    check runs while it hangs, then check --watch --on-drift stop; what is left is killed."""
    step = "late-export-two-ranks"
    late = ["--late", "NCCL_PROTO=Simple", "--late-rank", "1"]
    argv = [*TORCHRUN, str(WORKLOAD), "--hostid", *late]
    tree = proof.start(step, [NCCL_LAUNCH, "run", "--nccl-debug", "proof-two", "--", *argv])
    try:
        tree.wait_for("all-reduce started", 2, JOB_TIMEOUT)
        hung = not tree.wait_for("allreduce ok", 2, HANG_AFTER) and tree.proc.poll() is None
        pid = str(tree.proc.pid)
        checked = proof.nccl_launch(step, "check", "--pid", pid, "proof-two")
        watch = ("check", "--pid", pid, "proof-two", "--watch", "1", "--on-drift", "stop")
        alive = tree.proc.poll() is None
        watched = proof.nccl_launch(step, *watch, "--grace", "5", timeout=WATCH_TIMEOUT)
        stopped = alive and tree.proc.poll() is not None
    finally:
        kill_tree(tree.proc.pid)
        tree.proc.wait()
    ended = "ended the tree" if stopped else "did not end it" if alive else "it had ended"
    proof.note(step, f"(check --watch --on-drift stop {ended}; the proof killed what was left)")
    verified = proof.nccl_launch(step, "verify-log", "proof-two", str(proof.nccl_log(step, tree)))
    proof.say(f"- {step}: {'hung' if hung else 'did not hang'}; check {checked.outcome()}")
    proof.say(f"  check --watch --on-drift stop {watched.outcome()}; {ended}")
    proof.say(f"  verify-log {verified.outcome()}")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def raw_values(proof: Proof) -> None:
    """For each raw value: one 2-rank init with it and NCCL's own lines about it, beside
    `run --dry-run` with it in the calling environment and `validate` of a profile with it."""
    step = "raw-values"
    proof.say("\n| raw value | NCCL's lines | the workload | `run --dry-run` | `validate` |")
    proof.say("|---|---|---|---|---|")
    argv = [*TORCHRUN, str(WORKLOAD), "--hostid", "--sizes", "14336"]
    for number, (name, raw) in enumerate(RAW):
        extra = NCCL_DEBUG | {"NCCL_SOCKET_IFNAME": "lo", name: raw}
        done = proof.record(step, bounded(argv, proof.env, proof.work, STEP_TIMEOUT, extra))
        said = nccl_says(done.output, name)
        nccl = "<br>".join(f"`{line}` ({count}x)" for line, count in said.items()) or "no line"
        ran = "ran" if "allreduce ok" in done.output else done.outcome().split(":")[0]
        dry_run = ("run", "--dry-run", "proof-two", "--", "true")
        dry = proof.nccl_launch(step, *dry_run, extra={name: raw})
        said_by_run = [line.strip() for line in dry.output.splitlines() if f" {name} " in line]
        claim = said_by_run[0] if said_by_run else "no drift: the profile's value"
        key = name.removeprefix("NCCL_")
        path = proof.profile(f"raw-{number}", SIX | LOOPBACK | {key: raw}, folder="raw")
        valid = proof.nccl_launch(step, "validate", str(path))
        said_by_validate = valid.output.replace(f"{path}: ", "").strip()
        row = [f"`{name}={raw}`", nccl, ran, f"exit {dry.code}: {claim}", said_by_validate]
        proof.say("| " + " | ".join(cell(part) for part in row) + " |")


def preflight(proof: Proof) -> None:
    step = "preflight"
    server = {"python": PYTHON, "model_path": "/nonexistent", "tp_size": 1}
    table = {"schema": 1, "name": "proof-server", "version": 1, "server": server}
    (proof.work / "profiles" / "proof-server.toml").write_text(tomli_w.dumps(table))
    skip = ("--skip", "paths", "--skip", "sglang", "--skip", "python")
    runs: list[tuple[tuple[str, ...], dict[str, str]]] = [
        (("proof-two",), {}),
        (("proof-server", *skip), {}),
        (("kimi-k25-rtx6000bw-tp8-eagle3", *skip), {}),
        (("proof-server", *skip), {"CUDA_VISIBLE_DEVICES": "999"}),
    ]
    for args, extra in runs:
        done = proof.nccl_launch(step, "preflight", *args, extra=extra)
        gpus = [line for line in done.output.splitlines() if " gpus " in line]
        proof.say(f"- `{done.shown}`: {done.outcome()}; {' '.join(gpus) or 'no gpus check'}")


def message_sizes(proof: Proof, runs: int) -> None:
    """Two ranks, the two sizes, under NCCL's defaults, the seed's six, the six with Simple."""
    step = "message-sizes"
    sizes = ",".join(str(size) for size in SIZES)
    argv = [*TORCHRUN, str(WORKLOAD), "--hostid", "--sizes", sizes, "--iters", "200"]
    proof.say("\n| profile | " + " | ".join(f"{size:,} bytes (us)" for size in SIZES) + " |")
    proof.say("|---|" + "---|" * len(SIZES))
    for profile in ("proof-defaults", "proof-two", "proof-simple"):
        times: dict[int, list[float]] = {size: [] for size in SIZES}
        for _ in range(runs):
            done = proof.nccl_launch(
                step, "run", profile, "--", *argv, "--warmup", "20", timeout=JOB_TIMEOUT
            )
            for size, us in allreduce_times(done.output).items():
                times.setdefault(size, []).append(us)
        row = [" / ".join(f"{us:,.0f}" for us in times[size]) or "none" for size in SIZES]
        proof.say(f"| {profile} | " + " | ".join(row) + " |")


def start_cost(proof: Proof, rounds: int) -> None:
    """Interleaved rounds: each command once per round in a fresh order; medians of wall time."""
    step = "start-cost"
    dotenv = proof.work / ".env"
    env_lines = [f"NCCL_{key}={value}" for key, value in (SIX | LOOPBACK).items()]
    dotenv.write_text("\n".join(env_lines).replace("16MiB", "16777216") + "\n")
    true = shutil.which("true") or "/bin/true"
    group = {
        "nccl-launch run proof-two -- true": [NCCL_LAUNCH, "run", "proof-two", "--", true],
        "python3 -c pass": [PYTHON, "-c", "pass"],
        "env true": ["env", true],
    }
    if found := shutil.which("dotenv", path=str(BIN)) or shutil.which("dotenv"):
        group["dotenv run -- true"] = [found, "-f", str(dotenv), "run", "--", true]
    times: dict[str, list[float]] = {name: [] for name in group}
    codes: dict[str, set[int | None]] = {name: set() for name in group}
    for _ in range(rounds):
        for name in random.sample(list(group), len(group)):
            done = bounded(group[name], proof.env, proof.work, STEP_TIMEOUT)
            times[name].append(done.seconds)
            codes[name].add(done.code)
    proof.record(step, Done("(timings)", 0, f"{times}\n", 0))
    proof.say(f"\n| command | median ms ({rounds} rounds) | exit codes |\n|---|---|---|")
    for name in group:
        median = statistics.median(times[name]) * 1000
        proof.say(f"| `{name}` | {median:.1f} | {sorted(codes[name], key=str)} |")
    sleep = [NCCL_LAUNCH, "run", "proof-two", "--", shutil.which("sleep") or "/bin/sleep", "600"]
    tree = proof.start(step, sleep)
    try:
        tree.wait_exec("sleep", STEP_TIMEOUT)
        pid = str(tree.proc.pid)
        checks = [proof.nccl_launch(step, "check", "--pid", pid, "proof-two") for _ in range(10)]
    finally:
        kill_tree(tree.proc.pid)
        tree.proc.wait()
    median = statistics.median(done.seconds for done in checks) * 1000
    seen = sorted({done.code for done in checks}, key=str)
    proof.say(f"| `nccl-launch check --pid PID proof-two` (10 runs) | {median:.1f} | {seen} |")
    if "dotenv run -- true" in times:  # paired by round, as benchmarks/bench.py compares
        paired = zip(times[next(iter(group))], times["dotenv run -- true"], strict=True)
        ratio = statistics.median(run / dotenv_run for run, dotenv_run in paired)
        proof.say(f"\n`run` costs {ratio:.2f}x `dotenv run` (the median of per-round ratios)")


def become_subreaper() -> None:
    """Orphaned descendants (torchrun's workers) are reparented here, so none escapes the kill."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


# Each part of the proof: its title in summary.md, and how it runs.
SECTIONS: dict[str, tuple[str, Callable[[Proof, argparse.Namespace], None]]] = {
    "machine": ("The machine", lambda proof, args: machine(proof)),
    "ranks": ("One rank and two ranks", lambda proof, args: one_and_two_ranks(proof)),
    "late-export": (
        "A rank's own late export, two ranks",
        lambda proof, args: late_export_two_ranks(proof),
    ),
    "raw-values": (
        "NCCL's reading of raw values, beside nccl-launch's",
        lambda proof, args: raw_values(proof),
    ),
    "preflight": ("preflight", lambda proof, args: preflight(proof)),
    "message-sizes": (
        "Two message sizes, two ranks",
        lambda proof, args: message_sizes(proof, args.runs),
    ),
    "start-cost": ("Start cost", lambda proof, args: start_cost(proof, args.rounds)),
}


def section_names(text: str) -> list[str]:
    names = text.split(",")
    if unknown := [name for name in names if name not in SECTIONS]:
        raise argparse.ArgumentTypeError(f"{unknown[0]!r}; valid: {', '.join(SECTIONS)}")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the output folder (default: $OUT)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the start cost")
    parser.add_argument("--runs", type=int, default=2, help="runs of each message-size profile")
    parser.add_argument(
        "--only",
        type=section_names,
        default=list(SECTIONS),
        help=f"these sections, comma-separated (default: all of {','.join(SECTIONS)})",
    )
    args = parser.parse_args()
    atexit.register(kill_leftovers)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda signum, frame: sys.exit(128 + signum))
    become_subreaper()
    if why := no_gpu():
        print(f"proof: no GPU here ({why}); nothing tested")
        return 0
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is None:
        parser.error("name the output folder: proof.py OUT_DIR, or set OUT")
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="nccl-launch-proof-") as work:
        proof = Proof(out.resolve(), Path(work))
        for name in args.only:
            title, section = SECTIONS[name]
            proof.say(f"\n## {title}\n")
            try:
                section(proof, args)
            except Exception:  # one broken section must not cost the others' results
                failed += 1
                proof.say(f"```text\n{traceback.format_exc()}```")
            kill_leftovers()
    print(f"\nproof: written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
