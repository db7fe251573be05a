"""`vllm serve MODEL` (`python -m vllm.entrypoints.cli.main serve ...`, the module behind vLLM's
`vllm` console script) as vLLM 0.33.0 behaves, minus the GPU work. Paths are inside its wheel.

What it reproduces, because `nccl-launch check`, `bench` and `tune` depend on it:
- the command line as `utils/argparse_utils.py:313-400` (FlexibleArgumentParser.parse_args)
  rewrites it: `--model M` (or `--model=M`) anywhere moved to the front as the positional model,
  underscores in a flag's name read as dashes (`--tensor_parallel_size`), `--flag=value`; then
  argparse with its defaults (abbreviations accepted: nothing in vLLM sets allow_abbrev), an
  unknown flag exits 2. The core flags: `entrypoints/common/cli_args.py` (model_tag, --host,
  --port 8000, --api-key with nargs "+"), `engine/arg_utils.py` (-tp, -pp, -dp, --nnodes/-n,
  --node-rank/-r, --served-model-name, -sc JSON, booleans as --x/--no-x); `vllm --version`;
- the environment changes, each in the process vLLM makes it: at `import vllm`
  (`env_override.py:164-183`), `VLLM_WORKER_MULTIPROC_METHOD=spawn` unless set
  (`entrypoints/common/startup.py:147-149`, the CLI only), `NCCL_GRAPH_REGISTER=0` unless set
  with the cumem CUDA-graph pool of sleep mode (`config/vllm.py:2330-2336`, `716-728`), all in
  the API server before the engine starts, so every child inherits them; with
  VLLM_BATCH_INVARIANT=1, `NCCL_LAUNCH_MODE=GROUP` and the pins of
  `model_executor/determinism/batch_invariant.py:1391-1423` with their names added to
  NCCL_NO_CACHE (`utils/nccl.py:141-157`), made by each worker in its own os.environ as it
  initialises (`v1/worker/gpu_worker.py:1701`): NCCL and NCCL_DEBUG=INFO's lines see them,
  /proc/PID/environ does not;
- the process tree: the API server is this process, its title untouched with one API server
  (`entrypoints/cli/serve.py:153-156`); one child `VLLM::EngineCore` (`v1/engine/core.py:1474-
  1482`, `v1/engine/utils.py:261-293`); with a world size (TP x PP) above 1, its children
  `VLLM::Worker_PPn_TPn` (each part only where its size is above 1:
  `v1/executor/multiproc_executor.py:1196-1228`), else the engine core holds the GPU itself
  (`config/parallel.py:1098-1099`, the "uni" executor). Each started with the method of
  VLLM_WORKER_MULTIPROC_METHOD (`utils/system_utils.py:185-200`), titled through setproctitle
  as `PREFIX::NAME` (`utils/system_utils.py:203-217`, VLLM_PROCESS_NAME_PREFIX), dying with
  its parent (PR_SET_PDEATHSIG here; vLLM's workers read EOF on a death pipe). /proc/PID/environ
  shows what a process was exec'd with: with spawn its parent's environment then, with fork
  the API server's own at its start (so neither vLLM's changes nor the drift knobs show);
- the port bound at start and listened on once the engine is up (`entrypoints/launchers/
  launcher.py:365-379`), on `--host` or every address;
- HTTP: /health (200, or 503 as for a dead engine), /version (`{"version": "0.33.0"}`),
  /v1/models (`entrypoints/openai/models/serving.py:64-76`), POST /v1/completions streamed as
  `entrypoints/openai/completion/serving.py:438-558` does: one `data: {...}` event per engine
  step (id `cmpl-` and 16 hex digits, object, created, model, choices with stop_reason and
  nulls, kv_transfer_params null), its text the step's tokens: one, or with
  `--speculative-config` the decoded one and its `num_speculative_tokens` drafts (here every
  draft is accepted); with `stream_options.include_usage` a last event with
  `"choices": []` and usage (prompt_tokens, total_tokens, completion_tokens; nulls dropped),
  then `data: [DONE]`; a `model` it does not serve answers 404 with vLLM's error body;
- the API key as `entrypoints/serve/middleware/register.py:32-36` and `authenticate.py` check
  it: the keys of --api-key, else VLLM_API_KEY; paths under /v1, /v2, /inference and /cohere
  answer 401 `{"error":"Unauthorized"}` without `Authorization: Bearer KEY`, the others never.

The knobs are the SGLang stand-in's (tests/standin/sglang/launch_server.py lists them; both are
implemented in tests/standin/standin_core.py), here with: STANDIN_DRIFT_RANK for the worker of
that rank (the engine core with a world size of 1), SIGUSR1's late worker started by the engine
core, STANDIN_COMPUTE_APPS listing the workers (or the engine core), NCCL's INFO lines printed
by each worker, and STANDIN_INFO* and STANDIN_OLD_INFO unused (vLLM has no /server_info); and
STANDIN_UNREDACTED_ARGS=1 logs the arguments at start with their keys, as a vLLM without
`redact_sensitive_args` does.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import sys
import time
import uuid
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # mypy reads the stand-ins as the packages under tests/
    from tests.standin import standin_core as core
    from tests.standin.vllm import __version__
else:  # run with PYTHONPATH=tests/standin
    import standin_core as core

    from vllm import __version__

# NCCL_NO_CACHE arrived in NCCL 2.29.7 (`utils/nccl.py:176-185`): the version these workers say.
NCCL_VERSION = "2.29.7"
# `model_executor/determinism/batch_invariant.py:1406-1422`.
BATCH_INVARIANT_PINS = {
    "NCCL_COLLNET_ENABLE": "0",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_P2P_NET_DISABLE": "1",
    "NCCL_MIN_NCHANNELS": "1",
    "NCCL_MAX_NCHANNELS": "1",
    "NCCL_PROTO": "Simple",
    "NCCL_ALGO": "ring,tree;allreduce:tree",
    "NCCL_NTHREADS": "1",
    "NCCL_SOCKET_NTHREADS": "1",
}
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")
UNDERSCORED = re.compile(r"(?<=--)[^\.]*")  # a flag's name: from `--` to the first dot


def flexible(argv: list[str]) -> list[str]:
    """`argv` as FlexibleArgumentParser rewrites it before argparse reads it."""
    if argv[:1] == ["serve"]:
        found = next((i for i, arg in enumerate(argv) if re.match(r"^--model(=.+|$)", arg)), None)
        if found is not None:
            if argv[found] == "--model":
                model, rest = argv[found + 1 : found + 2], argv[found + 2 :]
            else:
                model, rest = [argv[found].removeprefix("--model=")], argv[found + 1 :]
            argv = ["serve", *model, *argv[1:found], *rest]
    rewritten = []
    for arg in argv:
        if arg.startswith("--"):
            key, equals, value = arg.partition("=")
            key = UNDERSCORED.sub(lambda match: match.group(0).replace("_", "-"), key, count=1)
            arg = f"{key}{equals}{value}"
        rewritten.append(arg)
    return rewritten


def speculative_config(text: str) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"Value {text} cannot be converted to JSON.") from error
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError(f"Value {text} is not a JSON object.")
    return config


def serve_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("model_tag", nargs="?", default="Qwen/Qwen3-0.6B")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", nargs="+")
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    serve.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    serve.add_argument("--nnodes", "-n", type=int, default=1)
    serve.add_argument("--node-rank", "-r", type=int, default=0)
    serve.add_argument("--master-addr", default="127.0.0.1")
    serve.add_argument("--master-port", type=int, default=29501)
    serve.add_argument("--speculative-config", "-sc", type=speculative_config)
    serve.add_argument("--max-model-len", type=int, default=4096)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    for flag in (
        "enforce-eager",
        "enable-sleep-mode",
        "sleep-mode-offload-cudagraph",
        "disable-custom-all-reduce",
        "trust-remote-code",
    ):
        serve.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=False)


def parse(argv: list[str]) -> argparse.Namespace:
    """The `serve` command's arguments, read as vLLM reads them (others exit as vLLM's do)."""
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("-v", "--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="subparser")
    serve_flags(commands.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    args = flexible(argv)
    named = any(re.match(r"^--served[-_]model[-_]name(=.+|$)", arg) for arg in args)
    if args[:1] == ["serve"] and args[1:2] and args[1].startswith("-") and named:
        sys.exit("ValueError: `model` should be provided as the first positional argument")
    parsed = parser.parse_args(args)
    if parsed.subparser is None:
        parser.print_help()
        sys.exit(0)
    return parsed


def log_non_default_args(args: argparse.Namespace) -> None:
    """As vLLM logs its arguments at start (`entrypoints/launchers/launcher.py:368`): those that
    differ from their defaults, the keys as `***` (`entrypoints/common/startup.py:50-96`)."""
    serve = argparse.ArgumentParser()
    serve_flags(serve)
    defaults = vars(serve.parse_args([]))
    given = {key: value for key, value in vars(args).items() if defaults.get(key, value) != value}
    if os.environ.get("STANDIN_UNREDACTED_ARGS") != "1":
        given = {key: "***" if key == "api_key" else value for key, value in given.items()}
    sys.stderr.write(f"INFO [startup.py:96] non-default args: {given}\n")


def import_env_override() -> None:
    """What `import vllm` sets (`env_override.py:164-183`)."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    os.environ.setdefault("TILELANG_CLEANUP_TEMP_FILES", "1")


def config_env(args: argparse.Namespace) -> None:
    """What VllmConfig sets as the API server builds it, before the engine starts."""
    cumem_cudagraph_pool = (
        args.enable_sleep_mode and args.sleep_mode_offload_cudagraph and not args.enforce_eager
    )
    if cumem_cudagraph_pool:
        value = os.environ.setdefault("NCCL_GRAPH_REGISTER", "0")
        if value != "0":
            sys.stderr.write(
                f"WARNING NCCL_GRAPH_REGISTER={value} pins the CUDA graph pool during sleep.\n"
            )


def batch_invariance() -> None:
    """With VLLM_BATCH_INVARIANT, what a worker sets in its own environment as it starts."""
    if not int(os.environ.get("VLLM_BATCH_INVARIANT", "0")):
        return
    os.environ["NCCL_LAUNCH_MODE"] = "GROUP"
    os.environ.update(BATCH_INVARIANT_PINS)
    no_cache = os.environ.get("NCCL_NO_CACHE")
    os.environ["NCCL_NO_CACHE"] = ",".join(filter(None, [no_cache, *BATCH_INVARIANT_PINS]))


def title(name: str) -> str:
    return f"{os.environ.get('VLLM_PROCESS_NAME_PREFIX', 'VLLM')}::{name}"


def worker_name(rank: int, tp_size: int, pp_size: int) -> str:
    """`Worker` with a part per parallel size above 1, as multiproc_executor.py names it."""
    name = "Worker"
    if pp_size > 1:
        name += f"_PP{rank // tp_size}"
    if tp_size > 1:
        name += f"_TP{rank % tp_size}"
    return name


def context() -> ForkContext | SpawnContext:
    """The start method of VLLM_WORKER_MULTIPROC_METHOD (fork unless the CLI set spawn)."""
    if os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork") == "fork":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def worker(name: str, rank: int, world: int, ready: Connection) -> NoReturn:
    """A GPU worker: titled, its own NCCL settings made, NCCL's log said, then idle."""
    core.become(title(name))
    batch_invariance()
    core.hold_gpu()
    core.nccl_info(str(rank), NCCL_VERSION, world)
    core.idle(ready, name)


def engine_core(tp_size: int, pp_size: int, orders: Connection, ready: Connection) -> NoReturn:
    """The engine core: its workers started (or the GPU held itself), then each order of the
    API server (one more worker) answered on `ready` until the API server is gone."""
    core.become(title("EngineCore"))
    world = tp_size * pp_size
    if world == 1:  # the "uni" executor: the model runs in this process
        batch_invariance()
        core.hold_gpu()
    else:
        for rank in range(world):
            name = worker_name(rank, tp_size, pp_size)
            core.start_child(context(), worker, (name, rank, world), core.drift_of(rank))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # its workers die with it
    ready.send("up")
    while True:
        try:
            orders.recv()
        except EOFError:
            os._exit(0)
        late = f"Worker_TP{world}"
        drift = os.environ.get("STANDIN_LATE_DRIFT", "")
        core.start_child(context(), worker, (late, world, world), drift)
        ready.send(late)


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pacing = core.Pacing()
        self.engine: BaseProcess | None = None
        self.answers: Connection | None = None
        self.orders, self.ordered = multiprocessing.Pipe(duplex=False)

    def start(self) -> None:
        """Start the engine core (from the main thread: PR_SET_PDEATHSIG fires when the
        thread that started a child ends) and wait until its workers are up."""
        sizes = (self.args.tensor_parallel_size, self.args.pipeline_parallel_size)
        alone = sizes == (1, 1)  # then the engine core is rank 0
        drift = core.drift_of(0) if alone else ""
        self.engine, self.answers = core.start_child(
            context(), engine_core, (*sizes, self.orders), drift, daemon=False
        )
        self.orders.close()
        self.pacing.up()

    def late_worker(self, *_: object) -> None:
        self.ordered.send("late")
        assert self.answers is not None
        self.answers.recv()
        self.pacing.late_started.set()

    def stop(self, *_: object) -> None:
        if self.engine is not None:
            self.engine.terminate()
        sys.exit(0)


def served_names(args: argparse.Namespace) -> list[str]:
    return list(args.served_model_name or [args.model_tag])


def handler(server: Server) -> type[core.Streaming]:
    args = server.args
    names = served_names(args)

    class Handler(core.Streaming):
        api_key = tuple(key for key in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if key)
        pacing = server.pacing

        def guarded(self, path: str) -> bool:
            return path.startswith(GUARDED_PREFIX)

        def chunk(self, body: dict[str, Any]) -> dict[str, Any]:
            model = body.get("model") or names[0]
            stream_id = f"cmpl-{uuid.uuid4().int & (2**64 - 1):016x}"
            return {
                "id": stream_id,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
            }

        def choice(self, finish: str | None) -> dict[str, Any]:
            return {
                "index": 0,
                "text": " tok",
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
                "weight_versions": None,
            }

        def after_choices(self) -> dict[str, Any]:
            return {"kv_transfer_params": None}

        def tokens_per_event(self, body: dict[str, Any]) -> int:
            """With speculative decoding, each step's tokens: the one decoded and the drafts it
            accepted (here all of them)."""
            config = args.speculative_config or {}
            return 1 + int(config.get("num_speculative_tokens", 0))

        def usage(self, chunk: dict[str, Any], tokens: int, prompt: int) -> dict[str, Any]:
            total = tokens + prompt
            usage = {"prompt_tokens": prompt, "total_tokens": total, "completion_tokens": "COUNT"}
            return {**chunk, "choices": [], "usage": usage}

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(200 if self.pacing.healthy() else 503)
                self.end_headers()
            elif self.path == "/version":
                self.send_json(200, {"version": __version__})
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [self.card(n) for n in names]})
            else:
                self.send_json(404, {"detail": "Not Found"})

        def card(self, name: str) -> dict[str, Any]:
            created = int(time.time())
            permission = {
                "id": f"modelperm-{uuid.uuid4().hex[:16]}",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
            return {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": args.model_tag,
                "parent": None,
                "max_model_len": args.max_model_len,
                "permission": [permission],
            }

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.send_json(404, {"detail": "Not Found"})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            body.setdefault("max_tokens", 16)  # `entrypoints/openai/completion/protocol.py:64`
            model = body.get("model")
            if model and model not in names:
                error = {
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "param": "model",
                    "code": 404,
                }
                self.send_json(404, {"error": error})
                return
            self.complete(body)

    return Handler


def main() -> None:
    core.record_if_asked()
    import_env_override()
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    args = parse(sys.argv[1:])
    log_non_default_args(args)
    core.starting()
    config_env(args)
    server = Server(args)
    http = ThreadingHTTPServer((args.host or "", args.port), handler(server), False)
    http.server_bind()  # bound now, listening once the engine is up
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGUSR1, server.late_worker)
    server.start()
    http.server_activate()
    http.serve_forever()


if __name__ == "__main__":
    main()
