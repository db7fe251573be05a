"""`check --format prometheus`: node_exporter textfile-collector metrics of one check."""

from __future__ import annotations

import time
from collections import Counter

from nccl_launch.check import LiveReport
from nccl_launch.drift import DRIFT_KINDS


def _labels(**labels: str) -> str:
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        for value in labels.values()
    )
    return (
        "{" + ",".join(f'{key}="{value}"' for key, value in zip(labels, escaped, strict=True)) + "}"
    )


def _metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    return lines + [f"{name}{labels} {value:g}" for labels, value in samples]


def metrics(report: LiveReport, now: float | None = None) -> str:
    """The textfile: drift gauge, drifted variables by kind, processes by state, what runs."""
    name, _, version = report.profile.rpartition("@")
    base = {"profile": name, "version": version, "digest": report.digest}
    kinds = Counter(entry.kind for p in report.processes for entry in p.drifted)
    states = Counter(
        "unreadable" if not p.readable else "drift" if p.drifted else "ok" for p in report.processes
    )
    running = {
        "profile": name,
        "running_profile": report.running_profile or "",
        "running_digest": report.running_digest or "",
    }
    lines = _metric(
        "nccl_launch_drift", "gauge",
        "1 when the live server's environment drifts from its profile or cannot be fully read.",
        [(_labels(**base), float(not report.ok))],
    ) + _metric(
        "nccl_launch_drift_variables", "gauge",
        "Drifted variables summed over the server's processes, by kind.",
        [(_labels(**base, kind=kind), kinds[kind]) for kind in DRIFT_KINDS],
    ) + _metric(
        "nccl_launch_processes", "gauge",
        "Processes of the server's tree, by state.",
        [(_labels(**base, state=state), states[state]) for state in ("ok", "drift", "unreadable")],
    ) + _metric(
        "nccl_launch_digest_mismatch", "gauge",
        "1 when the running server was started from another digest than the profile file's.",
        [(_labels(**base), float(report.digest_differs))],
    ) + _metric(
        "nccl_launch_running_info", "gauge",
        "The profile and digest the running server was started with (from its own environment).",
        [(_labels(**running), 1.0)],
    ) + _metric(
        "nccl_launch_check_timestamp_seconds", "gauge",
        "When this check ran, in seconds since the epoch.",
        [(_labels(**base), time.time() if now is None else now)],
    )  # fmt: skip
    return "\n".join(lines) + "\n"
