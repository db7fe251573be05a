"""`$((...))` as bash computes it, for the few operators a start script uses."""

from __future__ import annotations

import re
from collections.abc import Callable

from nccl_launch.migrate.shell.refused import ShellError, shell_error

_TOKEN = re.compile(r"[ \t\n]*(?:([0-9]+)|\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?|([-+*/%()]))")
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]{0,18})")
_INT64 = 1 << 64
_ONLY = "only + - * / % ( ), decimal numbers and variables are evaluated"


def arithmetic(text: str, lookup: Callable[[str], str | None], line: int) -> int:
    """`$((text))` as bash computes it (64 bits, division truncating) for + - * / % and
    parentheses over decimal numbers and variables holding one; anything else is refused."""
    shown = f"$(({text}))"
    tokens: list[int | str] = []
    index, end = 0, len(text.rstrip(" \t\n"))
    while index < end:
        match = _TOKEN.match(text, index)
        if match is None:
            raise shell_error("arithmetic", line, f"{shown}: {_ONLY}", "write the value")
        number, name, operator = match.groups()
        if name is not None:
            number = lookup(name)
            if number is None:
                raise shell_error(
                    "unset-variable", line, f"{shown}: ${name} is not set in the script"
                )
        if number is not None:
            if not _DECIMAL.fullmatch(number):
                raise shell_error(
                    "arithmetic", line, f"{shown}: {number!r} is not a decimal 64-bit number"
                )
            tokens.append(int(number))
        else:
            tokens.append(operator)
        index = match.end()
    return _Arithmetic(tokens, line, shown).value()


class _Arithmetic:
    """Precedence climbing over the tokens; nesting is capped, so no deep recursion."""

    def __init__(self, tokens: list[int | str], line: int, shown: str) -> None:
        self.tokens, self.index, self.line, self.shown, self.depth = tokens, 0, line, shown, 0

    def fail(self) -> ShellError:
        return shell_error("arithmetic", self.line, f"{self.shown}: {_ONLY}", "write the value")

    def value(self) -> int:
        result = self.sum()
        if self.index != len(self.tokens):
            raise self.fail()
        return result

    def next(self) -> int | str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def sum(self) -> int:
        result = self.product()
        while (operator := self.next()) in ("+", "-"):
            self.index += 1
            other = self.product()
            result = _wrap(result + other if operator == "+" else result - other)
        return result

    def product(self) -> int:
        result = self.unary()
        while (operator := self.next()) in ("*", "/", "%"):
            self.index += 1
            other = self.unary()
            if operator == "*":
                result = _wrap(result * other)
                continue
            if other == 0:
                raise shell_error("arithmetic", self.line, f"{self.shown}: division by 0")
            # C's division truncates toward 0; the remainder takes the dividend's sign
            quotient = abs(result) // abs(other) * (1 if (result < 0) == (other < 0) else -1)
            result = _wrap(quotient if operator == "/" else result - quotient * other)
        return result

    def unary(self) -> int:
        sign = 1
        while (operator := self.next()) in ("+", "-"):
            sign, self.index = (-sign if operator == "-" else sign), self.index + 1
        operand = self.next()
        self.index += 1
        if isinstance(operand, int):
            return _wrap(sign * operand)
        if operand != "(" or self.depth >= 32:
            raise self.fail()
        self.depth += 1
        result = self.sum()
        self.depth -= 1
        if self.next() != ")":
            raise self.fail()
        self.index += 1
        return _wrap(sign * result)


def _wrap(number: int) -> int:
    return (number + _INT64 // 2) % _INT64 - _INT64 // 2
