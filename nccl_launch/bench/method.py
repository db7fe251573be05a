"""The method a measurement uses: the options given, else the profile's [baseline], else
bench's defaults; the same for `bench` and each of `tune`'s trials."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nccl_launch.bench import DEFAULT_MAX_TOKENS, DEFAULT_PROMPT, DEFAULT_RUNS
from nccl_launch.bench.result import Method
from nccl_launch.escaping import not_utf8
from nccl_launch.findings import Finding, Refused

if TYPE_CHECKING:
    from nccl_launch.profile.model import Baseline


def measuring_method(
    baseline: Baseline | None,
    max_tokens: int | None,
    runs: int | None,
    warmup: int,
    prompt: str | None,
    prompt_tokens: int | None = None,
    concurrency: int | None = None,
) -> Method:
    """The method of the options, the baseline's max_tokens, runs, prompt_tokens and
    concurrency (else bench's) where they are not given; a --prompt overrides the
    baseline's prompt_tokens."""
    if prompt is not None and prompt_tokens is not None:
        said = "give one; each sets the prompt"
        raise Refused(Finding("prompt-twice", "--prompt and --prompt-tokens", said))
    byte = None if prompt is None else not_utf8(prompt)
    if byte is not None:
        said = f"holds the byte {byte}, which is not UTF-8"
        raise Refused(Finding("prompt-not-utf8", "--prompt", said, "write it in UTF-8"))
    if prompt is None and prompt_tokens is None and baseline is not None:
        prompt_tokens = baseline.prompt_tokens
    return Method(
        max_tokens=max_tokens or (baseline and baseline.max_tokens) or DEFAULT_MAX_TOKENS,
        runs=runs or (baseline and baseline.runs) or DEFAULT_RUNS,
        warmup=warmup,
        prompt="" if prompt_tokens is not None else prompt or DEFAULT_PROMPT,
        prompt_tokens=prompt_tokens,
        concurrency=concurrency or (baseline and baseline.concurrency) or 1,
    )
