"""Candidates: the profile resolved with a trial's values, as its next version would be written
beside it (its digest names the candidate), each written for its trial as a real profile file
in the tune's folder (validated as a profile, started as `run` would); and the winner written
as the profile's next version."""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from nccl_launch.env.env_files import profile_layers
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import ServerKind, address, kind_of
from nccl_launch.nccl import catalog, rules
from nccl_launch.profile.chain import ProfileChain
from nccl_launch.profile.load import LoadedProfile, validate_resolved
from nccl_launch.profile.model import NEXT_VERSION_KEEPS
from nccl_launch.profile.new import (
    env_files_from,
    moved_note,
    resolved_copy,
    secret_files_from,
    write_profile,
)
from nccl_launch.profile.plan import ProfilePlan, build_plan
from nccl_launch.profile.search import find_profile, shipped_dir
from nccl_launch.tune.search import Values

LOOPBACK = "127.0.0.1"  # where a trial of a server that checks no key listens


def exposed_host(loaded: LoadedProfile) -> str | None:
    """The host the profile's server would serve anyone on, unasked: its own (its kind's
    default when unset) when it would check no API key and it is not a loopback address (a
    name is not judged); None otherwise."""
    server = loaded.profile.server
    if server is None:
        return None
    kind = kind_of(server)
    if kind.credentials.request_key(loaded.plan.argv, _key_env(loaded, kind)) is not None:
        return None
    host, _ = address(server)
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return None
    return host


def _key_env(loaded: LoadedProfile, kind: ServerKind) -> dict[str, str]:
    """Where a trial server finds a key its kind reads from the environment: the calling
    environment, the profile's and its env files' (empty for a kind that reads none)."""
    if kind.credentials.api_key_env is None:
        return {}
    env = {**os.environ, **loaded.plan.env}
    for layer in profile_layers(loaded):
        env |= layer.values
    return env


@dataclass(frozen=True)
class Candidate:
    """The profile with `values`: its resolved TOML data as its next version would be written
    beside it, and the digest of that."""

    values: Values
    data: dict[str, Any]
    digest: str


def changes(values: Values, start: Values) -> str:
    """`PROTO=LL128 ALGO=unset`: the values that differ from `start`, or `none`."""
    words = [
        f"{name}={'unset' if value is None else value}"
        for name, value in values.items()
        if value != start.get(name)
    ]
    return " ".join(words) or "none"


class Candidates:
    """The candidates of one base profile (`chain`), each built once."""

    def __init__(self, chain: ProfileChain) -> None:
        copied = resolved_copy(chain, chain.path.parent)
        self.data, self.base, self.private = copied.data, copied.loaded, copied.private
        self.moved = copied.moved  # env files the next version names by another path
        self.exposed = exposed_host(self.base)
        self._built: dict[tuple[tuple[str, str | None], ...], Candidate] = {}

    def start(self, names: list[str]) -> Values:
        """The base profile's value of each name (None: it leaves it unset)."""
        return {name: self.base.profile.nccl.get(name) for name in names}

    def get(self, values: Values) -> Candidate:
        key = tuple(sorted(values.items()))
        if key not in self._built:
            self._built[key] = self._build(values)
        return self._built[key]

    def _build(self, values: Values) -> Candidate:
        label = self.base.plan.label
        data = copy.deepcopy(self.data)
        data.pop("baseline", None)  # the base's figure is not the candidate's
        nccl = data.setdefault("nccl", {})
        for name, value in values.items():
            if value is None:
                nccl.pop(name, None)
            else:
                nccl[name] = rules.reading(catalog.PREFIX + name, value).toml()
        data["name"] = f"{self.base.profile.name}.tune"
        data["description"] = (
            f"a tune candidate of {label}: {changes(values, self.start(list(values)))}"
        )
        data["provenance"] = {
            "source": f"nccl-launch tune {label} ({self.base.plan.short_digest}, {self.base.path})"
        }
        plan = build_plan(validate_resolved(label, data))
        return Candidate(values=dict(values), data=data, digest=plan.digest)

    def lockdown(self) -> Finding | None:
        """What a trial changes of the server's listening, a warning said once, at the start:
        None unless the base's server would serve anyone on its host without a key."""
        server = self.base.profile.server
        if self.exposed is None or server is None:
            return None
        flag = kind_of(server).credentials.api_key_flag
        message = (
            f"{self.base.plan.label}'s server gives no {flag} and its host "
            f"{self.exposed} is not a loopback address: each trial listens on {LOOPBACK} "
            f"alone, and is measured there; a version --write writes keeps host {self.exposed}"
        )
        return Finding("trials-on-loopback", "", message, severity="warning")

    def moved_note(self) -> Finding | None:
        """Why the next version's digest differs from the base's by more than its values: a
        warning."""
        if not self.moved:
            return None
        return moved_note(self.moved, self.base.plan.label)

    def write(self, candidate: Candidate, folder: Path) -> Path:
        """The candidate's trial file in `folder` (written again, the same, if there): its env
        files named so that they are found from there, and its host the loopback address where
        the base's server would serve anyone without a key."""
        path = folder / f"{candidate.digest.removeprefix('sha256:')[:16]}.toml"
        data = copy.deepcopy(candidate.data)
        if self.base.env_files:
            data["env_files"], _ = env_files_from(self.base, folder)
        if self.base.secret_files:
            data["secret_files"] = secret_files_from(self.base, folder)
        if self.exposed is not None:
            data["server"]["host"] = LOOPBACK
        text = tomli_w.dumps(data)
        write_profile(path, text, private=self.private, force=True)
        return path

    def next_path(self) -> Path:
        """Where the base's next version goes: beside it, `NAME-VERSION.toml`; refused
        when that version exists already, there or on the search path, when something else
        holds that file name, or when the base is shipped with nccl-launch."""
        profile = self.base.profile
        version = profile.version + 1
        folder = self.base.path.parent
        if os.path.realpath(folder) == str(shipped_dir()):
            said = f"{self.base.plan.label} is shipped with nccl-launch, and tune writes nothing "
            said += "into the installed package"
            fix = f"copy it first (nccl-launch new NAME --from {profile.name}), then tune the copy"
            raise Refused(Finding("shipped-profile", "--write", said, fix))
        try:
            taken = find_profile(f"{profile.name}@{version}", near=folder)
        except Refused:
            path = folder / f"{profile.name}-{version}.toml"
            if os.path.lexists(path):
                said = f"{path} exists (not {profile.name}@{version})"
                fix = "tune writes the next version there and replaces nothing: move it aside"
                raise Refused(Finding("version-taken", "--write", said, fix)) from None
            return path
        said = f"{profile.name}@{version} exists already ({taken})"
        fix = "tune writes the next version of the profile it tunes, never over another"
        raise Refused(Finding("version-taken", "--write", said, fix))

    def write_next(
        self, winner: Candidate, baseline: dict[str, Any], provenance: dict[str, str]
    ) -> tuple[Path, ProfilePlan]:
        """The winner as the base's next version, with `baseline`, and `provenance` over what
        the base's next version keeps of its own; never over an existing file; its digest is
        the winner's."""
        path = self.next_path()
        profile = self.base.profile
        data = copy.deepcopy(winner.data)
        data |= {"name": profile.name, "version": profile.version + 1}
        data["description"] = profile.description
        kept = self.data.get("provenance", {})
        kept = {key: kept[key] for key in NEXT_VERSION_KEEPS if key in kept}
        data["provenance"] = kept | provenance
        data["baseline"] = baseline  # last, as in the shipped files
        return path, write_profile(path, tomli_w.dumps(data), private=self.private, force=False)
