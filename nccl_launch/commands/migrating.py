"""Writing a profile from what runs today: `convert` (a start script), `capture` (a process)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nccl_launch.commands.echo import echo_lines, say_wrote_profile, warn
from nccl_launch.commands.options import PID, output_options
from nccl_launch.errors import EXIT_OK

if TYPE_CHECKING:
    from nccl_launch.migrate.start import StartCommand

# What `convert` reads (migrate/inputs.py reads each), here so that a TAB imports no profile.
INPUT_KINDS = ("script", "env", "nccl-conf")


def _saved(start: StartCommand, name: str, source: str, how: str, **options: Any) -> int:
    from nccl_launch.migrate.start import save_profile

    path, plan, notes, secrets = save_profile(start, name, source, how, **options)
    for note in notes:  # they quote the script's or the process's words
        warn(note)
    if secrets is not None:
        keys = ", ".join(secrets.values)
        where = f"wrote secrets {keys} to {secrets.path} (0600)"
        echo_lines([f"{where}; the profile names it in env_files"])
    say_wrote_profile(path, plan)
    return EXIT_OK


def _profile_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "converted"


profile_output = output_options("Where to write it (default: profiles/NAME.toml).")
name_option = click.option("--name", help="Profile name (default: from the source).")


# Where the secrets go (variables, credential flags' values): their own 0600 env file, which
# the profile names.
secrets_file_option = click.option(
    "--secrets-file",
    "secrets_to",
    type=click.Path(path_type=Path),
    help="Env file (0600) for the secret variables and credential flags' values (default: "
    "the profile's path with .env).",
)
secrets_in_profile_option = click.option(
    "--secrets-in-profile",
    is_flag=True,
    help="Keep secrets in the profile instead: variables in [env], credential flags' values "
    "in [server] args (a 0600 profile).",
)


@click.command()
@click.argument("script")
@click.option(
    "--from",
    "kind",
    type=click.Choice(INPUT_KINDS),
    help="What SCRIPT is (default: nccl-conf for nccl.conf and .nccl.conf, env for *.env, "
    "else script).",
)
@name_option
@profile_output
@secrets_file_option
@secrets_in_profile_option
def convert(script: str, kind: str | None, name: str | None, **options: Any) -> int:
    """Turn a start SCRIPT (or '-' for stdin: a raw command line) into a profile.

    Follows export lines, VAR=value prefixes, env, line continuations, comments, cd,
    sourced files and output redirections up to the server's line (SGLang's `python -m
    sglang.launch_server` or `sglang serve`; vLLM's `vllm serve`, or `python -m` of its
    `serve` or its deprecated API server module), only the code that runs: here-docs and
    function bodies are skipped, `&&` and `||` follow what came before, `if` and loops are
    refused with their line, `exit` ends the script. An environment file (KEY=VALUE lines)
    or an nccl.conf gives a profile of its variables, without [server].
    """
    from nccl_launch.migrate.inputs import read_input

    source = "stdin" if script == "-" else script
    start = read_input(script, kind, os.environ)
    default = "converted" if source == "stdin" else Path(source).stem
    script_path = None if script == "-" else Path(script)
    name = name or _profile_name(default)
    return _saved(start, name, source, "converted", script=script_path, **options)


@click.command()
@click.option(
    "--pid",
    type=PID,
    metavar="PID",
    required=True,
    help="The running server's main process.",
)
@name_option
@profile_output
@secrets_file_option
@secrets_in_profile_option
def capture(pid: int, name: str | None, **options: Any) -> int:
    """Write a profile from a running server: its NCCL env, its command line and directory."""
    from nccl_launch.migrate.capture import read_process

    start = read_process(pid)
    return _saved(start, name or f"captured-{pid}", f"pid {pid}", "captured", **options)
