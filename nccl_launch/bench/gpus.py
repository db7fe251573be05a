"""The GPUs a result is stamped with, as `nvidia-smi` reports them; none where it is absent."""

from __future__ import annotations

import shutil
import subprocess

from nccl_launch.bench.result import Gpu
from nccl_launch.digits import is_ascii_digits

QUERY = "index,name,memory.total,driver_version,pci.bus_id"
TIMEOUT = 10  # seconds: a wedged driver must not hang the benchmark
FIELDS = 5


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


def query_gpus() -> tuple[list[Gpu], str | None]:
    """The GPUs, or none and why (no nvidia-smi, it failed): never a reason to stop."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return [], "no nvidia-smi on PATH"
    command = [program, f"--query-gpu={QUERY}", "--format=csv,noheader"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, check=False
        )  # a byte that is not UTF-8 is shown as U+FFFD, never a crash
    except (OSError, subprocess.TimeoutExpired) as error:
        return [], f"nvidia-smi failed: {error}"
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        return [], f"nvidia-smi exited {done.returncode}: {said[0] if said else 'no output'}"
    try:
        return parse_gpus(done.stdout), None
    except ValueError as error:
        return [], f"nvidia-smi answered {error}"
