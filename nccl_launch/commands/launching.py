"""`run` and `preflight`: start the server, or check everything starting it needs."""

from __future__ import annotations

import os
from typing import Any

import click

from nccl_launch.commands.options import PASS_THROUGH, launch_options, prepare, warn
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK, DriftError, UsageError
from nccl_launch.launch import exec_command
from nccl_launch.preflight import SKIPPABLE, run_preflight
from nccl_launch.render import command_line, drift_lines, env_changes, preflight_lines


@click.command(context_settings=PASS_THROUGH)
@launch_options
@click.option("--dry-run", is_flag=True, help="Print the env changes and the argv; do not exec.")
@click.option(
    "--nccl-debug",
    is_flag=True,
    help="Add NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,ENV, for verify-log.",
)
def run(dry_run: bool, **options: Any) -> int:
    """Validate PROFILE, merge it into the environment and exec the server.

    With a [server] table, arguments after '--' are appended to the server's argv; without
    one, they are the command to run: nccl-launch run PROFILE -- COMMAND...
    """
    launch = prepare(**options)
    if not launch.argv:
        raise UsageError(
            f"profile {launch.plan.label} has no [server] table; give the command after '--': "
            f"nccl-launch run {options['profile']} -- COMMAND..."
        )
    refusal = launch.refusal()
    if refusal is not None:
        raise DriftError(refusal)
    for note in [*launch.loaded.profile.lint(), *launch.unreadable_conf]:
        warn(note)
    tolerated = [
        e for e in launch.merged.report.entries if e.tolerated and e.note != "server-owned"
    ]
    if tolerated:
        warn(f"environment differs from {launch.plan.label}, tolerated by [policy]:")
        click.echo("\n".join(drift_lines(tolerated)), err=True)
    if not dry_run:
        exec_command(launch.argv, launch.merged.env, launch.cwd)
    plan = launch.plan
    click.echo(f"profile {plan.label} ({plan.short_digest}) from {launch.loaded.path}")
    click.echo("environment changes:")
    for line in env_changes(os.environ, launch.merged.env, launch.merged.sources):
        click.echo(line)
    if launch.cwd is not None:
        click.echo(f"cwd: {launch.cwd}")
    click.echo("argv:")
    click.echo(f"  {command_line(launch.argv)}")
    return EXIT_OK


@click.command(context_settings=PASS_THROUGH)
@launch_options
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(SKIPPABLE),
    help="Leave out a check (repeatable), e.g. gpus and paths in a profiles repo's CI.",
)
def preflight(fmt: str, skip: tuple[str, ...], **options: Any) -> int:
    """Check everything `run` would, then the host and SGLang's own parser on the argv.

    Host checks: nccl.conf files, the NCCL env plugin, GPUs against tp_size, the port, the
    model paths; then the server's interpreter imports SGLang and parses the exact argv. For
    ExecStartPre=. Exit 0 when every check passes, 1 when the environment drifts, 3 when a
    host or SGLang check fails.
    """
    report = run_preflight(prepare(**options), frozenset(skip))
    if fmt == "json":
        click.echo(report.model_dump_json(indent=2))
    else:
        for line in preflight_lines(report):
            click.echo(line)
    if any(c.status == "fail" and c.name != "environment" for c in report.checks):
        return EXIT_HOST
    return EXIT_DRIFT if report.failed("environment") else EXIT_OK
