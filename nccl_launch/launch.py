"""The edge of `run`: read env files, merge, refuse on drift, exec the command."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from dotenv.parser import parse_stream

from nccl_launch.errors import DriftError, HostError, UsageError
from nccl_launch.loader import LoadedProfile, load_profile
from nccl_launch.merge import EnvLayer, MergeResult, merge_environment
from nccl_launch.plan import LaunchPlan, build_plan
from nccl_launch.render import drift_text


@dataclass(frozen=True)
class Launch:
    """Everything `run` decided: the profile, its plan, the merged env and the final argv."""

    loaded: LoadedProfile
    plan: LaunchPlan
    merged: MergeResult
    argv: list[str]


def read_env_file(path: Path) -> EnvLayer:
    """A dotenv file as a layer; a line python-dotenv cannot parse is an error, not skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"env file {path}: cannot read: {error}") from None
    values = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise UsageError(f"{path}:{line}: not a KEY=VALUE line: {binding.original.string!r}")
        if binding.key is None:
            continue
        if binding.value is None:
            raise UsageError(
                f"{path}:{line}: {binding.key} has no value; write {binding.key}=VALUE"
            )
        values[binding.key] = binding.value
    return EnvLayer(source=f"env file {path}", values=values)


def prepare_launch(
    ref: str, extra: Sequence[str], env_files: Sequence[Path], calling: Mapping[str, str]
) -> Launch:
    """Resolve the profile and merge; raise DriftError with the diff when the env disagrees."""
    loaded = load_profile(ref)
    plan = build_plan(loaded.profile)
    if plan.argv:
        argv = plan.argv + list(extra)
    elif extra:
        argv = list(extra)
    else:
        raise UsageError(
            f"profile {plan.label} has no [server] table; give the command after '--': "
            f"nccl-launch run {ref} -- COMMAND..."
        )
    layers = [read_env_file(path) for path in env_files]
    origins = {key: str(path) for key, path in loaded.origins.items()}
    merged = merge_environment(calling, layers, plan, loaded.profile.policy, origins)
    if merged.report.drifted:
        header = f"refusing to start: environment drifts from {plan.label} ({plan.short_digest})"
        raise DriftError(drift_text(merged.report, header))
    return Launch(loaded=loaded, plan=plan, merged=merged, argv=argv)


def exec_command(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with the command: same PID, its signals and exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], list(argv), dict(env))
    except OSError as error:
        raise HostError(f"cannot execute {argv[0]}: {error.strerror}") from None
