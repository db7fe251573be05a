"""`check --format prometheus`: node_exporter textfile-collector metrics of one check."""

from __future__ import annotations

import time
from collections import Counter

from nccl_launch.env.drift import DRIFT_KINDS
from nccl_launch.live.compare import LiveReport
from nccl_launch.profile.search import split_reference
from nccl_launch.secrets.masking import for_people

Samples = list[tuple[dict[str, str], float]]


def _labels(labels: dict[str, str]) -> str:
    def label_value(value: str) -> str:
        # A label may quote what the live process says of itself: masked and escaped as
        # every line for people is, then in the exposition format's escapes.
        return for_people(value).replace("\\", "\\\\").replace('"', '\\"')

    return "{" + ",".join(f'{key}="{label_value(value)}"' for key, value in labels.items()) + "}"


def _number(value: float) -> str:
    """Exact: `:g` would round a timestamp to six digits."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def metrics(report: LiveReport, now: float | None = None) -> str:
    """The textfile: drift gauge, drifted variables by kind, processes by state, whether the
    profile is valid, what runs."""
    name, version = split_reference(report.profile)
    base = {"profile": name, "version": version, "digest": report.digest}
    kinds = Counter(entry.kind for p in report.processes for entry in p.drifted)
    states = Counter(
        "unreadable" if not p.readable else "drift" if p.drifted else "ok" for p in report.processes
    )
    logs = Counter(p.nccl_log.state for p in report.processes if p.nccl_log is not None)
    running = {
        "profile": name,
        "running_profile": report.running_profile or "",
        "running_digest": report.running_digest or "",
    }
    families: list[tuple[str, str, Samples]] = [
        (
            "nccl_launch_drift",
            "1 when the live server's environment drifts from its profile or cannot be read.",
            [(base, float(not report.ok))],
        ),
        (
            "nccl_launch_drift_variables",
            "Drifted variables summed over the server's processes, by kind.",
            [(base | {"kind": kind}, kinds[kind]) for kind in DRIFT_KINDS],
        ),
        (
            "nccl_launch_processes",
            "Processes of the server's tree, by state.",
            [(base | {"state": s}, states[s]) for s in ("ok", "drift", "unreadable")],
        ),
        (
            "nccl_launch_nccl_logs",
            "Processes started by run --nccl-debug, by the state of their NCCL log.",
            [(base | {"state": s}, logs[s]) for s in ("read", "none-yet", "unreadable")],
        ),
        (
            "nccl_launch_profile_valid",
            "0 while the profile file is invalid and a watch checks its last good version.",
            [(base, float(not report.profile_error))],
        ),
        (
            "nccl_launch_env_files_unchecked",
            "Env files of the profile this check could not read: their variables went unchecked.",
            [(base, len(report.unchecked_env_files))],
        ),
        (
            "nccl_launch_digest_mismatch",
            "1 when the server was started from another digest than the profile file's.",
            [(base, float(report.digest_differs))],
        ),
        (
            "nccl_launch_running_info",
            "The profile and digest the server says it was started with.",
            [(running, 1.0)],
        ),
        (
            "nccl_launch_check_timestamp_seconds",
            "When this check ran, in seconds since the epoch.",
            [(base, time.time() if now is None else now)],
        ),
    ]
    lines = []
    for metric, help_text, samples in families:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [f"{metric}{_labels(labels)} {_number(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"
