"""The profile's environment for other consumers, each quoted the way that consumer reads it.

A value never becomes structure: a character a format cannot hold (a newline in `env`, a NUL
anywhere) is refused with exit 2, naming the variable and the formats that can hold it."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping

from nccl_launch.findings import Finding, Refused

Env = Mapping[str, str]

# The ASCII control characters (C0 and DEL): what ends or bends a line in every format here.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NUL = re.compile(r"\x00")
# python-dotenv decodes these escapes in double quotes; other control characters it cannot.
_DOTENV_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b",
                   "\f": "\\f", "\v": "\\v"}  # fmt: skip
_DOTENV_UNESCAPED = re.compile(r"[\x00-\x06\x0e-\x1f\x7f]")
_SYSTEMD_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Inside shlex.quote's single quotes, where the shell keeps every byte; printf writes these.
_SHELL_PRINTF = re.compile(r"[\x01-\x08\x0b-\x1f\x7f]")


def _refuse(env: Env, bad: re.Pattern[str], fmt: str, instead: str) -> None:
    """Exit 2 when a value holds a character that `fmt` cannot carry as part of one value."""
    for key, value in env.items():
        found = bad.search(value)
        if found is not None:
            what = "a NUL byte" if found[0] == "\x00" else f"the control character {found[0]!r}"
            unheld = f"the value holds {what}, which --format {fmt} cannot hold"
            raise Refused(Finding("unexportable", key, unheld, instead))


def _refuse_nul(env: Env, fmt: str) -> None:
    _refuse(env, _NUL, fmt, "no environment can (a C string ends at NUL)")


def plain(env: Env) -> str:
    """`KEY=value`, unquoted: for eyes and grep, so one line per variable or an error."""
    _refuse(env, CONTROL, "env", "use --format shell, dotenv, systemd-env, k8s or json")
    return "".join(f"{key}={value}\n" for key, value in env.items())


def _dotenv_quoted(value: str) -> str:
    """Single quotes, `\\` and `'` escaped; double quotes with C escapes when the value holds
    a line break or tab, so that each variable stays on one line."""
    escaped = value.replace("\\", "\\\\")
    if not any(char in value for char in _DOTENV_ESCAPES):
        return "'" + escaped.replace("'", "\\'") + "'"
    for char, escape in _DOTENV_ESCAPES.items():
        escaped = escaped.replace(char, escape)
    return '"' + escaped.replace('"', '\\"') + '"'


def dotenv(env: Env, expanded: bool = True) -> str:
    """For python-dotenv (and `--env-file`): one line per variable, quoted. Unless the file
    is read only by readers that expand no `${NAME}` (not `expanded`: nccl-launch's own, and
    systemd's EnvironmentFile=, as a profile's env file is), a value holding one is refused."""
    _refuse_nul(env, "dotenv")
    _refuse(env, _DOTENV_UNESCAPED, "dotenv", "use --format shell, systemd-env, k8s or json")
    for key, value in env.items():
        if expanded and "${" in value:
            expanded_by = f"{value!r} holds '${{', which dotenv readers expand"
            fix = "use --format shell or json"
            raise Refused(Finding("expanded-reference", key, expanded_by, fix))
    return "".join(f"{key}={_dotenv_quoted(value)}\n" for key, value in env.items())


def _shell_quoted(value: str) -> str:
    """`shlex.quote`, with each control character but newline and tab written by printf, so
    the file shows no raw escape sequence and a terminal or click cannot eat one."""
    return _SHELL_PRINTF.sub(
        lambda found: f"'\"$(printf '\\{ord(found[0]):03o}')\"'", shlex.quote(value)
    )


def shell(env: Env) -> str:
    """`export KEY='value'` lines that a POSIX shell sources (a newline stays inside quotes)."""
    _refuse_nul(env, "shell")
    return "".join(f"export {key}={_shell_quoted(value)}\n" for key, value in env.items())


def _systemd_quoted(text: str) -> str:
    """C escapes systemd decodes in a quoted `Environment=` word; every control character
    escaped, since systemd ends a line at `\\n`, `\\r` and NUL; `%` doubled (specifiers)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return CONTROL.sub(
        lambda found: _SYSTEMD_ESCAPES.get(found[0], f"\\x{ord(found[0]):02x}"), escaped
    )


def systemd_env(env: Env) -> str:
    """`Environment=` lines for a unit or drop-in: C escapes in double quotes, `%` doubled."""
    _refuse_nul(env, "systemd-env")
    return "".join(f'Environment="{key}={_systemd_quoted(value)}"\n' for key, value in env.items())


def k8s(env: Env) -> str:
    """A container's `env:` list (JSON, which is also YAML: ASCII, every control escaped)."""
    _refuse_nul(env, "k8s")
    items = [{"name": key, "value": value} for key, value in env.items()]
    return json.dumps(items, indent=2) + "\n"


FORMATS: dict[str, Callable[[Env], str]] = {
    "env": plain,
    "dotenv": dotenv,
    "shell": shell,
    "systemd-env": systemd_env,
    "k8s": k8s,
}
