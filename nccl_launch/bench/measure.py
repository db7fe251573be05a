"""`bench` itself: check the server's tree, stream the runs, check again, stamp the result."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from nccl_launch.bench.client import Client, ServerFacts
from nccl_launch.bench.gpus import query_gpus
from nccl_launch.bench.result import BenchReport, Method, RunFigure, Status, judge, summarize
from nccl_launch.errors import HostError, UsageError
from nccl_launch.live.compare import LiveReport
from nccl_launch.live.processes import Target, main_pid, snapshot_tree
from nccl_launch.live.watch import compare_tree
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.profile.plan import build_plan
from nccl_launch.secrets import mask_credentials


class Progress(Protocol):
    """Told as the benchmark goes, so a long one is not silent."""

    def checked(self, when: str, report: LiveReport) -> None: ...

    def ran(self, kind: str, number: int, total: int, figure: RunFigure) -> None: ...


@dataclass(frozen=True)
class Server:
    """Where to send the requests, and which process tree to check."""

    url: str
    target: Target


def _local_addresses() -> set[str]:
    import psutil  # only where the URL names a host to look for

    return {address.address for found in psutil.net_if_addrs().values() for address in found}


def _is_here(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise HostError(f"--url: cannot resolve {host}: {error}") from None
    found = {str(info[4][0]) for info in infos}
    local = _local_addresses()
    return any(
        ipaddress.ip_address(address.split("%")[0]).is_loopback or address in local
        for address in found
    )


def locate(url: str, pid: int | None) -> Server:
    """The server of `url`: its tree is the process listening on the URL's port (which must
    be on this host), or `pid`'s."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UsageError(f"--url {mask_credentials(url)}: not a valid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--url {mask_credentials(url)}: not an http:// or https:// URL with a host; "
            "valid: http://127.0.0.1:30000"
        )
    if pid is None and not _is_here(parts.hostname, port):
        raise UsageError(
            f"--url {mask_credentials(url)}: {parts.hostname} is not this host, whose processes "
            "bench checks; run bench on the server's host, or name its process with --pid"
        )
    return Server(url=url, target=Target(pid=pid) if pid is not None else Target(port=port))


def verify(server: Server, loaded: LoadedProfile) -> LiveReport:
    """`check`'s comparison of the server's whole tree with the profile."""
    return compare_tree(snapshot_tree(main_pid(server.target)), loaded)


def request_body(facts: ServerFacts, method: Method) -> dict[str, Any]:
    """One greedy completion of exactly max_tokens (ignore_eos), usage in its last event."""
    return {
        "model": facts.get("served_model_name") or "default",
        "prompt": method.prompt,
        "max_tokens": method.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def bench(
    loaded: LoadedProfile, server: Server, method: Method, timeout: float, progress: Progress
) -> BenchReport:
    """Measure on a server proved to run `loaded` before and after; the report says whether
    it was measured, refused, discarded or interrupted (Ctrl-C: the runs so far)."""
    plan = build_plan(loaded.profile)
    stamp: dict[str, Any] = {
        "profile": plan.label,
        "digest": plan.digest,
        "profile_path": str(loaded.path.absolute()),  # read back from anywhere
        "url": mask_credentials(server.url),
        "host": socket.gethostname(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "method": method,
    }

    def report(status: Status, runs: list[RunFigure], **more: Any) -> BenchReport:
        fields = {"status": status, "runs": runs, **stamp, **summarize(runs), **more}
        return BenchReport.model_validate(fields)

    before = verify(server, loaded)
    progress.checked("before", before)
    if not before.ok:
        return report("refused", [], drift=before)
    runs: list[RunFigure] = []
    with Client(server.url, timeout) as client:
        facts = client.server_info()
        gpus, gpus_note = query_gpus()
        stamp |= {"sglang_version": facts.version, "model": facts.model, "gpus": gpus}
        stamp |= {"gpus_note": gpus_note}
        body = request_body(facts, method)
        try:
            for number in range(1, method.warmup + 1):
                progress.ran("warmup", number, method.warmup, client.complete(body))
            for number in range(1, method.runs + 1):
                runs.append(client.complete(body))
                progress.ran("run", number, method.runs, runs[-1])
        except KeyboardInterrupt:
            return report("interrupted", runs)
    after = verify(server, loaded)
    progress.checked("after", after)
    if not after.ok:
        return report("discarded", runs, drift=after)
    baseline = loaded.profile.baseline
    measured = report("measured", runs)
    if baseline is None or measured.mean_tok_s is None:
        return measured
    return measured.model_copy(update={"baseline": judge(baseline, measured.mean_tok_s, method)})
