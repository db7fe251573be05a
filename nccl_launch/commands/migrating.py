"""Writing a profile from what runs today: `convert` (a start script), `capture` (a process)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from nccl_launch.commands.options import output_options, say_wrote_profile, warn
from nccl_launch.errors import EXIT_OK
from nccl_launch.migrate.capture import read_process
from nccl_launch.migrate.inputs import KINDS, read_input
from nccl_launch.migrate.start import StartCommand, save_profile


def _saved(
    start: StartCommand, name: str, source: str, how: str, output: Path | None, force: bool
) -> int:
    path, plan, notes = save_profile(start, name, source, how, output, force)
    for note in notes:  # they quote the script's or the process's words
        warn(note)
    say_wrote_profile(path, plan)
    return EXIT_OK


def _profile_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "converted"


profile_output = output_options("Where to write it (default: profiles/NAME.toml).")
name_option = click.option("--name", help="Profile name (default: from the source).")


@click.command()
@click.argument("script")
@click.option(
    "--from",
    "kind",
    type=click.Choice(KINDS),
    help="What SCRIPT is (default: nccl-conf for nccl.conf and .nccl.conf, env for *.env, "
    "else script).",
)
@name_option
@profile_output
def convert(
    script: str, kind: str | None, name: str | None, output: Path | None, force: bool
) -> int:
    """Turn a start SCRIPT (or '-' for stdin: a raw command line) into a profile.

    Follows export lines, VAR=value prefixes, env, line continuations, comments, cd,
    sourced files and output redirections up to the `python -m sglang.launch_server` (or
    `sglang serve`) line, only the code that runs: here-docs and function bodies are skipped,
    `&&` and `||` follow what came before, `if` and loops are refused with their line, `exit`
    ends the script. An environment file (KEY=VALUE lines) or an nccl.conf gives a profile
    of its variables, without [server].
    """
    source = "stdin" if script == "-" else script
    start = read_input(script, kind, os.environ)
    default = "converted" if source == "stdin" else Path(source).stem
    return _saved(start, name or _profile_name(default), source, "converted", output, force)


@click.command()
@click.option(
    "--pid",
    type=click.IntRange(min=1),
    metavar="PID",
    required=True,
    help="The running server's main process.",
)
@name_option
@profile_output
def capture(pid: int, name: str | None, output: Path | None, force: bool) -> int:
    """Write a profile from a running server: its NCCL env, its command line and directory."""
    start = read_process(pid)
    return _saved(start, name or f"captured-{pid}", f"pid {pid}", "captured", output, force)
