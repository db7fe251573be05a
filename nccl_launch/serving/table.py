"""The `[server]` table every server kind shares: the interpreter, the model, its parallelism,
where it listens, its own arguments; and the text types every table of a profile is read with.

Each kind (`sglang/`, `vllm/`) subclasses `ServerTable` with its `kind`, its entrypoint and
its `[server.speculative]` table; `kinds.py` says which kind a table is and what it means.
"""

from __future__ import annotations

import math
import re
import shlex
import unicodedata
from datetime import date, time
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from nccl_launch.nccl.grammar import Invalid
from nccl_launch.serving import references

# How every table of a profile is read: unknown keys are errors, no coercion, immutable. Each
# model's validator is built when it is first used, not when its module is imported: a model
# read only as a part of another (a profile's tables) never builds one of its own, and a
# profile without `[server]` builds none for the kinds' tables.
STRICT = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)
_SETTING = re.compile(r"[a-z][a-z0-9_]*")
NUL_PROBLEM = "holds a NUL byte, which no argument, path or environment value can carry"
Scalar = str | int | float | bool
TOML_INT = 2**63  # a TOML integer is a signed 64-bit one: what a profile can hold


def no_nul(text: str) -> str:
    """`text`, unless it holds a NUL: exec, chdir and open would fail on it at the last step."""
    if "\x00" in text:
        raise Invalid("nul-byte", NUL_PROBLEM)
    return text


def no_control(text: str) -> str:
    """`text`, unless it holds a control character (newline, ESC, DEL...): no path or name
    needs one, and preflight, `run --dry-run` and the logs print these strings as they are,
    where a newline would forge a report line and ESC drive the terminal."""
    no_nul(text)
    found = next((char for char in text if unicodedata.category(char) == "Cc"), None)
    if found is not None:
        message = f"holds the control character {found!r}, which no path or name needs"
        raise Invalid("control-character", message, "remove it")
    return text


def not_a_date(value: Any) -> Any:
    """`value`, unless TOML read it as a date or a time (`date = 2025-01-02`, unquoted)."""
    if isinstance(value, date | time):  # datetime is a date
        message = f"{value.isoformat()} is a TOML date/time"
        raise Invalid("toml-date", message, "quote it to keep it as text")
    return value


# Every string of a profile is one of these; free text (args) may hold any character but
# NUL, and is escaped where people read it.
Text = Annotated[str, BeforeValidator(not_a_date), AfterValidator(no_nul)]
# A path, a host or a command name: printed as it is, so no control character.
Name = Annotated[str, BeforeValidator(not_a_date), AfterValidator(no_control)]


def pass_through(settings: dict[str, Any]) -> dict[str, Scalar]:
    """A speculative table's keys beyond its structured ones, each a single value under a
    setting's name, or an `Invalid` naming the key."""
    for key, value in settings.items():
        if not _SETTING.fullmatch(key):
            raise Invalid("setting-name", "not a setting name (lower case, digits, '_')", key=key)
        if not isinstance(value, str | int | float | bool):
            raise Invalid("not-a-single-value", f"{value!r} is not a single value", key=key)
        if isinstance(value, float) and not math.isfinite(value):
            raise Invalid("not-finite", f"{value!r} is not a finite number", key=key)
        if isinstance(value, int) and not -TOML_INT <= value < TOML_INT:
            message, fix = f"{value} is out of range", "TOML integers are 64-bit"
            raise Invalid("integer-range", message, fix, key)
        if isinstance(value, str) and "\x00" in value:
            raise Invalid("nul-byte", NUL_PROBLEM, key=key)
    return settings


class ServerTable(BaseModel):
    """`[server]`: the command line the launcher builds, whatever the server's kind."""

    model_config = STRICT

    python: Name = "python3"
    entrypoint: Name
    model_path: Name | None = None  # required once `extends` is resolved
    tp_size: int = Field(default=1, ge=1)
    pp_size: int = Field(default=1, ge=1)
    host: Name | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    nnodes: int = Field(default=1, ge=1)
    node_rank: int | None = Field(default=None, ge=0)
    dist_init_addr: Name | None = None
    cwd: Name | None = None
    args: list[Text] = Field(default_factory=list)
    kind: str

    @field_validator("python")
    @classmethod
    def _interpreter(cls, python: str) -> str:
        if not python.strip():
            raise Invalid(
                "empty-value", "empty", "valid: the server's Python, a path or a name on PATH"
            )
        return python

    @field_validator("entrypoint")
    @classmethod
    def _command_line(cls, entrypoint: str) -> str:
        try:
            shlex.split(entrypoint)
        except ValueError as error:  # the words are split this way into the argv
            # Not echoed: an unclosed quote leaves a credential flag's value unmasked.
            message = str(error).lower()  # shlex's own words: "no closing quotation"
            raise Invalid("shell-words", message, "quote as a shell would") from None
        return entrypoint

    @field_validator("model_path", "host", "dist_init_addr")
    @classmethod
    def _no_option(cls, value: str | None) -> str | None:
        """A value that starts with `-` is read by the server's parser as an option of its
        own (`-h` prints its help, `--port=5` sets the port): it can name no model or host."""
        if value is not None and value.startswith("-"):
            message = f"{value!r} starts with '-', which the server reads as an option"
            raise Invalid("option-like", message)
        return value

    @field_validator("args")
    @classmethod
    def _references(cls, args: list[str]) -> list[str]:
        references.names(args)  # a `${` that opens no reference: not the word, it may be a key
        return args

    @model_validator(mode="after")
    def _references_in_args_only(self) -> ServerTable:
        """A `${NAME}` anywhere else would reach the server as it is written (`--api-key
        ${API_KEY}` in the entrypoint: the literal text as the key)."""
        texts = self.model_dump(exclude={"args"})
        speculative = texts.pop("speculative", None) or {}
        texts |= {f"speculative.{key}": value for key, value in speculative.items()}
        for key, value in texts.items():
            if isinstance(value, str) and "${" in value:
                message = "holds '${', but only [server] args fill a ${NAME} at start"
                fix = 'write the flag there (args = ["--api-key", "${API_KEY}"])'
                raise Invalid("reference-outside-args", message, fix, key)
        return self
