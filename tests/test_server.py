"""The `[server]` table: argv building, SGLang's rules, warnings and multi-node placement."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.errors import UsageError
from nccl_launch.launch.host import model_architecture
from nccl_launch.launch.placement import Placement, placement_args
from nccl_launch.sglang import argv, facts, rules
from nccl_launch.sglang.server import Server
from tests.conftest import RunCli, WriteProfile
from tests.helpers import STANDIN, read_record


def server(**fields: Any) -> Server:
    return Server.model_validate({"model_path": "/models/m", **fields})


def test_argv_spells_every_flag_canonically_in_a_stable_order() -> None:
    built = server(
        python="/venv/bin/python",
        tp_size=8,
        pp_size=2,
        host="10.1.2.3",
        port=8000,
        nnodes=2,
        dist_init_addr="10.0.0.1:5000",
        args=["--disable-custom-all-reduce"],
        speculative={
            "algorithm": "eagle3",
            "draft_model_path": "/models/d",
            "num_steps": 2,
            "eagle_topk": 1,
            "num_draft_tokens": 3,
            "accept_threshold_single": 1.0,
            "use_rejection_sampling": True,
            "adaptive": False,
        },
    )
    assert argv.server_argv(built) == [
        *("/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/m"),
        *("--tp-size", "8", "--pp-size", "2", "--host", "10.1.2.3", "--port", "8000"),
        *("--nnodes", "2", "--dist-init-addr", "10.0.0.1:5000"),
        *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d"),
        *("--speculative-num-steps", "2", "--speculative-eagle-topk", "1"),
        *("--speculative-num-draft-tokens", "3"),
        *("--speculative-accept-threshold-single", "1.0", "--speculative-use-rejection-sampling"),
        "--disable-custom-all-reduce",
    ]


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ("--tp-size", "tp_size"),
        ("--tp", "tp_size"),
        ("--tensor-parallel-size", "tp_size"),
        ("--model", "model_path"),
        ("--model-path=/x", "model_path"),
        ("--nccl-init-addr", "dist_init_addr"),
        ("--speculative-draft-model", "speculative.draft_model_path"),
        ("--speculative-eagle", "speculative.eagle_topk"),
        ("--speculative-num", None),  # ambiguous: argparse would refuse it too
        ("--speculative-draft-model-revision", None),
        ("--disable-custom-all-reduce", None),
    ],
)
def test_options_resolve_like_argparse_prefixes(option: str, field: str | None) -> None:
    flag = facts.flag_for(option)
    assert (flag.field if flag else None) == field


def test_eagle_without_draft_is_fine_for_a_model_with_builtin_mtp(tmp_path: Path) -> None:
    model = tmp_path / "DeepSeek-V3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]}))
    spec = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    eagle = server(model_path=str(model), speculative=spec)
    assert rules.server_problems(eagle) == []  # the profile alone is valid either way
    assert rules.mtp_problem(eagle, model_architecture(str(model))) is None
    (model / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForCausalLM"]}))
    assert rules.mtp_problem(eagle, model_architecture(str(model))) == (
        "speculative.draft_model_path",
        "EAGLE needs a draft model unless the model has built-in MTP layers (DeepSeek-V3 "
        "style); the model's architecture is KimiK25ForCausalLM",
    )
    assert rules.mtp_problem(eagle, model_architecture(str(tmp_path / "absent"))) == (
        "speculative.draft_model_path",
        "EAGLE needs a draft model unless the model has built-in MTP layers (DeepSeek-V3 "
        "style); the model's architecture is unknown (no readable config.json)",
    )


def test_all_three_omitted_lets_sglang_choose() -> None:
    spec = {"algorithm": "EAGLE3", "draft_model_path": "/d"}
    assert rules.server_problems(server(speculative=spec)) == []


def test_topk_above_one_allows_any_draft_token_count() -> None:
    spec = {"algorithm": "EAGLE3", "draft_model_path": "/d", "num_steps": 3, "eagle_topk": 4,
            "num_draft_tokens": 8}  # fmt: skip
    assert rules.server_problems(server(speculative=spec)) == []


def test_warnings_where_sglang_will_not_honour_the_profile() -> None:
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Ring", "NCCL_CUMEM_ENABLE": "1"}
    args = ["--enable-deterministic-inference", "--enable-symm-mem"]
    warnings = rules.server_warnings(server(tp_size=8, args=args), env)
    assert warnings == [
        "env.CUDA_DEVICE_MAX_CONNECTIONS: SGLang always sets it to 8 in its workers",
        "--enable-deterministic-inference makes SGLang override NCCL_ALGO "
        "(NCCL_ALGO=allreduce:tree, 8 channels)",
        "--enable-symm-mem makes SGLang override NCCL_CUMEM_ENABLE = '1'",
    ]
    assert rules.server_warnings(server(tp_size=1, args=args[:1]), {"NCCL_ALGO": "Ring"}) == []


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
    assert placement_args(server(**fields), given, environ) == expected


@pytest.mark.parametrize(
    ("fields", "given", "environ", "message"),
    [
        (MULTI, Placement(), {}, "nnodes = 2 but no node rank: pass --node-rank"),
        (MULTI, Placement(node_rank=2), {}, "node rank 2 is not below nnodes = 2"),
        (MULTI, Placement(), {"SLURM_NODEID": "5"}, "node rank 5 is not below nnodes = 2"),
        ({**MULTI, "node_rank": 1}, Placement(node_rank=0), {}, "fixes node_rank = 1"),
        (MULTI, Placement(0, "other:1"), {}, "fixes dist_init_addr = '10.0.0.1:5000'"),
        ({"tp_size": 16, "nnodes": 2}, Placement(node_rank=0), {}, "needs --dist-init-addr"),
    ],
)
def test_placement_errors(
    fields: dict[str, Any], given: Placement, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        placement_args(server(**fields), given, environ)


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
        cwd = "/tmp"
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
        assert record["cwd"] == "/tmp"
    assert records[0]["env"]["NCCL_LAUNCH_DIGEST"] == records[1]["env"]["NCCL_LAUNCH_DIGEST"]


def test_multi_node_without_a_rank_is_refused(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    multi_node_profile(write_profile)
    result = nccl_launch("run", "--dist-init-addr", "10.0.0.1:5000", "two-nodes")
    assert result.returncode == 2
    assert "nnodes = 2 but no node rank" in result.stderr


def test_extra_arguments_may_not_repeat_structured_fields(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    multi_node_profile(write_profile)
    result = nccl_launch("run", "--node-rank", "0", "two-nodes", "--", "--tp", "8")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: extra argument --tp repeats the field tp_size; set it there\n"
    )
