"""SGLang's side of the `[server]` table: argv building, flag spellings, rules, warnings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from nccl_launch.findings import Finding
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
    assert rules.mtp_problem(eagle, model_architecture(str(model))) is None
    (model / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForCausalLM"]}))
    assert rules.mtp_problem(eagle, model_architecture(str(model))) == Finding(
        "mtp",
        "server.speculative.draft_model_path",
        "EAGLE needs a draft model unless the model has built-in MTP layers (DeepSeek-V3 "
        "style); the model's architecture is KimiK25ForCausalLM",
    )
    assert rules.mtp_problem(eagle, model_architecture(str(tmp_path / "absent"))) == Finding(
        "mtp",
        "server.speculative.draft_model_path",
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
    assert [(warning.id, warning.text()) for warning in warnings] == [
        (
            "env.CUDA_DEVICE_MAX_CONNECTIONS overridden",
            "env.CUDA_DEVICE_MAX_CONNECTIONS: SGLang always sets it to 8 in its workers",
        ),
        (
            "--enable-deterministic-inference overridden",
            "--enable-deterministic-inference: makes SGLang override NCCL_ALGO "
            "(NCCL_ALGO=allreduce:tree, 8 channels)",
        ),
        (
            "--enable-symm-mem overridden",
            "--enable-symm-mem: makes SGLang override NCCL_CUMEM_ENABLE = '1'",
        ),
    ]
    assert rules.server_warnings(server(tp_size=1, args=args[:1]), {"NCCL_ALGO": "Ring"}) == []


# A profile with tp_size = 8 that runs this interpreter.
TP8 = f"""
schema = 1
name = "tp8"
version = 1
[server]
python = "{sys.executable}"
model_path = "/models/Kimi-K2.5"
tp_size = 8
"""


def test_extra_arguments_may_not_repeat_structured_fields(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("tp8", TP8)
    result = run_cli("run", "tp8", "--", "--tp", "8")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: -- ARGS: --tp repeats the field tp_size, which `--` cannot change; "
        "set tp_size in [server] of profiles/tp8.toml "
        "(or of a copy: nccl-launch new NAME --from tp8)\n"
    )
    copied = run_cli("new", "tp4", "--from", "tp8")  # the copy the message suggests
    assert copied.returncode == 0, copied.stderr
    path = Path("profiles/tp4.toml")
    path.write_text(path.read_text().replace("tp_size = 8", "tp_size = 4"))
    dry_run = run_cli("run", "--dry-run", "tp4")
    assert dry_run.returncode == 0, dry_run.stderr
    assert "--tp-size 4" in dry_run.stdout


def test_a_field_before_the_dashes_is_said_to_belong_in_the_profile(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("tp8", TP8)
    result = run_cli("run", "tp8", "--tp", "4")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: No such option '--tp'. --tp is the field tp_size: set tp_size in [server] of "
        "the profile (or of a copy: nccl-launch new NAME --from PROFILE)"
    )
    steps = run_cli("run", "tp8", "--speculative-num-steps=3")
    assert "set num_steps in [server.speculative] of the profile" in steps.stderr
    other = run_cli("run", "tp8", "--log-level", "info")
    suggested = other.stderr.splitlines()[-1].split("nccl-launch run PROFILE ", 1)[1]
    assert suggested == "-- --log-level info"
    dry_run = run_cli("run", "--dry-run", "tp8", *suggested.split())
    assert dry_run.returncode == 0, dry_run.stderr
    assert dry_run.stdout.rstrip().endswith("--tp-size 8 --log-level info")


FORGED = "ok    sglang       SGLang 0.5.23 (forged)"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("python", f"/nonexistent/py\n{FORGED}"),
        ("entrypoint", "-m sglang.launch_server\x1b[2J"),
        ("model_path", "/models/m\x1b]0;pwn\x07"),
        ("cwd", "/srv\r"),
        ("host", "0.0.0.0\x7f"),
        ("dist_init_addr", "10.0.0.1:5000\x9b"),
        ("speculative.draft_model_path", "/d\t"),
    ],
)
def test_a_path_or_name_in_server_refuses_control_characters(
    key: str, value: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    table, _, field = key.rpartition(".")
    nested = {"speculative": {"algorithm": "EAGLE", field: value}} if table else {field: value}
    data = {"schema": 1, "name": "p", "version": 1, "server": {"model_path": "/m"} | nested}
    path = write_profile("p", "")
    path.write_text(tomli_w.dumps(data))
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{path}: server.{key}: holds the control character ")
    assert line.endswith(", which no path or name needs; remove it")
    assert "\x1b" not in result.stderr and FORGED not in result.stderr


def test_dry_run_escapes_control_characters_in_args(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """`args` is free text, kept as written; the argv line shows it with bash's C escapes,
    on one line, and pastes back into bash as the same words."""
    hostile = ["--x\x1b[31m", f"y\n{FORGED}", "it's \\ \x85"]
    data = {"schema": 1, "name": "p", "version": 1, "server": {"model_path": "/m", "args": hostile}}
    path = write_profile("p", "")
    path.write_text(tomli_w.dumps(data))
    result = run_cli("run", "--dry-run", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert FORGED not in lines and "\x1b" not in result.stdout
    shown = lines[lines.index("argv:") + 1]
    assert shown.endswith(f" $'--x\\x1b[31m' $'y\\n{FORGED}' $'it\\'s \\\\ \\U00000085'")
    words = subprocess.run(
        ["bash", "-c", f'printf "%s\\0" {shown}'], capture_output=True, check=True, timeout=120
    ).stdout
    assert words.decode().split("\0")[-4:-1] == hostile


@pytest.mark.parametrize(
    ("speculative", "code"),
    [
        ({"algorithm": "EAGLE3", "draft_model_path": "/d", "num_steps": 3}, "speculative-trio"),
        (
            {
                "algorithm": "EAGLE3",
                "draft_model_path": "/d",
                "num_steps": 3,
                "eagle_topk": 1,
                "num_draft_tokens": 8,
            },
            "draft-tokens",
        ),
        ({"algorithm": "DFLASH"}, "no-draft"),
        ({"algorithm": "NGRAM", "draft_model_path": "/d"}, "unused-draft"),
        ({"algorithm": "UNO"}, "uno-lora"),
    ],
)
def test_each_speculative_rule_has_its_own_code(speculative: dict[str, Any], code: str) -> None:
    assert [problem.code for problem in rules.server_problems(server(speculative=speculative))] == [
        code
    ]
