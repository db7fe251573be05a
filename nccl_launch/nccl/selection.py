"""NCCL_PROTO and NCCL_ALGO: the selection lists tuning.cc's `parseList` reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nccl_launch.nccl.grammar import TomlValue, as_str

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
        entries = self._entries(as_str(value, f"a list of {self.what} names"))
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
