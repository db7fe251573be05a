"""`python -m plain_server --model M`: the least an OpenAI-compatible server does, for a server
kind of the tests' own (tests/plain_kind): one process, `/health`, `/v1/models` and a streamed
`/v1/completions` (with `stream_options.include_usage` a last event with the usage), behind
`--api-key KEY` (every path but /health answers 401 without `Authorization: Bearer KEY`). Its
flags are read in full only (no prefixes). The knobs of ../standin_core.py hold: the token
rate, and STANDIN_TUNE_MODEL's rate as a function of the NCCL environment it started with.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the stand-ins as the packages under tests/
    from tests.standin import standin_core as core
else:
    import standin_core as core


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="plain_server", allow_abbrev=False)
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key")
    return parser.parse_args(argv)


def handler(args: argparse.Namespace, pacing: core.Pacing) -> type[core.Streaming]:
    class Handler(core.Streaming):
        api_key = (args.api_key,) if args.api_key else ()

        def guarded(self, path: str) -> bool:
            return path != "/health"

        def chunk(self, body: dict[str, Any]) -> dict[str, Any]:
            return {"id": "plain", "object": "text_completion", "model": args.model}

        def choice(self, finish: str | None) -> dict[str, Any]:
            return {"index": 0, "text": " tok", "finish_reason": finish}

        def usage(self, chunk: dict[str, Any], tokens: int, prompt: int) -> dict[str, Any]:
            total = tokens + prompt
            usage = {"prompt_tokens": prompt, "completion_tokens": "COUNT", "total_tokens": total}
            return {**chunk, "choices": [], "usage": usage}

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(200)
                self.end_headers()
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": args.model}]})
            else:
                self.send_json(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.send_json(404, {"error": "not found"})
                return
            self.complete(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))

    Handler.pacing = pacing
    return Handler


def main() -> None:
    args = parse(sys.argv[1:])
    pacing = core.Pacing()
    http = ThreadingHTTPServer((args.host, args.port), handler(args, pacing))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pacing.up()
    http.serve_forever()


if __name__ == "__main__":
    main()
