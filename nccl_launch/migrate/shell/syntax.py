"""Just enough POSIX shell to read a server start script: words, quotes, variables, operators.

Redirections are dropped and here-doc bodies skipped as data; `|`, `&&`, `||`, `;` and `&`
end a command; reserved words (`if`, `{`, ...) and `(` stand alone, and function bodies are
skipped, for the reader to refuse or follow. Words keep their quoting until expansion,
because `'$X'`, `"$X"` and `$X` expand differently; `$(...)` is refused only when expanded.
Each step consumes a run of text at once and joins buffers once: time is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from nccl_launch.digits import is_ascii_digits
from nccl_launch.migrate.shell.refused import shell_error

# Segment kinds: what expansion does to the text.
LITERAL = "'"  # single-quoted or escaped: as is
PLAIN = ""  # unquoted: variables expand, and bash would split their values
QUOTED = '"'  # double-quoted: variables expand, no splitting
COMMAND = "$("  # command substitution: refused when expanded
ARITHMETIC = "$(("
Segment = tuple[str, str]  # text, kind

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BLANKS = re.compile(r"[ \t]+")
_PLAIN_RUN = re.compile(r"[^ \t\n\\'\"`$<>;&|()]+")
_QUOTED_RUN = re.compile(r'[^"\\`$]+')
_STOPS = {"(": re.compile(r"[()'\"\\]"), "{": re.compile(r"[{}'\"\\]")}
_ESCAPED_IN_QUOTES = ("$", "`", '"', "\\", "\n")
_BACKTICK = re.compile(r"(?:[^`\\]|\\.)*`", re.DOTALL)
_REDIRECTION = re.compile(r"<<-|<<<|<<|<>|<&|>&|>>|>\||&>>|&>|<|>")
_OPERATOR = re.compile(r";;|&&|\|\||\|&|[;&|()]")
RESERVED = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "for", "do", "done",
     "case", "esac", "select", "function"}
)  # fmt: skip


@dataclass
class Word:
    segments: list[Segment] = field(default_factory=list)
    line: int = field(default=0, compare=False)  # where it starts

    def literal(self) -> str:
        return "".join(text for text, _ in self.segments)

    def bare(self) -> str | None:
        """The word's text when it is one unquoted run without `$`: a command name or keyword."""
        if len(self.segments) != 1 or self.segments[0][1] != PLAIN:
            return None
        text = self.segments[0][0]
        return None if "$" in text else text

    def assignment(self) -> tuple[str, Word, bool] | None:
        """`NAME=value` or `NAME+=value` when the name is unquoted: the name, the value's own
        word, and whether it appends."""
        if not self.segments or self.segments[0][1] != PLAIN:
            return None
        first, kind = self.segments[0]
        name, equals, rest = first.partition("=")
        appends = name.endswith("+")
        if not equals or not _NAME.fullmatch(name.removesuffix("+")):
            return None
        return name.removesuffix("+"), Word([(rest, kind), *self.segments[1:]]), appends


@dataclass
class Op:
    text: str  # `;`, a newline, `&`, `&&`, `||`, `|`, `(`, `)`, `;;`
    line: int


@dataclass
class Command:
    """One simple command (its words, assignments included), or a reserved word or `(`
    standing alone (`keyword`), or a function definition (`function`, its body skipped).
    `joiner` is the operator before it: `&&`, `||`, `|`, or "" at the start of a list."""

    line: int
    words: list[Word]
    joiner: str = ""
    background: bool = False  # ended by `&`
    pipes: bool = False  # ended by `|`: like `&`, it runs in a subshell
    keyword: str = ""
    function: str = ""

    @property
    def piped(self) -> bool:
        """After a `|`: output plumbing such as `tee`."""
        return self.joiner == "|"


def _merged(parts: list[Segment]) -> list[Segment]:
    """Adjacent parts of the same kind joined once (never string by string)."""
    segments: list[Segment] = []
    run: list[str] = []
    for index, (text, kind) in enumerate(parts):
        run.append(text)
        if index + 1 == len(parts) or parts[index + 1][1] != kind or kind in (COMMAND, ARITHMETIC):
            segments.append(("".join(run), kind))
            run = []
    return segments


class _Lexer:
    def __init__(self, text: str, line: int = 1) -> None:
        self.text, self.pos, self.line, self.word_line = text, 0, line, line
        self.parts: list[Segment] | None = None  # the word being read
        self.target: str | None = None  # a redirection waiting for its target word
        self.heredocs: list[tuple[str, bool]] = []  # delimiter, and whether tabs are stripped

    def advance(self, end: int) -> None:
        self.line += self.text.count("\n", self.pos, end)
        self.pos = end

    def add(self, text: str, kind: str) -> None:
        if self.parts is None:
            self.parts, self.word_line = [], self.line
        self.parts.append((text, kind))

    def finish_word(self) -> Word | None:
        """The word just read, unless it is a redirection's target (a here-doc's delimiter)."""
        if self.parts is None:
            return None
        word, self.parts = Word(_merged(self.parts), self.word_line), None
        if self.target is None:
            return word
        if self.target in ("<<", "<<-"):
            self.heredocs.append((word.literal(), self.target == "<<-"))
        self.target = None
        return None

    def no_target(self) -> None:
        if self.target is not None:
            raise shell_error("redirection-target", self.line, "redirection without a target")

    def skip_heredocs(self) -> None:
        """Here-doc bodies are data for their command, never code: skip to each delimiter."""
        for delimiter, strip_tabs in self.heredocs:
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end < 0 else end
                body_line = self.text[self.pos : end]
                self.advance(min(end + 1, len(self.text)))
                if (body_line.lstrip("\t") if strip_tabs else body_line) == delimiter:
                    break
        self.heredocs = []

    def tokens(self) -> Iterator[Word | Op]:
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in " \t\n;&|()<>":
                yield from self.boundary(char)
            else:
                self.word_part(char)
        word = self.finish_word()
        if word is not None:
            yield word
        self.no_target()

    def boundary(self, char: str) -> Iterator[Word | Op]:
        """Blanks, a newline, an operator or a redirection: each ends the word being read."""
        text, start = self.text, self.pos
        redirection = _REDIRECTION.match(text, start) if char in "<>&" else None
        descriptor = self.parts is not None and len(self.parts) == 1 and self.parts[0][1] == PLAIN
        if redirection and descriptor and is_ascii_digits(self.parts[0][0]):  # type: ignore[index]
            self.parts = None  # the `2` of `2>`
        word = self.finish_word()
        if word is not None:
            yield word
        if char in " \t":
            self.advance_run(_BLANKS)
            return
        self.no_target()
        if char == "\n":
            yield Op("\n", self.line)
            self.advance(start + 1)
            self.skip_heredocs()
        elif redirection and redirection.group() in "<>" and text[start + 1 : start + 2] == "(":
            raise shell_error(
                "process-substitution",
                self.line,
                f"process substitution {char}(...) is not followed",
                "put what it gives in the script",
            )
        elif redirection:
            self.target = redirection.group()
            self.advance(redirection.end())
        else:
            operator = _OPERATOR.match(text, start)  # every char of ";&|()" starts one
            end = operator.end() if operator else start + 1
            yield Op(text[start:end].replace("|&", "|"), self.line)
            self.advance(end)

    def word_part(self, char: str) -> None:
        text, start = self.text, self.pos
        if char == "\\":
            if text[start + 1 : start + 2] not in ("\n", ""):  # backslash-newline continues
                self.add(text[start + 1], LITERAL)
            self.advance(start + 2)
        elif char == "#" and self.parts is None:
            end = text.find("\n", start)
            self.advance(len(text) if end < 0 else end)
        elif char == "'":
            end = text.find("'", start + 1)
            if end < 0:
                raise shell_error("unclosed", self.line, "unterminated '")
            self.add(text[start + 1 : end], LITERAL)
            self.advance(end + 1)
        elif char == '"':
            self.double_quoted()
        elif char in "$`":
            self.dollar(PLAIN)
        else:
            self.add(text[start : self.advance_run(_PLAIN_RUN)], PLAIN)

    def advance_run(self, run: re.Pattern[str]) -> int:
        match = run.match(self.text, self.pos)
        self.advance(match.end() if match else self.pos + 1)
        return self.pos

    def double_quoted(self) -> None:
        opened = self.line
        self.add("", QUOTED)  # `""` is a word too
        self.advance(self.pos + 1)
        if not self.quoted_text('"', _ESCAPED_IN_QUOTES):
            raise shell_error("unclosed", opened, 'unterminated "')

    def quoted_text(self, stop: str, escaped: tuple[str, ...]) -> bool:
        """Text read as double quotes read it, where a backslash escapes only the `escaped`, up
        to and past `stop`: whether `stop` was found. Without one, a `"` opens nested quotes."""
        text = self.text
        while self.pos < len(text):
            char, start = text[self.pos], self.pos
            if char == stop:
                self.advance(start + 1)
                return True
            if char == '"':
                self.double_quoted()
            elif char == "\\" and text[start + 1 : start + 2] in escaped:
                if text[start + 1] != "\n":
                    self.add(text[start + 1], LITERAL)
                self.advance(start + 2)
            elif char == "\\":
                self.add("\\", QUOTED)
                self.advance(start + 1)
            elif char in "$`":
                self.dollar(QUOTED)
            else:
                self.add(text[start : self.advance_run(_QUOTED_RUN)], QUOTED)
        return False

    def dollar(self, kind: str) -> None:
        """`$((...))`, `$(...)`, a backquote, `${...}` or `$NAME`, read whole."""
        text, start = self.text, self.pos
        if text.startswith("$((", start):
            end = closing(text, start, self.line)
            self.add(text[start + 3 : end], ARITHMETIC)
            self.advance(end + 2)
        elif text.startswith("$(", start):
            end = closing(text, start, self.line)
            self.add(text[start + 2 : end], COMMAND)
            self.advance(end + 1)
        elif text[start] == "`":
            match = _BACKTICK.match(text, start + 1)
            if match is None:
                raise shell_error("unclosed", self.line, "unterminated `")
            self.add(text[start + 1 : match.end() - 1], COMMAND)
            self.advance(match.end())
        elif text.startswith("${", start):
            end = closing(text, start, self.line)
            self.add(text[start : end + 1], kind)
            self.advance(end + 1)
        else:
            name = _NAME.match(text, start + 1)
            end = name.end() if name else start + 1
            self.add(text[start:end], kind)
            self.advance(end)


_DOUBLE_QUOTED = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)


def closing(text: str, start: int, line: int) -> int:
    """Where the `)`, `))` or `}` that closes the `$(`, `$((` or `${` at `start` is: nested
    pairs, quotes and backslashes skipped, as bash finds it."""
    opens = "$((" if text.startswith("$((", start) else text[start : start + 2]
    index, depth, opener = start + len(opens), 0, opens[-1]
    while match := _STOPS[opener].search(text, index):
        char, index = match.group(), match.end()
        if char == "\\":
            index += 1
        elif char == "'":
            index = text.find("'", index) + 1 or len(text)
        elif char == '"':
            quoted = _DOUBLE_QUOTED.match(text, index)
            index = quoted.end() if quoted else len(text)
        elif char == opener:
            depth += 1
        elif depth:
            depth -= 1
        elif opens != "$((" or text.startswith("))", match.start()):
            return match.start()
        else:
            break
    closes = opens[1:].translate(str.maketrans("({", ")}"))
    raise shell_error("unclosed", line, f"{opens} without its closing {closes}")


def default_word(text: str, quoted: bool, line: int) -> Word:
    """The `word` of `${NAME:-word}` as bash reads it: within double quotes, as their text
    (a `'` is kept, a `\\}` escapes); unquoted, as a word whose blanks are its text."""
    lexer = _Lexer(text, line)
    lexer.add("", QUOTED if quoted else PLAIN)  # so a leading `#` is text, not a comment
    if quoted:
        lexer.quoted_text("", (*_ESCAPED_IN_QUOTES, "}"))
    while lexer.pos < len(text):
        lexer.word_part(text[lexer.pos])
    return Word(_merged(lexer.parts or []), line)


def _skip_body(tokens: Iterator[Word | Op], line: int) -> None:
    """Skip a function body up to the `}` that closes it: defining runs nothing."""
    depth, command_start = 1, True
    for token in tokens:
        if isinstance(token, Op):
            command_start = True
            continue
        bare = token.bare()
        if command_start and bare in ("{", "}"):
            depth += 1 if bare == "{" else -1
            if depth == 0:
                return
        command_start = bare in RESERVED
    raise shell_error("unclosed", line, "function without its closing }")


def _function(tokens: Iterator[Word | Op], name: str, line: int, parens: bool) -> Command:
    """After `name (` or `function name`: the rest of the header, and the body skipped."""
    token = next(tokens, None)
    if parens or (isinstance(token, Op) and token.text == "("):
        token = next(tokens, None) if not parens else token
        if not (isinstance(token, Op) and token.text == ")"):
            raise shell_error("function-syntax", line, f"`{name} (` is not a function definition")
        token = next(tokens, None)
    while isinstance(token, Op) and token.text == "\n":
        token = next(tokens, None)
    if not (isinstance(token, Word) and token.bare() == "{"):
        raise shell_error(
            "function-body", line, f"function {name}: only a {{ ... }} body is supported"
        )
    _skip_body(tokens, line)
    return Command(line, [], function=name)


def parse(text: str) -> Iterator[Command]:
    """The commands of a script in order, read as they are needed: nothing after the
    point where the reader stops (an `exit`) is even parsed, as in bash."""
    tokens = _Lexer(text).tokens()
    words: list[Word] = []
    joiner = ""
    for token in tokens:
        if isinstance(token, Word):
            bare = token.bare()
            if not words and bare == "function":
                name = next(tokens, None)
                if not isinstance(name, Word) or name.bare() is None:
                    raise shell_error("function-syntax", token.line, "function without a name")
                yield _function(tokens, str(name.bare()), token.line, parens=False)
            elif not words and bare in RESERVED:
                yield Command(token.line, [], joiner, keyword=str(bare))
                joiner = ""
            else:
                words.append(token)
            continue
        op = token.text
        if op == "(" and len(words) == 1 and words[0].bare():
            yield _function(tokens, str(words[0].bare()), token.line, parens=True)
            words = []
        elif op == "(" and words:
            raise shell_error("unexpected-operator", token.line, "unexpected `(`")
        elif op in ("(", ")"):
            if words:
                yield Command(words[0].line, words, joiner)
            yield Command(token.line, [], "" if words else joiner, keyword=op)
            words, joiner = [], ""
        elif words:
            yield Command(words[0].line, words, joiner, background=op == "&", pipes=op == "|")
            words, joiner = [], op if op in ("&&", "||", "|") else ""
        elif op in ("&&", "||", "|"):
            raise shell_error(
                "unexpected-operator", token.line, f"`{op}` without a command before it"
            )
        elif op != "\n":
            joiner = ""
    if words:
        yield Command(words[0].line, words, joiner)
