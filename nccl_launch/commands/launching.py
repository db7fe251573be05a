"""`run` and `preflight`: start the server, or check everything starting it needs."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from nccl_launch.commands.echo import echo_lines, warn
from nccl_launch.commands.options import format_option, launch_options, seconds_option
from nccl_launch.errors import EXIT_OK
from nccl_launch.escaping import escaped, shell_word
from nccl_launch.launch.check_names import skippable
from nccl_launch.secrets.masking import masked_json

if TYPE_CHECKING:
    from pathlib import Path

    from nccl_launch.launch.prepare import LaunchPlan
    from nccl_launch.serving.flags import Flag

# A warm import of torch and the server takes seconds (SGLang 2 s, vLLM 7 s on two cores); a
# cold page cache on a network volume, or a host busy loading models, takes up to a minute.
PROBE_TIMEOUT_S = 120.0


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


class ReadWhenUsed(click.Choice[str]):
    """A choice among what `read` returns, read when the option is used or shown, not when
    a TAB lists the command's options."""

    def __init__(self, read: Callable[[], tuple[str, ...]]) -> None:
        self.read, self.case_sensitive = read, True

    @property
    def choices(self) -> tuple[str, ...]:
        return self.read()

    @choices.setter
    def choices(self, value: object) -> None:
        raise AttributeError("the choices are read, not set")


def _field_flag(option: str, own: list[str]) -> Flag | None:
    """The structured `[server]` field an unknown `option` sets, as the kind of the profile
    among the words `own` reads it; as the first kind that has it, where no word names a
    profile that loads."""
    from nccl_launch.errors import NcclLaunchError  # a mistake's path, not a TAB's
    from nccl_launch.kinds import KINDS
    from nccl_launch.profile.load import load_profile

    for word in own:
        if word.startswith("-"):
            continue
        try:
            kind = load_profile(word).profile.kind
        except NcclLaunchError:
            continue
        return kind.field_flag(option)
    flags = (kind.field_flag(option) for kind in KINDS)
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


@click.command(cls=LaunchCommand)
@launch_options
@click.option("--dry-run", is_flag=True, help="Print the env changes and the argv; do not exec.")
@click.option(
    "--nccl-debug",
    is_flag=True,
    help="Add NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,ENV, and NCCL_DEBUG_FILE: each "
    "process writes NCCL's log to a file of its own under $XDG_STATE_HOME/nccl-launch/"
    "nccl-debug, which check reads and verify-log takes.",
)
def run(dry_run: bool, **options: Any) -> int:
    """Validate PROFILE, merge it into the environment and exec the server.

    Options go anywhere before '--'. With a [server] table, arguments after '--' are
    appended to the server's argv; without one, they are the command to run: nccl-launch
    run PROFILE -- COMMAND...
    """
    from nccl_launch.findings import Finding, Refused, refuse
    from nccl_launch.launch.execute import exec_command  # not on a TAB's path (options.py)
    from nccl_launch.render.drift import drift_lines, dry_run_lines, refusal_lines

    launch = prepare(**options)
    argv = launch.command()
    refusal = launch.refusal()
    if refusal is not None:
        echo_lines(refusal_lines(launch, refusal), err=True)
        return refusal.exit_code
    for note in launch.warnings():
        warn(note)
    if tolerated := launch.tolerated():
        differs = f"environment differs from {launch.plan.label}, tolerated by [policy]:"
        shown = tuple(drift_lines(tolerated, indent=""))
        warn(Finding("tolerated-drift", "", differs, severity="warning", details=shown))
    if not dry_run:
        refuse(launch.start_findings())  # as preflight says it, before the run's log folder
        env, problem = launch.merged.env, None
        if launch.nccl_logs is not None:
            from nccl_launch.live.nccl_logs import with_run_folder  # only for --nccl-debug

            env, problem = with_run_folder(env, launch.nccl_logs, os.getpid())
        if problem is not None:
            warn(problem)
        try:
            exec_command(argv, env, launch.cwd)
        except Refused:
            if launch.nccl_logs is not None and problem is None:  # nothing will write there
                from nccl_launch.live.nccl_logs import remove_run_folder

                remove_run_folder(launch.nccl_logs)
            raise
    echo_lines(dry_run_lines(launch, os.environ))
    return EXIT_OK


@click.command(cls=LaunchCommand)
@launch_options
@format_option("text", "json", default="text")
@click.option(
    "--skip",
    multiple=True,
    type=ReadWhenUsed(skippable),
    help="Leave out the check of this name (repeatable), e.g. gpus and paths in CI.",
)
@seconds_option(
    "--timeout",
    least=0,
    included=False,
    default=PROBE_TIMEOUT_S,
    show_default=True,
    help_text="Seconds the server's interpreter has to import SGLang (or vLLM) and parse the "
    "argv; later, its check fails.",
)
def preflight(fmt: str, skip: tuple[str, ...], timeout: float, **options: Any) -> int:
    """Check everything `run` would, then the host and the server's own parser on the argv.

    Host checks: nccl.conf files, the NCCL env plugin, GPUs against tp_size, the port, the
    interpreter and the model paths; then the server's interpreter imports SGLang (or vLLM)
    and parses the exact argv. For ExecStartPre=. Exit 0 when every check passes, 1 when the
    environment drifts, 3 when a host or server check fails.
    """
    from nccl_launch.launch.preflight import run_preflight  # not on `run`'s path
    from nccl_launch.render.reports import preflight_lines

    report = run_preflight(prepare(**options), timeout, frozenset(skip))
    if fmt == "json":
        # An nccl.conf may hold bytes that are not UTF-8, kept as NCCL reads them
        # (surrogates), which pydantic's own JSON cannot encode and masked_json escapes.
        click.echo(masked_json(report))
    else:
        echo_lines(preflight_lines(report))
    return report.exit_code
