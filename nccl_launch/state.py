"""Where nccl-launch keeps its state: bench's history, tune's journals, NCCL's logs of a run."""

from __future__ import annotations

from pathlib import PurePath

from nccl_launch.files import BaseDirectory, base_directory

HERE = PurePath("nccl-launch")  # under the state home


def state_home() -> BaseDirectory:
    """$XDG_STATE_HOME, else ~/.local/state, as the XDG Base Directory specification says."""
    return base_directory("XDG_STATE_HOME", ".local/state")
