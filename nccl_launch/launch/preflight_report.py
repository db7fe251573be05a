"""Preflight's result: one Check per line, gathered in a versioned report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from nccl_launch.env.drift import DriftReport
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK
from nccl_launch.report import Report

Status = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    """One line of the preflight report; the environment check carries its drift report."""

    name: str
    status: Status
    message: str
    detail: list[str] = []
    drift: DriftReport | None = None


class PreflightReport(Report):
    """`preflight`'s result: exit 3 when a host or SGLang check fails, else 1 on drift."""

    profile: str
    digest: str
    argv: list[str]
    checks: list[Check]
    sglang: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        failed = {check.name for check in self.checks if check.status == "fail"}
        if failed - {"environment"}:
            return EXIT_HOST
        return EXIT_DRIFT if failed else EXIT_OK
