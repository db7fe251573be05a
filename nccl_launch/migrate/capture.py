"""`capture`: a running server's own environment, command line and directory."""

from __future__ import annotations

import shutil

import psutil

from nccl_launch.errors import HostError
from nccl_launch.migrate.start import StartCommand
from nccl_launch.nccl import catalog
from nccl_launch.profile.markers import MARKER_PROFILE, OWN_VARIABLES

# Variables worth keeping from a running server's environment besides NCCL_*.
CAPTURED_PREFIXES = (
    "CUDA_", "SGLANG_", "HF_", "TORCH_", "PYTORCH_", "TRANSFORMERS_", "FLASHINFER_",
    "NVSHMEM_", "UCX_", "TOKENIZERS_", "OMP_NUM_THREADS",
)  # fmt: skip


def read_process(pid: int) -> StartCommand:
    """A running process's own environment, command line and directory."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            environ, argv, cwd = process.environ(), process.cmdline(), process.cwd()
    except psutil.NoSuchProcess:
        raise HostError(f"no process with pid {pid}") from None
    except psutil.AccessDenied:
        raise HostError(
            f"permission denied reading process {pid}; run as its user or root"
        ) from None
    if argv and "/" not in argv[0]:
        argv[0] = shutil.which(argv[0], path=environ.get("PATH")) or argv[0]
    wanted = (catalog.PREFIX, *CAPTURED_PREFIXES)
    keep = {k: v for k, v in environ.items() if k.startswith(wanted) and k not in OWN_VARIABLES}
    notes = []
    if MARKER_PROFILE in environ:
        notes.append(f"the process was started by nccl-launch as {environ[MARKER_PROFILE]}")
    return StartCommand(env=keep, argv=argv, cwd=cwd, notes=notes)
