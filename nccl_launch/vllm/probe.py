"""Run by the server's own interpreter: import vLLM and parse an argv with its `serve` parser.

Standalone on purpose (the server's venv has no nccl-launch, maybe another Python): prints
one line, `NCCL_LAUNCH_PROBE {json}`, with the vLLM version and the parsed values, or the
stage that failed (`import` or `parse`) and vLLM's own message. The argv is what follows the
`vllm` command (`serve MODEL ...`); it is parsed and checked as `vllm serve` does before it
starts anything. Of `--api-key` only its presence is told.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

MARK = "NCCL_LAUNCH_PROBE "
FIELDS = (
    "model", "tensor_parallel_size", "pipeline_parallel_size", "host", "port", "nnodes",
    "node_rank", "master_addr", "master_port", "speculative_config", "spec_method",
    "spec_model", "spec_tokens", "api_key",
)  # fmt: skip


def probe(argv: list[str]) -> dict[str, object]:
    result: dict[str, object] = {"python": sys.executable, "python_version": sys.version.split()[0]}
    # Building the parser makes vLLM pick a platform, which fails where it finds no GPU; the
    # CPU platform reads the same argv the same way, and keeps the probe off the GPUs.
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            import vllm
            from vllm.entrypoints.cli.serve import ServeSubcommand
            from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as error:  # any failure to import is the answer
        result.update(stage="import", error=f"{type(error).__name__}: {error}")
        return result
    result["version"] = getattr(vllm, "__version__", "unknown")
    serve = ServeSubcommand()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
            serve.subparser_init(parser.add_subparsers(required=False, dest="subparser"))
            args = parser.parse_args(list(argv))
            serve.validate(args)
    except SystemExit as stop:  # argparse: the message is on stderr, after "error:"
        errors = [line for line in output.getvalue().splitlines() if "error:" in line]
        message = errors[-1].split("error:", 1)[1].strip() if errors else f"exit {stop.code}"
        result.update(stage="parse", error=message)
        return result
    except Exception as error:
        result.update(stage="parse", error=f"{type(error).__name__}: {error}")
        return result
    if getattr(args, "subparser", None) != "serve":  # `vllm` alone prints its help
        result.update(stage="parse", error="no `serve` subcommand: vllm would start no server")
        return result
    parsed = {field: getattr(args, field, None) for field in FIELDS}
    if getattr(args, "model_tag", None) is not None:  # `vllm serve` serves it over --model
        parsed["model"] = args.model_tag
    parsed["api_key"] = any(parsed["api_key"] or ())  # vLLM skips an empty key
    result["parsed"] = parsed
    return result


if __name__ == "__main__":
    print(MARK + json.dumps(probe(sys.argv[1:]), default=str))
