"""What a server kind is: a few small records (its command line, its credentials, its HTTP
API, its rules, its probe), each with the defaults of a plain OpenAI-compatible server, so
that a kind's `kind.py` states only how its server differs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from nccl_launch.findings import Finding
from nccl_launch.serving.api import Get, Served, models_served
from nccl_launch.serving.command import Given
from nccl_launch.serving.flags import Flag
from nccl_launch.serving.table import ServerTable

TableT = TypeVar("TableT", bound=ServerTable)
# The table the structured options of a command line make, those left to args, and warnings
# on why (`kept-in-args`).
Fields = tuple[dict[str, Any], list[Given], list[Finding]]


def _no_flag(word: str) -> Flag | None:
    return None


def _left_to_args(given: Sequence[Given]) -> Fields:
    return {}, list(given), []


def _dist_init_addr(address: str) -> list[str]:
    return ["--dist-init-addr", address]


def _no_findings(*_: object) -> list[Finding]:
    return []


def _no_finding(*_: object) -> Finding | None:
    return None


def _no_env(server: object, env: Mapping[str, str]) -> tuple[str, ...]:
    return ()


def _no_draft(server: object) -> str | None:
    return None


@dataclass(frozen=True)
class CommandLine(Generic[TableT]):
    """How the server is started: the command line a table stands for, and how one is read
    back (`convert`, `capture`, `check`'s finding of the server among processes)."""

    script: str  # its console script, started as `SCRIPT serve`
    entrypoints: tuple[str, ...]  # what an interpreter runs it as: `-m MODULE [SUBCOMMAND]`
    argv: Callable[[TableT], list[str]]
    # The structured field an option of `run` or `preflight` would set.
    flag: Callable[[str], Flag | None] = _no_flag
    # The field an option of a command line read back gives; None: `flag`'s.
    reads_flag: Callable[[str], Flag | None] | None = None
    # The flag a first plain word after an entrypoint stands for.
    leading_flag: Callable[[str], Flag | None] = _no_flag
    # The table the structured options of a command line make; by default none is structured.
    fields: Callable[[Sequence[Given]], Fields] = _left_to_args
    # The options of args that give a structured field again; None: those `flag` reads.
    repeats: Callable[[TableT, Sequence[str]], list[tuple[str, Flag]]] | None = None
    node_rank_flag: str = "--node-rank"  # where placement puts this node's rank
    # The first node's HOST:PORT as arguments; ValueError for one it cannot take.
    address_args: Callable[[str], list[str]] = _dist_init_addr

    def reads(self, option: str) -> Flag | None:
        """The field an option of a command line gives."""
        return (self.reads_flag or self.flag)(option)

    def duplicated_flags(self, server: TableT, args: Sequence[str]) -> list[tuple[str, Flag]]:
        """The options of `args` that give a structured field again, with its flag."""
        if self.repeats is not None:
            return self.repeats(server, args)
        found = ((word.split("=", 1)[0], self.flag(word)) for word in args if word[:1] == "-")
        return [(option, flag) for option, flag in found if flag is not None]


@dataclass(frozen=True)
class Credentials:
    """Its secrets: the flags whose values are credentials, the API key's among them, and the
    key a request to the server carries."""

    api_key_flag: str = "--api-key"
    flags: tuple[str, ...] = ("--api-key",)  # whose values are secrets, spelled in full
    api_key_env: str | None = None  # a variable the server reads its key from, without the flag
    several_keys: bool = False  # whether its API-key flag takes several (`--api-key K1 K2`)
    # Its flags only named like a credential (`--speculative-token-map`): shown.
    named_like: tuple[str, ...] = ()
    # How its parser reads an option (without `=VALUE`) as the API key's flag, or as any
    # credential's (a prefix of one too); None: spelled in full only.
    api_key_option: Callable[[str], bool] | None = None
    credential_option: Callable[[str], bool] | None = None
    # The key a request carries, from the server's argv and environment; None: `key_of`.
    request_key_of: Callable[[Sequence[str], Mapping[str, str]], str | None] | None = None

    def reads_as_api_key(self, option: str) -> bool:
        """Whether its parser reads `option` as its API key's flag."""
        if self.api_key_option is not None:
            return self.api_key_option(option)
        return option == self.api_key_flag

    def reads_as_credential(self, option: str) -> bool:
        """Whether its parser may read `option` as a flag whose value is a credential."""
        if self.credential_option is not None:
            return self.credential_option(option)
        return option in self.flags

    def request_key(self, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
        """The key a request carries: the last API-key flag's value in `argv`, else the
        variable's in `env`; an empty one is none."""
        if self.request_key_of is not None:
            return self.request_key_of(argv, env)
        key = env.get(self.api_key_env, "") if self.api_key_env else ""
        for index, word in enumerate(argv):
            option, equals, value = word.partition("=")
            if self.reads_as_api_key(option):
                key = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
        return key or None


@dataclass(frozen=True)
class Api:
    """Its HTTP API: where it listens unless told, and what it says of itself."""

    default_host: str = "127.0.0.1"
    default_port: int = 8000
    served: Callable[[Get], Served] = models_served


@dataclass(frozen=True)
class Rules(Generic[TableT]):
    """Its own rules for a `[server]` table, beyond those every kind shares; by default none."""

    problems: Callable[[TableT], list[Finding]] = _no_findings
    # Where the server will not honour what the profile declares (its env).
    warnings: Callable[[TableT, dict[str, str]], list[Finding]] = _no_findings
    # What the environment the server gets makes it do to the profile's declared values,
    # beyond what the profile's own [env] says (`warnings` judges that).
    environment_findings: Callable[
        [TableT, Mapping[str, str], Mapping[str, str]], list[Finding]
    ] = _no_findings
    # The NCCL variables the server sets itself (no table: a profile without one).
    owned_env: Callable[[TableT | None, Mapping[str, str]], tuple[str, ...]] = _no_env
    # Why the model cannot serve the table, judged before start (from what the config.json of
    # a model path names, None where unreadable).
    model_problem: Callable[[TableT, Callable[[str], str | None]], Finding | None] = _no_finding
    draft_key: str = "draft_model_path"  # the speculative draft's key in `[server.speculative]`
    draft_model: Callable[[TableT], str | None] = _no_draft  # the draft's path, where it has one


@dataclass(frozen=True)
class Kind(Generic[TableT]):
    """One kind of server: what a profile's `kind` names, and its records."""

    name: str  # as a profile's `kind` names it
    title: str  # as people write it: "SGLang"
    table: type[TableT]
    env_prefix: str  # of the variables it reads
    command: CommandLine[TableT]
    # The module that asks the installed server (its `probe` of an argv, and the
    # `expected_values` its parser must read back): imported by preflight alone, off `run`'s
    # path.
    probe: str
    credentials: Credentials = field(default_factory=Credentials)
    api: Api = field(default_factory=Api)
    rules: Rules[TableT] = field(default_factory=Rules)
