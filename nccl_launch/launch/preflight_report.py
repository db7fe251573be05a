"""Preflight's result: one Check per line, gathered in a versioned report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, field_serializer

from nccl_launch.env.drift import DriftReport
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK
from nccl_launch.launch.check_names import CheckName
from nccl_launch.masking import mask_argv, mask_words, masked_texts
from nccl_launch.report import Report

Status = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    """One line of the preflight report; the environment check carries its drift report."""

    name: CheckName
    status: Status
    message: str
    detail: list[str] = []
    drift: DriftReport | None = None


class PreflightReport(Report):
    """`preflight`'s result: exit 3 when a host or server check fails, else 1 on drift. JSON
    masks the argv, and what the server's answer quotes of it, as the text does."""

    profile: str
    digest: str
    argv: list[str]
    checks: list[Check]
    # The installed server's answer, under its kind's name.
    sglang: dict[str, Any] | None = None
    vllm: dict[str, Any] | None = None

    @field_serializer("argv")
    def _masked_argv(self, argv: list[str]) -> list[str]:
        return mask_argv(argv)

    @field_serializer("sglang", "vllm")
    def _masked_probe(self, probe: dict[str, Any] | None) -> dict[str, Any] | None:
        # Every text of the probe's answer (its error, the parsed values) masked as words.
        return masked_texts(probe, mask_words)  # type: ignore[no-any-return]

    @property
    def exit_code(self) -> int:
        failed = {check.name for check in self.checks if check.status == "fail"}
        if failed - {"environment"}:
            return EXIT_HOST
        return EXIT_DRIFT if failed else EXIT_OK
