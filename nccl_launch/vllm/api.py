"""vLLM's HTTP API: what `/version` and `/v1/models` say of the server, and the key its
requests carry (`--api-key`, else VLLM_API_KEY). Paths are inside the vllm-0.33.0 wheel."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nccl_launch.serving.api import Get, Served, text
from nccl_launch.vllm.facts import API_KEY_ENV, reads_as_api_key

# `{"version": ...}` (entrypoints/serve/instrumentator/basic.py); the models it serves, the
# first named by its first --served-model-name, else the model (openai/models/serving.py).
VERSION_PATH, MODELS_PATH = "/version", "/v1/models"
# What argparse (Python 3.11, vLLM's interpreter) reads as a value, not an option, though it
# starts with '-': '-' alone, a negative number, a word with a space.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def served(get: Get) -> Served:
    """The version of `/version` and the first model of `/v1/models`, whose name a request
    gives (with none, vLLM takes its own: openai/models/serving.py check_model)."""
    models = get(MODELS_PATH)
    data = models.get("data") if isinstance(models, dict) else None
    name = text(data[0], "id") if isinstance(data, list) and data else None
    return Served(version=text(get(VERSION_PATH), "version"), model=name, request_model=name)


def _is_value(word: str) -> bool:
    """Whether argparse reads `word` after an option as its value, not as another option."""
    return (
        not word.startswith("-") or word == "-" or " " in word or bool(_NEGATIVE_NUMBER.match(word))
    )


def request_key(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """A key vLLM checks (the first): those of the last `--api-key` in `argv` (one or more
    words: nargs "+"; `_` for `-`, a prefix down to `--api-k`), else VLLM_API_KEY of its
    environment `env`; empty ones are none (serve/middleware/register.py). None: no key."""
    keys: list[str] | None = None
    for index, word in enumerate(argv):
        name, equals, value = word.partition("=")
        if not name.startswith("--") or not reads_as_api_key(name):
            continue
        if equals:
            keys = [value]
        else:
            keys = []
            for after in argv[index + 1 :]:
                if not _is_value(after):
                    break
                keys.append(after)
    if keys is None:
        keys = [env.get(API_KEY_ENV, "")]
    return next(filter(None, keys), None)
