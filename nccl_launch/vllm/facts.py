"""vLLM 0.33.0 as data: its flags and their spellings, speculative methods, the env it changes.

A leaf: the profile model and everything built on it read these facts; nothing here imports them.
Paths below are inside the vllm-0.33.0 wheel; docs/vllm.md cites the lines.
"""

from __future__ import annotations

from nccl_launch.serving.flags import Flag
from nccl_launch.serving.flags import flag_for as flags_flag_for

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
API_KEY_FLAG, API_KEY_SHORTEST = "--api-key", "--api-k"
API_KEY_ENV = "VLLM_API_KEY"
CREDENTIAL_FLAGS = (API_KEY_FLAG, "--hf-token")
# Its parser (argparse, allow_abbrev on) reads a unique prefix of any of its 435 flags.
# The structured `[server]` fields as vLLM's flags (engine/arg_utils.py): the model is
# positional after `serve` (FlexibleArgumentParser moves a `--model` there); `dist_init_addr`
# HOST:PORT is `--master-addr HOST --master-port PORT`.
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
)


def flag_for(option: str, flags: tuple[Flag, ...] = FLAGS) -> Flag | None:
    """The structured flag an option names, as vLLM's parser reads it: `_` as `-` in a long
    option's name (FlexibleArgumentParser), then an exact spelling or a unique prefix."""
    name, equals, value = option.partition("=")
    if name.startswith("--"):
        name = name.replace("_", "-")
    return flags_flag_for(name + equals + value, flags)


# Speculative methods (config/speculative.py SpeculativeMethod); the *_mtp names are
# deprecated spellings of "mtp", which vLLM rewrites with a warning.
METHODS = (
    "ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark",
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
# With sleep mode offloading CUDA graphs (config/vllm.py), NCCL_GRAPH_REGISTER defaults to 0;
# a value the environment sets wins, with a warning.
SLEEP_FLAGS = ("--enable-sleep-mode", "--sleep-mode-offload-cudagraph")
GRAPH_REGISTER = "NCCL_GRAPH_REGISTER"
# Expert-parallel load balancing over NCCL with the DeepGEMM mega-MoE backend sets
# NCCL_MAX_CTAS=8 unless it is set to digits (distributed/eplb/eplb_utils.py).
EPLB_FLAG = "--enable-eplb"
MAX_CTAS = "NCCL_MAX_CTAS"
