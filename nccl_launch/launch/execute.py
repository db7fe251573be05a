"""The end of `run`: replace nccl-launch with the server (same PID, its signals, its exit code)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from nccl_launch.findings import Finding, Refused


def exec_command(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> NoReturn:
    """Replace this process with the command: same PID, its signals and exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as error:
            unmoved = f"cannot change to the server's cwd {cwd}: {error.strerror}"
            raise Refused(Finding("cwd", "", unmoved, cause="host")) from None
    try:
        os.execvpe(argv[0], list(argv), dict(env))
    except OSError as error:
        unrun = f"cannot execute {argv[0]}: {error.strerror}"
        raise Refused(Finding("not-executable", "", unrun, cause="host")) from None
