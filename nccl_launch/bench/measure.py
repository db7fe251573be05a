"""`bench` itself: check the server's tree, stream the runs, check again, stamp the result."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from nccl_launch.bench.api_key import server_api_key
from nccl_launch.bench.client import Client
from nccl_launch.bench.gpus import query_gpus
from nccl_launch.bench.result import BenchReport, BenchStatus, Method, RunFigure, judge, summarize
from nccl_launch.bench.streams import prompt_of, stream_all
from nccl_launch.findings import Finding, Refused
from nccl_launch.live.compare import LiveReport
from nccl_launch.live.processes import HeldProcess, snapshot_tree
from nccl_launch.live.resolve import hold
from nccl_launch.live.target import Target
from nccl_launch.live.watch import compare_tree
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.secrets.url import Url
from nccl_launch.serving.api import Served


class Progress(Protocol):
    """Told as the benchmark goes, so a long one is not silent."""

    def verified(self, when: str, report: LiveReport) -> None: ...

    def ran(self, kind: str, number: int, total: int, figure: RunFigure) -> None: ...


def check_held(server: HeldProcess, loaded: LoadedProfile) -> LiveReport:
    """`check`'s comparison of the server's whole tree with the profile."""
    return compare_tree(snapshot_tree(server), loaded)


def request_body(served: Served, method: Method, number: int = 1) -> dict[str, Any]:
    """Request `number`'s: one greedy completion of exactly max_tokens (ignore_eos), usage in
    its last event; of the model the server named (none named: its own)."""
    model = {} if served.request_model is None else {"model": served.request_model}
    return {
        **model,
        "prompt": prompt_of(method, number),
        "max_tokens": method.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _masked(failed: list[Finding], known: Callable[[str], str]) -> list[Finding]:
    """The failed requests' findings with what `known` masks masked: the server's answer may
    repeat a secret the profile filled in (the name it serves)."""
    return [
        replace(each, where=known(each.where), message=known(each.message), fix=known(each.fix))
        for each in failed
    ]


def measure_decode(
    loaded: LoadedProfile,
    url: Url,
    pid: int | None,
    method: Method,
    timeout: float,
    progress: Progress,
) -> BenchReport:
    """Measure the server at `url` (the process `pid`, which must own its listener where the
    URL is local), proved to run `loaded` before and after, asked as its kind is, with
    the API key it was started with; the report says whether it was measured, refused,
    discarded or interrupted (Ctrl-C: the runs so far), and which requests failed."""
    plan = loaded.plan
    stamp: dict[str, Any] = {
        "profile": plan.label,
        "digest": plan.digest,
        "profile_path": str(loaded.path.absolute()),  # read back from anywhere
        "url": url,
        "host": socket.gethostname(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "method": method,
    }

    def report(status: BenchStatus, runs: list[RunFigure], **more: Any) -> BenchReport:
        fields = {"status": status, "runs": runs, **stamp, **summarize(runs), **more}
        return BenchReport.model_validate(fields)

    # Held from the check before to the one after: the process checked after is the same.
    with hold(Target(url=url, pid=pid)) as server:
        before = check_held(server, loaded)
        progress.verified("before", before)
        if not before.ok:
            return report("refused", [], drift=before)
        # What the server says back may quote a secret the profile filled in: the name it
        # serves (`--served-model-name`), which each request gives and an error may repeat.
        known = before.secrets.known
        runs: list[RunFigure] = []
        failed: list[Finding] = []
        kind = loaded.profile.kind
        key = server_api_key(server, kind)
        with Client(url, timeout, kind, key, method.concurrency) as client:
            served = client.served()
            gpus, gpus_note = query_gpus()
            # A profile without [server] runs what follows `--`: its kind is known if it said so.
            named = loaded.profile.server is not None or served.version is not None
            stamp |= {"server": kind.name if named else None, "server_version": served.version}
            model = None if served.model is None else known(served.model)
            stamp |= {"model": model, "gpus": gpus, "gpus_note": gpus_note}
            try:
                stream_all(
                    client,
                    lambda number: request_body(served, method, number),
                    method,
                    progress.ran,
                    runs,
                    failed,
                )
            except KeyboardInterrupt:
                return report("interrupted", list(runs), failed=_masked(failed, known))
            if failed and not runs:
                said = f"every request failed; the first: {_masked(failed, known)[0].text()}"
                raise Refused(Finding("all-requests-failed", "", said, cause="host"))
        after = check_held(server, loaded)
        progress.verified("after", after)
        if not after.ok:
            return report("discarded", runs, drift=after)
    baseline = loaded.profile.baseline
    measured = report("measured", runs, failed=_masked(failed, known))
    if baseline is None or measured.mean_tok_s is None or failed:
        return measured  # a figure without its failed requests is not the baseline's
    fewest = min(run.tokens for run in runs)
    verdict = judge(baseline, measured.mean_tok_s, method, fewest, measured.prefill_tok_s)
    return measured.model_copy(update={"baseline": verdict})
