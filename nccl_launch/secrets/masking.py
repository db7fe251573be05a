"""Credentials kept out of what people read: values of credential-looking names, the user
info of URLs, the values of credential flags in an argv and of pairs named like credentials.
One rule, and the last step of every line for people (`for_people`). What is meant for the
server keeps the real values (`show`'s export formats and its JSON)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from nccl_launch.escaping import escaped

if TYPE_CHECKING:
    from pydantic import BaseModel

    from nccl_launch.kinds import ServerKind

MASK = "***"
# A word of a name (split at `_` or `-`) that ends in one of these names a credential:
# HF_TOKEN, OPENAI_API_KEY, APIKEY, DB_PASSWORD, --hf-token, --api-key. Ends, not contains,
# so that TOKENIZERS_PARALLELISM and --speculative-num-draft-tokens stay readable.
SECRET_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "KEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "PRIVATE",
)
# NCCL's variables tune a transport; none holds a credential (NCCL_IB_PKEY is a partition).
_NEVER = "NCCL_"
_WORDS = re.compile(r"[^A-Za-z0-9]+")
_SPACES = re.compile(r"(\s+)")  # kept, as a group, between the words split at them
# scheme://userinfo@host: the user info runs from the first `://` of a run of characters
# between spaces and quotes to its last `@`, and is masked whole (`https://***@host`): a
# password may hold an unencoded `/`, `?`, `#`, `@` or `:` (`http://u:p/ss?w@host`), and a
# user alone may be a token. Each run is looked at once, so a long word takes linear time.
_RUN = re.compile(r"[^\s'\"]+")
# A pair whose name holds a credential: `password=x`, `password = 'x y'`, a query's `?token=x`,
# a log's `api_key='x'`, a JSON or Python member `"password": "x"`; `name: x` unquoted is
# prose. A name starts only after a character no name holds, so names never overlap, and
# only the value of a credential's name is read: linear time. Matched apart, a value may
# itself name a pair (`--x=password=y`).
_NAME = re.compile(
    r"""(?<![\w%.-])(?:(?P<quote>["'])(?P<member>[\w%.-]+)(?P=quote)\s*[:=]|(?P<name>[\w%.-]+)\s*=)\s*"""
)
# A quoted value runs past its escaped quotes (`"pa\"ss"`), and to the end of the text when
# nothing closes it: what follows may all be the credential. In quotes that are escaped
# themselves, as a pair inside a JSON string is (`"password=\"pa\\\"ss\""`), its own
# escapes are doubled.
_VALUE = re.compile(
    r"""\\"(?:\\\\(?:\\.|[^\\])|\\[^"\\]|[^\\])*(?:\\")?"""
    r"""|"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|[^\s&;#"']+""",
    re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
# Inside a JSON or Python list, tuple or object (`["sk-1"]`, `('sk-1',)`, `{"v": "x"}`): a
# quoted text, with its escapes (`"a\\"]"`), or one character; the value runs to the bracket
# that closes its first.
_NESTED = re.compile(r""""(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|[^"']""", re.DOTALL)
_CLOSES = {"[": "]", "{": "}", "(": ")"}
_MEMBER_NAMED = re.compile(r"\s*:")  # after a quoted text, it named an object's member
# A value that only names a variable (`"$API_KEY"`, `'${API_KEY}'`, a hint's `"$API_KEY")`)
# holds no credential.
_REFERENCE = re.compile(r"""(["']?)\$\{?[A-Za-z_][A-Za-z0-9_]*\}?\1[).,]?""")
# A pair's value in capitals alone is prose's placeholder (`KEY=VALUE`, `API_KEY=VALUE`), and
# Python's None or JSON's null (`ServerArgs(admin_api_key=None)`) is no value.
_PLACEHOLDER = re.compile(r"[A-Z]+(?:_[A-Z]+)*[).,]?|None|null")


def _kinds() -> Iterable[ServerKind]:
    """The server kinds, each asked for its own credential flags: every kind's rules apply to
    every text (a profile's argv may hold another kind's flag in a pasted line).
    Imported when first asked: a TAB on a command's options masks nothing."""
    from nccl_launch.kinds import KINDS

    return KINDS


def _named_like_credential(flag: str) -> bool:
    """Whether `flag` is a server's own flag only named like a credential's."""
    return any(flag in kind.credentials.named_like for kind in _kinds())


def is_secret(name: str) -> bool:
    """Whether a variable or flag name looks like it holds a credential (NCCL_* never does)."""
    if name.startswith(_NEVER):
        return False
    words = _WORDS.split(name.upper())
    return any(word.endswith(SECRET_WORDS) for word in words if word)


def secret_name(name: str) -> str:
    """A variable's name masking hides: `name` when it names a secret (`API_KEY`), else
    `name` with `_SECRET` added (`WATERMARK_CONFIG_SECRET`)."""
    return name if is_secret(name) else f"{name}_SECRET"


def _names_credential(name: str) -> bool:
    """Whether a pair's name (`password`, `api_key`, `--hf-token`) holds a credential: not
    a server's flag only named like one (`speculative_token_map`)."""
    flag = "--" + unquote(name).lstrip("-").replace("_", "-").lower()
    return is_secret(unquote(name)) and not _named_like_credential(flag)


def _names_a_value(text: str) -> bool:
    """Whether a pair's value only names one: a variable or a placeholder."""
    return bool(_REFERENCE.fullmatch(text) or _PLACEHOLDER.fullmatch(text))


def _bracketed_end(text: str, start: int) -> int:
    """Where the list or object opening at `start` ends: after the bracket closing it, or at
    the end of `text` when none does (what follows may all be the credential)."""
    depth = 0
    for part in _NESTED.finditer(text, start):
        if part[0] in _CLOSES:
            depth += 1
        elif part[0] in _CLOSES.values():
            depth -= 1
            if depth == 0:
                return part.end()
    return len(text)


def _credential_pairs(text: str) -> list[tuple[int, int]]:
    """Where the values of `text`'s pairs whose names hold a credential start and end, in
    order. An unquoted value ends before the `)` and `,` that close what holds it
    (`f(token=x), y`)."""
    values: list[tuple[int, int]] = []
    for pair in _NAME.finditer(text):
        inside = values and pair.start() < values[-1][1]
        if inside or not _names_credential(pair["member"] or pair["name"]):
            continue
        if text[pair.end() : pair.end() + 1] in _CLOSES:  # a list or an object, masked whole
            values.append((pair.end(), _bracketed_end(text, pair.end())))
            continue
        value = _VALUE.match(text, pair.end())
        if value is None:
            continue
        written = value[0] if _quote(value[0]) else value[0].rstrip("),")
        shown = _inside(written)
        # None, masked before (`?token=***:`), or naming a value (`"$API_KEY"`, `VALUE`).
        if shown and not shown.startswith(MASK) and not _names_a_value(written):
            values.append((value.start(), value.start() + len(written)))
    return values


def _mask_pairs(text: str) -> str:
    parts, at = [], 0
    for start, end in _credential_pairs(text):
        quote = _quote(text[start:end])
        parts += [text[at:start], f"{quote}{MASK}{quote}"]
        at = end
    return "".join([*parts, text[at:]])


def _userinfo(run: str) -> tuple[int, int] | None:
    """Where the user info of a URL in `run` (no space, no quote) starts and ends."""
    start, end = run.find("://"), run.rfind("@")
    return (start + 3, end) if -1 < start < end - 3 else None


def _mask_url(match: re.Match[str]) -> str:
    found = _userinfo(match[0])
    return match[0] if found is None else f"{match[0][: found[0]]}{MASK}{match[0][found[1] :]}"


def _quote(written: str) -> str:
    """The quote a value is written in: `"`, `'`, an escaped `\\"`, or none."""
    return '\\"' if written.startswith('\\"') else written[:1] if written[:1] in "\"'" else ""


def _inside(written: str) -> str:
    """A value without its quotes (`_quote`), or as it is."""
    quote = _quote(written)
    return written[len(quote) :].removesuffix(quote) if quote else written


def _unquoted(written: str) -> set[str]:
    """A value as written (`"pa\\"ss"`, `"pa\\"ss` when unclosed) without its quotes, and as
    read, its escapes undone (`pa"ss`): a server may print either."""
    inner = _inside(written)
    return {inner, _ESCAPE.sub(r"\1", inner)}


def _passwords(text: str) -> set[str]:
    """What `mask_credentials` hides in `text`: each URL's password (its user info when it
    has none: a user alone may be a token), each credential pair's value, and each text
    quoted in a value that is a list or an object (`["k1", "k2"]`: a server may log them apart)."""
    found = set()
    for start, end in _credential_pairs(text):
        found |= _unquoted(text[start:end])
        if text[start] in _CLOSES:  # its quoted texts, but for the names of its members
            for part in _NESTED.finditer(text, start, end):
                if part[0][0] in "\"'" and not _MEMBER_NAMED.match(text, part.end()):
                    found |= _unquoted(part[0])
    for run in _RUN.findall(text):
        if (where := _userinfo(run)) is not None:
            user, colon, password = run[where[0] : where[1]].partition(":")
            found |= {password if colon else user} - {"", MASK}
    return found - {""}


def mask_urls(text: str) -> str:
    """`text` with the user info of each URL masked (`postgres://***@db/x`)."""
    return _RUN.sub(_mask_url, text)


def mask_credentials(text: str) -> str:
    """`text` with the user info of each URL (`postgres://***@db/x`) and the value of each
    pair named like a credential (`password=***`, `?token=***`, `"api_key": "***"`) masked."""
    return _mask_pairs(mask_urls(text))


def for_people(text: str) -> str:
    """A line as it leaves the program for people (printed, a message, a warning, a line of
    a file they read): the one last step, its URLs' user info and its credential pairs masked,
    then its control characters escaped. What was masked before is kept as it is."""
    return escaped(mask_credentials(text))


def masked_json(report: BaseModel, indent: int | None = 2, exclude: set[str] | None = None) -> str:
    """`report` as the JSON a command prints or writes (on one line without `indent`), each
    text in it (never a key) through the same last step as `for_people`'s lines; JSON
    escapes the control characters, and the bytes that were not UTF-8 (kept as surrogates),
    itself."""
    import json  # only for a JSON output: not on a TAB's path, which imports this module

    document = report.model_dump(mode="json", exclude=exclude)
    return json.dumps(masked_texts(document), indent=indent)


def masked_texts(value: Any, mask: Callable[[str], str] = mask_credentials) -> Any:
    """A JSON-able `value` with each text in it (never a key) masked by `mask`."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list):
        return [masked_texts(item, mask) for item in value]
    if isinstance(value, dict):
        return {key: masked_texts(item, mask) for key, item in value.items()}
    return value


def mask_value(name: str, value: str, held: bool = False) -> str:
    """A variable's value as people see it: masked whole for a secret name, or whatever its
    name when an env file of the profile holds it (`held`: those files are where a profile's
    secrets live), else masked as a command line (`EXTRA_ARGS="--api-key sk-1 --tp 8"`) with
    the passwords in it masked."""
    if held:
        return MASK
    if name.startswith(_NEVER):
        return value
    return MASK if is_secret(name) else mask_command_line(value)


def _secret_flag(word: str) -> bool:
    """`--api-key`, `--token=X`, `--admin-api` (a server's parser may read a prefix of its
    flags); not `--api-key:`, which names the flag in a message, nor a server's flag only
    named like a credential (`--speculative-token-map`)."""
    option = word.split("=", 1)[0]
    name = option.lstrip("-")
    if not word.startswith("-") or name.endswith(":") or _named_like_credential(option):
        return False
    return is_secret(name) or any(kind.credentials.reads_as_credential(option) for kind in _kinds())


def _credential_value(previous: str, word: str) -> bool:
    """Whether `word` is the value of credential flag `previous` (`--api-key X`): not another
    `--option`, nor a variable's name (`"$API_KEY"`), which holds no credential."""
    return (
        _secret_flag(previous)
        and "=" not in previous
        and not word.startswith("--")
        and not _REFERENCE.fullmatch(word)
    )


def _line_words(word: str) -> list[str]:
    """The words of a shell line, or of a text that is none (`can't`) between its spaces."""
    return _shell_words(word) or word.split()


def _holds_a_line(word: str) -> bool:
    """Whether an argv word is itself a shell line of words (`bash -c '... --api-key K'`)."""
    return _SPACES.search(word) is not None and len(_line_words(word)) > 1


def _lists_keys(option: str) -> bool:
    """Whether a server reads `option` as its API-key flag that takes several keys."""
    return any(
        kind.credentials.several_keys and kind.credentials.reads_as_api_key(option)
        for kind in _kinds()
    )


def credential_values(argv: Sequence[str]) -> dict[int, tuple[str, str]]:
    """The credential flags' values in `argv`, by the index of the word holding one, each
    with its flag: `--api-key X` (X's index), `--api-key=X` (its own) and each further key of
    a flag that takes several (`--api-key K1 K2`); a value that only names a variable
    (`${API_KEY}`) is none."""
    found = {}
    listing = None  # a flag taking one or more keys, its words up to the next option
    for index, word in enumerate(argv):
        option, equals, value = word.partition("=")
        before = argv[index - 1] if index else ""
        if _secret_flag(word) and equals and not _REFERENCE.fullmatch(value):
            found[index] = (option, value)
        elif _credential_value(before, word):
            found[index] = (before, word)
        elif listing is not None and not word.startswith("-") and not _REFERENCE.fullmatch(word):
            found[index] = (listing, word)
        if word.startswith("-"):  # `--api-key K1 K2` (`--api-key=K1` gives one)
            listing = word if not equals and _lists_keys(word) else None
    return found


def mask_argv(argv: Sequence[str]) -> list[str]:
    """An argv as people see it: the value of `--api-key X` or `--token=X` masked, and the
    credentials in every word; a word that is a shell line (`bash -c '... --api-key X'`) is
    masked as one."""
    masked: list[str] = []
    values = credential_values(argv)
    for index, word in enumerate(argv):
        if index in values:  # the word ends in the value: `--api-key=X` or `X`
            masked.append(word.removesuffix(values[index][1]) + MASK)
        elif _holds_a_line(word):
            masked.append(mask_command_line(word))
        else:
            masked.append(mask_credentials(word))
    return masked


def masked_values(argv: Sequence[str]) -> set[str]:
    """What `mask_argv` hides of `argv`: the value of each credential flag (`--api-key X`,
    `--admin-api=X`), each credential pair's value, each URL's password (a user alone when
    it has none), and what it hides of a shell line in a word."""
    hidden = set()
    values = credential_values(argv)
    for index, word in enumerate(argv):
        if index in values:
            hidden.add(values[index][1])
        elif _holds_a_line(word):
            hidden |= masked_values(_line_words(word)) | _passwords(word)
        else:
            hidden |= _passwords(word)
    return hidden


def mask_words(text: str) -> str:
    """A text of argv words (a server's message about an argv, a log line) as people see it:
    its words, between runs of any whitespace, masked as `mask_argv` masks an argv."""
    parts = _SPACES.split(text)
    parts[::2] = mask_argv(parts[::2])
    return mask_credentials("".join(parts))  # and the pairs spaced out: `password = x`


def _shell_words(text: str) -> list[str] | None:
    """`text` split as a shell splits it; None when it is no shell line (`can't`)."""
    try:
        return shlex.split(text)
    except ValueError:
        return None


def mask_command_line(text: str) -> str:
    """A text that may be a shell line (an entrypoint, a variable's value) as people see it:
    when a credential flag is among its shell words, masked as `mask_argv` masks them and
    quoted again (`--api-key 'sk 1'` is one value); else masked as `mask_words` masks it."""
    words = _shell_words(text)
    if words is None:  # not a shell line: `can't`
        return mask_words(text)
    masked = mask_argv(words)
    if masked == [mask_credentials(word) for word in words]:
        return mask_words(text)
    return mask_credentials(shlex.join(masked))  # and the pairs spaced out: `password = x`
