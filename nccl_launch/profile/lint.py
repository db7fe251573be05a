"""Warnings that leave a profile valid: deprecated names, SGLang overrides, host questions."""

from __future__ import annotations

from nccl_launch.nccl import catalog
from nccl_launch.profile.model import Profile
from nccl_launch.sglang.rules import server_warnings


def lint(profile: Profile) -> list[str]:
    """What `validate`, `run` and `preflight` warn about; judged from the profile alone."""
    notes = [note for key in profile.nccl for note in catalog.name_notes(catalog.PREFIX + key)]
    if profile.server is not None:
        notes += server_warnings(profile.server, profile.declared_env())
    return notes
