"""The server kinds a `[server]` table may name (`kind`, SGLang by default) and what each
means: its table, its argv, its rules, the NCCL variables it sets; and the rules every kind
shares. Generic code asks `kind_of(server)`; nothing else branches on a kind."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Discriminator, Tag

from nccl_launch.findings import Finding
from nccl_launch.serving.api import Get, Served
from nccl_launch.serving.flags import Flag, empty_credentials, unfilled_credentials
from nccl_launch.serving.table import ServerTable
from nccl_launch.sglang import api as sglang_api
from nccl_launch.sglang import argv as sglang_argv
from nccl_launch.sglang import facts as sglang_facts
from nccl_launch.sglang import rules as sglang_rules
from nccl_launch.sglang.server import Server as SGLangServer
from nccl_launch.vllm import api as vllm_api
from nccl_launch.vllm import argv as vllm_argv
from nccl_launch.vllm import facts as vllm_facts
from nccl_launch.vllm import rules as vllm_rules
from nccl_launch.vllm.server import VllmServer

DEFAULT_KIND = "sglang"


@dataclass(frozen=True)
class ServerKind:
    """What one kind of server means; each function takes that kind's `[server]` table."""

    name: str
    title: str  # as people write it: "SGLang"
    table: type[ServerTable]
    argv: Callable[[Any], list[str]]
    problems: Callable[[Any], list[Finding]]  # its own rules, beyond the shared ones
    warnings: Callable[[Any, dict[str, str]], list[Finding]]
    owned_env: Callable[[Any, Mapping[str, str]], tuple[str, ...]]
    duplicated_flags: Callable[[Any, Sequence[str]], list[tuple[str, Flag]]]
    reads_as_api_key: Callable[[str], bool]
    reads_as_credential: Callable[[str], bool]  # any flag whose value is a secret
    flag_for: Callable[[str], Flag | None]
    api_key_flag: str
    default_host: str
    default_port: int
    # The speculative draft's path, where it has one, and its key in `[server.speculative]`.
    draft_model: Callable[[Any], str | None]
    draft_key: str
    # Its HTTP API: what it says of itself, the key a request carries (read from the server's
    # argv and environment), and the variable it reads a key from, where it has one.
    served: Callable[[Get], Served]
    request_key: Callable[[Sequence[str], Mapping[str, str]], str | None]
    api_key_env: str | None

    def address(self, server: ServerTable) -> tuple[str, int]:
        """Where the server listens: its host and port, the kind's defaults where unset."""
        return server.host or self.default_host, server.port or self.default_port


KINDS = {
    "sglang": ServerKind(
        name="sglang",
        title="SGLang",
        table=SGLangServer,
        argv=sglang_argv.server_argv,
        problems=sglang_rules.server_problems,
        warnings=sglang_rules.server_warnings,
        owned_env=lambda server, env: sglang_facts.OWNED_ENV,
        duplicated_flags=lambda server, args: sglang_argv.duplicated_flags(
            list(args), sglang_argv.extra_settings(server)
        ),
        reads_as_api_key=sglang_facts.reads_as_api_key,
        reads_as_credential=lambda option: sglang_facts.abbreviates(
            option, sglang_facts.CREDENTIAL_FLAGS
        ),
        flag_for=sglang_facts.flag_for,
        api_key_flag=sglang_facts.API_KEY_FLAG,
        default_host=sglang_facts.DEFAULT_HOST,
        default_port=sglang_facts.DEFAULT_PORT,
        draft_model=lambda server: server.speculative and server.speculative.draft_model_path,
        draft_key="draft_model_path",
        served=sglang_api.served,
        request_key=sglang_api.request_key,
        api_key_env=None,
    ),
    "vllm": ServerKind(
        name="vllm",
        title="vLLM",
        table=VllmServer,
        argv=vllm_argv.server_argv,
        problems=vllm_rules.server_problems,
        warnings=vllm_rules.server_warnings,
        owned_env=vllm_rules.owned_env,
        duplicated_flags=vllm_argv.duplicated_flags,
        reads_as_api_key=vllm_argv.reads_as_api_key,
        reads_as_credential=vllm_argv.reads_as_credential,
        flag_for=vllm_facts.flag_for,
        api_key_flag=vllm_facts.API_KEY_FLAG,
        default_host=vllm_facts.DEFAULT_HOST,
        default_port=vllm_facts.DEFAULT_PORT,
        draft_model=lambda server: server.speculative and server.speculative.model,
        draft_key="model",
        served=vllm_api.served,
        request_key=vllm_api.request_key,
        api_key_env=vllm_facts.API_KEY_ENV,
    ),
}


def kind_of(server: ServerTable) -> ServerKind:
    return KINDS[server.kind]


def _tag(table: Any) -> str | None:
    """The kind a `[server]` table names (SGLang when it names none); None for another."""
    kind = table.get("kind", DEFAULT_KIND) if isinstance(table, dict) else table.kind
    return kind if isinstance(kind, str) and kind in KINDS else None


INVALID_KIND = "server_kind"
# `[server]` as a profile reads it: the table of the kind it names.
Server = Annotated[
    Annotated[SGLangServer, Tag("sglang")] | Annotated[VllmServer, Tag("vllm")],
    Discriminator(
        _tag,
        custom_error_type=INVALID_KIND,
        custom_error_message=f"not a server kind; valid: {', '.join(KINDS)}",
    ),
]

# Where the server's arguments come from: the profile, or after `--` (run's, a unit's).
ARGS, EXTRA_ARGS = "server.args", "-- ARGS"
_KEY_FIX = "pass the key after '--' (a unit's ${NAME} that no EnvironmentFile= sets is empty)"
# In [server] args: written empty, or a `${NAME}` its env file sets empty.
_ARGS_KEY_FIX = (
    "refer to the key (--api-key ${API_KEY}) and give it a value in an env file the profile names"
)
_VALUE_FIX = (
    'give the key after it; quote a variable ("$API_KEY"): unquoted, an unset one is dropped'
)


def server_problems(server: ServerTable) -> list[Finding]:
    """Every rule a resolved `[server]` table must meet before its server is started."""
    problems = []
    if server.model_path is None:
        problems.append(Finding("missing-key", "server.model_path", "required key is missing"))
    if server.node_rank is not None and server.node_rank >= server.nnodes:
        message = f"{server.node_rank} is not below nnodes = {server.nnodes}"
        problems.append(Finding("node-rank", "server.node_rank", message))
    return problems + argument_findings(server) + kind_of(server).problems(server)


def argument_findings(
    server: ServerTable, extra: Sequence[str] | None = None, path: str = "", ref: str = ""
) -> list[Finding]:
    """What the server's rules say of its arguments, those of `[server] args` and the `extra`
    ones after `--` (of the profile `ref`, read from `path`; None where not known yet, as for
    `validate`): a structured field repeated, an API key given empty (the server then serves
    every request) or not given at all."""
    kind = kind_of(server)
    findings = []
    copy = f"(or of a copy: nccl-launch new NAME --from {shlex.quote(ref)})"
    for where, args in ((ARGS, server.args), (EXTRA_ARGS, extra or ())):
        for option, flag in kind.duplicated_flags(server, list(args)):
            message = f"{option} repeats the field {flag.field}"
            if where == EXTRA_ARGS:
                message += ", which `--` cannot change"
            fix = "set it there" if where == ARGS else f"set {flag.place} of {path} {copy}"
            findings.append(Finding("repeated-field", where, message, fix))
    # Read on from the profile's: its last flag may take the first word after `--`.
    argv = [*server.args, *(extra or ())]
    complete = extra is not None
    for index, option, valued in empty_credentials(argv, kind.reads_as_api_key, complete):
        at = index + 1 if valued and "=" not in argv[index] else index  # where the value is
        where = ARGS if at < len(server.args) else EXTRA_ARGS
        if valued:
            message = f"{option} has an empty value, which {kind.title} takes as no key "
            message += "(every request served)"
            fix = _ARGS_KEY_FIX if where == ARGS else _KEY_FIX
            findings.append(Finding("empty-key", where, message, fix))
        else:
            message = f"{option} has no value (another option follows, or nothing), which "
            message += f"{kind.title} refuses at start"
            findings.append(Finding("no-key", where, message, _VALUE_FIX))
    return findings


def unfilled_findings(server: ServerTable, extra: Sequence[str]) -> list[Finding]:
    """A credential flag after `--` of `run` or `preflight` whose value is a `${NAME}` no
    shell filled (single quotes, or a unit's line run by hand): the server would take the
    text itself as the key. A unit's Exec line is filled by systemd before `run` sees it."""
    kind = kind_of(server)
    return [
        Finding(
            "unfilled-key",
            EXTRA_ARGS,
            f"{option}'s value is a ${{NAME}} nothing filled, so {kind.title} would take that "
            "text as the key",
            'refer to the key in the profile\'s [server] args, or give it: -- --api-key "$API_KEY"',
        )
        for option in unfilled_credentials(extra, kind.reads_as_api_key)
    ]
