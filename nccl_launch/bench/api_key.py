"""The API key the server checks, as its kind reads it (SGLang's `--api-key`; vLLM's, else
VLLM_API_KEY): from the held server's own command line and environment, sent only back to
that server, never shown."""

from __future__ import annotations

import contextlib
import re

import psutil

from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import ServerKind
from nccl_launch.live.processes import HeldProcess

# What an HTTP header carries intact: printable ASCII, without the spaces a server strips.
_SENDABLE = re.compile(r"[!-~]([ -~]*[!-~])?")


def server_api_key(server: HeldProcess, kind: ServerKind) -> str | None:
    """The key the held main process was started with, as `kind` reads it from its argv and
    its environment (as Python's os.environ reads /proc/PID/environ: the last entry of a
    name); None when it has none (or ended: the check after the runs says so)."""
    process = server.process()
    argv: list[str] = []
    env: dict[str, str] = {}
    with contextlib.suppress(psutil.Error):  # read what can be: another user's environ cannot
        if process is not None:
            argv = process.cmdline()
            env = process.environ() if kind.credentials.api_key_env else {}
    key = kind.credentials.request_key(argv, env)
    if key is not None and not _SENDABLE.fullmatch(key):
        credentials = kind.credentials
        where = (
            credentials.api_key_flag
            if credentials.request_key(argv, {}) == key
            else credentials.api_key_env
        )
        said = f"its {where} holds a character an HTTP header cannot carry (valid: printable "
        said += "ASCII, no space at either end)"
        fix = "bench cannot send it"
        raise Refused(Finding("unsendable-key", f"pid {server.pid}", said, fix, cause="host"))
    return key
