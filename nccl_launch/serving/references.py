"""`${NAME}` in a profile's `[server] args`: a value filled in at start from the env files the
profile names, so that a secret lives in one file of the host while the profile (its digest,
`show`, `diff`, every report) holds only the name. `$$` stands for one `$`; any other `$` is
itself."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # a variable's name
# `${NAME}`, its one group the whole of it: the form systemd's Exec lines expand too.
REFERENCE = re.compile(rf"(\$\{{{_NAME}\}})")
# `$$`, `${NAME}`, or a `${` that opens no reference (group 3: an error).
_DOLLAR = re.compile(rf"\$(?:(\$)|\{{({_NAME})\}}|(\{{))")
BAD_REFERENCE = (
    "'${' opens no reference (valid: ${NAME}, a name of letters, digits and '_', closed by "
    "'}'); write $${ for a literal '${'"
)


def _replace(word: str, value: Callable[[str], str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        if match.group(3):
            raise ValueError(BAD_REFERENCE)
        return value(match.group(2))

    return _DOLLAR.sub(one, word)


def names(words: Iterable[str]) -> list[str]:
    """The names `words` refer to, each once, in order; ValueError for a `${` that opens none."""
    found: dict[str, None] = {}

    def note(name: str) -> str:
        found[name] = None
        return ""

    for word in words:
        _replace(word, note)
    return list(found)


def is_reference(word: str) -> bool:
    """Whether `word` is one `${NAME}` and nothing else."""
    return REFERENCE.fullmatch(word) is not None


def fill(word: str, values: dict[str, str]) -> str:
    """`word` with each `${NAME}` replaced by its value in `values` (KeyError for a name it
    lacks) and `$$` by `$`: one argument, never split or expanded again."""
    return _replace(word, values.__getitem__)


def _pattern(word: str) -> tuple[re.Pattern[str], list[str]]:
    """What `word` reads as once filled: its text as it is, each `${NAME}` a group of any
    text; and the names of its groups, in order."""
    parts, names, at = [], [], 0
    for match in _DOLLAR.finditer(word):
        reads = "(.*?)" if match[2] else re.escape("$" if match[1] else match[0])
        parts += [re.escape(word[at : match.start()]), reads]
        names += [match[2]] if match[2] else []
        at = match.end()
    return re.compile("".join([*parts, re.escape(word[at:])]), re.DOTALL), names


def read_back(written: Sequence[str], argv: Sequence[str]) -> dict[str, str] | None:
    """Each `${NAME}` of `written` and what it was filled with in `argv` (a command line
    read back), word for word: None unless each word of `written` reads as the word of
    `argv` at its index, each reference as any text (a profile edited since is no guide to
    its secrets)."""
    if len(argv) < len(written):
        return None
    found: dict[str, str] = {}
    for word, filled in zip(written, argv, strict=False):
        pattern, names = _pattern(word)
        match = pattern.fullmatch(filled)
        if match is None:
            return None
        found.update(zip(names, match.groups(), strict=True))
    return found


def literal(text: str) -> str:
    """`text` written so that `fill` gives it back unchanged: each `$` before a `$` or a `{`
    doubled."""
    return re.sub(r"\$(?=[${])", "$$", text)
