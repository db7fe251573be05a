"""A profile file and every file it `extends`, read once as TOML and not yet validated: the
text a launch acts on, merged root first, and which file declared each variable."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from nccl_launch.files.reading import read_text
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import default_kind
from nccl_launch.nccl.catalog import PREFIX
from nccl_launch.profile.document import parse_profile_toml
from nccl_launch.profile.search import find_profile

# Longer `extends` chains are a mistake; the cap also bounds the files a lookup reads.
MAX_EXTENDS = 64


class ChainFile(NamedTuple):
    """One file of the chain: where it is and its TOML."""

    path: Path
    data: dict[str, Any]


@dataclass(frozen=True)
class ProfileChain:
    """The files of a chain, child first. `pending` is why the walk stopped before the root
    (a parent not found or unreadable, a loop): raised once the files read are found valid,
    so that a file's own mistakes are reported before what it points at."""

    files: tuple[ChainFile, ...]
    pending: Refused | None = None

    @property
    def path(self) -> Path:
        return self.files[0].path

    @property
    def paths(self) -> tuple[Path, ...]:
        """The files, root first."""
        return tuple(file.path for file in reversed(self.files))

    def merged(self) -> dict[str, Any]:
        """The data of every file merged over what it extends, tables key by key, but for a
        `[server]` that names another server kind than the one it extends: it replaces that
        table whole (no flag of one kind means the same to another); the `env_files` of each
        file added after those of what it extends."""
        merged: dict[str, Any] = {}
        for file in reversed(self.files):
            if _kind(file.data) not in (None, _kind(merged) or default_kind().name):
                merged = {key: value for key, value in merged.items() if key != "server"}
            merged = _deep_merge(merged, file.data)
        env_files = [path for file in reversed(self.files) for path in _env_files(file)]
        return merged | ({"env_files": env_files} if env_files else {})

    def alone(self, index: int) -> dict[str, Any]:
        """The data of the file at `index` as it is validated alone: a `[server]` naming no
        kind is of the kind the nearest file it extends names (a child's `[server.speculative]`
        of a vLLM parent holds vLLM's keys)."""
        data = self.files[index].data
        server = data.get("server")
        named = (_kind(file.data) for file in self.files[index + 1 :])
        inherited = next((kind for kind in named if kind is not None), None)
        if not isinstance(server, dict) or "kind" in server or inherited is None:
            return data
        return data | {"server": server | {"kind": inherited}}

    def env_files(self) -> tuple[Path, ...]:
        """The env files the chain names, root first: a relative path is read from the folder
        of the file that names it as it was named (its folder's symlinks resolved, not the
        file's own), where a unit names it too: a configMap's `profiles/kimi.toml` reads
        `profiles/kimi.env`, not a file of the timestamped folder the kubelet removes at
        its next update."""
        return tuple(
            _folder(file) / path for file in reversed(self.files) for path in _env_files(file)
        )

    def secret_files(self) -> dict[str, Path]:
        """The files holding one secret each that the chain names, by variable, the child's
        where two name one; a relative path is read as an env file's."""
        found: dict[str, Path] = {}
        for file in reversed(self.files):
            table = file.data.get("secret_files")
            if isinstance(table, dict):
                folder = _folder(file)
                found |= {
                    name: folder / path for name, path in table.items() if isinstance(path, str)
                }
        return found

    def origins(self) -> dict[str, Path]:
        """The file that declared each variable the profile sets (the child wins)."""
        origins: dict[str, Path] = {}
        for file in reversed(self.files):
            nccl, env = file.data.get("nccl"), file.data.get("env")
            for table, prefix in ((nccl, PREFIX), (env, "")):
                if isinstance(table, dict):
                    origins |= {prefix + key: file.path for key in table}
        return origins


def _folder(file: ChainFile) -> Path:
    """The folder of `file` as it was named, its symlinks resolved: that of its env files."""
    return Path(os.path.realpath(file.path.parent))


def _env_files(file: ChainFile) -> list[str]:
    """The file's own `env_files` (what is not a list of text is left for validation)."""
    paths = file.data.get("env_files")
    return paths if isinstance(paths, list) and all(isinstance(p, str) for p in paths) else []


def _kind(data: dict[str, Any]) -> Any:
    """The server kind a file's `[server]` names, None where it names none."""
    server = data.get("server")
    return server.get("kind") if isinstance(server, dict) else None


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read(path: Path) -> ChainFile:
    text = read_text(path, "profile", trusted=True)
    return ChainFile(path, parse_profile_toml(path, text))


def _parent(files: list[ChainFile], extends: str) -> Path:
    """The file `extends` names, seen from the last file read; Refused for a loop or none."""
    path = files[-1].path
    if len(files) == MAX_EXTENDS:
        message = f"a chain of more than {MAX_EXTENDS} files from {files[0].path}"
        raise Refused([Finding("extends", "extends", message, file=str(path))])
    try:
        parent = find_profile(extends, near=path.parent)
    except Refused as error:  # said at `extends`, in the file that names it
        if any(each.cause == "host" for each in error.findings):
            raise  # a folder this user cannot look at: this host's, not the file's
        said = [
            Finding("extends", "extends", each.text(), file=str(path)) for each in error.findings
        ]
        raise Refused(said) from None
    seen = [file.path for file in files]
    if parent.resolve() in [file.resolve() for file in seen]:
        cycle = " -> ".join(str(file) for file in (*seen, parent))
        raise Refused([Finding("extends", "extends", f"cycle {cycle}", file=str(path))])
    return parent


def read_chain(path: Path) -> ProfileChain:
    """`path` and every file it extends, child first; a loop, not recursion. An `extends`
    that is not text stops the walk: validating the file reports it."""
    files = [_read(path)]
    while True:
        extends = files[-1].data.get("extends")
        if not isinstance(extends, str) or "\x00" in extends:
            return ProfileChain(tuple(files))
        try:
            files.append(_read(_parent(files, extends)))
        except Refused as error:
            return ProfileChain(tuple(files), pending=error)
