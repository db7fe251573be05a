"""`new`: a site profile started from one on the search path (a shipped one) or from scratch.

A profile started from another is a copy with its `extends` chain resolved, not a child that
`extends` it: the site's NCCL environment must not change when nccl-launch (and so its shipped
set) is upgraded, the file must run on a host without this install, and until it is edited
the copy has the digest of the profile it came from, which proves it runs the same. The one
exception is an env file named by a relative path that would name another file from the
copy's folder: the copy names it by its absolute path, and its digest differs by that path.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomli_w

from nccl_launch.files.paths import status_of
from nccl_launch.files.trust import check_trusted
from nccl_launch.files.writing import check_output, write_output
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import KINDS, default_kind
from nccl_launch.profile.chain import ProfileChain, read_chain
from nccl_launch.profile.document import parse_profile_toml
from nccl_launch.profile.load import LoadedProfile, validate_chain, validate_resolved
from nccl_launch.profile.model import PROFILE_SCHEMA
from nccl_launch.profile.plan import ProfilePlan, build_plan
from nccl_launch.profile.search import find_profile
from nccl_launch.secrets.values import secrets_of


def _servers() -> dict[str, str]:
    """What a scratch profile's `[server]` comment names: the default kind, then the others
    (`kind = "vllm": vLLM's`)."""
    default = default_kind()
    others = (f'kind = "{kind.name}": {kind.title}\'s' for kind in KINDS if kind is not default)
    return {"server": default.title, "others": ", ".join(others)}


# NAME.toml and the temporary name atomic_write gives it (.NAME.toml.XXXXXXXX.tmp) must fit
# in a file name (255 bytes).
MAX_NAME = 200

SCRATCH = """\
schema = 1
name = {name}
version = 1  # bump on every change: run and check report the version they ran
description = ""

[nccl]  # NCCL variables without the NCCL_ prefix, read with NCCL's grammar
# PROTO = "LL"
# BUFFSIZE = "16MiB"

# [server]  # the {server} command line `run` builds and execs ({others})
# python = "/opt/ml-env/bin/python3"
# model_path = "/models/..."
# tp_size = 8
# port = 8000

[provenance]  # why these values: what they were measured on, and what they bought
# hardware = ""
# measured = ""
"""


def check_name(name: str, given: str = "NAME") -> None:
    """Refused, one finding naming where it was `given`, unless `name` is a profile name
    that can name a file."""
    if len(name) > MAX_NAME:
        message, fix = f"{len(name)} characters", f"a profile name has at most {MAX_NAME}"
        raise Refused(Finding("name-too-long", given, message, fix))
    if name.endswith(".toml"):  # `run x.toml` reads a path: such a name could not be looked up
        message = f"{name!r}: give the name without .toml, as in {name[:-5]!r}"
        raise Refused(Finding("name-with-suffix", given, message))
    try:
        validate_resolved(given, {"schema": PROFILE_SCHEMA, "name": name, "version": 1})
    except Refused as error:  # its first problem, said where the name was given
        first = error.findings[0]
        raise Refused(replace(first, file="", where=f"{given}: {first.where}")) from None


@dataclass(frozen=True)
class MovedEnvFile:
    """An env file whose path, as written, names another file from a copy's folder: the copy
    names it by `path`, so its digest differs by that path."""

    written: str
    path: Path


def moved_note(moved: list[MovedEnvFile], label: str) -> Finding:
    """The warning that says which env files a copy names by another path, and why its
    digest differs from `label`'s."""
    said = "; ".join(f"{file.written!r} is written as {file.path}" for file in moved)
    message = f"{said}: from the copy's folder, the path as written would name another file; "
    message += f"so the digest differs from {label}'s by that path"
    return Finding("moved-env-file", "env_files", message, severity="warning")


def env_files_from(loaded: LoadedProfile, folder: Path) -> tuple[list[str], list[MovedEnvFile]]:
    """The env files of `loaded` as a profile in `folder` names the same files: each path as
    written where it names the same file from there (the digest covers the paths as written),
    else the file's absolute path; and those rewritten."""
    seen_from = Path(os.path.realpath(folder))
    paths, moved = [], []
    for written, path in zip(loaded.profile.env_files, loaded.env_files, strict=True):
        if os.path.realpath(seen_from / written) == os.path.realpath(path):
            paths.append(written)
        else:
            paths.append(str(path))
            moved.append(MovedEnvFile(written, path))
    return paths, moved


def secret_files_from(loaded: LoadedProfile, folder: Path) -> dict[str, str]:
    """The secret files of `loaded` as a profile in `folder` names the same files: as written
    where that names the same file from there, else by the file's absolute path."""
    seen_from = Path(os.path.realpath(folder))
    written = loaded.profile.secret_files
    return {
        name: written[name]
        if os.path.realpath(seen_from / written[name]) == os.path.realpath(path)
        else str(path)
        for name, path in loaded.secret_files.items()
    }


@dataclass(frozen=True)
class ResolvedCopy:
    """A chain with its `extends` resolved and dropped, as a file in another folder writes it
    (`data`), the profile it validates to, whether it is to be kept from other users' eyes
    (like one of its files, or like `convert` keeps what it would mask), and the env files it
    names by another path than the chain does."""

    data: dict[str, Any]
    loaded: LoadedProfile
    private: bool
    moved: list[MovedEnvFile]


def resolved_copy(chain: ProfileChain, folder: Path) -> ResolvedCopy:
    """The chain resolved as a profile file in `folder` writes it."""
    loaded = validate_chain(chain)
    data = chain.merged()
    data.pop("extends", None)
    moved: list[MovedEnvFile] = []
    if loaded.env_files:
        data["env_files"], moved = env_files_from(loaded, folder)
    if loaded.secret_files:
        data["secret_files"] = secret_files_from(loaded, folder)
    private = any(not path.stat().st_mode & stat.S_IROTH for path in chain.paths)
    private = private or bool(secrets_of(loaded.plan.argv, loaded.plan.env))
    return ResolvedCopy(data, loaded, private, moved)


def _copied(ref: str, name: str, folder: Path) -> ResolvedCopy:
    """`ref` resolved through its `extends` chain as a file in `folder`, renamed `name` at
    version 1, its source in `provenance.source`."""
    copied = resolved_copy(read_chain(find_profile(ref)), folder)
    data, loaded = copied.data, copied.loaded
    plan = loaded.plan
    data |= {"name": name, "version": 1}
    source = f"nccl-launch new --from {plan.label} ({plan.short_digest}, {loaded.path})"
    provenance = data.pop("provenance", {})
    if "source" in provenance:  # where the copied profile came from stays said
        source += f"; its source: {provenance['source']}"
    data["provenance"] = provenance | {"source": source}  # last, as in the shipped files
    return copied


def new_profile(
    name: str, source: str | None, folder: Path, force: bool
) -> tuple[Path, ProfilePlan, list[Finding]]:
    """Write `folder/NAME.toml` (a copy of `source`, or the scratch template) atomically,
    checked as `validate` would first, never replacing a file without `force`; its plan, and
    a note where the copy's digest differs from the source's (`moved_note`)."""
    check_name(name)
    path = folder / f"{name}.toml"
    fixes = Fixes("give another --dir", "pass --force to replace it")
    _check_target(path, force, fixes)  # before the copy is resolved: its errors come after
    if source is None:
        text = SCRATCH.format(name=json.dumps(name), **_servers())  # a checked name: no escape
        return path, write_profile(path, text, private=False, force=force, fixes=fixes), []
    copied = _copied(source, name, folder)
    text = tomli_w.dumps(copied.data)
    plan = write_profile(path, text, private=copied.private, force=force, fixes=fixes)
    notes = [moved_note(copied.moved, copied.loaded.plan.label)] if copied.moved else []
    return path, plan, notes


@dataclass(frozen=True)
class Fixes:
    """What the caller's user can do when the file cannot be written: its folder is not a
    directory, the file exists; by default, what is not done."""

    folder: str = "nothing is written"
    exists: str = "it is not replaced"


def _check_target(path: Path, force: bool, fixes: Fixes) -> None:
    """Refused, ending with the caller's fix, unless `path` can be written: its folder a
    directory, itself a regular file, and not there unless `force` (`check_output`)."""
    folder = path.parent
    status = status_of(folder, "folder")
    if status is not None and not stat.S_ISDIR(status.st_mode):
        message = f"not a directory, so {path.name} cannot be written in it"
        raise Refused(Finding("not-a-directory", str(folder), message, fixes.folder))
    check_output(path, replace=force, fix=fixes.exists)


def write_profile(
    path: Path, text: str, *, private: bool, force: bool, fixes: Fixes = Fixes()
) -> ProfilePlan:
    """Write the profile `text` to `path` atomically (0600 when `private`), checked as
    `validate` would first, never replacing a file without `force`; its plan. What cannot be
    written is refused with the caller's `fixes`."""
    profile = validate_resolved(path, parse_profile_toml(path, text))
    _check_target(path, force, fixes)
    mode = _mode(path, private)
    _check_runnable(path, mode)
    write_output(path, text, replace=force, mode=mode)
    return build_plan(profile)


def _mode(path: Path, private: bool) -> int:
    """0600 for a private copy; else that of the regular file replaced, else 0666 less the
    umask: never that of a symlink's target, which is not the file replaced."""
    if private:
        return 0o600
    with contextlib.suppress(OSError):  # none there, or none this user may look at
        status = path.lstat()  # a symlink's own status: not a regular file
        if stat.S_ISREG(status.st_mode):
            return stat.S_IMODE(status.st_mode)
    umask = os.umask(0)  # the only way to read it
    os.umask(umask)
    return 0o666 & ~umask


def _check_runnable(path: Path, mode: int) -> None:
    """Refused unless `run`, as root, would read `path` written with `mode` by this user:
    files.check_trusted's judgement of the file to be, so a directory others may write to
    (`--dir` 0777) or a mode others may write is refused before anything is written."""
    to_be = os.stat_result((stat.S_IFREG | mode, 0, 0, 1, os.geteuid(), os.getegid(), 0, 0, 0, 0))
    try:
        check_trusted(path, to_be, "profile", exists=False)
    except Refused as error:
        refused = "run refuses it as root, so nothing is written"
        said = [
            replace(each, fix="; ".join(filter(None, (each.fix, refused))))
            for each in error.findings
        ]
        raise Refused(said) from None
