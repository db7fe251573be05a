"""The names of preflight's checks: what its report calls each line, and what `--skip` takes.

Without models: a TAB imports this module with `preflight`'s options; the kinds, and so the
choices of `--skip`, are read only when `--skip` is.
"""

from __future__ import annotations

from typing import Literal, get_args

# Preflight's own checks; the server's check between the host's and the argv's is named after
# its kind (`kinds.names()`).
OwnCheck = Literal[
    "profile", "environment", "nccl.conf", "env-plugin", "gpus", "port", "python", "paths",
    "argv",
]  # fmt: skip
CheckName = str  # an `OwnCheck`, or a kind's name
# `run` checks these too: preflight never leaves them out.
ALWAYS_CHECKED = ("profile", "environment")


def skippable() -> tuple[str, ...]:
    """What `--skip` takes: every check but those `run` makes too, in the report's order."""
    from nccl_launch.kinds import names  # the models: read when --skip is, not on a TAB's path

    *host, argv = (name for name in get_args(OwnCheck) if name not in ALWAYS_CHECKED)
    return (*host, *names(), argv)
