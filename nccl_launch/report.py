"""What every report shares: the versioned JSON envelope, the exit code it stands for, and a
finding as JSON."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel

from nccl_launch.findings import Finding

# Bumped when a key of any command's JSON output is removed or changes meaning.
SCHEMA_VERSION: Final = 1


class Report(BaseModel):
    """A command's result: data until rendered; it knows the exit code it stands for."""

    # SCHEMA_VERSION's value: a document read back (bench's history) of another version is
    # not this report.
    schema_version: Literal[1] = SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        raise NotImplementedError


class ReportedFinding(BaseModel):
    """A finding in JSON (`validate --format json`): the one JSON form of a finding, whose
    text form is `findings.lines`. `cause` and `details` came after the rest: a reader of
    the first form finds its keys unchanged."""

    code: str
    severity: str
    file: str
    location: str
    message: str
    fix: str
    cause: str
    details: list[str]

    @classmethod
    def of(cls, finding: Finding) -> ReportedFinding:
        return cls(
            code=finding.code,
            severity=finding.severity,
            file=finding.file,
            location=finding.where,
            message=finding.message,
            fix=finding.fix,
            cause=finding.cause,
            details=list(finding.details),
        )
