"""A check's result as data: what it found, where, how bad, whose problem, and the fix, worded
in one place.

Checks return findings; each command decides how strict to be with them (`run` refuses an
error, `validate` notes a warning), never how to word them nor which exit code they earn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from nccl_launch.errors import EXIT_HOST, EXIT_USAGE, NcclLaunchError, ProfileError

# An error stops what would fail; a warning is said wherever the finding applies (`run` says
# it on every start); a note is for whoever writes the profile (`validate`, `preflight`).
Severity = Literal["error", "warning", "note"]
# Whose problem it is, which is the exit code of an error: the profile or the command line
# (exit 2: fixed there, on every host), or this host (exit 3: a file or value of this machine;
# the same profile is valid elsewhere).
Cause = Literal["profile", "host"]
EXIT_CODES: dict[Cause, int] = {"profile": EXIT_USAGE, "host": EXIT_HOST}


@dataclass(frozen=True)
class Finding:
    """One thing a check found: `code` (short and stable: `repeated-field`), `where` (a key,
    `server.args`, or `-- ARGS`), what is wrong, the fix when there is one, whose problem it
    is (`cause`), and `file`, the file it is in when known (the profile, a parent)."""

    code: str
    where: str
    message: str
    fix: str = ""
    severity: Severity = "error"
    cause: Cause = "profile"
    file: str = ""

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


def cause_of(error: NcclLaunchError) -> Cause:
    """Whose problem `error` is, by its exit code: this host's (exit 3), else the profile's or
    the command line's."""
    return "host" if error.exit_code == EXIT_HOST else "profile"


class Refused(ProfileError):
    """The errors among some findings, every one a line; its exit code is theirs: 2 when any
    is the profile's or the command line's to fix, else 3 (this host's). A profile's problem
    starts with its file, as every line of an invalid profile does; any other with the
    program's name."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        lines = [
            each.line() if each.file and each.cause == "profile" else f"nccl-launch: {each.line()}"
            for each in findings
        ]
        super().__init__(lines)
        self.exit_code = min(each.exit_code for each in findings)


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
