"""`convert`: follow a start script, or one raw line, up to its SGLang command, taking only
the code that runs: function bodies and here-docs are skipped, `&&` and `||` follow the
outcome of what came before, branches and loops are refused, and `exit` ends the script."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

from nccl_launch.errors import UsageError
from nccl_launch.files import MAX_BYTES, open_stream
from nccl_launch.migrate import shell
from nccl_launch.migrate.arithmetic import Lookup, arithmetic
from nccl_launch.migrate.server_table import UNSET, known, server_split
from nccl_launch.migrate.start import StartCommand

_WRAPPERS = ("exec", "nohup", "command", "time")
# Commands a start script runs around the server; they change nothing the server receives.
_HARMLESS = frozenset({
    "set", "echo", "printf", "mkdir", "sleep", "ulimit", "trap", "wait", "true", "date",
    "nvidia-smi", "tee", "cat", "umask", "shopt", "readonly",
})  # fmt: skip
_BY_HAND = "convert the branch that runs, or write the profile by hand"
_VARIABLE = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))"
)


def expand(
    word: shell.Word,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None = None,
    split: bool = False,
) -> str:
    """The word's value, `$NAME`, `${NAME}`, `${NAME:-default}` and `$((...))` replaced.

    A variable `lookup` does not know becomes `unset(name)`, or an error without one. With
    `split` (a command's word), an unquoted value holding blanks is refused: bash would split
    it into several arguments.
    """
    out = []
    for text, kind in word.segments:
        if kind == shell.LITERAL:
            out.append(text)
        elif kind == shell.COMMAND:
            raise shell.ShellError(f"line {line}: command substitution is not supported")
        elif kind == shell.ARITHMETIC:
            out.append(str(arithmetic(text, lookup, line)))
        else:
            out.append(_expand_text(text, kind == shell.PLAIN and split, lookup, line, unset))
    return "".join(out)


def _expand_text(
    text: str, split: bool, lookup: Lookup, line: int, unset: Callable[[str], str] | None
) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        found = lookup(name)
        if (match.group(2) == ":-" and not found) or (match.group(2) == "-" and found is None):
            found = match.group(3)
        if found is None:
            if unset is None:
                raise shell.ShellError(f"line {line}: ${name} is not set in the script")
            return unset(name)
        if split and re.search(r"[ \t\n]", found):
            raise shell.ShellError(
                f"line {line}: ${name} holds blanks and is not quoted, so bash splits it into "
                f'several arguments; quote it ("${name}") or write the words out'
            )
        return found

    expanded = _VARIABLE.sub(value, text)
    if "$" in _VARIABLE.sub("", text):
        raise shell.ShellError(f"line {line}: only $NAME, ${{NAME}} and ${{NAME:-default}} expand")
    return expanded


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
        self.functions: dict[str, int] = {}
        # Whether the last command succeeded, as far as a reader can know (None: it cannot).
        self.succeeded: bool | None = True
        self.done = False  # after `exit`, or `exec` of a command
        self.skipping = 0  # the depth of a group or subshell that does not run

    def lookup(self, name: str) -> str | None:
        return self.variables.get(name, self.environ.get(name))

    def expand(self, word: shell.Word, line: int, split: bool = False) -> str:
        return expand(word, self.lookup, line, unset=lambda name: UNSET + name, split=split)

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

    def follow(self, command: shell.Command) -> None:
        """One command, if it runs: `a && b` runs b only after a succeeded, `a || b` only
        after a failed; when the reader cannot know, it refuses."""
        line, keyword = command.line, command.keyword
        if self.skipping:  # inside a `{ ... }` or `( ... )` that does not run
            self.skipping += {"{": 1, "(": 1, "}": -1, ")": -1}.get(keyword, 0)
            return
        if command.piped:
            return  # output plumbing; the pipeline's outcome is its first command's here
        if command.joiner in ("&&", "||"):
            if self.succeeded is None:
                raise UsageError(
                    f"line {line}: whether this runs depends on how the command before "
                    f"`{command.joiner}` ends; {_BY_HAND}"
                )
            if self.succeeded != (command.joiner == "&&"):
                # skipped; the list's outcome stays that of the command before
                self.skipping = 1 if keyword in ("{", "(") else 0
                if keyword in ("", "{", "("):
                    return
        if keyword in ("{", "}"):
            return  # a group runs in this shell: its commands are followed as they come
        if keyword:
            what = "a subshell `( ... )`" if keyword == "(" else f"`{keyword}`"
            raise UsageError(f"line {line}: {what} is not followed; {_BY_HAND}")
        if command.function:
            self.functions[command.function] = line
            self.succeeded = True
            return
        self.succeeded = self.command(command)

    def command(self, command: shell.Command) -> bool | None:
        """Follow one simple command that runs; whether it succeeded, None when unknown."""
        words, line = list(command.words), command.line
        name = words[0].bare()
        if name in self.functions:
            raise UsageError(
                f"line {line}: `{name}` calls the function defined on line "
                f"{self.functions[name]}, which is not followed; put what it does in the "
                "script, or write the profile by hand"
            )
        if name == "exit":
            self.done = True
            return None
        if name == "export":
            for word in words[1:]:
                if word.assignment() is not None:
                    self.assign(word, line, export=True)
                elif word.literal() in self.variables:
                    self.exported.add(word.literal())
            return True
        assignments = 0
        while assignments < len(words) and words[assignments].assignment() is not None:
            assignments += 1
        if assignments == len(words):
            for word in words:
                self.assign(word, line, export=False)
            return True
        prefix: dict[str, str] = {}
        for word in words[:assignments]:
            variable, value = word.assignment()  # type: ignore[misc]
            prefix[variable] = known(self.expand(value, line))
            self.lines[variable] = line
        words = words[assignments:]
        if words[0].literal() in _HARMLESS:  # `echo "started $!"` needs no expansion
            options = [word.literal() for word in words[1:]]
            if words[0].literal() == "set" and ("-a" in options or "+a" in options):
                self.allexport = "-a" in options
            return True
        if words[0].literal() == "false":
            return False
        argv = [self.expand(word, line, split=True) for word in words]
        return self.run(argv, prefix, line, command.background)

    def run(
        self, argv: list[str], prefix: dict[str, str], line: int, background: bool
    ) -> bool | None:
        start, replaces = 0, False
        while start < len(argv) and argv[start] in (*_WRAPPERS, "env"):
            replaces = replaces or argv[start] == "exec"
            start += 1
            if argv[start - 1] != "env":
                continue
            while start < len(argv) and "=" in argv[start] and not argv[start].startswith("-"):
                name, _, value = argv[start].partition("=")
                prefix[name] = known(value)
                self.lines[name] = line
                start += 1
            if start < len(argv) and argv[start].startswith("-"):
                raise UsageError(f"line {line}: env {argv[start]} is not supported")
        argv = argv[start:]
        if not argv:
            return True  # `exec > log 2>&1` only redirects the script's own output
        self.done = replaces  # `exec` replaces the shell: nothing after it runs
        if server_split(argv) is not None:
            if self.found is not None:
                raise UsageError(f"line {line}: a second server command (first on {self.found[0]})")
            env = {name: self.variables[name] for name in sorted(self.exported)}
            self.found = (line, env | prefix, argv)
            return True if background else None
        if background:
            self.notes.append(f"line {line}: ignored `{argv[0]} &` (it runs in a subshell)")
            return True
        return self.builtin(argv, line)

    def builtin(self, argv: list[str], line: int) -> bool | None:
        if argv[0] == "cd":
            target = argv[1] if len(argv) > 1 else self.environ.get("HOME", "/")
            self.cwd = os.path.normpath(PurePosixPath(self.cwd or "") / known(target))
            return True
        if argv[0] == "unset":
            for name in argv[1:]:
                self.variables.pop(name, None)
                self.exported.discard(name)
            return True
        if argv[0] in ("source", "."):
            self.notes.append(f"line {line}: {' '.join(argv)} is not followed; add what it sets")
        else:
            self.notes.append(f"line {line}: ignored `{argv[0]}`")
        return None


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
    if "\x00" in text:  # bash will not run such a file either
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise UsageError(f"line {line}: a NUL byte; a start script is text")
    script = _Script(environ)
    try:
        for command in shell.parse(text):
            script.follow(command)
            if script.done:
                break
    except shell.ShellError as error:
        raise UsageError(str(error)) from None
    if script.found is None:
        raise UsageError("no `python -m sglang.launch_server` (or `sglang serve`) command found")
    _, env, argv = script.found
    lines = {name: script.lines.get(name, 0) for name in env}
    return StartCommand(env=env, argv=argv, cwd=script.cwd, lines=lines, notes=script.notes)
