"""`convert`: follow a start script, or one raw line, up to its server's command, taking only
the code that runs: function bodies and here-docs are skipped, `&&` and `||` follow the
outcome of what came before, branches and loops are refused, `exit` ends the script, and a
sourced file is followed as part of it (a virtual environment's `activate` only moves PATH).
This is the control flow; what a builtin does is in `builtins`, what the shell holds in
`state`."""

from __future__ import annotations

from collections.abc import Mapping

from nccl_launch.errors import UsageError
from nccl_launch.findings import Refused, said_of
from nccl_launch.kinds import command_of, server_commands
from nccl_launch.migrate import shell, sourced
from nccl_launch.migrate.builtins import AFTER_EXPANSION, BUILTINS, DECLARATIONS
from nccl_launch.migrate.start import StartCommand
from nccl_launch.migrate.state import Shell, known_at, utf8
from nccl_launch.serving import references

_WRAPPERS = ("exec", "nohup", "command", "time")
_BY_HAND = "convert the branch that runs, or write the profile by hand"
# What runs in the shell itself: in a subshell (`&`, `|`) it changes nothing here.
_IN_THIS_SHELL = ("source", ".", "set", *DECLARATIONS)


class _Script:
    """Follows a script's commands in the order bash runs them, and which of them run."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.shell = Shell(environ)
        # Where the server's command is, its env, argv, words as written, and each of their
        # variables a sourced file set last: that file and the value.
        self.found: (
            tuple[str, dict[str, str], list[str], list[str], dict[str, tuple[str, str]]] | None
        ) = None
        # Whether the last command succeeded, as far as a reader can know (None: it cannot).
        self.succeeded: bool | None = True
        self.done = False  # after `exit`, or `exec` of a command
        self.returned = False  # `return` in a sourced file: the rest of it does not run
        self.skipping = 0  # the depth of a group or subshell that does not run

    def source(self, words: list[shell.Word], line: int) -> bool | None:
        """`source FILE`, `. FILE`: its commands followed as the script's own (`activate`: PATH)."""
        state = self.shell
        if len(words) != 1:
            raise UsageError(f"line {line}: `source` is followed with one file, no arguments")
        try:
            named = state.arguments(words[0], line)
            if len(named) != 1:
                raise UsageError(f"`source {words[0].literal()}` names no file")
            found = sourced.find(
                words[0].literal(), named[0], state.cwd, state.lookup("PATH"), state.within
            )
        except UsageError as error:
            raise UsageError(f"line {line}: {error}") from None
        except Refused as error:  # the sourced file not read
            raise said_of(f"line {line}", error) from None
        if found.venv_bin is not None:
            state.activate(found.venv_bin)
            state.notes.append(
                f"{state.at(line)}: {found.path} activates a virtual environment: not run; its "
                "bin is first on PATH for the server's command (VIRTUAL_ENV is not converted)"
            )
            return True
        state.within.append(found.path)
        try:
            self.follow_all(found.text)
        except (UsageError, shell.ShellError) as error:
            raise UsageError(f"line {line}: {found.path}: {error}") from None
        except Refused as error:
            raise said_of(f"line {line}: {found.path}", error) from None
        state.within.pop()
        self.returned = False
        return self.succeeded

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
            self.shell.functions[command.function] = line
            self.succeeded = True
            return
        self.succeeded = self.command(command)

    def command(self, command: shell.Command) -> bool | None:
        """Follow one simple command that runs; whether it succeeded, None when unknown."""
        words, line, state = list(command.words), command.line, self.shell
        name = words[0].bare()
        if name in state.functions:
            raise UsageError(
                f"line {line}: `{name}` calls the function defined on line "
                f"{state.functions[name]}, which is not followed; put what it does in the "
                "script, or write the profile by hand"
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
            state.notes.append(
                f"{state.at(line)}: ignored `{words[0].literal()}` (it runs in a subshell)"
            )
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
        command: shell.Command,
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
                raise UsageError(
                    f"line {line}: a second server command (the first: {self.found[0]})"
                )
            env = state.server_env(removed, prefix)
            state.given_secrets(written, removed, prefix)
            origins = {
                name: (state.origins[name], state.variables[name])
                for name in [*env, *references.names(written)]
                if name in state.origins
            }
            self.found = (state.at(line), env, argv, written, origins)
            return True if command.background else None
        if command.background or command.pipes:
            state.notes.append(f"{state.at(line)}: ignored `{argv[0]} &` (it runs in a subshell)")
            return True
        utility = AFTER_EXPANSION.get(argv[0])
        if utility is not None:
            return utility(state, argv[1:], line)
        state.notes.append(f"{state.at(line)}: ignored `{argv[0]}`")
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
                raise UsageError(f"line {line}: env {word} is not supported")
            else:
                break
            start += 1
        return start


def read_script(text: str, environ: Mapping[str, str]) -> StartCommand:
    """Follow a start script (or one raw line) up to its server's command."""
    if "\x00" in text:  # bash will not run such a file either
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise UsageError(f"line {line}: a NUL byte; a start script is text")
    script = _Script(environ)
    try:
        script.follow_all(text)
    except shell.ShellError as error:
        raise UsageError(str(error)) from None
    if script.found is None:
        found = ", ".join(f"`{form}`" for form in server_commands())
        raise UsageError(f"no server command found ({found})")
    at, env, argv, written, origins = script.found
    state = script.shell
    lines = {name: state.lines[name] for name in env if name in state.lines}
    for name, value in env.items():
        utf8(value, lines.get(name, at), name)
    utf8(" ".join(argv), at, "the server's command")
    return StartCommand(
        env=env,
        argv=argv,
        cwd=state.cwd,
        lines=lines,
        notes=state.notes,
        at=at,
        words=written,
        sourced=origins,
        secret_files=state.secret_files,
    )
