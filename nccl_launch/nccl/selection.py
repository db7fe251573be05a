"""NCCL_PROTO and NCCL_ALGO: the selection lists tuning.cc's `parseList` reads.

A profile spells a selection one strict, canonical way (`parse`). The environment is judged by
what NCCL makes of it (`meaning`): the enable table `parseList` fills per collective x
protocol (or algorithm), or a marker for a string NCCL refuses. docs/explanation.md ("How NCCL
reads NCCL_PROTO and NCCL_ALGO") cites the lines of tuning.cc each step below follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nccl_launch.nccl.grammar import Invalid, TomlValue, as_str

# ncclFuncStr's first NCCL_NUM_FUNCTIONS names: the prefixes parseList accepts.
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
# A cell of NCCL's enable table: off, on, or LL128's default (on only where the topology allows).
OFF, ON, AUTO = 0, 1, 2
REJECTED_NOTE = "NCCL rejects it: init fails with ncclInvalidUsage"
_FUNCS = ", ".join(FUNCTIONS)

Table = tuple[tuple[str, str, int], ...]


@dataclass(frozen=True, eq=False)
class Rejected:
    """A string NCCL refuses (or crashes on); equal to no other reading, even the same text.
    `why` never quotes the value: notes reach logs others read, and values may be anything."""

    raw: str
    why: str
    crash: bool = False

    @property
    def note(self) -> str:
        if self.crash:
            return f"NCCL crashes reading it: {self.why}"
        return f"{REJECTED_NOTE} ({self.why})"


def _same_name(token: str, name: str) -> bool:
    """strcasecmp: only ASCII letters fold (the names are ASCII; other bytes never match)."""
    return token.isascii() and token.lower() == name.lower()


@dataclass(frozen=True)
class SelectionRule:
    """NCCL_PROTO / NCCL_ALGO: `[func:][^]name,name;func:...`, as tuning.cc `parseList` reads it."""

    names: tuple[str, ...]
    what: str
    auto: tuple[str, ...] = ()  # names whose default cell is AUTO (LL128)

    def _lookup(self, token: str, choices: tuple[str, ...], text: str, kind: str) -> str:
        for choice in choices:
            if choice.lower() == token.lower():
                return choice
        message = f"{token!r} in {text!r} is not {kind}"
        raise Invalid("unknown-choice", message, f"valid: {', '.join(choices)}")

    def _entries(self, text: str) -> list[tuple[str | None, bool, tuple[str, ...]]]:
        if not text:
            message, fix = "an empty value selects nothing", f"valid: {', '.join(self.names)}"
            raise Invalid("empty-value", message, fix)
        if any(char.isspace() for char in text):
            message = f"{text!r} contains whitespace, which NCCL does not trim"
            raise Invalid("whitespace", message, "remove it")
        entries: list[tuple[str | None, bool, tuple[str, ...]]] = []
        for index, entry in enumerate(text.split(";")):
            func: str | None = None
            if ":" in entry:
                prefix, entry = entry.split(":", 1)
                func = self._lookup(prefix, FUNCTIONS, text, "a collective")
            elif index > 0:
                message = f"{text!r}: only the first ';' entry may omit the 'function:' prefix "
                raise Invalid("missing-prefix", f"{message}({', '.join(FUNCTIONS)})")
            if func in [seen for seen, _, _ in entries]:
                raise Invalid("repeated-collective", f"{text!r} names {func} twice")
            negate = entry.startswith("^")
            tokens = entry[negate:].split(",")
            names = tuple(self._lookup(token, self.names, text, self.what) for token in tokens)
            entries.append((func, negate, names))
        return entries

    def parse(self, value: TomlValue) -> str:
        entries = self._entries(as_str(value, f"a list of names, each {self.what}"))
        return ";".join(
            (f"{func}:" if func else "") + ("^" if negate else "") + ",".join(names)
            for func, negate, names in entries
        )

    def defaults(self) -> Table:
        """The table NCCL starts from (tuning.cc: every cell on, LL128 AUTO)."""
        return tuple(
            (func, name, AUTO if name in self.auto else ON)
            for func in FUNCTIONS
            for name in self.names
        )

    def table(self, raw: str) -> Table | Rejected:
        """parseList on `raw`: the enable table, or why NCCL refuses the string."""
        cells = {(func, name): state for func, name, state in self.defaults()}
        # strtok_r skips empty fields, so ';;', ',,' and '::' separate nothing.
        entries = [entry for entry in raw.split(";") if entry]
        for index, entry in enumerate(entries):
            fields = [field for field in entry.split(":") if field]
            if len(fields) < 2:
                # parseList compares pointers: a leading ';' makes even the first entry "later".
                if index > 0 or raw.startswith(";"):
                    return Rejected(raw, "an entry after the first lacks its 'function:' prefix")
                if not fields:  # prefix and list are both NULL: parseList reads elemList[0]
                    return Rejected(raw, "an entry of only ':' makes it read a null pointer", True)
                prefix, elements = None, fields[0]
            else:
                prefix, elements = fields[0], fields[1]  # a third field is never read
            negate = elements.startswith("^")
            unset, chosen = (ON, OFF) if negate else (OFF, ON)
            funcs = [func for func in FUNCTIONS if prefix is None or _same_name(prefix, func)]
            if not funcs:
                return Rejected(raw, f"a prefix that is not a collective; valid: {_FUNCS}")
            picked: set[str] = set()
            for token in (token for token in elements[negate:].split(",") if token):
                found = [name for name in self.names if _same_name(token, name)]
                if not found:
                    if any(char.isspace() for char in token):
                        return Rejected(raw, "a name with spaces, which NCCL does not trim")
                    valid = ", ".join(self.names)
                    return Rejected(raw, f"a name that is not {self.what}; valid: {valid}")
                picked.add(found[0])
            for func in funcs:  # an entry rewrites its collectives' whole rows
                for name in self.names:
                    cells[func, name] = chosen if name in picked else unset
        return tuple((func, name, cells[func, name]) for func in FUNCTIONS for name in self.names)

    def meaning(self, raw: str) -> object:
        """NCCL's enable table; None when it is NCCL's default table (as if unset)."""
        table = self.table(raw)
        return None if table == self.defaults() else table

    def schema(self) -> dict[str, Any]:
        names = ", ".join(self.names)
        return {"type": "string", "pattern": "^\\S+$", "description": f"{names}; [func:][^]a,b;..."}
