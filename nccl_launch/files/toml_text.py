"""TOML text parsed with its nesting bounded first: the one parse of every TOML file read
(a profile, a search space) and of every TOML text written (checked by reading it back)."""

from __future__ import annotations

import re
import tomllib
from typing import Any

# A profile's tables go three deep ([server.speculative] KEY); deeper is a mistake or an attack.
# tomllib's time grows with the square of a dotted key's parts (20,000 parts: 5 s and 1.5 GB)
# and it recurses once per nested array or inline table, so the text is scanned first.
MAX_NESTING = 16

# A string, a comment, a newline, a run of dots and bare key parts, and each of `[]{},=` is a
# token; finditer skips the rest (bare keys, scalars, spaces). So the scan reads the text as
# tomllib does: a dot or a bracket inside a string or a comment is no level. A quote that
# opens no string that ends (`open`) is a document tomllib refuses there: the scan stops,
# rather than try a string again from each quote after it (which would make it quadratic).
_TOKEN = re.compile(
    r"""
    (?P<string>  # possessive (*+): a quote that opens no string costs one pass, no memory
        \"\"\"(?:[^"\\]++|\\[\s\S]|"(?!""))*+\"\"\""{0,2}  # two more quotes are content
      | '''(?:[^']++|'(?!''))*+''''{0,2}
      | (?!\"\"\"|''')(?:"(?:[^"\\\n]++|\\.)*+"|'[^'\n]*+')
    )
    | (?P<open>["'])
    | (?P<comment>\#[^\n]*+)
    | (?P<newline>\n)
    | (?P<dots>\.(?:[ \t]*+[A-Za-z0-9_-]++[ \t]*+\.)*+)  # a dotted key's bare parts at once
    | (?P<punct>\[\[|\]\]|[\[\]{},=])
    """,
    re.VERBOSE,
)


class TooDeep(Exception):
    """Text nested deeper than MAX_NESTING, found on `line` (1-based)."""

    def __init__(self, line: int) -> None:
        super().__init__(
            f"nested deeper than {MAX_NESTING} levels (each part of a dotted key or [table] "
            "name is one, each array and inline table too)"
        )
        self.line = line


class _Levels:
    """Where a scan is: reading a key (or a [table] name) or a value, at which level, in which
    arrays and inline tables."""

    def __init__(self) -> None:
        self.key = True
        self.header = False
        self.table = 0  # the level of the last [table]: its keys start below it
        self.level = 1  # of the key part, or of the value, being read
        # Each array or inline table the value being read is in: "[" and the level of its
        # items, or "{" and its own level (its keys start below it).
        self.within: list[tuple[str, int]] = []

    def newline(self) -> None:
        if not self.within:  # a new line of keys (an array's items may go on for lines)
            self.key, self.header, self.level = True, False, self.table + 1

    def in_key(self, word: str) -> None:
        if word in ("[", "[[") and not self.within:
            self.header, self.level = True, len(word)  # `[[a]]`: the list and its element
        elif word in ("]", "]]") and self.header:
            self.key = self.header = False
            self.table = self.level
        elif word == "=":
            self.key = False
        elif word == "}" and self.within:  # {}
            self.within.pop()
            self.key = False

    def in_value(self, word: str) -> None:
        if word in ("[", "[["):
            for _ in word:
                self.level += 1
                self.within.append(("[", self.level))
        elif word == "{":
            self.within.append(("{", self.level))
            self.key, self.level = True, self.level + 1
        elif word in ("]", "]]", "}"):
            del self.within[-len(word) :]
        elif word == "," and self.within:
            opened, self.level = self.within[-1]
            self.key = opened == "{"
            if self.key:  # an inline table's next key starts below it
                self.level += 1


def check_nesting(text: str) -> None:
    """TooDeep when a key, a table header or a value of `text` lies deeper than MAX_NESTING,
    counted as the text spells it, in one pass that stops at the first level too deep."""
    line = 1
    levels = _Levels()
    for token in _TOKEN.finditer(text):
        kind, word = token.lastgroup, token.group()
        if kind == "open":
            return
        if kind == "newline":
            line += 1
            levels.newline()
            continue
        line += word.count("\n")  # a multi-line string's
        if kind == "dots" and levels.key:
            levels.level += word.count(".")
        elif kind == "punct":
            (levels.in_key if levels.key else levels.in_value)(word)
        if levels.level > MAX_NESTING:
            raise TooDeep(line)


def parse_toml(text: str) -> dict[str, Any]:
    """`text` as TOML data. TooDeep past MAX_NESTING; tomllib.TOMLDecodeError when it is not
    TOML; ValueError for an integer of thousands of digits (Python's limit on an int's)."""
    check_nesting(text)
    return tomllib.loads(text)
