"""The edge of `run`: read env files, merge, refuse on drift, exec the command."""

from __future__ import annotations

import dataclasses
import io
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from dotenv.parser import parse_stream

from nccl_launch import sglang
from nccl_launch.errors import HostError, UsageError
from nccl_launch.loader import LoadedProfile, load_profile
from nccl_launch.merge import EnvLayer, MergeResult, inherited_environment, merge_environment
from nccl_launch.ncclconf import ConfEntry, read_conf
from nccl_launch.plan import LaunchPlan, build_plan
from nccl_launch.profile import MARKER_NCCL_DEBUG, NCCL_DEBUG_ENV, Server
from nccl_launch.render import drift_text


@dataclass(frozen=True)
class Launch:
    """Everything `run` decided: the profile, its plan, the merged env and the final argv."""

    loaded: LoadedProfile
    plan: LaunchPlan
    merged: MergeResult
    argv: list[str]
    conf: list[ConfEntry]
    unreadable_conf: list[str]

    @property
    def cwd(self) -> str | None:
        server = self.loaded.profile.server
        return server.cwd if server is not None else None

    def refusal(self) -> str | None:
        """The diff that stops the launch, or None when nothing drifts."""
        if not self.merged.report.drifted:
            return None
        plan = self.plan
        header = f"refusing to start: environment drifts from {plan.label} ({plan.short_digest})"
        return drift_text(self.merged.report, header)


def read_env_file(path: Path) -> EnvLayer:
    """A dotenv file as a layer; a line python-dotenv cannot parse is an error, not skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"env file {path}: cannot read: {error}") from None
    values = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise UsageError(f"{path}:{line}: not a KEY=VALUE line: {binding.original.string!r}")
        if binding.key is None:
            continue
        if binding.value is None:
            raise UsageError(
                f"{path}:{line}: {binding.key} has no value; write {binding.key}=VALUE"
            )
        values[binding.key] = binding.value
    return EnvLayer(source=f"env file {path}", values=values)


@dataclass(frozen=True)
class Placement:
    """Where this node sits in a multi-node server, as given on the command line."""

    node_rank: int | None = None
    dist_init_addr: str | None = None


def placement_args(server: Server, given: Placement, environ: Mapping[str, str]) -> list[str]:
    """`--node-rank` / `--dist-init-addr` for this node, from flags, then the cluster engine.

    Order for the rank: `--node-rank`, `[server] node_rank`, Slurm's `SLURM_NODEID`, then
    LeaderWorkerSet's `LWS_WORKER_INDEX`. These stay out of the digest: every node runs the same.
    """
    args: list[str] = []
    rank = given.node_rank
    if rank is not None and server.node_rank is not None:
        raise UsageError(f"the profile fixes node_rank = {server.node_rank}; drop --node-rank")
    if rank is None and server.node_rank is None and server.nnodes > 1:
        rank = sglang.node_rank_from(environ)
        if rank is None:
            raise UsageError(
                f"nnodes = {server.nnodes} but no node rank: pass --node-rank, or run under "
                "Slurm (SLURM_NODEID) or a LeaderWorkerSet (LWS_WORKER_INDEX)"
            )
    if rank is not None:
        if rank >= server.nnodes:
            raise UsageError(f"node rank {rank} is not below nnodes = {server.nnodes}")
        args += ["--node-rank", str(rank)]
    if given.dist_init_addr is not None:
        if server.dist_init_addr is not None:
            raise UsageError(f"the profile fixes dist_init_addr = {server.dist_init_addr!r}")
        args += ["--dist-init-addr", given.dist_init_addr]
    elif server.nnodes > 1 and server.dist_init_addr is None:
        raise UsageError(f"nnodes = {server.nnodes} needs --dist-init-addr HOST:PORT")
    return args


def prepare_launch(
    ref: str,
    extra: Sequence[str],
    env_files: Sequence[Path],
    calling: Mapping[str, str],
    placement: Placement = Placement(),
    nccl_debug: bool = False,
) -> Launch:
    """Resolve the profile, build the argv and merge the env; drift is in `merged.report`."""
    loaded = load_profile(ref)
    plan = build_plan(loaded.profile)
    server = loaded.profile.server
    if server is not None:
        repeated = sglang.duplicated_flags(list(extra), server)
        if repeated:
            raise UsageError(f"extra argument {repeated[0]}")
        argv = plan.argv + placement_args(server, placement, calling) + list(extra)
    elif placement != Placement():
        raise UsageError(f"profile {plan.label} has no [server] table to place on a node")
    else:
        argv = list(extra)  # empty when there is nothing to run: `run` refuses, `preflight` not
    layers = [read_env_file(path) for path in env_files]
    origins = {key: str(path) for key, path in loaded.origins.items()}
    inherited, _ = inherited_environment(calling, layers)
    # Enough of the child's env to know which nccl.conf files NCCL will read.
    conf, unreadable = read_conf(inherited | plan.env)
    policy = loaded.profile.policy
    merged = merge_environment(calling, layers, plan, policy, origins, conf)
    if nccl_debug:
        merged = _with_nccl_debug(merged, plan)
    return Launch(
        loaded=loaded, plan=plan, merged=merged, argv=argv, conf=conf, unreadable_conf=unreadable
    )


def _with_nccl_debug(merged: MergeResult, plan: LaunchPlan) -> MergeResult:
    """NCCL_DEBUG=INFO with the ENV subsystem, marked so that `check` tolerates it."""
    declared = [key for key in NCCL_DEBUG_ENV if key in plan.env]
    if declared:
        raise UsageError(f"the profile declares {declared[0]}; drop it or --nccl-debug")
    extra = NCCL_DEBUG_ENV | {MARKER_NCCL_DEBUG: "1"}
    sources = merged.sources | dict.fromkeys(extra, "--nccl-debug")
    return dataclasses.replace(merged, env=merged.env | extra, sources=sources)


def exec_command(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> NoReturn:
    """Replace this process with the command: same PID, its signals and exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as error:
            raise HostError(f"cannot change to the server's cwd {cwd}: {error.strerror}") from None
    try:
        os.execvpe(argv[0], list(argv), dict(env))
    except OSError as error:
        raise HostError(f"cannot execute {argv[0]}: {error.strerror}") from None
