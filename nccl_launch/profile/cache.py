"""What `run` needs of a resolved profile (`RunSpec`), kept on disk so that `run` starts
without pydantic: validating is the slow part of a start, and a profile rarely changes.

An entry is used only for the very text it was validated from, by the very code that
validated it: its key is a sha256 over nccl-launch's version, the size and mtime of each of its
modules and data files, and the text of every file of the `extends` chain, in order. Anything
else (an edit, a parent edited or shadowed, an upgrade) is a miss, and a miss validates with
pydantic as before. The cache is the user's own (0700 directory, 0600 files): a file or a
directory another user could write, a symlink, a FIFO, a torn or altered entry is ignored, and a
cache that cannot be written costs only speed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pwd
import stat
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nccl_launch import __version__
from nccl_launch.files import atomic_write
from nccl_launch.profile.chain import ProfileChain
from nccl_launch.profile.plan import ProfilePlan

if TYPE_CHECKING:  # pydantic models: needed on a miss only
    from nccl_launch.profile.model import Profile
    from nccl_launch.sglang.server import Server

_PACKAGE = Path(__file__).resolve().parent.parent
_ENTRY_LIMIT = 1 << 20  # far above any real plan; a larger file is not ours


@dataclass(frozen=True)
class RunPolicy:
    """`[policy]` as the drift rule reads it."""

    conflict: str
    undeclared_nccl: str
    server_owned: tuple[str, ...]


@dataclass(frozen=True)
class RunServer:
    """What `run` reads of `[server]` besides its argv."""

    model_path: str
    nnodes: int
    node_rank: int | None
    dist_init_addr: str | None
    cwd: str | None
    mtp_algorithm: str | None  # checked against the model's config.json at every start
    extra_settings: tuple[str, ...]  # the pass-through [server.speculative] keys


@dataclass(frozen=True)
class RunSpec:
    """A valid profile as `run` uses it: the plan, the policy, the server, and the warnings
    worth saying on every start (`lint.run_notes`)."""

    plan: ProfilePlan
    policy: RunPolicy
    server: RunServer | None
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSpec:
        """The spec `to_json` wrote (KeyError or TypeError for anything else)."""
        policy, server = data["policy"], data["server"]
        return cls(
            plan=ProfilePlan(**data["plan"]),
            policy=RunPolicy(**policy | {"server_owned": tuple(policy["server_owned"])}),
            server=RunServer(**server | {"extra_settings": tuple(server["extra_settings"])})
            if server is not None
            else None,
            notes=tuple(data["notes"]),
        )


def run_server(server: Server) -> RunServer:
    from nccl_launch.sglang.argv import extra_settings
    from nccl_launch.sglang.rules import mtp_algorithm

    return RunServer(
        model_path=server.model_path or "",
        nnodes=server.nnodes,
        node_rank=server.node_rank,
        dist_init_addr=server.dist_init_addr,
        cwd=server.cwd,
        mtp_algorithm=mtp_algorithm(server),
        extra_settings=tuple(extra_settings(server)),
    )


def run_spec(profile: Profile) -> RunSpec:
    """What `run` needs of a resolved, valid profile."""
    from nccl_launch.profile.lint import run_notes
    from nccl_launch.profile.plan import build_plan

    policy = profile.policy
    return RunSpec(
        plan=build_plan(profile),
        policy=RunPolicy(policy.conflict, policy.undeclared_nccl, tuple(policy.server_owned)),
        server=run_server(profile.server) if profile.server is not None else None,
        notes=tuple(run_notes(profile)),
    )


def _code_fingerprint() -> list[tuple[str, int, int]]:
    """Each module and data file of this installation, and the validator's own (pydantic):
    an upgrade or an edit of either changes it."""
    files = []
    for folder, dirs, names in os.walk(_PACKAGE):
        dirs[:] = sorted(name for name in dirs if name != "__pycache__")
        files += [Path(folder, name) for name in sorted(names) if name.endswith((".py", ".tsv"))]
    for package in ("pydantic", "pydantic_core"):  # found, not imported
        spec = importlib.util.find_spec(package)
        files.append(Path(spec.origin if spec is not None and spec.origin else package))
    found = []
    for path in files:
        try:
            status = path.stat()
        except OSError:
            found.append((str(path), -1, -1))
        else:
            found.append((str(path), status.st_size, status.st_mtime_ns))
    return found


def cache_key(chain: ProfileChain) -> str:
    texts = [file.text for file in chain.files]
    code = [__version__, sys.version, _code_fingerprint()]
    canonical = json.dumps([code, texts], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()  # json.dumps wrote ASCII


def cache_dir(environ: Mapping[str, str]) -> Path | None:
    """`$XDG_CACHE_HOME/nccl-launch/plans`, by default under the home directory's `.cache`:
    $HOME's, or the user database's when $HOME is unset, empty or relative (a systemd service
    may have none); None when neither is an absolute path."""
    base = Path(environ.get("XDG_CACHE_HOME", ""))
    if not base.is_absolute():  # the XDG spec: a relative path is invalid, ignore it
        home = Path(environ.get("HOME", ""))
        if not home.is_absolute():
            try:
                home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
            except KeyError:
                return None
        if not home.is_absolute():
            return None
        base = home / ".cache"
    return base / "nccl-launch" / "plans"


def _entry_path(folder: Path, chain: ProfileChain) -> Path:
    """One entry per profile file, replaced when the file changes."""
    where = os.path.realpath(chain.path).encode("utf-8", "surrogateescape")
    return folder / f"{hashlib.sha256(where).hexdigest()[:32]}.json"


def _ours(status: os.stat_result) -> bool:
    return status.st_uid == os.geteuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def spec_for(chain: ProfileChain, environ: Mapping[str, str]) -> RunSpec:
    """The spec of `chain`: from the cache, or validated with pydantic and then cached."""
    folder = cache_dir(environ) if chain.pending is None else None
    key = cache_key(chain) if folder is not None else ""
    if folder is not None and (hit := _lookup(folder, chain, key)) is not None:
        return hit
    from nccl_launch.profile.load import validate_chain

    spec = run_spec(validate_chain(chain).profile)
    if folder is not None:
        _store(folder, chain, key, spec)
    return spec


def _lookup(folder: Path, chain: ProfileChain, key: str) -> RunSpec | None:
    """The cached spec for `key`, or None on any doubt."""
    try:
        status = os.lstat(folder)
        if not (stat.S_ISDIR(status.st_mode) and _ours(status)):
            return None
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(_entry_path(folder, chain), flags)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as stream:
            status = os.fstat(fd)
            if not (stat.S_ISREG(status.st_mode) and _ours(status)):
                return None
            raw = stream.read(_ENTRY_LIMIT + 1)
    except OSError:
        return None
    check, _, body = raw.partition(b"\n")
    if len(raw) > _ENTRY_LIMIT or check.decode("ascii", "replace") != _checksum(body):
        return None  # torn, truncated or altered
    try:
        entry = json.loads(body)
        return RunSpec.from_json(entry["spec"]) if entry["key"] == key else None
    except (ValueError, KeyError, TypeError):
        return None


def _store(folder: Path, chain: ProfileChain, key: str, spec: RunSpec) -> None:
    """Keep `spec` for `key`; a cache that cannot be written is skipped silently."""
    body = json.dumps({"key": key, "spec": spec.to_json()}, separators=(",", ":"))
    try:
        existing = next(parent for parent in folder.parents if parent.exists())
        if existing.stat().st_uid != os.geteuid():
            return  # never create directories in another user's home (`sudo -E` keeps $HOME)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = os.lstat(folder)
        if stat.S_ISDIR(status.st_mode) and _ours(status):
            entry = f"{_checksum(body.encode())}\n{body}"
            atomic_write(_entry_path(folder, chain), entry, replace=True, mode=0o600)
    except OSError:
        pass


def _checksum(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
