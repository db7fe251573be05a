"""`--env-file`: dotenv files layered over the calling environment, strictly parsed."""

from __future__ import annotations

import io
from pathlib import Path

from nccl_launch.env.merge import EnvLayer
from nccl_launch.errors import UsageError
from nccl_launch.files import read_text
from nccl_launch.masking import is_secret, mask_credentials


def _name_problem(name: str) -> str | None:
    """Why `name` cannot be an environment variable's name: execve refuses '=' and NUL, and
    python-dotenv's quoted keys may hold line breaks and spaces, which no one means."""
    if not name:
        return "an empty name"
    if "=" in name or not name.isprintable() or any(char.isspace() for char in name):
        return f"{name!r} is not a variable name (no '=', spaces or control characters)"
    return None


def read_env_file(path: Path) -> EnvLayer:
    """A dotenv file as a layer; a line python-dotenv cannot parse is an error, not skipped.
    As root, a file others could have written is refused: it shapes the server's env."""
    values = {key: value for _, key, value in env_file_lines(path)}
    return EnvLayer(source=f"env file {path}", values=values)


def env_file_lines(path: Path) -> list[tuple[int, str, str]]:
    """Each assignment of a dotenv file, in order, with its line: (line, key, value); the
    last one of a key is the one that counts."""
    text = read_text(path, "env file", trusted=True)
    assignments = []
    # Imported here: python-dotenv (and the traceback module it loads) only for --env-file.
    from dotenv.parser import parse_stream

    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            text = binding.original.string
            if any(is_secret(word) for word in text.split()):  # `HF_TOKEN hf_...`
                raise UsageError(f"{path}:{line}: not a KEY=VALUE line (not shown: a secret)")
            raise UsageError(f"{path}:{line}: not a KEY=VALUE line: {mask_credentials(text)!r}")
        if binding.key is None:
            continue
        problem = _name_problem(binding.key)
        if problem is not None:
            raise UsageError(f"{path}:{line}: {problem}")
        if binding.value is None:
            raise UsageError(
                f"{path}:{line}: {binding.key} has no value; write {binding.key}=VALUE"
            )
        if "\x00" in binding.value:
            raise UsageError(f"{path}:{line}: {binding.key}: a NUL byte cannot be in a value")
        assignments.append((line, binding.key, binding.value))
    return assignments
