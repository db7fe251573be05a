"""The server kinds a `[server]` table may name (`kind`, SGLang by default) and what each
means: its table, its argv, its rules, the NCCL variables it sets; and the rules every kind
shares. Generic code asks `kind_of(server)`; nothing else branches on a kind."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Discriminator, Tag

from nccl_launch.findings import Finding, empty_key
from nccl_launch.serving.api import Get, Served
from nccl_launch.serving.command import Given, split_command
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
from nccl_launch.vllm.server import VllmServer, address_args

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
    # What the environment the server gets makes it do to the profile's declared values,
    # beyond what the profile's own [env] says (`warnings` judges that).
    environment_findings: Callable[[Any, Mapping[str, str], Mapping[str, str]], list[Finding]]
    owned_env: Callable[[Any, Mapping[str, str]], tuple[str, ...]]
    duplicated_flags: Callable[[Any, Sequence[str]], list[tuple[str, Flag]]]
    reads_as_api_key: Callable[[str], bool]
    api_key_flag: str
    api_key_env: str | None  # a variable the server reads its key from, where the flag is absent
    default_host: str
    default_port: int
    # The speculative draft's path, where it has one, and its key in `[server.speculative]`.
    draft_model: Callable[[Any], str | None]
    draft_key: str
    # Why the model (of the architecture its config.json names on this host, None where
    # unreadable) cannot serve the table, where the kind judges it before start.
    model_problem: Callable[[Any, str | None], Finding | None] | None
    # The module asking the installed server (`probe`, `expected_values`): imported by
    # preflight alone, off `run`'s path.
    parser: str
    # Where placement puts this node: its rank's flag, and the first node's HOST:PORT as
    # arguments (ValueError for an address the kind cannot take).
    node_rank_flag: str
    address_args: Callable[[str], list[str]]
    # Its command line read back into a table (`convert`, `capture`): the console script
    # and the interpreter's entrypoints that start it, the flag a first plain word after the
    # entrypoint stands for, the field each option gives, and the fields those give.
    script: str
    entrypoints: tuple[str, ...]
    leading_flag: Callable[[str], Flag | None]
    reads: Callable[[str], Flag | None]
    fields: Callable[[Sequence[Given]], tuple[dict[str, Any], list[Given], list[str]]]
    credential_flags: tuple[str, ...]  # whose values are secrets, spelled in full
    # Whether its parser may read an option as one of those (a prefix, `_` for `-`); its
    # flags only named like one (`--speculative-token-map`), shown; whether its API-key flag
    # takes several keys (`--api-key K1 K2`).
    reads_as_credential: Callable[[str], bool]
    named_like_credentials: tuple[str, ...]
    several_keys: bool
    env_prefix: str  # of the variables it reads
    # Its HTTP API: what it says of itself, the key a request carries (read from the server's
    # argv and environment).
    served: Callable[[Get], Served]
    request_key: Callable[[Sequence[str], Mapping[str, str]], str | None]

    def address(self, server: ServerTable) -> tuple[str, int]:
        """Where the server listens: its host and port, the kind's defaults where unset."""
        return server.host or self.default_host, server.port or self.default_port


def _canonical(flags: Sequence[Flag], field: str) -> str:
    """The canonical spelling of the flag for `field` among `flags`."""
    return next(flag.canonical for flag in flags if flag.field == field)


KINDS = {
    "sglang": ServerKind(
        name="sglang",
        title="SGLang",
        table=SGLangServer,
        argv=sglang_argv.server_argv,
        problems=sglang_rules.server_problems,
        warnings=sglang_rules.server_warnings,
        environment_findings=lambda server, env, declared: [],
        owned_env=lambda server, env: sglang_facts.OWNED_ENV,
        duplicated_flags=lambda server, args: sglang_argv.duplicated_flags(
            list(args), sglang_argv.extra_settings(server)
        ),
        reads_as_api_key=sglang_facts.reads_as_api_key,
        api_key_flag=sglang_facts.API_KEY_FLAG,
        api_key_env=None,
        default_host=sglang_facts.DEFAULT_HOST,
        default_port=sglang_facts.DEFAULT_PORT,
        draft_model=lambda server: server.speculative and server.speculative.draft_model_path,
        draft_key="draft_model_path",
        model_problem=sglang_rules.mtp_problem,
        parser="nccl_launch.sglang.parser",
        node_rank_flag=_canonical(sglang_facts.FLAGS, "node_rank"),
        address_args=lambda address: [_canonical(sglang_facts.FLAGS, "dist_init_addr"), address],
        script=sglang_facts.SCRIPT,
        entrypoints=sglang_facts.ENTRYPOINTS,
        leading_flag=lambda entrypoint: None,
        reads=sglang_argv.reads,
        fields=sglang_argv.table_fields,
        credential_flags=sglang_facts.CREDENTIAL_FLAGS,
        reads_as_credential=sglang_facts.reads_as_credential,
        named_like_credentials=sglang_facts.NAMED_LIKE_CREDENTIALS,
        several_keys=False,
        env_prefix=sglang_facts.ENV_PREFIX,
        served=sglang_api.served,
        request_key=sglang_api.request_key,
    ),
    "vllm": ServerKind(
        name="vllm",
        title="vLLM",
        table=VllmServer,
        argv=vllm_argv.server_argv,
        problems=vllm_rules.server_problems,
        warnings=vllm_rules.server_warnings,
        environment_findings=vllm_rules.environment_findings,
        owned_env=vllm_rules.owned_env,
        duplicated_flags=vllm_argv.duplicated_flags,
        reads_as_api_key=vllm_facts.reads_as_api_key,
        api_key_flag=vllm_facts.API_KEY_FLAG,
        api_key_env=vllm_facts.API_KEY_ENV,
        default_host=vllm_facts.DEFAULT_HOST,
        default_port=vllm_facts.DEFAULT_PORT,
        draft_model=lambda server: server.speculative and server.speculative.model,
        draft_key="model",
        model_problem=None,  # vLLM reads the draft's config itself, at start
        parser="nccl_launch.vllm.parser",
        node_rank_flag=_canonical(vllm_facts.FLAGS, "node_rank"),
        address_args=address_args,
        script=vllm_facts.SCRIPT,
        entrypoints=vllm_facts.ENTRYPOINTS,
        leading_flag=vllm_argv.leading_flag,
        reads=vllm_facts.flag_for,
        fields=vllm_argv.table_fields,
        credential_flags=vllm_facts.CREDENTIAL_FLAGS,
        reads_as_credential=vllm_facts.reads_as_credential,
        named_like_credentials=(),
        several_keys=True,
        env_prefix=vllm_facts.ENV_PREFIX,
        served=vllm_api.served,
        request_key=vllm_api.request_key,
    ),
}


def kind_of(server: ServerTable) -> ServerKind:
    return KINDS[server.kind]


def command_of(argv: Sequence[str]) -> tuple[ServerKind, tuple[str, str, list[str]]] | None:
    """The kind of server a command line starts, with its (python, entrypoint, the words
    after it); None for a command that starts none."""
    for kind in KINDS.values():
        split = split_command(argv, kind.script, kind.entrypoints)
        if split is not None:
            return kind, split
    return None


def server_commands() -> list[str]:
    """The command lines that start a server, as a start script writes them."""
    return [
        form
        for kind in KINDS.values()
        for form in (*(f"python {entry}" for entry in kind.entrypoints), f"{kind.script} serve")
    ]


def _tag(table: Any) -> str | None:
    """The kind a `[server]` table names (SGLang when it names none, or is no table, which
    SGLang's then refuses as such); None for another."""
    if isinstance(table, ServerTable):
        return table.kind
    kind = table.get("kind", DEFAULT_KIND) if isinstance(table, dict) else DEFAULT_KIND
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
            findings.append(empty_key(kind.title, f"{option}'s value", where))
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
