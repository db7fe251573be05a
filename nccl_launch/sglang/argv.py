"""The SGLang command line a `[server]` table stands for, every flag spelled canonically;
and the table a command line's structured flags give."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from nccl_launch.findings import Finding
from nccl_launch.serving.command import INTEGER_FIELDS, Given, field_value
from nccl_launch.serving.flags import Flag
from nccl_launch.serving.table import Scalar
from nccl_launch.sglang.facts import FLAGS, SPECULATIVE_PREFIX, extra_flag, flag_for
from nccl_launch.sglang.server import Server

# Emitted only when they differ from SGLang's default, so that simple profiles stay short.
_OMITTED_DEFAULTS = {"pp_size": 1, "nnodes": 1}


def structured_values(server: Server) -> dict[str, object]:
    """Every structured field's value by its dotted name (`speculative.num_steps`)."""
    values = {}
    for flag in FLAGS:
        section, _, key = flag.field.rpartition(".")
        owner = server.speculative if section else server
        values[flag.field] = getattr(owner, key) if owner is not None else None
    return values


def server_argv(server: Server) -> list[str]:
    """The SGLang command line of a `[server]` table, every flag spelled canonically."""
    values = structured_values(server)
    argv = [server.python, *shlex.split(server.entrypoint)]
    for flag in FLAGS:
        value = values[flag.field]
        if value is not None and _OMITTED_DEFAULTS.get(flag.field) != value:
            argv += [flag.canonical, str(value)]
    for key, setting in extra_settings(server).items():
        if setting is True:
            argv.append(extra_flag(key))
        elif setting is not False:
            argv += [extra_flag(key), str(setting)]
    return argv + list(server.args)


def extra_settings(server: Server) -> dict[str, Scalar]:
    """The pass-through `[server.speculative]` settings, in file order."""
    return server.speculative.extra_settings() if server.speculative is not None else {}


def duplicated_flags(server: Server, args: Sequence[str]) -> list[tuple[str, Flag]]:
    """Options in `args` (as written, without `=VALUE`) that repeat a structured field or one of
    the table's pass-through speculative settings (any spelling or unique prefix), with the
    field."""
    extras = tuple(Flag(f"speculative.{key}", extra_flag(key)) for key in extra_settings(server))
    repeated = []
    for option in args:
        if not option.startswith("--"):
            continue
        flag = flag_for(option, FLAGS + extras)
        if flag is not None:
            repeated.append((option.split("=", 1)[0], flag))
    return repeated


_INTEGERS = (
    *INTEGER_FIELDS, "speculative.num_steps", "speculative.eagle_topk",
    "speculative.num_draft_tokens",
)  # fmt: skip


def reads(option: str) -> Flag | None:
    """The field an option of an SGLang command line gives: a structured one, or any other
    `--speculative-KEY` as the pass-through `speculative.KEY`."""
    flag = flag_for(option)
    name = option.split("=", 1)[0]
    if flag is None and name.startswith(SPECULATIVE_PREFIX):
        key = name.removeprefix(SPECULATIVE_PREFIX).replace("-", "_")
        return Flag(f"speculative.{key}", name)
    return flag


def table_fields(given: Sequence[Given]) -> tuple[dict[str, Any], list[Given], list[Finding]]:
    """The `[server]` fields the structured flags `given` set (the last of each wins, as in
    argparse; a pass-through flag without a value is true); none is left to the args."""
    table: dict[str, Any] = {}
    speculative: dict[str, Any] = {}
    for each in given:
        section, _, key = each.flag.field.rpartition(".")
        passed = each.flag not in FLAGS
        value = True if passed and each.value is None else each.value
        parsed = value if passed else field_value(each, _INTEGERS)
        (speculative if section else table)[key] = parsed
    if speculative:
        table["speculative"] = speculative
    return table, [], []
