"""What the SGLang and vLLM stand-ins share: their knobs (STANDIN_*), their workers' life,
NCCL's log lines, the paced token stream and its misbehaviours, the API key check, and the
record mode. Each server's own docstring lists the knobs; this module only implements them."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, NoReturn

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
# The prefill rate's model, the same shape: LL carries half the bandwidth at most, and
# prefill's all-reduces are large, so the value that wins decode loses prefill.
PREFILL_FACTORS = {"NCCL_PROTO": {"": 1.00, "LL": 0.60, "LL128": 0.95, "Simple": 1.00}}
NCCL_VERSION = "2.27.3"
# What torch.distributed prints when NCCL refuses a value as its communicators are created.
NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid "
    f"argument (run with NCCL_DEBUG=WARN for details), NCCL version {NCCL_VERSION}\n"
    "ncclInvalidArgument: Invalid value for an argument.\n"
)
# Those NCCL logs as strings; every other variable it reads is an integer, logged with a period.
# The names NCCL reads, from the data nccl-launch keeps of NCCL's source and docs (read
# here, not imported: a stand-in runs under any interpreter, nccl-launch installed or not).
NCCL_DATA = Path(__file__).resolve().parents[2] / "nccl_launch" / "nccl" / "data"
NCCL_NAMES = {
    line.split("\t", 1)[0]
    for table in ("nccl-env-catalog.tsv", "nccl-env-read-by-source.tsv")
    for line in (NCCL_DATA / table).read_text().splitlines()[1:]
}
NCCL_STRINGS = {
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_P2P_LEVEL",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_SOCKET_IFNAME",
    "NCCL_HOSTID",
}


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


def _factored(rate: float, knob: str, default: dict[str, dict[str, float]]) -> float:
    """`rate` times the factor of each variable's value in the table of `knob` (a JSON object
    of the same shape), else of `default`; a value not in its table: 1.0."""
    factors = os.environ.get(knob)
    for key, table in (json.loads(factors) if factors else default).items():
        rate *= table.get(os.environ.get(key, ""), 1.0)
    return rate


def base_rates(draw: random.Random) -> tuple[float, float, float]:
    """Tokens per second: the decode rate STANDIN_TOKEN_RATE, times the tune model's start
    factor when it is on; that times its table's factors, and without them; and the prefill
    rate STANDIN_PREFILL_RATE, times the same start factor and its own table's factors."""
    rate = float(os.environ.get("STANDIN_TOKEN_RATE", 200))
    prefill = float(os.environ.get("STANDIN_PREFILL_RATE", 5000))
    if os.environ.get("STANDIN_TUNE_MODEL") != "1":
        return rate, rate, prefill
    noise = float(os.environ.get("STANDIN_START_NOISE", 0))
    start = draw.uniform(1 - noise, 1 + noise)
    rate *= start
    prefill = _factored(prefill * start, "STANDIN_PREFILL_FACTORS", PREFILL_FACTORS)
    return _factored(rate, "STANDIN_TUNE_FACTORS", TUNE_FACTORS), rate, prefill


def request_noise(draw: random.Random) -> float:
    """One request's factor on its rates: the tune model's noise, from `draw`; else 1."""
    if os.environ.get("STANDIN_TUNE_MODEL") != "1":
        return 1.0
    noise = float(os.environ.get("STANDIN_NOISE", 0.01))
    return draw.uniform(1 - noise, 1 + noise)


def prompt_tokens(prompt: object) -> int:
    """A prompt's tokens as the stand-ins count them: the whitespace-separated words of a
    text (of each text of a list), or the length of a list of token ids."""
    prompts = prompt if isinstance(prompt, list) else [prompt]
    return sum(len(item.split()) if isinstance(item, str) else 1 for item in prompts)


def holds_any(spec: str) -> str | None:
    """The first `KEY=VALUE` of `spec` the environment holds (`KEY=`: unset), or None."""
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        if os.environ.get(key, "") == value:
            return item
    return None


def nccl_host() -> str:
    """The host as NCCL writes it in a line and a file name: up to the first dot, '%' and
    '/' made '-' (src/debug.cc, getHostNameForLog)."""
    return socket.gethostname().split(".", 1)[0].replace("%", "-").replace("/", "-")


def nccl_log_file() -> int:
    """Where NCCL writes: the file NCCL_DEBUG_FILE names, `%h`, `%p` and `%%` expanded,
    opened as fopen(path, "w") does; else (unset, or the file cannot be opened) standard
    error, as these stand-ins always have."""
    pattern = os.environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return 2
    codes = {"%": "%", "h": nccl_host(), "p": str(os.getpid())}
    path, chars = "", iter(pattern)
    for char in chars:
        code = next(chars, "") if char == "%" else None
        path += char if code is None else codes.get(code, char + code)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except OSError:
        return 2


def late_export(rank: str) -> None:
    """STANDIN_LATE_EXPORT="KEY=VALUE,KEY=" applied to this process's own os.environ when it
    is rank STANDIN_LATE_EXPORT_RANK, as a wrapper's late `export` or a library's
    `os.environ[...] =` does after start: NCCL reads it, /proc/PID/environ never shows it."""
    if rank != os.environ.get("STANDIN_LATE_EXPORT_RANK"):
        return
    for item in filter(None, os.environ.get("STANDIN_LATE_EXPORT", "").split(",")):
        key, _, value = item.partition("=")
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)


def nccl_info(rank: str, version: str = NCCL_VERSION, nranks: int = 2) -> None:
    """NCCL's INFO lines of one rank of a communicator of `nranks`, as NCCL `version` prints
    them when NCCL_DEBUG=INFO asks, from this process's environment as NCCL reads it now
    (after STANDIN_LATE_EXPORT): its version, Init START, `set by environment` for each NCCL
    variable (PROTO and ALGO only with two ranks or more: one rank never reads them), Init
    COMPLETE; to NCCL_DEBUG_FILE's file when it names one."""
    late_export(rank)
    subsystems = os.environ.get("NCCL_DEBUG_SUBSYS", "ENV").split(",")
    if os.environ.get("NCCL_DEBUG") != "INFO" or "ENV" not in subsystems:
        return
    said = {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}
    for item in filter(None, os.environ.get("STANDIN_NCCL_SAYS", "").split(",")):
        key, _, value = item.partition("=")
        said[key] = value
    head = f"{nccl_host()}:{os.getpid()}:{os.getpid()} [{rank}] NCCL INFO "
    init = f"ncclCommInitRankConfig comm 0x5a1e rank {rank} nranks {nranks} cudaDev {rank}"
    lines = [f"{head}NCCL version {version}+cuda12.9", f"{head}{init} - Init START"]
    tuning = {"NCCL_PROTO", "NCCL_ALGO"} if nranks < 2 else set()
    for key, value in sorted(said.items()):
        # NCCL logs only what it reads: not nccl-launch's markers, an image's NCCL_VERSION,
        # a build's NCCL_HOME or a service link.
        if value and key in NCCL_NAMES and not key.startswith("NCCL_DEBUG") and key not in tuning:
            period = "" if key in NCCL_STRINGS else "."
            lines.append(f"{head}{key} set by environment to {value}{period}")
    lines.append(f"{head}{init} - Init COMPLETE")
    fd = nccl_log_file()
    os.write(fd, "".join(f"{line}\n" for line in lines).encode())
    if fd != 2:
        os.close(fd)


def die_with_parent(outlive: bool = False) -> None:
    """SIGKILL this process when the thread that started it ends (or, with `outlive`, clear
    what the process was started with)."""
    signal_number = 0 if outlive else signal.SIGKILL
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal_number)


def become(title: str) -> None:
    """Die with the parent and take `title`, through setproctitle as both servers do."""
    die_with_parent()
    import setproctitle

    setproctitle.setproctitle(title)


def hold_gpu() -> None:
    """List this process in STANDIN_COMPUTE_APPS, as one holding GPU memory."""
    apps = os.environ.get("STANDIN_COMPUTE_APPS")
    if apps:
        with Path(apps).open("a", encoding="ascii") as listed:
            listed.write(f"{os.getpid()}\n")


def idle(ready: Connection, said: object) -> NoReturn:
    """Say `said` on `ready` (up), then idle until SIGTERM ends this process."""
    # Gone at once: the parent terminates its workers, then multiprocessing again at its
    # exit, and a second SIGTERM inside sys.exit's clean-up would print a traceback to the log.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ready.send(said)
    while True:
        signal.pause()


@contextlib.contextmanager
def changed_env(spec: str) -> Iterator[None]:
    """Apply `KEY=VALUE,KEY=` to os.environ while one worker is started (it copies environ)."""
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


def start_child(
    context: ForkContext | SpawnContext,
    target: Callable[..., None],
    args: tuple[Any, ...],
    drift: str = "",
    *,
    daemon: bool = True,
) -> tuple[BaseProcess, Connection]:
    """Start `target(*args, ready)` with `drift` applied (see changed_env) and wait until it
    says it is up on `ready` (EOFError when it died first); the process and the end of
    `ready` that hears it. A `daemon` process cannot start processes of its own."""
    if context.get_start_method() == "spawn":
        # The resource tracker starts with the first spawned child; start it first so that it
        # inherits this process's environment, not one worker's drifted copy.
        resource_tracker.ensure_running()
    receiver, sender = context.Pipe(duplex=False)
    with changed_env(drift):
        process = context.Process(target=target, args=(*args, sender), daemon=daemon)
        process.start()
    sender.close()  # the child's copy alone: one that dies unready ends recv() at once
    receiver.recv()
    return process, receiver


def drift_of(rank: int) -> str:
    """STANDIN_DRIFT for the worker of STANDIN_DRIFT_RANK, else nothing."""
    chosen = str(rank) == os.environ.get("STANDIN_DRIFT_RANK")
    return os.environ.get("STANDIN_DRIFT", "") if chosen else ""


class Pacing:
    """A server's state as its HTTP side sees it: up or not, its rates, its requests."""

    def __init__(self) -> None:
        self.ready = False
        self.healthy_at = float("inf")  # time.monotonic() from which /health answers 200
        self.noise = draws(start_number())
        # Of the environment at start, as NCCL reads it once.
        self.rate, self.plain_rate, self.prefill_rate = base_rates(self.noise)
        self.late_started = threading.Event()
        self.requests = 0
        self.streams = 0  # streaming now, each slowing the others' decode
        self.sharing = float(os.environ.get("STANDIN_STREAM_SHARING", 0.25))
        self.lock = threading.Lock()

    def up(self) -> None:
        """Workers are up: healthy after STANDIN_START_DELAY, never with STANDIN_HANG_IF."""
        self.ready = True
        if not holds_any(os.environ.get("STANDIN_HANG_IF", "")):
            delay = float(os.environ.get("STANDIN_START_DELAY", 0))
            self.healthy_at = time.monotonic() + delay

    def healthy(self) -> bool:
        return self.ready and time.monotonic() >= self.healthy_at

    def count_request(self) -> int:
        with self.lock:
            self.requests += 1
            return self.requests

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """One more stream while the block runs."""
        with self.lock:
            self.streams += 1
        try:
            yield
        finally:
            with self.lock:
                self.streams -= 1

    def step(self, rate: float) -> float:
        """Seconds to the next token of a stream decoding at `rate` alone, shared with the
        others streaming now: 1 / rate times (1 + sharing * (streams - 1))."""
        return (1 + self.sharing * (self.streams - 1)) / rate


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


class Streaming(BaseHTTPRequestHandler):
    """A handler with the API key check and the paced `/v1/completions` stream, for a server
    to subclass with its own paths (`guarded`) and events (`chunk`, `choice`, `usage`)."""

    api_key: tuple[str, ...] = ()
    pacing: Pacing

    def guarded(self, path: str) -> bool:
        """Whether `path` needs the API key."""
        raise NotImplementedError

    def chunk(self, body: dict[str, Any]) -> dict[str, Any]:
        """What every event of one stream carries besides its choices."""
        raise NotImplementedError

    def choice(self, finish: str | None) -> dict[str, Any]:
        """One token's choice; `finish` on the last."""
        raise NotImplementedError

    def usage(self, chunk: dict[str, Any], tokens: int, prompt: int) -> dict[str, Any]:
        """The last event, its completion_tokens the string "COUNT" (filled as raw JSON), its
        prompt_tokens `prompt`."""
        raise NotImplementedError

    def parse_request(self) -> bool:
        """Answer 401 before any do_GET or do_POST to a guarded path without one of the keys
        as `Authorization: Bearer KEY`."""
        if not super().parse_request():
            return False
        if not self.api_key or not self.guarded(self.path):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token in self.api_key:
            return True
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error":"Unauthorized"}')
        return False

    def send_json(self, status: int, document: object) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(document).encode())

    def complete(self, body: dict[str, Any]) -> None:
        """Answer one `/v1/completions` request (the knobs' status, stall, stream)."""
        number = self.pacing.count_request()
        if number == int(os.environ.get("STANDIN_DRIFT_AT_REQUEST", 0)):
            os.kill(os.getpid(), signal.SIGUSR1)  # the main thread starts the late worker
            self.pacing.late_started.wait()
        status = int(os.environ.get("STANDIN_COMPLETIONS_STATUS", 200))
        if number == int(os.environ.get("STANDIN_FAIL_AT_REQUEST", 0)):
            status = 500
        if status != 200:
            self.send_json(status, {"object": "error", "code": status})
            return
        self.send_response(status)
        self.send_header("Content-Type", SSE)
        self.end_headers()
        if os.environ.get("STANDIN_STALL"):
            time.sleep(3600)
        else:
            self.stream(body)

    def event(self, data: object) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        end = os.environ.get("STANDIN_LINE_END", "\n")
        self.wfile.write(f"data: {text}{end}{end}".encode())
        self.wfile.flush()

    def stream(self, body: dict[str, Any]) -> None:
        with self.pacing.streaming():
            self.paced(body)

    def paced(self, body: dict[str, Any]) -> None:
        """The tokens of one stream, each on its deadline (a late wake-up is not carried on):
        the first once the prompt is prefilled, each next one decode step later."""
        arrived = time.monotonic()
        tokens = prelude(body, self.wfile)
        prompt = prompt_tokens(body.get("prompt", ""))
        short = os.environ.get("STANDIN_TUNE_MAX_TOKENS")
        plain = short is not None and body["max_tokens"] != int(short)
        pacing = self.pacing
        noise = request_noise(pacing.noise)
        rate = (pacing.plain_rate if plain else pacing.rate) * noise
        prefill = float(os.environ.get("STANDIN_TTFT", 0)) + prompt / (pacing.prefill_rate * noise)
        due = arrived + prefill
        chunk = self.chunk(body)
        per_event = self.tokens_per_event(body)
        for index in range(tokens):
            if index:
                due += pacing.step(rate)
            time.sleep(max(0.0, due - time.monotonic()))
            last = index == tokens - 1
            if (index + 1) % per_event and not last:
                continue  # this token leaves with the next ones, in one event
            choice = self.choice("length" if last else None)
            choice["text"] *= index % per_event + 1
            self.event({**chunk, "choices": [choice]} | self.after_choices())
        options = body.get("stream_options")
        if tokens and isinstance(options, dict) and options.get("include_usage"):
            count = os.environ.get("STANDIN_USAGE_TOKENS", str(tokens))
            usage = json.dumps(self.usage(chunk, tokens, prompt))
            self.event(usage.replace('"COUNT"', count))
        if not os.environ.get("STANDIN_CLOSE_BEFORE_DONE"):
            self.event("[DONE]")

    def after_choices(self) -> dict[str, Any]:
        """What a token's event carries after its choices."""
        return {}

    def tokens_per_event(self, body: dict[str, Any]) -> int:
        """How many tokens one event carries at most (one: a server that decodes one a step)."""
        return 1

    def log_message(self, *_: object) -> None:
        pass


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


def record_if_asked() -> None:
    """With STANDIN_RECORD=FILE, record and exit; with STANDIN_WAIT, exit 7 on SIGTERM (3 if
    none comes within a minute)."""
    recording = os.environ.get("STANDIN_RECORD")
    if not recording:
        return
    if not os.environ.get("STANDIN_WAIT"):
        record(Path(recording))
        sys.exit(0)
    # Blocked before the record exists, so a SIGTERM sent once a test reads it is never lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    record(Path(recording))
    sys.exit(7 if signal.sigtimedwait({signal.SIGTERM}, 60) else 3)


def log_at_start(size: int) -> None:
    """Log `size` bytes of lines; exit 1 when the log cannot take them (a full disk)."""
    data = b"loading weights\n" * (size // 16)
    sys.stderr.flush()
    try:
        while data:
            data = data[os.write(2, data) :]
    except OSError:
        sys.exit(1)


def starting() -> None:
    """What both servers do first, once their flags are read: STANDIN_OUTLIVE_PARENT,
    STANDIN_LOG_BYTES, and STANDIN_EXIT_IF's exit after NCCL's error."""
    if os.environ.get("STANDIN_OUTLIVE_PARENT") == "1":
        die_with_parent(outlive=True)
    log_at_start(int(os.environ.get("STANDIN_LOG_BYTES", 0)))
    refused = holds_any(os.environ.get("STANDIN_EXIT_IF", ""))
    if refused:
        sys.stderr.write(f"{NCCL_ERROR}Last error:\nInvalid value {refused}\n")
        sys.exit(1)
