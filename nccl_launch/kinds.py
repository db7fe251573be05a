"""The registry of server kinds a `[server]` table may name (`kind`, the first registered by
default): the kinds registered (each a `serving.base.Kind`, in its folder's `kind.py`), the
`[server]` union built from them. Generic code asks `kind_of(server)`; nothing else
branches on a kind."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Annotated, Any, Union, overload

from pydantic import Discriminator, GetCoreSchemaHandler, GetJsonSchemaHandler, Tag, TypeAdapter
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from nccl_launch.findings import Finding, Refused
from nccl_launch.serving.base import Kind
from nccl_launch.serving.command import split_command
from nccl_launch.serving.table import ServerTable
from nccl_launch.sglang.kind import SGLANG
from nccl_launch.vllm.kind import VLLM

ServerKind = Kind[Any]  # a kind whose table generic code does not know
# Kinds outside this package: each entry point of the group names a kind object.
ENTRY_POINTS = "nccl_launch.kinds"


class Registry(Sequence[ServerKind]):
    """The kinds registered, in order: the built-in ones, those of the installed entry
    points (read once, when a kind is looked for), then those `register`ed."""

    def __init__(self, *kinds: ServerKind) -> None:
        self.read = list(kinds)  # so far: the entry points not yet, where none was looked for
        self._plugins_read = False

    def _all(self) -> list[ServerKind]:
        if not self._plugins_read:
            taken = [kind.name for kind in self.read]
            plugins: list[ServerKind] = []
            # Read once: the group is read from every installed distribution's metadata.
            for point in entry_points(group=ENTRY_POINTS):
                plugins.append(_plugin(point, taken))
                taken.append(plugins[-1].name)
            self._plugins_read = True  # every one loads, or none is registered
            for kind in plugins:
                register(kind)
        return self.read

    @overload
    def __getitem__(self, index: int) -> ServerKind: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ServerKind]: ...
    def __getitem__(self, index: int | slice) -> ServerKind | Sequence[ServerKind]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[ServerKind]:
        return iter(tuple(self._all()))


def _plugin(point: EntryPoint, taken: Sequence[str]) -> ServerKind:
    """The kind an installed entry point names; one that cannot load, or whose name another
    kind has (`taken`), is this host's problem: a kind left out would leave its credentials
    unmasked."""
    where = f"server kind {point.name!r} ({point.value}, entry point of {ENTRY_POINTS})"
    try:
        kind: ServerKind = point.load()
    except Exception as error:  # whatever an installed plugin raises
        said = f"{where} cannot be loaded: {type(error).__name__}: {error}"
        raise Refused(Finding("kind-unloadable", "", said, cause="host")) from None
    if kind.name in taken:
        raise Refused(_name_taken(where, kind.name))
    return kind


def _name_taken(where: str, name: str) -> Finding:
    """A kind registered (at `where`) under a name another kind has: this host's problem."""
    message = f"a server kind named {name!r} is registered already"
    return Finding("kind-name-taken", where, message, cause="host")


KINDS = Registry(SGLANG, VLLM)


def register(kind: ServerKind) -> None:
    """Add `kind` after those registered: a profile may then name it (`kind = NAME`)."""
    if kind.name in names():
        raise Refused(_name_taken(f"server kind {kind.title!r}", kind.name))
    KINDS.read.append(kind)


def unregister(kind: ServerKind) -> None:
    """Take `kind` back out of the registry; for tests, which register a kind of their own."""
    KINDS.read.remove(kind)


def names() -> tuple[str, ...]:
    """The names of the kinds registered, the default first."""
    return tuple(kind.name for kind in KINDS)


def kind_named(name: str) -> ServerKind | None:
    """The kind registered under `name`; None for another name. The entry points are read
    only for a name the kinds registered so far do not have."""
    for kinds in (KINDS.read, KINDS):
        found = next((kind for kind in kinds if kind.name == name), None)
        if found is not None:
            return found
    return None


def default_kind() -> ServerKind:
    """The kind of a `[server]` table that names none: the first registered."""
    return KINDS.read[0]


def address(server: ServerTable) -> tuple[str, int]:
    """Where the server listens: its host and port, its kind's defaults where unset."""
    kind = kind_of(server)
    return server.host or kind.api.default_host, server.port or kind.api.default_port


def kind_of(server: ServerTable) -> ServerKind:
    """The kind of a validated `[server]` table."""
    kind = kind_named(server.kind)
    if kind is None:
        raise LookupError(f"no server kind {server.kind!r} is registered")
    return kind


def command_of(argv: Sequence[str]) -> tuple[ServerKind, tuple[str, str, list[str]]] | None:
    """The kind of server a command line starts, with its (python, entrypoint, the words
    after it); None for a command that starts none."""
    for kind in KINDS:
        split = split_command(argv, kind.command.script, kind.command.entrypoints)
        if split is not None:
            return kind, split
    return None


def server_commands() -> list[str]:
    """The command lines that start a server, as a start script writes them."""
    return [
        form
        for kind in KINDS
        for form in (
            *(f"python {entry}" for entry in kind.command.entrypoints),
            f"{kind.command.script} serve",
        )
    ]


def _tag(table: Any) -> str | None:
    """The kind a `[server]` table names (the default kind when it names none, or is no
    table, which that kind's table then refuses as such); None for another."""
    if isinstance(table, ServerTable):
        return table.kind
    default = default_kind().name
    kind = table.get("kind", default) if isinstance(table, dict) else default
    return kind if isinstance(kind, str) and kind_named(kind) is not None else None


INVALID_KIND = "server_kind"


@cache
def _union(kinds: tuple[ServerKind, ...]) -> TypeAdapter[ServerTable]:
    """The tagged union of the tables of `kinds`, each tagged with its kind's name."""
    members = tuple(Annotated[kind.table, Tag(kind.name)] for kind in kinds)
    valid = ", ".join(kind.name for kind in kinds)
    discriminator = Discriminator(
        _tag,
        custom_error_type=INVALID_KIND,
        custom_error_message=f"not a server kind; valid: {valid}",
    )
    union: Any = Annotated[Union[members], discriminator]  # noqa: UP007
    return TypeAdapter(union)


def _validated(table: Any) -> ServerTable:
    _tag(table)  # a kind not registered yet is looked for among the entry points first
    return _union(tuple(KINDS.read)).validate_python(table)


class _Registered:
    """Reads a `[server]` table as the table of the kind it names among those registered
    when it is read (the union is built from the registry then, not when a model is)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(_validated)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(_union(tuple(KINDS)).core_schema)


# `[server]` as a profile reads it: the table of the kind it names.
Server = Annotated[ServerTable, _Registered]
