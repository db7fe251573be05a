"""The API key the server checks (SGLang's `--api-key`): read from the held server's own
command line, sent only back to that server, never shown."""

from __future__ import annotations

import re
from collections.abc import Sequence

import psutil

from nccl_launch.errors import HostError
from nccl_launch.live.processes import HeldProcess
from nccl_launch.sglang.facts import API_KEY_FLAG, API_KEY_SHORTEST

# What an HTTP header carries intact: printable ASCII, without the spaces a server strips.
_SENDABLE = re.compile(r"[!-~]([ -~]*[!-~])?")


def api_key(argv: Sequence[str]) -> str | None:
    """The key SGLang's parser reads from `argv`: the last `--api-key KEY` or `--api-key=KEY`
    (or a prefix of the flag down to `--ap`); None without one, or when it is empty."""
    key: str | None = None
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if len(name) >= len(API_KEY_SHORTEST) and API_KEY_FLAG.startswith(name):
            key = value if equals else next(words, None)
    return key or None


def server_api_key(server: HeldProcess) -> str | None:
    """The key the held main process was started with; None when it has none (or ended: the
    check after the runs says so)."""
    process = server.process()
    try:
        key = api_key(process.cmdline()) if process is not None else None
    except psutil.Error:
        key = None
    if key is not None and not _SENDABLE.fullmatch(key):
        raise HostError(
            f"pid {server.pid}: its {API_KEY_FLAG} holds a character an HTTP header cannot "
            "carry (valid: printable ASCII, no space at either end); bench cannot send it"
        )
    return key
