"""The option bundles several commands share: formats, outputs, seconds, PROFILE, digests, and
the PIDs and ports a server may have."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nccl_launch.errors import UsageError
from nccl_launch.live.target import PID_LIMIT, PORT_LIMIT

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])
# A number no process or socket can have is a usage error, not a server not found.
PID = click.IntRange(min=1, max=PID_LIMIT)
PORT = click.IntRange(min=1, max=PORT_LIMIT)


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


MAX_SECONDS = 86400.0  # a day


def seconds_option(
    *declarations: str, least: float, included: bool = True, help_text: str, **kwargs: Any
) -> Callable[[F], F]:
    """An option of seconds: a finite number from `least` (`included` or not) to a day,
    refused in one line with exit 2 (click's FloatRange takes `nan` and `inf`)."""
    low = f"{least:g} {'<=' if included else '<'} SECONDS <= {MAX_SECONDS:g}"

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        above = value is not None and (value >= least if included else value > least)
        if value is not None and not (above and value <= MAX_SECONDS):  # False for nan
            raise UsageError(f"{param.opts[0]} {value:g}: valid: {low}")
        return value

    return click.option(
        *declarations,
        type=float,
        metavar="SECONDS",
        callback=check,
        help=f"{help_text}  [{low}]",
        **kwargs,
    )


def complete_profiles(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """PROFILE's completions: the completion module (and click's) is imported only when a
    shell asks, not on every command's path."""
    from nccl_launch.commands import completion

    return completion.complete_profiles(ctx, param, incomplete)


def profile_argument(name: str = "profile", **kwargs: Any) -> Callable[[F], F]:
    """A PROFILE argument (NAME, NAME@VERSION or a file) that the shell completes."""
    return click.argument(name, shell_complete=complete_profiles, **kwargs)


def profile_option(*declarations: str, **kwargs: Any) -> Callable[[F], F]:
    """An option taking a PROFILE, completed like `profile_argument`."""
    return click.option(
        *declarations, metavar="PROFILE", shell_complete=complete_profiles, **kwargs
    )


def _pin(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:  # and on a TAB, which must not import the profile model
        return value
    from nccl_launch.profile.plan import DIGEST

    if not DIGEST.fullmatch(value):
        raise click.BadParameter(
            f"{value!r} is not a whole digest; valid: sha256: and 64 lowercase hex digits, "
            "as `nccl-launch show PROFILE` prints it"
        )
    return value


def digest_option(command: F) -> F:
    """`--digest sha256:HEX`, stored as `pin`: refuse a profile whose digest is another."""
    return click.option(
        "--digest",
        "pin",
        metavar="sha256:HEX",
        callback=_pin,
        help="Refuse (exit 1) unless the profile's digest is this one, as a unit pins it.",
    )(command)


def launch_options(command: F) -> F:
    """PROFILE and the options `run` and `preflight` share (the arguments after `--` come
    from `LaunchCommand`)."""
    return _bundle(
        command,
        [
            profile_argument(),
            digest_option,
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
