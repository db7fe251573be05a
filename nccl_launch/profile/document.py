"""A profile file's text read as TOML: the parse, and the shape checks for what TOML allows but
no profile can mean. Reading the `extends` chain and peeking at a file during a lookup both
start here."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from nccl_launch.files.reading import read_text
from nccl_launch.files.toml_text import TooDeep, parse_toml
from nccl_launch.findings import Finding, Refused, refuse
from nccl_launch.nccl.grammar import INT64_MAX, INT64_MIN  # TOML integers are 64-bit too


def _shape_problems(path: Path, data: dict[str, Any]) -> list[Finding]:
    """What TOML allows but no profile can mean: an integer beyond 64 bits (tomllib reads any
    size), a key holding a control character. (Nesting is bounded before the parse.)"""
    problems = []
    pending: list[tuple[str, object]] = [("", data)]
    while pending:
        key, value = pending.pop()
        where = key or "the document"
        if isinstance(value, dict):
            for name, item in value.items():
                if not name.isprintable():
                    dotted = f"{key}.{name!r}" if key else repr(name)
                    message = "a key cannot hold a control character"
                    problems.append(Finding("key-name", dotted, message, file=str(path)))
                else:
                    pending.append((f"{key}.{name}" if key else name, item))
        elif isinstance(value, list):
            pending += [(f"{key}.{index}", item) for index, item in enumerate(value)]
        elif isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            message, fix = "integer out of range", "TOML integers are 64-bit"
            problems.append(Finding("integer-range", where, message, fix, file=str(path)))
    return problems


def read_profile_toml(path: Path) -> dict[str, Any]:
    """A profile file's TOML as data; Refused when it cannot be read (as root, also when
    others could have written it), or is not TOML or no profile's shape."""
    return parse_profile_toml(path, read_text(path, "profile", trusted=True))


def parse_profile_toml(path: Path, text: str) -> dict[str, Any]:
    """The TOML `text` of the profile file `path` as data, or Refused."""
    try:
        data = parse_toml(text)
    except TooDeep as error:
        finding = Finding("nesting", f"line {error.line}", str(error), file=str(path))
        raise Refused([finding]) from None
    except tomllib.TOMLDecodeError as error:
        problem = str(error)
    except ValueError:  # Python's limit on the digits of an int
        problem = "an integer with thousands of digits"
    else:
        refuse(_shape_problems(path, data))
        return data
    raise Refused([Finding("not-toml", "", f"not valid TOML: {problem}", file=str(path))])
