"""Text from profiles, processes, servers and files made safe to print: no control character
or undecodable byte reaches a terminal or a log raw."""

from __future__ import annotations

import shlex


def escaped(text: str) -> str:
    """`text` with each control character (newline, carriage return, ESC) and each byte that
    was not UTF-8 written as its Python escape (`\\n`, `\\x1b`, `\\udcff`), so that what a
    profile, a process, a server or a file holds cannot forge a line or a colour in a terminal
    or a log."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def not_utf8(text: str) -> str | None:
    """The first character of `text` that UTF-8 cannot hold, written as the byte it was read
    from (`\\xe9`: a byte that was not UTF-8, kept with surrogateescape) or as its escape (a
    lone surrogate); None when `text` is UTF-8 text."""
    for char in text:
        if 0xD800 <= ord(char) <= 0xDFFF:
            return _bash_escape(char) if 0xDC80 <= ord(char) <= 0xDCFF else repr(char)[1:-1]
    return None


def toml_escaped(text: str) -> str:
    """TOML written by tomli-w with each character that is not printable (bar newlines) as
    TOML's `\\uXXXX`: tomli-w escapes C0 controls but writes the rest (C1's CSI, U+2028) raw.
    They can only stand in its quoted strings, where TOML reads the escape back unchanged."""
    return "".join(c if c.isprintable() or c == "\n" else _toml_escape(c) for c in text)


def _toml_escape(char: str) -> str:
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


def _bash_escape(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    code = ord(char)  # bash reads \xHH as a byte, so above ASCII the code point is written,
    if 0xDC80 <= code <= 0xDCFF:  # but a byte that was not UTF-8 (surrogateescape) is the byte
        return f"\\x{code - 0xDC00:02x}"
    return repr(char)[1:-1] if code < 0x80 else f"\\U{code:08x}"


def shell_word(word: str) -> str:
    """One argv word as a shell line shows it: quoted as needed, and in bash's `$'...'` with
    C escapes when it holds a character that is not printable, so an `args` entry cannot
    forge a line or drive the terminal, and the line still pastes into bash as the argv."""
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(map(_bash_escape, word)) + "'"
