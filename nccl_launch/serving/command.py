"""How a server's command line starts: its console script with `serve`, or an interpreter
running one of its modules; and the structured flags it gives, as they are read back."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from nccl_launch.digits import is_ascii_digits
from nccl_launch.findings import Finding, Refused
from nccl_launch.serving.flags import Flag

PYTHON = re.compile(r"python[0-9.]*")  # an interpreter's name: python3, python3.11
# The structured `[server]` fields every kind reads as integers.
INTEGER_FIELDS = ("tp_size", "pp_size", "port", "nnodes", "node_rank")


def split_command(
    argv: Sequence[str], script: str, entrypoints: Sequence[str]
) -> tuple[str, str, list[str]] | None:
    """(python, entrypoint, the words after it) of a server's command line: its console
    `script` and `serve` (the script's path as python, `serve` as the entrypoint; the
    interpreter before it too, as /proc shows a script its `#!` line started), or an
    interpreter running one of `entrypoints` (`-m MODULE [SUBCOMMAND]`, the interpreter's own
    options kept before it); None for anything else."""
    if not argv:
        return None
    name = PurePosixPath(argv[0]).name
    interpreted = PYTHON.fullmatch(name) is not None and len(argv) > 1
    if interpreted and PurePosixPath(argv[1]).name == script:
        argv, name = argv[1:], script
    if name == script and argv[1:2] == ["serve"]:
        return argv[0], "serve", list(argv[2:])
    if not PYTHON.fullmatch(name) or "-m" not in argv:
        return None
    module = list(argv).index("-m")
    for entrypoint in entrypoints:
        words = shlex.split(entrypoint)
        end = module + len(words)
        if list(argv[module:end]) == words:
            # quoted, so that a word holding blanks stays one word when it is split back
            return argv[0], shlex.join(argv[1:end]), list(argv[end:])
    return None


@dataclass(frozen=True)
class Given:
    """A structured flag as a command line gives it: the option as written (without its
    `=VALUE`), its value (None: it has none) and its words as `[server] args` would hold them."""

    flag: Flag
    option: str
    value: str | None
    words: tuple[str, ...]


def field_value(given: Given, integers: Sequence[str] = INTEGER_FIELDS) -> str | int:
    """The value a structured field takes from `given`: an integer for a field of `integers`;
    refused for one without a value, or not an integer where one is read."""
    if given.value is None:
        raise Refused(no_value(given))
    if given.flag.field not in integers:
        return given.value
    if not is_ascii_digits(given.value):
        message = f"{given.option} {given.value!r} is not an integer"
        raise Refused(Finding("flag-not-integer", "", message))
    return int(given.value)


def no_value(given: Given) -> Finding:
    """A structured flag of a command line read back that gives no value."""
    return Finding("flag-without-value", "", f"{given.option} takes a value")
