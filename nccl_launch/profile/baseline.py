"""The `[baseline]` table: the decode speed a profile should reach, and how it was measured."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nccl_launch.sglang.server import STRICT

DEFAULT_TOLERANCE = 0.05


class Baseline(BaseModel):
    """What `bench` holds the server to: the mean may fall at most `tolerance` below.

    `max_tokens` and `runs` record the method the figure was measured with; `bench` uses
    them as its defaults and compares only a measurement made the same way.
    """

    model_config = STRICT

    decode_tok_s: float = Field(gt=0, allow_inf_nan=False)
    tolerance: float = Field(default=DEFAULT_TOLERANCE, ge=0, lt=1)
    max_tokens: int | None = Field(default=None, ge=1)
    runs: int | None = Field(default=None, ge=1)

    @property
    def floor(self) -> float:
        """The lowest mean that still meets the baseline."""
        return self.decode_tok_s * (1 - self.tolerance)
