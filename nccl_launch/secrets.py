"""The secrets of a profile or a launch, decided once by masking's rules and each server
kind's facts (`secrets_of`): one frozen value handed to where text leaves the program, which
masks with it. A key this tool handed a server is masked in every form the server may print;
what a validation error echoes of a profile is masked here too."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nccl_launch.masking import (
    MASK,
    is_secret,
    mask_argv,
    mask_command_line,
    mask_credentials,
    mask_value,
    mask_words,
    masked_values,
)

SHORTEST_SECRET = 8  # a shorter value (`1`, `true`) masked wherever it appears garbles a log


def _forms(secret: str) -> set[str]:
    """`secret` as a server may log it: as given, and quoted by Python's repr or by JSON
    (`it\\'s`, `say \\"x\\"`, `\\t`), without the quotes."""
    import json  # only for masking a log: not on a TAB's path, which imports this module

    return {
        secret,
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }


def mask_known(text: str, secrets: Collection[str]) -> str:
    """`text` with each of the `secrets` a command knows it handed out (a server's key, an env
    file's values) masked in each form a server may log it (`_forms`): anywhere when long
    enough to mean nothing else, else wherever no letter, digit or `_` touches it
    (`['k3y']`, `--api-keyy k3y`, `key=k3y`), so that `k3ys` stays a word."""
    forms = {form for secret in secrets if secret for form in _forms(secret)}
    for form in sorted(forms, key=len, reverse=True):
        if len(form) >= SHORTEST_SECRET:
            text = text.replace(form, MASK)
        else:
            text = re.sub(rf"(?<!\w){re.escape(form)}(?!\w)", MASK, text)
    return text


@dataclass(frozen=True)
class Secrets:
    """What people must not see of an environment and an argv (`secrets_of`)."""

    # The variables people see masked, whole (a secret's name, an env file's) or in part,
    # and those masked whatever their names: set by an env file of the profile.
    names: frozenset[str]
    held: frozenset[str]
    # The words of the argv people see masked: a credential flag's value, a URL's password.
    words: frozenset[int]
    # What the server is given that people must not see, which it may print in forms no
    # rule of masking knows (`ServerArgs(..., api_key='...')`, `unrecognized arguments: ...`).
    values: frozenset[str]

    def __bool__(self) -> bool:
        """Whether any variable or word of the argv holds a secret."""
        return bool(self.names or self.words)

    def known(self, text: str) -> str:
        """A text the server wrote with the `values` masked in each form it may write them."""
        return mask_known(text, self.values)

    def lines(self, text: str) -> list[str]:
        """The lines of a text the server wrote (a log, its parser's answer) as people see
        them: `known`, then the words of each masked as an argv's."""
        return [mask_words(line) for line in self.known(text).splitlines()]


def secrets_of(
    argv: Sequence[str],
    env: Mapping[str, str],
    held: Collection[str] = (),
    filled: Collection[str] = (),
) -> Secrets:
    """The secrets of `argv` as the server gets it and of the environment `env`, where the
    variables `held` (by the profile's env files: where its secrets live) are masked whatever
    their names. Its `values`: the credential flags' values and what the `${NAME}` of its
    args were `filled` with, at any length (`mask_known` masks a short one as a word), and
    the values of the variables masked whole, long enough to mean nothing else (an env
    file's `1` masked as a word would garble a log)."""
    shown = {key: mask_value(key, value, key in held) for key, value in env.items()}
    names = {key for key, value in env.items() if shown[key] != value}
    words = {index for index, word in enumerate(mask_argv(argv)) if word != argv[index]}
    found = {
        value
        for key, value in env.items()
        if key in filled or (shown[key] == MASK and len(value) >= SHORTEST_SECRET)
    }
    values = (found | masked_values(argv)) - {""}
    return Secrets(frozenset(names), frozenset(held), frozenset(words), frozenset(values))


def unechoed(message: str, table: Any) -> str:
    """A validation error's `KEY: message` about a table, with the value of a secret-looking
    KEY masked where echoed."""
    name, colon, text = message.partition(": ")
    if not colon or not isinstance(table, dict) or name not in table:
        return message
    value = table[name]
    hidden = text.replace(repr(value), MASK) if is_secret(name) else text
    return f"{name}: {mask_credentials(hidden)}"


def _masked_items(items: list[Any]) -> list[Any]:
    """A list as an error echoes it: masked as an argv (`["--api-key", 1234]` hides 1234)."""
    masked = mask_argv([str(item) for item in items])
    return [
        item if shown == str(item) else shown for item, shown in zip(items, masked, strict=True)
    ]


def echoed_input(loc: tuple[str | int, ...], value: Any, within: Any) -> str:
    """The offending value at `loc` (in the list or table `within`) as a validation error
    echoes it: masked under a secret-looking key, where it follows a credential flag in its
    list, and as an argv or a shell line itself."""
    if any(is_secret(str(part)) for part in loc):
        return MASK
    if isinstance(within, list) and isinstance(loc[-1], int):
        value = _masked_items(within)[loc[-1]]
    if isinstance(value, list):
        value = _masked_items(value)
    if isinstance(value, str):  # `args = "--api-key X"` is echoed as one string
        value = mask_command_line(value)
    return mask_credentials(repr(value))
