"""Where this node sits in a multi-node server: flags first, then Slurm or a LeaderWorkerSet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nccl_launch.digits import is_ascii_digits
from nccl_launch.findings import Finding
from nccl_launch.kinds import kind_of
from nccl_launch.serving.table import ServerTable as Server


@dataclass(frozen=True)
class Placement:
    """Where this node sits in a multi-node server, as given on the command line."""

    node_rank: int | None = None
    dist_init_addr: str | None = None


def placement_args(
    server: Server, given: Placement, environ: Mapping[str, str]
) -> tuple[list[str], list[Finding]]:
    """This node's rank and the first node's address as its server kind takes them (SGLang's
    `--node-rank` and `--dist-init-addr`), from flags, then the cluster engine; and what
    stops them (a flag the profile fixes, a rank out of range, none at all).

    Order for the rank: `--node-rank`, `[server] node_rank`, Slurm's `SLURM_NODEID`, then
    LeaderWorkerSet's `LWS_WORKER_INDEX`. These stay out of the digest: every node runs the same.
    """
    kind = kind_of(server)
    args: list[str] = []
    found: list[str] = []
    rank = given.node_rank
    if rank is not None and server.node_rank is not None:
        found.append(f"the profile fixes node_rank = {server.node_rank}; drop --node-rank")
    elif rank is None and server.node_rank is None and server.nnodes > 1:
        rank = node_rank_from(environ)
        if rank is None:
            found.append(
                f"nnodes = {server.nnodes} but no node rank: pass --node-rank, or run under "
                "Slurm (SLURM_NODEID) or a LeaderWorkerSet (LWS_WORKER_INDEX)"
            )
    if rank is not None and server.node_rank is None:
        if rank >= server.nnodes:
            found.append(f"node rank {rank} is not below nnodes = {server.nnodes}")
        args += [kind.command.node_rank_flag, str(rank)]
    if given.dist_init_addr is not None:
        if server.dist_init_addr is not None:
            found.append(f"the profile fixes dist_init_addr = {server.dist_init_addr!r}")
        try:
            args += kind.command.address_args(given.dist_init_addr)
        except ValueError as error:
            found.append(f"--dist-init-addr: {error}")
    elif server.nnodes > 1 and server.dist_init_addr is None:
        found.append(f"nnodes = {server.nnodes} needs --dist-init-addr HOST:PORT")
    return args, [Finding("placement", "", message) for message in found]


def node_rank_from(environ: Mapping[str, str]) -> int | None:
    """The node rank a cluster engine gives this process: Slurm, then Kubernetes LWS."""
    for variable in ("SLURM_NODEID", "LWS_WORKER_INDEX"):
        value = environ.get(variable, "")
        if is_ascii_digits(value):
            return int(value)
    return None
