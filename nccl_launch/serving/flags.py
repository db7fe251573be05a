"""A server's flags as argparse reads them: a structured `[server]` field's spellings (an exact
one, else a unique prefix), and the API-key flags of an argv with the value each gives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nccl_launch.serving import references


@dataclass(frozen=True)
class Flag:
    """A structured `[server]` field and the spellings its server's parser accepts for it."""

    field: str
    canonical: str
    aliases: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.canonical, *self.aliases)

    @property
    def place(self) -> str:
        """Where a profile sets it: `tp_size in [server]`, `num_steps in [server.speculative]`."""
        section, _, key = self.field.rpartition(".")
        return f"{key} in [server{'.' + section if section else ''}]"


def flag_for(option: str, flags: tuple[Flag, ...]) -> Flag | None:
    """The structured flag an option names, as argparse would resolve it (unique prefixes too)."""
    name = option.split("=", 1)[0]
    exact = [flag for flag in flags if name in flag.spellings]
    if exact:
        return exact[0]
    matches = [flag for flag in flags if any(s.startswith(name) for s in flag.spellings)]
    return matches[0] if len(matches) == 1 and len(name) > 2 else None


def _credential_words(
    argv: Sequence[str], credential: Callable[[str], bool], complete: bool
) -> list[tuple[int, str, str | None]]:
    """The API-key flags in `argv` (the options `credential` says are one), each with its
    index and its value: None where it has none (another option follows; last, when `argv`
    is `complete`)."""
    found: list[tuple[int, str, str | None]] = []
    for index, word in enumerate(argv):
        option, equals, value = word.partition("=")
        if not credential(option):
            continue
        if equals:
            found.append((index, option, value))
        elif index + 1 < len(argv):
            after = argv[index + 1]
            found.append((index, option, None if after.startswith("--") else after))
        else:
            found.append((index, option, None if complete else option))
    return found


def empty_credentials(
    argv: Sequence[str], credential: Callable[[str], bool], complete: bool = True
) -> list[tuple[int, str, bool]]:
    """The API-key flags in `argv` that give no key, each with its index and whether it
    has a value at all: an empty one (`--api-key ''`, `--api-key=`, as a unit's `${NAME}`
    that no environment file sets becomes), which the server takes as no key and so serves every
    request; or none (another option follows; last, when `argv` is `complete`: a shell drops
    an unset `$API_KEY` unquoted), which the server refuses at start."""
    return [
        (index, option, value is not None)
        for index, option, value in _credential_words(argv, credential, complete)
        if not value
    ]


def unfilled_credentials(argv: Sequence[str], credential: Callable[[str], bool]) -> list[str]:
    """The API-key flags in `argv` whose value is a `${NAME}` nothing filled: the text
    itself would be the key (`-- --api-key '${API_KEY}'` typed in a shell, where systemd's
    Exec line would have filled it)."""
    return [
        option
        for _, option, value in _credential_words(argv, credential, complete=True)
        if value is not None and references.is_reference(value)
    ]
