"""What the bench tests share: the stand-in's profile as they write it, short runs, the mean's
line, the history, a clock of the test's own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.helpers import PROFILE as LIVE_PROFILE

PROFILE = LIVE_PROFILE.replace('BUFFSIZE = "{buffsize}"\n', "")  # the live tests', less BUFFSIZE
FAST = ("--max-tokens", "60", "--runs", "2", "--warmup", "1")
MEAN = re.compile(r"^mean (\d+\.\d) tok/s over", re.MULTILINE)


def default_history(home: Path) -> Path:
    return home / ".local" / "state" / "nccl-launch" / "bench.jsonl"


def history_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Ticks:
    """A clock that reads `step` seconds later at each look: bench's figures on it are the
    same on a quiet host and a busy one."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now
