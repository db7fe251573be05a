"""Just enough POSIX shell to read a server start script: words, quotes, variables, operators.

Redirections are dropped, pipes and `&` end a command; command substitution is refused.
Words keep their quoting until expansion, because `'$X'` and `"$X"` expand differently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

Segment = tuple[str, bool]  # text, and whether `$` expands in it
_VARIABLE = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))"
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ShellError(ValueError):
    """A construct this reader does not follow; the message names the line."""


@dataclass
class Word:
    segments: list[Segment] = field(default_factory=list)

    def add(self, text: str, expands: bool) -> None:
        if self.segments and self.segments[-1][1] == expands:
            self.segments[-1] = (self.segments[-1][0] + text, expands)
        else:
            self.segments.append((text, expands))

    def literal(self) -> str:
        return "".join(text for text, _ in self.segments)

    def assignment(self) -> tuple[str, Word] | None:
        """`NAME=value` when the name is unquoted: the name and the value's own word."""
        if not self.segments or not self.segments[0][1]:
            return None
        first, expands = self.segments[0]
        name, equals, rest = first.partition("=")
        if not equals or not _NAME.fullmatch(name):
            return None
        return name, Word([(rest, expands), *self.segments[1:]])

    def expand(
        self,
        lookup: Callable[[str], str | None],
        line: int,
        unset: Callable[[str], str] | None = None,
    ) -> str:
        """The word's value, `$NAME`, `${NAME}` and `${NAME:-default}` replaced.

        A variable `lookup` does not know becomes `unset(name)`, or an error without one.
        """
        out = []
        for text, expands in self.segments:
            if not expands:
                out.append(text)
                continue

            def value(match: re.Match[str]) -> str:
                name = match.group(1) or match.group(4)
                found = lookup(name)
                if match.group(2) == ":-" and not found:
                    return match.group(3)
                if match.group(2) == "-" and found is None:
                    return match.group(3)
                if found is not None:
                    return found
                if unset is None:
                    raise ShellError(f"line {line}: ${name} is not set in the script")
                return unset(name)

            out.append(_VARIABLE.sub(value, text))
            if "$" in _VARIABLE.sub("", text):
                raise ShellError(
                    f"line {line}: only $NAME, ${{NAME}} and ${{NAME:-default}} expand"
                )
        return "".join(out)


@dataclass
class Command:
    """One simple command: its words (assignments included) and the line it starts on."""

    line: int
    words: list[Word]
    piped: bool = False  # after a `|`: output plumbing such as `tee`


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1
        self.commands: list[Command] = []
        self.words: list[Word] = []
        self.word: Word | None = None
        self.start_line = 1
        self.piped = False

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.pos += 1
        if char == "\n":
            self.line += 1
        return char

    def current(self) -> Word:
        if self.word is None:
            self.word = Word()
            if not self.words:
                self.start_line = self.line
        return self.word

    def end_word(self) -> None:
        if self.word is not None:
            self.words.append(self.word)
            self.word = None

    def end_command(self, piped_next: bool = False) -> None:
        self.end_word()
        if self.words:
            self.commands.append(Command(self.start_line, self.words, self.piped))
        self.words, self.piped = [], piped_next

    def quoted(self, quote: str) -> None:
        start = self.line
        buffer: list[str] = []
        while True:
            char = self.take()
            if not char:
                raise ShellError(f"line {start}: unterminated {quote}")
            if char == quote:
                break
            if quote == '"' and char == "\\" and self.peek() and self.peek() in '$`"\\\n':
                escaped = self.take()
                if escaped != "\n":
                    self.current().add("".join(buffer), True)
                    self.current().add(escaped, False)
                    buffer = []
                continue
            if quote == '"' and (char == "`" or (char == "$" and self.peek() == "(")):
                raise ShellError(f"line {self.line}: command substitution is not supported")
            buffer.append(char)
        self.current().add("".join(buffer), quote == '"')

    def redirection(self) -> None:
        """Drop `[n]>target`, `>>`, `<`, `>&n`, `&>`: a start script's logging, not the server's."""
        if self.word is not None and self.word.literal().isdigit() and self.word.segments[0][1]:
            self.word = None  # the file descriptor number of `2>`
        self.end_word()
        while self.peek() and self.peek() in "<>&|":
            self.take()
        while self.peek() and self.peek() in " \t":
            self.take()
        target = Word()
        while self.peek() and self.peek() not in " \t\n;&|<>":
            target.add(self.take(), False)
        if not target.segments:
            raise ShellError(f"line {self.line}: redirection without a target")

    def run(self) -> list[Command]:
        while self.peek():
            char = self.peek()
            if char == "\\":
                self.take()
                escaped = self.take()
                if escaped != "\n":  # backslash-newline continues the line
                    self.current().add(escaped, False)
            elif char in " \t":
                self.take()
                self.end_word()
            elif char == "\n":
                self.take()
                self.end_command()
            elif char == "#" and self.word is None:
                while self.peek() and self.peek() != "\n":
                    self.take()
            elif char in "'\"":
                self.take()
                self.quoted(char)
            elif char == "`" or (char == "$" and self.peek(1) == "("):
                raise ShellError(f"line {self.line}: command substitution is not supported")
            elif char in "<>" or (char == "&" and self.peek(1) == ">"):
                self.redirection()
            elif char in ";&|":
                self.take()
                double = self.peek() == char
                if double:
                    self.take()
                self.end_command(piped_next=char == "|" and not double)
            else:
                self.current().add(self.take(), True)
        self.end_command()
        return self.commands


def parse(text: str) -> list[Command]:
    """The simple commands of a script, in order, with redirections removed."""
    return _Lexer(text).run()
