"""The rules every server kind's `[server]` table meets, whatever its kind: a model, a node
rank below nnodes, no structured field repeated in its arguments, no API key given empty or
left unfilled; then the kind's own."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from nccl_launch.findings import ARGS, EXTRA_ARGS, Finding, empty_key
from nccl_launch.serving.base import Kind
from nccl_launch.serving.flags import empty_credentials, unfilled_credentials
from nccl_launch.serving.table import ServerTable

_VALUE_FIX = (
    'give the key after it; quote a variable ("$API_KEY"): unquoted, an unset one is dropped'
)


def server_problems(kind: Kind[Any], server: ServerTable) -> list[Finding]:
    """Every rule a resolved `[server]` table (of `kind`) must meet before its server is
    started."""
    problems = []
    if server.model_path is None:
        problems.append(Finding("missing-key", "server.model_path", "required key is missing"))
    if server.node_rank is not None and server.node_rank >= server.nnodes:
        message = f"{server.node_rank} is not below nnodes = {server.nnodes}"
        problems.append(Finding("node-rank", "server.node_rank", message))
    return problems + argument_findings(kind, server) + kind.rules.problems(server)


def argument_findings(
    kind: Kind[Any],
    server: ServerTable,
    extra: Sequence[str] | None = None,
    path: str = "",
    ref: str = "",
) -> list[Finding]:
    """What the rules of the server's `kind` say of its arguments, those of `[server] args`
    and the `extra` ones after `--` (of the profile `ref`, read from `path`; None where not
    known yet, as for `validate`): a structured field repeated, an API key given empty (the
    server then serves every request) or not given at all."""
    findings = []
    copy = f"(or of a copy: nccl-launch new NAME --from {shlex.quote(ref)})"
    for where, args in ((ARGS, server.args), (EXTRA_ARGS, extra or ())):
        for option, flag in kind.command.duplicated_flags(server, list(args)):
            message = f"{option} repeats the field {flag.field}"
            if where == EXTRA_ARGS:
                message += ", which `--` cannot change"
            fix = "set it there" if where == ARGS else f"set {flag.place} of {path} {copy}"
            findings.append(Finding("repeated-field", where, message, fix))
    # Read on from the profile's: its last flag may take the first word after `--`.
    argv = [*server.args, *(extra or ())]
    complete = extra is not None
    for index, option, valued in empty_credentials(
        argv, kind.credentials.reads_as_api_key, complete
    ):
        at = index + 1 if valued and "=" not in argv[index] else index  # where the value is
        where = ARGS if at < len(server.args) else EXTRA_ARGS
        if valued:
            findings.append(empty_key(kind.title, f"{option}'s value", where))
        else:
            message = f"{option} has no value (another option follows, or nothing), which "
            message += f"{kind.title} refuses at start"
            findings.append(Finding("no-key", where, message, _VALUE_FIX))
    return findings


def unfilled_findings(kind: Kind[Any], extra: Sequence[str]) -> list[Finding]:
    """A credential flag after `--` of `run` or `preflight` whose value is a `${NAME}` no
    shell filled (single quotes, or a unit's line run by hand): the server would take the
    text itself as the key. A unit's Exec line is filled by systemd before `run` sees it."""
    return [
        Finding(
            "unfilled-key",
            EXTRA_ARGS,
            f"{option}'s value is a ${{NAME}} nothing filled, so {kind.title} would take that "
            "text as the key",
            'refer to the key in the profile\'s [server] args, or give it: -- --api-key "$API_KEY"',
        )
        for option in unfilled_credentials(extra, kind.credentials.reads_as_api_key)
    ]
