"""The files `convert` reads as shell: the start script, and those it reads with `source` or
`.`, found where bash finds them, read only when they are safe to follow (a virtual
environment's `activate` is recognised, never run)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from nccl_launch.files.paths import is_regular
from nccl_launch.files.reading import MAX_BYTES, read_stdin, read_text
from nccl_launch.findings import Finding, Refused
from nccl_launch.migrate.shell import syntax
from nccl_launch.migrate.shell.expansion import Lookup, expand, known
from nccl_launch.migrate.shell.refused import ShellError

# How deep sourced files may nest; deeper is a file that sources itself, in all likelihood.
MAX_DEPTH = 8
_CALLERS = "\x01"  # stands for $PATH as it was before an assignment


def read_script_file(path: str) -> str:
    """The text of a start script (a regular file, or `-` for stdin), at most 1 MiB of it, as
    bash reads it: bytes, where only LF ends a line (a CR is part of its word) and a byte
    that is not UTF-8 is kept (as a surrogate) for the reader to refuse where it counts."""
    if path != "-":
        return read_text(Path(path), "script", errors="surrogateescape")
    return read_stdin(MAX_BYTES, "script").decode("utf-8", "surrogateescape")


def _here(cwd: str | None, path: str) -> str:
    """`path` as the script opens it after its `cd`s (`cwd`, None before any)."""
    return os.path.normpath(PurePosixPath(cwd or "") / path)


def locate(name: str, cwd: str | None, search: str | None) -> str:
    """The file `source NAME` reads, as bash finds it: a name with a `/` from the script's
    directory; else the first readable file of that name in a directory of `search` (the
    script's PATH), then the script's directory (bash outside POSIX mode)."""
    if "/" not in name:
        for folder in (search or "").split(":"):
            candidate = _here(cwd, f"{folder or '.'}/{name}")
            if is_regular(Path(candidate)) and os.access(candidate, os.R_OK):
                return candidate
    return _here(cwd, name)


def read_sourced(path: str) -> str:
    """The text of a sourced file as the start script's (`read_script_file`): a regular file
    (a symlink is resolved, then checked), at most 1 MiB, and as root one no other user could
    have written."""
    text = read_text(Path(path), "sourced file", trusted=True, errors="surrogateescape")
    if "\x00" in text:  # bash stops reading such a file: what follows would be lost
        raise Refused(
            Finding("nul-byte", f"sourced file {path}", "a NUL byte", "a sourced file is text")
        )
    return text


def venv_bin(path: str) -> str | None:
    """The absolute `bin` directory of the virtual environment whose `activate` is `path`
    (`VENV/bin/activate` beside `VENV/pyvenv.cfg`, as venv, virtualenv and uv write them);
    None for any other file. Activating puts that directory first on PATH; the file is
    checked like any sourced file, never run."""
    folder = Path(path).absolute().parent
    if Path(path).name != "activate" or folder.name != "bin":
        return None
    if not is_regular(folder.parent / "pyvenv.cfg"):
        return None
    read_sourced(path)
    return str(folder)


@dataclass(frozen=True)
class Sourced:
    """A file `source` reads: where, and its text; or the `bin` of a venv it activates."""

    path: str
    text: str = ""
    venv_bin: str | None = None


def find(
    written: str, name: str, cwd: str | None, search: str | None, within: Sequence[str]
) -> Sourced:
    """What `source NAME` reads (`written` so, expanded to `name`) from inside the sourced
    files `within`; Refused when it cannot be followed: a variable the script does not
    set, missing, not a regular file, untrusted, too large, one of `within` (a file that
    sources itself), or nesting too deep."""
    name = known(name, f"sourced file {written}")
    path = locate(name, cwd, search)
    folder = venv_bin(path)
    if folder is not None:
        return Sourced(path, venv_bin=folder)
    if path in within:
        chain = " -> ".join([*within[within.index(path) :], path])
        message = f"already being read ({chain}): bash would loop"
        raise Refused(Finding("source-loop", f"sourced file {path}", message))
    if len(within) == MAX_DEPTH:
        message = f"sourced files nest more than {MAX_DEPTH} deep (does one source itself?)"
        raise Refused(Finding("source-depth", f"sourced file {path}", message))
    return Sourced(path, read_sourced(path))


def folders_before(value: syntax.Word, lookup: Lookup, line: int) -> list[str]:
    """The folders `PATH=value` puts before $PATH, "" for one it cannot tell (`$(...)/bin`)."""

    def marked(name: str) -> str | None:
        return _CALLERS if name == "PATH" else lookup(name)

    try:
        text = expand(value, marked, line, assignment=True)
    except ShellError:
        return [""]
    return [folder for folder in text.partition(_CALLERS)[0].split(":") if folder]


def on_path(name: str, folders: list[str]) -> str | None:
    """Where bash finds the command `name` in `folders`: the first executable file; None
    for a path, or a name in none of them or after a relative folder (that depends on the
    directory the server starts in)."""
    for folder in folders if "/" not in name else []:
        if not folder.startswith("/"):
            return None
        candidate = Path(folder) / name
        if is_regular(candidate) and os.access(candidate, os.X_OK):
            return str(candidate)
    return None
