"""Text from profiles, processes, servers and files made safe to print: no control character
or undecodable byte reaches a terminal or a log raw."""

from __future__ import annotations


def escaped(text: str) -> str:
    """`text` with each control character (newline, carriage return, ESC) and each byte that
    was not UTF-8 written as its Python escape (`\\n`, `\\x1b`, `\\udcff`), so that what a
    profile, a process, a server or a file holds cannot forge a line or a colour in a terminal
    or a log."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
