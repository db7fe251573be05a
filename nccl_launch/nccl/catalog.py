"""The NCCL variable catalog: every name NCCL documents or reads, from the shipped TSV files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

Kind = Literal["int", "size", "bool", "enum", "list", "string", "level"]

PREFIX = "NCCL_"
# The NCCL release the shipped catalog was read from: what a note says NCCL does is said of it.
RELEASE = "2.30.7"
RELEASE_NAMED = f"NCCL {RELEASE}, the catalog's release"
# How much of a name past the prefix a suggestion shares at least (difflib's ratio).
CLOSE = 0.75

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
    logged: Logged | None  # how NCCL_DEBUG=INFO says "NAME set by environment to VALUE"


def rows(filename: str) -> list[dict[str, str]]:
    """The rows of a shipped TSV file of data/, by column name."""
    import csv  # these three only when the catalog is read: a clean `run` never reads it
    from importlib import resources

    text = (
        resources.files("nccl_launch.nccl").joinpath("data", filename).read_text(encoding="utf-8")
    )
    return list(csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))


def _source_kind(reader: str) -> Kind:
    first = reader.split()[0]
    return _SOURCE_KINDS.get(first, "string")


@dataclass(frozen=True)
class Logged:
    """How NCCL logs a name it read: "NAME set by environment to VALUE" at `site`."""

    site: str  # file:line in NCCL's source
    period: bool  # the value ends with "." (integers: "to 16.")
    per: Literal["process", "communicator"]  # logged once, or at each communicator's init
    min_ranks: int  # 2: only communicators of two or more ranks read it
    note: str  # what is logged, and when


_INTEGERS = "*"  # the row of every integer parameter (ncclLoadParam)


@cache
def _logged_rows() -> dict[str, Logged]:
    return {
        row["name"]: Logged(
            site=row["site"],
            period=row["period"] == "yes",
            per=row["per"],  # type: ignore[arg-type]
            min_ranks=int(row["min_ranks"]),
            note=row["logged"],
        )
        for row in rows("nccl-env-logged.tsv")
    }


def _logged(name: str, source: dict[str, str] | None) -> Logged | None:
    logged = _logged_rows()
    if name in logged:
        return logged[name]
    if source is not None and source["kind"].startswith("int64"):
        return logged[_INTEGERS]
    return None


@cache
def catalog() -> dict[str, NcclVar]:
    """All known NCCL variables by full name (`NCCL_PROTO`)."""
    source = {row["name"]: row for row in rows("nccl-env-read-by-source.tsv")}
    variables: dict[str, NcclVar] = {}
    for row in rows("nccl-env-catalog.tsv"):
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
    """The closest known NCCL name to a misspelled one, where one is close: past the prefix
    (which every name shares, so it says nothing), the two share at least CLOSE of their
    characters (NCCL_BUFFER_SIZE: NCCL_BUFFSIZE), or the name is a known one written out
    longer (NCCL_ALGORITHM: NCCL_ALGO), which comes first (NCCL_DEBUG_LEVEL: NCCL_DEBUG,
    not NCCL_DEBUG_FILE). NCCL_VERSION is close to none."""
    import difflib

    names = {known.removeprefix(PREFIX): known for known in catalog()}
    typed = name.upper().removeprefix(PREFIX)
    longer = [short for short in names if typed.startswith(short)]
    matches = difflib.get_close_matches(typed, longer, n=1, cutoff=0)
    matches = matches or difflib.get_close_matches(typed, names, n=1, cutoff=CLOSE)
    return names[matches[0]] if matches else None


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
        return "ignored", f"deprecated and not read by {RELEASE_NAMED} ({reason})", ""
    if var.deprecated:
        # NCCL_MAX_NCHANNELS: docs/explanation.md cites the code that still reads it.
        message = (
            f"deprecated ({reason}), but {RELEASE_NAMED}, still reads it and the value applies"
        )
        return (
            "deprecated",
            message,
            "moving to the replacement is a tuning change to measure again",
        )
    if not var.documented:
        message = f"not in NCCL's documentation but the source reads it ({var.summary})"
        return "undocumented", message, ""
    return None
