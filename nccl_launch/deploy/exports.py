"""The profile's environment for other consumers, each quoted the way that consumer reads it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping

from nccl_launch.errors import UsageError

Env = Mapping[str, str]


def plain(env: Env) -> str:
    """`KEY=value`, unquoted: for eyes and grep."""
    return "".join(f"{key}={value}\n" for key, value in env.items())


def dotenv(env: Env) -> str:
    """Single-quoted for python-dotenv (and `--env-file`): only `\\` and `'` are escaped."""
    lines = []
    for key, value in env.items():
        if "${" in value:
            raise UsageError(
                f"{key}: {value!r} holds '${{', which dotenv readers expand; "
                "use --format shell or json"
            )
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        lines.append(f"{key}='{escaped}'\n")
    return "".join(lines)


def shell(env: Env) -> str:
    """`export KEY='value'` lines that a POSIX shell sources."""
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())


def systemd_env(env: Env) -> str:
    """`Environment=` lines for a unit or drop-in: C escapes in double quotes, `%` doubled."""

    def quoted(text: str) -> str:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return escaped.replace("%", "%%")

    return "".join(f'Environment="{key}={quoted(value)}"\n' for key, value in env.items())


def k8s(env: Env) -> str:
    """A container's `env:` list (JSON, which is also YAML)."""
    items = [{"name": key, "value": value} for key, value in env.items()]
    return json.dumps(items, indent=2) + "\n"


FORMATS: dict[str, Callable[[Env], str]] = {
    "env": plain,
    "dotenv": dotenv,
    "shell": shell,
    "systemd-env": systemd_env,
    "k8s": k8s,
}
