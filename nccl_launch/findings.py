"""A problem as data, from where it is found to where it is shown: what was found, where, how
bad, whose problem, the fix and any detail lines, worded in one place.

Checks return findings; each command decides how strict to be with them (`run` refuses an
error, `validate` notes a warning), never how to word them nor which exit code they earn. A
problem that stops a command is raised as `Refused`, the one exception, which holds findings.
`lines` is the one text writer and `report.ReportedFinding` the one JSON form; docs/findings.md
lists every code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from nccl_launch.errors import EXIT_CODES, Cause

# An error stops what would fail; a warning is said wherever the finding applies (`run` says
# it on every start); a note is for whoever writes the profile (`validate`, `preflight`).
Severity = Literal["error", "warning", "note"]
WARNING_PREFIX = "nccl-launch: warning: "


@dataclass(frozen=True)
class Finding:
    """One thing a check found: `code` (short, stable and documented: `repeated-field`),
    `where` (a key, `server.args`, `-- ARGS`, `--pid`), what is wrong, the fix when there is
    one, whose problem it is (`cause`), `file`, the file it is in when known (the profile, a
    parent), and `details`, lines under it (what a check saw: a log's line, a process)."""

    code: str
    where: str
    message: str
    fix: str = ""
    severity: Severity = "error"
    cause: Cause = "profile"
    file: str = ""
    details: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """`WHERE CODE`, by which `[policy] accept` acknowledges a profile's warning."""
        return f"{self.where} {self.code}"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.cause]

    def text(self) -> str:
        """`WHERE: MESSAGE; FIX`, the one wording of a finding."""
        where = f"{self.where}: " if self.where else ""
        return f"{where}{self.message}" + (f"; {self.fix}" if self.fix else "")

    def line(self) -> str:
        """`FILE: WHERE: MESSAGE; FIX`, or as `text` where no file is known."""
        return f"{self.file}: {self.text()}" if self.file else self.text()

    def in_file(self, file: str) -> Finding:
        """The finding, said to be in `file` unless it already names one."""
        return self if self.file else replace(self, file=file)


def lines(findings: Sequence[Finding]) -> list[str]:
    """The one text writer: each finding a line, its details indented under it. An error of
    a profile's file starts with the file, as every line of an invalid profile does; any
    other error with the program's name, a warning with `nccl-launch: warning: `, a note
    with `note: `."""
    written = []
    for each in findings:
        if each.severity == "warning":
            written.append(f"{WARNING_PREFIX}{each.line()}")
        elif each.severity == "note":
            written.append(f"note: {each.line()}")
        elif each.file and each.cause == "profile":
            written.append(each.line())
        else:
            written.append(f"nccl-launch: {each.line()}")
        written += [f"  {detail}" for detail in each.details]
    return written


class Refused(Exception):
    """The one exception a user's problem raises: it holds findings (one, or every error a
    check found), said by `lines`; its exit code is the lowest of theirs (a pinned digest's
    1, then 2 when any is the profile's or the command line's to fix, else 3: this host's)."""

    def __init__(self, findings: Finding | Sequence[Finding]) -> None:
        self.findings = [findings] if isinstance(findings, Finding) else list(findings)
        super().__init__("\n".join(lines(self.findings)))
        self.exit_code = min(each.exit_code for each in self.findings)

    def lines(self) -> list[str]:
        return lines(self.findings)


def of_host(error: Refused) -> Refused:
    """`error` said as this host's problem (exit 3): a file of the host's, not the input's."""
    return Refused([replace(each, cause="host") for each in error.findings])


def said_of(where: str, error: Refused) -> Refused:
    """`error` said of `where` (a store, a folder) before where each finding was found."""
    said = [f"{where}: {each.where}" if each.where else where for each in error.findings]
    return Refused([replace(each, where=at) for each, at in zip(error.findings, said, strict=True)])


def refuse(findings: Sequence[Finding]) -> None:
    """Refused with every error among `findings`, if any."""
    errors = [finding for finding in findings if finding.severity == "error"]
    if errors:
        raise Refused(errors)


# Where the server's arguments come from: the profile, or after `--` (run's, a unit's).
ARGS, EXTRA_ARGS = "server.args", "-- ARGS"
# Rules that more than one check judges (`validate`, `run`, `preflight`, `systemd`), each
# worded once here; whose problem it is follows from where the value is.


def empty_key(
    title: str, subject: str, where: str, source: str = "", host: bool = False
) -> Finding:
    """An API key given empty, which the server (`title`) takes as no key and so serves every
    request: `subject` (`--api-key's value`, `--api-key's ${API_KEY}`, `VLLM_API_KEY`) at
    `where`, set empty in `source` when known; this host's to fix when `host` (an env file or
    the environment of this machine), else the profile's or the command line's."""
    message = f"{subject} is empty{f' in {source}' if source else ''}, which {title} takes as "
    message += "no key (every request served)"
    if source:
        cause: Cause = "host" if host else "profile"
        return Finding("empty-key", where, message, "write the key there", cause=cause)
    if where == EXTRA_ARGS:
        fix = "pass the key after '--' (a unit's ${NAME} that no EnvironmentFile= sets is empty)"
    else:
        fix = "refer to the key (--api-key ${API_KEY}) and give it a value in an env file the "
        fix += "profile names"
    return Finding("empty-key", where, message, fix)


def unset_reference(
    name: str, where: str, files: Sequence[str], calling: bool = False, then: str = ""
) -> Finding:
    """A `${NAME}` that none of the profile's env `files` sets (nor, where `calling`, the
    calling environment): with neither the profile's to fix (no host can fill it), else this
    host's. `then` says what follows (a unit's empty argument): a warning."""
    sets = f"set by none of the profile's env files ({', '.join(files) or 'none'})"
    message = f"${{{name}}} is {sets}{' nor the calling environment' if calling else ''}{then}"
    fix = (
        f"write {name}=VALUE in one of them" if files else f"name one that sets {name} in env_files"
    )
    fix += "" if then else ", or name the file that holds it in secret_files"
    return Finding(
        "unset-reference",
        where,
        message,
        fix,
        "warning" if then else "error",
        "host" if files or calling else "profile",
    )
