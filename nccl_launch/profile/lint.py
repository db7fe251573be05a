"""Warnings that leave a profile valid: deprecated names, SGLang overrides, host questions,
secrets written into the file."""

from __future__ import annotations

from nccl_launch.nccl import catalog
from nccl_launch.profile.model import Profile
from nccl_launch.secrets import is_secret, mask_argv, mask_credentials
from nccl_launch.sglang.argv import server_argv
from nccl_launch.sglang.rules import server_warnings

_ELSEWHERE = "it belongs in an --env-file (mode 0600) or the calling environment"


def secret_notes(profile: Profile) -> list[str]:
    """Secrets written into the profile, which is read by many and shown in reviews and logs."""
    notes = []
    for key, value in profile.env.items():
        if is_secret(key):
            notes.append(f"env.{key}: holds a literal secret; {_ELSEWHERE}")
        elif mask_credentials(value) != value:
            notes.append(f"env.{key}: holds a password in a URL; {_ELSEWHERE}")
    argv = server_argv(profile.server) if profile.server is not None else []
    if mask_argv(argv) != argv:
        notes.append(
            "server: its command line holds a credential; pass it after '--' from the calling "
            'environment (nccl-launch run PROFILE -- --api-key "$API_KEY")'
        )
    return notes


def lint(profile: Profile) -> list[str]:
    """What `validate`, `run` and `preflight` warn about; judged from the profile alone."""
    notes = [note for key in profile.nccl for note in catalog.name_notes(catalog.PREFIX + key)]
    if profile.server is not None:
        notes += server_warnings(profile.server, profile.declared_env())
    return notes + secret_notes(profile)
