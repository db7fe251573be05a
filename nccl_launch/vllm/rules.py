"""vLLM's own rules for a `[server]` table, checked before start, and the NCCL variables it
sets itself: where it overrides a profile's value, and what `check` tolerates as its own."""

from __future__ import annotations

from collections.abc import Mapping

from nccl_launch.digits import is_ascii_digits
from nccl_launch.findings import Finding
from nccl_launch.vllm import facts
from nccl_launch.vllm.server import VllmServer as Server

_SPECULATIVE = "server.speculative"


def server_problems(server: Server) -> list[Finding]:
    """vLLM's own rules for a resolved `[server]` table, beyond those every kind shares."""
    problems = []
    if (server.tp_size * server.pp_size) % server.nnodes:
        product = server.tp_size * server.pp_size
        message = (
            f"tp_size * pp_size = {product} is not a multiple of nnodes = {server.nnodes} "
            "(vLLM refuses a world size nnodes does not divide)"
        )
        problems.append(Finding("nnodes", "server.nnodes", message))
    address = server.dist_init_addr
    if address is not None:
        host, colon, port = address.rpartition(":")
        if not colon or not host or not is_ascii_digits(port) or not 0 < int(port) < 65536:
            message = f"{address!r} is not HOST:PORT (vLLM's --master-addr and --master-port)"
            problems.append(Finding("address", "server.dist_init_addr", message))
    return problems + speculative_problems(server)


def speculative_problems(server: Server) -> list[Finding]:
    """vLLM's speculative rules (its SpeculativeConfig), checked before start."""
    spec = server.speculative
    if spec is None:
        return []
    if spec.method in facts.DRAFT_METHODS and spec.model is None:
        message = f"method {spec.method!r} drafts with a model of its own; none given"
        fix = "give the draft model's path (model = ...)"
        return [Finding("speculative", f"{_SPECULATIVE}.model", message, fix)]
    if spec.method in facts.MODELLESS_METHODS and spec.model is not None:
        message = f"method {spec.method!r} takes no draft model"
        return [Finding("speculative", f"{_SPECULATIVE}.model", message, "drop model")]
    return []


def batch_invariant(env: Mapping[str, str]) -> bool:
    """Whether vLLM runs batch-invariant in `env`: VLLM_BATCH_INVARIANT a non-zero integer."""
    value = env.get(facts.BATCH_INVARIANT, "0").strip()
    return value.lstrip("+-").isdigit() and value.isascii() and int(value) != 0


def overridden(env: Mapping[str, str], declared: Mapping[str, str]) -> list[Finding]:
    """The declared NCCL values vLLM replaces in `env` whatever they are: batch-invariant mode
    pins its own. An error, which `[policy] accept` can take (the profile then means vLLM's)."""
    if not batch_invariant(env):
        return []
    replaced = [
        f"{key}={declared[key]} by {value}"
        for key, value in facts.BATCH_INVARIANT_PINS.items()
        if key in declared and declared[key] != value
    ]
    if not replaced:
        return []
    message = f"makes vLLM replace {', '.join(replaced)} (batch-invariant mode pins them)"
    fix = f"drop {facts.BATCH_INVARIANT}, or the profile's values"
    return [Finding("vllm", f"env.{facts.BATCH_INVARIANT}", message, fix)]


def server_warnings(server: Server, env: dict[str, str]) -> list[Finding]:
    """Where vLLM will not honour what the profile declares: batch-invariant mode (an error
    unless accepted), and a graph-registration value sleep mode warns about."""
    found = overridden(env, env)
    if _sleeps(server) and env.get(facts.GRAPH_REGISTER, "0") != "0":
        message = (
            f"{env[facts.GRAPH_REGISTER]} with sleep mode offloading CUDA graphs: vLLM keeps "
            "it but warns that it pins the graph pool during sleep"
        )
        where = f"env.{facts.GRAPH_REGISTER}"
        found.append(Finding("vllm", where, message, severity="warning"))
    return found


def owned_env(server: Server, env: Mapping[str, str]) -> tuple[str, ...]:
    """The NCCL variables vLLM sets itself for this table and environment: what `check`
    tolerates in its processes, and nothing more."""
    owned: list[str] = []
    if batch_invariant(env):
        owned += [*facts.BATCH_INVARIANT_PINS, facts.BATCH_INVARIANT_LISTS]
    if _sleeps(server):
        owned.append(facts.GRAPH_REGISTER)
    if any(word.split("=", 1)[0] == facts.EPLB_FLAG for word in server.args):
        owned.append(facts.MAX_CTAS)
    return tuple(owned)


def _sleeps(server: Server) -> bool:
    """Whether the server's args turn on sleep mode with CUDA graphs offloaded."""
    options = {word.split("=", 1)[0].replace("_", "-") for word in server.args}
    return all(flag in options for flag in facts.SLEEP_FLAGS)
