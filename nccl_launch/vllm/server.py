"""The `[server]` table of a vLLM profile (`kind = "vllm"`): its command line, as typed fields."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nccl_launch.serving.table import STRICT, Name, Scalar, ServerTable, pass_through
from nccl_launch.vllm import facts


class VllmSpeculative(BaseModel):
    """`[server.speculative]`: vLLM's `--speculative-config` JSON, key for key; keys beyond
    these pass through into it as written."""

    model_config = STRICT | ConfigDict(extra="allow")

    method: str
    model: Name | None = None
    num_speculative_tokens: int = Field(ge=1)

    @field_validator("method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        if method not in facts.METHODS:
            raise ValueError(f"{method!r} is not valid; valid: {', '.join(facts.METHODS)}")
        return method

    @model_validator(mode="after")
    def _pass_through(self) -> VllmSpeculative:
        settings = pass_through(self.extra_settings())
        if "tensor_parallel_size" in settings:
            raise ValueError(
                "tensor_parallel_size: vLLM refuses it here; write draft_tensor_parallel_size"
            )
        return self

    def extra_settings(self) -> dict[str, Scalar]:
        """The pass-through settings, in file order."""
        return dict(self.model_extra or {})


class VllmServer(ServerTable):
    """`[server]` of kind "vllm": the vLLM command line the launcher builds."""

    kind: Literal["vllm"]
    entrypoint: Name = facts.DEFAULT_ENTRYPOINT
    speculative: VllmSpeculative | None = None
