"""A word's value as bash expands it: `~`, `$NAME`, `${NAME:-default}`, `$((...))`."""

from __future__ import annotations

import re
from collections.abc import Callable

from nccl_launch.migrate import shell
from nccl_launch.migrate.arithmetic import Lookup, arithmetic

_VARIABLE = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))"
)


def expand(
    word: shell.Word,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None = None,
    split: bool = False,
    assignment: bool = False,
) -> str:
    """The word's value, `~`, `$NAME`, `${NAME}`, `${NAME:-default}` and `$((...))` replaced.

    A variable `lookup` does not know becomes `unset(name)`, or an error without one. With
    `split` (a command's word), an unquoted value holding blanks is refused: bash would split
    it into several arguments. An `assignment`'s value, or a command's word that looks like
    one (`a=~/x`), also expands `~` after each unquoted `:`, as bash does.
    """
    named = word.assignment()
    if split and named is not None:
        name, value, appends = named
        equals = "+=" if appends else "="
        return name + equals + expand(value, lookup, line, unset, split, assignment=True)
    out = []
    for index, (text, kind) in enumerate(word.segments):
        if kind == shell.LITERAL:
            out.append(text)
        elif kind == shell.COMMAND:
            raise shell.ShellError(f"line {line}: command substitution is not supported")
        elif kind == shell.ARITHMETIC:
            out.append(str(arithmetic(text, lookup, line)))
        elif kind == shell.QUOTED:
            out.append(_expand_text(text, False, lookup, line, unset))
        else:
            last = index + 1 == len(word.segments)
            for piece in _tildes(text, index == 0, last, assignment, line):
                out.append(
                    _home(lookup, line)
                    if piece is None
                    else _expand_text(piece, split, lookup, line, unset)
                )
    return "".join(out)


def _tildes(text: str, first: bool, last: bool, assignment: bool, line: int) -> list[str | None]:
    """Unquoted `text` cut at each `~` bash expands (None): at the start of the word and, in
    an assignment, after each `:`. `~"/x"` stays as it is; `~user`, `~+` are refused."""
    starts = [0] if first and text.startswith("~") else []
    if assignment:
        starts += [match.start() + 1 for match in re.finditer(":~", text)]
    stop = re.compile("[/:]" if assignment else "/")
    pieces: list[str | None] = []
    done = 0
    for start in starts:
        found = stop.search(text, start)
        end = found.start() if found else len(text)
        if end == len(text) and not last:
            continue  # quoted text follows: bash leaves the `~`
        if end - start > 1:
            raise shell.ShellError(
                f"line {line}: {text[start:end]} is not expanded here: only ~ and ~/ (as $HOME) "
                "are; write the path"
            )
        pieces += [text[done:start], None]
        done = end
    return [*pieces, text[done:]]


def _home(lookup: Lookup, line: int) -> str:
    home = lookup("HOME")
    if home is None:
        raise shell.ShellError(f"line {line}: ~ with $HOME not set; write the path")
    return home


def _expand_text(
    text: str, split: bool, lookup: Lookup, line: int, unset: Callable[[str], str] | None
) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        found = lookup(name)
        if (match.group(2) == ":-" and not found) or (match.group(2) == "-" and found is None):
            found = match.group(3)
        if found is None:
            if unset is None:
                raise shell.ShellError(f"line {line}: ${name} is not set in the script")
            return unset(name)
        if split and re.search(r"[ \t\n]", found):
            raise shell.ShellError(
                f"line {line}: ${name} holds blanks and is not quoted, so bash splits it into "
                f'several arguments; quote it ("${name}") or write the words out'
            )
        return found

    expanded = _VARIABLE.sub(value, text)
    if "$" in _VARIABLE.sub("", text):
        raise shell.ShellError(f"line {line}: only $NAME, ${{NAME}} and ${{NAME:-default}} expand")
    return expanded


def references(word: shell.Word, name: str) -> bool:
    """Whether the word reads variable `name` (`$NAME`, `${NAME...}`)."""
    return re.search(rf"\$\{{?{name}\b", word.literal()) is not None
