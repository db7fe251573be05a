"""The NCCL variable catalog: every name NCCL documents or reads, from the shipped TSV files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal, NamedTuple

Kind = Literal["int", "size", "bool", "enum", "list", "string", "level"]

PREFIX = "NCCL_"
# How much of a name past the prefix a suggestion shares at least (difflib's ratio).
CLOSE = 0.75
# The words of a feature's switch: a feature's name alone (NCCL_NET_GDR) means the one of
# its names that turns it on or off or says how far it goes (NCCL_NET_GDR_LEVEL).
_SWITCHES = ("ENABLE", "DISABLE", "LEVEL")

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
    read_by_source: bool  # the catalog's release reads it (`release()`)
    releases: str  # the releases of the table that read it, "2.21.5-2.30.4"; "" for none
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
    """How the catalog's release logs the name; None where it does not read it."""
    if not _reads(source):
        return None
    logged = _logged_rows()
    if name in logged:
        return logged[name]
    if source is not None and source["kind"].startswith("int64"):
        return logged[_INTEGERS]
    return None


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def _spans(releases: str) -> list[list[str]]:
    """The runs of a `releases` text: "2.21.5-2.26.6, 2.28.3" is [["2.21.5", "2.26.6"],
    ["2.28.3"]]."""
    return [span.split("-") for span in releases.split(", ") if span]


@cache
def covered() -> tuple[str, str]:
    """The oldest and the newest NCCL release the source table was read from (its
    `releases` column, written by docs/nccl_env_releases.py)."""
    spans = [span for row in _source_rows().values() for span in _spans(row["releases"])]
    ends = {end for span in spans for end in span}
    return min(ends, key=_version), max(ends, key=_version)


def release() -> str:
    """The catalog's release, the newest it covers: what a note says NCCL does is said of
    it, as are the documentation and the logging the catalog holds."""
    return covered()[1]


@cache
def _source_rows() -> dict[str, dict[str, str]]:
    return {row["name"]: row for row in rows("nccl-env-read-by-source.tsv")}


def _newest(row: dict[str, str]) -> str:
    """The newest release that reads the name of this source row."""
    return _spans(row["releases"])[-1][-1]


def _reads(row: dict[str, str] | None) -> bool:
    """Whether the catalog's release reads the name of this source row."""
    return row is not None and _newest(row) == release()


@cache
def catalog() -> dict[str, NcclVar]:
    """All known NCCL variables by full name (`NCCL_PROTO`): those the catalog's release
    documents, and those any release of the source table reads."""
    source = _source_rows()
    variables: dict[str, NcclVar] = {}
    for row in rows("nccl-env-catalog.tsv"):
        kind: Kind = row["type"]  # type: ignore[assignment]
        read = source.get(row["name"])
        variables[row["name"]] = NcclVar(
            name=row["name"],
            kind=kind,
            documented=True,
            deprecated=row["deprecated"] == "yes",
            read_by_source=_reads(read),
            releases="" if read is None else read["releases"],
            summary=row["doc_summary"],
            default=row["default"],
            logged=_logged(row["name"], read),
        )
    for name, row in source.items():
        if name not in variables:
            last = "" if _reads(row) else f" in NCCL {_newest(row)}"
            variables[name] = NcclVar(
                name=name,
                kind=_source_kind(row["kind"]),
                documented=False,
                deprecated=False,
                read_by_source=_reads(row),
                releases=row["releases"],
                summary=f"undocumented; read at {row['source_locations']}{last}",
                default="",
                logged=_logged(name, row),
            )
    return variables


def older_releases(var: NcclVar) -> str | None:
    """For a name only releases older than the catalog's read: "read by NCCL 2.21.5-2.30.4,
    not 2.30.7"; None for any other."""
    if var.read_by_source or not var.releases:
        return None
    return f"read by NCCL {var.releases}, not {release()}"


def lookup(name: str) -> NcclVar | None:
    """The entry for a full `NCCL_*` name; None when NCCL neither documents nor reads it."""
    return catalog().get(name)


def did_you_mean(name: str) -> str | None:
    """The closest known NCCL name to a misspelled one, where one is close, compared past
    the prefix (which every name shares, so it says nothing). First a known name cut short
    at a word, where one name of that family is meant: the only one (NCCL_GRAPH_DUMP:
    NCCL_GRAPH_DUMP_FILE) or its switch (NCCL_NET_GDR: NCCL_NET_GDR_LEVEL, not NCCL_NET,
    nor NCCL_NET_GDR_READ); then a known name written out longer (NCCL_ALGORITHM: NCCL_ALGO;
    NCCL_DEBUG_LEVEL: NCCL_DEBUG, not NCCL_DEBUG_FILE); else one that shares at least CLOSE
    of its characters (NCCL_BUFFER_SIZE: NCCL_BUFFSIZE). NCCL_VERSION is close to none, and
    NCCL_SOCKET (cut short of eleven names, none its switch) to none."""
    import difflib

    names = {known.removeprefix(PREFIX): known for known in catalog()}
    typed = name.upper().removeprefix(PREFIX)
    family = sorted(short for short in names if short.startswith(typed + "_"))
    switches = [short for short in family if short.removeprefix(typed + "_") in _SWITCHES]
    if len(family) == 1 or switches:
        return names[min(switches or family, key=len)]
    shorter = [short for short in names if typed.startswith(short)]
    matches = difflib.get_close_matches(typed, shorter, n=1, cutoff=0)
    matches = matches or difflib.get_close_matches(typed, names, n=1, cutoff=CLOSE)
    return names[matches[0]] if matches else None


def unknown_name(name: str) -> tuple[str, str]:
    """Why an unknown `NCCL_*` name is refused, and a suggestion when one is close ("")."""
    hint = did_you_mean(name)
    message = f"{name} is not a variable NCCL documents or reads (NCCL ignores it)"
    return message, f"did you mean {hint}?" if hint else ""


def unknown_name_message(name: str) -> str:
    """`unknown_name` as one line."""
    return "; ".join(part for part in unknown_name(name) if part)


class NameNote(NamedTuple):
    """What is said of a known name: its finding's code, the message and the fix ("")."""

    code: str
    message: str
    fix: str


def name_note(name: str) -> NameNote | None:
    """A known name's note (its code, what is said of the name, the fix or ""): `deprecated`
    (NCCL still reads it), `ignored` (the catalog's release does not read it: deprecated
    and no longer read, or read only by older releases) or `undocumented` (only the source
    reads it)."""
    var = catalog()[name]
    reason = var.summary.rstrip(".")
    older = older_releases(var)
    if older is not None:  # NCCL_SHM_MEMCPY_MODE: NCCL 2.30.7 ignores it, a 2.28 reads it
        deprecated = "deprecated; " if var.deprecated else ""
        fix = "keep it only where the server loads one of those releases"
        return NameNote("ignored", f"{deprecated}{older}, the catalog's release ({reason})", fix)
    if var.deprecated and not var.read_by_source:
        oldest, newest = covered()
        message = f"deprecated and not read by NCCL {oldest} to {newest} ({reason})"
        return NameNote("ignored", message, "")
    if var.deprecated:
        # NCCL_MAX_NCHANNELS: docs/explanation.md cites the code that still reads it.
        message = (
            f"deprecated ({reason}), but NCCL {release()}, the catalog's release, still reads it "
            "and the value applies"
        )
        fix = "moving to the replacement is a tuning change to measure again"
        return NameNote("deprecated", message, fix)
    if not var.documented:
        message = f"not in NCCL's documentation but the source reads it ({var.summary})"
        return NameNote("undocumented", message, "")
    return None
