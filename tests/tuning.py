"""What the tune tests share: the seed profile, tune's short trials and the stand-in's rate
model, the journals, the search's pure objective, and bench's clock on a seeded objective."""

from __future__ import annotations

import contextlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from nccl_launch.bench.client import Client
from nccl_launch.bench.stats import Start
from nccl_launch.tune.search import Space, Values
from tests.helpers import STANDIN

SEED = """
schema = 1
name = "standin"
version = 1
[nccl]
PROTO = "LL"
ALGO = "Ring"
MAX_NCHANNELS = 16
BUFFSIZE = "16MiB"
NTHREADS = 512
[server]
python = "{python}"
model_path = "/models/m"
tp_size = 2
port = {port}
nnodes = {nnodes}
[policy]
accept = ["NCCL_MAX_NCHANNELS deprecated"]
"""
# Short trials: 3 runs of 40 tokens at about 400 tok/s (0.1 s: what these tests assert of a
# figure holds whatever the host's delays, or they run slower, see CLEAR), no warm-up; a
# server that is not ready within 2 s never will be (the stand-in is up in a fraction of a
# second).
FAST = ("--max-tokens", "40", "--runs", "3", "--warmup", "0", "--ready-timeout", "2")
MODEL = {
    "PYTHONPATH": str(STANDIN),
    "STANDIN_TUNE_MODEL": "1",
    "STANDIN_SEED": "0",
    "STANDIN_TOKEN_RATE": "400",
}
# Where a test needs tune to find a winner and is not about the noise: PROTO=LL128 doubles a
# rate of 100 tok/s. Runs of FAST's 40 tokens time windows of 0.39 s (LL) and 0.195 s (LL128):
# with the host waking the server or bench 0.06 s late at either end of a run (the most seen
# beside other tests and busy loops on both cores), each run of LL128 is still faster than
# each of LL (39 / 0.255 = 153 tok/s against 39 / 0.33 = 118): a busy host hides no effect.
CLEAR = MODEL | {
    "STANDIN_TOKEN_RATE": "100",
    "STANDIN_TUNE_FACTORS": json.dumps({"NCCL_PROTO": {"LL128": 2.0}}),
}


def journals(tmp_path: Path) -> list[Path]:
    return sorted(
        (tmp_path / "home" / ".local" / "state" / "nccl-launch" / "tune").glob("*/*.jsonl")
    )


def journal_lines(path: Path) -> list[dict[str, Any]]:
    """The journal's finished trials (a torn line, and the line of a server started, skipped)."""
    found = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            found.append(json.loads(line))
    return [line for line in found if line.get("outcome") is not None]


class Separable:
    """A rate that is a product of one factor per variable (like the stand-in's), times a
    factor of each start uniform in [1 - `noise`, 1 + `noise`] drawn from `seed` (none: the
    same rate at every start); None for the values of `fails`. Records what was started."""

    def __init__(
        self,
        factors: dict[str, dict[str | None, float]],
        noise: float = 0.0,
        seed: int = 0,
        fails: Values | None = None,
    ):
        self.factors = factors
        self.noise = noise
        self.draw = random.Random(seed)  # noqa: S311 - noise, not a secret
        self.fails = fails or {}
        self.measured: list[str] = []

    def key(self, values: Values) -> str:
        return repr(sorted(values.items(), key=lambda item: item[0]))

    def measure(self, values: Values) -> Start | None:
        self.measured.append(self.key(values))
        if self.fails and self.fails.items() <= values.items():
            return None
        rate = 100.0 * self.draw.uniform(1 - self.noise, 1 + self.noise)
        for name, value in values.items():
            rate *= self.factors[name].get(value, 1.0)
        return Start((rate, rate))


FACTORS: dict[str, dict[str | None, float]] = {
    "PROTO": {None: 0.80, "LL": 1.00, "LL128": 1.12, "Simple": 0.85},
    "MAX_NCHANNELS": {None: 0.90, "8": 1.06, "16": 1.00, "32": 0.94},
    "NTHREADS": {None: 0.97, "256": 1.03, "512": 1.00},
}
SPACE: Space = {
    "PROTO": ("LL", "LL128", "Simple"),
    "MAX_NCHANNELS": ("8", "16", "32"),
    "NTHREADS": ("256", "512"),
}
START: Values = {"PROTO": "LL", "MAX_NCHANNELS": "16", "NTHREADS": "512"}


def chart(stdout: str) -> list[str]:
    """The chart of the search's candidates: from its scale's line to the confirmation."""
    lines = stdout.splitlines()
    begin = next(i for i, line in enumerate(lines) if "TOK/S  95% INTERVAL" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("confirmation: "))
    return lines[begin:end]


class Objective:
    """bench's clock (`Client.clock`) on a seeded objective, for a decision of `tune` that must
    not depend on how busy the host is: the server measured decodes at `rate` tok/s and
    prefills at `prefill` tok/s, times the factors of the NCCL environment it really runs with
    (`factors`, `prefill_factors`: the stand-in's STANDIN_TUNE_FACTORS shape, "" for unset),
    times one factor of its start uniform in [1 - `noise`, 1 + `noise`] drawn from `seed` (a
    start: one measure, one Client). A run's first text comes `prompt / prefill` s after its
    request and its last of `tokens` (the method's max_tokens) `(tokens - 1) / rate` s after
    that: bench's figures are those rates exactly. Records each start's rates in `starts`."""

    def __init__(
        self,
        factors: dict[str, dict[str, float]],
        tokens: int,
        noise: float = 0.0,
        seed: int = 0,
        prefill_factors: dict[str, dict[str, float]] | None = None,
        prompt: int = 0,
    ) -> None:
        self.factors, self.prefill_factors = factors, prefill_factors or {}
        self.tokens, self.prompt = tokens, prompt
        self.noise = noise
        self.draw = random.Random(seed)  # noqa: S311 - noise, not a secret
        self.rate, self.prefill = 100.0, 1000.0
        self.now = 0.0
        self.client: Client | None = None
        self.sent = False
        self.starts: list[tuple[float, float]] = []  # (decode, prefill) tok/s of each start

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make it the clock of every Client until the test ends (a function: it is handed
        the Client that looks)."""
        monkeypatch.setattr(Client, "clock", lambda client: self.look(client))

    def look(self, client: Client) -> float:
        """The time now, after what the look's place in a run says has passed: nothing at
        the request (`complete`) or a phase's origin (`_phase`), the prefill at the first
        text (`_read_events`), the decode at [DONE] (`complete` again)."""
        if client is not self.client:
            self.client, self.sent = client, False
            self.starts.append(self._rates(client))
        decode, prefill = self.starts[-1]
        place = sys._getframe(2).f_code.co_name  # the lambda's caller
        assert place in ("_phase", "complete", "_read_events"), f"a look from {place}"
        if place == "_read_events":
            self.now += self.prompt / prefill
        elif place == "complete":
            self.now += (self.tokens - 1) / decode if self.sent else 0.0
            self.sent = not self.sent
        return self.now

    def _rates(self, client: Client) -> tuple[float, float]:
        """The decode and prefill rates of the server `client` measures: the listener on its
        port, by the NCCL environment that process runs with."""
        port = int(client.url.unmasked().rpartition(":")[2])
        (pid,) = {
            found.pid
            for found in psutil.net_connections("tcp")
            if found.laddr and found.laddr.port == port and found.status == psutil.CONN_LISTEN
        }
        environ = psutil.Process(pid).environ()
        start = self.draw.uniform(1 - self.noise, 1 + self.noise)
        decode, prefill = self.rate * start, self.prefill * start
        for name, table in self.factors.items():
            decode *= table.get(environ.get(name, ""), 1.0)
        for name, table in self.prefill_factors.items():
            prefill *= table.get(environ.get(name, ""), 1.0)
        return decode, prefill
