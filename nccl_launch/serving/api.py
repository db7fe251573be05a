"""What a server says of itself over HTTP, whatever its kind: its version, the model it serves
and the name a request gives it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The JSON a GET of a path answered; None where the server has no such path (404).
Get = Callable[[str], object]


@dataclass(frozen=True)
class Served:
    """A server's own account of itself; None where it does not say."""

    version: str | None
    model: str | None
    request_model: str | None  # what a request's `model` names; None: no `model` sent


def text(answer: object, key: str) -> str | None:
    """`answer[key]` where `answer` is an object and that a non-empty string; else None."""
    value = answer.get(key) if isinstance(answer, dict) else None
    return value if isinstance(value, str) and value else None


# The OpenAI API's list of the models a server serves, and vLLM's `{"version": ...}`
# (vllm-0.33.0's entrypoints/serve/instrumentator/basic.py).
MODELS_PATH, VERSION_PATH = "/v1/models", "/version"


def models_served(get: Get) -> Served:
    """What an OpenAI-compatible server says of itself: the first model of `/v1/models` (its
    first --served-model-name, for vLLM), whose name a request gives (with none, vLLM takes
    its own), and the version of `/version`, where it has one."""
    models = get(MODELS_PATH)
    data = models.get("data") if isinstance(models, dict) else None
    name = text(data[0], "id") if isinstance(data, list) and data else None
    return Served(version=text(get(VERSION_PATH), "version"), model=name, request_model=name)
