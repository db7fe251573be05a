"""A resolved profile turned into what will run: the declared env, the argv and their digest."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass

from nccl_launch import grammar
from nccl_launch.profile import MARKER_DIGEST, MARKER_PROFILE, Profile
from nccl_launch.sglang import server_argv


@dataclass(frozen=True)
class LaunchPlan:
    """The environment a profile declares and the command it runs, identified by a digest."""

    label: str
    env: dict[str, str]
    argv: list[str]
    digest: str

    @property
    def short_digest(self) -> str:
        return self.digest[: len("sha256:") + 8]

    @property
    def markers(self) -> dict[str, str]:
        """What the launcher adds: which profile runs, and a readable environment for `check`."""
        return {MARKER_PROFILE: self.label, MARKER_DIGEST: self.digest, "SPT_NOENV": "1"}

    @property
    def child_env(self) -> dict[str, str]:
        """Everything the profile puts in the server's environment."""
        return self.env | self.markers


def digest(env: dict[str, str], argv: list[str]) -> str:
    """sha256 over the canonical JSON of the declared env and the profile's argv."""
    canonical = json.dumps({"env": env, "argv": argv}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def build_plan(profile: Profile) -> LaunchPlan:
    """The plan of a resolved profile; argv is empty when it has no `[server]`."""
    env = profile.declared_env()
    argv = server_argv(profile.server) if profile.server is not None else []
    return LaunchPlan(label=profile.label, env=env, argv=argv, digest=digest(env, argv))


Change = tuple[str, str | None, str | None]


def profile_changes(old: Profile, new: Profile) -> list[Change]:
    """What changes in the env, the command and the policy between two resolved profiles."""
    old_plan, new_plan = build_plan(old), build_plan(new)
    changes: list[Change] = []
    for key in sorted(old_plan.env.keys() | new_plan.env.keys()):
        before, after = old_plan.env.get(key), new_plan.env.get(key)
        if before is None or after is None or not grammar.same_meaning(key, before, after):
            changes.append((key, before, after))
    if old_plan.argv != new_plan.argv:
        before_argv, after_argv = (
            shlex.join(p.argv) if p.argv else None for p in (old_plan, new_plan)
        )
        changes.append(("argv", before_argv, after_argv))
    old_policy, new_policy = old.policy.model_dump(), new.policy.model_dump()
    for field, before_value in old_policy.items():
        if before_value != new_policy[field]:
            changes.append((f"policy.{field}", str(before_value), str(new_policy[field])))
    return changes
