"""What several commands share: option bundles, the launch they prepare, warnings."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nccl_launch.launch import Launch, Placement, prepare_launch

F = TypeVar("F", bound=Callable[..., Any])
PASS_THROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def warn(message: str) -> None:
    click.echo(f"nccl-launch: warning: {message}", err=True)


def launch_options(command: F) -> F:
    """PROFILE, the arguments after `--` and the options `run` and `preflight` share."""
    for decorator in reversed(
        [
            click.argument("profile"),
            click.argument("command", nargs=-1, type=click.UNPROCESSED),
            click.option(
                "--env-file",
                "env_files",
                multiple=True,
                type=click.Path(path_type=Path),
                help="dotenv file applied over the calling environment (repeatable, later wins).",
            ),
            click.option(
                "--node-rank",
                type=click.IntRange(min=0),
                help="This node's rank in a multi-node server (default: Slurm or LeaderWorkerSet).",
            ),
            click.option(
                "--dist-init-addr", metavar="HOST:PORT", help="Rendezvous address of node 0."
            ),
        ]
    ):
        command = decorator(command)
    return command


def output_options(command: F) -> F:
    """--name, --output and --force, shared by the commands that write a profile."""
    for decorator in reversed(
        [
            click.option("--name", help="Profile name (default: from the source)."),
            click.option(
                "--output",
                "-o",
                type=click.Path(path_type=Path),
                help="Where to write it (default: profiles/NAME.toml).",
            ),
            click.option("--force", is_flag=True, help="Replace an existing file."),
        ]
    ):
        command = decorator(command)
    return command


def prepare(
    profile: str,
    command: tuple[str, ...],
    env_files: tuple[Path, ...],
    node_rank: int | None,
    dist_init_addr: str | None,
    nccl_debug: bool = False,
) -> Launch:
    """The launch `launch_options` describe, from the calling environment."""
    if command[:1] == ("--",):
        command = command[1:]
    placement = Placement(node_rank=node_rank, dist_init_addr=dist_init_addr)
    return prepare_launch(profile, command, env_files, os.environ, placement, nccl_debug)
