"""Multi-node placement: the node rank and head address from flags, the profile, Slurm or LWS."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.launch.placement import Placement, placement_args
from nccl_launch.sglang.server import Server
from tests.conftest import RunCli, WriteProfile
from tests.helpers import STANDIN, read_record


def server(**fields: Any) -> Server:
    return Server.model_validate({"model_path": "/models/m", **fields})


MULTI = {"tp_size": 16, "nnodes": 2, "dist_init_addr": "10.0.0.1:5000"}


@pytest.mark.parametrize(
    ("fields", "given", "environ", "expected"),
    [
        ({}, Placement(), {}, []),
        (MULTI, Placement(node_rank=1), {"SLURM_NODEID": "0"}, ["--node-rank", "1"]),
        (MULTI, Placement(), {"SLURM_NODEID": "1", "LWS_WORKER_INDEX": "0"}, ["--node-rank", "1"]),
        (MULTI, Placement(), {"LWS_WORKER_INDEX": "1"}, ["--node-rank", "1"]),
        ({**MULTI, "node_rank": 0}, Placement(), {"SLURM_NODEID": "1"}, []),
        (
            {"tp_size": 16, "nnodes": 2},
            Placement(dist_init_addr="h:1"),
            {"SLURM_NODEID": "0"},
            ["--node-rank", "0", "--dist-init-addr", "h:1"],
        ),
    ],
)
def test_node_rank_order_flag_profile_slurm_lws(
    fields: dict[str, Any], given: Placement, environ: dict[str, str], expected: list[str]
) -> None:
    assert placement_args(server(**fields), given, environ) == (expected, [])


@pytest.mark.parametrize(
    ("fields", "given", "environ", "message"),
    [
        (MULTI, Placement(), {}, "nnodes = 2 but no node rank: pass --node-rank"),
        (MULTI, Placement(node_rank=2), {}, "node rank 2 is not below nnodes = 2"),
        (MULTI, Placement(), {"SLURM_NODEID": "5"}, "node rank 5 is not below nnodes = 2"),
        (MULTI, Placement(), {"SLURM_NODEID": "٣"}, "nnodes = 2 but no node rank"),  # not 3
        ({**MULTI, "node_rank": 1}, Placement(node_rank=0), {}, "fixes node_rank = 1"),
        (MULTI, Placement(0, "other:1"), {}, "fixes dist_init_addr = '10.0.0.1:5000'"),
        ({"tp_size": 16, "nnodes": 2}, Placement(node_rank=0), {}, "needs --dist-init-addr"),
    ],
)
def test_placement_errors(
    fields: dict[str, Any], given: Placement, environ: dict[str, str], message: str
) -> None:
    [found] = placement_args(server(**fields), given, environ)[1]
    assert message in found.text()


def multi_node_profile(write_profile: WriteProfile) -> None:
    write_profile(
        "two-nodes",
        f"""
        schema = 1
        name = "two-nodes"
        version = 1
        [nccl]
        PROTO = "LL"
        [server]
        python = "{sys.executable}"
        model_path = "/models/Kimi-K2.5"
        tp_size = 16
        nnodes = 2
        cwd = "/"
        """,
    )


def test_slurm_ranks_reach_the_server_and_every_node_runs_one_digest(
    write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path
) -> None:
    multi_node_profile(write_profile)
    records = []
    for node in ("0", "1"):
        out = tmp_path / f"node{node}.json"
        env = {"PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out), "SLURM_NODEID": node,
               "SLURM_JOB_ID": "42"}  # fmt: skip
        result = nccl_launch("run", "--dist-init-addr", "10.0.0.1:5000", "two-nodes", env=env)
        assert result.returncode == 0, result.stderr
        records.append(read_record(out))
    for rank, record in enumerate(records):
        argv = record["argv"]
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:5000"
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert record["cwd"] == "/"
    assert records[0]["env"]["NCCL_LAUNCH_DIGEST"] == records[1]["env"]["NCCL_LAUNCH_DIGEST"]


def test_multi_node_without_a_rank_is_refused(write_profile: WriteProfile, run_cli: RunCli) -> None:
    multi_node_profile(write_profile)
    result = run_cli("run", "--dist-init-addr", "10.0.0.1:5000", "two-nodes")
    assert result.returncode == 2
    assert "nnodes = 2 but no node rank" in result.stderr


def test_every_placement_error_is_said_at_once(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """No rank from anywhere and no address either: both said, one start fixes both."""
    multi_node_profile(write_profile)
    result = run_cli("run", "--dry-run", "two-nodes")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "nccl-launch: nnodes = 2 but no node rank: pass --node-rank, or run under Slurm "
        "(SLURM_NODEID) or a LeaderWorkerSet (LWS_WORKER_INDEX)",
        "nccl-launch: nnodes = 2 needs --dist-init-addr HOST:PORT",
    ]
