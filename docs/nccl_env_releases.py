"""Which NCCL releases read each `NCCL_*` name: rewrites the `releases` column (and the rows
of names only older releases read) of nccl_launch/nccl/data/nccl-env-read-by-source.tsv from a
clone of NVIDIA/nccl that has the release tags
(docs/explanation.md#which-releases-the-catalog-covers).

Run: python docs/nccl_env_releases.py NCCL_GIT_DIR [--oldest 2.21.5] [--newest 2.30.7]

A release reads a name where its `src/` has `NCCL_PARAM(Name, "NAME", default)` (the name is
NCCL_NAME), `DEFINE_NCCL_PARAM(name, type, NCCL_NAME, ...)`, or the literal "NCCL_NAME" in a
call of ncclGetEnv, getenv, getEnvFunc (2.28-2.30's debug.cc) or ncclGetLevel: the same sites
`git grep` finds for the newest release's 245 names. Any other "NCCL_..." literal is printed
for a person to judge. A row the table already holds for a name the newest release reads keeps
its kind, default and sites (read from that release, some described by hand: DEFINE_NCCL_PARAM's
types, ncclGetLevel's grammar); every other row is written from the newest release that reads
the name. `releases` lists the runs of consecutive tags that read it: "2.21.5-2.29.7".
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

TABLE = Path(__file__).parent.parent / "nccl_launch/nccl/data/nccl-env-read-by-source.tsv"
COLUMNS = ("name", "kind", "default_in_source", "source_locations", "in_env_rst", "releases")
ENV_RST = "docs/userguide/source/env.rst"  # in the repository since 2.30
NONE: Final = csv.QUOTE_NONE  # as nccl_launch/nccl/catalog.py reads it

_PARAM = re.compile(r'NCCL_PARAM\(\s*\w+\s*,\s*"([A-Z0-9_]+)"\s*,\s*(.*)')
_PARAM_END = re.compile(r"\s*\)\s*;?\s*(//.*|/\*.*)?$")  # `);` and a comment after the default
_DEFINED = re.compile(r"DEFINE_NCCL_PARAM\(\s*\w+\s*,[^,]+,\s*(NCCL_[A-Z0-9_]+)")
_CALL = re.compile(r"\b(ncclGetEnv|getenv|getEnvFunc|ncclGetLevel)\(")
_LITERAL = re.compile(r'"(NCCL_[A-Z0-9_]+)"')


@dataclass
class Read:
    """How one release reads one name: the reader, its default, and where."""

    kind: str
    default: str
    sites: list[str] = field(default_factory=list)


def git(repo: Path, *args: str) -> str:
    command = [shutil.which("git") or "git", "-C", str(repo), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def version(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.removeprefix("v").split("-")[0].split("."))


def tags(repo: Path, oldest: str, newest: str) -> list[str]:
    """The release tags vX.Y.Z-1 from `oldest` to `newest`, oldest first."""
    found = [tag for tag in git(repo, "tag").split() if re.fullmatch(r"v\d+\.\d+\.\d+-1", tag)]
    low, high = version(oldest), version(newest)
    return sorted((tag for tag in found if low <= version(tag) <= high), key=version)


def reads(repo: Path, tag: str) -> tuple[dict[str, Read], set[str]]:
    """The names `tag` reads, and the other "NCCL_..." literals of its src/."""
    lines = git(repo, "grep", "-n", "-E", "NCCL_[A-Z0-9_]+", tag, "--", "src").splitlines()
    names: dict[str, Read] = {}
    others: set[str] = set()
    for line in lines:
        _, path, number, text = line.split(":", 3)
        site = f"{path}:{number}"
        param, defined = _PARAM.search(text), _DEFINED.search(text)
        if param:
            read = names.setdefault(
                "NCCL_" + param[1],
                Read("int64 (NCCL_PARAM/strtoll base0)", _PARAM_END.sub("", param[2])),
            )
            read.sites.append(site)
        elif defined:
            names.setdefault(defined[1], Read("string (DEFINE_NCCL_PARAM)", "")).sites.append(site)
        call = _CALL.search(text)
        for literal in _LITERAL.findall(text):
            if call:
                names.setdefault(literal, Read(f"string ({call[1]})", "")).sites.append(site)
            else:
                others.add(literal)
    return names, others - set(names)


def runs(read_by: list[bool], releases: list[str]) -> str:
    """The releases where `read_by` holds, as runs of consecutive ones: "2.21.5-2.29.7"."""
    spans: list[str] = []
    start: int | None = None
    for index, read in enumerate([*read_by, False]):
        if read and start is None:
            start = index
        elif not read and start is not None:
            first, last = releases[start], releases[index - 1]
            spans.append(first if first == last else f"{first}-{last}")
            start = None
    return ", ".join(spans)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a clone of NVIDIA/nccl with its tags")
    parser.add_argument("--oldest", default="2.21.5")
    parser.add_argument("--newest", default="2.30.7")
    options = parser.parse_args()
    release_tags = tags(options.repo, options.oldest, options.newest)
    releases = [tag.removeprefix("v").split("-")[0] for tag in release_tags]
    by_tag = []
    for tag in release_tags:
        names, others = reads(options.repo, tag)
        by_tag.append(names)
        if others:
            print(f"{tag}: not read through a known reader: {' '.join(sorted(others))}")
    env_rst = git(options.repo, "show", f"{release_tags[-1]}:{ENV_RST}")
    documented = set(re.findall(r"NCCL_[A-Z0-9_]+", env_rst))
    with TABLE.open(encoding="utf-8") as table:
        kept = {row["name"]: row for row in csv.DictReader(table, delimiter="\t", quoting=NONE)}
    rows = []
    for name in sorted(set().union(*by_tag)):
        read_by = [name in names for names in by_tag]
        last = by_tag[max(index for index, read in enumerate(read_by) if read)]
        row = kept.get(name) if read_by[-1] else None
        read = last[name]
        if row is not None and row["source_locations"] != ", ".join(read.sites):
            print(f"{name}: kept sites {row['source_locations']}, found {', '.join(read.sites)}")
        if row is not None and row["default_in_source"] != read.default:
            print(f"{name}: kept default {row['default_in_source']}, found {read.default}")
        if row is None:
            row = {
                "name": name,
                "kind": read.kind,
                "default_in_source": read.default,
                "source_locations": ", ".join(read.sites),
                "in_env_rst": "yes" if name in documented else "no",
            }
        rows.append({**row, "releases": runs(read_by, releases)})
    with TABLE.open("w", encoding="utf-8", newline="") as table:
        writer = csv.DictWriter(table, COLUMNS, delimiter="\t", lineterminator="\n", quoting=NONE)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} names read by NCCL {releases[0]} to {releases[-1]} ({len(releases)} tags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
