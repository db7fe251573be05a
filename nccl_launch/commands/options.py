"""The option bundles several commands share: formats, outputs, seconds, PROFILE, digests, the
PIDs and ports a server may have, and the launch grammar of `run`, `preflight` and `systemd`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nccl_launch.commands.echo import Output
from nccl_launch.escaping import escaped, shell_word
from nccl_launch.findings import Finding, Refused
from nccl_launch.live.target import PID_LIMIT, PORT_LIMIT

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from nccl_launch.serving.flags import Flag

F = TypeVar("F", bound=Callable[..., Any])
# A number no process or socket can have is a usage error, not a server not found.
PID = click.IntRange(min=1, max=PID_LIMIT)
PORT = click.IntRange(min=1, max=PORT_LIMIT)


def _bundle(command: F, decorators: Sequence[Callable[[Any], Any]]) -> F:
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def _output(ctx: click.Context, param: click.Parameter, value: str) -> Output:
    return Output(value)


def format_option(*choices: str, default: str, help_text: str | None = None) -> Callable[[F], F]:
    """`--format` with these choices, stored as `fmt`: the `Output` that prints a report in it."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        callback=_output,
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
            raise Refused(Finding("seconds-range", f"{param.opts[0]} {value:g}", f"valid: {low}"))
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
            flag = _field_flag(error.option_name, own)
            if flag is not None:  # not a near miss of one of ours
                message = f"No such option {error.option_name!r}."
            stop = "" if message.endswith((".", "?")) else "."
            unit = ctx.info_name == "systemd"
            where = _where_it_goes(error.option_name, flag, own, hint, unit)
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


def _field_flag(option: str, own: list[str]) -> Flag | None:
    """The structured `[server]` field an unknown `option` sets, as the kind of the profile
    among the words `own` reads it; as the first kind that has it, where no word names a
    profile that loads."""
    from nccl_launch.kinds import KINDS
    from nccl_launch.profile.load import load_profile

    for word in own:
        if word.startswith("-"):
            continue
        try:
            kind = load_profile(word).profile.kind
        except Refused:
            continue
        return kind.command.flag(option)
    flags = (kind.command.flag(option) for kind in KINDS)
    return next((flag for flag in flags if flag is not None), None)


def _where_it_goes(option: str, flag: Flag | None, own: list[str], hint: str, unit: bool) -> str:
    """Where an unknown `option` belongs: a structured `[server]` field (its `flag`) in the
    profile (after `--` it is refused), any other server flag after `--` with the value it
    was given; a credential's value is never echoed to a log, but given as a variable
    (`"$API_KEY"`, or for a `unit`, `'${API_KEY}'` that systemd fills from an env file)."""
    from nccl_launch.secrets.masking import MASK, mask_argv  # a mistake's path, not a TAB's

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
