"""Preflight's result: one Check per line, a pass or a Finding, gathered in a versioned report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from nccl_launch.env.drift import DriftReport
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK
from nccl_launch.findings import Finding
from nccl_launch.kinds import names
from nccl_launch.launch.check_names import CheckName
from nccl_launch.profile.lint import accept_line
from nccl_launch.report import Report
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import Quoted

# A check's line as the report words it: passed, or a finding of a warning or an error.
CheckStatus = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    """One line of the preflight report: what a check that passed saw (`passed`), or what it
    found (`finding`, its details the lines under it); the environment check carries its
    drift report. What the server says is quoted in `passed`, masked where it is shown. In
    JSON, as documented: `{"name", "status", "message", "detail", "drift"}`."""

    name: CheckName
    passed: str | Quoted = ""
    finding: Finding | None = None
    drift: DriftReport | None = None

    @property
    def status(self) -> CheckStatus:
        if self.finding is None:
            return "ok"
        return "fail" if self.finding.severity == "error" else "warn"

    @property
    def message(self) -> str | Quoted:
        """The line's words: what passed, else the finding's (a profile's warning with the id
        `[policy] accept` takes)."""
        if self.finding is None:
            return self.passed
        return accept_line(self.finding) if self.name == "profile" else self.finding.text()

    @model_serializer(mode="wrap")
    def _documented(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        details = [] if self.finding is None else list(self.finding.details)
        message = data["passed"] if self.finding is None else self.message
        return {
            "name": self.name,
            "status": self.status,
            "message": message,
            "detail": details,
            "drift": data["drift"],
        }


class PreflightReport(Report):
    """`preflight`'s result: exit 3 when a host or server check fails, else 1 on drift. JSON
    holds the argv as the launch wraps it (`LaunchPlan.shown_argv`), and the server's answer
    as the launch quotes it (`Secrets.quoting_texts`): masked as the text masks it."""

    profile: str
    digest: str
    argv: list[str | Secret]  # what masking hides wrapped: as people see it
    checks: list[Check]
    # The installed server's answer, by its kind's name, each text in it quoted, or why it was
    # never started: in JSON, a key per kind registered.
    answers: dict[str, dict[str, Any] | Finding] = Field(default_factory=dict, exclude=True)

    @model_serializer(mode="wrap")
    def _answers_by_kind(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return data | {name: self._answer(name) for name in names()}

    def _answer(self, name: str) -> dict[str, Any] | None:
        """The answer of kind `name`; one never started (as `run` would not start it) in the
        form of the probe's own failure to start, `{"stage": "interpreter", "error"}`."""
        answer = self.answers.get(name)
        if isinstance(answer, Finding):
            return {"stage": "interpreter", "error": answer.text()}
        return answer

    @property
    def exit_code(self) -> int:
        failed = {check.name for check in self.checks if check.status == "fail"}
        if failed - {"environment"}:
            return EXIT_HOST
        return EXIT_DRIFT if failed else EXIT_OK
