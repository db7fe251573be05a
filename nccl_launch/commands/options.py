"""What several commands share: option bundles, the launch they prepare, warnings."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from nccl_launch.launch.placement import Placement
from nccl_launch.launch.prepare import LaunchPlan, prepare_launch

F = TypeVar("F", bound=Callable[..., Any])
PASS_THROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def warn(message: str) -> None:
    click.echo(f"nccl-launch: warning: {message}", err=True)


def echo_lines(lines: list[str], err: bool = False) -> None:
    for line in lines:
        click.echo(line, err=err)


def _bundle(command: F, decorators: Sequence[Callable[[Any], Any]]) -> F:
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def format_option(*choices: str, default: str, help_text: str | None = None) -> Callable[[F], F]:
    """`--format` with these choices, stored as `fmt`."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help=help_text,
    )


def output_options(help_text: str, *, force: bool = True) -> Callable[[F], F]:
    """`--output/-o FILE`, written atomically, and `--force` unless it is always replaced."""
    decorators = [click.option("--output", "-o", type=click.Path(path_type=Path), help=help_text)]
    if force:
        decorators.append(click.option("--force", is_flag=True, help="Replace an existing file."))
    return lambda command: _bundle(command, decorators)


def launch_options(command: F) -> F:
    """PROFILE, the arguments after `--` and the options `run` and `preflight` share."""
    return _bundle(
        command,
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
        ],
    )


def prepare(
    profile: str,
    command: tuple[str, ...],
    env_files: tuple[Path, ...],
    node_rank: int | None,
    dist_init_addr: str | None,
    nccl_debug: bool = False,
) -> LaunchPlan:
    """The launch `launch_options` describe, from the calling environment."""
    if command[:1] == ("--",):
        command = command[1:]
    placement = Placement(node_rank=node_rank, dist_init_addr=dist_init_addr)
    return prepare_launch(profile, command, env_files, os.environ, placement, nccl_debug)
