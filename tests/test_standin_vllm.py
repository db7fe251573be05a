"""The vLLM stand-in (tests/standin/vllm) is shaped like vLLM 0.33.0: its process tree, the
environment vLLM gives it, its streaming API and its API key, seen from outside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx
import psutil

from tests.helpers import STANDIN, Server, free_port

SERVE = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]


def get(port: int, path: str, key: str | None = None, body: object = None) -> tuple[int, bytes]:
    """The status and body of one request to the stand-in (POST with a JSON `body`)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    method = "GET" if body is None else "POST"
    url = f"http://127.0.0.1:{port}{path}"
    response = httpx.request(method, url, headers=headers, json=body, timeout=10)
    return response.status_code, response.content


def events(stream: bytes) -> list[Any]:
    """The `data:` events of a server-sent stream, `[DONE]` as a string."""
    found: list[Any] = []
    for line in stream.decode().splitlines():
        if line.startswith("data: "):
            text = line.removeprefix("data: ")
            found.append(text if text == "[DONE]" else json.loads(text))
    return found


def test_the_vllm_standin_has_vllms_tree_environment_stream_and_key() -> None:
    port = free_port()
    argv = [*SERVE, "--host", "127.0.0.1", "--port", str(port), "--model", "/models/m",
            "-tp", "2", "--api_key", "secret", "--enable-sleep-mode",
            "--sleep-mode-offload-cudagraph"]  # fmt: skip
    env = {"SPT_NOENV": "1", "VLLM_BATCH_INVARIANT": "1", "NCCL_PROTO": "LL"}
    server = Server(argv, env, port)
    try:
        titled = {child.cmdline()[0]: child for child in server.children()}
        engine = titled["VLLM::EngineCore"]
        assert engine.ppid() == server.process.pid
        assert "vllm.entrypoints.cli.main" in psutil.Process(server.process.pid).cmdline()
        for rank in (0, 1):
            worker = titled[f"VLLM::Worker_TP{rank}"]
            assert worker.ppid() == engine.pid
            inherited = worker.environ()
            # Set by the API server before the engine starts: every child inherits them.
            assert inherited["NCCL_GRAPH_REGISTER"] == "0"
            assert inherited["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
            # Batch invariance is set by the worker itself, after it started: not in /proc.
            assert inherited["NCCL_PROTO"] == "LL"
            assert "NCCL_LAUNCH_MODE" not in inherited

        assert get(port, "/health") == (200, b"")
        assert get(port, "/version") == (200, b'{"version": "0.33.0"}')
        assert get(port, "/v1/models") == (401, b'{"error":"Unauthorized"}')
        status, models = get(port, "/v1/models", "secret")
        assert (status, json.loads(models)["data"][0]["id"]) == (200, "/models/m")

        asked = {"model": "/models/m", "prompt": "x", "max_tokens": 3, "stream": True,
                 "stream_options": {"include_usage": True}}  # fmt: skip
        status, stream = get(port, "/v1/completions", "secret", asked)
        *tokens, usage, done = events(stream)
        assert status == 200
        assert [token["choices"][0]["finish_reason"] for token in tokens] == [None, None, "length"]
        assert tokens[0]["id"].startswith("cmpl-")
        assert usage["choices"] == []
        assert usage["usage"] == {"prompt_tokens": 1, "total_tokens": 4, "completion_tokens": 3}
        assert done == "[DONE]"
    finally:
        server.stop()


def test_the_vllm_standin_refuses_an_unknown_flag_as_argparse_does() -> None:
    result = subprocess.run(
        [*SERVE, "/models/m", "--tensor-paralel-size", "2"],
        env={**os.environ, "PYTHONPATH": str(STANDIN)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "unrecognized arguments: --tensor-paralel-size 2" in result.stderr
