"""`preflight` against the real SGLang 0.5.23 parser (installed by .ci/sglang-venv in CI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunCli, WriteProfile

REPO_PROFILES = Path(__file__).parent.parent / "profiles"
SHIPPED_SERVERS = [
    path for path in sorted(REPO_PROFILES.glob("*.toml")) if "[server]" in path.read_text()
]


def with_python(write_profile: WriteProfile, shipped: Path, python: str) -> str:
    """The shipped profile, unchanged but for the interpreter: the one with SGLang here."""
    write_profile(
        "under-test",
        f"""
        schema = 1
        name = "under-test"
        version = 1
        extends = "{shipped}"
        [server]
        python = "{python}"
        """,
    )
    return "under-test"


# No GPU, model files or free port 8000 are promised here: those host checks have their own
# tests (test_host.py); these are about SGLang's parser.
SKIP_HOST = ("--skip", "gpus", "--skip", "paths", "--skip", "port")


def preflight_json(nccl_launch: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    result = nccl_launch("preflight", "--format", "json", *SKIP_HOST, *args)
    return result.returncode, json.loads(result.stdout)


def test_there_is_a_shipped_server_profile() -> None:
    assert SHIPPED_SERVERS


@pytest.mark.parametrize("shipped", SHIPPED_SERVERS, ids=[p.stem for p in SHIPPED_SERVERS])
def test_sglang_accepts_the_argv_of_every_shipped_profile(
    shipped: Path, write_profile: WriteProfile, nccl_launch: RunCli, sglang_python: str
) -> None:
    name = with_python(write_profile, shipped, sglang_python)
    code, report = preflight_json(nccl_launch, name)
    assert code == 0, report
    assert report["sglang"]["version"] == "0.5.23"
    parsed = report["sglang"]["parsed"]
    assert parsed["tp_size"] == 8
    assert parsed["speculative_algorithm"] == "EAGLE3"
    assert parsed["speculative_draft_model_path"] == "/models/Kimi-K2.5-EAGLE3"
    assert (parsed["speculative_num_steps"], parsed["speculative_eagle_topk"]) == (2, 1)
    assert parsed["speculative_num_draft_tokens"] == 3
    assert [check["status"] for check in report["checks"] if check["name"] == "argv"] == ["ok"]


def test_a_stale_flag_fails_with_sglangs_own_message(
    write_profile: WriteProfile, nccl_launch: RunCli, sglang_python: str
) -> None:
    name = with_python(write_profile, SHIPPED_SERVERS[0], sglang_python)
    result = nccl_launch("preflight", *SKIP_HOST, name, "--", "--cuda-graph-max-bs", "8")
    assert result.returncode == 3
    assert (
        "fail  argv         SGLang's parser rejects the argv: ambiguous option: "
        "--cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    ) in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == "preflight failed: 1 failed, 1 warning"


def test_a_pass_through_speculative_setting_reaches_sglangs_parser(
    write_profile: WriteProfile, nccl_launch: RunCli, sglang_python: str
) -> None:
    write_profile(
        "ngram",
        f"""
        schema = 1
        name = "ngram"
        version = 1
        [server]
        python = "{sglang_python}"
        model_path = "/models/small"
        [server.speculative]
        algorithm = "NGRAM"
        ngram_capacity = 100000
        typo_setting = 1
        """,
    )
    code, report = preflight_json(nccl_launch, "ngram")
    assert code == 3
    argv_check = next(check for check in report["checks"] if check["name"] == "argv")
    assert argv_check["message"] == (
        "SGLang's parser rejects the argv: unrecognized arguments: --speculative-typo-setting 1"
    )


def test_no_sglang_in_the_server_interpreter_fails_clearly(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    name = with_python(write_profile, SHIPPED_SERVERS[0], sys.executable)
    code, report = preflight_json(nccl_launch, name)
    assert code == 3
    sglang_check = next(check for check in report["checks"] if check["name"] == "sglang")
    assert sglang_check["status"] == "fail"
    assert sglang_check["message"] == (
        f"cannot import SGLang with {sys.executable}: ModuleNotFoundError: No module named 'sglang'"
    )


def test_missing_server_interpreter_fails(write_profile: WriteProfile, nccl_launch: RunCli) -> None:
    name = with_python(write_profile, SHIPPED_SERVERS[0], "/nonexistent/bin/python3")
    result = nccl_launch("preflight", *SKIP_HOST, name)
    assert result.returncode == 3
    assert "fail  sglang       cannot run /nonexistent/bin/python3: [Errno 2]" in result.stdout


def test_drift_fails_preflight_with_exit_1(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile("env-only", 'schema = 1\nname = "env-only"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    result = nccl_launch("preflight", "env-only", env={"NCCL_PROTO": "Simple"})
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[1] == "fail  environment  1 drift (1 changed), 0 match"
    assert lines[2].split()[:5] == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"']
    assert lines[-1] == "preflight failed: 1 failed, 0 warnings"


def test_invalid_profile_is_exit_2_before_any_check(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile("bad", 'schema = 1\nname = "bad"\nversion = 1\n[nccl]\nNTHREADS = 1000\n')
    result = nccl_launch("preflight", "bad")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "nccl.NTHREADS: 1000 is not valid" in result.stderr
