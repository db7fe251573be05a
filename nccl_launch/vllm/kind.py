"""vLLM as a server kind (`kind = "vllm"`): how it differs from a plain OpenAI-compatible
server, read from this folder."""

from __future__ import annotations

from nccl_launch.serving.base import Api, CommandLine, Credentials, Kind, Rules
from nccl_launch.vllm import api, facts, rules
from nccl_launch.vllm import argv as command_line
from nccl_launch.vllm.server import VllmServer, address_args

# `kind = "vllm"`: vLLM's `serve`. Its HTTP API is the plain one: `/version`, `/v1/models`.
VLLM = Kind(
    name="vllm",
    title="vLLM",
    table=VllmServer,
    env_prefix=facts.ENV_PREFIX,
    command=CommandLine(
        script=facts.SCRIPT,
        entrypoints=facts.ENTRYPOINTS,
        argv=command_line.server_argv,
        flag=facts.flag_for,
        leading_flag=command_line.leading_flag,
        fields=command_line.table_fields,
        repeats=command_line.duplicated_flags,
        address_args=address_args,
    ),
    credentials=Credentials(
        api_key_flag=facts.API_KEY_FLAG,
        flags=facts.CREDENTIAL_FLAGS,
        api_key_env=facts.API_KEY_ENV,
        several_keys=True,  # `--api-key K1 K2`
        api_key_option=facts.reads_as_api_key,
        credential_option=facts.reads_as_credential,
        request_key_of=api.request_key,
    ),
    api=Api(default_host=facts.DEFAULT_HOST, default_port=facts.DEFAULT_PORT),
    rules=Rules(
        problems=rules.server_problems,
        warnings=rules.server_warnings,
        environment_findings=rules.environment_findings,
        owned_env=rules.owned_env,
        draft_key="model",
        draft_model=rules.draft_model,
    ),
    probe="nccl_launch.vllm.parser",
)
