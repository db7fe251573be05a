"""The stand-ins as the tests start them, one fixture each: `start`, the SGLang stand-in by
`nccl-launch run` (or raw); `start_vllm`, the vLLM stand-in by `run`; `seed`, the profile that
tune starts the SGLang stand-in from. Registered as a plugin in tests/conftest.py. Also the
stand-ins started without nccl-launch, recording what they got: `start_standin` (SGLang's) and
`vllm_standins` (vLLM's console script and modules)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.conftest import WriteProfile, console_script
from tests.helpers import PROFILE, STANDIN, Server, free_port, wait_for_record
from tests.tuning import SEED


class Started(Protocol):
    def __call__(
        self,
        *,
        launcher: bool = True,
        nccl_debug: bool = False,
        baseline: str = "",
        rate: int = 300,
        env: dict[str, str] | None = None,
        server_args: tuple[str, ...] = (),
        after: tuple[str, ...] = (),
    ) -> Server: ...


@pytest.fixture
def start(write_profile: WriteProfile) -> Iterator[Started]:
    """The SGLang stand-in started by `nccl-launch run` (or raw: the old way, no NCCL values
    but those in `env`), its profile as `standin`: `server_args` in its [server] args,
    `baseline` after it, `after` on run's line after `--`; `rate` tokens a second. Each is
    stopped at the end."""
    servers: list[Server] = []

    def start_server(
        *,
        launcher: bool = True,
        nccl_debug: bool = False,
        baseline: str = "",
        rate: int = 300,
        env: dict[str, str] | None = None,
        server_args: tuple[str, ...] = (),
        after: tuple[str, ...] = (),
    ) -> Server:
        port = free_port()
        text = PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
        write_profile("standin", text + f"args = {json.dumps(server_args)}\n" + baseline)
        if launcher:
            debug = ["--nccl-debug"] * nccl_debug
            argv = [console_script(), "run", *debug, "standin", "--", *after]
        else:
            argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m",
                    "--tp", "2", "--port", str(port)]  # fmt: skip
        server = Server(argv, {"STANDIN_TOKEN_RATE": str(rate), **(env or {})}, port)
        servers.append(server)
        return server

    yield start_server
    for server in servers:
        server.stop()


def url(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}"


# The vLLM stand-in started through the profile's interpreter, as `vllm serve` would be.
VLLM_PROFILE = """
schema = 1
name = "vstandin"
version = 1
{top}
[nccl]
PROTO = "LL"
ALGO = "Ring"
BUFFSIZE = "16MiB"
[server]
kind = "vllm"
python = "{python}"
model_path = "/models/m"
tp_size = 2
port = {port}
{server}
"""


def vllm_profile(port: int, server: str = "", top: str = "", host: str = "127.0.0.1") -> str:
    """The vLLM profile: `server` keys added to its [server], `top` before its tables; its host
    `host` (empty: none, vLLM's default of every address)."""
    server = (f'host = "{host}"\n' if host else "") + server
    return VLLM_PROFILE.format(top=top, python=sys.executable, port=port, server=server)


class StartVllm(Protocol):
    def __call__(
        self,
        server: str = "",
        *,
        top: str = "",
        env: Mapping[str, str] | None = None,
        after: tuple[str, ...] = (),
    ) -> Server: ...


@pytest.fixture
def start_vllm(write_profile: WriteProfile) -> Iterator[StartVllm]:
    """The vLLM stand-in started by `nccl-launch run vstandin -- AFTER`; stopped at the end."""
    servers: list[Server] = []

    def start_server(
        server: str = "",
        *,
        top: str = "",
        env: Mapping[str, str] | None = None,
        after: tuple[str, ...] = (),
    ) -> Server:
        port = free_port()
        write_profile("vstandin", vllm_profile(port, server, top))
        argv = [console_script(), "run", "vstandin", "--", *after]
        servers.append(Server(argv, {"STANDIN_TOKEN_RATE": "300", **(env or {})}, port))
        return servers[-1]

    yield start_server
    for each in servers:
        each.stop()


@pytest.fixture
def seed(write_profile: WriteProfile) -> int:
    """The seed's six values (P2P_LEVEL aside) in profiles/standin.toml; its port."""
    port = free_port()
    write_profile("standin", SEED.format(python=sys.executable, port=port, nnodes=1))
    return port


def start_standin(tmp_path: Path, env: dict[str, str], flags: list[str]) -> subprocess.Popen[bytes]:
    """The SGLang stand-in started raw in `tmp_path` with `env` and `flags`, once it has
    written its record to server.json; it runs on until stopped."""
    out = tmp_path / "server.json"
    argv = [sys.executable, "-m", "sglang.launch_server", "--model", "/models/m", *flags]
    process = subprocess.Popen(
        argv,
        env={**os.environ, **env, "PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out),
             "STANDIN_WAIT": "1"},
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for_record(out, process)
    return process


# vLLM speculative decoding's JSON, as a start script passes it.
EAGLE = '{"method": "eagle3", "model": "/models/m-EAGLE3", "num_speculative_tokens": 3}'
# The stand-in for vLLM, as its console script and its two modules: what it got, written
# whole; then, with STANDIN_WAIT set, it runs on for a minute.
RECORD = (
    "import json, os, sys, time\n"
    "with open({part!r}, 'w') as out:\n"
    "    json.dump({{'env': dict(os.environ), 'argv': sys.argv}}, out)\n"
    "os.replace({part!r}, {out!r})\n"
    "time.sleep(60 if 'STANDIN_WAIT' in os.environ else 0)\n"
)


def vllm_standins(folder: Path, out: Path) -> str:
    """`vllm` in `folder`/bin and the package `vllm` in `folder` (a `python3 -m` started
    there imports it), each recording to `out`; the PATH that finds the script."""
    record = RECORD.format(out=str(out), part=f"{out}.part")
    script = folder / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{record}")
    script.chmod(0o755)
    for module in ("entrypoints/cli/main.py", "entrypoints/openai/api_server.py"):
        path = folder / "vllm" / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(record)
    return f"{script.parent}:{os.environ['PATH']}"


def vllm_reads(argv: list[str]) -> dict[str, Any]:
    """What vLLM 0.33.0 reads from its command line (the stand-in's argv: its own path, then
    the words) for the flags the corpus uses: `serve` first moves a `--model` after it, and
    reads `_` as `-` in a long option's name (utils/argparse_utils.py); then argparse, with
    the flags as engine/arg_utils.py and entrypoints/common/cli_args.py declare them; only
    `serve` reads the word after it as the model (entrypoints/cli/serve.py); the speculative
    JSON's keys with `-` read as `_`."""
    args = argv[1:]
    serve = args[:1] == ["serve"]
    if serve:
        args = args[1:]
        at = next((i for i, arg in enumerate(args) if re.match(r"^--model(=.+|$)", arg)), None)
        if at is not None:
            given = args[at] == "--model"
            tag = args[at + 1] if given else args[at].removeprefix("--model=")
            args = [tag, *args[:at], *args[at + 1 + given :]]
    args = [re.sub(r"(?<=^--)[^=]*", lambda m: m[0].replace("_", "-"), arg) for arg in args]
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--model")
    for flag, *alias in (["--tensor-parallel-size", "-tp"], ["--pipeline-parallel-size", "-pp"],
                         ["--port"], ["--nnodes", "-n"], ["--node-rank", "-r"], ["--master-port"],
                         ["--max-model-len"]):  # fmt: skip
        parser.add_argument(flag, *alias, type=int)
    for flag in ("--host", "--master-addr", "--hf-token"):
        parser.add_argument(flag)
    parser.add_argument("--speculative-config", "-sc", type=json.loads)
    for flag in ("--api-key", "--served-model-name"):
        parser.add_argument(flag, nargs="+")
    parser.add_argument("--enforce-eager", action="store_true")
    for flag in ("--spec-method", "--spec-model"):
        parser.add_argument(flag)
    parser.add_argument("--spec-tokens", type=int)
    read = vars(parser.parse_args(args))
    if serve and read["model_tag"] is not None:
        read["model"] = read["model_tag"]
    for key in ("method", "model", "tokens"):  # as create_speculative_config adds them
        value = read.pop(f"spec_{key}")
        if value is not None:
            config = read["speculative_config"] = read["speculative_config"] or {}
            config["num_speculative_tokens" if key == "tokens" else key] = value
    if read["speculative_config"] is not None:  # as create_speculative_config reads its keys
        read["speculative_config"] = {
            key.replace("-", "_"): value for key, value in read["speculative_config"].items()
        }
    return read
