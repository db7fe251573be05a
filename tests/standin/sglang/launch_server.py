"""`python -m sglang.launch_server` as SGLang 0.5.23 behaves, minus the GPU work.

What it reproduces, because `nccl-launch check` depends on it:
- the core flags, parsed strictly (unknown flags exit 2, prefixes are accepted);
- the environment changes of `entrypoints/engine.py::_set_envs_and_config` (and the
  NCCL_GRAPH_REGISTER default of `parallel_hook.py`), made before any worker is spawned;
- one scheduler per TP rank and a detokenizer, started with multiprocessing's `spawn`
  method, titled with setproctitle (`sglang::scheduler_TP0`, `sglang::detokenizer`), dying
  with the main process (PR_SET_PDEATHSIG);
- `/health`, `/health_generate` and `/server_info` (and the older `/get_server_info`) on
  its host and port;
- `--api-key KEY` as `utils/auth.py` reads it: every path but /health*, /ready* and /metrics*
  answers 401 without `Authorization: Bearer KEY`;
- a streaming `/v1/completions` as SGLang's OpenAI-compatible server sends it: one
  `data: {...}` event per token, with `stream_options.include_usage` a last event with
  `"choices": []` and the `usage` figures, then `data: [DONE]`.

Knobs, for tests:
- STANDIN_DRIFT_RANK=N and STANDIN_DRIFT="KEY=VALUE,KEY=" start scheduler N with those
  variables set (an empty value unsets one);
- SIGUSR1 to the main process starts one more scheduler, later, with STANDIN_LATE_DRIFT
  applied the same way;
- the stream is paced on deadlines (a late wake-up delays one token, not the ones after it),
  whatever the machine's speed: the first token leaves STANDIN_TTFT (seconds, default 0) +
  prompt_tokens / prefill rate after the request, each next one a decode step later; a
  decode step is (1 + s * (n - 1)) / rate, rate STANDIN_TOKEN_RATE (tokens per second,
  default 200), n the streams open at that moment (in prefill or decode),
  s = STANDIN_STREAM_SHARING (default 0.25): n streams at once together decode
  n / (1 + s * (n - 1)) times one stream's rate; the prefill rate is STANDIN_PREFILL_RATE
  (prompt tokens per second, default 5000), never shared;
- a prompt's tokens are its whitespace-separated words (of each text of a list; a list of
  token ids: its length), reported as the usage's prompt_tokens (total_tokens adds them);
- STANDIN_OLD_INFO=1 answers only the older `/get_server_info` (404 for `/server_info`);
- STANDIN_FAIL_AT_REQUEST=N answers the Nth /v1/completions request (from 1) with status 500;
- STANDIN_COMPLETIONS_STATUS=500 answers /v1/completions with that status, STANDIN_EMPTY_STREAM=1
  streams only `data: [DONE]`, STANDIN_STALL=1 sends the headers and then nothing;
- a misbehaving server, for bench's limits: STANDIN_INFO=TEXT answers /server_info with that
  body, STANDIN_INFO_ENDLESS=1 with one that never ends (status STANDIN_INFO_STATUS, default
  200); STANDIN_TOKENS=N streams N tokens whatever max_tokens asks (as if ignore_eos were
  ignored), STANDIN_USAGE_TOKENS=TEXT puts TEXT (raw JSON) as the usage's completion_tokens,
  STANDIN_EVENT=TEXT streams `data: TEXT` first, STANDIN_ENDLESS=1 streams tokens without
  end, STANDIN_LONG_LINE=1 a `data:` line without end, STANDIN_CLOSE_BEFORE_DONE=1 closes the
  stream after the usage event, before `data: [DONE]`; STANDIN_LINE_END=TEXT ends the
  stream's lines with TEXT (CR or CRLF) instead of LF;
- STANDIN_TUNE_MODEL=1 makes the rate a function of the NCCL environment the server started
  with, for `tune`: STANDIN_TOKEN_RATE times one factor per variable of TUNE_FACTORS (a value
  not in its table: 1.0; STANDIN_TUNE_FACTORS, a JSON object of the same shape, replaces the
  table), times a factor of the start, uniform in [1-m, 1+m], m = STANDIN_START_NOISE
  (default 0: as NCCL's rings and SGLang's graphs, built anew at each start, make each start
  of a GPU server a little faster or slower), then each request's rate times a uniform
  factor in [1-n, 1+n], n = STANDIN_NOISE (default 0.01). The prefill rate the same way:
  STANDIN_PREFILL_RATE times the factors of PREFILL_FACTORS (STANDIN_PREFILL_FACTORS, the
  same shape, replaces it; by default NCCL_PROTO=LL 0.6, LL128 0.95: LL, which wins decode's
  small all-reduces, carries half the bandwidth of prefill's large ones), the same start's
  factor and the same request's factor. So `STANDIN_TUNE_FACTORS={"NCCL_PROTO": {"": 0.8}}`
  and `STANDIN_PREFILL_FACTORS={"NCCL_PROTO": {"LL": 0.6}}` make PROTO=LL win decode by 25%
  over an unset PROTO and lose 40% of its prefill. Both are drawn from a generator
  seeded with STANDIN_SEED and the start's number: STANDIN_START_COUNT=FILE counts the starts
  in FILE (each adds one, under a lock), so that the Nth start of a test draws the same
  factors at every run; without it the number is the PID. Unset STANDIN_SEED: a fresh seed
  each start; STANDIN_TUNE_MAX_TOKENS=N applies the table to requests for N tokens alone
  (others run at STANDIN_TOKEN_RATE times the start's factor), as a value that speeds up
  short decodes only;
- it logs `server_args=ServerArgs(model_path=..., api_key=..., admin_api_key=...)` on stderr
  first, as SGLang does;
- STANDIN_START_DELAY=S: /health answers 503 for S seconds after the workers are up;
  STANDIN_EXIT_IF="KEY=VALUE,..." exits 1 at start, after an NCCL error like SGLang's on
  stderr, when the environment holds one of those values (`KEY=`: unset);
  STANDIN_HANG_IF="KEY=VALUE,..." answers /health with 503 forever for one of them;
- with NCCL_DEBUG=INFO (and ENV among NCCL_DEBUG_SUBSYS's subsystems, or it unset), each
  scheduler prints what NCCL 2.x prints as a communicator of tp_size ranks is created: its
  version, `Init START`, then `NCCL_X set by environment to V` (an integer with a period) for
  each NCCL variable of its environment (NCCL_PROTO and NCCL_ALGO only with two ranks or
  more: one rank never reads them), then `Init COMPLETE`, each line as `host:pid:tid [rank]
  NCCL INFO ...`, to standard error, or with NCCL_DEBUG_FILE to the file it names (`%h`
  host, `%p` PID, as NCCL expands them); STANDIN_NCCL_SAYS="KEY=VALUE,KEY=" reports VALUE
  instead (NCCL took another value) or nothing (it ignored it);
- STANDIN_LATE_EXPORT_RANK=N and STANDIN_LATE_EXPORT="KEY=VALUE,KEY=": scheduler N changes
  its own os.environ before NCCL reads it (a wrapper's late `export`): NCCL's lines say
  the new value, /proc/PID/environ keeps the one it started with;
- STANDIN_OUTLIVE_PARENT=1 clears the parent-death signal the main process was started with,
  as a server started through a wrapper that forks does: it outlives the process that started
  it (its workers still die with it);
- STANDIN_LOG_BYTES=N logs N bytes of lines at start, as a verbose server does (on a full
  disk that write fails, and the server exits 1);
- STANDIN_COMPUTE_APPS=FILE: each scheduler appends its PID to FILE, where the stand-in
  nvidia-smi (tests/standin/bin) lists it as a process holding GPU memory while it runs;
- STANDIN_DRIFT_AT_REQUEST=N: the Nth /v1/completions request first starts the late
  scheduler of SIGUSR1 (so a worker drifts while a benchmark runs) and streams once it is up;
- STANDIN_RECORD=FILE records instead of serving: it writes {"pid", "argv", "cwd", "env"} as
  JSON to FILE (whatever the flags; they are not parsed) and exits 0. With STANDIN_WAIT set
  it then waits for SIGTERM and exits 7, so a test can prove signals and exit codes reach it.
  Run as a script (`python launch_server.py ...`) it is a command that records the same way.

The knobs are implemented in ../standin_core.py, shared with the vLLM stand-in.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import sys
import time
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the stand-ins as the packages under tests/
    from tests.standin import standin_core as core
else:
    if not __package__:  # run as a script, the command that records: the core is one up
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import standin_core as core


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="launch_server.py")
    parser.add_argument("--model-path", "--model", required=True)
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-init-addr", "--nccl-init-addr")
    parser.add_argument("--speculative-algorithm")
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    parser.add_argument("--speculative-num-steps", type=int)
    parser.add_argument("--speculative-eagle-topk", type=int)
    parser.add_argument("--speculative-num-draft-tokens", type=int)
    parser.add_argument("--disable-custom-all-reduce", action="store_true")
    parser.add_argument("--num-continuous-decode-steps", type=int, default=1)
    parser.add_argument("--enable-symm-mem", action="store_true")
    parser.add_argument("--enable-nccl-nvls", action="store_true")
    parser.add_argument("--api-key")
    parser.add_argument("--admin-api-key")
    return parser.parse_args(argv)


def set_envs_and_config(args: argparse.Namespace) -> None:
    """SGLang 0.5.23's own changes to the environment its workers inherit."""
    if "NCCL_CUMEM_ENABLE" not in os.environ or args.enable_symm_mem:
        os.environ["NCCL_CUMEM_ENABLE"] = str(int(args.enable_symm_mem))
    if "NCCL_NVLS_ENABLE" not in os.environ or args.enable_nccl_nvls or args.enable_symm_mem:
        os.environ["NCCL_NVLS_ENABLE"] = str(int(args.enable_nccl_nvls or args.enable_symm_mem))
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    if os.environ.get("TRTLLM_ENABLE_PDL", "1") != "0":
        os.environ["TRTLLM_ENABLE_PDL"] = "1"
    os.environ.setdefault("CUTE_DSL_LOG_LEVEL", "30")
    os.environ.setdefault("CUTE_DSL_LOG_TO_CONSOLE", "1")
    os.environ["SGLANG_RUN_ID"] = f"sglang-run-{time.time()}-{random.randint(0, 100000000)}"  # noqa: S311 - as SGLang does
    if args.tp_size > 1:
        os.environ.setdefault("NCCL_GRAPH_REGISTER", "0")


def worker(title: str, tp_size: int, ready: Connection) -> None:
    """A scheduler or detokenizer: title itself, die with the parent, say ready, then idle."""
    core.become(title)
    if title.startswith("sglang::scheduler"):  # a rank holds its GPU's memory
        core.hold_gpu()
    if title.startswith("sglang::scheduler_TP"):  # a rank of the TP group's communicator
        core.nccl_info(title.removeprefix("sglang::scheduler_TP"), nranks=tp_size)
    core.idle(ready, title)  # like SGLang's schedulers, which report to the main process when up


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[BaseProcess] = []
        self.pacing = core.Pacing()

    def spawn(self, title: str, drift: str = "") -> None:
        """Start one worker and wait until it has its title: /health waits for all of them."""
        process, _ = core.start_child(self.context, worker, (title, self.args.tp_size), drift)
        self.workers.append(process)

    def start(self) -> None:
        for rank in range(self.args.tp_size):
            self.spawn(f"sglang::scheduler_TP{rank}", core.drift_of(rank))
        self.spawn("sglang::detokenizer")
        self.pacing.up()

    def late_worker(self, *_: object) -> None:
        # Spawned from the main thread, like every worker: PR_SET_PDEATHSIG fires when the
        # *thread* that started the child ends, so a helper thread would kill it at once.
        self.spawn(
            f"sglang::scheduler_TP{self.args.tp_size}", os.environ.get("STANDIN_LATE_DRIFT", "")
        )
        self.pacing.late_started.set()

    def stop(self, *_: object) -> None:
        for process in self.workers:
            process.terminate()
        sys.exit(0)


def handler(server: Server) -> type[core.Streaming]:
    class Handler(core.Streaming):
        api_key = (server.args.api_key,) if server.args.api_key else ()
        pacing = server.pacing

        def guarded(self, path: str) -> bool:
            """As SGLang's `utils/auth.py`: all but /health*, /ready* and /metrics*."""
            return not path.startswith(("/health", "/ready", "/metrics"))

        def chunk(self, body: dict[str, Any]) -> dict[str, Any]:
            return {"id": "standin", "object": "text_completion", "model": body.get("model")}

        def choice(self, finish: str | None) -> dict[str, Any]:
            return {"index": 0, "text": " tok", "logprobs": None, "finish_reason": finish}

        def after_choices(self) -> dict[str, Any]:
            return {"usage": None}

        def usage(self, chunk: dict[str, Any], tokens: int, prompt: int) -> dict[str, Any]:
            total = tokens + prompt
            usage = {"prompt_tokens": prompt, "completion_tokens": "COUNT", "total_tokens": total}
            return {**chunk, "choices": [], "usage": usage}

        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self.send_response(200 if self.pacing.healthy() else 503)
                self.end_headers()
            elif self.path == "/get_server_info" or (
                self.path == "/server_info" and not os.environ.get("STANDIN_OLD_INFO")
            ):
                self.send_response(int(os.environ.get("STANDIN_INFO_STATUS", 200)))
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.info_body()
            else:
                self.send_response(404)
                self.end_headers()

        def info_body(self) -> None:
            if os.environ.get("STANDIN_INFO_ENDLESS"):
                core.endless(self.wfile, b'{"version": "', b"a")
                return
            info = json.dumps({**vars(server.args), "version": "0.5.23"})
            self.wfile.write(os.environ.get("STANDIN_INFO", info).encode())

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.send_response(404)
                self.end_headers()
                return
            self.complete(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))

    return Handler


def main() -> None:
    core.record_if_asked()
    args = parse(sys.argv[1:])
    # As SGLang logs its arguments at start, the API key among them.
    said = f"model_path={args.model_path!r}, api_key={args.api_key!r}"
    said += f", admin_api_key={args.admin_api_key!r}"
    sys.stderr.write(f"server_args=ServerArgs({said})\n")
    core.starting()
    set_envs_and_config(args)
    server = Server(args)
    http = ThreadingHTTPServer((args.host, args.port), handler(server))
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGUSR1, server.late_worker)
    server.start()
    http.serve_forever()


if __name__ == "__main__":
    main()
