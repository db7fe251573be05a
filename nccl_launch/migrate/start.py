"""From a start command (a script's or a process's) to a checked profile file."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from nccl_launch.env.env_files import env_file_lines, profile_env_file_lines
from nccl_launch.escaping import toml_escaped
from nccl_launch.files.toml_text import parse_toml
from nccl_launch.files.writing import check_output, write_output
from nccl_launch.findings import Finding, Refused, said_of
from nccl_launch.kinds import KINDS, command_of
from nccl_launch.migrate.secrets import (
    SECRETS_MODE,
    SecretsFile,
    env_file_name,
    moved_credentials,
    secret_variables,
    secrets_file,
    secrets_text,
)
from nccl_launch.migrate.server_table import server_table
from nccl_launch.nccl import catalog, others, rules
from nccl_launch.profile.load import LoadedProfile, validate_resolved
from nccl_launch.profile.markers import OWN_VARIABLES
from nccl_launch.profile.model import PROFILE_SCHEMA, Profile
from nccl_launch.profile.new import check_name
from nccl_launch.profile.plan import ProfilePlan, build_plan
from nccl_launch.secrets.masking import credential_values, mask_argv
from nccl_launch.secrets.values import secrets_of, unmasked_references
from nccl_launch.serving import references


@dataclass
class StartCommand:
    """What a start script or a process amounts to: the server's env, argv and directory."""

    env: dict[str, str]
    argv: list[str]
    cwd: str | None = None
    lines: dict[str, str] = field(default_factory=dict)  # where each was set: "a.sh line 2"
    notes: list[Finding] = field(default_factory=list)
    origin: str = ""  # where every variable came from, for one without a line ("pid 42")
    at: str = ""  # where the server's command is: "line 9", "a.sh line 2"
    # `argv` as `[server] args` writes it (`${NAME}` for a variable of an env file, the rest
    # `references.literal`); empty: each word as it is.
    words: list[str] = field(default_factory=list)
    # Each variable of `env` and `words` that a sourced file set last: that file, the value.
    sourced: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The file each `${NAME}` of `words` that `$(cat FILE)` read holds its value in.
    secret_files: dict[str, str] = field(default_factory=dict)
    # Whether its words may hold secrets no rule knows (a process whose profile is gone):
    # the profile is then written readable by its owner only.
    private: bool = False

    def where(self, key: str) -> str:
        """Where `key` was set, as a comment in the profile says it."""
        return self.lines.get(key) or self.origin


def _stored(read: rules.Reading) -> str:
    """What a profile keeps of a value NCCL reads otherwise, and why."""
    if not read.changed:
        return read.hint or ""
    kept = "not stored" if read.stored is None else f"stored {read.stored}"
    return f"{read.note}; {kept}" + (f" ({read.hint})" if read.hint else "")


@dataclass(frozen=True)
class BuiltProfile:
    """A start command's profile: its data, validated, and its plan; a comment for each
    variable saying where it came from; the notes on what was read differently or left out."""

    data: dict[str, Any]
    profile: Profile
    plan: ProfilePlan
    comments: dict[str, str]
    notes: list[Finding]


def build_profile(
    start: StartCommand, name: str, source: str, how: str, env_files: list[str] | None = None
) -> BuiltProfile:
    """The profile of a start command (naming `env_files`), with the start command's notes and
    its own; NCCL values are checked with NCCL's grammar first, so that an error names the
    script's line."""
    problems: list[Finding] = []  # a name or a value read from a process or a script
    nccl, env, comments = {}, {}, {}
    notes = list(start.notes)
    not_nccl: list[str] = []  # someone else's NCCL_* names: no drift, no part of a profile
    for key, value in start.env.items():
        line = start.lines.get(key, "")
        key_at = f"{line}: {key}" if line else key
        comments[key] = start.where(key)
        if key in OWN_VARIABLES:
            continue
        if not key.startswith(catalog.PREFIX):
            env[key] = value
        elif (other := others.what_is(key, value)) is not None:
            not_nccl.append(f"{key} ({other})")
        elif catalog.lookup(key) is None:
            message = catalog.unknown_name_message(key)
            problems.append(Finding("unknown-nccl-variable", line, message, file=source))
        else:
            read = rules.reading(key, value)
            try:
                written = read.toml()
            except ValueError as error:
                said = (
                    f"{value!r} ({read.note}): " if read.changed and read.stored is not None else ""
                )
                problems.append(Finding("invalid-value", key_at, f"{said}{error}", file=source))
                continue
            if written is not None:
                nccl[key.removeprefix(catalog.PREFIX)] = written
            if read.changed or read.hint:
                notes.append(
                    Finding("nccl-reading", f"{key_at}={value}", _stored(read), severity="warning")
                )
            if read.changed and comments[key]:
                comments[key] += f": {json.dumps(value)} ({read.note})"
    if not_nccl:
        message = f"left out what NCCL does not read: {', '.join(not_nccl)}"
        notes.append(Finding("not-nccl", "", message, severity="warning"))
    if problems:
        raise Refused(problems)
    data: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "name": name,
        "version": 1,
        "description": f"{how} from {source}",
    }
    data |= {"env_files": env_files} if env_files else {}
    data |= {"secret_files": start.secret_files} if start.secret_files else {}
    data |= {"nccl": nccl} if nccl else {}
    data |= {"env": env} if env else {}
    try:
        server, server_notes = server_table(start.argv, start.words or None)
    except Refused as refused:  # `$MODEL_DIR is not set`: in which script, on which line
        raise said_of(f"{source}: {start.at}" if start.at else source, refused) from None
    notes += server_notes
    if server is not None:
        data["server"] = server | ({"cwd": start.cwd} if start.cwd else {})
    elif start.argv:
        # Kept in the profile's provenance, which is shown, diffed and committed.
        shown = " ".join(mask_argv(start.words or start.argv))  # a secret file's as `${NAME}`
        kinds = " or ".join(kind.title for kind in KINDS)
        message = f"not an {kinds} command, run it with: -- {shown}"
        notes.append(Finding("no-server-kind", "", message, severity="warning"))
    said = "; ".join(note.text() for note in notes)
    data["provenance"] = {"source": source} | ({"notes": said} if notes else {})
    profile = validate_resolved(source, data)
    return BuiltProfile(data, profile, build_plan(profile), comments, notes)


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
    if parse_toml(text) != data:  # a bug here must not write a profile that says otherwise
        raise RuntimeError("the profile written with comments does not read back as built")
    return text


class _Unnamed(Exception):
    """A file the script sourced that the profile does not name in `env_files`, and why (None:
    no word of `[server] args` refers to it)."""

    def __init__(self, file: str, why: str | None) -> None:
        super().__init__(file)
        self.file, self.why = file, why


@dataclass(frozen=True)
class _Secrets:
    """Where secrets go: `--secrets-file`, unless `--secrets-in-profile`; the `script` read."""

    to: Path | None
    in_profile: bool
    script: Path | None


def _env_file_words(
    start: StartCommand, unnamed: Mapping[str, str | None], notes: list[Finding]
) -> tuple[list[str], dict[str, dict[str, str]]]:
    """`start`'s words as `[server] args` write them, a variable a sourced file set referring
    to it unless that file is `unnamed`, or it fills a credential under a name masking shows
    (noted in `notes`: its value would be printed wherever the server's env is); and what
    each file referred to gives the server's env. _Unnamed for a file that reads as no env
    file, or gives a variable another value."""
    words = list(start.words) or [references.literal(word) for word in start.argv]
    files: dict[str, dict[str, str]] = {}
    credentials = credential_values(start.argv)
    exposed = unmasked_references(words)
    for index, word in enumerate(words):
        names = [each for each in references.names([word]) if each not in start.secret_files]
        origins = sorted({start.sourced[each][0] for each in names})
        shown = [each for each in names if each in exposed] if index in credentials else []
        if shown:
            message = f"written as its value, since masking shows a variable named {shown[0]} "
            message += "(a name ending in KEY, TOKEN, SECRET or PASSWORD is masked)"
            where = f"{credentials[index][0]} {word}"
            notes.append(Finding("credential-shown", where, message, severity="warning"))
        if shown or unnamed.keys() & origins:
            words[index] = references.literal(start.argv[index])
            continue
        for file in origins:
            try:
                files[file] = {each.key: each.value for each in env_file_lines(Path(file))}
            except Refused as error:
                raise _Unnamed(file, _why(error)) from None
        for each in names:
            file, value = start.sourced[each]
            if files[file].get(each) != value:
                raise _Unnamed(file, f"read as an env file, it gives {each} another value")
    return words, files


def _why(refused: Refused) -> str:
    """Why a file is no env file of the profile: its problems, on one line."""
    return "; ".join(finding.line() for finding in refused.findings)


def _check_env_files(
    built: BuiltProfile, path: Path, start: StartCommand, files: list[str]
) -> None:
    """_Unnamed for a sourced file `built` (to be written to `path`) names that no word of its
    args refers to, or that is no env file of it by `profile_env_file_lines`' rules."""
    loaded = LoadedProfile(built.profile, built.plan, path, (path,), {})
    used = references.names(built.data.get("server", {}).get("args", []))
    for file in files:
        if not any(start.sourced[each][0] == file for each in used if each in start.sourced):
            raise _Unnamed(file, None)  # its variables only in fields, which hold values
        try:
            profile_env_file_lines(loaded, Path(file))
        except Refused as error:
            raise _Unnamed(file, _why(error)) from None


def _profile(
    start: StartCommand, name: str, source: str, how: str, path: Path, secrets: _Secrets,
    unnamed: Mapping[str, str | None],
) -> tuple[BuiltProfile, SecretsFile | None, bool]:  # fmt: skip
    """The profile of `start`, to be written to `path`, naming in `env_files` the sourced
    files its args refer to (`_env_file_words`) and the env file its secrets go to
    (`secrets`); that file, and whether the profile still holds a secret."""
    notes = list(start.notes)
    words, files = _env_file_words(start, unnamed, notes)
    notes += [
        Finding(
            "env-file-unnamed",
            file,
            f"not named in env_files ({why}): its variables in [server] args are written as "
            "their values",
            severity="warning",
        )
        for file, why in unnamed.items()
        if why is not None
    ]
    given = {key: value for declared in files.values() for key, value in declared.items()}
    for file, declared in files.items():
        unexported = sorted(declared.keys() - start.env.keys())
        if unexported:
            message = f"{file} sets {', '.join(unexported)} without export; named in "
            message += "env_files, it gives them to the server's env too"
            notes.append(Finding("unexported-in-env-file", "", message, severity="warning"))
    env = {key: value for key, value in start.env.items() if given.get(key) != value}
    found = command_of(start.argv)
    kind = found[0] if found is not None else None
    flags = credential_values(start.argv)
    keys = {value for _, value in flags.values()}
    values = {} if secrets.in_profile else secret_variables(env, keys)
    env = {key: value for key, value in env.items() if key not in values}
    moved = {}
    if not secrets.in_profile and kind is not None:
        moved = moved_credentials(start.argv, words, values, env.keys() | given.keys(), kind)
    kept = secrets_file(path, secrets.to, values, secrets.script, [Path(file) for file in files])
    notes += [
        Finding(
            "credential-moved",
            "",
            f"{flags[index][0]}'s value is kept in {kept.path} as {variable}: [server] args "
            f"say ${{{variable}}}",
            severity="warning",
        )
        for index, variable in moved.items()
        if kept is not None
    ]
    env_files = ([kept.named] if kept else []) + [env_file_name(Path(file), path) for file in files]
    # A relative file is read from where the script runs, as a sourced one: named from the
    # profile's folder, as `run` reads it.
    secret_files = {
        key: env_file_name(Path(file), path) for key, file in start.secret_files.items()
    }
    moved_start = dataclasses.replace(
        start, env=env, words=words, notes=notes, secret_files=secret_files
    )
    built = build_profile(moved_start, name, source, how, env_files)
    _check_env_files(built, path, start, list(files))
    return built, kept, start.private or bool(secrets_of(words, env))


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
) -> tuple[Path, ProfilePlan, list[Finding], SecretsFile | None]:
    """Write the profile of `start` to `output` (default `profiles/NAME.toml`) atomically,
    never replacing a file without `force`; where it went, its plan, the notes to tell and
    where its secrets went. Secret variables, and credential flags' values (as `${NAME}`),
    go to a 0600 env file the profile names in `env_files` (`secrets_to`, else beside it
    with the suffix `.env`), unless `secrets_in_profile`; never the profile itself, nor the
    `script` read. A sourced file whose variables the args use is named itself, where it can
    be an env file of the profile. A profile still holding a secret is readable by its owner
    only. The name is held to `new`'s rule."""
    check_name(name, "--name")
    path = output or Path("profiles") / f"{name}.toml"
    unnamed: dict[str, str | None] = {}
    secrets = _Secrets(secrets_to, secrets_in_profile, script)
    while True:  # each turn leaves one more file unnamed: as many turns as sourced files
        try:
            built, kept, secret = _profile(start, name, source, how, path, secrets, unnamed)
            break
        except _Unnamed as refused:
            unnamed[refused.file] = refused.why
    text = profile_text(built.data, built.comments)
    mode = 0o600 if secret else None
    if kept is not None:
        for file in (kept.path, path):
            check_output(file, replace=force)
        secret_text = secrets_text(kept, path, source)
        write_output(kept.path, secret_text, replace=force, mode=SECRETS_MODE)
    write_output(path, text, replace=force, mode=mode)
    return path, built.plan, built.notes, kept
