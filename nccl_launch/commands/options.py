"""What several commands share: option bundles, the launch they prepare, warnings."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nccl_launch.errors import WARNING_PREFIX, UsageError
from nccl_launch.escaping import escaped, shell_word
from nccl_launch.masking import for_people
from nccl_launch.sglang.facts import flag_for

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from nccl_launch.launch.prepare import LaunchPlan
    from nccl_launch.profile.plan import ProfilePlan

F = TypeVar("F", bound=Callable[..., Any])


class LaunchCommand(click.Command):
    """A command whose own options may come anywhere before `--`, and whose arguments after
    `--` reach the server (or are the command to run) untouched, as `command`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own, after = args, []
        if "--" in args:
            own, after = args[: args.index("--")], args[args.index("--") + 1 :]
        hint = f"Arguments for the server go after '--': nccl-launch {ctx.info_name} PROFILE --"
        ctx.allow_extra_args = True  # a stray argument gets the hint below, not click's error
        try:
            extra = super().parse_args(ctx, list(own))  # click consumes the list it parses
        except click.NoSuchOption as error:
            message = error.format_message()
            if flag_for(error.option_name) is not None:  # not a near miss of one of ours
                message = f"No such option {error.option_name!r}."
            stop = "" if message.endswith((".", "?")) else "."
            where = _where_it_goes(error.option_name, own, hint, ctx.info_name == "systemd")
            raise click.UsageError(f"{escaped(message)}{stop} {where}", ctx) from None
        if extra and ctx.resilient_parsing:
            raise click.exceptions.Exit(0)  # completing after a stray argument: nothing fits
        if extra:
            word = shell_word(extra[0])
            raise click.UsageError(f"Unexpected argument {extra[0]!r}. {hint} {word}", ctx)
        ctx.params["command"] = tuple(after)
        return []

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- ARGS...]"]


def _where_it_goes(option: str, own: list[str], hint: str, unit: bool) -> str:
    """Where an unknown `option` belongs: a structured `[server]` field in the profile (after
    `--` it is refused), any other server flag after `--` with the value it was given; a
    credential's value is never echoed to a log, but given as a variable (`"$API_KEY"`, or
    for a `unit`, `'${API_KEY}'` that systemd fills from an env file)."""
    from nccl_launch.masking import MASK, mask_argv  # a mistake's path, not a TAB's

    flag = flag_for(option)
    if flag is not None:
        return (
            f"{shell_word(option)} is the field {flag.field}: set {flag.place} of the profile "
            "(or of a copy: nccl-launch new NAME --from PROFILE)"
        )
    words = [word for word in own if word == option or word.startswith(f"{option}=")][:1]
    at = own.index(words[0]) + 1 if words else len(own)
    # The next word is the option's value unless it is the only word left for PROFILE.
    rest = [word for word in own[: at - 1] + own[at + 1 :] if not word.startswith("-")]
    if words == [option] and at < len(own) and not own[at].startswith("-") and rest:
        words.append(own[at])
    name = option.lstrip("-").upper().replace("-", "_")
    reference = f"'${{{name}}}'" if unit else f'"${name}"'
    shown = [
        word.replace(MASK, reference) if MASK in word else shell_word(word)
        for word in mask_argv(words or [option])
    ]
    return " ".join([hint, *shown])


def warn(message: str) -> None:
    """One line on stderr, escaped: a note may quote a path, a key or a value."""
    click.echo(for_people(f"{WARNING_PREFIX}{message}"), err=True)


def say_wrote_profile(path: Path, plan: ProfilePlan) -> None:
    """The line after writing a profile (`new`, `convert`, `capture`), and a command that
    checks it when pasted: `run --dry-run` needs a `[server]`, and a path that starts with
    `-` would be read as options."""
    wrote = f"wrote {path} ({plan.label}, {plan.short_digest}); check it with:"
    word = shell_word(f"./{path}" if str(path).startswith("-") else str(path))
    command = "run --dry-run" if plan.argv else "validate"
    echo_lines([wrote, f"  nccl-launch {command} {word}"])


def echo_lines(lines: list[str], err: bool = False) -> None:
    """Lines for people, each escaped: a path, a name, a value or a log's text they quote
    cannot forge a line or drive the terminal. Machine formats are printed as they are."""
    for line in lines:
        click.echo(for_people(line), err=err)


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
    """What a PROFILE can be: each NAME and NAME@VERSION on the search path that starts with
    `incomplete`, and a file path (the shell completes it: bash only when no name matches)."""
    # Imported here: completion is rare, and `run` imports this module on every start.
    from click.shell_completion import CompletionItem

    from nccl_launch.profile.search import (
        declared_identity,
        is_reference,
        profile_files,
        search_path,
    )

    files = profile_files([folder for folder, _ in search_path()])
    found = [declared_identity(path) for path in files]  # an unusable file is skipped
    # Only what a profile could be named: bash evaluates what it is offered (`x;touch y`).
    identities = [item for item in found if isinstance(item, tuple) and is_reference(*item)]
    refs = {name for name, _ in identities} | {f"{name}@{version}" for name, version in identities}
    matching = sorted(ref for ref in refs if ref.startswith(incomplete))
    # First: bash's script forgets the names it was given before a file item.
    return [CompletionItem(incomplete, type="file"), *map(CompletionItem, matching)]


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


def prepare(
    profile: str,
    command: tuple[str, ...],
    env_files: tuple[Path, ...],
    node_rank: int | None,
    dist_init_addr: str | None,
    pin: str | None,
    nccl_debug: bool = False,
) -> LaunchPlan:
    """The launch `launch_options` describe, from the calling environment."""
    # Imported here, as every implementation a command calls: a TAB imports the command's
    # module for its options, and pydantic alone would double what a TAB costs.
    from nccl_launch.launch.placement import Placement
    from nccl_launch.launch.prepare import prepare_launch

    placement = Placement(node_rank=node_rank, dist_init_addr=dist_init_addr)
    return prepare_launch(profile, command, env_files, os.environ, placement, nccl_debug, pin)
