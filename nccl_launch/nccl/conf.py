"""NCCL's config files, read with NCCL's exact syntax and precedence (src/misc/param.cc).

`NCCL_CONF_FILE` (or `$HOME/.nccl.conf`), then `/etc/nccl.conf`; each `KEY=VALUE` is applied
with `setenv(key, value, 0)`, so the process environment wins over the first file, which wins
over the second. Values set this way never appear in /proc/PID/environ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SYSTEM_CONF = "/etc/nccl.conf"
# Where nccl-launch looks for the file NCCL reads as /etc/nccl.conf: for tests, which must not
# depend on the host's, and for a container whose /etc is mounted elsewhere.
SYSTEM_CONF_VAR = "NCCL_LAUNCH_SYSTEM_CONF"
# NCCL 2.30 reads the file with `fgets` into a 4096-byte buffer: a read ends after a newline
# or after 4095 bytes, and the rest of a longer line comes back from the next read as a line
# of its own. The key and the value are then copied with `strncpy(..., 1023)`: each is cut
# at 1023 bytes (docs/explanation.md, "How NCCL reads ... nccl.conf", says where each comes from).
MAX_READ = 4095
MAX_FIELD = 1023


@dataclass(frozen=True)
class ConfEntry:
    """One `KEY=VALUE` line as NCCL sees it: no trimming, no quote removal."""

    path: str
    line: int
    key: str
    value: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse(text: str, path: str) -> list[ConfEntry]:
    """The assignments of one file: `#` in column 0 is a comment, lines without `=` skipped.

    The key is everything before the first `=` (spaces included: `NCCL_PROTO = LL` sets a
    variable named `NCCL_PROTO `), the value everything after (quotes included). A CR before
    the newline is stripped, as NCCL does since 2.30; a NUL byte ends the line. A line over
    4095 bytes is read as several, as `fgets` hands them to NCCL; each is numbered by the line
    of the file it comes from.
    """
    entries = []
    for number, read in _reads(text):
        # NCCL handles the line as a C string: it ends at the first NUL byte.
        line = read.removesuffix("\n").removesuffix("\r").partition("\0")[0]
        if line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        if key:
            entries.append(ConfEntry(path, number, _cut(key), _cut(value)))
    return entries


def _reads(text: str) -> list[tuple[int, str]]:
    """What each `fgets(buffer, 4096, file)` returns, with the file's line number: a line and
    its newline, in pieces of at most 4095 bytes."""
    reads = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        data = (line + ("\n" if number < len(lines) else "")).encode("utf-8", "surrogateescape")
        for start in range(0, len(data), MAX_READ):
            reads.append(
                (number, data[start : start + MAX_READ].decode("utf-8", "surrogateescape"))
            )
    return reads


def _cut(text: str) -> str:
    """The first 1023 bytes, as `strncpy` copies them; the file was decoded with
    surrogateescape, so a multi-byte character cut in two keeps its raw bytes."""
    data = text.encode("utf-8", "surrogateescape")
    return text if len(data) <= MAX_FIELD else data[:MAX_FIELD].decode("utf-8", "surrogateescape")


def conf_paths(env: Mapping[str, str]) -> list[Path]:
    """The files NCCL reads for a process with this environment, first one winning."""
    user = env.get("NCCL_CONF_FILE") or (f"{env['HOME']}/.nccl.conf" if env.get("HOME") else "")
    system = Path(env.get(SYSTEM_CONF_VAR) or SYSTEM_CONF)
    return [Path(user), system] if user else [system]


def applied(entries: list[ConfEntry], env: Mapping[str, str]) -> list[ConfEntry]:
    """The entries NCCL would apply: keys the environment lacks, the first file winning."""
    seen = set(env)
    result = []
    for entry in entries:
        if entry.key not in seen:
            seen.add(entry.key)
            result.append(entry)
    return result
