"""How the shell reader refuses what it does not follow: a finding at a line of the script,
said within the line that sources the file, or the script, that holds it."""

from __future__ import annotations

from dataclasses import replace

from nccl_launch.findings import Finding, Refused


class ShellError(Refused):
    """A construct this reader does not follow: one finding, at its line (`shell_error`). Its own
    class, so that a reader trying a word one way may catch it and try another."""


def shell_error(code: str, line: int, message: str, fix: str = "") -> ShellError:
    """The reader's refusal of what is on `line`: `code`, what is there, and the fix."""
    return ShellError(Finding(code, f"line {line}", message, fix))


def within(refused: Refused, where: str) -> Refused:
    """`refused` said to be within `where` (`line 3` of a script that sources the file, the
    script's own path): each finding's place prefixed with it."""
    return Refused(
        [
            replace(each, where=f"{where}: {each.where}" if each.where else where)
            for each in refused.findings
        ]
    )
