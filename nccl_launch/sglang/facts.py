"""SGLang 0.5.23 as data: its flags and their spellings, speculative algorithms, the env it owns.

A leaf: the profile model and everything built on it read these facts; nothing here imports them.
"""

from __future__ import annotations

from collections.abc import Sequence

from nccl_launch.serving.flags import Flag
from nccl_launch.serving.flags import flag_for as flags_flag_for

ALGORITHMS = (
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP",
)  # fmt: skip
DEFAULT_ENTRYPOINT = "-m sglang.launch_server"
# A start script runs the server as the console script's `sglang serve` or as the module.
SCRIPT, ENTRYPOINTS = "sglang", (DEFAULT_ENTRYPOINT,)
ENV_PREFIX = "SGLANG_"  # the variables SGLang reads
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 30000  # `--host` and `--port` when not given
# With `--api-key KEY`, SGLang answers every path but /health*, /ready* and /metrics* with 401
# unless it carries `Authorization: Bearer KEY` (utils/auth.py); an empty KEY checks nothing.
# Its parser reads a prefix of the flag down to `--ap`, the shortest no other flag starts
# (`abbreviates` below answers what it may read, an ambiguous prefix too, which it refuses).
API_KEY_FLAG, API_KEY_SHORTEST = "--api-key", "--ap"
# The flags whose value is a credential (server_args' API and SSL fields), and
# --watermark-config, whose JSON holds the watermark's keys (SGLang redacts it from its logs).
# Its parser takes any unambiguous prefix of them (`--admin-api`); a flag of its own that
# starts one (`--ssl-keyfile`) it takes as itself.
API_KEY_FLAGS = (API_KEY_FLAG, "--admin-api-key")  # an empty one checks nothing
CREDENTIAL_FLAGS = (*API_KEY_FLAGS, "--ssl-keyfile-password", "--watermark-config")
FLAGS_STARTING_CREDENTIAL_FLAGS = ("--ssl-keyfile",)


def abbreviates(option: str, flags: Sequence[str]) -> bool:
    """Whether SGLang's parser may read `option` as one of `flags`: a prefix of one (an
    ambiguous one too, which it refuses), but not a flag of its own that starts one."""
    return (
        len(option) > len("--")
        and option not in FLAGS_STARTING_CREDENTIAL_FLAGS
        and any(flag.startswith(option) for flag in flags)
    )


def reads_as_api_key(option: str) -> bool:
    """Whether SGLang's parser may read `option` as one of its API-key flags."""
    return abbreviates(option, API_KEY_FLAGS)


def reads_as_credential(option: str) -> bool:
    """Whether SGLang's parser may read `option` as a flag whose value is a credential."""
    return abbreviates(option, CREDENTIAL_FLAGS)


# SGLang's flags with a word that reads as a credential's (TOKEN, PASS) and values that are
# none (latency buckets, a token map's path, metrics names): shown, not masked.
NAMED_LIKE_CREDENTIALS = (
    "--bucket-time-to-first-token", "--bucket-inter-token-latency",
    "--enable-forward-pass-metrics", "--forward-pass-metrics-worker-id",
    "--forward-pass-metrics-ipc-name", "--speculative-token-map",
    "--tbo-token-distribution-threshold", "--kt-max-deferred-experts-per-token",
    "--prefill-delayer-token-usage-low-watermark",
)  # fmt: skip

# What SGLang adds to its workers' environment when unset (`_set_envs_and_config` in
# entrypoints/engine.py; NCCL_GRAPH_REGISTER in parallel_hook.py).
OWNED_ENV = ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_GRAPH_REGISTER")
# The flags that make SGLang set NCCL variables whatever the environment holds, and those
# variables (`_set_envs_and_config`: symmetric memory needs cuMem buffers and NVLS).
NCCL_OVERRIDING_FLAGS = {
    "--enable-symm-mem": ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"),
    "--enable-nccl-nvls": ("NCCL_NVLS_ENABLE",),
}


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


def extra_flag(key: str) -> str:
    """A pass-through key as a flag: `accept_threshold_single` -> `--speculative-accept-...`."""
    return SPECULATIVE_PREFIX + key.replace("_", "-")


def flag_for(option: str, flags: tuple[Flag, ...] = FLAGS) -> Flag | None:
    """The structured flag an option names, as SGLang's parser would resolve it."""
    return flags_flag_for(option, flags)


# Architectures whose checkpoint carries its own MTP draft layers: SGLang 0.5.23 uses the
# target model as the draft when no draft path is given (speculative_hook.py).
MTP_ARCHITECTURES = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})  # fmt: skip
