"""What commands print: a report in the format chosen (`Output`), and for people warnings,
escaped lines, the line after a written profile."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from nccl_launch.escaping import shell_word
from nccl_launch.findings import Finding, lines
from nccl_launch.secrets.masking import for_people, masked_json

if TYPE_CHECKING:
    from pydantic import BaseModel

    from nccl_launch.profile.plan import ProfilePlan

R = TypeVar("R", bound="BaseModel")
# A report as people read it: its lines, or those of stdout and those of stderr.
Text = list[str] | tuple[list[str], list[str]]
# The formats whose output is a document for programs: what people read goes beside it.
MACHINE_FORMATS = ("json", "prometheus")
# Prometheus's text format holds one sample of each series: a file rewritten, never a stream.
UNSTREAMED_FORMATS = ("prometheus",)


class Output:
    """The format `--format` chose (`name`), and the one place a report is printed in it: a
    document for programs on stdout as it is, what people read beside it on stderr; or text
    for people, each line escaped."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def aside(self) -> bool:
        """Whether lines for people go to stderr: stdout holds a document for programs."""
        return self.name in MACHINE_FORMATS

    @property
    def streams(self) -> bool:
        """Whether reports in this format may follow each other on stdout (`--watch`)."""
        return self.name not in UNSTREAMED_FORMATS

    def document(
        self, report: R, renderers: Mapping[str, Callable[[R], str]], indent: int | None = 2
    ) -> str:
        """`report` as the text of this format, by the renderer named after it; JSON's, unless
        `renderers` has its own, is the report masked (on one line without `indent`)."""

        def json(report: R) -> str:
            return masked_json(report, indent=indent) + "\n"

        return {"json": json, **renderers}[self.name](report)

    def emit(self, report: R, text: Callable[[R], Text], said: Sequence[str] = ()) -> None:
        """Print `report`: its JSON, `said` (lines about it) beside on stderr; else `text`'s
        lines (a second list on stderr, first), then `said`."""
        if self.aside:
            echo_lines(list(said), err=True)
            click.echo(self.document(report, {}), nl=False)
            return
        shown = text(report)
        out, err = shown if isinstance(shown, tuple) else (shown, [])
        echo_lines(err, err=True)
        echo_lines([*out, *said])


def warn(finding: Finding) -> None:
    """A finding said as a warning on stderr, each line escaped: it may quote a path, a key or
    a value."""
    echo_lines(lines([replace(finding, severity="warning")]), err=True)


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
