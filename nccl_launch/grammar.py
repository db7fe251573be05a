"""NCCL's value grammar: strict parsing of profile values, NCCL's own lax reading of env strings.

`parse` turns a profile value into the exact string the child gets, or raises ValueError saying
what would be valid. `meaning` reads a raw environment string the way NCCL does, so that two
spellings compare equal exactly when NCCL would behave the same (`0x1000000` and `16777216`).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any, Protocol

from nccl_launch.catalog import PREFIX, Kind, NcclVar, lookup

TomlValue = str | int | float | bool

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_LIMIT = 2**31

_UNITS = {"": 1, "K": 2**10, "KiB": 2**10, "M": 2**20, "MiB": 2**20, "G": 2**30, "GiB": 2**30}
_SIZE = re.compile(r"(\d+)([A-Za-z]*)")
_DECIMAL = re.compile(r"-?\d+")


def _any_case(words: tuple[str, ...]) -> str:
    """A JSON-Schema regex (no inline flags there) matching the words in any case."""

    def fold(word: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)

    return "^(" + "|".join(fold(word) for word in words) + ")$"


def strtoll(raw: str) -> int | None:
    """C's `strtoll(raw, NULL, 0)` as NCCL calls it; None on overflow (NCCL keeps its default)."""
    text = raw.lstrip(" \t\n\v\f\r")
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text[:2].lower() == "0x" and text[2:3] in set(string.hexdigits) and text[2:3]:
        base, text, alphabet = 16, text[2:], string.hexdigits
    elif text.startswith("0"):
        base, alphabet = 8, string.octdigits
    else:
        base, alphabet = 10, string.digits
    digits = ""
    for char in text:
        if char not in alphabet:
            break
        digits += char
    if not digits:
        return 0
    value = sign * int(digits, base)
    return value if INT64_MIN <= value <= INT64_MAX else None


def _as_int(value: TomlValue, expected: str) -> int:
    """A TOML integer, or a string of decimal digits; never a bool, float or hex."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    read = f" (NCCL would read it as {strtoll(value)})" if isinstance(value, str) else ""
    raise ValueError(f"{value!r} is not valid{read}; valid: {expected}")


def _as_str(value: TomlValue, expected: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not valid; valid: {expected}, written as a TOML string")
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
            raise ValueError(f"{number} is not valid; valid: {self.describe()}")
        return str(number)

    def meaning(self, raw: str) -> object:
        return strtoll(raw)

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
                raise ValueError(
                    f"{value!r} is not a size (NCCL would read it as {strtoll(value)}); "
                    f"valid: {self.describe()}"
                )
            number = int(match.group(1)) * _UNITS[match.group(2)]
        else:
            number = _as_int(value, "a size")
        if not self.low <= number <= self.high:
            raise ValueError(f"{number} bytes is out of range; valid: {self.describe()}")
        return str(number)

    def meaning(self, raw: str) -> object:
        return strtoll(raw)

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
        raise ValueError(f"{value!r} is not a boolean; valid: true, false, 0, 1")

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
        text = _as_str(value, "a name")
        for choice in self.choices:
            if self._fold(choice) == self._fold(text):
                return choice
        case = "exact case" if self.case_sensitive else "any case"
        raise ValueError(f"{text!r} is not valid; valid: {', '.join(self.choices)} ({case})")

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
        text = _as_str(value, self.description)
        if not re.fullmatch(self.pattern, text, re.IGNORECASE):
            raise ValueError(f"{text!r} is not valid; valid: {self.description}")
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
        text = _as_str(value, "a list")
        body = text[1:] if self.negatable and text.startswith("^") else text
        known = {name.upper(): name for name in self.names}
        tokens = body.split(self.separator)
        bad = [token for token in tokens if token.upper() not in known]
        if bad:
            neg = ", optional leading ^" if self.negatable else ""
            raise ValueError(
                f"{bad[0]!r} in {text!r} is not valid; valid: {', '.join(self.names)} "
                f"joined by {self.separator!r} without spaces{neg}"
            )
        return text[: len(text) - len(body)] + self.separator.join(known[t.upper()] for t in tokens)

    def meaning(self, raw: str) -> object:
        return raw.upper()

    def schema(self) -> dict[str, Any]:
        token = _any_case(self.names).strip("^$")
        start = "\\^?" if self.negatable else ""
        separator = re.escape(self.separator)
        return {"type": "string", "pattern": f"^{start}{token}({separator}{token})*$"}


FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


@dataclass(frozen=True)
class SelectionRule:
    """NCCL_PROTO / NCCL_ALGO: `[func:][^]name,name;func:...`, as tuning.cc `parseList` reads it."""

    names: tuple[str, ...]
    what: str

    def _lookup(self, token: str, choices: tuple[str, ...], text: str, kind: str) -> str:
        for choice in choices:
            if choice.lower() == token.lower():
                return choice
        raise ValueError(f"{token!r} in {text!r} is not {kind}; valid: {', '.join(choices)}")

    def _entries(self, text: str) -> list[tuple[str | None, bool, tuple[str, ...]]]:
        if not text:
            raise ValueError(f"an empty value selects nothing; valid: {', '.join(self.names)}")
        if any(char.isspace() for char in text):
            raise ValueError(f"{text!r} contains whitespace, which NCCL does not trim; remove it")
        entries: list[tuple[str | None, bool, tuple[str, ...]]] = []
        for index, entry in enumerate(text.split(";")):
            func: str | None = None
            if ":" in entry:
                prefix, entry = entry.split(":", 1)
                func = self._lookup(prefix, FUNCTIONS, text, "a collective")
            elif index > 0:
                raise ValueError(
                    f"{text!r}: only the first ';' entry may omit the 'function:' prefix "
                    f"({', '.join(FUNCTIONS)})"
                )
            if func in [seen for seen, _, _ in entries]:
                raise ValueError(f"{text!r} names {func} twice")
            negate = entry.startswith("^")
            tokens = entry[negate:].split(",")
            names = tuple(self._lookup(token, self.names, text, self.what) for token in tokens)
            entries.append((func, negate, names))
        return entries

    def parse(self, value: TomlValue) -> str:
        entries = self._entries(_as_str(value, f"a list of {self.what} names"))
        return ";".join(
            (f"{func}:" if func else "") + ("^" if negate else "") + ",".join(names)
            for func, negate, names in entries
        )

    def meaning(self, raw: str) -> object:
        try:
            entries = self._entries(raw)
        except ValueError:
            return ("unparsable", raw)
        return frozenset((func, negate, frozenset(names)) for func, negate, names in entries)

    def schema(self) -> dict[str, Any]:
        names = ", ".join(self.names)
        return {"type": "string", "pattern": "^\\S+$", "description": f"{names}; [func:][^]a,b;..."}


LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_LEGACY_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


@dataclass(frozen=True)
class LevelRule:
    """A topology distance: exact upper-case names, or the legacy integers 0-5."""

    def parse(self, value: TomlValue) -> str:
        if isinstance(value, str) and value in LEVELS:
            return value
        valid = f"one of {', '.join(LEVELS)} (exact case) or a legacy integer 0-5"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{value!r} is not valid; valid: {valid}")
        if isinstance(value, str) and not value.isdigit():
            hint = f" (NCCL treats {value!r} as unset)"
            raise ValueError(f"{value!r} is not valid{hint}; valid: {valid}")
        number = int(value)
        if not 0 <= number <= 5:
            raise ValueError(f"{number} is not valid; valid: {valid}")
        return _LEGACY_LEVELS[number]

    def meaning(self, raw: str) -> object:
        if raw in LEVELS:
            return raw
        if raw[:1].isdigit():
            number = strtoll(raw) or 0
            return _LEGACY_LEVELS[min(number, 5)]
        return None  # NCCL silently treats anything else as unset

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
        text = _as_str(value, "text")
        if not text or "\n" in text or "\x00" in text:
            raise ValueError(f"{text!r} is not valid; valid: non-empty text on one line")
        if self.no_spaces and any(char.isspace() for char in text):
            raise ValueError(f"{text!r} contains whitespace, which NCCL does not trim")
        return text

    def meaning(self, raw: str) -> object:
        return raw

    def schema(self) -> dict[str, Any]:
        pattern = "^\\S+$" if self.no_spaces else "^[^\\n]+$"
        return {"type": "string", "pattern": pattern}


_LEVEL = LevelRule()
_CHANNELS = IntRule(1, 64)
_INT32_SIZE = SizeRule(1, INT32_LIMIT - 1)
_SUBSYSTEMS = (
    "INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "ALLOC_HOST", "CALL",
    "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL",
)  # fmt: skip

# Rules by name without the prefix; every other variable gets the default rule of its kind.
RULES: dict[str, Rule] = {
    "PROTO": SelectionRule(("LL", "LL128", "Simple"), "a protocol"),
    "ALGO": SelectionRule(
        ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"),
        "an algorithm",
    ),
    "P2P_LEVEL": _LEVEL,
    "NET_GDR_LEVEL": _LEVEL,
    "IB_GDR_LEVEL": _LEVEL,
    "NTHREADS": IntRule(64, 512, multiple=32),
    "MAX_NCHANNELS": _CHANNELS,
    "MIN_NCHANNELS": _CHANNELS,
    "MAX_CTAS": _CHANNELS,
    "MIN_CTAS": _CHANNELS,
    "BUFFSIZE": _INT32_SIZE,
    "LL_BUFFSIZE": _INT32_SIZE,
    "LL128_BUFFSIZE": _INT32_SIZE,
    "P2P_NET_CHUNKSIZE": _INT32_SIZE,
    "P2P_PCI_CHUNKSIZE": _INT32_SIZE,
    "P2P_NVL_CHUNKSIZE": _INT32_SIZE,
    "NVLS_CHUNKSIZE": _INT32_SIZE,
    "NVLSTREE_MAX_CHUNKSIZE": _INT32_SIZE,
    "SHADOW_MEMPOOL_MAX_SIZE": SizeRule(),
    "SYM_CE_THRESHOLD": SizeRule(),
    "WORK_ARGS_BYTES": SizeRule(),
    "WORK_FIFO_BYTES": SizeRule(),
    "SOCKET_INLINE": SizeRule(),
    "SOCKET_MIN_TASKSIZE": SizeRule(),
    "DEBUG": ChoiceRule(("VERSION", "WARN", "INFO", "TRACE", "ABORT")),
    "DEBUG_SUBSYS": TokenListRule(_SUBSYSTEMS),
    "DEBUG_TIMESTAMP_LEVELS": TokenListRule(("VERSION", "WARN", "INFO", "ABORT", "TRACE", "ALL")),
    "SOCKET_FAMILY": ChoiceRule(("AF_INET", "AF_INET6"), case_sensitive=True),
    "IB_ADDR_FAMILY": ChoiceRule(("AF_INET", "AF_INET6"), case_sensitive=True),
    "CHECK_MODE": ChoiceRule(("DEFAULT", "DEBUG_LOCAL", "DEBUG_GLOBAL")),
    "LAUNCH_MODE": ChoiceRule(("PARALLEL", "GROUP")),
    "NET_MERGE_POLICY": ChoiceRule(("ALL", "RAIL")),
    "CTA_POLICY": TokenListRule(("DEFAULT", "EFFICIENCY", "ZERO", "0", "1", "2"), "|", False),
    "NETDEVS_POLICY": PatternRule(r"AUTO|ALL|MAX:[1-9]\d*", "AUTO, ALL or MAX:N"),
    "CROSS_NIC": IntRule(0, 2),
    "IB_PCI_RELAXED_ORDERING": IntRule(0, 2),
    "MEM_SYNC_DOMAIN": IntRule(0, 1),
    "NVLS_ENABLE": IntRule(0, 2),
    "MNNVL_ENABLE": IntRule(0, 2),
    "P2P_PXN_LEVEL": IntRule(0, 2),
    "IB_TIMEOUT": IntRule(0, 31),
    "IB_RETRY_CNT": IntRule(0, 7),
    "IB_ROCE_VERSION_NUM": IntRule(1, 2),
    "IB_QPS_PER_CONNECTION": IntRule(1, 128),
    "SOCKET_NTHREADS": IntRule(1, 16),
    "NSOCKS_PERTHREAD": IntRule(1, 64),
    "CGA_CLUSTER_SIZE": IntRule(0, 8),
    "SOCKET_RETRY_CNT": IntRule(1),
    "SOCKET_RETRY_SLEEP_MSEC": IntRule(1),
    "SOCKET_POLL_TIMEOUT_MSEC": IntRule(0),
    "UID_STAGGER_THRESHOLD": IntRule(1),
    "UID_STAGGER_RATE": IntRule(1),
    "RAS_TIMEOUT_FACTOR": IntRule(1),
    "SOCKET_MAGIC": IntRule(0, 2**64 - 1),
    "SET_THREAD_NAME": BoolRule(words=True),
    "PARAM_DUMP_ALL": BoolRule(words=True),
    "WARN_ENABLE_DEBUG_INFO": BoolRule(words=True),
}

_KIND_RULES: dict[Kind, Rule] = {
    "int": IntRule(),
    "size": SizeRule(),
    "bool": BoolRule(),
    "list": StringRule(no_spaces=True),
    "string": StringRule(),
    "level": _LEVEL,
}


def catalog_rule(var: NcclVar) -> Rule:
    """The rule of a known variable: its own, or the default of its kind."""
    short = var.name.removeprefix(PREFIX)
    if short in RULES:
        return RULES[short]
    if var.kind == "enum":
        raise LookupError(f"{var.name} is an enum without a rule")  # caught by the catalog test
    return _KIND_RULES[var.kind]


def rule_for(name: str) -> Rule | None:
    """The rule for a full variable name; None for non-NCCL and unknown NCCL names."""
    var = lookup(name) if name.startswith(PREFIX) else None
    return None if var is None else catalog_rule(var)


def canonical(name: str, value: TomlValue) -> str:
    """The exact string the child gets for a declared NCCL variable (raises ValueError)."""
    rule = rule_for(name)
    if rule is None:
        raise ValueError(f"{name} has no NCCL rule")
    return rule.parse(value)


def meaning(name: str, raw: str) -> object:
    """What NCCL makes of a raw environment string; plain text for other variables."""
    rule = rule_for(name)
    return raw if rule is None else rule.meaning(raw)


def same_meaning(name: str, expected: str, actual: str) -> bool:
    """True when NCCL (or the process, for other variables) treats both strings alike."""
    return expected == actual or meaning(name, expected) == meaning(name, actual)
