"""`convert` and `capture`: turn a start script or a running server into a profile."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import psutil
import tomli_w
from pydantic import ValidationError

from nccl_launch import catalog, grammar, sglang, shell
from nccl_launch.errors import HostError, ProfileError, UsageError
from nccl_launch.files import atomic_write
from nccl_launch.loader import validation_problems
from nccl_launch.profile import OWN_VARIABLES, Profile

_PYTHON = re.compile(r"python[0-9.]*")
_WRAPPERS = ("exec", "nohup", "command", "time")
# Commands a start script runs around the server; they change nothing the server receives.
_HARMLESS = frozenset({
    "set", "echo", "printf", "mkdir", "sleep", "ulimit", "trap", "wait", "true", "date",
    "nvidia-smi", "tee", "cat", "umask", "shopt", "readonly",
})  # fmt: skip
# Variables worth keeping from a running server's environment besides NCCL_*.
CAPTURED_PREFIXES = (
    "CUDA_", "SGLANG_", "HF_", "TORCH_", "PYTORCH_", "TRANSFORMERS_", "FLASHINFER_",
    "NVSHMEM_", "UCX_", "TOKENIZERS_", "OMP_NUM_THREADS",
)  # fmt: skip
_UNSET = "\x00"  # stands for a variable the script reads from its caller


@dataclass
class StartCommand:
    """What a start script or a process amounts to: the server's env, argv and directory."""

    env: dict[str, str]
    argv: list[str]
    cwd: str | None = None
    lines: dict[str, int] = field(default_factory=dict)  # where each variable was set
    notes: list[str] = field(default_factory=list)


def _server_split(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """(python, entrypoint, flags) of an SGLang command line, or None for anything else."""
    if not argv:
        return None
    name = PurePosixPath(argv[0]).name
    if name == "sglang" and argv[1:2] == ["serve"]:
        return argv[0], "serve", argv[2:]
    if not _PYTHON.fullmatch(name) or "-m" not in argv:
        return None
    module = argv.index("-m") + 1
    if argv[module : module + 1] != ["sglang.launch_server"]:
        return None
    return argv[0], " ".join(argv[1 : module + 1]), argv[module + 1 :]


def _known(word: str) -> str:
    """A word with every variable resolved; the caller-provided ones are an error here."""
    if _UNSET in word:
        name = re.split(r"[^A-Za-z0-9_]", word.split(_UNSET, 1)[1])[0]
        raise UsageError(f"${name} is not set in the script or this environment")
    return word


def _number(flag: str, value: str) -> int:
    if not value.isdigit():
        raise UsageError(f"{flag} {value!r} is not an integer")
    return int(value)


_INTEGERS = {
    "tp_size", "pp_size", "port", "nnodes", "node_rank",
    "speculative.num_steps", "speculative.eagle_topk", "speculative.num_draft_tokens",
}  # fmt: skip


def server_table(argv: list[str], notes: list[str]) -> dict[str, Any] | None:
    """The `[server]` table reproducing an SGLang argv; None when it is not one."""
    split = _server_split(argv)
    if split is None:
        return None
    python, entrypoint, flags = split
    table: dict[str, Any] = {"python": python, "entrypoint": entrypoint}
    speculative: dict[str, Any] = {}
    args: list[str] = []
    index = 0
    while index < len(flags):
        option = flags[index]
        name, equals, value = option.partition("=")
        takes_next = not equals and index + 1 < len(flags) and not flags[index + 1].startswith("--")
        if takes_next:
            value = flags[index + 1]
        flag = sglang.flag_for(option) if option.startswith("--") else None
        consumed = 2 if takes_next else 1
        if flag is None and name.startswith(sglang.SPECULATIVE_PREFIX):
            key = name.removeprefix(sglang.SPECULATIVE_PREFIX).replace("-", "_")
            speculative[key] = _known(value) if (equals or takes_next) else True
        elif flag is None:
            args.append(_known(option))
            consumed = 1
        elif _UNSET in value and flag.field in ("node_rank", "dist_init_addr"):
            notes.append(f"{name} comes from the caller's environment; left to run time")
        else:
            value = _known(value)
            parsed: Any = _number(name, value) if flag.field in _INTEGERS else value
            section, _, key = flag.field.rpartition(".")
            (speculative if section else table)[key] = parsed
        index += consumed
    if speculative:
        table["speculative"] = speculative
    return table | {"args": args} if args else table


def _references(word: shell.Word, name: str) -> bool:
    return re.search(rf"\$\{{?{name}\b", word.literal()) is not None


class _Script:
    """Follows the shell state that reaches the server: exported variables and the directory."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.variables: dict[str, str] = {}
        self.exported: set[str] = set()
        self.lines: dict[str, int] = {}
        self.allexport = False
        self.cwd: str | None = None
        self.notes: list[str] = []
        self.found: tuple[int, dict[str, str], list[str]] | None = None

    def lookup(self, name: str) -> str | None:
        return self.variables.get(name, self.environ.get(name))

    def expand(self, word: shell.Word, line: int) -> str:
        return word.expand(self.lookup, line, unset=lambda name: _UNSET + name)

    def assign(self, word: shell.Word, line: int, export: bool) -> None:
        name, value = word.assignment() or ("", word)
        if _references(value, name):  # PATH=/opt/bin:$PATH depends on whoever runs it
            self.notes.append(f"line {line}: {name} extends the caller's value; not converted")
            return
        try:
            self.variables[name] = _known(self.expand(value, line))
        except UsageError as error:
            raise UsageError(f"line {line}: {error}") from None
        self.lines[name] = line
        if export or self.allexport:
            self.exported.add(name)

    def command(self, command: shell.Command) -> None:
        words, line = list(command.words), command.line
        if words[0].literal() == "export" and words[0].segments[0][1]:
            for word in words[1:]:
                if word.assignment() is not None:
                    self.assign(word, line, export=True)
                elif word.literal() in self.variables:
                    self.exported.add(word.literal())
            return
        if all(word.assignment() is not None for word in words):
            for word in words:
                self.assign(word, line, export=False)
            return
        prefix: dict[str, str] = {}
        while words[0].assignment() is not None:
            name, value = words.pop(0).assignment()  # type: ignore[misc]
            prefix[name] = _known(self.expand(value, line))
            self.lines[name] = line
        if command.piped:
            return
        if words[0].literal() in _HARMLESS:  # `echo "started $!"` needs no expansion
            options = [word.literal() for word in words[1:]]
            if words[0].literal() == "set" and ("-a" in options or "+a" in options):
                self.allexport = "-a" in options
            return
        self.run([self.expand(word, line) for word in words], prefix, line)

    def run(self, argv: list[str], prefix: dict[str, str], line: int) -> None:
        while argv and argv[0] in (*_WRAPPERS, "env"):
            if argv.pop(0) != "env":
                continue
            while argv and "=" in argv[0] and not argv[0].startswith("-"):
                name, _, value = argv.pop(0).partition("=")
                prefix[name] = _known(value)
                self.lines[name] = line
            if argv and argv[0].startswith("-"):
                raise UsageError(f"line {line}: env {argv[0]} is not supported")
        if not argv:
            return
        if _server_split(argv) is not None:
            if self.found is not None:
                raise UsageError(f"line {line}: a second server command (first on {self.found[0]})")
            env = {name: self.variables[name] for name in sorted(self.exported)}
            self.found = (line, env | prefix, argv)
        elif argv[0] == "cd":
            target = argv[1] if len(argv) > 1 else self.environ.get("HOME", "/")
            self.cwd = os.path.normpath(PurePosixPath(self.cwd or "") / _known(target))
        elif argv[0] == "unset":
            for name in argv[1:]:
                self.variables.pop(name, None)
                self.exported.discard(name)
        elif argv[0] in ("source", "."):
            self.notes.append(f"line {line}: {' '.join(argv)} is not followed; add what it sets")
        else:
            self.notes.append(f"line {line}: ignored `{argv[0]}`")


def read_script(text: str, environ: Mapping[str, str]) -> StartCommand:
    """Follow a start script (or one raw line) up to its SGLang command."""
    script = _Script(environ)
    try:
        for command in shell.parse(text):
            script.command(command)
    except shell.ShellError as error:
        raise UsageError(str(error)) from None
    if script.found is None:
        raise UsageError("no `python -m sglang.launch_server` (or `sglang serve`) command found")
    _, env, argv = script.found
    lines = {name: script.lines.get(name, 0) for name in env}
    return StartCommand(env=env, argv=argv, cwd=script.cwd, lines=lines, notes=script.notes)


def read_process(pid: int) -> StartCommand:
    """A running process's own environment, command line and directory."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            environ, argv, cwd = process.environ(), process.cmdline(), process.cwd()
    except psutil.NoSuchProcess:
        raise HostError(f"no process with pid {pid}") from None
    except psutil.AccessDenied:
        raise HostError(
            f"permission denied reading process {pid}; run as its user or root"
        ) from None
    if argv and "/" not in argv[0]:
        argv[0] = shutil.which(argv[0], path=environ.get("PATH")) or argv[0]
    wanted = (catalog.PREFIX, *CAPTURED_PREFIXES)
    keep = {k: v for k, v in environ.items() if k.startswith(wanted) and k not in OWN_VARIABLES}
    notes = []
    if "NCCL_LAUNCH_PROFILE" in environ:
        notes.append(f"the process was started by nccl-launch as {environ['NCCL_LAUNCH_PROFILE']}")
    return StartCommand(env=keep, argv=argv, cwd=cwd, notes=notes)


def build_profile(start: StartCommand, name: str, source: str, how: str) -> dict[str, Any]:
    """The profile data for a start command; NCCL values checked with NCCL's grammar first."""
    problems, nccl, env = [], {}, {}
    for key, value in start.env.items():
        where = f"line {start.lines[key]}: " if start.lines.get(key) else ""
        if key in OWN_VARIABLES:
            continue
        if not key.startswith(catalog.PREFIX):
            env[key] = value
        elif catalog.lookup(key) is None:
            problems.append(f"{where}{catalog.unknown_name_message(key)}")
        else:
            try:
                grammar.canonical(key, value)
                nccl[key.removeprefix(catalog.PREFIX)] = value
            except ValueError as error:
                problems.append(f"{where}{key}: {error}")
    if problems:
        raise ProfileError([f"{source}: {problem}" for problem in problems])
    notes = start.notes
    data: dict[str, Any] = {
        "schema": 1,
        "name": name,
        "version": 1,
        "description": f"{how} from {source}",
    }
    data |= {"nccl": nccl} if nccl else {}
    data |= {"env": env} if env else {}
    server = server_table(start.argv, notes)
    if server is not None:
        data["server"] = server | ({"cwd": start.cwd} if start.cwd else {})
    elif start.argv:
        notes.append(f"not an SGLang command, run it with: -- {' '.join(start.argv)}")
    data["provenance"] = {"source": source} | ({"notes": "; ".join(notes)} if notes else {})
    try:
        profile = Profile.model_validate(data)
    except ValidationError as error:
        raise ProfileError(validation_problems(source, error)) from None
    if profile.server is not None:
        found = sglang.server_problems(profile.server)
        if found:
            raise ProfileError([f"{source}: server.{key}: {message}" for key, message in found])
    return data


def write_profile(path: Path, data: dict[str, Any], force: bool) -> None:
    """Write atomically; without `force` an existing file is never replaced."""
    try:
        atomic_write(path, tomli_w.dumps(data), replace=force)
    except FileExistsError:
        raise UsageError(f"{path} exists; pass --force to replace it") from None
