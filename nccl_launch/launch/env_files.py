"""`--env-file`: dotenv files layered over the calling environment, strictly parsed."""

from __future__ import annotations

import io
from pathlib import Path

from dotenv.parser import parse_stream

from nccl_launch.env.merge import EnvLayer
from nccl_launch.errors import UsageError


def read_env_file(path: Path) -> EnvLayer:
    """A dotenv file as a layer; a line python-dotenv cannot parse is an error, not skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"env file {path}: cannot read: {error}") from None
    values = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise UsageError(f"{path}:{line}: not a KEY=VALUE line: {binding.original.string!r}")
        if binding.key is None:
            continue
        if binding.value is None:
            raise UsageError(
                f"{path}:{line}: {binding.key} has no value; write {binding.key}=VALUE"
            )
        values[binding.key] = binding.value
    return EnvLayer(source=f"env file {path}", values=values)
