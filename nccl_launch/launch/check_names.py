"""The names of preflight's checks: what its report calls each line, and what `--skip` takes.

Without models: `preflight --skip`'s choices are read when a TAB completes its options.
"""

from __future__ import annotations

from typing import Literal, get_args

CheckName = Literal[
    "profile", "environment", "nccl.conf", "env-plugin", "gpus", "port", "python", "paths",
    "sglang", "vllm", "argv",
]  # fmt: skip
# `run` checks these too: preflight never leaves them out.
ALWAYS_CHECKED = ("profile", "environment")
SKIPPABLE: tuple[str, ...] = tuple(
    name for name in get_args(CheckName) if name not in ALWAYS_CHECKED
)
