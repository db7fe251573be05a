"""A value that may be secret, decided once where it is produced (`secrets/values.py`:
`secret_value`, `Secrets.value`, `secret_words`), which masks itself: every way of turning
it into text (`str`, `repr`, an f-string, `format`, pydantic's dump and JSON) gives what
people see, never the value. Only `reveal` gives the value, where it must go (the exec, the
child's environment). Like `Quoted`, it fails closed: a sink that forgets to mask shows the
mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nccl_launch.secrets.masking import MASK

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema


@dataclass(frozen=True, repr=False)
class Secret:
    """A value people see as `masked`: the mask, or the value with the credentials in it
    masked (`EXTRA_ARGS="--api-key *** --tp 8"`)."""

    _value: str  # read by `reveal` alone
    masked: str = MASK

    def reveal(self) -> str:
        """The value itself: only where it must go (the exec, the child's environment)."""
        return self._value

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"Secret({self.masked!r})"

    def __format__(self, spec: str) -> str:
        return format(self.masked, spec)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """In a report: kept as it is, and dumped (as Python or JSON) as `masked`."""
        from pydantic_core import core_schema  # only where a report holds one

        masked = core_schema.plain_serializer_function_ser_schema(str)
        return core_schema.is_instance_schema(cls, serialization=masked)
