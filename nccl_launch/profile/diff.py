"""`diff`: what changes between two resolved profiles, compared by NCCL's meaning."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, computed_field

from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.nccl import rules
from nccl_launch.profile.load import LoadedProfile, load_profile

Change = tuple[str, str | None, str | None]


# What the digest does not cover, compared as the resolved profile holds it (`name` and
# `version` are in each side's header; [nccl], [env] and [server] are the env, argv and cwd;
# `env_files` and `secret_files` are compared as the paths they hold).
UNDIGESTED = {"description", "policy", "provenance", "baseline"}


def profile_changes(old: LoadedProfile, new: LoadedProfile) -> list[Change]:
    """Every change between two resolved profiles: the env, the argv, the cwd, the env files
    and the secret files (which the digest covers), then the keys named in UNDIGESTED (which
    it does not)."""
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
    before_cwd, after_cwd = (p.profile.server.cwd if p.profile.server else None for p in (old, new))
    if before_cwd != after_cwd:
        changes.append(("cwd", before_cwd, after_cwd))
    before_files, after_files = (p.profile.env_files for p in (old, new))
    if before_files != after_files:
        before_text, after_text = (
            shlex.join(files) if files else None for files in (before_files, after_files)
        )
        changes.append(("env_files", before_text, after_text))
    before_secrets, after_secrets = (p.profile.secret_files for p in (old, new))
    for name in sorted(before_secrets.keys() | after_secrets.keys()):
        before_path, after_path = before_secrets.get(name), after_secrets.get(name)
        if before_path != after_path:
            changes.append((f"secret_files.{name}", before_path, after_path))
    before_rest, after_rest = (_flat(p.profile.model_dump(include=UNDIGESTED)) for p in (old, new))
    for key in sorted(before_rest.keys() | after_rest.keys()):
        if before_rest.get(key) != after_rest.get(key):
            changes.append((key, before_rest.get(key), after_rest.get(key)))
    return changes


def _flat(table: dict[str, Any], path: str = "") -> dict[str, str]:
    """`table`'s values as text by dotted key (`policy.undeclared_nccl`); None is no value."""
    flat: dict[str, str] = {}
    for key, value in table.items():
        dotted = f"{path}.{key}" if path else key
        if isinstance(value, dict):
            flat |= _flat(value, dotted)
        elif value is not None:
            flat[dotted] = str(value)
    return flat


def outside_digest(key: str) -> bool:
    """Whether a change of `key` leaves the digest as it was."""
    return key.partition(".")[0] in UNDIGESTED


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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outside_digest(self) -> list[str]:
        """The keys of the changes the digest does not cover: equal digests may differ there."""
        return [key for key, _, _ in self.changes if outside_digest(key)]

    @property
    def exit_code(self) -> int:
        return EXIT_DRIFT if self.changes else EXIT_OK


def diff_profiles(old: str, new: str) -> ProfileDiff:
    """Load both profiles (paths, NAME or NAME@VERSION) and compare them."""
    before, after = load_profile(old), load_profile(new)
    changes = profile_changes(before, after)
    return ProfileDiff(old=DiffSide.of(before), new=DiffSide.of(after), changes=changes)
