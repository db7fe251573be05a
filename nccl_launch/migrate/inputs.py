"""`convert`'s inputs besides a start script: an environment file (KEY=VALUE lines, as
systemd's EnvironmentFile= and `.env` hold them) and an nccl.conf, each read as the program
that reads it would: `run --env-file` for the one, NCCL for the other."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePath

from nccl_launch.env.env_files import env_file_lines
from nccl_launch.files.reading import read_text
from nccl_launch.findings import Finding, Refused, said_of
from nccl_launch.migrate.shell.script import read_script
from nccl_launch.migrate.shell.sourced import read_script_file
from nccl_launch.migrate.start import StartCommand
from nccl_launch.nccl import conf

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def input_kind(path: str) -> str:
    """What `path` holds unless `--from` says: NCCL's own file names (`nccl.conf`,
    `.nccl.conf`) an nccl.conf, a name ending in `.env` an environment file, else a script."""
    name = PurePath(path).name
    if name in ("nccl.conf", ".nccl.conf"):
        return "nccl-conf"
    return "env" if name.endswith(".env") else "script"


def read_input(path: str, kind: str | None, environ: Mapping[str, str]) -> StartCommand:
    """What `convert` reads from `path` (`-`: stdin, a script), of `kind` (default: as its
    name says); an error names the file."""
    kind = kind or input_kind(path)
    if kind != "script" and path == "-":
        message = f"--from {kind} reads a file: name it (stdin is read as a script)"
        raise Refused(Finding("from-stdin", "", message))
    if kind == "env":
        return read_env_input(Path(path))
    if kind == "nccl-conf":
        return read_conf_input(Path(path))
    text = read_script_file(path)
    script = "stdin" if path == "-" else path
    try:
        found, state = read_script(text, environ)
    except Refused as refused:  # `line 20: ...`, of which file
        raise said_of(script, refused) from None
    return StartCommand(
        env=found.env,
        argv=found.argv,
        cwd=state.cwd,
        lines={name: state.lines[name] for name in found.env if name in state.lines},
        notes=state.notes,
        at=found.at,
        words=found.words,
        sourced=found.sourced,
        secret_files=state.secret_files,
    )


def read_env_input(path: Path) -> StartCommand:
    """The variables of an environment file, parsed as `run --env-file` parses it."""
    start = StartCommand(env={}, argv=[])
    for each in env_file_lines(path):
        start.env[each.key], start.lines[each.key] = each.value, f"line {each.line}"
    return start


def read_conf_input(path: Path) -> StartCommand:
    """The variables an nccl.conf sets, as NCCL reads it: the first line of a key counts
    (NCCL never overwrites a value), and a key is all before the `=`, spaces included."""
    entries = conf.parse(read_text(path, "nccl.conf", trusted=True), str(path))
    start = StartCommand(env={}, argv=[])
    for entry in entries:
        if not _NAME.fullmatch(entry.key):
            message = f"{entry.key!r} is not a variable name: NCCL sets a variable of exactly "
            message += "that name, which nothing reads"
            fix = "write KEY=VALUE without spaces"
            raise Refused(Finding("conf-key", f"{path}: line {entry.line}", message, fix))
        if entry.key in start.env:
            message = f"{entry.key} is set again; NCCL keeps the value of {start.lines[entry.key]}"
            start.notes.append(
                Finding("conf-repeated", f"line {entry.line}", message, severity="warning")
            )
            continue
        start.env[entry.key], start.lines[entry.key] = entry.value, f"line {entry.line}"
    return start
