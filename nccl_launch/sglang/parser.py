"""Asking the installed SGLang: its parser reads the exact argv in the server's interpreter."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from importlib import resources
from typing import Any

from nccl_launch.sglang.argv import structured_values
from nccl_launch.sglang.probe import FIELDS, MARK
from nccl_launch.sglang.server import Server

PROBE_TIMEOUT_S = 300  # importing SGLang (and torch) on a cold disk is slow


def probe_sglang(server: Server, server_args: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    """Run the probe under the server's interpreter, with the environment `run` gives the
    server (its PATH finds a bare interpreter, its PYTHONPATH the package); the script
    travels inline (`-c`) so that nothing beside it on disk can shadow the `sglang` package.
    It reads no input: with PYTHONINSPECT in that environment, a terminal's would hold it at
    Python's prompt."""
    source = resources.files("nccl_launch.sglang").joinpath("probe.py").read_text("utf-8")
    try:
        done = subprocess.run(
            [server.python, "-c", source, *server_args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT_S,
            cwd=server.cwd,
            env=dict(env),
            check=False,
        )
    except OSError as error:
        if server.cwd is not None and error.filename == server.cwd:  # not the interpreter
            problem = f"cannot change to the server's cwd {server.cwd} ([server] cwd)"
            return {"stage": "interpreter", "error": f"{problem}: {error.strerror}"}
        return {"stage": "interpreter", "error": f"cannot run {server.python}: {error}"}
    except subprocess.TimeoutExpired:  # its text holds the argv, credentials and all
        late = f"{server.python} did not answer in {PROBE_TIMEOUT_S} s"
        return {"stage": "interpreter", "error": late}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            answer = _answer(line.removeprefix(MARK))
            if answer is None:
                return {"stage": "interpreter", "error": f"{server.python} answered {line!r:.200}"}
            return answer
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return {"stage": "interpreter", "error": f"{server.python} did not answer: {tail[0]}"}


_TEXT_KEYS = {
    "import": ("error",),
    "parse": ("python", "python_version", "version", "error"),
    None: ("python", "python_version", "version"),
}


def _answer(text: str) -> dict[str, Any] | None:
    """The probe's answer when it has the shape probe.py writes, else None (another program
    printed the mark, or a broken interpreter)."""
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(answer, dict) or answer.get("stage") not in _TEXT_KEYS:
        return None
    if not all(isinstance(answer.get(key), str) for key in _TEXT_KEYS[answer.get("stage")]):
        return None
    parsed = answer.get("parsed")
    if answer.get("stage") is None and not (
        isinstance(parsed, dict) and set(FIELDS) <= set(parsed)
    ):
        return None
    return answer


def expected_values(server: Server) -> dict[str, object]:
    """What SGLang's parser must read back (its attribute names), for the fields the profile
    sets; the others keep SGLang's defaults."""
    values = structured_values(server)
    return {field.replace(".", "_"): value for field, value in values.items() if value is not None}
