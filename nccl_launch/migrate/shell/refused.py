"""How the shell reader refuses what it does not follow: a finding at a line of the script
(`findings.said_of` says it within the line that sources the file, or the script)."""

from __future__ import annotations

from nccl_launch.findings import Finding, Refused


class ShellError(Refused):
    """A construct this reader does not follow: one finding, at its line (`shell_error`). Its own
    class, so that a reader trying a word one way may catch it and try another."""


def shell_error(code: str, line: int, message: str, fix: str = "") -> ShellError:
    """The reader's refusal of what is on `line`: `code`, what is there, and the fix."""
    return ShellError(Finding(code, f"line {line}", message, fix))
