"""The profile format (schema 1) as pydantic models; values come out canonical. The same
format as JSON Schema, for editors (Taplo / Even Better TOML): `schema`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from nccl_launch.kinds import Server, ServerKind, default_kind, kind_of
from nccl_launch.nccl import catalog, others, rules
from nccl_launch.nccl.grammar import Invalid
from nccl_launch.profile.markers import OWN_VARIABLES
from nccl_launch.profile.search import PROFILE_NAME
from nccl_launch.serving.table import NUL_PROBLEM, STRICT, Name, Text

PROFILE_SCHEMA = 1  # the `schema` key of a profile file; JSON output has its own (report.py)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


DEFAULT_TOLERANCE = 0.05  # [baseline]: how far below its figure a mean may fall
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # tok/s


class Baseline(BaseModel):
    """What `bench` holds the server to: the mean may fall at most `tolerance` below.

    `max_tokens` and `runs` record the method the figure was measured with; `bench` uses
    them as its defaults and compares only a measurement made the same way.
    """

    model_config = STRICT

    decode_tok_s: float = Field(gt=0, allow_inf_nan=False)
    tolerance: float = Field(default=DEFAULT_TOLERANCE, ge=0, lt=1)
    max_tokens: int | None = Field(default=None, ge=1)
    runs: int | None = Field(default=None, ge=1)
    # Where the figure is a mean over separate server starts (`tune`'s confirmation): how
    # many, and the 95% confidence interval of the mean, [low, high].
    starts: int | None = Field(default=None, ge=1)
    interval: list[Rate] | None = Field(default=None, min_length=2, max_length=2)
    # Prompt tokens over time to first token, measured with `bench --prompt-tokens
    # prompt_tokens` (each prompt that many words); unset prompt_tokens: bench's short
    # prompt. `concurrency`: requests in flight at once, unset 1.
    prefill_tok_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    prompt_tokens: int | None = Field(default=None, ge=1)
    concurrency: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _figure_within_interval(self) -> Self:
        if self.interval is not None:
            low, high = self.interval
            if not low <= self.decode_tok_s <= high:
                message = f"[{low}, {high}] does not hold decode_tok_s = {self.decode_tok_s}"
                fix = "valid: [low, high] with low <= decode_tok_s <= high"
                raise Invalid("outside-interval", message, fix, "interval")
        if self.prefill_tok_s is not None and self.prompt_tokens is None:
            message = "set without prompt_tokens, the prompt length it was measured with"
            fix = "valid: both, as `bench --write-baseline --prompt-tokens N` writes them"
            raise Invalid("missing-prompt-tokens", message, fix, "prefill_tok_s")
        return self

    @model_serializer(mode="wrap")
    def _as_table(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without the keys it does not have: written as TOML, or read from JSON, it is the
        same [baseline] table (TOML has no null)."""
        fields: dict[str, Any] = handler(self)
        return {key: value for key, value in fields.items() if value is not None}

    @property
    def floor(self) -> float:
        """The lowest mean that still meets the baseline."""
        return self.decode_tok_s * (1 - self.tolerance)

    @property
    def prefill_floor(self) -> float | None:
        """The lowest prefill mean that still meets it; None without a prefill figure."""
        return None if self.prefill_tok_s is None else self.prefill_tok_s * (1 - self.tolerance)


class StrictModel(BaseModel):
    model_config = STRICT


class InvalidTable(ValueError):
    """Every key of a table its check refuses, each an `Invalid` said of its key."""

    def __init__(self, refused: list[Invalid]) -> None:
        super().__init__("\n".join(str(each) for each in refused))
        self.refused = refused


def _check_table(table: Any, check: Callable[[str, Any], str]) -> dict[str, str]:
    """Apply `check(key, value) -> str` to every entry; refuse every bad key at once."""
    if not isinstance(table, dict):
        raise Invalid("not-a-table", "must be a table")
    values, refused = {}, []
    for key, value in table.items():
        try:
            values[key] = check(key, value)
        except Invalid as error:
            refused.append(Invalid(error.code, error.message, error.fix, key))
    if refused:
        raise InvalidTable(refused)
    return values


def nccl_value(short: str, value: Any) -> str:
    """The canonical string of `[nccl]` KEY = `value` (KEY without the prefix), or a
    `Invalid` saying what would be valid."""
    if short.startswith(catalog.PREFIX):
        message = f"write the name without the prefix: {short.removeprefix('NCCL_')} = ..."
        raise Invalid("prefixed-name", message)
    name = catalog.PREFIX + short
    if catalog.lookup(name) is None:
        raise Invalid("unknown-variable", *catalog.unknown_name(name))
    if isinstance(value, dict | list):
        raise Invalid("wrong-type", f"{type(value).__name__} is not a value NCCL can read")
    if isinstance(value, str) and "\x00" in value:
        raise Invalid("nul-byte", NUL_PROBLEM)
    return rules.canonical(name, value)


def env_value(name: str, value: Any) -> str:
    """`value` as text when `name` may be set by a profile outside [nccl] ([env], an env
    file it names); `Invalid` says why not."""
    if not _ENV_NAME.fullmatch(name):
        raise Invalid(
            "variable-name", "not a valid environment variable name (letters, digits, '_')"
        )
    if name in OWN_VARIABLES:
        raise Invalid("own-variable", "nccl-launch sets this variable itself")
    if name.startswith(catalog.PREFIX):
        what = others.what_is(name, str(value))
        if what is not None:  # [nccl] would refuse it: NCCL does not read it
            message = f"{what}, not read by NCCL and never drift: the server gets it from the "
            message += "calling environment untouched"
            raise Invalid("not-read-by-nccl", message, "remove it here")
        short = name.removeprefix(catalog.PREFIX)
        message = f"NCCL variables belong in [nccl], validated: {short} = {value!r}"
        raise Invalid("nccl-in-env", message)
    if isinstance(value, bool) or not isinstance(value, str | int):
        message = f"{value!r} is not text or an integer"
        raise Invalid("wrong-type", message, "quote it as a string")
    if isinstance(value, str) and "\x00" in value:
        raise Invalid("nul-byte", NUL_PROBLEM)
    return str(value)


MAX_NOT_NCCL = 256


def _refuse_never_drift(name: str) -> None:
    """An `Invalid` where `name` is no name for [policy] to tolerate, being never drift
    whatever a profile says: nccl-launch's own (never compared), or, by its name alone,
    another program's that NCCL does not read (`others.what_is`, as `drift.classify` judges
    it before the policy)."""
    if name in OWN_VARIABLES:
        message = f"{name}: nccl-launch sets this variable itself, never drift: remove it"
        raise Invalid("own-variable", message)
    what = others.what_is(name, "")
    if what is not None:
        message = f"{name} is {what}, not read by NCCL, and never drift: remove it"
        raise Invalid("not-read-by-nccl", message)


class Policy(StrictModel):
    """What to do when the inherited environment disagrees with the profile."""

    conflict: Literal["refuse", "warn"] = "refuse"
    undeclared_nccl: Literal["refuse", "warn", "strip"] = "refuse"
    # The NCCL variables the server sets itself, tolerated where undeclared (and live, where
    # they differ); by default those its kind sets for this profile (`kinds.py`).
    server_owned: list[Text] = Field(default_factory=list)
    # Names with NCCL's prefix that NCCL does not read and this site sets (its own NCCL_*
    # convention): never drift, left to the server, like an image's NCCL_VERSION.
    not_nccl: list[Text] = Field(default_factory=list)
    # Warnings the profile has decided to live with, by the id `validate` prints
    # ("NCCL_MAX_NCHANNELS deprecated"); an id that matches no warning is itself a warning.
    accept: list[Text] = Field(default_factory=list)
    # The names of `${NAME}` in [server] args that may be filled from the calling environment
    # (a secret manager's, a unit's Environment=) where no env file of the profile sets them.
    environment_references: list[Text] = Field(default_factory=list)

    @field_validator("environment_references")
    @classmethod
    def _variable_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not _ENV_NAME.fullmatch(name):
                message = f"{name!r} is not a variable name (letters, digits, '_')"
                raise Invalid("variable-name", message)
        return names

    @field_validator("server_owned")
    @classmethod
    def _known_names(cls, names: list[str]) -> list[str]:
        for name in names:
            _refuse_never_drift(name)
        unknown = [name for name in names if catalog.lookup(name) is None]
        if unknown:
            message, meant = catalog.unknown_name(unknown[0])
            fix = "a name of this site's that NCCL does not read goes in not_nccl"
            raise Invalid("unknown-variable", message, "; ".join(filter(None, (meant, fix))))
        return names

    @field_validator("not_nccl")
    @classmethod
    def _not_nccl_names(cls, names: list[str]) -> list[str]:
        if len(names) > MAX_NOT_NCCL:  # each is compared with NCCL's names: bounded work
            fix = f"at most {MAX_NOT_NCCL} (a site's own NCCL_* names are few)"
            raise Invalid("too-many-names", f"{len(names)} names", fix)
        for name in names:
            if not (name.startswith(catalog.PREFIX) and name != catalog.PREFIX) or not (
                _ENV_NAME.fullmatch(name)
            ):
                message = f"{name!r}: only a name with NCCL's prefix could be drift"
                fix = "valid: NCCL_ then letters, digits, '_'"
                raise Invalid("not-nccl-prefixed", message, fix)
            _refuse_never_drift(name)
            var = catalog.lookup(name)
            if var is not None:
                older = catalog.older_releases(var)  # NCCL 2.28 reads it: never the site's
                which = f" ({older})" if older else ""
                message = f"NCCL reads {name}{which}: declare it in [nccl], or in server_owned"
                raise Invalid("read-by-nccl", f"{message} where the server sets it")
            meant = catalog.did_you_mean(name)
            if meant is not None:
                message = f"{name} is close to {meant}, which NCCL reads: most likely a misspelling"
                fix = f"fix it to {meant} in [nccl], or give the site's name a word of its own"
                raise Invalid("misspelled-variable", f"{message}, never a name of this site's", fix)
        return names


class Provenance(StrictModel):
    """Why the profile exists: the hardware and the measurement that justified it."""

    hardware: Text | None = None
    measured: Text | None = None
    source: Text | None = None
    date: Text | None = None
    software: Text | None = None
    notes: Text | None = None


# What a profile's next version of other values (tune's winner) keeps of its [provenance]:
# what it runs on. Its measurement, date and source are the new version's own; its notes
# were written of the values it changes (a problem found, a workaround) and stay in the file
# they describe, which the new version's source names.
NEXT_VERSION_KEEPS = ("hardware", "software")


class Profile(StrictModel):
    """One profile file, or the result of resolving its `extends` chain."""

    schema_version: int = Field(alias="schema")
    name: str
    version: int = Field(ge=1)
    description: Text = ""
    extends: Text | None = None
    # dotenv files read at start, for what must not be written here (secrets): paths as
    # written, relative to the file that names them; an `extends` chain adds them up.
    env_files: list[Name] = Field(default_factory=list)
    # NAME = path of a file holding just the value (a Secret volume's, LoadCredential='s), read
    # at start as one variable of an env file; the child's path wins where two name it.
    secret_files: dict[str, Name] = Field(default_factory=dict)
    nccl: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    policy: Policy = Field(default_factory=Policy)
    server: Server | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    baseline: Baseline | None = None  # outside the digest, like [provenance]

    @field_validator("schema_version")
    @classmethod
    def _schema(cls, schema: int) -> int:
        if schema != PROFILE_SCHEMA:
            message = f"{schema} is not a schema this nccl-launch reads"
            raise Invalid("unknown-schema", message, "valid: 1")
        return schema

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not PROFILE_NAME.fullmatch(name):
            fix = "valid: letters, digits, '.', '_', '-', starting with a letter or digit"
            raise Invalid("profile-name", f"{name!r} is not valid", fix)
        return name

    @field_validator("env_files")
    @classmethod
    def _env_files(cls, paths: list[str]) -> list[str]:
        if "" in paths:
            raise Invalid("empty-path", "an empty path", "give the env file's path")
        return paths

    @field_validator("secret_files")
    @classmethod
    def _secret_files(cls, files: dict[str, str]) -> dict[str, str]:
        def check(name: str, path: str) -> str:
            nccl = name.startswith(catalog.PREFIX) and name not in OWN_VARIABLES
            if nccl and others.what_is(name, path) is None:  # else env_value says what it is
                message = (
                    "not a secret: NCCL's settings belong in [nccl] "
                    f"({name.removeprefix(catalog.PREFIX)} = ...), where the value is validated "
                    "against what NCCL reads and covered by the digest check compares (NCCL's "
                    "INFO log prints it anyway)"
                )
                fix = "secret_files is for a value the server must not show, such as an API key"
                raise Invalid("nccl-secret", message, fix)
            env_value(name, path)
            if not path:
                fix = "give the path of the file that holds the value"
                raise Invalid("empty-path", "an empty path", fix)
            return path

        return _check_table(files, check)

    @field_validator("nccl", mode="before")
    @classmethod
    def _nccl(cls, table: Any) -> dict[str, str]:
        return _check_table(table, nccl_value)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, table: Any) -> dict[str, str]:
        return _check_table(table, env_value)

    @model_validator(mode="after")
    def _server_owned(self) -> Self:
        """`[policy] server_owned`, when the profile does not write it: what its kind sets."""
        if "server_owned" in self.policy.model_fields_set:
            return self
        owned = list(self.kind.rules.owned_env(self.server, self.declared_env()))
        policy = self.policy.model_copy(update={"server_owned": owned})
        return self.model_copy(update={"policy": policy})

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def kind(self) -> ServerKind:
        """The kind of server it runs: its `[server]` table's, the default kind's without one."""
        return kind_of(self.server) if self.server is not None else default_kind()

    def declared_env(self) -> dict[str, str]:
        """Every variable the profile sets, NCCL ones with their full name."""
        nccl = {catalog.PREFIX + key: value for key, value in self.nccl.items()}
        return {**nccl, **self.env}


def _nccl_properties() -> dict[str, Any]:
    properties = {}
    for name, var in sorted(catalog.catalog().items()):
        entry = rules.catalog_rule(var).schema() | {"description": var.summary}
        if var.deprecated:
            entry["deprecated"] = True
        properties[name.removeprefix(catalog.PREFIX)] = entry
    return properties


def profile_schema() -> dict[str, Any]:
    """The pydantic model's schema, with `[nccl]` typed per variable from the catalogs."""
    schema = Profile.model_json_schema(by_alias=True)
    properties = schema["properties"]
    properties["nccl"] = {
        "type": "object",
        "description": "NCCL variables without the NCCL_ prefix, checked with NCCL's grammar.",
        "properties": _nccl_properties(),
        "additionalProperties": False,
    }
    properties["env"] = {
        "type": "object",
        "description": "Other variables the server needs; NCCL ones belong in [nccl].",
        "propertyNames": {"pattern": "^(?!NCCL_)[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"type": ["string", "integer"]},
    }
    properties["env_files"] |= {
        "description": "dotenv files (0600) read at start, for secrets; relative to this file.",
        "items": {"type": "string", "minLength": 1},
    }
    properties["secret_files"] |= {
        "description": "NAME = a file holding just the value (a Secret volume's), read at start.",
        "propertyNames": properties["env"]["propertyNames"],
        "additionalProperties": {"type": "string", "minLength": 1},
    }
    properties["schema"]["const"] = 1
    return {"$schema": "https://json-schema.org/draft/2020-12/schema"} | schema
