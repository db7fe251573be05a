"""Asking the installed server: a kind's probe script, run by the server's own interpreter
with the environment `run` gives it, answers one marked line of JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Collection, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from nccl_launch.files.paths import is_regular
from nccl_launch.serving.command import PYTHON
from nccl_launch.serving.table import ServerTable
from nccl_launch.tools import ask as ask_tool

MARK = "NCCL_LAUNCH_PROBE "  # what each kind's probe.py prints before its answer
_TEXT_KEYS = {
    "import": ("error",),
    "parse": ("python", "python_version", "version", "error"),
    None: ("python", "python_version", "version"),
}


def ask(
    server: ServerTable, package: str, server_args: list[str], env: Mapping[str, str],
    fields: Collection[str], timeout: float,
) -> dict[str, Any]:  # fmt: skip
    """Run `package`'s probe.py under the server's interpreter, with the environment `run`
    gives the server (its PATH finds a bare interpreter, its PYTHONPATH the package); the
    script travels inline (`-c`) so that nothing beside it on disk can shadow the server's
    package. It reads no input: with PYTHONINSPECT in that environment, a terminal's would
    hold it at Python's prompt. An answer without the parsed `fields` is none; one not given
    in `timeout` seconds is the stage `timeout`, the probe and what it started killed."""
    source = resources.files(package).joinpath("probe.py").read_text("utf-8")
    argv = [*interpreter(server.python, env), "-c", source, *server_args]
    try:
        done = ask_tool(argv, timeout, cwd=server.cwd, env=env)
    except OSError as error:  # preflight looked at its cwd and interpreter first: a race
        return {"stage": "interpreter", "error": f"cannot run {server.python}: {error}"}
    except subprocess.TimeoutExpired:  # its text holds the argv, credentials and all
        return {"stage": "timeout", "error": f"{server.python} did not answer in {timeout:g} s"}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            answer = _answer(line.removeprefix(MARK), fields)
            if answer is None:
                return {"stage": "interpreter", "error": f"{server.python} answered {line!r:.200}"}
            return answer
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return {"stage": "interpreter", "error": f"{server.python} did not answer: {tail[0]}"}


def interpreter(python: str, env: Mapping[str, str]) -> list[str]:
    """The command that runs Python code as `python` runs the server: `python` itself, or,
    for a console script (`vllm`, `sglang`: `[server] python` of a converted `vllm serve`
    line), the Python of its `#!` line, which imports the same packages."""
    found = Path(shutil.which(python, path=env.get("PATH", os.defpath)) or python)
    try:
        if not is_regular(found):  # a FIFO would hold the read; running it says what it is
            return [python]
        with found.open("rb") as script:
            first = script.readline(4096)
    except OSError:
        return [python]  # it cannot be read: running it says why
    words = first.removeprefix(b"#!").decode(errors="replace").split()
    if words[:1] and Path(words[0]).name == "env":  # `#!/usr/bin/env python3`
        words = words[1:]
    if not first.startswith(b"#!") or not words or not PYTHON.fullmatch(Path(words[0]).name):
        return [python]  # Python itself, or a wrapper (`#!/bin/sh`) that starts it
    return words


def _answer(text: str, fields: Collection[str]) -> dict[str, Any] | None:
    """The probe's answer when it has the shape a probe.py writes, else None (another
    program printed the mark, or a broken interpreter)."""
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
        isinstance(parsed, dict) and set(fields) <= set(parsed)
    ):
        return None
    return answer
