"""The builtins and commands a start script runs around its server, name -> what each does to
the shell state: `BUILTINS` read their words as written (a declaration's `NAME=value` is an
assignment, `echo "$!"` needs no expansion), `AFTER_EXPANSION` their expanded arguments
(`cd`, `unset`, also after `command` or `env`). Each returns whether it succeeded, None
when a reader cannot know."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import PurePosixPath

from nccl_launch.migrate.shell import syntax
from nccl_launch.migrate.shell.expansion import refuse_braces
from nccl_launch.migrate.shell.refused import shell_error
from nccl_launch.migrate.shell.state import Shell, known_at, utf8

Builtin = Callable[[Shell, list[syntax.Word], int], "bool | None"]
Utility = Callable[[Shell, list[str], int], "bool | None"]

# The declaration builtins and the options each takes that this reader follows.
DECLARATIONS = {"export": "fnp", "readonly": "p", "declare": "xrgp", "typeset": "xrgp", "local": ""}
# Commands a start script runs around the server; they change nothing the server receives.
_HARMLESS = (
    "echo", "mkdir", "sleep", "ulimit", "trap", "wait", "true", "date", "nvidia-smi", "tee",
    "cat", "umask", "shopt",
)  # fmt: skip
# Builtins that may set what reaches the server in ways this reader does not follow.
_UNFOLLOWED = (
    "source", ".", "eval", "builtin", "pushd", "popd", "read", "mapfile", "readarray", "let",
    "getopts", *DECLARATIONS,
)  # fmt: skip
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _declare(builtin: str, state: Shell, words: list[syntax.Word], line: int) -> bool:
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
        if not on <= set(DECLARATIONS[builtin]) or not off <= {"x"}:
            raise shell_error(
                "builtin-option",
                line,
                f"{builtin} {option} is not followed (only -x, +x, -r, -g, -p and export -n)",
                "write the value it gives",
            )
    if on & {"p", "f"}:
        return True  # it prints, or it exports functions: no variable changes
    export: bool | None = "x" in on or (False if "x" in off else None)
    export = "n" not in on if builtin == "export" else export
    for word in words:
        refuse_braces(word, line)
        named = word.assignment()
        if named is None and "=" in word.literal():  # `export "A=$X"`: the builtin splits it
            name, _, value = state.expand(word, line).partition("=")
            word = syntax.Word([(f"{name}=", syntax.PLAIN), (value, syntax.LITERAL)])
            named = word.assignment()
        if named is not None:
            state.assign(word, line, export)
        elif _NAME.fullmatch(word.literal()):
            if export is not None:  # without a value, `set -a` does not export it
                state.mark(word.literal(), export)
        else:
            raise shell_error("not-a-name", line, f"{builtin}: `{word.literal()}` is not a name")
        if builtin == "readonly" or "r" in on:
            state.readonly.add(named[0] if named else word.literal())
            state.lines.setdefault(named[0] if named else word.literal(), state.at(line))
    return True


def _set(state: Shell, words: list[syntax.Word], line: int) -> bool:
    """`set -a` and `set -o allexport` turn allexport on, `set -f` and `set -o noglob`
    noglob; their `+` forms off."""
    options = [word.literal() for word in words]
    for index, option in enumerate(options):
        if option in ("-", "--") or option[:1] not in ("-", "+"):
            break
        named = options[index + 1 : index + 2] if "o" in option else []
        if "a" in option or named == ["allexport"]:
            state.allexport = option[0] == "-"
        if "f" in option or named == ["noglob"]:
            state.noglob = option[0] == "-"
    return True


def _printf(state: Shell, words: list[syntax.Word], line: int) -> bool:
    if words[:1] and words[0].literal() == "-v":
        raise shell_error("builtin-option", line, "`printf -v` is not followed", "write the value")
    return True


def _cd(state: Shell, argv: list[str], line: int) -> bool:
    targets = argv
    while targets and targets[0] in ("-L", "-P", "--"):  # the directory is the same
        targets = targets[1:]
    if len(targets) > 1 or any(target.startswith("-") for target in targets):
        given = " ".join(["cd", *argv])
        raise shell_error("builtin-option", line, f"`{given}` is not followed", "cd DIRECTORY")
    target = known_at(targets[0], line) if targets else state.lookup("HOME") or "/"
    state.cwd = os.path.normpath(
        PurePosixPath(state.cwd or "") / utf8(target, f"line {line}", "cd")
    )
    return True


def _unset(state: Shell, argv: list[str], line: int) -> bool:
    names, functions = argv, False
    while names and names[0] in ("-f", "-v", "--"):
        functions, names = names[0] == "-f", names[1:]
    for name in names:
        if functions:
            state.functions.pop(name, None)
        else:
            state.unset(name, line)
    return True


def _unfollowed(name: str, state: Shell, argv: list[str], line: int) -> bool:
    raise shell_error(  # `source env.sh` after `command`, or `A=1 export A`: bash exports A=1
        "unfollowed-builtin",
        line,
        f"`{name}` here may change what reaches the server and is not followed",
        "put what it does in the script",
    )


BUILTINS: dict[str, Builtin] = {
    **{name: partial(_declare, name) for name in DECLARATIONS},
    **dict.fromkeys(_HARMLESS, lambda state, words, line: True),
    "set": _set,
    "printf": _printf,
    "false": lambda state, words, line: False,
}
AFTER_EXPANSION: dict[str, Utility] = {
    **{name: partial(_unfollowed, name) for name in _UNFOLLOWED},
    "cd": _cd,
    "unset": _unset,
}
