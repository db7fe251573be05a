"""`convert`: follow a start script, or one raw line, up to its SGLang command, taking only
the code that runs: function bodies and here-docs are skipped, `&&` and `||` follow the
outcome of what came before, branches and loops are refused, `exit` ends the script, and a
sourced file is followed as part of it (a virtual environment's `activate` only moves PATH)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from nccl_launch.errors import UsageError
from nccl_launch.migrate import shell, sourced
from nccl_launch.migrate.expansion import DEFAULT_IFS, arguments, expand, references, refuse_braces
from nccl_launch.migrate.server_table import from_caller, known, server_split
from nccl_launch.migrate.start import StartCommand
from nccl_launch.nccl import catalog

_WRAPPERS = ("exec", "nohup", "command", "time")
# Commands a start script runs around the server; they change nothing the server receives.
_HARMLESS = frozenset({
    "set", "echo", "printf", "mkdir", "sleep", "ulimit", "trap", "wait", "true", "date",
    "nvidia-smi", "tee", "cat", "umask", "shopt",
})  # fmt: skip
# The declaration builtins and the options each takes that this reader follows.
_DECLARES = {"export": "fnp", "readonly": "p", "declare": "xrgp", "typeset": "xrgp", "local": ""}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Builtins that may set what reaches the server in ways this reader does not follow.
_UNFOLLOWED = frozenset({
    "source", ".", "eval", "builtin", "pushd", "popd", "read", "mapfile", "readarray", "let",
    "getopts", *_DECLARES,
})  # fmt: skip
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_BY_HAND = "convert the branch that runs, or write the profile by hand"
_SOURCE = ("source", ".")


class _Script:
    """Follows the shell state that reaches the server: exported variables and the directory."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.variables: dict[str, str] = {}
        self.exported: set[str] = set()  # names set or to be set that reach the server
        self.readonly: set[str] = set()
        self.removed: set[str] = set()  # unset here: the caller's value is gone too
        self.lines: dict[str, str] = {}  # where each variable was set: "line 3", "a.sh line 2"
        self.within: list[str] = []  # the sourced files being followed, outermost first
        self.returned = False  # `return` in a sourced file: the rest of it does not run
        self.path_first: list[str] = []  # folders the script puts before the caller's PATH
        self.allexport = False
        self.cwd: str | None = None
        self.notes: list[str] = []
        self.found: tuple[str, dict[str, str], list[str]] | None = None
        self.functions: dict[str, int] = {}
        # Whether the last command succeeded, as far as a reader can know (None: it cannot).
        self.succeeded: bool | None = True
        self.done = False  # after `exit`, or `exec` of a command
        self.skipping = 0  # the depth of a group or subshell that does not run

    def at(self, line: int) -> str:  # where `line` of the file being followed is
        return f"{self.within[-1]} line {line}" if self.within else f"line {line}"

    def lookup(self, name: str) -> str | None:
        found = self.variables.get(name, None if name in self.removed else self.environ.get(name))
        if name == "PATH" and name not in self.variables and self.path_first:
            return ":".join([*self.path_first, found or ""])  # after `PATH=/opt/bin:$PATH`
        return found

    def expand(self, word: shell.Word, line: int, assignment: bool = False) -> str:
        return expand(word, self.lookup, line, from_caller, assignment=assignment)

    def arguments(self, word: shell.Word, line: int) -> list[str]:
        """The arguments bash makes of a command's word, split at the script's IFS."""
        ifs = self.variables.get("IFS", DEFAULT_IFS)
        return arguments(word, self.lookup, line, from_caller, ifs)

    def assign(self, word: shell.Word, line: int, export: bool | None) -> None:
        """`NAME=value` or `NAME+=value` as bash sets it; `export` says whether it reaches the
        server, None leaves that as it was (exported under `set -a`)."""
        name, value, appends = word.assignment() or ("", word, False)
        self.writable(name, line)
        if (appends or references(value, name)) and name not in self.variables:
            if name in self.environ and not name.startswith(catalog.PREFIX):
                # PATH=/opt/bin:$PATH depends on whoever runs it, and stays theirs
                self.notes.append(
                    f"{self.at(line)}: {name} extends the caller's value; not converted"
                )
                if name == "PATH" and not appends:  # but it tells where the server's python is
                    self.path_first = (
                        sourced.folders_before(value, self.lookup, line) + self.path_first
                    )
                return
            if name in self.environ:
                raise UsageError(
                    f"line {line}: {name} extends the caller's value, which a profile cannot "
                    "hold; write the whole value"
                )
        try:
            text = known(self.expand(value, line, assignment=True))
        except UsageError as error:
            raise UsageError(f"line {line}: {error}") from None
        self.variables[name] = self.variables.get(name, "") + text if appends else text
        self.lines[name] = self.at(line)
        self.mark(name, export)

    def mark(self, name: str, export: bool | None) -> None:
        if export or (export is None and self.allexport):
            self.exported.add(name)
        elif export is False:
            self.exported.discard(name)

    def writable(self, name: str, line: int) -> None:
        if name in self.readonly:
            raise UsageError(
                f"line {line}: {name} is readonly since {self.lines.get(name)}: bash "
                "fails here and keeps that value; remove the line that does not count"
            )

    def declare(self, builtin: str, words: list[shell.Word], line: int) -> bool:
        """`export`, `readonly`, `declare`, `typeset` and `local`, with the options that change
        what reaches the server (`-x`, `+x`, `export -n`); whether it succeeded."""
        if builtin == "local":
            return False  # only function bodies may use it, and none is followed: bash fails
        on: set[str] = set()
        off: set[str] = set()
        while words and words[0].assignment() is None and len(words[0].literal()) > 1:
            option = words[0].literal()
            if option[0] not in "-+":
                break
            words = words[1:]
            if option == "--":
                break
            (on if option[0] == "-" else off).update(option[1:])
            if not on <= set(_DECLARES[builtin]) or not off <= {"x"}:
                raise UsageError(
                    f"line {line}: {builtin} {option} is not followed (only -x, +x, -r, -g, -p "
                    "and export -n); write the value it gives"
                )
        if on & {"p", "f"}:
            return True  # it prints, or it exports functions: no variable changes
        export: bool | None = "x" in on or (False if "x" in off else None)
        export = "n" not in on if builtin == "export" else export
        for word in words:
            refuse_braces(word, line)
            named = word.assignment()
            if named is None and "=" in word.literal():  # `export "A=$X"`: the builtin splits it
                name, _, value = self.expand(word, line).partition("=")
                word = shell.Word([(f"{name}=", shell.PLAIN), (value, shell.LITERAL)])
                named = word.assignment()
            if named is not None:
                self.assign(word, line, export)
            elif _NAME.fullmatch(word.literal()):
                if export is not None:  # without a value, `set -a` does not export it
                    self.mark(word.literal(), export)
            else:
                raise UsageError(f"line {line}: {builtin}: `{word.literal()}` is not a name")
            if builtin == "readonly" or "r" in on:
                self.readonly.add(named[0] if named else word.literal())
                self.lines.setdefault(named[0] if named else word.literal(), self.at(line))
        return True

    def source(self, words: list[shell.Word], line: int) -> bool | None:
        """`source FILE`, `. FILE`: its commands followed as the script's own (`activate`: PATH)."""
        if len(words) != 1:
            raise UsageError(f"line {line}: `source` is followed with one file, no arguments")
        try:
            named = self.arguments(words[0], line)
            if len(named) != 1:
                raise UsageError(f"`source {words[0].literal()}` names no file")
            found = sourced.find(
                words[0].literal(), named[0], self.cwd, self.lookup("PATH"), self.within
            )
        except UsageError as error:
            raise UsageError(f"line {line}: {error}") from None
        path, folder = found.path, found.venv_bin
        if folder is not None:  # `activate` exports PATH with its bin first
            if "PATH" in self.variables:  # all of PATH is the script's: the value changes
                self.variables["PATH"] = f"{folder}:{self.variables['PATH']}"
                self.exported.add("PATH")
            else:
                self.path_first.insert(0, folder)
            self.notes.append(
                f"{self.at(line)}: {path} activates a virtual environment: not run; its bin is "
                "first on PATH for the server's command (VIRTUAL_ENV is not converted)"
            )
            return True
        self.within.append(path)
        try:
            self.follow_all(found.text)
        except (UsageError, shell.ShellError) as error:
            raise UsageError(f"line {line}: {path}: {error}") from None
        self.within.pop()
        self.returned = False
        return self.succeeded

    def interpreter(self, name: str, line: int) -> str:
        """The server's command found on the PATH the script set, else as it is, and a note."""
        path = self.variables.get("PATH")
        found = sourced.on_path(name, path.split(":") if path is not None else self.path_first)
        if found is None and "/" not in name:
            self.notes.append(
                f"{self.at(line)}: `{name}` is looked up on the PATH of whoever starts the "
                "server (systemd's is not this shell's); written as is: put the interpreter's "
                "absolute path in [server] python"
            )
        return found or name

    def set_options(self, options: list[str]) -> None:
        """`set -a` and `set -o allexport` turn allexport on, their `+` forms off."""
        for index, option in enumerate(options):
            if option in ("-", "--") or option[:1] not in ("-", "+"):
                return
            named = options[index + 1 : index + 2] if "o" in option else []
            if "a" in option or named == ["allexport"]:
                self.allexport = option[0] == "-"

    def follow_all(self, text: str) -> None:
        """The commands of a script or a sourced file, up to an `exit` (or a `return`)."""
        for command in shell.parse(text):
            self.follow(command)
            if self.done or self.returned:
                return

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
        if name == "return" and self.within:
            self.returned = True
            return self.succeeded if len(words) == 1 else None
        subshell = command.background or command.pipes
        names = (*_DECLARES, *_SOURCE, "set")
        if subshell and (name in names or all(w.assignment() for w in words)):
            self.notes.append(
                f"{self.at(line)}: ignored `{words[0].literal()}` (it runs in a subshell)"
            )
            return True
        if name in _DECLARES:
            return self.declare(name, words[1:], line)
        if name in _SOURCE:
            return self.source(words[1:], line)
        assignments = 0
        while assignments < len(words) and words[assignments].assignment() is not None:
            assignments += 1
        if assignments == len(words):
            for word in words:
                self.assign(word, line, export=None)
            return True
        prefix: dict[str, str] = {}
        for word in words[:assignments]:
            variable, value, appends = word.assignment()  # type: ignore[misc]
            before = (self.lookup(variable) or "") if appends else ""
            prefix[variable] = before + known(self.expand(value, line, assignment=True))
            self.lines[variable] = self.at(line)
        words = words[assignments:]
        if words[0].literal() in _HARMLESS:  # `echo "started $!"` needs no expansion
            if words[0].literal() == "set":
                self.set_options([word.literal() for word in words[1:]])
            if words[0].literal() == "printf" and words[1:2] and words[1].literal() == "-v":
                raise UsageError(f"line {line}: `printf -v` is not followed; write the value")
            return True
        if words[0].literal() == "false":
            return False
        argv = [argument for word in words for argument in self.arguments(word, line)]
        return self.run(argv, prefix, line, command)

    def run(
        self, argv: list[str], prefix: dict[str, str], line: int, command: shell.Command
    ) -> bool | None:
        start, replaces, removed = 0, False, set()
        while start < len(argv) and argv[start] in (*_WRAPPERS, "env"):
            replaces = replaces or argv[start] == "exec"
            start += 1
            if argv[start - 1] != "env":
                continue
            while start < len(argv):
                word = argv[start]
                if word in ("-u", "--unset") and start + 1 < len(argv):
                    start, word = start + 1, f"--unset={argv[start + 1]}"
                if word.startswith(("-u", "--unset=")):  # `env -u NAME`: the server lacks it
                    name = word.removeprefix("--unset=").removeprefix("-u")
                    removed.add(name)
                    prefix.pop(name, None)
                elif "=" in word and not word.startswith("-"):
                    name, _, value = word.partition("=")
                    prefix[name], self.lines[name] = known(value), self.at(line)
                    removed.discard(name)
                elif word.startswith("-"):
                    raise UsageError(f"line {line}: env {word} is not supported")
                else:
                    break
                start += 1
        argv = argv[start:]
        if not argv:
            return True  # `exec > log 2>&1` only redirects the script's own output
        self.done = replaces  # `exec` replaces the shell: nothing after it runs
        if server_split(argv) is not None:
            argv[0] = self.interpreter(argv[0], line)
            if self.found is not None:
                raise UsageError(
                    f"line {line}: a second server command (the first: {self.found[0]})"
                )
            kept = self.variables.keys() - removed
            env = {name: self.variables[name] for name in sorted(kept & self.exported)}
            self.found = (self.at(line), env | prefix, argv)
            self.notes += [
                f"{self.lines[name]}: {name} is not exported: bash gives the server this "
                "value only if the caller exported it (never after export -n); left out "
                "(export it to keep it)"
                for name in sorted(kept - self.exported - prefix.keys())
                if name.startswith(catalog.PREFIX)
            ]
            return True if command.background else None
        if command.background or command.pipes:
            self.notes.append(f"{self.at(line)}: ignored `{argv[0]} &` (it runs in a subshell)")
            return True
        return self.builtin(argv, line)

    def builtin(self, argv: list[str], line: int) -> bool | None:
        if argv[0] == "cd":
            targets = argv[1:]
            while targets and targets[0] in ("-L", "-P", "--"):  # the directory is the same
                targets = targets[1:]
            if len(targets) > 1 or any(target.startswith("-") for target in targets):
                raise UsageError(f"line {line}: `{' '.join(argv)}` is not followed; cd DIRECTORY")
            target = targets[0] if targets else self.lookup("HOME") or "/"
            target = utf8(known(target), f"line {line}", "cd")
            self.cwd = os.path.normpath(PurePosixPath(self.cwd or "") / target)
            return True
        if argv[0] == "unset":
            names, functions = argv[1:], False
            while names and names[0] in ("-f", "-v", "--"):
                functions, names = names[0] == "-f", names[1:]
            for name in names:
                if functions:
                    self.functions.pop(name, None)
                    continue
                self.writable(name, line)
                self.variables.pop(name, None)
                self.exported.discard(name)
                self.removed.add(name)
            return True
        if argv[0] in _UNFOLLOWED:  # `source env.sh`, or `A=1 export A`: bash exports A=1
            raise UsageError(
                f"line {line}: `{argv[0]}` here may change what reaches the server and is not "
                "followed; put what it does in the script"
            )
        self.notes.append(f"{self.at(line)}: ignored `{argv[0]}`")
        return None


def utf8(text: str, where: str, what: str) -> str:
    """`text`, which a profile will hold, unless it holds a byte that is not UTF-8 (read with
    surrogateescape, as bash reads bytes): a profile is UTF-8 text."""
    byte = _NOT_UTF8.search(text)
    if byte is not None:
        raise UsageError(
            f"{where}: {what} holds the byte \\x{ord(byte.group()) - 0xDC00:02x}, which is not "
            "UTF-8; a profile is UTF-8 text: write it in UTF-8"
        )
    return text


def read_script(text: str, environ: Mapping[str, str]) -> StartCommand:
    """Follow a start script (or one raw line) up to its SGLang command."""
    if "\x00" in text:  # bash will not run such a file either
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise UsageError(f"line {line}: a NUL byte; a start script is text")
    script = _Script(environ)
    try:
        script.follow_all(text)
    except shell.ShellError as error:
        raise UsageError(str(error)) from None
    if script.found is None:
        raise UsageError("no `python -m sglang.launch_server` (or `sglang serve`) command found")
    at, env, argv = script.found
    lines = {name: script.lines[name] for name in env if name in script.lines}
    for name, value in env.items():
        utf8(value, lines.get(name, at), name)
    utf8(" ".join(argv), at, "the server's command")
    return StartCommand(env=env, argv=argv, cwd=script.cwd, lines=lines, notes=script.notes, at=at)
