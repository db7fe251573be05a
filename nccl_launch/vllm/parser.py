"""Asking the installed vLLM: its `serve` parser reads the exact argv in the server's Python."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from nccl_launch.serving.asking import ask
from nccl_launch.vllm.argv import speculative_config
from nccl_launch.vllm.probe import FIELDS
from nccl_launch.vllm.server import VllmServer, address_args

_DEFAULTS = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "nnodes": 1}


def probe(
    server: VllmServer, argv: list[str], env: Mapping[str, str], timeout: float
) -> dict[str, Any]:
    """vLLM's answer on the server's `argv`: what follows its interpreter and entrypoint, read
    as `vllm serve` reads it (the entrypoint's own words name the `serve` subcommand)."""
    server_args = ["serve", *argv[1 + len(shlex.split(server.entrypoint)) :]]
    return ask(server, "nccl_launch.vllm", server_args, env, FIELDS, timeout)


def expected_values(server: VllmServer) -> dict[str, object]:
    """What vLLM's parser must read back (its attribute names), for the fields the profile
    sets; the others keep vLLM's defaults."""
    values: dict[str, object] = {
        "model": server.model_path,
        "tensor_parallel_size": server.tp_size,
        "pipeline_parallel_size": server.pp_size,
        "host": server.host,
        "port": server.port,
        "nnodes": server.nnodes,
        "node_rank": server.node_rank,
    }
    if server.dist_init_addr is not None:
        _, host, _, port = address_args(server.dist_init_addr)
        values |= {"master_addr": host, "master_port": int(port)}
    config = speculative_config(server)
    if config is not None:
        values["speculative_config"] = json.loads(config)
    return {
        key: value
        for key, value in values.items()
        if value is not None and _DEFAULTS.get(key) != value
    }
