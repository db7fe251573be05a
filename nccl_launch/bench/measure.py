"""`bench` itself: check the server's tree, stream the runs, check again, stamp the result."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import psutil

from nccl_launch.bench.api_key import server_api_key
from nccl_launch.bench.client import Client
from nccl_launch.bench.gpus import query_gpus
from nccl_launch.bench.result import BenchReport, Method, RunFigure, Status, judge, summarize
from nccl_launch.bench.streams import prompt_of, stream_all
from nccl_launch.bench.url import masked_url, url_address
from nccl_launch.errors import HostError, UsageError
from nccl_launch.live.compare import LiveReport
from nccl_launch.live.processes import (
    HeldProcess,
    hold,
    listening_pids,
    listening_server,
    snapshot_tree,
    tree_pids,
)
from nccl_launch.live.target import Target
from nccl_launch.live.watch import compare_tree
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.serving.api import Served


class Progress(Protocol):
    """Told as the benchmark goes, so a long one is not silent."""

    def verified(self, when: str, report: LiveReport) -> None: ...

    def ran(self, kind: str, number: int, total: int, figure: RunFigure) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    """Where to send the requests (`url`), and which process tree to check (`target`)."""

    url: str
    target: Target


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(address: str) -> IPAddress:
    """An address as the kernel lists it; IPv4 mapped into IPv6 as IPv4, a zone dropped."""
    ip = ipaddress.ip_address(address.split("%")[0])
    return (ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else ip


def _resolved(host: str, port: int) -> set[IPAddress]:
    """The addresses a connection to `host` may go to (httpx tries each in turn)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise HostError(f"--url: cannot resolve {host}: {error}") from None
    return {_ip(str(info[4][0])) for info in infos}


def _serves(listener: IPAddress, address: IPAddress) -> bool:
    """Whether a socket listening on `listener` takes a connection to `address`: its own
    address, or the wildcard of its family (`::` takes IPv4 too, unless IPV6_V6ONLY)."""
    if listener.is_unspecified:
        return listener.version == 6 or address.version == 4
    return listener == address


def _is_here(addresses: set[IPAddress]) -> bool:
    local = {
        _ip(found.address)
        for nic in psutil.net_if_addrs().values()
        for found in nic
        if found.family in (socket.AF_INET, socket.AF_INET6)
    }
    return any(address.is_loopback or address in local for address in addresses)


def locate(url: str, pid: int | None) -> Endpoint:
    """The server of `url`: its tree is the process listening on the address and port a
    connection to the URL lands on (which must be on this host), or `pid`'s, which must own
    that listener when the URL is local. Listeners of several trees there are refused: the
    one measured might not be the one checked."""
    host, port = url_address(url)
    addresses = _resolved(host, port)
    if not _is_here(addresses):
        if pid is None:
            raise UsageError(
                f"--url {masked_url(url)}: {host} is not this host, whose processes "
                "bench checks; run bench on the server's host, or name its process with --pid"
            )
        return Endpoint(url=url, target=Target(pid=pid))
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def accepts(ip: str) -> bool:
        return any(_serves(_ip(ip), address) for address in addresses)

    if pid is None:
        hint = "name one address in --url (e.g. 127.0.0.1), or the server with --pid"
        return Endpoint(url=url, target=Target(pid=listening_server(port, where, hint, accepts)))
    strangers = sorted(listening_pids(port, where, accepts) - tree_pids(pid))
    if strangers:
        raise HostError(
            f"--pid {pid}: pid {strangers[0]} listens on {where}, and it is not in pid "
            f"{pid}'s tree; the server measured must be the one checked"
        )
    return Endpoint(url=url, target=Target(pid=pid))


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


def measure_decode(
    loaded: LoadedProfile, endpoint: Endpoint, method: Method, timeout: float, progress: Progress
) -> BenchReport:
    """Measure on a server proved to run `loaded` before and after, asked as its kind is, with
    the API key it was started with; the report says whether it was measured, refused,
    discarded or interrupted (Ctrl-C: the runs so far), and which requests failed."""
    plan = loaded.plan
    stamp: dict[str, Any] = {
        "profile": plan.label,
        "digest": plan.digest,
        "profile_path": str(loaded.path.absolute()),  # read back from anywhere
        "url": masked_url(endpoint.url),
        "host": socket.gethostname(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "method": method,
    }

    def report(status: Status, runs: list[RunFigure], **more: Any) -> BenchReport:
        fields = {"status": status, "runs": runs, **stamp, **summarize(runs), **more}
        return BenchReport.model_validate(fields)

    # Held from the check before to the one after: the process checked after is the same.
    with hold(endpoint.target) as server:
        before = check_held(server, loaded)
        progress.verified("before", before)
        if not before.ok:
            return report("refused", [], drift=before)
        runs: list[RunFigure] = []
        failed: list[str] = []
        kind = loaded.profile.kind
        key = server_api_key(server, kind)
        with Client(endpoint.url, timeout, kind, key, method.concurrency) as client:
            served = client.served()
            gpus, gpus_note = query_gpus()
            # A profile without [server] runs what follows `--`: its kind is known if it said so.
            named = loaded.profile.server is not None or served.version is not None
            stamp |= {"server": kind.name if named else None, "server_version": served.version}
            stamp |= {"model": served.model, "gpus": gpus, "gpus_note": gpus_note}
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
                return report("interrupted", list(runs), failed=list(failed))
            if failed and not runs:
                raise HostError(f"every request failed; the first: {failed[0]}")
        after = check_held(server, loaded)
        progress.verified("after", after)
        if not after.ok:
            return report("discarded", runs, drift=after)
    baseline = loaded.profile.baseline
    measured = report("measured", runs, failed=failed)
    if baseline is None or measured.mean_tok_s is None or failed:
        return measured  # a figure without its failed requests is not the baseline's
    fewest = min(run.tokens for run in runs)
    verdict = judge(baseline, measured.mean_tok_s, method, fewest, measured.prefill_tok_s)
    return measured.model_copy(update={"baseline": verdict})
