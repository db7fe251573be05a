"""From a start command (a script's or a process's) to a checked profile file."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from nccl_launch.errors import ProfileError, UsageError
from nccl_launch.escaping import toml_escaped
from nccl_launch.files import check_output, write_output
from nccl_launch.masking import holds_secret, mask_argv
from nccl_launch.migrate.secrets import SECRETS_MODE, SecretsFile, secrets_file, secrets_text
from nccl_launch.migrate.server_table import server_table
from nccl_launch.nccl import catalog, rules
from nccl_launch.nccl.grammar import BoolRule, IntRule, LevelRule, SizeRule, TomlValue, Undefined
from nccl_launch.profile.load import validate_resolved
from nccl_launch.profile.markers import OWN_VARIABLES
from nccl_launch.profile.model import PROFILE_SCHEMA
from nccl_launch.profile.new import check_name
from nccl_launch.profile.plan import ProfilePlan, build_plan


@dataclass
class StartCommand:
    """What a start script or a process amounts to: the server's env, argv and directory."""

    env: dict[str, str]
    argv: list[str]
    cwd: str | None = None
    lines: dict[str, str] = field(default_factory=dict)  # where each was set: "a.sh line 2"
    notes: list[str] = field(default_factory=list)
    origin: str = ""  # where every variable came from, for one without a line ("pid 42")
    at: str = ""  # where the server's command is: "line 9", "a.sh line 2"

    def where(self, key: str) -> str:
        """Where `key` was set, as a comment in the profile says it."""
        return self.lines.get(key) or self.origin


_DECIMAL = re.compile(r"-?[0-9]+")
_BINARY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _integer(value: TomlValue) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value) and str(int(value)) == value:
        return int(value)
    return None


def typed(key: str, value: TomlValue) -> TomlValue:
    """`value` as a profile reads best, meaning the same to NCCL (so the digest is the same):
    an integer as a TOML integer, a 0/1 switch as false/true, a size in the largest binary
    unit that divides it (16777216 is "16MiB"), other text as it is."""
    rule, number = rules.rule_for(key), _integer(value)
    if number is None:
        return value
    if isinstance(rule, BoolRule) and number in (0, 1):
        return bool(number)
    if isinstance(rule, SizeRule):
        unit = next(((name, size) for name, size in _BINARY_UNITS if number % size == 0), None)
        return f"{number // unit[1]}{unit[0]}" if unit and number else number
    return number if isinstance(rule, IntRule) else value


def nccl_reading(key: str, value: str, where: str) -> tuple[TomlValue | None, str | None]:
    """The value to store for `key=value`: what NCCL read, so the profile keeps its meaning
    (`010` is 8, octal; `0x200` is 512; `16MB` is 16), with a note when that differs from the
    spelling; None (and a note) for an empty integer, which leaves NCCL's default."""
    rule = rules.rule_for(key)
    read = rules.meaning(key, value)
    if isinstance(read, Undefined):
        raise ValueError(f"{value!r}: {read.why}; write the level NCCL should use")
    if isinstance(rule, IntRule | SizeRule):
        if read is None and not value:
            return None, f"{where}{key} is empty: NCCL keeps its default; not stored"
        if isinstance(read, int) and str(read) != value:
            meant = rule.ambiguity(value) if isinstance(rule, SizeRule) else None
            also = f" ({meant})" if meant else ""
            return read, f"{where}{key}={value} is read by NCCL as {read}; stored {read}{also}"
    if isinstance(rule, LevelRule) and isinstance(read, str) and read != value:
        return read, f"{where}{key}={value} is read by NCCL as {read}; stored {read}"
    return value, None


@dataclass(frozen=True)
class BuiltProfile:
    """A start command's profile: its data, validated, and its plan; a comment for each
    variable saying where it came from; the notes on what was read differently or left out."""

    data: dict[str, Any]
    plan: ProfilePlan
    comments: dict[str, str]
    notes: list[str]


def build_profile(
    start: StartCommand, name: str, source: str, how: str, env_files: list[str] | None = None
) -> BuiltProfile:
    """The profile of a start command (naming `env_files`), with the start command's notes and
    its own; NCCL values are checked with NCCL's grammar first, so that an error names the
    script's line."""
    problems, nccl, env, comments = [], {}, {}, {}
    notes = list(start.notes)
    for key, value in start.env.items():
        where = f"{start.lines[key]}: " if start.lines.get(key) else ""
        comments[key] = start.where(key)
        if key in OWN_VARIABLES:
            continue
        if not key.startswith(catalog.PREFIX):
            env[key] = value
        elif catalog.lookup(key) is None:
            problems.append(f"{where}{catalog.unknown_name_message(key)}")
        else:
            stored: TomlValue | None = None
            try:
                stored, note = nccl_reading(key, value, where)
                if note is not None:
                    notes.append(note)
                if stored is not None:
                    rules.canonical(key, stored)
                    nccl[key.removeprefix(catalog.PREFIX)] = typed(key, stored)
                if stored != value and comments[key]:
                    comments[key] += f": {json.dumps(value)}, which NCCL reads as {stored}"
            except ValueError as error:
                read = "" if stored in (None, value) else f"{value!r} (NCCL reads {stored}): "
                problems.append(f"{where}{key}: {read}{error}")
    if problems:  # a name or a value read from a process or a script may hold anything
        raise ProfileError([f"{source}: {problem}" for problem in problems])
    data: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "name": name,
        "version": 1,
        "description": f"{how} from {source}",
    }
    data |= {"env_files": env_files} if env_files else {}
    data |= {"nccl": nccl} if nccl else {}
    data |= {"env": env} if env else {}
    try:
        server, server_notes = server_table(start.argv)
    except UsageError as error:  # `$MODEL_DIR is not set`: in which script, on which line
        raise UsageError(f"{source}: {start.at}{': ' if start.at else ''}{error}") from None
    notes += server_notes
    if server is not None:
        data["server"] = server | ({"cwd": start.cwd} if start.cwd else {})
    elif start.argv:
        # Kept in the profile's provenance, which is shown, diffed and committed.
        shown = " ".join(mask_argv(start.argv))
        notes.append(f"not an SGLang command, run it with: -- {shown}")
    data["provenance"] = {"source": source} | ({"notes": "; ".join(notes)} if notes else {})
    plan = build_plan(validate_resolved(source, data))
    return BuiltProfile(data, plan, comments, notes)


def profile_text(data: dict[str, Any], comments: dict[str, str]) -> str:
    """`data` as TOML, each [nccl] and [env] value followed by a comment from `comments`
    (by full variable name). tomli-w writes no comments, so these two tables are written
    line by line, and the whole is read back to prove it still says `data`; what is not
    printable is escaped, as `show` does (`toml_escaped`), so no raw CSI reaches a terminal
    that prints the file."""
    tables = {"nccl": catalog.PREFIX, "env": ""}
    top = {key: value for key, value in data.items() if not isinstance(value, dict)}
    parts = [tomli_w.dumps(top)]
    for table, prefix in tables.items():
        if table in data:
            lines = [f"[{table}]"]
            for key, value in data[table].items():
                line = tomli_w.dumps({key: value}).rstrip("\n")
                comment = comments.get(prefix + key)
                lines.append(f"{line}  # {comment}" if comment else line)
            parts.append("\n".join(lines) + "\n")
    rest = {key: value for key, value in data.items() if key not in top and key not in tables}
    text = toml_escaped("\n".join([*parts, tomli_w.dumps(rest)]))
    if tomllib.loads(text) != data:  # a bug here must not write a profile that says otherwise
        raise RuntimeError("the profile written with comments does not read back as built")
    return text


def save_profile(
    start: StartCommand,
    name: str,
    source: str,
    how: str,
    output: Path | None,
    force: bool,
    secrets_to: Path | None = None,
    secrets_in_profile: bool = False,
    script: Path | None = None,
) -> tuple[Path, ProfilePlan, list[str], SecretsFile | None]:
    """Write the profile of `start` to `output` (default `profiles/NAME.toml`) atomically,
    never replacing a file without `force`; where it went, its plan, the notes to tell and
    where its secrets went. Secret variables go to a 0600 env file the profile names in
    `env_files` (`secrets_to`, else beside it with the suffix `.env`), unless
    `secrets_in_profile`; never the profile itself, nor the `script` read. A profile still
    holding a secret (a credential flag, or the variables kept in it) is readable by its
    owner only. The name is held to `new`'s rule."""
    check_name(name, "--name")
    path = output or Path("profiles") / f"{name}.toml"
    secrets = None if secrets_in_profile else secrets_file(path, secrets_to, start.env, script)
    if secrets is not None:
        kept = {key: value for key, value in start.env.items() if key not in secrets.values}
        start = dataclasses.replace(start, env=kept)
    built = build_profile(start, name, source, how, [secrets.named] if secrets else None)
    text = profile_text(built.data, built.comments)
    mode = 0o600 if holds_secret(start.argv, start.env) else None
    if secrets is not None:
        for file in (secrets.path, path):
            check_output(file, replace=force)
        secret_text = secrets_text(secrets, path, source)
        write_output(secrets.path, secret_text, replace=force, mode=SECRETS_MODE)
    write_output(path, text, replace=force, mode=mode)
    return path, built.plan, built.notes, secrets
