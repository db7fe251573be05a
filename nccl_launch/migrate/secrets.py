"""The secrets of a start command, kept out of its profile: a 0600 env file the profile names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nccl_launch.deploy.exports import dotenv
from nccl_launch.errors import UsageError
from nccl_launch.escaping import escaped
from nccl_launch.masking import mask_value

SECRETS_MODE = 0o600


@dataclass(frozen=True)
class SecretsFile:
    """Where the secrets go, how the profile names that file (`env_files`), and the values."""

    path: Path
    named: str
    values: dict[str, str]


def secret_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The variables people would see masked (masking's one rule): a credential-looking name
    (`HF_TOKEN`), or a password in the value (`postgres://u:pw@db`)."""
    return {key: value for key, value in env.items() if mask_value(key, value) != value}


def secrets_file(
    profile: Path, given: Path | None, env: Mapping[str, str], script: Path | None = None
) -> SecretsFile | None:
    """The env file for the secrets of `env` (none without secrets): `given`, else the
    profile's path with the suffix `.env`; named in the profile relative to its folder, or
    absolute when given so. It may be neither the profile nor the `script` read (the same
    path, a symlink or a hard link): writing it would replace the one or the other."""
    values = secret_variables(env)
    if not values:
        return None
    path = given or profile.with_suffix(".env")
    for what, other in (("the profile", profile), ("the script read,", script)):
        if other is not None and _same_file(path, other):
            raise UsageError(
                f"secrets file {path} is {what} {other}; name another with --secrets-file"
            )
    named = str(path) if path.is_absolute() else os.path.relpath(path, profile.parent)
    return SecretsFile(path=path, named=named, values=values)


def _same_file(path: Path, other: Path) -> bool:
    if os.path.realpath(path) == os.path.realpath(other):  # resolve() raises on a loop
        return True
    try:
        return path.samefile(other)
    except OSError:  # one of them does not exist (yet)
        return False


def secrets_text(secrets: SecretsFile, profile: Path, source: str) -> str:
    """The env file: a comment saying whose it is, then one dotenv line per secret, quoted as
    `run` reads it back; a value dotenv cannot carry is refused without being shown."""
    whose = escaped(f"{profile} ({source})")  # a newline in a name would end the comment
    lines = [f"# Secrets of {whose}, kept out of the profile; keep this file 0600.\n"]
    for key, value in secrets.values.items():
        try:
            lines.append(dotenv({key: value}))
        except UsageError:
            raise UsageError(
                f"{source}: {key}: its value holds what a dotenv file cannot carry (a control "
                "character or '${'); keep it in the profile with --secrets-in-profile"
            ) from None
    return "".join(lines)
