"""vLLM as a server kind (`kind = "vllm"`): what `kinds.Kind` asks of a kind, read from
this folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nccl_launch.findings import Finding
from nccl_launch.serving.api import Get, Served
from nccl_launch.serving.command import Given
from nccl_launch.serving.flags import Flag
from nccl_launch.vllm import api, facts, rules
from nccl_launch.vllm import argv as command_line
from nccl_launch.vllm.server import VllmServer, address_args


class Vllm:
    """`kind = "vllm"`: vLLM's `serve`."""

    name = "vllm"
    title = "vLLM"
    table = VllmServer
    api_key_flag = facts.API_KEY_FLAG
    api_key_env: str | None = facts.API_KEY_ENV  # read where the flag is absent
    default_host = facts.DEFAULT_HOST
    default_port = facts.DEFAULT_PORT
    draft_key = "model"
    parser = "nccl_launch.vllm.parser"
    node_rank_flag = next(flag.canonical for flag in facts.FLAGS if flag.field == "node_rank")
    script = facts.SCRIPT
    entrypoints: tuple[str, ...] = facts.ENTRYPOINTS
    credential_flags: tuple[str, ...] = facts.CREDENTIAL_FLAGS
    named_like_credentials: tuple[str, ...] = ()
    several_keys = True  # `--api-key K1 K2`
    env_prefix = facts.ENV_PREFIX

    def argv(self, server: VllmServer) -> list[str]:
        return command_line.server_argv(server)

    def problems(self, server: VllmServer) -> list[Finding]:
        return rules.server_problems(server)

    def warnings(self, server: VllmServer, env: dict[str, str]) -> list[Finding]:
        return rules.server_warnings(server, env)

    def environment_findings(
        self, server: VllmServer, env: Mapping[str, str], declared: Mapping[str, str]
    ) -> list[Finding]:
        return rules.environment_findings(server, env, declared)

    def owned_env(self, server: VllmServer | None, env: Mapping[str, str]) -> tuple[str, ...]:
        return () if server is None else rules.owned_env(server, env)

    def duplicated_flags(self, server: VllmServer, args: Sequence[str]) -> list[tuple[str, Flag]]:
        return command_line.duplicated_flags(server, args)

    def reads_as_api_key(self, option: str) -> bool:
        return facts.reads_as_api_key(option)

    def reads_as_credential(self, option: str) -> bool:
        return facts.reads_as_credential(option)

    def draft_model(self, server: VllmServer) -> str | None:
        return server.speculative.model if server.speculative else None

    def model_problem(
        self, server: VllmServer, architecture: Callable[[str], str | None]
    ) -> Finding | None:
        return None  # vLLM reads the draft's config itself, at start

    def address_args(self, address: str) -> list[str]:
        return address_args(address)

    def field_flag(self, option: str) -> Flag | None:
        return facts.flag_for(option)

    def leading_flag(self, entrypoint: str) -> Flag | None:
        return command_line.leading_flag(entrypoint)

    def reads(self, option: str) -> Flag | None:
        return facts.flag_for(option)

    def fields(self, given: Sequence[Given]) -> tuple[dict[str, Any], list[Given], list[str]]:
        return command_line.table_fields(given)

    def served(self, get: Get) -> Served:
        return api.served(get)

    def request_key(self, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
        return api.request_key(argv, env)
