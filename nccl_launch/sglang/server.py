"""The `[server]` table of an SGLang profile: its command line, as typed fields."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nccl_launch.serving.table import STRICT, Name, Scalar, ServerTable, pass_through
from nccl_launch.sglang import facts


class Speculative(BaseModel):
    """`[server.speculative]`; other keys pass through as `--speculative-KEY VALUE`."""

    model_config = STRICT | ConfigDict(extra="allow")

    algorithm: str
    draft_model_path: Name | None = None
    num_steps: int | None = Field(default=None, ge=1)
    eagle_topk: int | None = Field(default=None, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=1)

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, algorithm: str) -> str:
        if algorithm.upper() not in facts.ALGORITHMS:
            valid = ", ".join(facts.ALGORITHMS)
            raise ValueError(f"{algorithm!r} is not valid; valid: {valid} (any case)")
        return algorithm.upper()

    @model_validator(mode="after")
    def _pass_through(self) -> Speculative:
        structured = tuple(flag for flag in facts.FLAGS if flag.field.startswith("speculative."))
        for key in pass_through(self.extra_settings()):
            flag = facts.flag_for(facts.extra_flag(key), structured)
            if flag is not None:
                raise ValueError(f"{key}: SGLang reads it as {flag.field}; write that key instead")
        return self

    def extra_settings(self) -> dict[str, Scalar]:
        """The pass-through settings, in file order."""
        return dict(self.model_extra or {})


class Server(ServerTable):
    """`[server]` of kind "sglang" (the default): the SGLang command line the launcher builds."""

    kind: Literal["sglang"] = "sglang"
    entrypoint: Name = facts.DEFAULT_ENTRYPOINT
    speculative: Speculative | None = None
