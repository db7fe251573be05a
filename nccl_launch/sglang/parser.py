"""Asking the installed SGLang: its parser reads the exact argv in the server's interpreter."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from nccl_launch.serving.asking import ask
from nccl_launch.sglang.argv import structured_values
from nccl_launch.sglang.probe import FIELDS
from nccl_launch.sglang.server import Server


def probe(
    server: Server, argv: list[str], env: Mapping[str, str], timeout: float
) -> dict[str, Any]:
    """SGLang's answer on the server's `argv`: what follows its interpreter and entrypoint."""
    server_args = argv[1 + len(shlex.split(server.entrypoint)) :]
    return ask(server, "nccl_launch.sglang", server_args, env, FIELDS, timeout)


def expected_values(server: Server) -> dict[str, object]:
    """What SGLang's parser must read back (its attribute names), for the fields the profile
    sets; the others keep SGLang's defaults."""
    values = structured_values(server)
    return {field.replace(".", "_"): value for field, value in values.items() if value is not None}
