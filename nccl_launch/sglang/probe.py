"""Run by the server's own interpreter: import SGLang and parse an argv with its parser.

Standalone on purpose (the server's venv has no nccl-launch, maybe another Python): prints
one line, `NCCL_LAUNCH_PROBE {json}`, with the SGLang version and the parsed values, or the
stage that failed (`import` or `parse`) and SGLang's own message.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

MARK = "NCCL_LAUNCH_PROBE "
FIELDS = (
    "model_path", "tp_size", "pp_size", "host", "port", "nnodes", "node_rank", "dist_init_addr",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens",
)  # fmt: skip


def probe(argv: list[str]) -> dict[str, object]:
    result: dict[str, object] = {"python": sys.executable, "python_version": sys.version.split()[0]}
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            import sglang
            from sglang.srt.server_args import prepare_server_args
    except Exception as error:  # any failure to import is the answer
        result.update(stage="import", error=f"{type(error).__name__}: {error}")
        return result
    result["version"] = getattr(sglang, "__version__", "unknown")
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            args = prepare_server_args(list(argv))
    except SystemExit as stop:  # argparse: the message is on stderr, after "error:"
        errors = [line for line in output.getvalue().splitlines() if "error:" in line]
        message = errors[-1].split("error:", 1)[1].strip() if errors else f"exit {stop.code}"
        result.update(stage="parse", error=message)
        return result
    except Exception as error:
        result.update(stage="parse", error=f"{type(error).__name__}: {error}")
        return result
    result["parsed"] = {field: getattr(args, field, None) for field in FIELDS}
    return result


if __name__ == "__main__":
    print(MARK + json.dumps(probe(sys.argv[1:]), default=str))
