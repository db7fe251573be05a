"""`convert`: follow a start script, or one raw line, up to its server's command, taking only
the code that runs: function bodies and here-docs are skipped, `&&` and `||` follow the
outcome of what came before, branches and loops are refused, `exit` ends the script, and a
sourced file is followed as part of it (a virtual environment's `activate` only moves PATH).
This is the control flow; what a builtin does is in `builtins`, what the shell holds in
`state`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nccl_launch.findings import Finding, Refused, said_of
from nccl_launch.kinds import command_of, server_commands
from nccl_launch.migrate.shell import sourced, syntax
from nccl_launch.migrate.shell.builtins import AFTER_EXPANSION, BUILTINS, DECLARATIONS
from nccl_launch.migrate.shell.refused import shell_error
from nccl_launch.migrate.shell.state import Shell, known_at, utf8
from nccl_launch.serving import references

_WRAPPERS = ("exec", "nohup", "command", "time")
_BY_HAND = "convert the branch that runs, or write the profile by hand"
# What runs in the shell itself: in a subshell (`&`, `|`) it changes nothing here.
_IN_THIS_SHELL = ("source", ".", "set", *DECLARATIONS)


@dataclass(frozen=True)
class ServerCommand:
    """The server's command as the script runs it: where it is ("line 9", "a.sh line 2"),
    its env, argv, words as `[server] args` writes them, and each of their variables a
    sourced file set last: that file and the value."""

    at: str
    env: dict[str, str]
    argv: list[str]
    words: list[str]
    sourced: dict[str, tuple[str, str]]


class _Script:
    """Follows a script's commands in the order bash runs them, and which of them run."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.shell = Shell(environ)
        self.found: ServerCommand | None = None
        # Whether the last command succeeded, as far as a reader can know (None: it cannot).
        self.succeeded: bool | None = True
        self.done = False  # after `exit`, or `exec` of a command
        self.returned = False  # `return` in a sourced file: the rest of it does not run
        self.skipping = 0  # the depth of a group or subshell that does not run

    def source(self, words: list[syntax.Word], line: int) -> bool | None:
        """`source FILE`, `. FILE`: its commands followed as the script's own (`activate`: PATH)."""
        state = self.shell
        if len(words) != 1:
            raise shell_error(
                "source-arguments", line, "`source` is followed with one file, no arguments"
            )
        named = state.arguments(words[0], line)
        if len(named) != 1:
            raise shell_error(
                "source-arguments", line, f"`source {words[0].literal()}` names no file"
            )
        try:
            found = sourced.find(
                words[0].literal(), named[0], state.cwd, state.lookup("PATH"), state.within
            )
        except Refused as refused:  # the sourced file not found, or not read
            raise said_of(f"line {line}", refused) from None
        if found.venv_bin is not None:
            state.activate(found.venv_bin)
            message = f"{found.path} activates a virtual environment: not run; its bin is "
            message += "first on PATH for the server's command (VIRTUAL_ENV is not converted)"
            state.notes.append(
                Finding("venv-activate", state.at(line), message, severity="warning")
            )
            return True
        state.within.append(found.path)
        try:
            self.follow_all(found.text)
        except Refused as refused:
            raise said_of(f"line {line}: {found.path}", refused) from None
        state.within.pop()
        self.returned = False
        return self.succeeded

    def follow_all(self, text: str) -> None:
        """The commands of a script or a sourced file, up to an `exit` (or a `return`)."""
        for command in syntax.parse(text):
            self.follow(command)
            if self.done or self.returned:
                return

    def follow(self, command: syntax.Command) -> None:
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
                raise shell_error(
                    "unknown-outcome",
                    line,
                    f"whether this runs depends on how the command before `{command.joiner}` ends",
                    _BY_HAND,
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
            raise shell_error("control-flow", line, f"{what} is not followed", _BY_HAND)
        if command.function:
            self.shell.functions[command.function] = line
            self.succeeded = True
            return
        self.succeeded = self.command(command)

    def command(self, command: syntax.Command) -> bool | None:
        """Follow one simple command that runs; whether it succeeded, None when unknown."""
        words, line, state = list(command.words), command.line, self.shell
        name = words[0].bare()
        if name in state.functions:
            raise shell_error(
                "function-call",
                line,
                f"`{name}` calls the function defined on line {state.functions[name]}, which "
                "is not followed",
                "put what it does in the script, or write the profile by hand",
            )
        if name == "exit":
            self.done = True
            return None
        if name == "return" and state.within:
            self.returned = True
            return self.succeeded if len(words) == 1 else None
        if (command.background or command.pipes) and (
            name in _IN_THIS_SHELL or all(word.assignment() for word in words)
        ):
            message = f"ignored `{words[0].literal()}` (it runs in a subshell)"
            state.notes.append(Finding("in-subshell", state.at(line), message, severity="warning"))
            return True
        if name in ("source", "."):
            return self.source(words[1:], line)
        if name in DECLARATIONS:
            return BUILTINS[name](state, words[1:], line)
        assignments = 0
        while assignments < len(words) and words[assignments].assignment() is not None:
            assignments += 1
        if assignments == len(words):
            for word in words:
                state.assign(word, line, export=None)
            return True
        prefix: dict[str, str] = {}
        for word in words[:assignments]:
            variable, value, appends = word.assignment()  # type: ignore[misc]
            before = (state.lookup(variable) or "") if appends else ""
            prefix[variable] = before + known_at(state.expand(value, line, assignment=True), line)
            state.lines[variable] = state.at(line)
        words = words[assignments:]
        builtin = BUILTINS.get(words[0].literal())
        if builtin is not None and words[0].literal() not in DECLARATIONS:
            return builtin(state, words[1:], line)  # `A=1 export A` is refused below
        argv, written = [], []
        for word in words:
            for argument in state.arguments(word, line):
                argv.append(argument)
                written.append(state.written(word, line, argument))
        return self.run(argv, written, prefix, line, command)

    def run(
        self,
        argv: list[str],
        written: list[str],
        prefix: dict[str, str],
        line: int,
        command: syntax.Command,
    ) -> bool | None:
        """An expanded command (`written`: its words as a profile writes them): the server's
        (its env and argv kept), or a builtin's."""
        state, start, replaces = self.shell, 0, False
        removed: set[str] = set()
        while start < len(argv) and argv[start] in (*_WRAPPERS, "env"):
            replaces = replaces or argv[start] == "exec"
            start += 1
            if argv[start - 1] == "env":
                start = self.env_options(argv, written, start, prefix, removed, line)
        argv, written = argv[start:], written[start:]
        if not argv:
            return True  # `exec > log 2>&1` only redirects the script's own output
        self.done = replaces  # `exec` replaces the shell: nothing after it runs
        if command_of(argv) is not None:
            argv[0] = state.interpreter(argv[0], line)
            if self.found is not None:
                raise shell_error(
                    "second-server-command",
                    line,
                    f"a second server command (the first: {self.found.at})",
                )
            env = state.server_env(removed, prefix)
            state.given_secrets(written, removed, prefix)
            origins = {
                name: (state.origins[name], state.variables[name])
                for name in [*env, *references.names(written)]
                if name in state.origins
            }
            self.found = ServerCommand(state.at(line), env, argv, written, origins)
            return True if command.background else None
        if command.background or command.pipes:
            message = f"ignored `{argv[0]} &` (it runs in a subshell)"
            state.notes.append(Finding("in-subshell", state.at(line), message, severity="warning"))
            return True
        utility = AFTER_EXPANSION.get(argv[0])
        if utility is not None:
            return utility(state, argv[1:], line)
        state.notes.append(
            Finding("ignored-command", state.at(line), f"ignored `{argv[0]}`", severity="warning")
        )
        return None

    def env_options(
        self,
        argv: list[str],
        written: list[str],
        start: int,
        prefix: dict[str, str],
        removed: set[str],
        line: int,
    ) -> int:
        """`env`'s `-u NAME` and `NAME=value` from `start` into `removed` and `prefix`; where
        its command starts. A value holding a secret read from a file is refused: a profile's
        value cannot hold the file's text."""
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
                self.shell.no_secret_in(written[start], f"the value env gives {name}", line)
                prefix[name], self.shell.lines[name] = known_at(value, line), self.shell.at(line)
                removed.discard(name)
            elif word.startswith("-"):
                raise shell_error("env-option", line, f"env {word} is not supported")
            else:
                break
            start += 1
        return start


def read_script(text: str, environ: Mapping[str, str]) -> tuple[ServerCommand, Shell]:
    """Follow a start script (or one raw line) up to its server's command: that command, and
    the shell as the script left it (its directory, notes, secret files, where each variable
    was set)."""
    if "\x00" in text:  # bash will not run such a file either
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise shell_error("nul-byte", line, "a NUL byte", "a start script is text")
    script = _Script(environ)
    script.follow_all(text)
    if script.found is None:
        forms = ", ".join(f"`{form}`" for form in server_commands())
        raise Refused(Finding("no-server-command", "", f"no server command found ({forms})"))
    found, state = script.found, script.shell
    for name, value in found.env.items():
        utf8(value, state.lines.get(name, found.at), name)
    utf8(" ".join(found.argv), found.at, "the server's command")
    return found, state
