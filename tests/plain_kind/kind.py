"""`kind = "plain"`: a plain OpenAI-compatible server (tests/standin/plain_server.py), as a
kind shipped outside nccl-launch states it: its table, its command line, and its probe; every
other record keeps the defaults. It is registered as such a kind is: the entry point
`plain = "tests.plain_kind.kind:PLAIN"` of the group `nccl_launch.kinds`."""

from __future__ import annotations

import shlex
from typing import Literal

from nccl_launch.serving.base import CommandLine, Kind
from nccl_launch.serving.flags import Flag
from nccl_launch.serving.table import Name, ServerTable

ENTRYPOINT = "-m plain_server"
FLAGS = (Flag("model_path", "--model"), Flag("host", "--host"), Flag("port", "--port"))


class PlainServer(ServerTable):
    """`[server]` of kind "plain"."""

    kind: Literal["plain"]
    entrypoint: Name = ENTRYPOINT


def server_argv(server: PlainServer) -> list[str]:
    """The command line of a `[server]` table: its model, host and port, then its args."""
    argv = [server.python, *shlex.split(server.entrypoint)]
    for flag in FLAGS:
        value = getattr(server, flag.field)
        argv += [flag.canonical, str(value)] if value is not None else []
    return argv + list(server.args)


def field_flag(option: str) -> Flag | None:
    """The structured field an option sets: its flags are read in full only."""
    return next((flag for flag in FLAGS if option.split("=", 1)[0] == flag.canonical), None)


PLAIN = Kind(
    name="plain",
    title="Plain",
    table=PlainServer,
    env_prefix="PLAIN_",
    command=CommandLine(
        script="plain-server", entrypoints=(ENTRYPOINT,), argv=server_argv, flag=field_flag
    ),
    probe="tests.plain_kind.parser",
)
