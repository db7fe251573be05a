"""A value that may be secret, decided once where it is produced (`secrets/values.py`:
`secret_value`, `Secrets.value`, `secret_words`), which masks itself: every way of turning
it into text (`str`, `repr`, an f-string, `format`, pydantic's dump and JSON) gives what
people see, never the value. Only `reveal` gives the value, where it must go (the exec, the
child's environment). Like `Quoted`, it fails closed: a sink that forgets to mask shows the
mask."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from nccl_launch.secrets.masking import MASK

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema, SchemaSerializer
    from pydantic_core.core_schema import SerSchema


@cache
def _masked() -> SerSchema:
    """A Secret as pydantic dumps it (as Python or JSON): what people see of it. Imported
    where a report holds one: a TAB, which reads secrets, loads no pydantic."""
    from pydantic_core import core_schema

    return core_schema.plain_serializer_function_ser_schema(str)


@cache
def _serializer() -> SchemaSerializer:
    from pydantic_core import SchemaSerializer, core_schema

    return SchemaSerializer(core_schema.any_schema(serialization=_masked()))


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
        from pydantic_core import core_schema

        return core_schema.is_instance_schema(cls, serialization=_masked())

    @property
    def __pydantic_serializer__(self) -> SchemaSerializer:
        """Where no field's type names it (`Any`, `dict[str, Any]`), pydantic asks the value
        for its serializer: else it would dump a dataclass field by field, the value too."""
        return _serializer()
