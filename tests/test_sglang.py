"""SGLang's side of the `[server]` table: argv building, flag spellings, rules, warnings."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.launch.prepare import model_architecture
from nccl_launch.sglang import argv, facts, rules
from nccl_launch.sglang.server import Server
from tests.conftest import RunCli, WriteProfile


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
    algorithm = rules.mtp_algorithm(eagle)
    assert rules.mtp_problem(algorithm, model_architecture(str(model))) is None
    (model / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForCausalLM"]}))
    assert rules.mtp_problem(algorithm, model_architecture(str(model))) == (
        "speculative.draft_model_path",
        "EAGLE needs a draft model unless the model has built-in MTP layers (DeepSeek-V3 "
        "style); the model's architecture is KimiK25ForCausalLM",
    )
    assert rules.mtp_problem(algorithm, model_architecture(str(tmp_path / "absent"))) == (
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


def test_extra_arguments_may_not_repeat_structured_fields(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile(
        "tp8",
        f"""
        schema = 1
        name = "tp8"
        version = 1
        [server]
        python = "{sys.executable}"
        model_path = "/models/Kimi-K2.5"
        tp_size = 8
        """,
    )
    result = nccl_launch("run", "tp8", "--", "--tp", "8")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: extra argument --tp repeats the field tp_size; set it there\n"
    )
