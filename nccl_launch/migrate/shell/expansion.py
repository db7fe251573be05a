"""A word's value as bash expands it: `~`, `$NAME`, `${NAME:-default}`, `$((...))` (computed
by `arithmetic`); and the arguments a command's word becomes, or a refusal where bash would
make others."""

from __future__ import annotations

import re
from collections.abc import Callable

from nccl_launch.findings import Finding, Refused
from nccl_launch.migrate.shell import syntax
from nccl_launch.migrate.shell.arithmetic import arithmetic
from nccl_launch.migrate.shell.refused import shell_error

Lookup = Callable[[str], "str | None"]
# `$NAME`, or `${NAME` and what follows it: `}`, or `:-` or `-` before a default word
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(\}|:?-)|([A-Za-z_][A-Za-z0-9_]*))")
_MOST_IN_DEFAULT = 32  # `${...}` inside one default word: more is refused, so no deep recursion
DEFAULT_IFS = " \t\n"  # bash's IFS when the script sets none: it ignores the caller's
# `{a,b}` or `{1..3}` with unquoted braces: bash makes one argument of each item.
_BRACES = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_QUOTED = "\x01"  # stands for a quoted character, which no expansion treats as special
# `$(cat FILE)` or `$(< FILE)`: a secret read from a file that holds just it (a Secret
# volume's, systemd's LoadCredential='s), FILE one plain or quoted word that expands nothing.
_SECRET_READ = re.compile(
    r"""[ \t]*(?:cat[ \t]+|<[ \t]*)(?:([A-Za-z0-9_@%+=:,./-]+)|'([^']+)'|"([^"$`\\]+)")[ \t]*"""
)
# What `lookup` is asked for `$(cat FILE)`: this, then FILE; it answers with the value.
SECRET_FILE = "\x00secret file "  # noqa: S105 (a marker, no password)
FOLLOWED = (
    "only a secret read from a file in the server's command, or into a variable it uses "
    "(NAME=$(cat FILE)), is followed: $(cat FILE) or $(< FILE), which becomes the profile's "
    "secret_files"
)


UNSET = "\x00"  # stands for a variable a script reads from its caller


def from_caller(name: str) -> str:
    """What a variable the script reads from its caller expands to."""
    return UNSET + name


def known(word: str, where: str = "") -> str:
    """A word with every variable resolved; the caller-provided ones are refused at `where`."""
    if UNSET in word:
        name = re.split(r"[^A-Za-z0-9_]", word.split(UNSET, 1)[1])[0]
        message = f"${name} is not set in the script or this environment"
        raise Refused(Finding("unset-variable", where, message))
    return word


def expand(
    word: syntax.Word,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None = None,
    assignment: bool = False,
) -> str:
    """The word's value, `~`, `$NAME`, `${NAME}`, `${NAME:-default}` and `$((...))` replaced.

    A variable `lookup` does not know becomes `unset(name)`, or an error without one. An
    `assignment`'s value also expands `~` after each unquoted `:`, as bash does.
    """
    return "".join(text for text, _ in _expanded(word, lookup, line, unset, None, assignment))


def arguments(
    word: syntax.Word,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None = None,
    ifs: str = DEFAULT_IFS,
    glob: bool = True,
) -> list[str]:
    """The arguments a command's word becomes in bash: none for an unquoted expansion that is
    empty, else one; refused (naming the line) where bash would make others of it: an
    unquoted value holding a character of `ifs`, a brace expansion, or a glob (`*`, `?`,
    `[...]` unquoted; what it matches depends on the files at start time), unless not `glob`
    (`set -f`). A word like an assignment (`a=~/x`) expands `~` after each `:` too."""
    named = word.assignment()
    if named is None:
        pieces = _expanded(word, lookup, line, unset, ifs, assignment=False)
    else:
        name, value, appends = named
        equals = "+=" if appends else "="
        pieces = [(name + equals, True), *_expanded(value, lookup, line, unset, ifs, True)]
    text = "".join(text for text, _ in pieces)
    if all(plain for _, plain in pieces) and not text:
        return []
    refuse_braces(word, line)
    unquoted = "".join(text if plain else _QUOTED * len(text) for text, plain in pieces)
    if glob and _is_pattern(unquoted):
        raise shell_error(
            "glob",
            line,
            f"`{word.literal()}` is a glob: bash passes the files it matches when the server "
            "starts",
            "quote it, or write them out",
        )
    return [text]


def _is_pattern(text: str) -> bool:
    """Whether unquoted `text` is a pattern bash matches against file names: a `*`, a `?`, or
    a `[` with a `]` after it (in linear time: a 1 MiB script may hold one long word)."""
    bracket = text.find("[")
    return "*" in text or "?" in text or (bracket >= 0 and "]" in text[bracket + 1 :])


def refuse_braces(word: syntax.Word, line: int) -> None:
    """Refuse a word bash brace-expands (`{a,b}`, `{1..3}`): a command's, or a declaration
    builtin's (`export A={a,b}` is `export A=a A=b`)."""
    raw = "".join(
        _masked(text, line) if kind == syntax.PLAIN else _QUOTED for text, kind in word.segments
    )
    if _BRACES.search(raw):
        raise shell_error(
            "brace-expansion",
            line,
            f"`{word.literal()}` is a brace expansion: bash passes each word it expands to",
            "quote it, or write them out",
        )


def _masked(text: str, line: int) -> str:
    """`text` with each `${...}` in it hidden as quoted characters, its length kept: what
    bash does with the text around the expansions is not done to the default words."""
    out, index = [], 0
    while (start := text.find("${", index)) >= 0:
        end = syntax.closing(text, start, line) + 1
        out += [text[index:start], _QUOTED * (end - start)]
        index = end
    return "".join(out) + text[index:]


def _expanded(
    word: syntax.Word,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None,
    ifs: str | None,
    assignment: bool,
) -> list[tuple[str, bool]]:
    """The word's expanded pieces, each with whether bash would glob it (unquoted). `ifs`:
    the word is a command's, whose unquoted values bash splits at these characters."""
    out: list[tuple[str, bool]] = []
    for index, (text, kind) in enumerate(word.segments):
        if kind == syntax.LITERAL:
            out.append((text, False))
        elif kind == syntax.COMMAND:
            out.append((_secret_read(text, lookup, line, assignment), False))
        elif kind == syntax.ARITHMETIC:
            out.append((str(arithmetic(text, lookup, line)), False))
        elif kind == syntax.QUOTED:
            out += _expand_text(text, lookup, line, unset, None, None)
        else:
            last = index + 1 == len(word.segments)
            for piece in _tildes(text, index == 0, last, assignment, line):
                if piece is None:
                    out.append((_home(lookup, line), False))
                else:
                    out += _expand_text(piece, lookup, line, unset, ifs, assignment)
    return out


def secret_read(word: syntax.Word) -> str | None:
    """The file a word is a read of, whole (`$(cat FILE)`, `"$(< FILE)"`), else None."""
    commands = [text for text, kind in word.segments if kind == syntax.COMMAND]
    if len(commands) != 1 or any(text for text, kind in word.segments if kind != syntax.COMMAND):
        return None
    read = _SECRET_READ.fullmatch(commands[0])
    return next(path for path in read.groups() if path) if read else None


def _secret_read(text: str, lookup: Lookup, line: int, assignment: bool) -> str:
    """What `lookup` gives for the file `$(cat FILE)` or `$(< FILE)` reads, in a command's
    word; any other command substitution, or one in a variable's value, is refused."""
    read = _SECRET_READ.fullmatch(text)
    if read is None or assignment:
        where = " in a variable's value" if read else ""
        raise shell_error(
            "command-substitution", line, f"command substitution is not supported{where}", FOLLOWED
        )
    value = lookup(SECRET_FILE + next(path for path in read.groups() if path))
    if value is None:
        raise shell_error("command-substitution", line, "command substitution is not supported")
    return value


def _tildes(text: str, first: bool, last: bool, assignment: bool, line: int) -> list[str | None]:
    """Unquoted `text` cut at each `~` bash expands (None): at the start of the word and, in
    an assignment, after each `:`. `~"/x"` stays as it is; `~user`, `~+` are refused."""
    starts = [0] if first and text.startswith("~") else []
    masked = _masked(text, line)
    if assignment:
        starts += [match.start() + 1 for match in re.finditer(":~", masked)]
    stop = re.compile("[/:]" if assignment else "/")
    pieces: list[str | None] = []
    done = 0
    for start in starts:
        found = stop.search(masked, start)
        end = found.start() if found else len(text)
        if end == len(text) and not last:
            continue  # quoted text follows: bash leaves the `~`
        if end - start > 1:
            raise shell_error(
                "tilde",
                line,
                f"{text[start:end]} is not expanded here: only ~ and ~/ (as $HOME) are",
                "write the path",
            )
        pieces += [text[done:start], None]
        done = end
    return [*pieces, text[done:]]


def _home(lookup: Lookup, line: int) -> str:
    home = lookup("HOME")
    if home is None:
        raise shell_error("home-unset", line, "~ with $HOME not set", "write the path")
    return home


def _expand_text(
    text: str,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None,
    ifs: str | None,
    assignment: bool | None,
) -> list[tuple[str, bool]]:
    """Text's `$NAME`, `${NAME}` and `${NAME:-word}` expanded, in pieces as `_expanded`'s.
    `assignment` None: the text is double-quoted, and so is a default word in it."""
    plain = assignment is not None
    out: list[tuple[str, bool]] = []
    index = 0
    while (start := text.find("$", index)) >= 0:
        match = _VARIABLE.match(text, start)
        if match is None:
            raise shell_error(
                "parameter-expansion", line, "only $NAME, ${NAME} and ${NAME:-default} expand"
            )
        out.append((text[index:start], plain))
        name, operator, index = match.group(1) or match.group(3), match.group(2), match.end()
        found = lookup(name)
        if operator in ("-", ":-"):
            index = syntax.closing(text, start, line) + 1
            if found is None or (operator == ":-" and not found):
                word = text[match.end() : index - 1]
                out += _default(text[start:index], word, lookup, line, unset, ifs, assignment)
                continue
        if found is None:
            if unset is None:
                raise shell_error("unset-variable", line, f"${name} is not set in the script")
            found = unset(name)
        elif ifs:
            _refuse_split(found, f"${name}", ifs, line)
        out.append((found, plain))
    return [*out, (text[index:], plain)]


def _default(
    expansion: str,
    word_text: str,
    lookup: Lookup,
    line: int,
    unset: Callable[[str], str] | None,
    ifs: str | None,
    assignment: bool | None,
) -> list[tuple[str, bool]]:
    """The pieces of `expansion`'s (`${NAME:-word}`'s) default word, expanded as bash does:
    tilde, variables, arithmetic and quotes, the same as a word's."""
    if word_text.count("${") > _MOST_IN_DEFAULT:
        raise shell_error(
            "default-word",
            line,
            f"a default word with more than {_MOST_IN_DEFAULT} ${{...}} in it is not followed",
            "write the value",
        )
    word = syntax.default_word(word_text, assignment is None, line)
    pieces = _expanded(word, lookup, line, unset, ifs, bool(assignment))
    for value, plain in pieces:
        if ifs and plain:
            _refuse_split(value, expansion, ifs, line)
    return pieces


def _refuse_split(value: str, shown: str, ifs: str, line: int) -> None:
    """Refuse an unquoted `value` bash would split into several arguments at `ifs`."""
    if any(char in ifs for char in value):
        holds = "blanks" if ifs == DEFAULT_IFS else f"a character of IFS ({ifs!r})"
        raise shell_error(
            "word-split",
            line,
            f"{shown} holds {holds} and is not quoted, so bash splits it into several arguments",
            f'quote it ("{shown}") or write the words out',
        )


def references(word: syntax.Word, name: str) -> bool:
    """Whether the word reads variable `name` (`$NAME`, `${NAME...}`)."""
    return re.search(rf"\$\{{?{name}\b", word.literal()) is not None
