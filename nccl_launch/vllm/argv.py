"""The vLLM command line a `[server]` table stands for, every flag spelled canonically;
and the table a command line's structured flags give."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from nccl_launch.findings import Finding, Refused
from nccl_launch.serving.command import Given, field_value, no_value
from nccl_launch.serving.flags import Flag
from nccl_launch.vllm.facts import ADDRESS_FLAGS, FLAGS, SERVE, flag_for, option_for, options
from nccl_launch.vllm.server import VllmServer as Server
from nccl_launch.vllm.server import VllmSpeculative, address_args

REFUSED = "vLLM refuses it"
# Emitted only when they differ from vLLM's default, so that simple profiles stay short.
_OMITTED_DEFAULTS = {"tp_size": 1, "pp_size": 1, "nnodes": 1}
_VALUED = ("tp_size", "pp_size", "host", "port", "nnodes", "node_rank")


def speculative_config(server: Server) -> str | None:
    """`[server.speculative]` as the JSON `--speculative-config` takes, keys in file order."""
    spec = server.speculative
    if spec is None:
        return None
    config = spec.model_dump(exclude_none=True, exclude=set(spec.extra_settings()))
    return json.dumps(config | spec.extra_settings(), separators=(",", ":"))


def server_argv(server: Server) -> list[str]:
    """The vLLM command line of a `[server]` table: the model positional after `serve`, else
    `--model` (the deprecated module reads no other)."""
    argv = [server.python, *shlex.split(server.entrypoint)]
    canonical = {flag.field: flag.canonical for flag in FLAGS}
    if server.model_path is not None:
        model = [server.model_path]
        argv += model if leading_flag(server.entrypoint) else [canonical["model_path"], *model]
    for field in _VALUED:
        value = getattr(server, field)
        if value is not None and _OMITTED_DEFAULTS.get(field) != value:
            argv += [canonical[field], str(value)]
    if server.dist_init_addr is not None:
        argv += address_args(server.dist_init_addr)
    config = speculative_config(server)
    if config is not None:
        argv += [canonical["speculative"], config]
    return argv + list(server.args)


# Fields a flag of the args may stand beside while the table leaves them unset: a lone
# `--master-addr` or `--master-port`, a `--speculative-config` (or `--spec-tokens`...)
# `[server.speculative]` cannot hold.
_ONLY_WHEN_SET = ("dist_init_addr", "speculative")


def duplicated_flags(server: Server, args: Sequence[str]) -> list[tuple[str, Flag]]:
    """Options in `args` (as written, without `=VALUE`) that repeat a structured field, as
    vLLM's parser reads them (a short alias, `_` for `-`, a unique prefix, a dotted key)."""
    repeated = []
    for option in args:
        flag = flag_for(option)
        field = flag.field.split(".")[0] if flag is not None else ""
        unset = field in _ONLY_WHEN_SET and getattr(server, field) is None
        if flag is not None and not unset:
            repeated.append((option.split("=", 1)[0], flag))
    return repeated


def setting(args: Sequence[str], name: str) -> str | bool | None:
    """What `args` set vLLM's setting `name` to, the last option for it winning as in its
    parser: a switch's state, another option's value; None where none sets it."""
    found: str | bool | None = None
    for index, word in enumerate(args):
        option = option_for(word)
        if option is None or "." in word.split("=", 1)[0] or options()[option].setting != name:
            continue
        stored = options()[option].stored
        if stored is not None:
            found = stored
        elif "=" in word:
            found = word.split("=", 1)[1]
        elif index + 1 < len(args):
            found = args[index + 1]
    return found


def leading_flag(entrypoint: str) -> Flag | None:
    """The structured flag a first word after `entrypoint` that is no option stands for: the
    model, after `serve`."""
    serves = shlex.split(entrypoint)[-1:] == [SERVE]
    return next(flag for flag in FLAGS if flag.field == "model_path") if serves else None


def table_fields(given: Sequence[Given]) -> tuple[dict[str, Any], list[Given], list[Finding]]:
    """The `[server]` fields the structured flags `given` set (the last of each wins, as in
    argparse), the flags left to the args as written, and warnings on why: `--master-addr` and
    `--master-port` are `dist_init_addr` together only, and a `--speculative-config` whose
    JSON `[server.speculative]` cannot hold stays itself."""
    models = [each.option for each in given if each.flag.field == "model_path"]
    if not models:
        message = (
            "no model: it is read as the word right after `serve`, or as --model's value "
            "(not from a --config file, nor vLLM's own default model)"
        )
        raise Refused(Finding("no-model", "", message, "write it there"))
    if len(models) > 1:
        message = f"the model is given {len(models)} times ({', '.join(models)})"
        raise Refused(Finding("model-repeated", "", message, "vLLM serves one: give it once"))
    table: dict[str, Any] = {}
    left: list[Given] = []
    notes: list[Finding] = []
    address: dict[str, str | int] = {}
    # --spec-method, --spec-model and --spec-tokens: keys vLLM adds to the config's
    shorthand = [each for each in given if each.flag.field.startswith("speculative.")]
    speculative = [each for each in given if each.flag.field == "speculative"]
    for each in speculative[:-1]:  # the last counts, but vLLM reads each
        speculative_table(each, ())
    if speculative or shorthand:
        config, why = speculative_table(speculative[-1] if speculative else None, shorthand)
        if config is None:
            left += speculative[-1:] + shorthand
            kept = (speculative or shorthand)[-1].option
            message = f"kept in [server] args as written: {why}"
            notes.append(Finding("kept-in-args", kept, message, severity="warning"))
        else:
            table["speculative"] = config
    for each in given:
        if each.flag.field.startswith("speculative"):
            continue
        if each.flag.field == "dist_init_addr":  # the port an integer, the host text
            integers = ("dist_init_addr",) if each.flag.canonical == ADDRESS_FLAGS[1] else ()
            address[each.flag.canonical] = field_value(each, integers)
        else:
            table[each.flag.field] = field_value(each)
    if len(address) == len(ADDRESS_FLAGS):
        host, port = (address[flag] for flag in ADDRESS_FLAGS)
        table["dist_init_addr"] = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    else:
        left += [each for each in given if each.flag.field == "dist_init_addr"]
    return table, left, notes


def speculative_table(
    given: Given | None, shorthand: Sequence[Given]
) -> tuple[dict[str, Any] | None, str]:
    """`[server.speculative]` of a `--speculative-config` value (`given`; None: none) with the
    keys of `shorthand` (`--spec-tokens 3`) added as vLLM adds them: its JSON object, keys
    read as vLLM reads them (`-` as `_`), or None and why the table cannot hold it;
    refused for what vLLM refuses (no JSON object, a key given both ways)."""
    config: Any = {}
    if given is not None:
        if given.value in ("", "None"):  # vLLM reads either as no speculative config
            return None, f"{given.value!r} means none"
        if given.value is None:
            raise Refused(no_value(given))
        try:
            config = json.loads(given.value)
        except json.JSONDecodeError as error:
            at = f"{error.msg} at character {error.pos + 1}"
            message = f"not JSON ({at})"
            raise Refused(Finding("speculative-json", given.option, message, REFUSED)) from None
        if not isinstance(config, dict):
            message = f"a JSON {type(config).__name__}, not an object"
            raise Refused(Finding("speculative-json", given.option, message, REFUSED))
    config = {key.replace("-", "_"): value for key, value in config.items()}
    for each in shorthand:
        key = each.flag.field.removeprefix("speculative.")
        if key in config:
            message = f"{each.option} and --speculative-config's {key} are mutually exclusive"
            raise Refused(Finding("speculative-twice", "", message, "vLLM refuses both"))
        config[key] = field_value(each, ("speculative.num_speculative_tokens",))
    try:
        VllmSpeculative.model_validate(config)
    except ValidationError as error:
        first = error.errors()[0]
        where = "".join(f"{part}: " for part in first["loc"])
        why = first["msg"].removeprefix("Value error, ")
        return None, f"[server.speculative] would refuse it ({where}{why})"
    return config, ""
