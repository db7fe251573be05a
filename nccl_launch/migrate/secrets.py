"""The secrets of a start command, kept out of its profile: a 0600 env file the profile names,
which its secret variables and its credential flags' values (as `${NAME}` in `[server] args`)
go to."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nccl_launch.deploy.exports import dotenv
from nccl_launch.escaping import escaped
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import ServerKind
from nccl_launch.secrets.masking import credential_values, secret_name
from nccl_launch.secrets.values import secrets_of
from nccl_launch.serving import references

SECRETS_MODE = 0o600


@dataclass(frozen=True)
class SecretsFile:
    """Where the secrets go, how the profile names that file (`env_files`), and the values."""

    path: Path
    named: str
    values: dict[str, str]


def secret_variables(env: Mapping[str, str], keys: Collection[str] = ()) -> dict[str, str]:
    """The variables people would see masked (`secrets_of`): a credential-looking name
    (`HF_TOKEN`), or a password in the value (`postgres://u:pw@db`); and those whatever their
    name that hold one of the `keys` given to credential flags (`SK` of `--api-key "$SK"`)."""
    names = secrets_of([], env).names
    return {key: value for key, value in env.items() if key in names or (value and value in keys)}


def secrets_file(
    profile: Path,
    given: Path | None,
    values: dict[str, str],
    script: Path | None = None,
    sourced: Sequence[Path] = (),
) -> SecretsFile | None:
    """The env file for the secret `values` (none without any): `given`, else the profile's
    path with the suffix `.env`. It may be neither the profile, nor the `script` read, nor a
    file it sources that the profile names (the same path, a symlink or a hard link): writing
    it would replace the one or the other."""
    if not values:
        return None
    path = given or profile.with_suffix(".env")
    others = [("the profile", profile), ("the script read,", script)]
    others += [("a file the script sources,", file) for file in sourced]
    for what, other in others:
        if other is not None and _same_file(path, other):
            message = f"secrets file {path} is {what} {other}"
            raise Refused(Finding("secrets-file", "", message, "name another with --secrets-file"))
    return SecretsFile(path=path, named=env_file_name(path, profile), values=values)


def env_file_name(path: Path, profile: Path) -> str:
    """How `profile` names the env file `path` in `env_files`: relative to its folder, or
    absolute when `path` is."""
    return str(path) if path.is_absolute() else os.path.relpath(path, profile.parent)


def variable_for(flag: str, credential_flags: Sequence[str]) -> str:
    """The variable a credential flag's value is kept in: `--api-key` gives API_KEY, an
    abbreviation the flag of the server's `credential_flags` it stands for (`--admin-api`
    gives ADMIN_API_KEY), a name masking would show one ending in _SECRET
    (`--watermark-config` gives WATERMARK_CONFIG_SECRET)."""
    meant = [each for each in credential_flags if each.startswith(flag)]
    name = re.sub(r"[^A-Za-z0-9]+", "_", (meant[0] if len(meant) == 1 else flag)).strip("_")
    name = name.upper() if name and not name[0].isdigit() else f"SECRET_{name.upper()}"
    return secret_name(name)


def moved_credentials(
    argv: list[str],
    words: list[str],
    secrets: dict[str, str],
    taken: Collection[str],
    kind: ServerKind,
) -> dict[int, str]:
    """`words` (`argv` of a server of `kind`, as `[server] args` writes it) with each
    credential flag's value that is still a value (`--api-key sk-1`) replaced by `${NAME}`
    (`variable_for`), the value added to `secrets` (one it holds with another value, or
    `taken`, the names the server gets from elsewhere, gets a number: `API_KEY_2`). What
    moved: each word's index and its name."""
    moved = {}
    for index, (flag, value) in credential_values(argv).items():
        if references.names([words[index]]):  # a variable of an env file already
            continue
        base = variable_for(flag, kind.credentials.flags)
        name, number = base, 1
        while secrets.get(name, value) != value or name in taken:
            number += 1
            name = f"{base}_{number}"
        secrets[name] = value
        words[index] = references.literal(argv[index].removesuffix(value)) + f"${{{name}}}"
        moved[index] = name
    return moved


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
            lines.append(dotenv({key: value}, expanded=False))
        except Refused:  # said without the value, a secret
            message = "its value holds a control character, which no env file can carry"
            fix = "give the server a value without one"
            raise Refused(
                Finding("secret-control-character", f"{source}: {key}", message, fix)
            ) from None
    return "".join(lines)
