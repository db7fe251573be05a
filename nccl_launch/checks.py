"""Preflight results: one Check per line, gathered in a versioned report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

Status = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    """One line of the preflight report."""

    name: str
    status: Status
    message: str
    detail: list[str] = []


class PreflightReport(BaseModel):
    """The versioned JSON of `preflight --format json`."""

    schema_version: int = 1
    profile: str
    digest: str
    argv: list[str]
    checks: list[Check]
    sglang: dict[str, Any] | None = None

    def failed(self, name: str) -> bool:
        return any(check.status == "fail" and check.name == name for check in self.checks)
