"""SGLang as a server kind: how it differs from a plain OpenAI-compatible server, read from
this folder."""

from __future__ import annotations

from nccl_launch.serving.base import Api, CommandLine, Credentials, Kind, Rules
from nccl_launch.sglang import api, facts, rules
from nccl_launch.sglang import argv as command_line
from nccl_launch.sglang.server import Server

# `kind = "sglang"`, the default: SGLang's `launch_server`.
SGLANG = Kind(
    name="sglang",
    title="SGLang",
    table=Server,
    env_prefix=facts.ENV_PREFIX,
    command=CommandLine(
        script=facts.SCRIPT,
        entrypoints=facts.ENTRYPOINTS,
        argv=command_line.server_argv,
        flag=facts.flag_for,
        reads_flag=command_line.reads,
        fields=command_line.table_fields,
        repeats=command_line.duplicated_flags,
    ),
    credentials=Credentials(
        api_key_flag=facts.API_KEY_FLAG,
        flags=facts.CREDENTIAL_FLAGS,
        named_like=facts.NAMED_LIKE_CREDENTIALS,
        api_key_option=facts.reads_as_api_key,
        credential_option=facts.reads_as_credential,
        request_key_of=api.request_key,
    ),
    api=Api(default_host=facts.DEFAULT_HOST, default_port=facts.DEFAULT_PORT, served=api.served),
    rules=Rules(
        problems=rules.server_problems,
        warnings=rules.server_warnings,
        owned_env=rules.owned_env,
        model_problem=rules.model_problem,
        draft_model=rules.draft_model,
    ),
    probe="nccl_launch.sglang.parser",
)
