"""The `[server]` table that reproduces an SGLang command line, flags resolved like argparse."""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from nccl_launch.digits import is_ascii_digits
from nccl_launch.errors import UsageError
from nccl_launch.serving import references
from nccl_launch.sglang.facts import SPECULATIVE_PREFIX, flag_for

_PYTHON = re.compile(r"python[0-9.]*")
UNSET = "\x00"  # stands for a variable a script reads from its caller


def from_caller(name: str) -> str:
    """What a variable the script reads from its caller expands to."""
    return UNSET + name


def server_split(argv: list[str]) -> tuple[str, str, list[str]] | None:
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
    # quoted, so that a word holding blanks stays one word when the entrypoint is split back
    return argv[0], shlex.join(argv[1 : module + 1]), argv[module + 1 :]


def known(word: str) -> str:
    """A word with every variable resolved; the caller-provided ones are an error here."""
    if UNSET in word:
        name = re.split(r"[^A-Za-z0-9_]", word.split(UNSET, 1)[1])[0]
        raise UsageError(f"${name} is not set in the script or this environment")
    return word


def _number(flag: str, value: str) -> int:
    if not is_ascii_digits(value):
        raise UsageError(f"{flag} {value!r} is not an integer")
    return int(value)


_INTEGERS = {
    "tp_size", "pp_size", "port", "nnodes", "node_rank",
    "speculative.num_steps", "speculative.eagle_topk", "speculative.num_draft_tokens",
}  # fmt: skip


def _value_only(name: str, value: str, word: str, notes: list[str]) -> None:
    """Note a structured flag whose `word` in the profile would refer to a variable of an env
    file: a field holds a value, so the value is written."""
    if word != references.literal(value):
        notes.append(
            f"{name} {word}: written as its value, since only [server] args refer to an env "
            "file's variables"
        )


def server_table(
    argv: list[str], words: list[str] | None = None
) -> tuple[dict[str, Any] | None, list[str]]:
    """The `[server]` table reproducing an SGLang argv (None when it is not one), and notes on
    what it leaves out. `words` are the argv's words as `[server] args` writes them (default:
    each as it is, `references.literal`), some of them referring to variables (`${NAME}`)."""
    split = server_split(argv)
    if split is None:
        return None, []
    notes: list[str] = []
    python, entrypoint, flags = split
    written = (words or [references.literal(word) for word in argv])[len(argv) - len(flags) :]
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
        flag = flag_for(option) if option.startswith("--") else None
        consumed = 2 if takes_next else 1
        held = written[index + consumed - 1]
        if flag is None and name.startswith(SPECULATIVE_PREFIX):
            key = name.removeprefix(SPECULATIVE_PREFIX).replace("-", "_")
            speculative[key] = known(value) if (equals or takes_next) else True
            _value_only(name, flags[index + consumed - 1], held, notes)
        elif flag is None:
            known(option)
            args.append(written[index])
            consumed = 1
        elif UNSET in value and flag.field in ("node_rank", "dist_init_addr"):
            notes.append(f"{name} comes from the caller's environment; left to run time")
        else:
            value = known(value)
            parsed: Any = _number(name, value) if flag.field in _INTEGERS else value
            section, _, key = flag.field.rpartition(".")
            (speculative if section else table)[key] = parsed
            _value_only(name, flags[index + consumed - 1], held, notes)
        index += consumed
    if speculative:
        table["speculative"] = speculative
    return (table | {"args": args} if args else table), notes
