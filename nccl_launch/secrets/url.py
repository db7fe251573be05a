"""A server's URL, which may hold a password or a secret query value: it masks itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nccl_launch.secrets.masking import for_people

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema


class Url:
    """A URL as it was given (`--url`, a profile's server), shown as people see it wherever it
    is turned into text: `str`, `repr`, an f-string, a report's JSON and `model_dump` give it
    masked by the one rule of every output (its user info whole, the values of secret-looking
    names such as `token=`), its control characters escaped. `unmasked` alone gives it as it
    is, for the request that must reach the server: a sink that forgets to mask shows the
    mask, not the secret."""

    __slots__ = ("_given",)

    def __init__(self, given: str) -> None:
        self._given = given

    def unmasked(self) -> str:
        """The URL as it was given: only for the HTTP request to the server (and its host and
        port), never for a message."""
        return self._given

    def __str__(self) -> str:
        return for_people(self._given)

    def __repr__(self) -> str:
        return f"Url({str(self)!r})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """In a report: a Url kept as it is, a text (a history line read back, written masked)
        wrapped; written as `str`, masked, into JSON and `model_dump` alike."""
        from pydantic_core import core_schema  # only where a report holds one

        shown = core_schema.plain_serializer_function_ser_schema(str)
        wrapped = core_schema.no_info_after_validator_function(cls, core_schema.str_schema())
        return core_schema.union_schema(
            [core_schema.is_instance_schema(cls), wrapped], serialization=shown
        )
