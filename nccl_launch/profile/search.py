"""The profile search path: `./profiles`, `$NCCL_LAUNCH_PATH`, the system directory; lookups."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from nccl_launch.errors import UsageError
from nccl_launch.profile.markers import SEARCH_PATH_VAR, SYSTEM_DIR_VAR

SYSTEM_DIR = "/etc/nccl-launch/profiles"


def search_dirs(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """`./profiles`, then each `$NCCL_LAUNCH_PATH` entry, then the system directory."""
    extra = [Path(entry) for entry in environ.get(SEARCH_PATH_VAR, "").split(":") if entry]
    return [Path("profiles"), *extra, Path(environ.get(SYSTEM_DIR_VAR) or SYSTEM_DIR)]


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
