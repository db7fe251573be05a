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
- STANDIN_TOKEN_RATE (tokens per second, default 200) paces the stream: token i leaves at
  STANDIN_TTFT (seconds, default 0) + (i + 1) / rate after the request, on a deadline so
  that sleeps do not add up;
- STANDIN_OLD_INFO=1 answers only the older `/get_server_info` (404 for `/server_info`);
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
  factor in [1-n, 1+n], n = STANDIN_NOISE (default 0.01). Both are drawn from a generator
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
  scheduler prints what NCCL 2.x prints as a communicator is created: its version, then
  `NCCL_X set by environment to V` (an integer with a period) for each NCCL variable of its
  environment, each line as `host:pid:tid [rank] NCCL INFO ...`; STANDIN_NCCL_SAYS=
  "KEY=VALUE,KEY=" reports VALUE instead (NCCL took another value) or nothing (it ignored it);
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
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import multiprocessing
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
SSE = "text/event-stream; charset=utf-8"
# The rate model of STANDIN_TUNE_MODEL=1: a factor per value as the merged environment holds
# it (canonical, BUFFSIZE in bytes), "" for unset. The best of these is LL128 Ring 8 8MiB 256.
TUNE_FACTORS = {
    "NCCL_PROTO": {"": 0.80, "LL": 1.00, "LL128": 1.12, "Simple": 0.85},
    "NCCL_ALGO": {"": 0.90, "Ring": 1.00, "Tree": 0.95},
    "NCCL_MAX_NCHANNELS": {"": 0.90, "8": 1.06, "16": 1.00, "32": 0.94},
    "NCCL_BUFFSIZE": {"": 0.97, "4194304": 1.00, "8388608": 1.04, "16777216": 1.00},
    "NCCL_NTHREADS": {"": 0.97, "256": 1.03, "512": 1.00},
}
# What SGLang prints when NCCL refuses a value as its communicators are created.
NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid "
    "argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.3\n"
    "ncclInvalidArgument: Invalid value for an argument.\n"
)


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


def start_number() -> int:
    """This start's number: one more than the last in STANDIN_START_COUNT's file (0 first),
    else the PID."""
    counted = os.environ.get("STANDIN_START_COUNT")
    if not counted:
        return os.getpid()
    with Path(counted).open("a+", encoding="ascii") as count:
        fcntl.flock(count, fcntl.LOCK_EX)  # two servers of a test may start at once
        count.seek(0)
        number = int(count.read() or -1) + 1
        count.seek(0)
        count.truncate()
        count.write(str(number))
    return number


def draws(number: int) -> random.Random:
    """The generator of this start's noise: STANDIN_SEED and the start's `number`."""
    seed = os.environ.get("STANDIN_SEED")
    return random.Random(None if seed is None else f"{seed}:{number}")  # noqa: S311


def base_rates(draw: random.Random) -> tuple[float, float]:
    """Tokens per second: STANDIN_TOKEN_RATE, times the tune model's start factor when it is
    on; that times its table's factors, and without them."""
    rate = float(os.environ.get("STANDIN_TOKEN_RATE", 200))
    if os.environ.get("STANDIN_TUNE_MODEL") != "1":
        return rate, rate
    noise = float(os.environ.get("STANDIN_START_NOISE", 0))
    rate *= draw.uniform(1 - noise, 1 + noise)
    factors = os.environ.get("STANDIN_TUNE_FACTORS")
    factored = rate
    for key, table in (json.loads(factors) if factors else TUNE_FACTORS).items():
        factored *= table.get(os.environ.get(key, ""), 1.0)
    return factored, rate


def request_rate(base: float, draw: random.Random) -> float:
    """One request's rate: the tune model's adds its noise, from `draw`."""
    if os.environ.get("STANDIN_TUNE_MODEL") != "1":
        return base
    noise = float(os.environ.get("STANDIN_NOISE", 0.01))
    return base * draw.uniform(1 - noise, 1 + noise)


def holds_any(spec: str) -> str | None:
    """The first `KEY=VALUE` of `spec` the environment holds (`KEY=`: unset), or None."""
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        if os.environ.get(key, "") == value:
            return item
    return None


# Those NCCL logs as strings; every other variable it reads is an integer, logged with a period.
NCCL_STRINGS = {"NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"}


def nccl_info(rank: str) -> None:
    """NCCL's INFO lines of one rank, when NCCL_DEBUG=INFO asks for them (see the docstring)."""
    subsystems = os.environ.get("NCCL_DEBUG_SUBSYS", "ENV").split(",")
    if os.environ.get("NCCL_DEBUG") != "INFO" or "ENV" not in subsystems:
        return
    said = {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}
    for item in filter(None, os.environ.get("STANDIN_NCCL_SAYS", "").split(",")):
        key, _, value = item.partition("=")
        said[key] = value
    head = f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [{rank}] NCCL INFO "
    lines = [f"{head}NCCL version 2.27.3+cuda12.9"]
    for key, value in sorted(said.items()):
        if value and not key.startswith(("NCCL_LAUNCH_", "NCCL_DEBUG")):
            period = "" if key in NCCL_STRINGS else "."
            lines.append(f"{head}{key} set by environment to {value}{period}")
    os.write(2, "".join(f"{line}\n" for line in lines).encode())


def worker(title: str, ready: Connection) -> None:
    """A scheduler or detokenizer: title itself, die with the parent, say ready, then idle."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    import setproctitle

    setproctitle.setproctitle(title)
    apps = os.environ.get("STANDIN_COMPUTE_APPS")
    if apps and title.startswith("sglang::scheduler"):  # a rank holds its GPU's memory
        with Path(apps).open("a", encoding="ascii") as listed:
            listed.write(f"{os.getpid()}\n")
    if title.startswith("sglang::scheduler_TP"):
        nccl_info(title.removeprefix("sglang::scheduler_TP"))
    # Gone at once: the main process terminates its workers, then multiprocessing again at its
    # exit, and a second SIGTERM inside sys.exit's clean-up would print a traceback to the log.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ready.send(title)  # like SGLang's schedulers, which report to the main process when up
    while True:
        signal.pause()


@contextlib.contextmanager
def changed_env(spec: str) -> Iterator[None]:
    """Apply `KEY=VALUE,KEY=` to os.environ while one worker is spawned (it copies environ)."""
    saved = dict(os.environ)
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[multiprocessing.process.BaseProcess] = []
        self.ready = False
        self.healthy_at = float("inf")  # time.monotonic() from which /health answers 200
        self.noise = draws(start_number())
        # Of the environment at start, as NCCL reads it once.
        self.rate, self.plain_rate = base_rates(self.noise)
        self.late_started = threading.Event()
        self.requests = 0
        self.lock = threading.Lock()

    def spawn(self, title: str, drift: str = "") -> None:
        """Start one worker and wait until it has its title: /health waits for all of them."""
        receiver, sender = self.context.Pipe(duplex=False)
        with changed_env(drift):
            process = self.context.Process(target=worker, args=(title, sender), daemon=True)
            process.start()
        sender.close()  # the worker's copy alone: one that dies unready ends recv() at once
        self.workers.append(process)
        receiver.recv()

    def start(self) -> None:
        # The resource tracker starts with the first worker; start it first so that it
        # inherits the server's environment, not one worker's drifted copy.
        resource_tracker.ensure_running()
        drift_rank = os.environ.get("STANDIN_DRIFT_RANK")
        for rank in range(self.args.tp_size):
            drift = os.environ.get("STANDIN_DRIFT", "") if str(rank) == drift_rank else ""
            self.spawn(f"sglang::scheduler_TP{rank}", drift)
        self.spawn("sglang::detokenizer")
        self.ready = True
        if not holds_any(os.environ.get("STANDIN_HANG_IF", "")):
            delay = float(os.environ.get("STANDIN_START_DELAY", 0))
            self.healthy_at = time.monotonic() + delay

    def healthy(self) -> bool:
        return self.ready and time.monotonic() >= self.healthy_at

    def late_worker(self, *_: object) -> None:
        # Spawned from the main thread, like every worker: PR_SET_PDEATHSIG fires when the
        # *thread* that started the child ends, so a helper thread would kill it at once.
        self.spawn(
            f"sglang::scheduler_TP{self.args.tp_size}", os.environ.get("STANDIN_LATE_DRIFT", "")
        )
        self.late_started.set()

    def count_request(self) -> int:
        with self.lock:
            self.requests += 1
            return self.requests

    def stop(self, *_: object) -> None:
        for process in self.workers:
            process.terminate()
        sys.exit(0)


def endless(wfile: BufferedIOBase, start: bytes, filler: bytes) -> None:
    """`start`, then `filler` until the client leaves."""
    with contextlib.suppress(OSError):
        wfile.write(start)
        while True:
            wfile.write(filler * 65536)


def prelude(body: dict[str, Any], wfile: BufferedIOBase) -> int:
    """What a misbehaving server streams before its tokens; how many tokens it streams."""
    if os.environ.get("STANDIN_EVENT"):
        wfile.write(f"data: {os.environ['STANDIN_EVENT']}\n\n".encode())
    if os.environ.get("STANDIN_LONG_LINE"):
        endless(wfile, b"data: ", b"x")
    if os.environ.get("STANDIN_ENDLESS"):
        return sys.maxsize
    asked = os.environ.get("STANDIN_TOKENS", body["max_tokens"])
    return 0 if os.environ.get("STANDIN_EMPTY_STREAM") else int(asked)


def info_body(server: Server, wfile: BufferedIOBase) -> None:
    if os.environ.get("STANDIN_INFO_ENDLESS"):
        endless(wfile, b'{"version": "', b"a")
        return
    info = json.dumps({**vars(server.args), "version": "0.5.23"})
    wfile.write(os.environ.get("STANDIN_INFO", info).encode())


def usage_event(chunk: dict[str, Any], tokens: int) -> str:
    """The last event's text, its completion_tokens STANDIN_USAGE_TOKENS (raw JSON) if set."""
    usage = {"prompt_tokens": 5, "completion_tokens": "COUNT", "total_tokens": tokens + 5}
    count = os.environ.get("STANDIN_USAGE_TOKENS", str(tokens))
    return json.dumps({**chunk, "choices": [], "usage": usage}).replace('"COUNT"', count)


class KeyChecked(BaseHTTPRequestHandler):
    """With `api_key`, a request without `Authorization: Bearer KEY` is answered 401 before
    any do_GET or do_POST, as SGLang's middleware does (bar /health*, /ready*, /metrics*)."""

    api_key: str | None = None

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if not self.api_key or self.path.startswith(("/health", "/ready", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token == self.api_key:
            return True
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error":"Unauthorized"}')
        return False


def handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(KeyChecked):
        api_key = server.args.api_key

        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self.send_response(200 if server.healthy() else 503)
                self.end_headers()
            elif self.path == "/get_server_info" or (
                self.path == "/server_info" and not os.environ.get("STANDIN_OLD_INFO")
            ):
                self.send_response(int(os.environ.get("STANDIN_INFO_STATUS", 200)))
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                info_body(server, self.wfile)
            else:
                self.send_response(404)
                self.end_headers()

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.send_response(404)
                self.end_headers()
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if server.count_request() == int(os.environ.get("STANDIN_DRIFT_AT_REQUEST", 0)):
                os.kill(os.getpid(), signal.SIGUSR1)  # the main thread spawns it
                server.late_started.wait()
            status = int(os.environ.get("STANDIN_COMPLETIONS_STATUS", 200))
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if status != 200 else SSE)
            self.end_headers()
            if status != 200:
                self.wfile.write(json.dumps({"object": "error", "code": status}).encode())
            elif os.environ.get("STANDIN_STALL"):
                time.sleep(3600)
            else:
                self.stream(body)

        def event(self, data: object) -> None:
            text = data if isinstance(data, str) else json.dumps(data)
            end = os.environ.get("STANDIN_LINE_END", "\n")
            self.wfile.write(f"data: {text}{end}{end}".encode())
            self.wfile.flush()

        def stream(self, body: dict[str, Any]) -> None:
            tokens = prelude(body, self.wfile)
            short = os.environ.get("STANDIN_TUNE_MAX_TOKENS")
            plain = short is not None and body["max_tokens"] != int(short)
            rate = request_rate(server.plain_rate if plain else server.rate, server.noise)
            start = time.monotonic() + float(os.environ.get("STANDIN_TTFT", 0))
            chunk = {"id": "standin", "object": "text_completion", "model": body.get("model")}
            for index in range(tokens):
                time.sleep(max(0.0, start + (index + 1) / rate - time.monotonic()))
                finish = "length" if index == tokens - 1 else None
                choice = {"index": 0, "text": " tok", "logprobs": None, "finish_reason": finish}
                self.event({**chunk, "choices": [choice], "usage": None})
            options = body.get("stream_options")
            if tokens and isinstance(options, dict) and options.get("include_usage"):
                self.event(usage_event(chunk, tokens))
            if not os.environ.get("STANDIN_CLOSE_BEFORE_DONE"):
                self.event("[DONE]")

        def log_message(self, *_: object) -> None:
            pass

    return Handler


def record(path: Path) -> None:
    """What this process received, written whole or not at all: a test waits for the file."""
    received = {
        "pid": os.getpid(),
        "argv": sys.argv,
        "cwd": str(Path.cwd()),
        "env": dict(os.environ),
    }
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(received))
    partial.replace(path)


def record_and_wait(path: Path, wait: bool) -> int:
    """Record; with `wait`, exit 7 on SIGTERM (3 if none comes within a minute)."""
    if not wait:
        record(path)
        return 0
    # Blocked before the record exists, so a SIGTERM sent once a test reads it is never lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    record(path)
    return 7 if signal.sigtimedwait({signal.SIGTERM}, 60) else 3


def log_at_start(size: int) -> None:
    """Log `size` bytes of lines; exit 1 when the log cannot take them (a full disk)."""
    data = b"loading weights\n" * (size // 16)
    sys.stderr.flush()
    try:
        while data:
            data = data[os.write(2, data) :]
    except OSError:
        sys.exit(1)


def main() -> None:
    recording = os.environ.get("STANDIN_RECORD")
    if recording:
        sys.exit(record_and_wait(Path(recording), bool(os.environ.get("STANDIN_WAIT"))))
    args = parse(sys.argv[1:])
    if os.environ.get("STANDIN_OUTLIVE_PARENT") == "1":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 0)
    # As SGLang logs its arguments at start, the API key among them.
    said = f"model_path={args.model_path!r}, api_key={args.api_key!r}"
    said += f", admin_api_key={args.admin_api_key!r}"
    sys.stderr.write(f"server_args=ServerArgs({said})\n")
    log_at_start(int(os.environ.get("STANDIN_LOG_BYTES", 0)))
    refused = holds_any(os.environ.get("STANDIN_EXIT_IF", ""))
    if refused:
        sys.stderr.write(f"{NCCL_ERROR}Last error:\nInvalid value {refused}\n")
        sys.exit(1)
    set_envs_and_config(args)
    server = Server(args)
    http = ThreadingHTTPServer((args.host, args.port), handler(server))
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGUSR1, server.late_worker)
    server.start()
    http.serve_forever()


if __name__ == "__main__":
    main()
