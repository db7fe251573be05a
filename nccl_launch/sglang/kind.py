"""SGLang as a server kind: what `kinds.Kind` asks of a kind, read from this folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nccl_launch.findings import Finding
from nccl_launch.serving.api import Get, Served
from nccl_launch.serving.command import Given
from nccl_launch.serving.flags import Flag
from nccl_launch.sglang import api, facts, rules
from nccl_launch.sglang import argv as command_line
from nccl_launch.sglang.server import Server


class SGLang:
    """`kind = "sglang"`, the default: SGLang's `launch_server`."""

    name = "sglang"
    title = "SGLang"
    table = Server
    api_key_flag = facts.API_KEY_FLAG
    api_key_env: str | None = None  # SGLang reads no key from its environment
    default_host = facts.DEFAULT_HOST
    default_port = facts.DEFAULT_PORT
    draft_key = "draft_model_path"
    parser = "nccl_launch.sglang.parser"
    node_rank_flag = next(flag.canonical for flag in facts.FLAGS if flag.field == "node_rank")
    script = facts.SCRIPT
    entrypoints: tuple[str, ...] = facts.ENTRYPOINTS
    credential_flags: tuple[str, ...] = facts.CREDENTIAL_FLAGS
    named_like_credentials: tuple[str, ...] = facts.NAMED_LIKE_CREDENTIALS
    several_keys = False
    env_prefix = facts.ENV_PREFIX

    def argv(self, server: Server) -> list[str]:
        return command_line.server_argv(server)

    def problems(self, server: Server) -> list[Finding]:
        return rules.server_problems(server)

    def warnings(self, server: Server, env: dict[str, str]) -> list[Finding]:
        return rules.server_warnings(server, env)

    def environment_findings(
        self, server: Server, env: Mapping[str, str], declared: Mapping[str, str]
    ) -> list[Finding]:
        return []

    def owned_env(self, server: Server | None, env: Mapping[str, str]) -> tuple[str, ...]:
        return facts.OWNED_ENV

    def duplicated_flags(self, server: Server, args: Sequence[str]) -> list[tuple[str, Flag]]:
        return command_line.duplicated_flags(list(args), command_line.extra_settings(server))

    def reads_as_api_key(self, option: str) -> bool:
        return facts.reads_as_api_key(option)

    def reads_as_credential(self, option: str) -> bool:
        return facts.reads_as_credential(option)

    def draft_model(self, server: Server) -> str | None:
        return server.speculative.draft_model_path if server.speculative else None

    def model_problem(
        self, server: Server, architecture: Callable[[str], str | None]
    ) -> Finding | None:
        return rules.mtp_problem(server, architecture(server.model_path or ""))

    def address_args(self, address: str) -> list[str]:
        flag = next(flag.canonical for flag in facts.FLAGS if flag.field == "dist_init_addr")
        return [flag, address]

    def field_flag(self, option: str) -> Flag | None:
        return facts.flag_for(option)

    def leading_flag(self, entrypoint: str) -> Flag | None:
        return None

    def reads(self, option: str) -> Flag | None:
        return command_line.reads(option)

    def fields(self, given: Sequence[Given]) -> tuple[dict[str, Any], list[Given], list[str]]:
        return command_line.table_fields(given)

    def served(self, get: Get) -> Served:
        return api.served(get)

    def request_key(self, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
        return api.request_key(argv, env)
