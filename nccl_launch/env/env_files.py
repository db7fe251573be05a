"""Env files, strictly parsed dotenv: `--env-file`, layered over the calling environment, and
those a profile names (`env_files`), which declare their variables as the profile does."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from nccl_launch.env.merge import CALLING_ENV, EnvLayer
from nccl_launch.files.reading import read_text
from nccl_launch.findings import ARGS, Finding, Refused, empty_key, refuse, unset_reference
from nccl_launch.kinds import kind_of
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.profile.model import env_value
from nccl_launch.serving import references
from nccl_launch.serving.flags import empty_credentials

# A file of `secret_files` holds one key or token; a larger one is not such a file.
SECRET_LIMIT = 1 << 16
# An env file holds secrets, and a line that is not an assignment may be one pasted alone,
# or a key holding its value: a problem names the line by its number, never by its text.
_UNSHOWN = "(not shown: an env file holds secrets)"
_VALID = "valid: KEY=VALUE, export KEY=VALUE, a # comment or a blank line"
_EXPORT = re.compile(r"\s*export[^\S\r\n]")  # python-dotenv's `export KEY=VALUE`
# A line python-dotenv and systemd's EnvironmentFile= surely read alike: a value of plain
# characters, or in single or double quotes around no quote, backslash, `$` or backtick;
# blanks around `=` and at the end (both drop them), no comment after it.
_ALIKE = re.compile(
    r"\s*(?:export[ \t]+)?[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*"
    r"""(?:[A-Za-z0-9_@%+=:,./-]*|'[^'\\\n]*'|"[^"\\$`\n]*")[ \t]*\r?\n?"""
)


class Assignment(NamedTuple):
    """One `KEY=VALUE` of a dotenv file; `exported` when written `export KEY=VALUE`, a line
    systemd's EnvironmentFile= does not read as KEY (it takes `export KEY` for the name);
    `alike` when systemd surely reads the same value."""

    line: int
    key: str
    value: str
    exported: bool
    alike: bool


def _is_name(name: str) -> bool:
    """Whether `name` can be an environment variable's name: execve refuses '=' and NUL, and
    python-dotenv's quoted keys may hold line breaks and spaces, which no one means."""
    return (
        bool(name)
        and "=" not in name
        and name.isprintable()
        and not any(char.isspace() for char in name)
    )


def read_env_files(paths: Sequence[Path]) -> tuple[list[EnvLayer], list[Finding]]:
    """The `--env-file`s, each a layer of the lines python-dotenv parses, and a finding for
    every line it cannot and every file that cannot be read, of every file at once: the
    command line's to fix (exit 2). As root, a file others could have written is refused: it
    shapes the server's env."""
    layers, found = [], []
    for path in paths:
        assignments, problems = env_file_read(path)
        layers.append(EnvLayer(str(path), {each.key: each.value for each in assignments}))
        found += problems
    return layers, found


def env_file_lines(path: Path, trusted: bool = True) -> list[Assignment]:
    """Each assignment of a dotenv file, in order; the last one of a key is the one that
    counts. Refused with every line that is no assignment (`env_file_read`)."""
    assignments, found = env_file_read(path, trusted)
    refuse(found)
    return assignments


def env_file_read(path: Path, trusted: bool = True) -> tuple[list[Assignment], list[Finding]]:
    """Each assignment of a dotenv file, in order, and a finding (`FILE:LINE`) for each line
    that is none, or for the file that cannot be read. As root, one others could have written
    is refused unless `trusted` is False: whoever only reads its values, and runs nothing with
    them, need not trust it."""
    try:
        text = read_text(path, "env file", trusted=trusted)
    except Refused as error:
        return [], [replace(each, code="env-file") for each in error.findings]
    assignments, found = [], []
    # Imported here: python-dotenv (and the traceback module it loads) only for --env-file.
    from dotenv.parser import parse_stream

    for binding in parse_stream(io.StringIO(text)):
        where = f"{path}:{binding.original.line}"
        if binding.error:
            found.append(Finding("env-file", where, f"not a KEY=VALUE line {_UNSHOWN}", _VALID))
        elif binding.key is None:
            continue
        elif not _is_name(binding.key):
            found.append(Finding("env-file", where, f"not a variable name {_UNSHOWN}", _VALID))
        elif binding.value is None:
            found.append(Finding("env-file", where, f"a name without =VALUE {_UNSHOWN}", _VALID))
        elif "\x00" in binding.value:
            message = f"{binding.key}: a NUL byte cannot be in a value"
            found.append(Finding("env-file", where, message))
        else:
            raw = binding.original.string
            exported, alike = _EXPORT.match(raw) is not None, _ALIKE.fullmatch(raw) is not None
            line = binding.original.line
            assignments.append(Assignment(line, binding.key, binding.value, exported, alike))
    return assignments, found


def _host_file(loaded: LoadedProfile, where: str, message: str) -> Finding:
    """A problem of a file of this host that the profile names (exit 3): the profile is valid
    on every host (`validate` reads no env file); the file belongs to this host, like a model
    path."""
    return Finding("host-file", where, message, cause="host", file=str(loaded.path))


def profile_env_file_lines(
    loaded: LoadedProfile, path: Path, trusted: bool = True
) -> list[Assignment]:
    """The assignments of one env file of `loaded.env_files`, refused with every problem of
    it (`profile_env_file_read`). `trusted` as for `env_file_read`."""
    assignments, found = profile_env_file_read(loaded, path, trusted)
    refuse(found)
    return assignments


def profile_env_file_read(
    loaded: LoadedProfile, path: Path, trusted: bool = True
) -> tuple[list[Assignment], list[Finding]]:
    """The assignments of one env file of `loaded.env_files`, read as `--env-file` is, each
    variable held to the rules of [env] and declared in one place only; and a finding of this
    host for every problem, naming the profile, the key and the file. `trusted` as for
    `env_file_read`."""
    assignments, problems = env_file_read(path, trusted)
    found = [
        dataclasses.replace(
            problem,
            where=f"env_files: {problem.where}" if problem.where else "env_files",
            cause="host",
            file=str(loaded.path),
        )
        for problem in problems
    ]
    for key, value in {each.key: each.value for each in assignments}.items():
        try:
            env_value(key, value)
        except ValueError as error:
            found.append(_host_file(loaded, "env_files", f"env file {path}: {key}: {error}"))
            continue
        if key in loaded.plan.env:
            message = f"env file {path}: {key}: the profile declares it too; keep it in one place"
            found.append(_host_file(loaded, "env_files", message))
    return assignments, found


def _secret_layer(
    loaded: LoadedProfile, name: str, path: Path, trusted: bool
) -> EnvLayer | Finding:
    try:
        value = read_text(path, "secret file", trusted=trusted, limit=SECRET_LIMIT)
    except Refused as error:
        return _host_file(loaded, "secret_files", f"{name}: {error.findings[0].text()}")
    if "\x00" in value or name in loaded.plan.env:
        why = "holds a NUL byte" if "\x00" in value else "the profile declares it too"
        return _host_file(loaded, "secret_files", f"{name}: {path}: {why}")
    values = {name: value.rstrip("\n")}
    return EnvLayer(str(path), values, exported_secret(loaded, name), secret=True)


def exported_secret(loaded: LoadedProfile, name: str) -> bool:
    """Whether the variable of a secret file reaches the server's environment, which every
    process of it inherits: unless the profile only fills a `${NAME}` of its [server] args
    with it, and its server's kind reads no variable of that name (`VLLM_API_KEY` is vLLM's)."""
    server = loaded.profile.server
    if server is None or name not in references.names(server.args):
        return True
    return name.startswith(kind_of(server).env_prefix)


def secret_layers(loaded: LoadedProfile, trusted: bool = True) -> list[EnvLayer]:
    """Each file of `loaded.secret_files` as a layer setting its one variable: the file's text
    less its trailing newlines, as `$(cat FILE)` reads it. Only a regular file of at most
    SECRET_LIMIT bytes of UTF-8, and as root one others could not have written unless
    `trusted` is False; refused with every problem, naming the profile, the key and the file."""
    read = [
        _secret_layer(loaded, name, path, trusted) for name, path in loaded.secret_files.items()
    ]
    refuse([each for each in read if isinstance(each, Finding)])
    return [each for each in read if isinstance(each, EnvLayer)]


def _read_files(loaded: LoadedProfile) -> tuple[list[EnvLayer], list[EnvLayer], list[Finding]]:
    """The layers of the profile's env files and of its secret files that read well, and
    every problem of the others."""
    layers, problems = [], []
    for path in loaded.env_files:
        assignments, found = profile_env_file_read(loaded, path)
        values = {each.key: each.value for each in assignments}
        layers += [] if found else [EnvLayer(str(path), values)]
        problems += found
    read = [_secret_layer(loaded, name, path, True) for name, path in loaded.secret_files.items()]
    problems += [each for each in read if isinstance(each, Finding)]
    return layers, [each for each in read if isinstance(each, EnvLayer)], problems


def _set_twice(
    loaded: LoadedProfile, layers: list[EnvLayer], secrets: list[EnvLayer]
) -> list[Finding]:
    """A variable of a secret file that an env file sets too."""
    found = []
    for layer in secrets:
        for name in layer.values:
            twice = [each.source for each in layers if name in each.values]
            if twice:
                message = f"{name}: {twice[0]} sets it too; keep it in one place"
                found.append(_host_file(loaded, "secret_files", message))
    return found


def profile_layer_findings(loaded: LoadedProfile) -> tuple[list[EnvLayer], list[Finding]]:
    """What the profile takes from files of this host, as layers: its env files, then its
    secret files, each variable set in one of them only; and every problem of every file, of
    this host (exit 3)."""
    layers, secrets, found = _read_files(loaded)
    return layers + secrets, found + _set_twice(loaded, layers, secrets)


def profile_layers(loaded: LoadedProfile, unread: list[Finding] | None = None) -> list[EnvLayer]:
    """The profile's layers (`profile_layer_findings`), refused with every problem at once;
    with `unread`, a file's problems are said there instead (a monitoring user's `check`, who
    may not read some), and the rest used."""
    if unread is None:
        layers, found = profile_layer_findings(loaded)
        refuse(found)
        return layers
    layers, secrets, found = _read_files(loaded)
    unread += found
    refuse(_set_twice(loaded, layers, secrets))
    return layers + secrets


def filled_args(
    loaded: LoadedProfile, layers: Sequence[EnvLayer], calling: Mapping[str, str]
) -> tuple[list[str], list[Finding]]:
    """The profile's `[server] args` with each `${NAME}` filled in: from its env files
    (`layers`, the last that sets it), else from the `calling` environment for a name its
    `[policy] environment_references` lists; and a finding for each name neither sets (left
    unfilled) and each that gives a credential flag an empty key: the profile is valid, this
    host lacks the value."""
    server = loaded.profile.server
    if server is None:
        return [], []
    kind, args = kind_of(server), server.args
    allowed = loaded.profile.policy.environment_references
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    found: list[Finding] = []
    files, where = [str(path) for path in loaded.env_files], str(loaded.path)
    for name in references.names(args):
        setting = [layer for layer in layers if name in layer.values]
        if setting:
            values[name], sources[name] = setting[-1].values[name], setting[-1].source
        elif name in allowed and name in calling:
            values[name], sources[name] = calling[name], CALLING_ENV
        else:
            found.append(unset_reference(name, ARGS, files, name in allowed).in_file(where))
            values[name] = f"${{{name}}}"  # kept as written: the launch is refused
    filled = [references.fill(word, values) for word in args]
    for index, option, valued in empty_credentials(
        filled, kind.credentials.reads_as_api_key, complete=False
    ):
        at = index + 1 if valued and "=" not in filled[index] else index
        empty = [name for name in references.names(args[at : at + 1]) if name in sources]
        if empty:
            subject, source = f"{option}'s ${{{empty[0]}}}", sources[empty[0]]
            found.append(empty_key(kind.title, subject, ARGS, source, host=True).in_file(where))
    return filled, found


def key_variable_findings(
    loaded: LoadedProfile, env: Mapping[str, str], sources: Mapping[str, str], argv: Sequence[str]
) -> list[Finding]:
    """Where the server reads its key from a variable when `argv` gives it no key flag (vLLM's
    VLLM_API_KEY), and the environment it gets (`env`, each value from `sources`) sets that
    variable empty: the server then takes no key, serving every request. The profile's to fix
    when it declares the variable empty, else this host's."""
    kind, name = loaded.profile.kind, loaded.profile.kind.credentials.api_key_env
    if loaded.profile.server is None or name is None or env.get(name) != "":  # unset, or a key
        return []
    if any(kind.credentials.reads_as_api_key(word.split("=", 1)[0]) for word in argv):
        return []
    host = name not in loaded.plan.env
    found = empty_key(kind.title, name, "", sources.get(name, ""), host)
    return [found.in_file(str(loaded.path))]
