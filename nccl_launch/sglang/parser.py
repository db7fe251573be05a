"""Asking the installed SGLang: its parser reads the exact argv in the server's interpreter."""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from typing import Any

from nccl_launch.sglang.argv import structured_values
from nccl_launch.sglang.server import Server

PROBE_MARK = "NCCL_LAUNCH_PROBE "
PROBE_TIMEOUT_S = 300  # importing SGLang (and torch) on a cold disk is slow


def probe_sglang(server: Server, server_args: list[str]) -> dict[str, Any]:
    """Run the probe under the server's interpreter; the script travels inline (`-c`)
    so that nothing beside it on disk can shadow the `sglang` package."""
    source = resources.files("nccl_launch.sglang").joinpath("probe.py").read_text("utf-8")
    try:
        done = subprocess.run(
            [server.python, "-c", source, *server_args],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd=server.cwd,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"stage": "interpreter", "error": f"cannot run {server.python}: {error}"}
    for line in done.stdout.splitlines():
        if line.startswith(PROBE_MARK):
            result: dict[str, Any] = json.loads(line.removeprefix(PROBE_MARK))
            return result
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return {"stage": "interpreter", "error": f"{server.python} did not answer: {tail[0]}"}


def expected_values(server: Server) -> dict[str, object]:
    """What SGLang's parser must read back (its attribute names), for the fields the profile
    sets; the others keep SGLang's defaults."""
    values = structured_values(server)
    return {field.replace(".", "_"): value for field, value in values.items() if value is not None}
