"""The key requests to vLLM carry (`--api-key`, else VLLM_API_KEY); the rest of its HTTP API
is the plain one (`serving/api.py`). Paths are inside the vllm-0.33.0 wheel."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nccl_launch.vllm.facts import API_KEY_ENV, reads_as_api_key

# What argparse (Python 3.11, vLLM's interpreter) reads as a value, not an option, though it
# starts with '-': '-' alone, a negative number, a word with a space.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


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
