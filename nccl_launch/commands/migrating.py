"""Writing profiles and units: `convert`, `capture`, `systemd`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TextIO

import click

from nccl_launch.commands.options import output_options, warn
from nccl_launch.errors import EXIT_OK, UsageError
from nccl_launch.files import atomic_write
from nccl_launch.loader import load_profile
from nccl_launch.migrate import (
    StartCommand,
    build_profile,
    read_process,
    read_script,
    write_profile,
)
from nccl_launch.plan import build_plan
from nccl_launch.profile import Profile
from nccl_launch.unit import unit_file


def _write(
    start: StartCommand, name: str, source: str, output: Path | None, force: bool, how: str
) -> int:
    data = build_profile(start, name, source, how)
    path = output or Path("profiles") / f"{name}.toml"
    write_profile(path, data, force)
    for note in start.notes:
        warn(note)
    plan = build_plan(Profile.model_validate(data))
    click.echo(f"wrote {path} ({plan.label}, {plan.short_digest}); check it with:")
    click.echo(f"  nccl-launch run --dry-run {path}")
    return EXIT_OK


def _profile_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "converted"


@click.command()
@click.argument("script", type=click.File("r"))
@output_options
def convert(script: TextIO, name: str | None, output: Path | None, force: bool) -> int:
    """Turn a start SCRIPT (or '-' for stdin: a raw command line) into a profile.

    Follows export lines, VAR=value prefixes, env, line continuations, comments, cd and
    output redirections up to the `python -m sglang.launch_server` (or `sglang serve`) line.
    """
    source = "stdin" if script.name == "<stdin>" else script.name
    start = read_script(script.read(), os.environ)
    default = "converted" if source == "stdin" else Path(source).stem
    return _write(start, name or _profile_name(default), source, output, force, "converted")


@click.command()
@click.option("--pid", type=int, required=True, help="The running server's main process.")
@output_options
def capture(pid: int, name: str | None, output: Path | None, force: bool) -> int:
    """Write a profile from a running server: its NCCL env, its command line and directory."""
    start = read_process(pid)
    return _write(start, name or f"captured-{pid}", f"pid {pid}", output, force, "captured")


@click.command()
@click.argument("profile")
@click.option("--user", help="User= of the service (default: root).")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write the unit to FILE (atomically) instead of printing it.",
)
@click.option("--force", is_flag=True, help="Replace an existing FILE.")
def systemd(profile: str, user: str | None, output: Path | None, force: bool) -> int:
    """Print a systemd service unit that runs PROFILE's server through nccl-launch.

    Type=exec (MainPID is the server), preflight as ExecStartPre=, run as ExecStart=, a long
    TimeoutStartSec for model load, Restart=on-failure, KillMode=mixed.
    """
    text = unit_file(load_profile(profile), user)
    if output is None:
        click.echo(text, nl=False)
        return EXIT_OK
    try:
        atomic_write(output, text, replace=force)
    except FileExistsError:
        raise UsageError(f"{output} exists; pass --force to replace it") from None
    click.echo(
        f"wrote {output}; then: systemctl daemon-reload && systemctl enable --now {output.name}"
    )
    return EXIT_OK
