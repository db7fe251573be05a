"""`run` and `preflight`: start the server, or check everything starting it needs."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from nccl_launch.commands.echo import Output, echo_lines, warn
from nccl_launch.commands.options import (
    LaunchCommand,
    format_option,
    launch_options,
    seconds_option,
)
from nccl_launch.errors import EXIT_OK
from nccl_launch.launch.check_names import skippable

if TYPE_CHECKING:
    from pathlib import Path

    from nccl_launch.launch.prepare import LaunchPlan

# A warm import of torch and the server takes seconds (SGLang 2 s, vLLM 7 s on two cores); a
# cold page cache on a network volume, or a host busy loading models, takes up to a minute.
PROBE_TIMEOUT_S = 120.0


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
def preflight(fmt: Output, skip: tuple[str, ...], timeout: float, **options: Any) -> int:
    """Check everything `run` would, then the host and the server's own parser on the argv.

    Host checks: nccl.conf files, the NCCL env plugin, GPUs against tp_size, the port, the
    interpreter and the model paths; then the server's interpreter imports SGLang (or vLLM)
    and parses the exact argv. For ExecStartPre=. Exit 0 when every check passes, 1 when the
    environment drifts, 3 when a host or server check fails.
    """
    from nccl_launch.launch.preflight import run_preflight  # not on `run`'s path
    from nccl_launch.render.reports import preflight_lines

    report = run_preflight(prepare(**options), timeout, frozenset(skip))
    # An nccl.conf may hold bytes that are not UTF-8, kept as NCCL reads them (surrogates),
    # which pydantic's own JSON cannot encode and the masked JSON escapes.
    fmt.emit(report, preflight_lines)
    return report.exit_code
