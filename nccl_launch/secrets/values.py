"""The secrets of a profile or a launch, decided once by masking's rules and each server
kind's facts (`secrets_of`): one frozen value handed to where text leaves the program, which
masks with it. A key this tool handed a server is masked in every form the server may print;
what a validation error echoes of a profile is masked here too. What a server wrote is
carried as it was written, apart from our prose (`Quoted`), and masked where it is shown."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from nccl_launch.secrets.masking import (
    MASK,
    is_secret,
    mask_argv,
    mask_command_line,
    mask_credentials,
    mask_urls,
    mask_value,
    mask_words,
    masked_values,
)
from nccl_launch.secrets.secret import Secret
from nccl_launch.serving import references

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema, SchemaSerializer

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

    def said(self, text: str) -> str:
        """A text the server wrote (its parser's answer, its error) as people see it:
        `known`, then its words masked as an argv's."""
        return mask_words(self.known(text))

    def lines(self, text: str) -> list[str]:
        """The lines of a log the server wrote as people see them: `known`, then the words of
        each line masked as an argv's."""
        return [mask_words(line) for line in self.known(text).splitlines()]

    def value(self, name: str, value: str) -> str | Secret:
        """The value of the variable `name` as it travels to people (`secret_value`), masked
        whatever its name where an env file of the profile holds it."""
        return secret_value(name, value, name in self.held)

    def quoting(self, *parts: str) -> Quoted:
        """Our prose and what a server or a user wrote, in turn (`prose, quote, prose, ...`),
        kept apart until a sink shows them (`Quoted`)."""
        return Quoted(self, parts)

    def quoting_texts(self, value: Any) -> Any:
        """A JSON-able `value` the server wrote (its parser's answer) with each text in it
        (never a key) quoted whole (`quoting("", text)`), masked where it is shown."""
        if isinstance(value, str):
            return self.quoting("", value)
        if isinstance(value, list):
            return [self.quoting_texts(item) for item in value]
        if isinstance(value, dict):
            return {key: self.quoting_texts(item) for key, item in value.items()}
        return value


@dataclass(frozen=True, repr=False)
class Quoted:
    """A text that quotes what a server or a user wrote, kept as written, apart from our prose
    around it, until it leaves the program: each sink (a line printed, JSON) shows it with
    `shown`, which masks the quotes with the launch's `secrets` and never the prose
    (`--api-key has no value` stays as it is). Turned into text any other way (`str`, an
    f-string), it raises: a sink that forgets to mask fails instead of leaking."""

    secrets: Secrets
    parts: tuple[str, ...]  # prose, quote, prose, quote, ...

    def shown(self) -> str:
        """The text as people see it: the prose as it is, each quote masked (`said`)."""
        said = self.secrets.said
        return "".join(said(part) if index % 2 else part for index, part in enumerate(self.parts))

    def lines(self) -> list[str]:
        """The lines of a log quoted whole (`quoting("", log)`) as people see them, each
        masked alone (`Secrets.lines`)."""
        return self.secrets.lines("".join(self.parts[1::2]))

    def __str__(self) -> str:
        raise TypeError("a quote is shown masked by its sink (Quoted.shown), never as it is")

    def __repr__(self) -> str:
        return f"Quoted({len(self.parts)} parts, not shown)"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """In a report: kept as it is, and written into JSON as `shown`."""
        from pydantic_core import core_schema  # only where a report holds one

        shown = core_schema.plain_serializer_function_ser_schema(cls.shown)
        return core_schema.is_instance_schema(cls, serialization=shown)

    @property
    def __pydantic_serializer__(self) -> SchemaSerializer:
        """Where no field's type names it (`Any`, `dict[str, Any]`), pydantic asks the value
        for its serializer: else it would dump a dataclass field by field, the quote as it is."""
        from pydantic_core import SchemaSerializer, core_schema

        shown = core_schema.plain_serializer_function_ser_schema(Quoted.shown)
        return SchemaSerializer(core_schema.any_schema(serialization=shown))


def shown(text: str | Quoted) -> str:
    """A text of a report as people see it: a `Quoted` masked (`Quoted.shown`), our own as it is."""
    return text.shown() if isinstance(text, Quoted) else text


def secrets_of(
    argv: Sequence[str],
    env: Mapping[str, str],
    held: Collection[str] = (),
    written: Sequence[str] = (),
) -> Secrets:
    """The secrets of `argv` as the server gets it and of the environment `env`, where the
    variables `held` (by the profile's env files and secret files: where its secrets live)
    are masked whatever their names. Its `values`: the credential flags' values, what the
    `${NAME}`s of `written` (the argv as the profile writes it, word for word with `argv`) were
    filled with in `argv`, at any length (`mask_known` masks a short one as a word; a value
    filled into a flag that is no credential's, `--served-model-name`, too), and the values
    of the variables masked whole, long enough to mean nothing else (an env file's `1`
    masked as a word would garble a log)."""
    shown = {key: mask_value(key, value, key in held) for key, value in env.items()}
    names = {key for key, value in env.items() if shown[key] != value}
    words = {index for index, word in enumerate(mask_argv(argv)) if word != argv[index]}
    filled = (references.read_back(written, argv) or {}).values()
    found = {value for key, value in env.items() if shown[key] == MASK}
    found = {value for value in found if len(value) >= SHORTEST_SECRET} | set(filled)
    values = (found | masked_values(argv)) - {""}
    return Secrets(frozenset(names), frozenset(held), frozenset(words), frozenset(values))


def secret_value(name: str, value: str, held: bool = False) -> str | Secret:
    """The value of the variable `name` as it travels from where it is read: a `Secret` that
    shows what people see of it (`mask_value`: the mask, or its credentials masked) where
    that differs from the value, else the value as it is."""
    shown = mask_value(name, value, held)
    return value if shown == value else Secret(value, shown)


def secret_because(name: str, value: str) -> Literal["name", "url", "pair", "flag"]:
    """Why masking hides the value of the variable `name` (one `secrets_of` names): its name
    names a credential, its value holds a URL's password or a pair named like a credential,
    else a credential flag's value."""
    if is_secret(name):
        return "name"
    if mask_urls(value) != value:
        return "url"
    return "pair" if mask_credentials(value) != value else "flag"


def secret_words(argv: Sequence[str]) -> list[str | Secret]:
    """An argv as it travels to people: each word masking hides of it (`mask_argv`: a
    credential flag's value, a URL's password) a `Secret` that shows the word masked."""
    masked = mask_argv(argv)
    return [
        word if shown == word else Secret(word, shown)
        for word, shown in zip(argv, masked, strict=True)
    ]


def unmasked_references(args: Sequence[str]) -> list[str]:
    """The `${NAME}`s of a profile's `args` that fill what masking hides of the argv (a
    credential flag's value, a URL's password) under a name masking shows (`API_HOST`, not
    `API_KEY`): the value each is filled with would be printed wherever the server's
    environment is."""
    marked = {name: f"ref-{name}-ref" for name in references.names(args)}
    hidden = " ".join(secrets_of([references.fill(arg, marked) for arg in args], {}).values)
    return [name for name, mark in marked.items() if mark in hidden and not is_secret(name)]


def unechoed(key: str, text: str, table: Any) -> str:
    """A validation error's `text` about `key` of a table, with the value of a secret-looking
    key masked where echoed."""
    if not isinstance(table, dict) or key not in table:
        return text
    hidden = text.replace(repr(table[key]), MASK) if is_secret(key) else text
    return mask_credentials(hidden)


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
