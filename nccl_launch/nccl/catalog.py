"""The NCCL variable catalog: every name NCCL documents or reads, from the shipped TSV files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

Kind = Literal["int", "size", "bool", "enum", "list", "string", "level"]

PREFIX = "NCCL_"

# How the source's reader maps to a kind, for names the docs do not describe.
_SOURCE_KINDS: dict[str, Kind] = {
    "int64": "int",
    "string": "string",
    "bool": "bool",
    "enum": "enum",
    "bitset": "list",
    "path-type": "level",
    "string->strtol": "bool",
}


@dataclass(frozen=True)
class NcclVar:
    """One NCCL variable as the catalogs describe it."""

    name: str
    kind: Kind
    documented: bool
    deprecated: bool
    read_by_source: bool
    summary: str
    default: str  # as NCCL's documentation says it ("4194304", "0 (auto)"); "" when undocumented
    logged: bool  # NCCL_DEBUG=INFO prints "NAME set by environment to VALUE" for it


def _rows(filename: str) -> list[dict[str, str]]:
    import csv  # these three only when the catalog is read: a clean `run` never reads it
    from importlib import resources

    text = (
        resources.files("nccl_launch.nccl").joinpath("data", filename).read_text(encoding="utf-8")
    )
    return list(csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))


def _source_kind(reader: str) -> Kind:
    first = reader.split()[0]
    return _SOURCE_KINDS.get(first, "string")


# Besides every integer parameter (NCCL_PARAM), these are logged when set.
LOGGED_STRINGS = frozenset({"NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"})


def _logged(name: str, source: dict[str, str] | None) -> bool:
    return name in LOGGED_STRINGS or (source is not None and source["kind"].startswith("int64"))


@cache
def catalog() -> dict[str, NcclVar]:
    """All known NCCL variables by full name (`NCCL_PROTO`)."""
    source = {row["name"]: row for row in _rows("nccl-env-read-by-source.tsv")}
    variables: dict[str, NcclVar] = {}
    for row in _rows("nccl-env-catalog.tsv"):
        kind: Kind = row["type"]  # type: ignore[assignment]
        variables[row["name"]] = NcclVar(
            name=row["name"],
            kind=kind,
            documented=True,
            deprecated=row["deprecated"] == "yes",
            read_by_source=row["name"] in source,
            summary=row["doc_summary"],
            default=row["default"],
            logged=_logged(row["name"], source.get(row["name"])),
        )
    for name, row in source.items():
        if name not in variables:
            variables[name] = NcclVar(
                name=name,
                kind=_source_kind(row["kind"]),
                documented=False,
                deprecated=False,
                read_by_source=True,
                summary=f"undocumented; read at {row['source_locations']}",
                default="",
                logged=_logged(name, row),
            )
    return variables


def lookup(name: str) -> NcclVar | None:
    """The entry for a full `NCCL_*` name; None when NCCL neither documents nor reads it."""
    return catalog().get(name)


def did_you_mean(name: str) -> str | None:
    """The closest known NCCL name to a misspelled one, if any is close enough."""
    import difflib

    matches = difflib.get_close_matches(name.upper(), catalog(), n=1, cutoff=0.7)
    return matches[0] if matches else None


def unknown_name_message(name: str) -> str:
    """Why an unknown `NCCL_*` name is refused, with a suggestion when one is close."""
    hint = did_you_mean(name)
    suggestion = f"; did you mean {hint}?" if hint else ""
    return f"{name} is not a variable NCCL documents or reads (NCCL ignores it){suggestion}"


def name_note(name: str) -> tuple[str, str, str] | None:
    """A known name's note as (kind, what is said of the name, the fix or ""): `deprecated`
    (NCCL still reads it), `ignored` (deprecated and no longer read) or `undocumented` (only
    the source reads it)."""
    var = catalog()[name]
    reason = var.summary.rstrip(".")
    if var.deprecated and not var.read_by_source:
        return "ignored", f"deprecated and NCCL 2.30 no longer reads it ({reason})", ""
    if var.deprecated:
        # NCCL_MAX_NCHANNELS: docs/explanation.md cites the code that still reads it.
        message = f"deprecated ({reason}), but NCCL 2.30 still reads it and the value applies"
        return (
            "deprecated",
            message,
            "moving to the replacement is a tuning change to measure again",
        )
    if not var.documented:
        message = f"not in NCCL's documentation but the source reads it ({var.summary})"
        return "undocumented", message, ""
    return None
