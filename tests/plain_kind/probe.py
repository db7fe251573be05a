"""Run by the server's own interpreter: import the plain server and parse an argv with its
parser; prints one line, `NCCL_LAUNCH_PROBE {json}` (standalone, as every kind's probe)."""

from __future__ import annotations

import contextlib
import io
import json
import sys

MARK = "NCCL_LAUNCH_PROBE "
FIELDS = ("model", "host", "port")


def probe(argv: list[str]) -> dict[str, object]:
    result: dict[str, object] = {"python": sys.executable, "python_version": sys.version.split()[0]}
    try:
        import plain_server  # type: ignore[import-not-found]  # on the server's PYTHONPATH
    except Exception as error:  # any failure to import is the answer
        result.update(stage="import", error=f"{type(error).__name__}: {error}")
        return result
    result["version"] = "1"
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            args = plain_server.parse(list(argv))
    except SystemExit:  # argparse: the message is on stderr, after "error:"
        result.update(stage="parse", error=output.getvalue().rpartition("error:")[2].strip())
        return result
    result["parsed"] = {field: getattr(args, field) for field in FIELDS}
    return result


if __name__ == "__main__":
    print(MARK + json.dumps(probe(sys.argv[1:])))
