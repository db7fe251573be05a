"""`diff`: what changes between two resolved profiles, compared by NCCL's meaning."""

from __future__ import annotations

import shlex

from pydantic import BaseModel

from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.nccl import rules
from nccl_launch.profile.load import LoadedProfile, load_profile

Change = tuple[str, str | None, str | None]


def profile_changes(old: LoadedProfile, new: LoadedProfile) -> list[Change]:
    """What changes in the env, the command and the policy between two resolved profiles."""
    old_plan, new_plan = old.plan, new.plan
    changes: list[Change] = []
    for key in sorted(old_plan.env.keys() | new_plan.env.keys()):
        before, after = old_plan.env.get(key), new_plan.env.get(key)
        if before is None or after is None or not rules.same_meaning(key, before, after):
            changes.append((key, before, after))
    if old_plan.argv != new_plan.argv:
        before_argv, after_argv = (
            shlex.join(p.argv) if p.argv else None for p in (old_plan, new_plan)
        )
        changes.append(("argv", before_argv, after_argv))
    old_policy, new_policy = old.profile.policy.model_dump(), new.profile.policy.model_dump()
    for field, before_value in old_policy.items():
        if before_value != new_policy[field]:
            changes.append((f"policy.{field}", str(before_value), str(new_policy[field])))
    return changes


class DiffSide(BaseModel):
    """One of the two profiles compared: its label, short digest and file."""

    label: str
    short_digest: str
    path: str

    @classmethod
    def of(cls, loaded: LoadedProfile) -> DiffSide:
        plan = loaded.plan
        return cls(label=plan.label, short_digest=plan.short_digest, path=str(loaded.path))


class ProfileDiff(BaseModel):
    """Two profiles and what changes between them; exit 1 when anything does."""

    old: DiffSide
    new: DiffSide
    changes: list[Change]

    @property
    def exit_code(self) -> int:
        return EXIT_DRIFT if self.changes else EXIT_OK


def diff_profiles(old: str, new: str) -> ProfileDiff:
    """Load both profiles (paths, NAME or NAME@VERSION) and compare them."""
    before, after = load_profile(old), load_profile(new)
    changes = profile_changes(before, after)
    return ProfileDiff(old=DiffSide.of(before), new=DiffSide.of(after), changes=changes)
