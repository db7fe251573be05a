"""The `[server]` table that reproduces a server's command line, flags resolved like
argparse: the generic walk over its words; what each kind's flags mean is the kind's."""

from __future__ import annotations

from typing import Any

from nccl_launch.findings import Finding
from nccl_launch.kinds import command_of, default_kind
from nccl_launch.migrate.shell.expansion import UNSET, known
from nccl_launch.serving import references
from nccl_launch.serving.command import Given


def _value_only(name: str, value: str, word: str, notes: list[Finding]) -> None:
    """Note a structured flag whose `word` in the profile would refer to a variable of an env
    file: a field holds a value, so the value is written."""
    if word != references.literal(value):
        message = "written as its value, since only [server] args refer to an env file's variables"
        notes.append(Finding("value-only", f"{name} {word}", message, severity="warning"))


def server_table(
    argv: list[str], words: list[str] | None = None
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The `[server]` table reproducing a server's argv (None when it is none), and notes on
    what it leaves out. `words` are the argv's words as `[server] args` writes them (default:
    each as it is, `references.literal`), some of them referring to variables (`${NAME}`)."""
    found = command_of(argv)
    if found is None:
        return None, []
    kind, (python, entrypoint, flags) = found
    notes: list[Finding] = []
    written = (words or [references.literal(word) for word in argv])[len(argv) - len(flags) :]
    table: dict[str, Any] = {} if kind is default_kind() else {"kind": kind.name}
    table |= {"python": python, "entrypoint": entrypoint}
    leading = kind.command.leading_flag(entrypoint)
    items: list[Given | int] = []  # a structured flag, or the index of a word for the args
    index = 0
    while index < len(flags):
        option = flags[index]
        name, equals, value = option.partition("=")
        flag = kind.command.reads(option) if option.startswith("-") else None
        takes_next = (
            flag is not None
            and not equals
            and index + 1 < len(flags)
            and not flags[index + 1].startswith("--")
        )
        if index == 0 and leading is not None and not option.startswith("-"):
            flag, name, value, equals = leading, leading.field, option, "="  # its value
        elif takes_next:
            value = flags[index + 1]
        consumed = 2 if takes_next else 1
        if flag is None:
            known(option)
            items.append(index)
        elif UNSET in value and flag.field in ("node_rank", "dist_init_addr"):
            message = f"{name} comes from the caller's environment; left to run time"
            notes.append(Finding("left-to-run-time", "", message, severity="warning"))
        else:
            raw = flags[index + consumed - 1]
            given = known(value) if equals or takes_next else None
            if given is not None:
                _value_only(name, raw, written[index + consumed - 1], notes)
            held = tuple(written[index : index + consumed])
            items.append(Given(flag, name, given, held))
        index += consumed
    fields, left, kind_notes = kind.command.fields(
        [item for item in items if isinstance(item, Given)]
    )
    args: list[str] = []
    for item in items:
        if isinstance(item, int):
            args.append(written[item])
        elif any(item is each for each in left):
            args += item.words
    table |= fields
    notes += kind_notes
    return (table | {"args": args} if args else table), notes
