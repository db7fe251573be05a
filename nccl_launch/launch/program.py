"""Whether the program a launch starts can start on this host: the server's cwd is a directory,
and its interpreter (or the command after `--`) an executable file, looked up as execvpe looks
it up. One judgement, in one wording and of this host (exit 3), for `run` before it execs,
`preflight` (its `python` and `paths` lines, and instead of asking the server), and `tune`
before each trial."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from nccl_launch.files.paths import kind_of as kind_of_file
from nccl_launch.files.paths import status_of
from nccl_launch.files.trust import described, others_may_create
from nccl_launch.findings import Finding, Refused, Severity

SERVER_PYTHON = "[server] python"  # what names the program of a launch with a [server] table
COMMAND = "command"  # and of one without: the command after `--`
# What a check of this host saw: a line that passes, or a finding for each problem.
Seen = list[str | Finding]


def problem(code: str, message: str, fix: str = "", severity: Severity = "error") -> Finding:
    """A problem of this host a check found, its message naming the key, the file or the
    value; the profile is valid elsewhere."""
    return Finding(code, "", message, fix, severity, "host")


def cwd_seen(cwd: str) -> str | Finding:
    """What preflight says of a good `[server] cwd`, or the problem that stops the start."""
    try:
        status = status_of(Path(cwd), "[server] cwd")
    except Refused as error:
        return dataclasses.replace(error.findings[0], code="cwd")
    if status is not None and stat.S_ISDIR(status.st_mode):
        return f"[server] cwd {cwd} exists"
    return problem(
        "cwd", f"[server] cwd {cwd} {'is not a directory' if status else 'does not exist'}"
    )


def program_seen(program: str, what: str, cwd: str | None, env: Mapping[str, str]) -> str | Finding:
    """What preflight says of the program `what` names (`[server] python`, `command`), or the
    problem that stops it: a name is looked up on the PATH of the environment `env` it gets, as
    execvpe looks it up; a path is taken from the server's `cwd`."""
    noun, whose = ("interpreter", "the server's") if what == SERVER_PYTHON else ("program", "its")
    if "/" not in program:
        folders = os.pathsep.join(os.get_exec_path(dict(env)))
        found = shutil.which(program, path=folders)
        if found is None:
            message = f"{what} {program!r} is not found on {whose} PATH ({folders})"
            return problem("not-found", message, f"write the {noun}'s absolute path")
        return f"{what} {program!r} is {found} on {whose} PATH"
    path = Path(cwd or ".") / program
    try:
        status = status_of(path, what)
    except Refused as error:
        return dataclasses.replace(error.findings[0], code="not-executable")
    if status is None:
        trouble = "does not exist"
    elif not stat.S_ISREG(status.st_mode):
        trouble = f"is {kind_of_file(status.st_mode)}, not an executable file"
    elif not os.access(path, os.X_OK):
        trouble = "is not an executable file"
    else:
        return f"{what} {program} exists"
    return problem("not-executable", f"{what} {program} {trouble}")


def cwd_creatable(cwd: str | None) -> Finding | None:
    """As root, the problem of a working directory (`cwd`, else this one, which the server
    inherits) where another user may create files: `python -m` and `-c` put it first on
    sys.path, so a `sglang/` or `torch.py` made there would run as root, in the server and in
    preflight's question to it."""
    folder = (Path(cwd) if cwd else Path.cwd()).absolute()
    try:
        status = others_may_create(folder, "the server's working directory")
    except Refused as error:
        return dataclasses.replace(error.findings[0], code="cwd", cause="host")
    except OSError as error:
        return problem("cwd", str(error.strerror))
    if status is None:
        return None
    return problem(
        "cwd",
        f"the server's working directory {described(folder, status)} lets another "
        "user create files in it, which Python imports before the server's own "
        "(-m and -c put it first on sys.path)",
        "start it from a folder root alone writes, or set [server] cwd to one",
    )


def start_findings(
    program: str, what: str, cwd: str | None, env: Mapping[str, str]
) -> list[Finding]:
    """What stops the program from starting here: its cwd first (exec changes to it first;
    as root, the server's Python's must be one where no other user may create files), then
    the program itself."""
    seen = [] if cwd is None else [cwd_seen(cwd)]
    if what == SERVER_PYTHON and (not seen or isinstance(seen[0], str)):
        seen.append(cwd_creatable(cwd) or "")
    seen.append(program_seen(program, what, cwd, env))
    return [each for each in seen if isinstance(each, Finding)]
