"""The vLLM command line a `[server]` table stands for, every flag spelled canonically."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from nccl_launch.serving.flags import Flag
from nccl_launch.vllm.facts import API_KEY_FLAG, FLAGS, flag_for, option_for, options
from nccl_launch.vllm.server import VllmServer as Server
from nccl_launch.vllm.server import address_args

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
    """The vLLM command line of a `[server]` table: the model positional after `serve`."""
    argv = [server.python, *shlex.split(server.entrypoint)]
    if server.model_path is not None:
        argv.append(server.model_path)
    canonical = {flag.field: flag.canonical for flag in FLAGS}
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


def duplicated_flags(server: Server, args: Sequence[str]) -> list[tuple[str, Flag]]:
    """Options in `args` (as written, without `=VALUE`) that repeat a structured field, as
    vLLM's parser reads them (a short alias, `_` for `-`, a unique prefix, a dotted key)."""
    repeated = []
    for option in args:
        flag = flag_for(option)
        if flag is not None:
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


def reads_as_api_key(option: str) -> bool:
    """Whether vLLM's parser reads `option` as `--api-key` (`_` for `-`, a unique prefix)."""
    return option_for(option) == API_KEY_FLAG
