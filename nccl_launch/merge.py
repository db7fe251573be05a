"""The env merge: calling env + env files + resolved profile -> the child's environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nccl_launch import catalog
from nccl_launch.drift import DriftEntry, DriftReport, compare, undeclared_note
from nccl_launch.plan import LaunchPlan
from nccl_launch.profile import MARKER_DIGEST, MARKER_PROFILE, OWN_VARIABLES, Policy

CALLING_ENV = "calling environment"
LAUNCHER = "nccl-launch"


@dataclass(frozen=True)
class EnvLayer:
    """Variables from one place (an env file), applied over the calling environment."""

    source: str
    values: Mapping[str, str]


@dataclass(frozen=True)
class MergeResult:
    """The child's environment, where each value came from, and the drift found on the way."""

    env: dict[str, str]
    sources: dict[str, str]
    report: DriftReport


def merge_environment(
    calling: Mapping[str, str],
    layers: Sequence[EnvLayer],
    plan: LaunchPlan,
    policy: Policy,
    origins: Mapping[str, str],
) -> MergeResult:
    """Merge the inherited env with the profile; pure, so it is tested on plain dicts.

    `origins` names where the profile declared each key. Declared values always win in the
    child; the report says which inherited values disagreed and whether that is tolerated.
    """
    inherited = dict(calling)
    sources = dict.fromkeys(calling, CALLING_ENV)
    for layer in layers:
        inherited.update(layer.values)
        sources.update(dict.fromkeys(layer.values, layer.source))

    changed, matched = compare(plan.env, inherited, sources, missing_is_drift=False)
    warn = policy.conflict == "warn"
    entries = [entry.model_copy(update={"tolerated": warn}) for entry in changed]

    env = dict(inherited)
    for key in sorted(set(inherited) - set(plan.env)):
        if not key.startswith(catalog.PREFIX) or key in OWN_VARIABLES:
            continue
        owned = key in policy.server_owned
        strip = policy.undeclared_nccl == "strip" and not owned
        note = "server-owned" if owned else undeclared_note(key)
        entry = DriftEntry(
            key=key,
            kind="undeclared",
            expected=None,
            actual=inherited[key],
            source=sources[key],
            note=f"{note}; removed from the child" if strip else note,
            tolerated=owned or policy.undeclared_nccl != "refuse",
        )
        entries.append(entry)
        if strip:
            del env[key]
            del sources[key]

    env.update(plan.env)
    sources.update({key: origins.get(key, plan.label) for key in plan.env})
    markers = {MARKER_PROFILE: plan.label, MARKER_DIGEST: plan.digest, "SPT_NOENV": "1"}
    env.update(markers)
    sources.update(dict.fromkeys(markers, LAUNCHER))
    report = DriftReport(profile=plan.label, digest=plan.digest, entries=entries, matched=matched)
    return MergeResult(env=env, sources=sources, report=report)
