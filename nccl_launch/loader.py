"""Finding profile files on the search path, reading them, and resolving `extends`."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from nccl_launch import catalog, sglang
from nccl_launch.errors import ProfileError, UsageError
from nccl_launch.profile import (
    SEARCH_PATH_VAR,
    SYSTEM_DIR_VAR,
    Policy,
    Profile,
    Provenance,
    Server,
    Speculative,
)

SYSTEM_DIR = "/etc/nccl-launch/profiles"

# The keys each table accepts, to tell the user what would be valid instead of an unknown key.
_TABLES: dict[str, type[BaseModel]] = {
    "": Profile,
    "policy": Policy,
    "server": Server,
    "server.speculative": Speculative,
    "provenance": Provenance,
}


@dataclass(frozen=True)
class LoadedProfile:
    """A resolved profile, the files it came from, and which file declared each variable."""

    profile: Profile
    path: Path
    chain: tuple[Path, ...]
    origins: Mapping[str, Path]


def search_dirs(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """`./profiles`, then each `$NCCL_LAUNCH_PATH` entry, then the system directory."""
    extra = [Path(entry) for entry in environ.get(SEARCH_PATH_VAR, "").split(":") if entry]
    return [Path("profiles"), *extra, Path(environ.get(SYSTEM_DIR_VAR, SYSTEM_DIR))]


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.endswith(".toml")


def profile_files(dirs: list[Path]) -> list[Path]:
    """Every `*.toml` file in the given directories, in search order."""
    return [path for folder in dirs if folder.is_dir() for path in sorted(folder.glob("*.toml"))]


def _declared_identity(path: Path) -> tuple[str, int] | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    name, version = data.get("name"), data.get("version")
    return (name, version) if isinstance(name, str) and isinstance(version, int) else None


def find_profile(ref: str, near: Path | None = None) -> Path:
    """A profile file from a path, `NAME` or `NAME@VERSION` (searched near a file first)."""
    if _looks_like_path(ref):
        path = Path(os.path.normpath(near / ref if near is not None else ref))
        if not path.is_file():
            raise UsageError(f"profile file not found: {path}")
        return path
    name, _, version = ref.partition("@")
    if version and not version.isdigit():
        raise UsageError(f"{ref!r}: a version after '@' is a positive integer, as in {name}@4")
    dirs = ([near] if near is not None else []) + search_dirs()
    if not version:
        for folder in dirs:
            if (folder / f"{name}.toml").is_file():
                return folder / f"{name}.toml"
    best: tuple[int, Path] | None = None
    for path in profile_files(dirs):
        identity = _declared_identity(path)
        if identity is None or identity[0] != name or (version and identity[1] != int(version)):
            continue
        if best is None or identity[1] > best[0]:
            best = (identity[1], path)
    if best is None:
        where = ", ".join(str(folder) for folder in dirs)
        raise UsageError(f"profile {ref!r} not found; searched {where}")
    return best[1]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ProfileError([f"{path}: not valid TOML: {error}"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ProfileError([f"{path}: cannot read: {error}"]) from None


def _valid_keys(table: str) -> str:
    model = _TABLES.get(table)
    if model is None:
        return "none"
    return ", ".join(field.alias or name for name, field in model.model_fields.items())


def validation_problems(path: Path | str, error: ValidationError) -> list[str]:
    """One line per pydantic error, naming the file, the dotted key and what would be valid."""
    lines = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        key = ".".join(loc)
        if item["type"] == "value_error" and loc in (["nccl"], ["env"]):
            message = item["msg"].removeprefix("Value error, ")
            lines += [f"{path}: {key}.{line}" for line in message.split("\n")]
        elif item["type"] == "value_error":
            lines.append(f"{path}: {key}: {item['msg'].removeprefix('Value error, ')}")
        elif item["type"] == "extra_forbidden":
            table = ".".join(loc[:-1])
            where = f"[{table}]" if table else "the top level"
            lines.append(f"{path}: {key}: unknown key; valid in {where}: {_valid_keys(table)}")
        elif item["type"] == "missing":
            lines.append(f"{path}: {key}: required key is missing")
        else:
            lines.append(f"{path}: {key}: {item['msg']} (got {item['input']!r})")
    return lines


def _validate(path: Path, data: dict[str, Any]) -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as error:
        raise ProfileError(validation_problems(path, error)) from None


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _origins(path: Path, data: dict[str, Any]) -> dict[str, Path]:
    nccl = {catalog.PREFIX + key: path for key in data.get("nccl", {})}
    return {**nccl, **dict.fromkeys(data.get("env", {}), path)}


def _resolve(
    path: Path, stack: tuple[Path, ...]
) -> tuple[dict[str, Any], dict[str, Path], tuple[Path, ...]]:
    data = _read_toml(path)
    own = _validate(path, data)
    if own.extends is None:
        return data, _origins(path, data), (path,)
    try:
        parent = find_profile(own.extends, near=path.parent)
    except UsageError as error:
        raise ProfileError([f"{path}: extends: {error}"]) from None
    seen = [p.resolve() for p in (*stack, path)]
    if parent.resolve() in seen:
        cycle = " -> ".join(str(p) for p in (*stack, path, parent))
        raise ProfileError([f"{path}: extends: cycle {cycle}"])
    base, origins, chain = _resolve(parent, (*stack, path))
    return _deep_merge(base, data), {**origins, **_origins(path, data)}, (*chain, path)


def load_profile(ref: str) -> LoadedProfile:
    """Find, read, validate and resolve a profile with everything it extends."""
    path = find_profile(ref)
    data, origins, chain = _resolve(path, ())
    profile = _validate(path, data)
    if profile.server is not None:
        problems = sglang.server_problems(profile.server)
        if problems:
            raise ProfileError([f"{path}: server.{key}: {message}" for key, message in problems])
    return LoadedProfile(profile=profile, path=path, chain=chain, origins=origins)
