"""Masking asks each server kind of the registry for its credential flags: a kind's own
reading of its options, its flags only named like a credential, its list of keys."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from nccl_launch.secrets import masking
from nccl_launch.secrets.masking import MASK, mask_argv, mask_credentials
from nccl_launch.serving.base import Credentials


@pytest.fixture
def vault_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind of its own beside the registry's: `--vault` (or a prefix down to `--vau`) holds
    its keys, several after one flag; `--pass-through-key` is only named like a credential."""
    vault = SimpleNamespace(  # what masking asks of a kind: its credentials
        credentials=Credentials(
            api_key_flag="--vault",
            flags=("--vault",),
            several_keys=True,
            named_like=("--pass-through-key",),
            api_key_option=lambda option: len(option) >= 5 and "--vault".startswith(option),
            credential_option=lambda option: len(option) >= 5 and "--vault".startswith(option),
        )
    )
    kinds = list(masking._kinds())
    monkeypatch.setattr(masking, "_kinds", lambda: [*kinds, vault])


def test_a_flag_no_registered_kind_reads_as_a_credential_is_shown() -> None:
    assert mask_argv(["--vau", "v1", "v2", "--tp", "8"]) == ["--vau", "v1", "v2", "--tp", "8"]


@pytest.mark.usefixtures("vault_kind")
def test_a_registered_kinds_credential_flags_are_masked_with_every_key() -> None:
    assert mask_argv(["--vau", "v1", "v2", "--tp", "8"]) == ["--vau", MASK, MASK, "--tp", "8"]
    assert mask_argv(["--vault=v1", "v2"]) == [f"--vault={MASK}", "v2"]


@pytest.mark.usefixtures("vault_kind")
def test_a_registered_kinds_flag_named_like_a_credential_is_shown() -> None:
    assert mask_argv(["--pass-through-key", "k"]) == ["--pass-through-key", "k"]
    assert mask_credentials("pass_through_key=k") == "pass_through_key=k"


def test_masking_reads_no_kinds_folder() -> None:
    """Every kind's facts reach masking through the registry, never by name."""
    source = Path(masking.__file__).read_text(encoding="utf-8")
    modules = {
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
    }
    assert not {
        name for name in modules if name.startswith(("nccl_launch.sglang", "nccl_launch.vllm"))
    }
