"""The HTTP edge of `bench`: SGLang's `/server_info` and one streamed `/v1/completions`.

httpx, for its timeout on every wait (connect, and between two events of a stream), its
line iterator over a chunked response, and one exception family to turn into exit 3.
"""

from __future__ import annotations

import json
import time
from types import TracebackType
from typing import Any

import httpx

from nccl_launch.bench.result import RunFigure
from nccl_launch.errors import HostError
from nccl_launch.secrets import mask_credentials

SHOWN_BODY = 200  # of an error answer, enough for a reason, not a page of HTML
INFO_PATHS = ("/server_info", "/get_server_info")  # the second before SGLang 0.5


class ServerFacts(dict[str, Any]):
    """What `/server_info` answered (empty where the server has neither path)."""

    @property
    def version(self) -> str | None:
        value = self.get("version")
        return value if isinstance(value, str) else None

    @property
    def model(self) -> str | None:
        for key in ("served_model_name", "model_path"):
            value = self.get(key)
            if isinstance(value, str) and value:
                return value
        return None


class Client:
    """One server, asked one thing at a time; every failure is a one-line HostError."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.shown = mask_credentials(self.url)
        self.timeout = timeout
        # trust_env=False: the figure is the server's, never a proxy's from the environment.
        self._http = httpx.Client(timeout=timeout, trust_env=False)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._http.close()

    def _failure(self, path: str, error: httpx.HTTPError) -> HostError:
        where = f"{self.shown}{path}"
        if isinstance(error, httpx.TimeoutException):
            return HostError(f"{where}: no answer within {self.timeout:g} s (--timeout)")
        if isinstance(error, httpx.ConnectError):
            return HostError(f"{where}: cannot connect: {error}")
        return HostError(f"{where}: {type(error).__name__}: {error}")

    def _status(self, path: str, response: httpx.Response) -> HostError:
        body = " ".join(response.read().decode(errors="replace").split())[:SHOWN_BODY]
        return HostError(f"{self.shown}{path} answered HTTP {response.status_code}: {body}")

    def server_info(self) -> ServerFacts:
        """The server's version and model; empty when it has no info path (not SGLang)."""
        for path in INFO_PATHS:
            try:
                response = self._http.get(self.url + path)
            except httpx.HTTPError as error:
                raise self._failure(path, error) from None
            if response.status_code == httpx.codes.NOT_FOUND:
                continue
            if response.status_code != httpx.codes.OK:
                raise self._status(path, response)
            try:
                answer = response.json()
            except ValueError:
                raise HostError(f"{self.shown}{path} answered something not JSON") from None
            return ServerFacts(answer if isinstance(answer, dict) else {})
        return ServerFacts()

    def complete(self, body: dict[str, Any]) -> RunFigure:
        """One streamed completion, timed from the request to `[DONE]`; tokens from the
        usage figures of its last event."""
        path = "/v1/completions"
        start = time.perf_counter()
        try:
            with self._http.stream("POST", self.url + path, json=body) as response:
                if response.status_code != httpx.codes.OK:
                    raise self._status(path, response)
                first, tokens = self._read_events(path, response, start)
        except httpx.HTTPError as error:
            raise self._failure(path, error) from None
        seconds = time.perf_counter() - start
        if first is None or not tokens:
            raise HostError(f"{self.shown}{path} streamed no tokens")
        return RunFigure(tokens=tokens, seconds=seconds, ttft_s=first)

    def _read_events(
        self, path: str, response: httpx.Response, start: float
    ) -> tuple[float | None, int | None]:
        """Seconds to the first text, and the usage's completion_tokens, from the SSE lines."""
        first: float | None = None
        tokens: int | None = None
        for line in response.iter_lines():
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
            if first is None and any(texts):
                first = time.perf_counter() - start
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                tokens = usage["completion_tokens"]
        if first is not None and tokens is None:
            raise HostError(
                f"{self.shown}{path} streamed no usage figures "
                "(SGLang sends them with stream_options.include_usage)"
            )
        return first, tokens

    def _event(self, path: str, data: str) -> dict[str, Any]:
        try:
            event = json.loads(data)
        except ValueError:
            raise HostError(f"{self.shown}{path} streamed an event that is not JSON") from None
        if not isinstance(event, dict):
            raise HostError(f"{self.shown}{path} streamed an event that is not an object")
        if "error" in event or event.get("object") == "error":
            message = " ".join(json.dumps(event.get("error", event)).split())[:SHOWN_BODY]
            raise HostError(f"{self.shown}{path} streamed an error: {message}")
        return event
