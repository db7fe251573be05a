"""What `bench` found, as data: the stamp, each run, the summary, the baseline's verdict."""

from __future__ import annotations

import math
from datetime import datetime
from statistics import fmean, median
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    computed_field,
    field_serializer,
    model_validator,
)

from nccl_launch.bench import TOKEN_LIMIT
from nccl_launch.bench.stats import Start, runs_interval
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_INTERRUPTED, EXIT_OK
from nccl_launch.findings import Finding
from nccl_launch.kinds import default_kind
from nccl_launch.live.compare import LiveReport
from nccl_launch.profile.model import Baseline
from nccl_launch.report import Report
from nccl_launch.secrets.url import Url

# What became of one `bench` (its JSON `status`): "refused", the check before the runs found
# drift and nothing was measured; "discarded", the check after did and the figures are not
# the profile's; "interrupted", Ctrl-C ended the runs. Named apart from preflight's `Status`.
BenchStatus = Literal["measured", "refused", "discarded", "interrupted"]


class RunFigure(BaseModel):
    """One streamed request: tokens from the server's usage figures, its whole duration.
    Bounded so that a history line cannot hold a rate that fails to compute."""

    tokens: int = Field(strict=True, ge=0, le=TOKEN_LIMIT)
    # No streamed request takes under a microsecond; so every rate is finite (a history line
    # of 1e-320 s made it infinite).
    seconds: float = Field(ge=1e-6, allow_inf_nan=False)
    ttft_s: float = Field(ge=0, allow_inf_nan=False)
    # The prompt's tokens as the server counted them (its usage's prompt_tokens), and when
    # the request was sent, in seconds after the first measured one; None in a history line
    # of an nccl-launch before them.
    prompt_tokens: int | None = Field(default=None, strict=True, ge=0, le=TOKEN_LIMIT)
    started_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tok_s(self) -> float:
        """Decode: the tokens after the first over the time after it (one over the time per
        output token), so a long prompt's prefill is not in it. A history line of an
        nccl-launch before `started_s` holds its tokens over the whole request."""
        if self.started_s is None:
            return self.tokens / self.seconds
        return max(self.tokens - 1, 0) / max(self.seconds - self.ttft_s, 1e-6)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefill_tok_s(self) -> float | None:
        """Prompt tokens over the time to first token (None: no count, or no time)."""
        if self.prompt_tokens is None or self.ttft_s < 1e-6:
            return None
        return self.prompt_tokens / self.ttft_s


class Gpu(BaseModel):
    """One GPU as `nvidia-smi --query-gpu` reports it."""

    index: int
    name: str
    memory_total: str
    driver_version: str
    pci_bus_id: str


class Method(BaseModel):
    """How the figures were measured: the same method gives comparable figures."""

    max_tokens: int = Field(ge=1, le=TOKEN_LIMIT)
    runs: int = Field(ge=1)
    warmup: int = Field(ge=0)
    prompt: str  # "" with prompt_tokens: each request's prompt is made of that many words
    prompt_tokens: int | None = Field(default=None, ge=1, le=TOKEN_LIMIT)
    concurrency: int = Field(default=1, ge=1)  # requests in flight at once


class BaselineVerdict(BaseModel):
    """The means against the profile's `[baseline]` (not a key's verdict of NCCL's log);
    `met` is None when not compared, else whether every figure judged met its floor; `short`
    names those that did not."""

    decode_tok_s: float = Field(gt=0, allow_inf_nan=False)
    tolerance: float = Field(ge=0, lt=1)
    floor: float = Field(ge=0, allow_inf_nan=False)
    met: bool | None
    note: str | None = None
    prefill_tok_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    prefill_floor: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    short: list[Literal["decode_tok_s", "prefill_tok_s"]] = Field(default_factory=list)


class WrittenBaseline(BaseModel):
    """What `bench --write-baseline` wrote: the profile file, and the `[baseline]` the profile
    resolves to with the figure (`previous`: the figure it replaced, None where there was none)."""

    path: str
    baseline: Baseline
    previous: float | None


def _aware_time(text: str) -> str:
    """`text`, an ISO 8601 time with its offset (as `bench` stamps it); else a ValueError."""
    if datetime.fromisoformat(text).tzinfo is None:
        raise ValueError("an ISO 8601 time without its UTC offset")
    return text


# A rate or a time in seconds of the summary: absent without runs.
Summary = Annotated[float | None, Field(ge=0, allow_inf_nan=False)]


class BenchReport(Report):
    """`bench`'s result; a history line is this document with status "measured"."""

    status: BenchStatus
    profile: str
    digest: str
    profile_path: str
    url: Url  # masked in every output, the history's lines too
    host: str
    time: Annotated[str, AfterValidator(_aware_time)]
    server: str | None = None  # its kind, as `[server] kind` names it
    server_version: str | None = None
    model: str | None = None
    gpus: list[Gpu] = Field(default_factory=list)
    gpus_note: str | None = None
    method: Method
    runs: list[RunFigure] = Field(default_factory=list)
    mean_tok_s: Summary = None
    min_tok_s: Summary = None
    max_tok_s: Summary = None
    ttft_s: Summary = None
    baseline: BaselineVerdict | None = None
    # Why each request that failed did; in JSON each finding's text.
    failed: list[Finding] = Field(default_factory=list)
    drift: LiveReport | None = None  # the check that refused or discarded the figures
    written: WrittenBaseline | None = None  # --write-baseline; never part of a history line

    @model_validator(mode="before")
    @classmethod
    def _server_of_before(cls, data: Any) -> Any:
        """A history line of an earlier nccl-launch, which measured the default kind (SGLang)
        alone and stamped its `sglang_version`: that is the server's version."""
        if isinstance(data, dict) and "server" not in data and "sglang_version" in data:
            server = default_kind().name
            data = {**data, "server": server, "server_version": data["sglang_version"]}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def interval_tok_s(self) -> list[float] | None:
        """The CONFIDENCE interval of the decode mean, [low, high], t-based on ln(rate) as
        `tune`'s (`runs_interval`); None under two runs, or with a run of no rate."""
        return _interval([run.tok_s for run in self.runs])

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefill_interval_tok_s(self) -> list[float] | None:
        """The CONFIDENCE interval of the prefill mean; None under two runs or without one."""
        return _interval([run.prefill_tok_s for run in self.runs])

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefill_tok_s(self) -> float | None:
        """The mean of the runs' prefill figures (None: a run without one)."""
        return _mean_of([run.prefill_tok_s for run in self.runs])

    @computed_field  # type: ignore[prop-decorator]
    @property
    def min_prefill_tok_s(self) -> float | None:
        figures = [run.prefill_tok_s for run in self.runs]
        return None if None in figures or not figures else min(figures)  # type: ignore[type-var]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_prefill_tok_s(self) -> float | None:
        figures = [run.prefill_tok_s for run in self.runs]
        return None if None in figures or not figures else max(figures)  # type: ignore[type-var]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def output_tok_s(self) -> float | None:
        """Completion tokens of every run over the wall time from the first request sent to
        the last token received (None: a run without its start)."""
        starts = [run.started_s for run in self.runs]
        if None in starts or not starts:
            return None
        first = min(start for start in starts if start is not None)
        last = max((run.started_s or 0) + run.seconds for run in self.runs)
        return sum(run.tokens for run in self.runs) / max(last - first, 1e-6)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ttft_p50_s(self) -> float | None:
        """The median time to first token."""
        return median(run.ttft_s for run in self.runs) if self.runs else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ttft_p99_s(self) -> float | None:
        """The 99th percentile of the time to first token, nearest rank: the slowest of fewer
        than 101 runs but one in a hundred."""
        if not self.runs:
            return None
        ordered = sorted(run.ttft_s for run in self.runs)
        return ordered[math.ceil(0.99 * len(ordered)) - 1]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sglang_version(self) -> str | None:
        """`server_version` of an SGLang server, as documents written before `server` say it."""
        return self.server_version if self.server == default_kind().name else None

    @model_validator(mode="after")
    def _summary_of_its_runs(self) -> Self:
        """A history line whose summary is not that of its runs is no result."""
        summary = {key: getattr(self, key) for key in summarize([])}
        if summary != summarize(self.runs):
            raise ValueError("mean, min, max and ttft_s are not those of its runs")
        return self

    @field_serializer("failed")
    def _failed(self, failed: list[Finding]) -> list[str]:
        return [each.text() for each in failed]

    @property
    def exit_code(self) -> int:
        """0 measured; 1 drift or below the baseline; 3 a tree that could not be read at all,
        or a request that failed."""
        if self.drift is not None:
            return self.drift.exit_code
        if self.status == "interrupted":
            return EXIT_INTERRUPTED
        if self.failed:
            return EXIT_HOST
        return EXIT_DRIFT if self.baseline is not None and self.baseline.met is False else EXIT_OK


def summarize(runs: list[RunFigure]) -> dict[str, float | None]:
    """Mean of the runs' rates, their spread as min-max, the mean time to first token."""
    if not runs:
        return {"mean_tok_s": None, "min_tok_s": None, "max_tok_s": None, "ttft_s": None}
    rates = [run.tok_s for run in runs]
    return {
        "mean_tok_s": fmean(rates),
        "min_tok_s": min(rates),
        "max_tok_s": max(rates),
        "ttft_s": fmean(run.ttft_s for run in runs),
    }


def _mean_of(figures: list[float | None]) -> float | None:
    """The mean of `figures`; None when one is None or there are none."""
    if None in figures or not figures:
        return None
    return fmean(figures)  # type: ignore[arg-type]


def _interval(figures: list[float | None]) -> list[float] | None:
    """The CONFIDENCE interval of the mean of `figures`; None when one is None."""
    rates = tuple(figure for figure in figures if figure is not None)
    found = runs_interval(Start(rates)) if len(rates) == len(figures) else None
    return None if found is None else list(found)


def _shown(value: object) -> str:
    return "unset" if value is None else str(value)


def judge(
    baseline: Baseline,
    mean: float,
    method: Method,
    fewest: int | None = None,
    prefill: float | None = None,
) -> BaselineVerdict:
    """Each figure measured (decode's `mean`, `prefill`'s) against its own in the baseline:
    met when it is at least that less the tolerance (prefill only where the baseline has one;
    a prefill not measured falls short). Not compared when the baseline records another
    method (max_tokens, runs, prompt_tokens, concurrency) than this measurement used, or when
    the server stopped a run short of max_tokens (`fewest`, it ignored ignore_eos)."""
    differs = [
        f"{key}={_shown(recorded)} (this bench: {_shown(used)})"
        for key, recorded, used, always in (
            ("max_tokens", baseline.max_tokens, method.max_tokens, False),
            ("runs", baseline.runs, method.runs, False),
            # Unset: the short prompt, one stream; a figure of another is another figure.
            ("prompt_tokens", baseline.prompt_tokens, method.prompt_tokens, True),
            ("concurrency", baseline.concurrency or 1, method.concurrency, True),
        )
        if (always or recorded is not None) and recorded != used
    ]
    if fewest is not None and fewest < method.max_tokens:
        differs.append(f"max_tokens={method.max_tokens} (the server stopped at {fewest})")
    judged: list[tuple[str, float | None, float]] = [("decode_tok_s", mean, baseline.floor)]
    if baseline.prefill_floor is not None:
        judged.append(("prefill_tok_s", prefill, baseline.prefill_floor))
    short = [name for name, mean, floor in judged if mean is None or mean < floor]
    verdict = BaselineVerdict(
        decode_tok_s=baseline.decode_tok_s,
        tolerance=baseline.tolerance,
        floor=baseline.floor,
        met=not short,
        prefill_tok_s=baseline.prefill_tok_s,
        prefill_floor=baseline.prefill_floor,
        short=short,  # type: ignore[arg-type]
    )
    if differs:
        note = "not compared: the baseline was measured with " + ", ".join(differs)
        return verdict.model_copy(update={"met": None, "note": note, "short": []})
    return verdict
