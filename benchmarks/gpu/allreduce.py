"""The workload of benchmarks/gpu/proof.py: torch.distributed all-reduces on the NCCL backend.

Run directly (one rank) or under torchrun (which sets RANK, WORLD_SIZE, MASTER_ADDR, ...).
Every rank runs on the first visible GPU, so two ranks share one GPU: NCCL refuses two ranks
of one host on one GPU, so `--hostid` gives each rank its own NCCL_HOSTID and NCCL joins them
over its socket transport (NCCL_SOCKET_IFNAME=lo, from the profile).

Prints, per rank, `rank R: all-reduce started` before the first collective and `allreduce ok
world=W rank=R nccl=X.Y.Z` after the last; rank 0 prints `allreduce bytes=N us=T` per size
(the mean of --iters bf16 all-reduces after --warmup).
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path

HOLD_LIMIT = 600.0  # seconds a --hold waits for its file at most


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1048576", help="bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--hostid", action="store_true", help="NCCL_HOSTID=proof-host-RANK")
    parser.add_argument("--late", metavar="NAME=VALUE", help="set inside the rank, before NCCL")
    parser.add_argument("--late-rank", type=int, default=0, help="the rank that sets --late")
    parser.add_argument("--hold", type=Path, help="after the work, wait until this file exists")
    args = parser.parse_args()

    # One rank started directly: the rendezvous torchrun would have given it.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.hostid:
        os.environ["NCCL_HOSTID"] = f"proof-host-{rank}"
    if args.late and rank == args.late_rank:
        name, _, value = args.late.partition("=")
        os.environ[name] = value  # what a wrapper's late export does: /proc keeps the old value

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    print(f"rank {rank}: all-reduce started", flush=True)
    check = torch.ones(1024, dtype=torch.float32, device="cuda")
    dist.all_reduce(check)
    torch.cuda.synchronize()
    if int(check[0].item()) != world:
        raise SystemExit(f"rank {rank}: all-reduce summed to {check[0].item()}, not {world}")
    for size in (int(s) for s in args.sizes.split(",")):
        data = torch.zeros(size // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(args.warmup):
            dist.all_reduce(data)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(data)
        torch.cuda.synchronize()
        mean_us = (time.perf_counter() - start) / args.iters * 1e6
        if rank == 0:
            print(f"allreduce bytes={size} us={mean_us:.1f}", flush=True)
    version = ".".join(str(part) for part in torch.cuda.nccl.version())
    print(f"allreduce ok world={world} rank={rank} nccl={version}", flush=True)
    if args.hold is not None:
        deadline = time.monotonic() + HOLD_LIMIT
        while not args.hold.exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the proof runs `check` against this live rank meanwhile
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
