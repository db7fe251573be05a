"""SGLang's own rules for a `[server]` table, checked before start, and what it overrides."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nccl_launch.findings import Finding
from nccl_launch.sglang.facts import (
    MTP_ARCHITECTURES,
    NCCL_OVERRIDING_FLAGS,
    OWNED_ENV,
    abbreviates,
)
from nccl_launch.sglang.server import Server

# The algorithms that run without a draft model only on a model with built-in MTP layers.
_MTP_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")

ARGS = "server.args"


def speculative_problems(server: Server) -> list[Finding]:
    """SGLang's own speculative rules, checked before start."""
    spec = server.speculative
    if spec is None:
        return []
    problems = []
    steps, topk, drafts = spec.num_steps, spec.eagle_topk, spec.num_draft_tokens
    trio = {"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": drafts}
    missing = [key for key, value in trio.items() if value is None]
    if 0 < len(missing) < len(trio):
        message = (
            f"num_steps, eagle_topk and num_draft_tokens go together; {', '.join(missing)} "
            "missing (SGLang asserts or crashes otherwise)"
        )
        fix = "give all three, or none"
        problems.append(Finding("speculative-trio", "server.speculative", message, fix))
    if steps is not None and topk == 1 and drafts is not None and drafts != steps + 1:
        where = "server.speculative.num_draft_tokens"
        message = (
            f"{drafts} with eagle_topk = 1 and num_steps = {steps}: SGLang silently runs "
            f"{steps + 1} instead"
        )
        fix = f"write num_draft_tokens = {steps + 1}"
        problems.append(Finding("draft-tokens", where, message, fix))
    algorithm, draft = spec.algorithm, spec.draft_model_path
    if algorithm == "DFLASH" and draft is None:
        message = "DFLASH requires a draft model path"
        problems.append(Finding("no-draft", "server.speculative.draft_model_path", message))
    if algorithm in ("UNO", "NGRAM") and draft is not None:
        message = f"{algorithm} takes no draft model"
        problems.append(Finding("unused-draft", "server.speculative.draft_model_path", message))
    if algorithm == "UNO" and not any(arg.startswith("--uno-lora-path") for arg in server.args):
        problems.append(Finding("uno-lora", ARGS, "UNO needs --uno-lora-path in args"))
    return problems


def mtp_algorithm(server: Server) -> str | None:
    """The speculative algorithm that needs the model's own MTP layers, if any: EAGLE without
    a draft model is valid only if the model has them, which the model's config.json on the
    serving host tells, not the profile."""
    spec = server.speculative
    if spec is None or spec.algorithm not in _MTP_ALGORITHMS or spec.draft_model_path:
        return None
    return spec.algorithm


def mtp_problem(server: Server, architecture: str | None) -> Finding | None:
    """Why the model (of `architecture`, None when unknown) cannot draft for itself under the
    server's speculative algorithm, if it must (`mtp_algorithm`)."""
    algorithm = mtp_algorithm(server)
    if algorithm is None or architecture in MTP_ARCHITECTURES:
        return None
    found = architecture or "unknown (no readable config.json)"
    message = (
        f"{algorithm} needs a draft model unless the model has built-in MTP layers "
        f"(DeepSeek-V3 style); the model's architecture is {found}"
    )
    return Finding("mtp", "server.speculative.draft_model_path", message)


def server_problems(server: Server) -> list[Finding]:
    """SGLang's own rules for a resolved `[server]` table, beyond those every kind shares."""
    problems = []
    if (server.tp_size * server.pp_size) % server.nnodes:
        product = server.tp_size * server.pp_size
        message = (
            f"tp_size * pp_size = {product} is not a multiple of nnodes = {server.nnodes} "
            "(SGLang asserts it)"
        )
        problems.append(Finding("nnodes", "server.nnodes", message))
    return problems + speculative_problems(server)


def server_warnings(server: Server, env: dict[str, str]) -> list[Finding]:
    """Where SGLang will not honour what the profile declares, and what only the host decides:
    warnings, each where a key (`env.X`) or the flag as SGLang reads it."""
    warnings = []
    if mtp_algorithm(server) is not None:
        where = "server.speculative.draft_model_path"
        why = "built-in MTP layers (DeepSeek-V3 style); preflight and run check its config.json"
        message = f"none given, so the model must have {why}"
        warnings.append(Finding("mtp-assumed", where, message, severity="warning"))
    if "CUDA_DEVICE_MAX_CONNECTIONS" in env:
        message = "SGLang always sets it to 8 in its workers"
        warnings.append(_overridden("env.CUDA_DEVICE_MAX_CONNECTIONS", message))
    tuned = [key for key in ("NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS") if key in env]
    flag = "--enable-deterministic-inference"
    typed = _typed(server.args, flag)
    if typed is not None and server.tp_size > 1 and tuned:
        overridden = f"{', '.join(tuned)} (NCCL_ALGO=allreduce:tree, 8 channels)"
        warnings.append(_overridden(flag, f"{typed}makes SGLang override {overridden}"))
    for flag, keys in NCCL_OVERRIDING_FLAGS.items():
        typed = _typed(server.args, flag)
        declared = ", ".join(f"{key} = {env[key]!r}" for key in keys if key in env)
        if typed is not None and declared:
            warnings.append(_overridden(flag, f"{typed}makes SGLang override {declared}"))
    return warnings


def _overridden(where: str, message: str) -> Finding:
    """SGLang replacing a value the profile declares, said where the cause is."""
    return Finding("overridden", where, message, severity="warning")


def _typed(args: list[str], flag: str) -> str | None:
    """How `args` spell `flag`, as SGLang's parser reads them: "" when as `flag`, `written
    --enable-symm, ` when by a prefix of it (`--enable-symm-mem`); None when they do not."""
    for word in args:
        option = word.partition("=")[0]
        if abbreviates(option, (flag,)):
            return "" if option == flag else f"written {option}, "
    return None


def model_problem(server: Server, architecture: Callable[[str], str | None]) -> Finding | None:
    """`mtp_problem` of the model the table names (`architecture`: what its config.json
    names, None where unreadable)."""
    return mtp_problem(server, architecture(server.model_path or ""))


def owned_env(server: Server | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The NCCL variables SGLang sets itself, whatever the table."""
    return OWNED_ENV


def draft_model(server: Server) -> str | None:
    """The speculative draft's path, where it has one."""
    return server.speculative.draft_model_path if server.speculative else None
