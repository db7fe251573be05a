"""Reading a profile file, validating it with one line per problem, and resolving `extends`."""

from __future__ import annotations

import dataclasses
import shlex
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from nccl_launch.findings import ARGS, Finding, Refused, refuse, unset_reference
from nccl_launch.kinds import INVALID_KIND, ServerKind, default_kind, kind_named
from nccl_launch.nccl.grammar import Invalid
from nccl_launch.profile.chain import ProfileChain, read_chain
from nccl_launch.profile.lint import review
from nccl_launch.profile.model import Baseline, InvalidTable, Policy, Profile, Provenance
from nccl_launch.profile.plan import ProfilePlan, build_plan
from nccl_launch.profile.search import find_profile
from nccl_launch.secrets.masking import mask_credentials
from nccl_launch.secrets.values import echoed_input, unechoed, unmasked_references
from nccl_launch.serving import references
from nccl_launch.serving.rules import server_problems
from nccl_launch.serving.table import ServerTable

# The keys each table accepts, to tell the user what would be valid instead of an unknown key.
_TABLES: dict[str, type[BaseModel]] = {
    "": Profile,
    "policy": Policy,
    "provenance": Provenance,
    "baseline": Baseline,
}


@dataclass(frozen=True)
class LoadedProfile:
    """A resolved, valid profile, its plan (computed once, here), the files it came from,
    which file declared each variable, and the env files it names (`env_files`, resolved)."""

    profile: Profile
    plan: ProfilePlan
    path: Path
    chain: tuple[Path, ...]
    origins: Mapping[str, Path]
    env_files: tuple[Path, ...] = ()
    secret_files: Mapping[str, Path] = dataclasses.field(default_factory=dict)


def _valid_keys(table: str, kind: ServerKind) -> str:
    server = kind.table
    if table == "server":
        model: type[BaseModel] | None = server
    elif table == "server.speculative" and "speculative" in server.model_fields:
        speculative = server.model_fields["speculative"].annotation
        model = next(arg for arg in typing.get_args(speculative) if arg is not type(None))
    else:
        model = _TABLES.get(table)
    if model is None:
        return "none"
    return ", ".join(field.alias or name for name, field in model.model_fields.items())


def _at(data: Any, loc: tuple[str | int, ...]) -> Any:
    """What `data` holds at pydantic's `loc`; None where it holds nothing."""
    for part in loc:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _kind_and_loc(loc: tuple[str | int, ...]) -> tuple[ServerKind, list[str | int]]:
    """The server kind a `[server]` error was found under (pydantic names the tag in its
    `loc`: `server.vllm.port`), and the `loc` as the file spells it (`server.port`)."""
    parts = list(loc)
    kind = kind_named(str(parts[1])) if parts[:1] == ["server"] and len(parts) > 1 else None
    if kind is not None:
        return kind, ["server", *parts[2:]]
    return default_kind(), parts


def _refusals(error: Any) -> list[Invalid]:
    """What a validator refused, as data: each key of a table (`InvalidTable`), or the one
    value; None for a plain ValueError."""
    if isinstance(error, InvalidTable):
        return error.refused
    return [error] if isinstance(error, Invalid) else []


def _pydantic_problem(key: str, item: Any, got: str, path: Path | str) -> Finding:
    """pydantic's own refusal of a value (its type, its bounds), with the value it got."""
    message, file = f"{item['msg']} (got {got})", str(path)
    kind = str(item["type"])
    if kind.endswith("_type"):
        return Finding("wrong-type", key, message, file=file)
    if kind.startswith(("greater_than", "less_than")) or kind == "finite_number":
        return Finding("out-of-range", key, message, file=file)
    if kind in ("too_short", "too_long"):
        return Finding("wrong-length", key, message, file=file)
    if kind == "literal_error":
        return Finding("unknown-choice", key, message, file=file)
    return Finding("invalid-value", key, message, file=file)


def _refused_problems(
    loc: list[str], refused: list[Invalid], table: Any, path: Path | str
) -> list[Finding]:
    """The findings of what a validator refused at `loc`, `table` the value it validated: a
    variable said as `nccl.NCHANNELS`, another table's key as `server.speculative: num_tries:`."""
    found = []
    for each in refused:
        message, fix = (unechoed(each.key, text, table) for text in (each.message, each.fix))
        where = ".".join(loc)
        if each.key and loc in (["nccl"], ["env"]):
            where = f"{where}.{each.key}"
        elif each.key:
            message = f"{each.key}: {message}"
        found.append(Finding(each.code, where, message, fix, file=str(path)))
    return found


def validation_problems(path: Path | str, error: ValidationError, data: Any) -> list[Finding]:
    """One finding per pydantic error in validating `data`, naming the file, the dotted key
    and what would be valid; a credential is never echoed."""
    found = []
    for item in error.errors():
        kind, parts = _kind_and_loc(item["loc"])
        loc = [str(part) for part in parts]
        key = ".".join(loc)
        refused = _refusals(item.get("ctx", {}).get("error"))
        if item["type"] == INVALID_KIND:
            shown = mask_credentials(repr(_at(data, ("server", "kind"))))
            message = f"{shown} is {item['msg']}"
            found.append(Finding("invalid-kind", "server.kind", message, file=str(path)))
        elif refused:
            found += _refused_problems(loc, refused, item["input"], path)
        elif item["type"] == "value_error":  # a validator's plain ValueError: its words whole
            message = mask_credentials(item["msg"].removeprefix("Value error, "))
            found.append(Finding("invalid-value", key, message, file=str(path)))
        elif item["type"] == "extra_forbidden":
            table = ".".join(loc[:-1])
            where = f"[{table}]" if table else "the top level"
            fix = f"valid in {where}: {_valid_keys(table, kind)}"
            found.append(Finding("unknown-key", key, "unknown key", fix, file=str(path)))
        elif item["type"] == "missing":
            found.append(Finding("missing-key", key, "required key is missing", file=str(path)))
        else:
            got = echoed_input(tuple(parts), item["input"], _at(data, tuple(parts[:-1])))
            found.append(_pydantic_problem(key, item, got, path))
    return found


def _validate(path: Path | str, data: dict[str, Any]) -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as error:
        raise Refused(validation_problems(path, error, data)) from None


def validate_resolved(source: Path | str, data: dict[str, Any]) -> Profile:
    """A whole profile (its `extends` resolved), `[server]` checked against its server's rules
    too, and where that server would replace a declared value (unless the policy accepts it)."""
    profile = _validate(source, data)
    if profile.server is not None:
        problems = server_problems(profile.kind, profile.server)
        problems += _reference_problems(profile, profile.server)
        problems += [note for note in review(profile).warnings if note.severity == "error"]
        refuse([problem.in_file(str(source)) for problem in problems])
    return profile


def _reference_problems(profile: Profile, server: ServerTable) -> list[Finding]:
    """A `${NAME}` of `[server] args` that nothing could fill (the profile names no env file,
    and its policy takes no such name from the calling environment), or that fills a
    credential (what masking hides of the argv) under a name masking shows: its value would
    be printed wherever the server's environment is (`run --dry-run`, drift, `check`)."""
    problems = []
    names = references.names(server.args)
    if not profile.env_files:
        allowed = [*profile.policy.environment_references, *profile.secret_files]
        problems += [unset_reference(name, ARGS, []) for name in names if name not in allowed]
    problems += [
        Finding(
            "reference",
            "server.args",
            f"${{{name}}} fills a credential, but masking shows a variable named {name}, so "
            "its value would be printed wherever the server's environment is",
            "name it with a word ending in KEY, TOKEN, SECRET or PASSWORD (API_KEY)",
        )
        for name in unmasked_references(server.args)
    ]
    return problems


def validate_chain(chain: ProfileChain) -> LoadedProfile:
    """The resolved profile of a chain read by `read_chain`: each file validated alone, child
    first, then why the walk stopped (if it did), then the whole."""
    for index, file in enumerate(chain.files):
        _validate(file.path, chain.alone(index))
    if chain.pending is not None:
        raise chain.pending
    profile = validate_resolved(chain.path, chain.merged())
    return LoadedProfile(
        profile=profile,
        plan=build_plan(profile),
        path=chain.path,
        chain=chain.paths,
        origins=chain.origins(),
        env_files=chain.env_files(),
        secret_files=chain.secret_files(),
    )


def load_profile(ref: str) -> LoadedProfile:
    """Find, read, validate and resolve a profile with everything it extends."""
    return validate_chain(read_chain(find_profile(ref)))


def check_pin(loaded: LoadedProfile, pin: str | None) -> LoadedProfile:
    """`loaded` when it has the pinned digest (or nothing is pinned); else a drift error that
    names both digests and the two ways to accept the file as it is now."""
    if pin is None or loaded.plan.digest == pin:
        return loaded
    path, now = shlex.quote(str(loaded.path)), loaded.plan.digest
    changed = f"profile {loaded.plan.label} ({path}) is {now} but --digest pins {pin}: the file "
    changed += "changed since the pin was taken"
    fix = f"review it (nccl-launch show {path}), then regenerate the unit (nccl-launch systemd "
    fix += f"{path}) or pass --digest {now}"
    raise Refused(Finding("digest-pin", "", changed, fix, cause="drift"))
