"""Preflight's result: one Check per line, gathered in a versioned report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)

from nccl_launch.env.drift import DriftReport
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK
from nccl_launch.kinds import names
from nccl_launch.launch.check_names import CheckName
from nccl_launch.report import Report
from nccl_launch.secrets.masking import mask_argv, masked_texts
from nccl_launch.secrets.values import Quoted, Secrets, secrets_of

Status = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    """One line of the preflight report; the environment check carries its drift report. What
    the server says is quoted in its message and detail, masked where they are shown."""

    name: CheckName
    status: Status
    message: str | Quoted
    detail: list[str | Quoted] = []
    drift: DriftReport | None = None


class PreflightReport(Report):
    """`preflight`'s result: exit 3 when a host or server check fails, else 1 on drift. JSON
    masks the argv, and the server's answer with the launch's `secrets`, as the text does."""

    profile: str
    digest: str
    argv: list[str]
    checks: list[Check]
    # The installed server's answer, by its kind's name: in JSON, a key per kind registered.
    answers: dict[str, dict[str, Any]] = Field(default_factory=dict, exclude=True)
    secrets: Secrets = Field(default_factory=lambda: secrets_of([], {}), exclude=True)

    @field_serializer("argv")
    def _masked_argv(self, argv: list[str]) -> list[str]:
        return mask_argv(argv)

    @model_serializer(mode="wrap")
    def _answers_by_kind(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        # Every text of the server's answer (its error, the parsed values) masked as it says it.
        said = self.secrets.said
        return data | {name: masked_texts(self.answers.get(name), said) for name in names()}

    @property
    def exit_code(self) -> int:
        failed = {check.name for check in self.checks if check.status == "fail"}
        if failed - {"environment"}:
            return EXIT_HOST
        return EXIT_DRIFT if failed else EXIT_OK
