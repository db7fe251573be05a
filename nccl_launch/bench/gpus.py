"""The GPUs a result is stamped with, and the processes holding their memory, as `nvidia-smi`
reports them; none where it is absent."""

from __future__ import annotations

import shutil
import subprocess

from nccl_launch.bench.result import Gpu
from nccl_launch.digits import is_ascii_digits
from nccl_launch.findings import Finding, Refused
from nccl_launch.tools import ask

QUERY = "index,name,memory.total,driver_version,pci.bus_id"
TIMEOUT = 10  # seconds: a wedged driver must not hang the benchmark
FIELDS = 5
NO_SMI = "no nvidia-smi on PATH"


def parse_gpus(text: str) -> list[Gpu]:
    """`--query-gpu=QUERY --format=csv,noheader` lines; a name may hold ", " itself, so the
    index is taken from the left and the last three fields from the right."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.strip().split(", ")
        if len(parts) < FIELDS or not is_ascii_digits(parts[0]):
            raise ValueError(f"not a line of {QUERY}: {line.strip()[:100]!r}")
        memory, driver, bus = parts[-3:]
        name = ", ".join(parts[1:-3])
        gpus.append(
            Gpu(
                index=int(parts[0]),
                name=name,
                memory_total=memory,
                driver_version=driver,
                pci_bus_id=bus,
            )
        )
    return gpus


def _smi(query: str) -> tuple[str | None, str | None]:
    """What `nvidia-smi --QUERY --format=csv,noheader` printed, or None and why not."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None, NO_SMI
    command = [program, query, "--format=csv,noheader"]
    try:
        done = ask(command, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"nvidia-smi failed: {error}"
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        return None, f"nvidia-smi exited {done.returncode}: {said[0] if said else 'no output'}"
    return done.stdout, None


def query_gpus() -> tuple[list[Gpu], str | None]:
    """The GPUs, or none and why (no nvidia-smi, it failed): never a reason to stop."""
    text, reason = _smi(f"--query-gpu={QUERY}")
    if text is None:
        return [], reason
    try:
        return parse_gpus(text), None
    except ValueError as error:
        return [], f"nvidia-smi answered {error}"


def compute_pids() -> set[int] | None:
    """The PIDs of the processes holding GPU memory (compute apps); None without nvidia-smi.
    Refused when it fails: whether the memory is free is then unknown. A line that is no PID
    (`N/A`) is left out: no process can be told from it."""
    text, reason = _smi("--query-compute-apps=pid")
    if text is None:
        if reason == NO_SMI:
            return None
        said = f"cannot list the processes holding GPU memory: {reason}"
        raise Refused(Finding("gpu-processes-unknown", "", said, cause="host"))
    return {int(line) for line in map(str.strip, text.splitlines()) if is_ascii_digits(line)}
