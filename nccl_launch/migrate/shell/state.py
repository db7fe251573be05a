"""The shell state a start script builds that reaches the server: its variables (which are
exported, readonly or unset, and where each was set), the folders it puts first on PATH, its
directory, its functions, and the notes on what a profile leaves out."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from nccl_launch.escaping import not_utf8
from nccl_launch.findings import Finding, Refused
from nccl_launch.migrate.shell import sourced, syntax
from nccl_launch.migrate.shell.expansion import (
    DEFAULT_IFS,
    FOLLOWED,
    SECRET_FILE,
    arguments,
    expand,
    from_caller,
    known,
    references,
    secret_read,
)
from nccl_launch.migrate.shell.refused import ShellError, shell_error
from nccl_launch.nccl import catalog
from nccl_launch.secrets.masking import secret_name
from nccl_launch.serving.references import literal
from nccl_launch.serving.references import names as refers_to

# Around the name of a variable in an argument being written: bytes no script's word holds.
_OPEN, _CLOSE = "\x02", "\x03"
_MARKED = re.compile(f"{_OPEN}([A-Za-z_][A-Za-z0-9_]*){_CLOSE}")


def utf8(text: str, where: str, what: str) -> str:
    """`text`, which a profile will hold, unless it holds a byte that is not UTF-8 (read with
    surrogateescape, as bash reads bytes): a profile is UTF-8 text."""
    byte = not_utf8(text)
    if byte is not None:
        message = f"{what} holds the byte {byte}, which is not UTF-8"
        raise Refused(
            Finding("not-utf8", where, message, "a profile is UTF-8 text: write it in UTF-8")
        )
    return text


def known_at(value: str, line: int) -> str:
    """`value` with every variable resolved; one the caller provides is refused naming `line`."""
    return known(value, f"line {line}")


@dataclass
class Shell:
    """What bash holds while it runs the script, as far as it reaches the server."""

    environ: Mapping[str, str]  # the caller's: what the script reads without setting
    variables: dict[str, str] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)  # names set or to be set that reach the server
    readonly: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)  # unset here: the caller's value is gone too
    lines: dict[str, str] = field(default_factory=dict)  # where each was set: "a.sh line 2"
    origins: dict[str, str] = field(default_factory=dict)  # the sourced file that set each last
    within: list[str] = field(default_factory=list)  # the sourced files followed, outermost first
    path_first: list[str] = field(default_factory=list)  # put before the caller's PATH
    allexport: bool = False
    noglob: bool = False  # `set -f`: no word is a glob
    cwd: str | None = None
    functions: dict[str, int] = field(default_factory=dict)  # name: the line defining it
    notes: list[Finding] = field(default_factory=list)
    secret_files: dict[str, str] = field(default_factory=dict)  # NAME: the file `$(cat FILE)` reads
    # A variable whose value is a secret read from a file (`NAME=$(cat FILE)`): NAME: FILE.
    # bash holds the file's text; here the server gets `${NAME}`, and the profile secret_files.
    secret_reads: dict[str, str] = field(default_factory=dict)

    def at(self, line: int) -> str:
        """Where `line` of the file being followed is: "line 3", "a.sh line 2"."""
        return f"{self.within[-1]} line {line}" if self.within else f"line {line}"

    def lookup(self, name: str) -> str | None:
        if name.startswith(SECRET_FILE):  # `$(cat FILE)`: the server gets `${NAME}` filled
            return f"${{{self.secret(name.removeprefix(SECRET_FILE))}}}"
        if name in self.secret_reads:
            return f"${{{self.read_name(name)}}}"
        found = self.variables.get(name, None if name in self.removed else self.environ.get(name))
        if name == "PATH" and name not in self.variables and self.path_first:
            return ":".join([*self.path_first, found or ""])  # after `PATH=/opt/bin:$PATH`
        return found

    def expand(self, word: syntax.Word, line: int, assignment: bool = False) -> str:
        """The word's value, for a variable's: one holding a secret read from a file is
        refused (a profile's value cannot hold the file's text)."""
        for name, path in self.secret_reads.items():
            if references(word, name):
                raise shell_error(
                    "secret-outside",
                    line,
                    f"${name} holds the secret read from {path} ({self.lines[name]}), here "
                    "outside the server's command",
                    FOLLOWED,
                )
        return expand(word, self.lookup, line, from_caller, assignment=assignment)

    def no_secret_in(self, written: str, what: str, line: int) -> None:
        """Refuse `what` (a value, `written` as `[server] args` would write it) when it holds a
        variable read from a file: it would reach the profile as `${NAME}`, not the text."""
        found = [name for name in self.secret_reads if self.read_name(name) in refers_to([written])]
        if found:
            raise shell_error(
                "secret-outside",
                line,
                f"{what} holds ${found[0]}, the secret read from {self.secret_reads[found[0]]} "
                f"({self.lines[found[0]]}), here outside the server's command",
                FOLLOWED,
            )

    def arguments(self, word: syntax.Word, line: int) -> list[str]:
        """The arguments bash makes of a command's word, split at the script's IFS."""
        return arguments(word, self.lookup, line, from_caller, self.ifs(), glob=not self.noglob)

    def written(self, word: syntax.Word, line: int, argument: str) -> str:
        """`argument`, which `word` makes, as `[server] args` writes it: each variable a
        sourced file set last as `${NAME}` (the profile may name that file in `env_files`),
        the rest as it is (`references.literal`)."""

        def marked(name: str) -> str | None:
            if name.startswith(SECRET_FILE):
                return f"{_OPEN}{self.secret(name.removeprefix(SECRET_FILE))}{_CLOSE}"
            if name in self.secret_reads:
                return f"{_OPEN}{self.read_name(name)}{_CLOSE}"
            value = self.lookup(name)
            return f"{_OPEN}{name}{_CLOSE}" if value and name in self.origins else value

        if _OPEN in argument or _CLOSE in argument:
            return literal(argument)
        try:
            made = arguments(word, marked, line, from_caller, self.ifs(), not self.noglob)
        except ShellError:  # `$((N + 1))` computes with the value
            return literal(argument)
        parts = _MARKED.split(made[0])
        parts[::2] = [literal(text) for text in parts[::2]]
        parts[1::2] = [f"${{{name}}}" for name in parts[1::2]]
        return "".join(parts)

    def secret(self, read: str) -> str:
        """The variable that holds the secret of the file `$(cat FILE)` reads (`api_key`:
        API_KEY; `k`: K_SECRET, a name masking hides), named in `secret_files`, a relative
        FILE from where the script is then, as `[server] cwd` is; a second file of the same
        name gets a number."""
        path = self.here(read)
        stem = re.sub(r"[^A-Za-z0-9_]", "_", path.rstrip("/").rpartition("/")[2]).upper()
        stem = stem if re.match(r"[A-Z_]", stem) else f"SECRET_{stem}"
        stem = secret_name(stem)
        names = [stem, *(f"{stem}_{number}" for number in range(2, len(self.secret_files) + 3))]
        name = next(each for each in names if self.secret_files.get(each, path) == path)
        self.secret_files[name] = path
        return name

    def here(self, path: str) -> str:
        """`path` as the script opens it now: from its directory, as `[server] cwd` is."""
        return os.path.normpath(PurePosixPath(self.cwd or "") / path)

    def read_name(self, name: str) -> str:
        """The variable the profile gives the secret `name` was read into: `name` when it is
        exported (the server's env has it so), else a name masking hides (`K`: K_SECRET)."""
        return name if name in self.exported else secret_name(name)

    def given_secrets(self, words: list[str], removed: set[str], prefix: Mapping[str, str]) -> None:
        """Each variable read from a file that reaches the server (in its `words`, as `[server]
        args` write them, or exported to it) into `secret_files`, as bash gives it."""
        exported, used = self.exported - removed - prefix.keys(), set(refers_to(words))
        for name, path in sorted(self.secret_reads.items()):
            named = self.read_name(name)
            if name not in exported and named not in used:
                continue
            if self.secret_files.setdefault(named, path) != path:
                message = f"{named} names two secret files, {self.secret_files[named]} and {path}"
                fix = "read one into another variable"
                raise Refused(Finding("secret-files-clash", self.lines[name], message, fix))

    def ifs(self) -> str:
        """The script's IFS (bash ignores the caller's)."""
        return self.variables.get("IFS", DEFAULT_IFS)

    def assign(self, word: syntax.Word, line: int, export: bool | None) -> None:
        """`NAME=value` or `NAME+=value` as bash sets it; `export` says whether it reaches the
        server, None leaves that as it was (exported under `set -a`)."""
        name, value, appends = word.assignment() or ("", word, False)
        self.writable(name, line)
        read = None if appends else secret_read(value)
        if read is not None:  # bash holds the file's text, which reaches the server as ${NAME}
            self.variables.pop(name, None)
            self.origins.pop(name, None)
            self.secret_reads[name], self.lines[name] = self.here(read), self.at(line)
            self.mark(name, export)
            return
        self.secret_reads.pop(name, None)
        if (appends or references(value, name)) and name not in self.variables:
            if name in self.environ and not name.startswith(catalog.PREFIX):
                # PATH=/opt/bin:$PATH depends on whoever runs it, and stays theirs
                message = f"{name} extends the caller's value; not converted"
                self.notes.append(
                    Finding("left-to-caller", self.at(line), message, severity="warning")
                )
                if name == "PATH" and not appends:  # but it tells where the server's python is
                    self.path_first = (
                        sourced.folders_before(value, self.lookup, line) + self.path_first
                    )
                return
            if name in self.environ:
                raise shell_error(
                    "extends-caller",
                    line,
                    f"{name} extends the caller's value, which a profile cannot hold",
                    "write the whole value",
                )
        text = known_at(self.expand(value, line, assignment=True), line)
        self.variables[name] = self.variables.get(name, "") + text if appends else text
        self.lines[name] = self.at(line)
        if self.within:
            self.origins[name] = self.within[-1]
        else:
            self.origins.pop(name, None)
        self.mark(name, export)

    def mark(self, name: str, export: bool | None) -> None:
        if export or (export is None and self.allexport):
            self.exported.add(name)
        elif export is False:
            self.exported.discard(name)

    def writable(self, name: str, line: int) -> None:
        if name in self.readonly:
            raise shell_error(
                "readonly",
                line,
                f"{name} is readonly since {self.lines.get(name)}: bash fails here and keeps "
                "that value",
                "remove the line that does not count",
            )

    def unset(self, name: str, line: int) -> None:
        """`unset NAME`: gone from the script, and the caller's value with it."""
        self.writable(name, line)
        self.variables.pop(name, None)
        self.secret_reads.pop(name, None)
        self.origins.pop(name, None)
        self.exported.discard(name)
        self.removed.add(name)

    def activate(self, folder: str) -> None:
        """A virtual environment's `activate`: it exports PATH with its `bin` first."""
        if "PATH" in self.variables:  # all of PATH is the script's: the value changes
            self.variables["PATH"] = f"{folder}:{self.variables['PATH']}"
            self.exported.add("PATH")
        else:
            self.path_first.insert(0, folder)

    def interpreter(self, name: str, line: int) -> str:
        """The server's command found on the PATH the script set, else as it is, and a note."""
        path = self.variables.get("PATH")
        found = sourced.on_path(name, path.split(":") if path is not None else self.path_first)
        if found is None and "/" not in name:
            message = f"`{name}` is looked up on the PATH of whoever starts the server "
            message += "(systemd's is not this shell's); written as is: put the interpreter's "
            message += "absolute path in [server] python"
            self.notes.append(Finding("bare-name", self.at(line), message, severity="warning"))
        return found or name

    def server_env(self, removed: set[str], prefix: dict[str, str]) -> dict[str, str]:
        """What the server's command gets: the exported variables, less those `env -u`
        removed, with its own `NAME=value` prefix; each NCCL value left out is noted."""
        kept = self.variables.keys() - removed
        self.notes += [
            Finding(
                "not-exported",
                self.lines[name],
                f"{name} is not exported: bash gives the server this value only if the caller "
                "exported it (never after export -n); left out (export it to keep it)",
                severity="warning",
            )
            for name in sorted(kept - self.exported - prefix.keys())
            if name.startswith(catalog.PREFIX)
        ]
        return {name: self.variables[name] for name in sorted(kept & self.exported)} | prefix
