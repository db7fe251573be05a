"""vLLM's own parser, asked by `nccl_launch/vllm/probe.py` in the server's interpreter.

The interpreter is a real vLLM 0.33.0 install (made by .ci/vllm-venv in CI), on CPUs only.
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.vllm.probe import FIELDS, MARK

pytestmark = pytest.mark.slow  # each imports vLLM (seconds): first in the run

PROBE = resources.files("nccl_launch.vllm").joinpath("probe.py").read_text("utf-8")
SPECULATIVE = {"method": "eagle3", "model": "/models/d", "num_speculative_tokens": 3}
KEY = "sk-never-printed"


def ask_vllm(python: str, *argv: str) -> tuple[dict[str, Any], str]:
    """The probe's answer, as parser code runs it (inline, no input), and all it printed."""
    done = subprocess.run(
        [python, "-c", PROBE, *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert lines, done.stderr
    return json.loads(lines[-1].removeprefix(MARK)), done.stdout + done.stderr


def test_the_serve_argv_parses_to_the_values_vllm_will_use(vllm_python: str) -> None:
    answer, printed = ask_vllm(
        vllm_python, "serve", "/models/m", "--tensor-parallel-size", "8", "--host", "127.0.0.1",
        "--port", "8000", "--speculative-config", json.dumps(SPECULATIVE), "--api-key", KEY,
    )  # fmt: skip
    assert answer["version"] == "0.33.0"
    assert set(answer["parsed"]) == set(FIELDS)
    assert answer["parsed"] == {
        "model": "/models/m",
        "tensor_parallel_size": 8,
        "pipeline_parallel_size": 1,
        "host": "127.0.0.1",
        "port": 8000,
        "nnodes": 1,
        "node_rank": 0,
        "master_addr": "127.0.0.1",
        "master_port": 29501,
        "speculative_config": SPECULATIVE,
        "spec_method": None,
        "spec_model": None,
        "spec_tokens": None,
        "api_key": True,
    }
    assert KEY not in printed


def test_a_misspelled_flag_is_refused_as_vllm_serve_refuses_it(vllm_python: str) -> None:
    argv = ("serve", "/models/m", "--tensor-paralel-size", "8")
    answer, _ = ask_vllm(vllm_python, *argv)
    assert answer["stage"] == "parse"
    assert answer["error"] == "unrecognized arguments: --tensor-paralel-size 8"
    vllm = subprocess.run(
        [str(Path(vllm_python).with_name("vllm")), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"VLLM_TARGET_DEVICE": "cpu"},
        check=False,
    )
    assert vllm.returncode == 2
    assert vllm.stderr.splitlines()[-1].endswith("error: " + answer["error"])


def test_malformed_speculative_json_is_refused_with_vllms_message(vllm_python: str) -> None:
    answer, _ = ask_vllm(vllm_python, "serve", "/models/m", "--speculative-config", '{"method":')
    assert answer["stage"] == "parse"
    assert answer["error"].startswith(
        'argument --speculative-config/-sc: Value {"method": cannot be converted to'
    )
