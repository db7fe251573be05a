"""The HTTP edge of `bench`: what the server says of itself (its kind knows where it says it)
and one streamed `/v1/completions`.

httpx, for its timeout on every wait (connect, and between two events of a stream) and one
exception family to turn into a refusal, this host's (exit 3). What a server sends is
bounded: a body or a line of at most 1 MiB, a whole answer within its deadline (checked at
each chunk that arrives, so a server that keeps sending, however slowly, is cut too).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import httpx

from nccl_launch.bench import TOKEN_LIMIT
from nccl_launch.bench.result import RunFigure
from nccl_launch.files.reading import LINE_LIMIT, split_lines
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import ServerKind
from nccl_launch.secrets.url import Url
from nccl_launch.serving.api import Served

SHOWN_BODY = 200  # of an error answer, enough for a reason, not a page of HTML
BODY_LIMIT = 1 << 20  # an info or error body: SGLang's /server_info is a few KiB
MIN_RATE = 1.0  # tok/s: a request lasts at most --timeout + max_tokens / MIN_RATE seconds


class _Overdue(Exception):
    """The whole answer took longer than its deadline."""


def _chunks(response: httpx.Response, end: float) -> Iterator[bytes]:
    """The body's chunks as they arrive; _Overdue at the first that arrives after `end` (a
    time.monotonic()). httpx's timeouts bound each wait, this a server that keeps sending:
    an endless stream, a byte a minute."""
    for chunk in response.iter_raw():
        if time.monotonic() > end:
            raise _Overdue
        yield chunk


class Client:
    """One server, asked one thing at a time; every failure is one finding, this host's."""

    # What a run is timed by (seconds, any origin). A test sets its own: a figure it checks
    # then follows from the times it gives, not from how late a busy host wakes this process.
    clock = staticmethod(time.perf_counter)

    def __init__(
        self,
        url: Url,
        timeout: float,
        kind: ServerKind,
        api_key: str | None = None,
        connections: int = 1,
    ) -> None:
        self.url = Url(url.unmasked().rstrip("/"))  # a path is added to it
        self.kind = kind
        self.timeout = timeout
        self.has_key = api_key is not None
        # trust_env=False: the figure is the server's, never a proxy's from the environment;
        # identity: a compressed body could inflate far beyond the limits.
        headers = {"Accept-Encoding": "identity"}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        # One connection per request in flight: `connections` streams at once.
        limits = httpx.Limits(
            max_connections=max(connections, 100), max_keepalive_connections=max(connections, 20)
        )
        self._http = httpx.Client(timeout=timeout, trust_env=False, headers=headers, limits=limits)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._http.close()

    @contextlib.contextmanager
    def _request(
        self, method: str, path: str, seconds: float, deadline: str, **more: Any
    ) -> Iterator[tuple[httpx.Response, Iterator[bytes]]]:
        """The response to one request and its body's chunks; the answer must end within
        `seconds` (`deadline` says how they were reckoned)."""
        where = f"{self.url}{path}"
        end = time.monotonic() + seconds
        try:
            with self._http.stream(method, self.url.unmasked() + path, **more) as answer:
                yield answer, _chunks(answer, end)
        except _Overdue:
            said = f"answer not complete within {seconds:g} s ({deadline})"
            raise _refused("answer-overdue", where, said) from None
        except httpx.TimeoutException:
            said = f"no answer within {self.timeout:g} s (--timeout)"
            raise _refused("no-answer", where, said) from None
        except httpx.ConnectError as error:
            raise _refused("cannot-connect", where, f"cannot connect: {error}") from None
        except httpx.HTTPError as error:
            said = f"{type(error).__name__}: {error}"
            raise _refused("http-failed", where, said) from None

    def _status(self, path: str, response: httpx.Response, chunks: Iterator[bytes]) -> Refused:
        """The refusal of an answer that is not 200, quoting the start of its body."""
        body = _body(chunks, SHOWN_BODY * 4).decode(errors="replace")
        said = " ".join(body.split())[:SHOWN_BODY]
        if response.status_code == httpx.codes.UNAUTHORIZED:
            flag, env = self.kind.credentials.api_key_flag, self.kind.credentials.api_key_env
            if self.has_key:
                said += f" (it refused the {flag} of the server's command line"
                said += f", or its {env})" if env else ")"
            else:
                said += f" (it wants an API key; the server's command line has no {flag}"
                said += f", its environment no {env})" if env else ")"
        said = f"{self.url}{path} answered HTTP {response.status_code}: {said}"
        return _refused("http-status", "", said)

    def served(self) -> Served:
        """What the server says of itself, asked where its kind says it."""
        return self.kind.api.served(self._get_json)

    def _get_json(self, path: str) -> object:
        """The JSON a GET of `path` answers; None where the server has no such path (404)."""
        with self._request("GET", path, self.timeout, "--timeout") as (response, chunks):
            if response.status_code == httpx.codes.NOT_FOUND:
                return None
            if response.status_code != httpx.codes.OK:
                raise self._status(path, response, chunks)
            body = _body(chunks, BODY_LIMIT)
        if len(body) > BODY_LIMIT:
            said = f"{self.url}{path} answered more than {BODY_LIMIT >> 20} MiB"
            raise _refused("answer-too-large", "", said)
        return _json(body, f"{self.url}{path} answered something not JSON")

    def complete(self, body: dict[str, Any], origin: float | None = None) -> RunFigure:
        """One streamed completion, timed from the request to `[DONE]`; tokens from the
        usage figures of its last event; sent `started_s` after `origin` (a
        self.clock(); None: now)."""
        path = "/v1/completions"
        asked = int(body["max_tokens"])
        start = self.clock()
        started = max(0.0, start - (start if origin is None else origin))
        limit = self.timeout + asked / MIN_RATE
        deadline = f"--timeout + max_tokens at {MIN_RATE:g} tok/s"
        with self._request("POST", path, limit, deadline, json=body) as (response, chunks):
            if response.status_code != httpx.codes.OK:
                raise self._status(path, response, chunks)
            first, tokens, prompt = self._read_events(path, chunks, start)
        seconds = self.clock() - start
        if first is None:
            raise _refused("no-tokens", "", f"{self.url}{path} streamed no tokens")
        if type(tokens) is not int or not 0 < tokens <= asked:  # True is an int, 1e3 is none
            said = "the server reported an impossible token count (usage.completion_tokens "
            said += f"must be a whole number from 1 to max_tokens {asked})"
            raise _refused("token-count", f"{self.url}{path}", said)
        # The prompt's count is the server's word; one it cannot have counted is none.
        counted = prompt if type(prompt) is int and 0 <= prompt <= TOKEN_LIMIT else None
        return RunFigure(
            tokens=tokens, seconds=seconds, ttft_s=first, prompt_tokens=counted, started_s=started
        )

    def _read_events(
        self, path: str, chunks: Iterator[bytes], start: float
    ) -> tuple[float | None, object, object]:
        """Seconds to the first text, and the usage's completion_tokens and prompt_tokens,
        from the SSE lines."""
        first: float | None = None
        tokens: object = None
        prompt: object = None
        for line in self._lines(path, chunks):
            if not line.startswith("data:"):
                continue  # blank separators, comments, `event:` lines
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            event = self._event(path, data)
            choices = event.get("choices")
            texts = (
                [c.get("text") for c in choices if isinstance(c, dict)]
                if isinstance(choices, list)
                else []
            )
            if first is None and any(isinstance(text, str) and text for text in texts):
                first = self.clock() - start
            usage = event.get("usage")
            if isinstance(usage, dict) and "completion_tokens" in usage:
                tokens = usage["completion_tokens"]
                prompt = usage.get("prompt_tokens")
        else:
            said = "the server closed the stream before [DONE]"
            raise _refused("stream-cut", f"{self.url}{path}", said)
        if first is not None and tokens is None:
            said = f"{self.url}{path} streamed no usage figures "
            said += "(the request asks for them with stream_options.include_usage)"
            raise _refused("no-usage", "", said)
        return first, tokens, prompt

    def _lines(self, path: str, chunks: Iterator[bytes]) -> Iterator[str]:
        """The stream's lines, ended by CRLF, LF or CR as the SSE format allows; refused at
        one longer than LINE_LIMIT (a line is held in memory)."""
        for line in split_lines(chunks):
            if line is None:
                said = f"{self.url}{path} streamed a line longer than {LINE_LIMIT >> 20} MiB"
                raise _refused("long-stream-line", "", said)
            yield line.decode(errors="replace")

    def _event(self, path: str, data: str) -> dict[str, Any]:
        event = _json(data, f"{self.url}{path} streamed an event that is not JSON")
        if not isinstance(event, dict):
            said = f"{self.url}{path} streamed an event that is not an object"
            raise _refused("answer-not-json", "", said)
        if "error" in event or event.get("object") == "error":
            said = _json_text(event.get("error", event))
            said = f"{self.url}{path} streamed an error: {said[:SHOWN_BODY]}"
            raise _refused("streamed-error", "", said)
        return event


def _body(chunks: Iterator[bytes], limit: int) -> bytes:
    """The body, read up to just past `limit` bytes (a longer one is cut there)."""
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            break
    return bytes(data[: limit + 1])


def _refused(code: str, where: str, message: str) -> Refused:
    """What the server did that stops a request: this host's problem (its server's)."""
    return Refused(Finding(code, where, message, cause="host"))


def _json(data: str | bytes, failure: str) -> Any:
    """The JSON in `data`; refused, saying `failure`, where it is none (too deep to parse too)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise _refused("answer-not-json", "", failure) from None


def _json_text(value: object) -> str:
    """`value` as one line of JSON (which escapes every control character)."""
    try:
        return " ".join(json.dumps(value).split())
    except (ValueError, RecursionError):
        return "(too deeply nested to show)"
