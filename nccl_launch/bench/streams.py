"""The requests of one measurement: their prompts, and `concurrency` of them in flight at once.

With `--prompt-tokens N` each request's prompt is N common English words, drawn anew for each
request (a server that caches prompts' prefixes would skip the prefill of a prompt it saw):
with a leading space each is one token to the tokenizers of Llama, Qwen, Mistral and GPT
models, so a server counts about N (its own tokens, a BOS, added); the figures use the count
the server reports, never N.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from nccl_launch.findings import Finding, Refused, said_of

if TYPE_CHECKING:
    from nccl_launch.bench.client import Client
    from nccl_launch.bench.result import Method, RunFigure

WORDS = (  # noqa: SIM905 - one string of words, not 144 lines of strings
    "the of and to in is was for on that with as by at from his her it he she they we you "
    "are be this have not but had were which or an their one all there been has more if "
    "will would when who what so no out up into about than them can only other new some "
    "could time these two may then do first any my now such like our over man me even most "
    "made after also did many before must through back years where much your way well down "
    "should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used "
    "take three"
).split()


class Ran(Protocol):
    def __call__(self, kind: str, number: int, total: int, figure: RunFigure) -> None: ...


def prompt_words(tokens: int, number: int) -> str:
    """The prompt of request `number` (warm-ups first, from 1): `tokens` words."""
    draw = random.Random(number)  # noqa: S311 - a varied text, not a secret
    return " ".join(draw.choices(WORDS, k=tokens))


def prompt_of(method: Method, number: int) -> str:
    """Request `number`'s prompt: the method's text, or its words with prompt_tokens."""
    if method.prompt_tokens is None:
        return method.prompt
    return prompt_words(method.prompt_tokens, number)


def stream_all(
    client: Client,
    body_of: Callable[[int], dict[str, Any]],
    method: Method,
    ran: Ran,
    runs: list[RunFigure],
    failed: list[Finding],
) -> None:
    """The warm-ups, then the measured runs, `method.concurrency` requests in flight at once
    (each request's body `body_of(number)`, warm-ups numbered first); each measured figure
    appended to `runs` as its request ends. One stream: the first failure refuses the
    whole; several: each failure's reason is appended to `failed` and the others
    go on."""
    _phase(client, body_of, method, ran, ("warmup", 0, method.warmup), [], failed)
    _phase(client, body_of, method, ran, ("run", method.warmup, method.runs), runs, failed)


def _phase(
    client: Client,
    body_of: Callable[[int], dict[str, Any]],
    method: Method,
    ran: Ran,
    phase: tuple[str, int, int],
    into: list[RunFigure],
    failed: list[Finding],
) -> None:
    kind, before, total = phase
    origin = client.clock()  # started_s counts from here
    if method.concurrency == 1:
        for number in range(1, total + 1):
            into.append(client.complete(body_of(before + number), origin))
            ran(kind, number, total, into[-1])
        return
    lock = threading.Lock()
    ended = 0

    def one(number: int) -> None:
        nonlocal ended
        try:
            figure = client.complete(body_of(before + number), origin)
        except Refused as error:
            with lock:
                failed.extend(said_of(f"{kind} request {number}", error).findings)
            return
        with lock:
            ended += 1
            into.append(figure)
            ran(kind, ended, total, figure)

    pool = ThreadPoolExecutor(method.concurrency, thread_name_prefix="bench")
    try:
        for future in [pool.submit(one, number) for number in range(1, total + 1)]:
            future.result()
    finally:  # Ctrl-C: nothing more is sent; the streams in flight end on their own
        pool.shutdown(wait=False, cancel_futures=True)
