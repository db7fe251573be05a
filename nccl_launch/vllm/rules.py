"""vLLM's own rules for a `[server]` table, checked before start, and the NCCL variables it
sets itself: where it overrides a profile's value, and what `check` tolerates as its own."""

from __future__ import annotations

from collections.abc import Mapping

from nccl_launch.digits import is_ascii_digits
from nccl_launch.findings import Finding
from nccl_launch.nccl.rules import same_meaning
from nccl_launch.vllm import facts
from nccl_launch.vllm.argv import setting
from nccl_launch.vllm.server import VllmServer as Server

_SPECULATIVE = "server.speculative"


def server_problems(server: Server) -> list[Finding]:
    """vLLM's own rules for a resolved `[server]` table, beyond those every kind shares."""
    problems = []
    # Data and prefill-context parallelism, from its args, count in the world size too.
    parallel = {name: _size(server, name) for name in facts.WORLD_SIZES}
    world = server.tp_size * server.pp_size * parallel[facts.DATA_PARALLEL]
    world *= parallel[facts.CONTEXT_PARALLEL]
    if world % server.nnodes:
        sizes = ["tp_size", "pp_size"] + [name for name, size in parallel.items() if size != 1]
        message = (
            f"{' * '.join(sizes)} = {world} is not a multiple of nnodes = {server.nnodes} "
            "(vLLM refuses a world size nnodes does not divide)"
        )
        problems.append(Finding("nnodes", "server.nnodes", message))
    return problems + speculative_problems(server)


def _size(server: Server, name: str) -> int:
    """A parallel size the server's args set (1 where they set none, or no number)."""
    value = setting(server.args, name)
    return int(value) if isinstance(value, str) and is_ascii_digits(value) else 1


def speculative_problems(server: Server) -> list[Finding]:
    """vLLM's speculative rules (its SpeculativeConfig), checked before start."""
    spec = server.speculative
    if spec is None:
        return []
    if spec.method in facts.DRAFT_METHODS and spec.model is None:
        message = f"method {spec.method!r} drafts with a model of its own; none given"
        fix = "give the draft model's path (model = ...)"
        return [Finding("no-draft", f"{_SPECULATIVE}.model", message, fix)]
    if spec.method in facts.MODELLESS_METHODS and spec.model is not None:
        message = f"method {spec.method!r} takes no draft model (vLLM would ignore it)"
        return [Finding("unused-draft", f"{_SPECULATIVE}.model", message, "drop model")]
    draft_tp = spec.extra_settings().get("draft_tensor_parallel_size")
    # an integer (not `true`, which equals 1 in Python and which vLLM's int field refuses)
    if draft_tp is not None and (type(draft_tp) is not int or draft_tp not in (1, server.tp_size)):
        message = f"{draft_tp!r} is neither 1 nor tp_size = {server.tp_size}, which vLLM refuses"
        where = f"{_SPECULATIVE}.draft_tensor_parallel_size"
        return [Finding("draft-tp", where, message)]
    return []


def unreadable(env: Mapping[str, str], where: str) -> list[Finding]:
    """VLLM_BATCH_INVARIANT in `env` that is no integer as Python's `int` reads it
    (`true`, `1e3`, empty): vLLM reads it with `int` as it imports its modules, and stops."""
    value = env.get(facts.BATCH_INVARIANT)
    if value is None:
        return []
    try:
        int(value)
    except ValueError:
        message = (
            f"{value!r} is not an integer, which vLLM fails to start on (it reads it with int())"
        )
        return [Finding("batch-invariant-value", where, message, "write 1 (on) or 0 (off)")]
    return []


def batch_invariant(env: Mapping[str, str]) -> bool:
    """Whether vLLM runs batch-invariant in `env`: VLLM_BATCH_INVARIANT an integer (as
    Python's `int` reads it) other than 0."""
    try:
        return int(env.get(facts.BATCH_INVARIANT, "0")) != 0
    except ValueError:
        return False  # vLLM fails at start on it


def replaced(env: Mapping[str, str], declared: Mapping[str, str]) -> list[str]:
    """The `declared` NCCL values vLLM replaces whatever they are, when `env` (what the
    server gets) turns batch-invariant mode on: `NAME=VALUE by PIN` each."""
    if not batch_invariant(env):
        return []
    return [
        f"{key}={declared[key]} by {value}"
        for key, value in facts.BATCH_INVARIANT_PINS.items()
        if key in declared and not same_meaning(key, value, declared[key])
    ]


def environment_findings(
    server: Server, env: Mapping[str, str], declared: Mapping[str, str]
) -> list[Finding]:
    """What the environment the server gets (`env`: the calling one, env files) makes vLLM do
    to the profile's `declared` values where the profile does not declare the cause itself:
    batch-invariant mode's pins (its own `[env]` is judged by `server_warnings`)."""
    if facts.BATCH_INVARIANT in declared:
        return []
    name = facts.BATCH_INVARIANT
    found = replaced(env, declared)
    if not found:
        return unreadable(env, name)
    message = (
        f"{env[name]!r}, which the profile does not declare, makes vLLM replace "
        f"{', '.join(found)} (batch-invariant mode pins them)"
    )
    fix = f'unset it, or declare it in [env] and accept "env.{name} overridden" in [policy]'
    return [Finding("overridden", name, message, fix)]


def server_warnings(server: Server, env: dict[str, str]) -> list[Finding]:
    """Where vLLM will not honour what the profile declares: batch-invariant mode (an error
    unless accepted), and a graph-registration value sleep mode warns about."""
    found = unreadable(env, f"env.{facts.BATCH_INVARIANT}")
    pinned = replaced(env, env)
    if pinned:
        message = f"makes vLLM replace {', '.join(pinned)} (batch-invariant mode pins them)"
        fix = f"drop {facts.BATCH_INVARIANT}, or those values"
        found.append(Finding("overridden", f"env.{facts.BATCH_INVARIANT}", message, fix))
    config = setting(server.args, "config")
    if isinstance(config, str):
        message = (
            f"--config {config}: vLLM reads flags from that file, which nccl-launch neither sees "
            "nor checks (a port or tensor_parallel_size there differs from the profile's unseen)"
        )
        fix = "write them in the profile's [server] instead"
        found.append(Finding("config-file", "server.args", message, fix, severity="warning"))
    if _sleeps(server) and env.get(facts.GRAPH_REGISTER, "0") != "0":
        message = (
            f"{env[facts.GRAPH_REGISTER]} with sleep mode offloading CUDA graphs: vLLM keeps "
            "it but warns that it pins the graph pool during sleep"
        )
        where = f"env.{facts.GRAPH_REGISTER}"
        found.append(Finding("graph-register", where, message, severity="warning"))
    return found


def owned_env(server: Server | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The NCCL variables vLLM sets itself for this table and environment: what `check`
    tolerates in its processes, and nothing more (none for a profile without a table)."""
    if server is None:
        return ()
    owned: list[str] = []
    if batch_invariant(env):
        owned += [*facts.BATCH_INVARIANT_PINS, facts.BATCH_INVARIANT_LISTS]
    if _sleeps(server) and facts.GRAPH_REGISTER not in env:
        owned.append(facts.GRAPH_REGISTER)
    if _limits_ctas(server) and not env.get(facts.MAX_CTAS, "").isdigit():
        owned.append(facts.MAX_CTAS)
    return tuple(owned)


def draft_model(server: Server) -> str | None:
    """The speculative draft's path, where it has one."""
    return server.speculative.model if server.speculative else None


def _sleeps(server: Server) -> bool:
    """Whether the server's args put its CUDA graphs in the pool sleep mode offloads."""
    backend, cumem = facts.SLEEP_BACKEND
    return (
        all(setting(server.args, name) is True for name in facts.SLEEP_SWITCHES)
        and setting(server.args, backend) in (None, cumem)
        and setting(server.args, facts.EAGER) is not True
    )


def _limits_ctas(server: Server) -> bool:
    """Whether the server's args make vLLM limit NCCL's CTAs for expert load balancing (over
    an NCCL communicator, unless the args name another: the default depends on the host)."""
    backend, mega_moe = facts.MEGA_MOE
    chosen = setting(server.args, backend)
    return (
        setting(server.args, facts.EPLB) is True
        and _size(server, facts.DATA_PARALLEL) > 1
        and isinstance(chosen, str)
        and chosen.lower().replace("-", "_") == mega_moe
    )
