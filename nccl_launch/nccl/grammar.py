"""The kinds of value NCCL reads: strict parsing of profile values, NCCL's own lax reading.

`parse` turns a profile value into the exact string the child gets, or raises `Invalid` saying
what would be valid. `meaning` reads a raw environment string the way NCCL does, so that two
spellings compare equal exactly when NCCL would behave the same (`0x1000000` and `16777216`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from nccl_launch.digits import is_ascii_digits

TomlValue = str | int | float | bool

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_LIMIT = 2**31

_UNITS = {"": 1, "K": 2**10, "KiB": 2**10, "M": 2**20, "MiB": 2**20, "G": 2**30, "GiB": 2**30}
_SIZE = re.compile(r"([0-9]+)([A-Za-z]*)")
# Decimal units people write for binary ones (`16MB` in tuning notes means 16MiB): refused as
# ambiguous, with both readings to copy.
_DECIMAL_UNITS = {"KB": 1, "MB": 2, "GB": 3}
_DECIMAL = re.compile(r"-?[0-9]+")


def _any_case(words: tuple[str, ...]) -> str:
    """A JSON-Schema regex (no inline flags there) matching the words in any case."""

    def fold(word: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)

    return "^(" + "|".join(fold(word) for word in words) + ")$"


_STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(?:(0[xX])([0-9A-Fa-f]+)|(0[0-7]*)|([0-9]*))")
# Longer than INT64_MAX in octal (the longest base) once leading zeros go: out of range. Such
# digits are never converted: int() refuses strings past 4300 digits, and would be slow.
_MAX_DIGITS = 22


def strtoll(raw: str) -> int | None:
    """C's `strtoll(raw, NULL, 0)` as NCCL calls it; None on overflow (NCCL keeps its default)."""
    match = _STRTOLL.match(raw)
    if match is None:  # never: every part of the pattern may be empty
        return 0
    sign, hex_prefix, hex_digits, octal, decimal = match.groups()
    if hex_prefix:
        base, digits = 16, hex_digits
    elif octal:
        base, digits = 8, octal
    else:
        base, digits = 10, decimal
    digits = digits.lstrip("0")
    if not digits:
        return 0
    if len(digits) > _MAX_DIGITS:
        return None
    value = (-1 if sign == "-" else 1) * int(digits, base)
    return value if INT64_MIN <= value <= INT64_MAX else None


def load_param(raw: str) -> int | None:
    """What `ncclLoadParam` (src/misc/param.cc:127-139) makes of a value: strtoll's reading,
    or None where NCCL keeps its default: an empty value (`strlen(str) > 0` fails) or one
    strtoll overflows (errno set)."""
    return strtoll(raw) if raw else None


def c_int(value: int) -> int:
    """A 64-bit C value stored in a 32-bit `int`, as gcc on Linux does: modulo 2^32."""
    value &= 2**32 - 1
    return value - 2**32 if value >= INT32_LIMIT else value


class Invalid(ValueError):
    """A value a rule refuses, as data: its finding's `code`, what is wrong, the fix, and the
    `key` of a table it is about ("": the value itself); `str` is `KEY: MESSAGE; FIX`."""

    def __init__(self, code: str, message: str, fix: str = "", key: str = "") -> None:
        self.code, self.message, self.fix, self.key = code, message, fix, key
        said = message + (f"; {fix}" if fix else "")
        super().__init__(f"{key}: {said}" if key else said)


@dataclass(frozen=True, eq=False)
class Undefined:
    """A value whose effect NCCL's code leaves undefined: it equals nothing, so it is drift
    against any other value; `why` is the note shown."""

    why: str


def _as_int(value: TomlValue, expected: str) -> int:
    """A TOML integer, or a string of decimal digits; never a bool, float or hex."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    read = f" ({_nccl_reads(value)})" if isinstance(value, str) else ""
    raise Invalid("not-an-integer", f"{value!r} is not valid{read}", f"valid: {expected}")


def _nccl_reads(raw: str) -> str:
    """What NCCL makes of a value it reads with strtoll (ncclLoadParam sees errno set on an
    overflow and keeps its default)."""
    read = strtoll(raw)
    if read is None:
        return "NCCL keeps its default: strtoll overflows"
    return f"NCCL would read it as {read}"


def as_str(value: TomlValue, expected: str) -> str:
    if not isinstance(value, str):
        valid = f"valid: {expected}, written as a TOML string"
        raise Invalid("wrong-type", f"{value!r} is not valid", valid)
    return value


class Rule(Protocol):
    def parse(self, value: TomlValue) -> str: ...

    def meaning(self, raw: str) -> object: ...

    def schema(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class IntRule:
    """An integer NCCL reads with strtoll: decimal only, within a range, optionally a multiple."""

    low: int = INT64_MIN
    high: int = INT64_MAX
    multiple: int = 1

    def describe(self) -> str:
        if self.low == INT64_MIN and self.high == INT64_MAX:
            span = "a decimal integer"
        elif self.high == INT64_MAX:
            span = f"a decimal integer >= {self.low}"
        else:
            span = f"a decimal integer from {self.low} to {self.high}"
        return span if self.multiple == 1 else f"{span} and a multiple of {self.multiple}"

    def parse(self, value: TomlValue) -> str:
        number = _as_int(value, self.describe())
        if not self.low <= number <= self.high or number % self.multiple:
            raise Invalid("out-of-range", f"{number} is not valid", f"valid: {self.describe()}")
        return str(number)

    def meaning(self, raw: str) -> object:
        return load_param(raw)

    def schema(self) -> dict[str, Any]:
        number: dict[str, Any] = {"type": "integer", "minimum": self.low, "maximum": self.high}
        if self.multiple > 1:
            number["multipleOf"] = self.multiple
        return {"anyOf": [number, {"type": "string", "pattern": "^-?[0-9]+$"}]}


@dataclass(frozen=True)
class SizeRule:
    """A byte count: an integer or a binary unit (`16MiB`), emitted as decimal bytes."""

    low: int = 0
    high: int = INT64_MAX

    def describe(self) -> str:
        limit = "below 2^31, NCCL stores it in an int" if self.high < INT32_LIMIT else "bytes"
        units = "an integer or with a unit K, KiB, M, MiB, G, GiB"
        return f"bytes as {units}, at least {self.low}, {limit}"

    def parse(self, value: TomlValue) -> str:
        if isinstance(value, str):
            match = _SIZE.fullmatch(value)
            if not match or match.group(2) not in _UNITS:
                message = f"{value!r} is not a size ({_nccl_reads(value)})"
                if (ambiguity := self.ambiguity(value)) is not None:
                    raise Invalid("ambiguous-unit", message, ambiguity)
                raise Invalid("not-a-size", message, f"valid: {self.describe()}")
            number = int(match.group(1)) * _UNITS[match.group(2)]
        else:
            number = _as_int(value, "a size")
        if not self.low <= number <= self.high:
            valid = f"valid: {self.describe()}"
            raise Invalid("out-of-range", f"{number} bytes is out of range", valid)
        return str(number)

    def ambiguity(self, text: str) -> str | None:
        """For a decimal unit (`16MB`): the two sizes it could mean, each spelled to copy."""
        match = _SIZE.fullmatch(text)
        power = _DECIMAL_UNITS.get(match.group(2).upper()) if match else None
        if match is None or power is None or not int(match.group(1)):
            return None
        count, unit = int(match.group(1)), "KMG"[power - 1] + "iB"
        binary, decimal = count * 1024**power, count * 1000**power
        usual = f"{count}{unit} = {binary} bytes (what NCCL users almost always mean)"
        readings = [
            self._reading(usual, binary, f'"{count}{unit}" or '),
            self._reading(f"{decimal} bytes", decimal, ""),
        ]
        fits = all(self.low <= number <= self.high for number in (binary, decimal))
        valid = "" if fits else f" (valid: {self.describe()})"  # said once for both
        return f"{match.group(2)} is ambiguous: for {'; for '.join(readings)}{valid}"

    def _reading(self, what: str, number: int, spelling: str) -> str:
        if self.low <= number <= self.high:
            return f"{what} write {spelling}{number}"
        return f"{what}, nothing: it is out of range"

    def meaning(self, raw: str) -> object:
        return load_param(raw)

    def schema(self) -> dict[str, Any]:
        units = "|".join(unit for unit in _UNITS if unit)
        return {
            "anyOf": [
                {"type": "integer", "minimum": self.low, "maximum": self.high},
                {"type": "string", "pattern": f"^[0-9]+({units})?$"},
            ]
        }


@dataclass(frozen=True)
class BoolRule:
    """A switch: true/false or 0/1, emitted as `1` or `0`."""

    words: bool = False  # NCCL's DEFINE_NCCL_PARAM booleans also read T/TRUE/F/FALSE

    def parse(self, value: TomlValue) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if value in (0, 1, "0", "1"):
            return str(value)
        raise Invalid("not-a-boolean", f"{value!r} is not a boolean", "valid: true, false, 0, 1")

    def meaning(self, raw: str) -> object:
        if self.words and raw.upper() in ("T", "TRUE", "F", "FALSE"):
            return int(raw.upper().startswith("T"))
        return strtoll(raw)

    def schema(self) -> dict[str, Any]:
        return {"enum": [True, False, 0, 1, "0", "1"]}


@dataclass(frozen=True)
class ChoiceRule:
    """One of a fixed set of names."""

    choices: tuple[str, ...]
    case_sensitive: bool = False

    def _fold(self, text: str) -> str:
        return text if self.case_sensitive else text.upper()

    def parse(self, value: TomlValue) -> str:
        text = as_str(value, "a name")
        for choice in self.choices:
            if self._fold(choice) == self._fold(text):
                return choice
        case = "exact case" if self.case_sensitive else "any case"
        valid = f"valid: {', '.join(self.choices)} ({case})"
        raise Invalid("unknown-choice", f"{text!r} is not valid", valid)

    def meaning(self, raw: str) -> object:
        return self._fold(raw)

    def schema(self) -> dict[str, Any]:
        if self.case_sensitive:
            return {"enum": list(self.choices)}
        return {
            "type": "string",
            "pattern": _any_case(self.choices),
            "examples": list(self.choices),
        }


@dataclass(frozen=True)
class PatternRule:
    """A string matching a regular expression, case-insensitively."""

    pattern: str
    description: str

    def parse(self, value: TomlValue) -> str:
        text = as_str(value, self.description)
        if not re.fullmatch(self.pattern, text, re.IGNORECASE):
            raise Invalid("no-match", f"{text!r} is not valid", f"valid: {self.description}")
        return text.upper()

    def meaning(self, raw: str) -> object:
        return raw.upper()

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "description": self.description}


@dataclass(frozen=True)
class TokenListRule:
    """Names joined by a separator, optionally negated with a leading `^` (NCCL_DEBUG_SUBSYS)."""

    names: tuple[str, ...]
    separator: str = ","
    negatable: bool = True

    def parse(self, value: TomlValue) -> str:
        text = as_str(value, "a list")
        body = text[1:] if self.negatable and text.startswith("^") else text
        known = {name.upper(): name for name in self.names}
        tokens = body.split(self.separator)
        bad = [token for token in tokens if token.upper() not in known]
        if bad:
            neg = ", optional leading ^" if self.negatable else ""
            fix = f"valid: {', '.join(self.names)} joined by {self.separator!r} without spaces{neg}"
            raise Invalid("unknown-choice", f"{bad[0]!r} in {text!r} is not valid", fix)
        return text[: len(text) - len(body)] + self.separator.join(known[t.upper()] for t in tokens)

    def meaning(self, raw: str) -> object:
        return raw.upper()

    def schema(self) -> dict[str, Any]:
        token = _any_case(self.names).strip("^$")
        start = "\\^?" if self.negatable else ""
        separator = re.escape(self.separator)
        return {"type": "string", "pattern": f"^{start}{token}({separator}{token})*$"}


LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_LEGACY_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


@dataclass(frozen=True)
class LevelRule:
    """A topology distance: exact upper-case names, or the legacy integers 0-5."""

    def parse(self, value: TomlValue) -> str:
        if isinstance(value, str) and value in LEVELS:
            return value
        valid = f"valid: one of {', '.join(LEVELS)} (exact case) or a legacy integer 0-5"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise Invalid("wrong-type", f"{value!r} is not valid", valid)
        if isinstance(value, str) and not is_ascii_digits(value):
            message = f"{value!r} is not valid (NCCL treats {value!r} as unset)"
            raise Invalid("unknown-choice", message, valid)
        number = int(value)
        if not 0 <= number <= 5:
            raise Invalid("out-of-range", f"{number} is not valid", valid)
        return _LEGACY_LEVELS[number]

    def meaning(self, raw: str) -> object:
        """`ncclGetLevel` (src/graph/paths.cc): an exact name; else, when the first character
        is an ASCII digit, `int oldLevel = strtol(str, NULL, 0)` indexes the legacy table,
        clamped above at 5 but not below: a long that truncates to a negative int (2^31,
        or an overflow's LONG_MAX) reads outside the table. Anything else is unset."""
        if raw in LEVELS:
            return raw
        if not raw or raw[0] not in "0123456789":
            return None  # NCCL silently treats it as unset
        read = strtoll(raw)  # strtol: long is 64 bits on Linux
        old = c_int(INT64_MAX if read is None else read)  # overflow: LONG_MAX (no sign here)
        if old < 0:
            return Undefined(
                f"NCCL reads it as the legacy level {old} (strtol truncated to an int), "
                "outside its table: undefined behaviour"
            )
        return _LEGACY_LEVELS[min(old, len(_LEGACY_LEVELS) - 1)]

    def schema(self) -> dict[str, Any]:
        return {
            "anyOf": [
                {"enum": list(LEVELS)},
                {"enum": [0, 1, 2, 3, 4, 5]},
                {"enum": ["0", "1", "2", "3", "4", "5"]},
            ]
        }


@dataclass(frozen=True)
class StringRule:
    """Free text NCCL reads as given: anything but an empty value or a line break."""

    no_spaces: bool = False

    def parse(self, value: TomlValue) -> str:
        text = as_str(value, "text")
        if not text or "\n" in text or "\x00" in text:
            valid = "valid: non-empty text on one line"
            raise Invalid("not-one-line", f"{text!r} is not valid", valid)
        if self.no_spaces and any(char.isspace() for char in text):
            raise Invalid("whitespace", f"{text!r} contains whitespace, which NCCL does not trim")
        return text

    def meaning(self, raw: str) -> object:
        return raw

    def schema(self) -> dict[str, Any]:
        pattern = "^\\S+$" if self.no_spaces else "^[^\\n]+$"
        return {"type": "string", "pattern": pattern}
