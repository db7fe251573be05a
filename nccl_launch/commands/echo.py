"""What commands print for people: warnings, escaped lines, the line after a written profile."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nccl_launch.escaping import shell_word
from nccl_launch.findings import WARNING_PREFIX, Finding, lines
from nccl_launch.secrets.masking import for_people

if TYPE_CHECKING:
    from nccl_launch.profile.plan import ProfilePlan


def warn(message: str | Finding) -> None:
    """A warning on stderr, each line escaped: a note may quote a path, a key or a value."""
    if isinstance(message, Finding):
        shown = lines([replace(message, severity="warning")])
    else:
        shown = [f"{WARNING_PREFIX}{message}"]
    echo_lines(shown, err=True)


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
