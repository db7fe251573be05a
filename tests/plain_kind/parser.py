"""Asking the installed plain server: its parser reads the exact argv in the server's Python."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from nccl_launch.serving.asking import ask
from tests.plain_kind.kind import PlainServer
from tests.plain_kind.probe import FIELDS


def probe(
    server: PlainServer, argv: list[str], env: Mapping[str, str], timeout: float
) -> dict[str, Any]:
    """The server's answer on its `argv`: what follows its interpreter and entrypoint."""
    server_args = argv[1 + len(shlex.split(server.entrypoint)) :]
    return ask(server, "tests.plain_kind", server_args, env, FIELDS, timeout)


def expected_values(server: PlainServer) -> dict[str, object]:
    """What its parser must read back, for the fields the profile sets."""
    values = {"model": server.model_path, "host": server.host, "port": server.port}
    return {key: value for key, value in values.items() if value is not None}
