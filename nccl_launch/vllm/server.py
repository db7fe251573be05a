"""The `[server]` table of a vLLM profile (`kind = "vllm"`): its command line, as typed fields."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nccl_launch.digits import is_ascii_digits
from nccl_launch.serving.table import STRICT, TOML_INT, Name, Scalar, ServerTable, pass_through
from nccl_launch.vllm import facts


def split_address(address: str) -> tuple[str, str] | None:
    """HOST and PORT of `HOST:PORT` (an IPv6 host in brackets: `[::1]:5000`), or None for
    anything else (`fe80::1` alone would read as `fe80:` and port 1)."""
    host, colon, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if (":" in host and not bracketed) or not colon or not host.strip("[]"):
        return None
    if not is_ascii_digits(port) or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), port


def address_args(address: str) -> list[str]:
    """The first node's `HOST:PORT` as vLLM takes it; ValueError for another form."""
    split = split_address(address)
    if split is None:
        flags = " and ".join(facts.ADDRESS_FLAGS)
        raise ValueError(f"{address!r} is not HOST:PORT (vLLM's {flags})")
    host_flag, port_flag = facts.ADDRESS_FLAGS
    return [host_flag, split[0], port_flag, split[1]]


class VllmSpeculative(BaseModel):
    """`[server.speculative]`: vLLM's `--speculative-config` JSON, key for key; keys beyond
    these pass through into it as written."""

    model_config = STRICT | ConfigDict(extra="allow")

    method: str
    model: Name | None = None
    num_speculative_tokens: int = Field(ge=1, lt=TOML_INT)

    @field_validator("method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        if method in facts.DEPRECATED_MTP:
            raise ValueError(f"{method!r} is vLLM's deprecated name of 'mtp'; write mtp")
        if method not in facts.METHODS:
            raise ValueError(f"{method!r} is not valid; valid: {', '.join(facts.METHODS)}")
        return method

    @field_validator("model")
    @classmethod
    def _named(cls, model: str | None) -> str | None:
        if model == "":
            raise ValueError("empty; give the draft model's path, or leave model out")
        return model

    @model_validator(mode="after")
    def _pass_through(self) -> VllmSpeculative:
        for key in pass_through(self.extra_settings()):
            if key == "tensor_parallel_size":
                raise ValueError(f"{key}: vLLM refuses it here; write draft_tensor_parallel_size")
            if key not in facts.SPECULATIVE_KEYS:
                valid = ", ".join(facts.SPECULATIVE_KEYS)
                raise ValueError(f"{key}: unknown key; valid in [server.speculative]: {valid}")
        return self

    def extra_settings(self) -> dict[str, Scalar]:
        """The pass-through settings, in file order."""
        return dict(self.model_extra or {})


class VllmServer(ServerTable):
    """`[server]` of kind "vllm": the vLLM command line the launcher builds."""

    kind: Literal["vllm"]
    entrypoint: Name = facts.DEFAULT_ENTRYPOINT
    speculative: VllmSpeculative | None = None

    @field_validator("dist_init_addr")
    @classmethod
    def _address(cls, address: str | None) -> str | None:
        if address is not None:
            address_args(address)  # vLLM takes it as two flags
        return address
