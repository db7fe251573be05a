"""SGLang's HTTP API: what `/server_info` says of the server, and the key its requests carry
(`--api-key` of its command line; utils/auth.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nccl_launch.serving.api import Get, Served, text
from nccl_launch.sglang.facts import API_KEY_FLAG, API_KEY_SHORTEST

INFO_PATHS = ("/server_info", "/get_server_info")  # the second before SGLang 0.5


def served(get: Get) -> Served:
    """The version and model of the first info path the server has (neither: nothing); a
    request names the model only where it has a --served-model-name (else SGLang, and a
    server of another kind, takes a request without one as for its own)."""
    answer: object = None
    for path in INFO_PATHS:
        answer = get(path)
        if answer is not None:
            break
    name = text(answer, "served_model_name")
    return Served(
        version=text(answer, "version"),
        model=name or text(answer, "model_path"),
        request_model=name,
    )


def request_key(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The key SGLang's parser reads from `argv`: the last `--api-key KEY` or `--api-key=KEY`
    (or a prefix of the flag down to `--ap`); None without one, or when it is empty. SGLang
    reads no key from its environment."""
    key: str | None = None
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if len(name) >= len(API_KEY_SHORTEST) and API_KEY_FLAG.startswith(name):
            key = value if equals else next(words, None)
    return key or None
