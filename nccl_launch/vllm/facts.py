"""vLLM 0.33.0 as data: its flags and their spellings, speculative methods, the env it changes.

A leaf: the profile model and everything built on it read these facts; nothing here imports them.
Paths below are inside the vllm-0.33.0 wheel; docs/vllm.md cites the lines.
"""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple

from nccl_launch.serving.flags import Flag

# The module behind the `vllm` console script, run by the server's own interpreter: the
# `serve` subcommand (entrypoints/cli/serve.py). `-m vllm.entrypoints.openai.api_server` is
# deprecated in 0.33.0 and warns at start.
DEFAULT_ENTRYPOINT = "-m vllm.entrypoints.cli.main serve"
DEPRECATED_ENTRYPOINT = "-m vllm.entrypoints.openai.api_server"
SCRIPT, ENTRYPOINTS = "vllm", (DEFAULT_ENTRYPOINT, DEPRECATED_ENTRYPOINT)
# Only `serve` reads the model as the word after it (its `model_tag` becomes `--model`:
# entrypoints/cli/serve.py), and moves a `--model` given as an option there; the
# deprecated module reads only `--model`.
SERVE = "serve"
ENV_PREFIX = "VLLM_"  # the variables vLLM reads (envs.py)
# `--host` unset: vLLM binds every IPv4 interface ("", entrypoints/launchers/launcher.py).
DEFAULT_HOST, DEFAULT_PORT = "0.0.0.0", 8000  # noqa: S104 - read, not bound
# `--api-key` takes one or more keys; unset, VLLM_API_KEY's value is the key (an empty one is
# no key: every request is served; serve/middleware/register.py).
API_KEY_FLAG = "--api-key"
API_KEY_ENV = "VLLM_API_KEY"
CREDENTIAL_FLAGS = (API_KEY_FLAG, "--hf-token")
# The structured `[server]` fields as vLLM's flags (engine/arg_utils.py): the model is
# positional after `serve` (FlexibleArgumentParser moves a `--model` there); `dist_init_addr`
# HOST:PORT is `--master-addr HOST --master-port PORT`; `--spec-method`, `--spec-model` and
# `--spec-tokens` set keys of `--speculative-config` (create_speculative_config).
FLAGS = (
    Flag("model_path", "--model"),
    Flag("tp_size", "--tensor-parallel-size", ("-tp",)),
    Flag("pp_size", "--pipeline-parallel-size", ("-pp",)),
    Flag("host", "--host"),
    Flag("port", "--port"),
    Flag("nnodes", "--nnodes", ("-n",)),
    Flag("node_rank", "--node-rank", ("-r",)),
    Flag("dist_init_addr", "--master-addr"),
    Flag("dist_init_addr", "--master-port"),
    Flag("speculative", "--speculative-config", ("-sc",)),
    Flag("speculative.method", "--spec-method"),
    Flag("speculative.model", "--spec-model"),
    Flag("speculative.num_speculative_tokens", "--spec-tokens"),
)
# Beside tp_size and pp_size, the parallel sizes in vLLM's world size, which nnodes must divide
# (engine/arg_utils.py create_engine_config).
DATA_PARALLEL, CONTEXT_PARALLEL = "data_parallel_size", "prefill_context_parallel_size"
WORLD_SIZES = (DATA_PARALLEL, CONTEXT_PARALLEL)
# The first node's HOST:PORT, as two flags.
ADDRESS_FLAGS = tuple(flag.canonical for flag in FLAGS if flag.field == "dist_init_addr")
# A long option's name before its first `.` has each `_` read as `-` (argparse_utils.py,
# FlexibleArgumentParser.parse_args); a `.` there sets one key of a JSON option
# (`-sc.model X`, `--speculative-config.method=eagle3`).
_DASHES = re.compile(r"(?<=--)[^.]*")


class Option(NamedTuple):
    """One option string of `vllm serve`: the setting it sets, and what it stores where it is
    a switch (True for `--enable-eplb`, False for `--disable-eplb`; None: it takes a value)."""

    setting: str
    stored: bool | None


@cache
def options() -> dict[str, Option]:
    """Every option string of `vllm serve` (data/options.txt, read from its parser)."""
    from importlib import resources  # only when an argv is read

    text = resources.files("nccl_launch.vllm").joinpath("data", "options.txt").read_text("utf-8")
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            option, setting, *stored = line.split()
            found[option] = Option(setting, stored[0] == "on" if stored else None)
    return found


def read_options(word: str) -> tuple[str, ...]:
    """The option strings vLLM's parser may read `word` (`=VALUE` and all) as: its spelling
    (`_` read as `-`, a dotted key's option), then every option it is a prefix of (argparse's
    abbreviations; more than one: vLLM refuses it as ambiguous). Empty for no option."""
    if not word.startswith("-") or word in ("-", "--"):
        return ()
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        name = _DASHES.sub(lambda match: match.group(0).replace("_", "-"), name, count=1)
    name = name.split(".", 1)[0]
    known = options()
    if name in known:
        return (name,)
    # Python 3.11's argparse: a single-dash word is a prefix as a whole, `=` and all.
    prefix = name if word.startswith("--") or "." in word.split("=", 1)[0] else word
    return tuple(option for option in known if option.startswith(prefix))


def option_for(word: str) -> str | None:
    """The one option string vLLM's parser reads `word` as, or None (none, or ambiguous)."""
    found = read_options(word)
    return found[0] if len(found) == 1 else None


def reads_as_api_key(option: str) -> bool:
    """Whether vLLM's parser reads `option` as `--api-key` (`_` for `-`, a unique prefix)."""
    return option_for(option) == API_KEY_FLAG


def reads_as_credential(option: str) -> bool:
    """Whether vLLM's parser may read `option` as a flag whose value is a credential: one of
    them, or a prefix of one (an ambiguous one too, which it refuses, printing the word)."""
    return any(name in CREDENTIAL_FLAGS for name in read_options(option))


def flag_for(option: str, flags: tuple[Flag, ...] = FLAGS) -> Flag | None:
    """The structured flag a word names, as vLLM's parser reads it."""
    name = option_for(option)
    return next((flag for flag in flags if name in flag.spellings), None)


# Speculative methods (config/speculative.py SpeculativeMethod); the *_mtp names are
# deprecated spellings of "mtp", which vLLM rewrites with a warning.
METHODS = (
    "ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark",
)  # fmt: skip
# The names vLLM takes for "mtp" with a warning (config/speculative.py MTPModelTypes).
DEPRECATED_MTP = (
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
    "inkling_mtp", "glm5_next_mtp",
)  # fmt: skip
# The keys `--speculative-config` takes (SpeculativeConfig's fields, unknown ones refused),
# but those vLLM fills itself (target_model_config, draft_parallel_config, ...) and
# tensor_parallel_size, which it refuses for draft_tensor_parallel_size.
SPECULATIVE_KEYS = (
    "method", "model", "num_speculative_tokens", "enforce_eager", "draft_tensor_parallel_size",
    "quantization", "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len",
    "revision", "code_revision", "index_share_for_mtp_iteration",
    "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "disable_lookahead_block_hashes", "draft_lm_head_quantization",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
    "prompt_lookup_min", "parallel_drafting", "num_speculative_tokens_per_batch_size",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "draft_load_config",
    "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk", "xpress_topc",
    "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
)  # fmt: skip
# Methods whose draft is a model of its own: `model` is required (config/speculative.py,
# "num_speculative_tokens was provided but without speculative model").
DRAFT_METHODS = ("draft_model", "eagle", "eagle3", "dflash", "custom_class")
# Methods that draft without a model: a `model` is not theirs to take.
MODELLESS_METHODS = ("ngram", "ngram_gpu", "suffix")

# With VLLM_BATCH_INVARIANT set to a non-zero integer (envs.py), vLLM sets NCCL_LAUNCH_MODE
# for the process and pins these for its own communicators, whatever the environment holds
# (model_executor/determinism/batch_invariant.py override_envs_for_invariance), and lists the
# pins in NCCL_NO_CACHE (utils/nccl.py pin_nccl_env).
BATCH_INVARIANT = "VLLM_BATCH_INVARIANT"
BATCH_INVARIANT_PINS = {
    "NCCL_LAUNCH_MODE": "GROUP",
    "NCCL_COLLNET_ENABLE": "0",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_P2P_NET_DISABLE": "1",
    "NCCL_MIN_NCHANNELS": "1",
    "NCCL_MAX_NCHANNELS": "1",
    "NCCL_PROTO": "Simple",
    "NCCL_ALGO": "ring,tree;allreduce:tree",
    "NCCL_NTHREADS": "1",
    "NCCL_SOCKET_NTHREADS": "1",
}
BATCH_INVARIANT_LISTS = "NCCL_NO_CACHE"
# With sleep mode offloading CUDA graphs to its cuMem pool (config/vllm.py
# use_cumem_cudagraph_pool: both switches on, the cumem backend, CUDA graphs not turned off),
# NCCL_GRAPH_REGISTER defaults to 0; a value the environment sets wins, with a warning.
SLEEP_SWITCHES = ("enable_sleep_mode", "sleep_mode_offload_cudagraph")
SLEEP_BACKEND = ("sleep_mode_backend", "cumem")
EAGER = "enforce_eager"  # no CUDA graphs
GRAPH_REGISTER = "NCCL_GRAPH_REGISTER"
# Expert-parallel load balancing (`--enable-eplb`) with data parallelism and the DeepGEMM
# mega-MoE backend, over an NCCL communicator, sets NCCL_MAX_CTAS=8 unless the environment
# sets it to digits (distributed/eplb/eplb_utils.py override_envs_for_eplb).
EPLB = "enable_eplb"
MEGA_MOE = ("moe_backend", "deep_gemm_mega_moe")  # vLLM reads `-` as `_`, any case
MAX_CTAS = "NCCL_MAX_CTAS"
