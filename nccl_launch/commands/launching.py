"""`run` and `preflight`: start the server, or check everything starting it needs."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from nccl_launch.commands.options import (
    LaunchCommand,
    echo_lines,
    format_option,
    launch_options,
    prepare,
    warn,
)
from nccl_launch.errors import EXIT_OK
from nccl_launch.launch.check_names import SKIPPABLE


@click.command(cls=LaunchCommand)
@launch_options
@click.option("--dry-run", is_flag=True, help="Print the env changes and the argv; do not exec.")
@click.option(
    "--nccl-debug",
    is_flag=True,
    help="Add NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,ENV, for verify-log.",
)
def run(dry_run: bool, **options: Any) -> int:
    """Validate PROFILE, merge it into the environment and exec the server.

    Options go anywhere before '--'. With a [server] table, arguments after '--' are
    appended to the server's argv; without one, they are the command to run: nccl-launch
    run PROFILE -- COMMAND...
    """
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
        warn(f"environment differs from {launch.plan.label}, tolerated by [policy]:")
        echo_lines(drift_lines(tolerated), err=True)
    if not dry_run:
        exec_command(argv, launch.merged.env, launch.cwd)
    echo_lines(dry_run_lines(launch, os.environ))
    return EXIT_OK


@click.command(cls=LaunchCommand)
@launch_options
@format_option("text", "json", default="text")
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(SKIPPABLE),
    help="Leave out the check of this name (repeatable), e.g. gpus and paths in CI.",
)
def preflight(fmt: str, skip: tuple[str, ...], **options: Any) -> int:
    """Check everything `run` would, then the host and SGLang's own parser on the argv.

    Host checks: nccl.conf files, the NCCL env plugin, GPUs against tp_size, the port, the
    interpreter and the model paths; then the server's interpreter imports SGLang and parses
    the exact argv. For ExecStartPre=. Exit 0 when every check passes, 1 when the environment
    drifts, 3 when a host or SGLang check fails.
    """
    from nccl_launch.launch.preflight import run_preflight  # not on `run`'s path
    from nccl_launch.render.reports import preflight_lines

    report = run_preflight(prepare(**options), frozenset(skip))
    if fmt == "json":
        # json.dumps, not model_dump_json: an nccl.conf may hold bytes that are not UTF-8, kept
        # as NCCL reads them (surrogates), which pydantic cannot encode and JSON escapes.
        click.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        echo_lines(preflight_lines(report))
    return report.exit_code
