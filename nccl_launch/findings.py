"""A check's result as data: what it found, where, how bad, and the fix, worded in one place.

Checks return findings; each command decides how strict to be with them (`run` refuses an
error, `validate` notes a warning), never how to word them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nccl_launch.errors import UsageError

# An error stops what would fail; a warning is said wherever the finding applies (`run` says
# it on every start); a note is for whoever writes the profile (`validate`, `preflight`).
Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Finding:
    """One thing a check found: `code` (short and stable: `repeated-field`), `where` (a key,
    `server.args`, or `-- ARGS`), what is wrong, and the fix when there is one."""

    code: str
    where: str
    message: str
    fix: str = ""
    severity: Severity = "error"

    @property
    def id(self) -> str:
        """`WHERE CODE`, by which `[policy] accept` acknowledges a profile's warning."""
        return f"{self.where} {self.code}"

    def text(self) -> str:
        """`WHERE: MESSAGE; FIX`, the one wording of a finding."""
        return f"{self.where}: {self.message}" + (f"; {self.fix}" if self.fix else "")


def refuse(findings: Sequence[Finding]) -> None:
    """UsageError (exit 2) with the first error among `findings`, if any."""
    errors = [finding for finding in findings if finding.severity == "error"]
    if errors:
        raise UsageError(errors[0].text())
