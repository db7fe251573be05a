"""What every report shares: the versioned JSON envelope and the exit code it stands for."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel

# Bumped when a key of any command's JSON output is removed or changes meaning.
SCHEMA_VERSION: Final = 1


class Report(BaseModel):
    """A command's result: data until rendered; it knows the exit code it stands for."""

    # SCHEMA_VERSION's value: a document read back (bench's history) of another version is
    # not this report.
    schema_version: Literal[1] = SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        raise NotImplementedError
