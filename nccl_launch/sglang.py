"""What nccl-launch knows about SGLang 0.5.23: its flags, its speculative rules, its argv."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nccl_launch.profile import Server

ALGORITHMS = (
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP",
)  # fmt: skip
DEFAULT_ENTRYPOINT = "-m sglang.launch_server"

# What SGLang adds to its workers' environment when unset (reference/SGLANG.md).
OWNED_ENV = ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_GRAPH_REGISTER")


@dataclass(frozen=True)
class Flag:
    """A structured `[server]` field and the spellings SGLang's parser accepts for it."""

    field: str
    canonical: str
    aliases: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.canonical, *self.aliases)


FLAGS = (
    Flag("model_path", "--model-path", ("--model",)),
    Flag("tp_size", "--tp-size", ("--tensor-parallel-size",)),
    Flag("pp_size", "--pp-size", ("--pipeline-parallel-size",)),
    Flag("host", "--host"),
    Flag("port", "--port"),
    Flag("nnodes", "--nnodes"),
    Flag("node_rank", "--node-rank"),
    Flag("dist_init_addr", "--dist-init-addr", ("--nccl-init-addr",)),
    Flag("speculative.algorithm", "--speculative-algorithm"),
    Flag(
        "speculative.draft_model_path",
        "--speculative-draft-model-path",
        ("--speculative-draft-model",),
    ),
    Flag("speculative.num_steps", "--speculative-num-steps"),
    Flag("speculative.eagle_topk", "--speculative-eagle-topk"),
    Flag("speculative.num_draft_tokens", "--speculative-num-draft-tokens"),
)
SPECULATIVE_PREFIX = "--speculative-"

Scalar = str | int | float | bool


def extra_flag(key: str) -> str:
    """A pass-through key as a flag: `accept_threshold_single` -> `--speculative-accept-...`."""
    return SPECULATIVE_PREFIX + key.replace("_", "-")


def flag_for(option: str, flags: tuple[Flag, ...] = FLAGS) -> Flag | None:
    """The structured flag an option names, as argparse would resolve it (unique prefixes too)."""
    name = option.split("=", 1)[0]
    exact = [flag for flag in flags if name in flag.spellings]
    if exact:
        return exact[0]
    matches = [flag for flag in flags if any(s.startswith(name) for s in flag.spellings)]
    return matches[0] if len(matches) == 1 and len(name) > 2 else None


# Emitted only when they differ from SGLang's default, so that simple profiles stay short.
_OMITTED_DEFAULTS = {"pp_size": 1, "nnodes": 1}


def structured_values(server: Server) -> dict[str, object]:
    """Every structured field's value by its dotted name (`speculative.num_steps`)."""
    values = {}
    for flag in FLAGS:
        section, _, key = flag.field.rpartition(".")
        owner = server.speculative if section else server
        values[flag.field] = getattr(owner, key) if owner is not None else None
    return values


def server_argv(server: Server) -> list[str]:
    """The SGLang command line of a `[server]` table, every flag spelled canonically."""
    values = structured_values(server)
    spec = server.speculative
    argv = [server.python, *shlex.split(server.entrypoint)]
    for flag in FLAGS:
        value = values[flag.field]
        if value is not None and _OMITTED_DEFAULTS.get(flag.field) != value:
            argv += [flag.canonical, str(value)]
    for key, setting in (spec.extra_settings() if spec is not None else {}).items():
        if setting is True:
            argv.append(extra_flag(key))
        elif setting is not False:
            argv += [extra_flag(key), str(setting)]
    return argv + list(server.args)


def duplicated_flags(args: list[str], server: Server) -> list[str]:
    """Options in `args` that repeat a structured field (any spelling or unique prefix)."""
    spec = server.speculative
    extras = tuple(
        Flag(f"speculative.{key}", extra_flag(key))
        for key in (spec.extra_settings() if spec is not None else {})
    )
    problems = []
    for option in args:
        if not option.startswith("--"):
            continue
        flag = flag_for(option, FLAGS + extras)
        if flag is not None:
            problems.append(
                f"{option.split('=', 1)[0]} repeats the field {flag.field}; set it there"
            )
    return problems


# Architectures whose checkpoint carries its own MTP draft layers: SGLang 0.5.23 uses the
# target model as the draft when no draft path is given (speculative_hook.py).
MTP_ARCHITECTURES = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})  # fmt: skip


def model_architecture(model_path: str) -> str | None:
    """`architectures[0]` from the model's config.json, when it is readable on this machine."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
        architecture = config["architectures"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return architecture if isinstance(architecture, str) else None


def speculative_problems(server: Server) -> list[tuple[str, str]]:
    """SGLang's own speculative rules, checked before start: (key, message) pairs."""
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
            "missing (SGLang asserts or crashes otherwise): give all three, or none"
        )
        problems.append(("speculative", message))
    if steps is not None and topk == 1 and drafts is not None and drafts != steps + 1:
        message = (
            f"{drafts} with eagle_topk = 1 and num_steps = {steps}: SGLang silently runs "
            f"{steps + 1} instead; write num_draft_tokens = {steps + 1}"
        )
        problems.append(("speculative.num_draft_tokens", message))
    algorithm, draft = spec.algorithm, spec.draft_model_path
    if algorithm in ("EAGLE", "EAGLE3", "NEXTN") and draft is None:
        architecture = model_architecture(server.model_path or "")
        if architecture not in MTP_ARCHITECTURES:
            found = architecture or "unknown (no readable config.json)"
            message = (
                f"{algorithm} needs a draft model unless the model has built-in MTP layers "
                f"(DeepSeek-V3 style); the model's architecture is {found}"
            )
            problems.append(("speculative.draft_model_path", message))
    if algorithm == "DFLASH" and draft is None:
        problems.append(("speculative.draft_model_path", "DFLASH requires a draft model path"))
    if algorithm in ("UNO", "NGRAM") and draft is not None:
        problems.append(("speculative.draft_model_path", f"{algorithm} takes no draft model"))
    if algorithm == "UNO" and not any(arg.startswith("--uno-lora-path") for arg in server.args):
        problems.append(("args", "UNO needs --uno-lora-path in args"))
    return problems


def server_problems(server: Server) -> list[tuple[str, str]]:
    """Every rule a resolved `[server]` table must meet before SGLang is started."""
    problems = []
    if server.model_path is None:
        problems.append(("model_path", "required key is missing"))
    if (server.tp_size * server.pp_size) % server.nnodes:
        problems.append(
            (
                "nnodes",
                f"tp_size * pp_size = {server.tp_size * server.pp_size} is not a multiple of "
                f"nnodes = {server.nnodes} (SGLang asserts it)",
            )
        )
    if server.node_rank is not None and server.node_rank >= server.nnodes:
        problems.append(("node_rank", f"{server.node_rank} is not below nnodes = {server.nnodes}"))
    problems += [("args", problem) for problem in duplicated_flags(server.args, server)]
    return problems + speculative_problems(server)


def server_warnings(server: Server, env: dict[str, str]) -> list[str]:
    """Where SGLang will not honour what the profile declares."""
    warnings = []
    args = set(server.args)
    if "CUDA_DEVICE_MAX_CONNECTIONS" in env:
        warnings.append(
            "env.CUDA_DEVICE_MAX_CONNECTIONS: SGLang always sets it to 8 in its workers"
        )
    tuned = [key for key in ("NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS") if key in env]
    if "--enable-deterministic-inference" in args and server.tp_size > 1 and tuned:
        warnings.append(
            f"--enable-deterministic-inference makes SGLang override {', '.join(tuned)} "
            "(NCCL_ALGO=allreduce:tree, 8 channels)"
        )
    for option, key in (
        ("--enable-symm-mem", "NCCL_CUMEM_ENABLE"),
        ("--enable-nccl-nvls", "NCCL_NVLS_ENABLE"),
    ):
        if option in args and key in env:
            warnings.append(f"{option} makes SGLang override {key} = {env[key]!r}")
    return warnings


def node_rank_from(environ: Mapping[str, str]) -> int | None:
    """The node rank a cluster engine gives this process: Slurm, then Kubernetes LWS."""
    for variable in ("SLURM_NODEID", "LWS_WORKER_INDEX"):
        value = environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return None
