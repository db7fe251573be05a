"""`convert`: follow a start script, or one raw line, up to its SGLang command."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from nccl_launch.errors import UsageError
from nccl_launch.files import MAX_BYTES, open_stream
from nccl_launch.migrate import shell
from nccl_launch.migrate.server_table import UNSET, known, server_split
from nccl_launch.migrate.start import StartCommand

_WRAPPERS = ("exec", "nohup", "command", "time")
# Commands a start script runs around the server; they change nothing the server receives.
_HARMLESS = frozenset({
    "set", "echo", "printf", "mkdir", "sleep", "ulimit", "trap", "wait", "true", "date",
    "nvidia-smi", "tee", "cat", "umask", "shopt", "readonly",
})  # fmt: skip
# Variables worth keeping from a running server's environment besides NCCL_*.


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
        return word.expand(self.lookup, line, unset=lambda name: UNSET + name)

    def assign(self, word: shell.Word, line: int, export: bool) -> None:
        name, value = word.assignment() or ("", word)
        if _references(value, name):  # PATH=/opt/bin:$PATH depends on whoever runs it
            self.notes.append(f"line {line}: {name} extends the caller's value; not converted")
            return
        try:
            self.variables[name] = known(self.expand(value, line))
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
            prefix[name] = known(self.expand(value, line))
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
                prefix[name] = known(value)
                self.lines[name] = line
            if argv and argv[0].startswith("-"):
                raise UsageError(f"line {line}: env {argv[0]} is not supported")
        if not argv:
            return
        if server_split(argv) is not None:
            if self.found is not None:
                raise UsageError(f"line {line}: a second server command (first on {self.found[0]})")
            env = {name: self.variables[name] for name in sorted(self.exported)}
            self.found = (line, env | prefix, argv)
        elif argv[0] == "cd":
            target = argv[1] if len(argv) > 1 else self.environ.get("HOME", "/")
            self.cwd = os.path.normpath(PurePosixPath(self.cwd or "") / known(target))
        elif argv[0] == "unset":
            for name in argv[1:]:
                self.variables.pop(name, None)
                self.exported.discard(name)
        elif argv[0] in ("source", "."):
            self.notes.append(f"line {line}: {' '.join(argv)} is not followed; add what it sets")
        else:
            self.notes.append(f"line {line}: ignored `{argv[0]}`")


def read_script_file(path: str) -> str:
    """The text of a start script (a regular file, or `-` for stdin), at most 1 MiB of it."""
    with open_stream(path, "script") as stream:
        text = stream.read(MAX_BYTES + 1)
    if len(text) > MAX_BYTES:
        where = "stdin" if path == "-" else f"script {path}"
        raise UsageError(f"{where}: longer than {MAX_BYTES} characters; this is not a start script")
    return text


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
