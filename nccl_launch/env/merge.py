"""The env merge: calling env + env files + resolved profile -> the child's environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nccl_launch.env.drift import DriftReport, diff_env
from nccl_launch.nccl.conf import ConfEntry, applied
from nccl_launch.profile.model import Policy
from nccl_launch.profile.plan import ProfilePlan

CALLING_ENV = "calling environment"
LAUNCHER = "nccl-launch"


@dataclass(frozen=True)
class EnvLayer:
    """Variables from one file, applied over the calling environment: an env file, or a
    `secret` file of the profile, whose variable is not `exported` into it where it only
    fills the server's arguments."""

    path: str
    values: Mapping[str, str]
    exported: bool = True
    secret: bool = False

    @property
    def source(self) -> str:
        """Where its values come from, as reports name it: `env file PATH`."""
        return f"{'secret file' if self.secret else 'env file'} {self.path}"


@dataclass(frozen=True)
class MergeResult:
    """The child's environment, where each value came from, and the drift found on the way."""

    env: dict[str, str]
    sources: dict[str, str]
    report: DriftReport


@dataclass(frozen=True)
class Inherited:
    """What the server would inherit before the profile: the calling env with the env files
    applied in order, and where each value came from."""

    env: dict[str, str]
    sources: dict[str, str]

    @property
    def set_in(self) -> dict[str, str]:
        """The env file that sets each value the calling environment does not."""
        return {key: source for key, source in self.sources.items() if source != CALLING_ENV}


def inherited_environment(calling: Mapping[str, str], layers: Sequence[EnvLayer]) -> Inherited:
    """The calling env with the env files applied in order, and where each value came from."""
    inherited = dict(calling)
    sources = dict.fromkeys(calling, CALLING_ENV)
    for layer in layers:
        inherited.update(layer.values)
        sources.update(dict.fromkeys(layer.values, layer.source))
    return Inherited(inherited, sources)


@dataclass(frozen=True)
class Declared:
    """What a profile declares on this host: its own variables and those of the env files it
    names, and the env file that declared each of the latter."""

    env: dict[str, str]
    files: dict[str, str]


def declared_environment(plan: ProfilePlan, env_files: Sequence[EnvLayer]) -> Declared:
    """The plan's variables with those the profile's env files and secret files export, read
    in order."""
    exported = [layer for layer in env_files if layer.exported]
    values = {key: value for layer in exported for key, value in layer.values.items()}
    files = {key: layer.source for layer in exported for key in layer.values}
    return Declared(env=values | plan.env, files=files)


def merge_environment(
    inherited: Inherited,
    plan: ProfilePlan,
    policy: Policy,
    origins: Mapping[str, str],
    conf: Sequence[ConfEntry] = (),
    *,
    profile_file: Path,
    env_files: Sequence[EnvLayer] = (),
) -> MergeResult:
    """Merge the inherited env (`inherited_environment`) with the profile; pure, so it is
    tested on plain dicts.

    `origins` names where the profile declared each key. Declared values always win in the
    child; the report says which inherited values disagreed and whether that is tolerated.
    `conf` holds the nccl.conf entries: NCCL applies those the environment lacks inside the
    server, so an undeclared NCCL key among them is handled like an inherited one (except
    that nothing can strip it: only `warn` tolerates it). The child also gets the plan's
    markers for `profile_file`, the file the profile was loaded from. `env_files` are the
    profile's own (`env_files`): their variables are declared like the profile's, so an
    inherited value that differs is drift, and an equal one (systemd's EnvironmentFile=
    naming the same file) is a match.
    """
    sources = dict(inherited.sources)
    declared = declared_environment(plan, env_files)
    entries, matched = diff_env(
        declared.env,
        inherited.env,
        sources,
        policy,
        "start",
        declared_by=declared.files,
        set_in=inherited.set_in,
    )
    env = dict(inherited.env)
    for entry in entries:
        if entry.reason == "stripped":
            del env[entry.key]
            del sources[entry.key]
    env.update(declared.env)
    sources.update(declared.files)
    sources.update({key: origins.get(key, plan.label) for key in plan.env})
    from_files = applied(list(conf), env)
    values = {entry.key: entry.value for entry in from_files}
    where = {entry.key: entry.where for entry in from_files}
    files = {entry.key: entry.path for entry in from_files}
    entries += diff_env(plan.env, values, where, policy, "nccl.conf", set_in=files)[0]
    markers = plan.markers(profile_file)
    env.update(markers)
    sources.update(dict.fromkeys(markers, LAUNCHER))
    report = DriftReport(profile=plan.label, digest=plan.digest, entries=entries, matched=matched)
    return MergeResult(env=env, sources=sources, report=report)
