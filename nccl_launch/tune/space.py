"""The search space: the values to try for each NCCL variable, from a TOML file (`--space`)
and repeated `--try NAME=V1,V2`, each read as a profile's `[nccl]` value is."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from nccl_launch.files.reading import read_text
from nccl_launch.files.toml_text import TooDeep, parse_toml
from nccl_launch.findings import Finding, Refused
from nccl_launch.profile.model import nccl_value
from nccl_launch.tune.search import Space

UNSET = "unset"  # a value of the space: the variable left out, so NCCL's own default applies
EXAMPLE = 'PROTO = ["LL", "LL128", "unset"]'


def _values(short: str, given: list[Any]) -> tuple[str | None, ...]:
    """The canonical values of `short`, each once, in order; ValueError names the bad one."""
    found = dict.fromkeys(None if value == UNSET else nccl_value(short, value) for value in given)
    return tuple(found)


def read_space_file(path: Path) -> Space:
    """The space a TOML file declares, one array of values per NCCL variable (no prefix)."""
    text = read_text(path, "search space", trusted=True)  # it shapes the servers' env
    where = f"search space {path}"
    try:
        data = parse_toml(text)
    except TooDeep as error:
        said = f"line {error.line}: {error}"
        raise Refused(Finding("space-not-toml", where, said)) from None
    except (tomllib.TOMLDecodeError, ValueError) as error:
        raise Refused(Finding("space-not-toml", where, f"not TOML: {error}")) from None
    space: Space = {}
    for short, given in data.items():
        if not isinstance(given, list) or not given:
            fix = f"valid: an array of the values to try, as in {EXAMPLE}"
            raise Refused(Finding("space-not-list", where, f"{short}: not a list of values", fix))
        try:
            space[short] = _values(short, given)
        except ValueError as error:
            raise Refused(Finding("value-to-try", where, f"{short}: {error}")) from None
    return space


def parse_try(option: str) -> tuple[str, tuple[str | None, ...]]:
    """`--try NAME=V1,V2,...` as (NAME, its canonical values)."""
    short, equals, listed = option.partition("=")
    where = f"--try {option}"
    if not equals or not short or not listed:
        said = "valid: NAME=V1,V2,... as in --try PROTO=LL,LL128,unset"
        raise Refused(Finding("try-syntax", where, said))
    try:
        return short, _values(short, listed.split(","))
    except ValueError as error:
        raise Refused(Finding("value-to-try", where, f"{short}: {error}")) from None


def build_space(path: Path | None, tries: tuple[str, ...]) -> Space:
    """The file's space with each `--try` over it (a `--try` replaces the file's values of
    its variable); refused when empty, or when two `--try` name one variable."""
    space = read_space_file(path) if path is not None else {}
    named: set[str] = set()
    for option in tries:
        short, values = parse_try(option)
        if short in named:
            said = f"{short} is named twice"
            raise Refused(Finding("try-repeated", f"--try {option}", said, "give its values once"))
        named.add(short)
        space[short] = values
    if not space:
        said = "nothing to search: give the values to try with --space FILE or --try NAME=V1,V2"
        raise Refused(Finding("empty-space", "", said))
    return space
