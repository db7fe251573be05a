"""benchmarks/gpu/proof.py, the proof on a real GPU (docs/proof.md): without a GPU it says so in
one line, exits 0 and writes nothing; its readings of NCCL's output hold on the logs NCCL
2.28.9 wrote on an H200 (tests/logs/nccl-2.28.9-*.log).

A GPU cannot exist here: where a test needs nvidia-smi or torch present, a stand-in plays the
one that answers (a driver that lists a GPU, a torch without CUDA); the script then stops at
the missing part, before it runs anything.
"""

from __future__ import annotations

import importlib.util
import py_compile
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import documented

REPO = Path(__file__).parent.parent
PROOF = REPO / "benchmarks" / "gpu" / "proof.py"
WORKLOAD = REPO / "benchmarks" / "gpu" / "allreduce.py"
LOGS = Path(__file__).parent / "logs"
SMI_LISTS_A_GPU = "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n"
SMI_WITHOUT_DRIVER = (
    "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"
    ' driver."\nexit 9\n'
)
TORCH_MISSING = "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
TORCH_WITHOUT_CUDA = "class cuda:\n    is_available = staticmethod(lambda: False)\n"
# NCCL 2.28.9's WARN as it printed it on the H200 (an init that fails on NCCL_PROTO="LL ").
WARN = (
    "[2026-12-04 18:03:05] vm:1450:1450 [0] graph/tuning.cc:104 NCCL WARN Unrecognized element"
    ' token "LL " when parsing "LL "'
)


@pytest.fixture(scope="module")
def proof() -> Iterator[ModuleType]:
    """benchmarks/gpu/proof.py as a module (it is a script, in no package)."""
    spec = importlib.util.spec_from_file_location("gpu_proof", PROOF)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.mark.parametrize(
    ("smi", "torch", "why"),
    [
        (None, None, "no nvidia-smi on PATH"),
        (SMI_WITHOUT_DRIVER, None, "nvidia-smi -L lists no GPU (exit 9: NVIDIA-SMI has failed"),
        (SMI_LISTS_A_GPU, TORCH_MISSING, f"no torch in {sys.executable}"),
        (SMI_LISTS_A_GPU, TORCH_WITHOUT_CUDA, "torch.cuda.is_available() is False"),
    ],
    ids=["no-nvidia-smi", "no-driver", "no-torch", "torch-without-cuda"],
)
def test_without_a_gpu_the_proof_says_so_and_writes_nothing(
    smi: str | None, torch: str | None, why: str, tmp_path: Path
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    if smi is not None:
        (tools / "nvidia-smi").write_text(smi)
        (tools / "nvidia-smi").chmod(0o755)
    site = tmp_path / "site"
    if torch is not None:
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text(torch)
    out = tmp_path / "out"
    env = {"PATH": str(tools), "PYTHONPATH": str(site), "OUT": str(tmp_path / "out-env")}
    result = subprocess.run(
        [sys.executable, str(PROOF), str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"proof: no GPU here ({why}")
    assert lines[0].endswith("; nothing tested")
    assert not out.exists()
    assert not (tmp_path / "out-env").exists()


def test_the_proof_page_shows_what_the_script_prints_without_a_gpu(tmp_path: Path) -> None:
    command = ".venv/bin/python benchmarks/gpu/proof.py /tmp/proof-out"
    expected, code = documented(command, "proof.md")
    out = tmp_path / "proof-out"
    result = subprocess.run(
        [sys.executable, str(PROOF), str(out)],
        env={"PATH": str(tmp_path)},  # no nvidia-smi there
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (result.stdout.splitlines(), result.returncode) == (expected, code)
    assert not out.exists()


def test_the_proof_and_its_workload_compile_and_the_workload_needs_torch_only_to_run(
    tmp_path: Path,
) -> None:
    for path in (PROOF, WORKLOAD):
        py_compile.compile(str(path), cfile=str(tmp_path / f"{path.stem}.pyc"), doraise=True)
    shown = subprocess.run(
        [sys.executable, str(WORKLOAD), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    for option in ("--sizes", "--iters", "--warmup", "--hostid", "--late", "--late-rank", "--hold"):
        assert option in shown


def test_nccls_words_are_read_from_the_real_logs(proof: ModuleType) -> None:
    one = (LOGS / "nccl-2.28.9-one-rank.log").read_text()
    two = (LOGS / "nccl-2.28.9-two-ranks.log").read_text()
    # A one-rank communicator never reads NCCL_PROTO; two ranks each say so once.
    assert proof.nccl_says(one, "NCCL_PROTO") == Counter()
    assert proof.nccl_says(two, "NCCL_PROTO") == Counter({"NCCL_PROTO set by environment to LL": 2})
    assert proof.nccl_says(one, "NCCL_BUFFSIZE") == Counter(
        {"NCCL_BUFFSIZE set by environment to 16777216.": 1}
    )
    # Each rank said it three times (NET/IB, NET/Socket and the bootstrap).
    assert proof.nccl_says(two, "NCCL_SOCKET_IFNAME") == Counter(
        {"NCCL_SOCKET_IFNAME set by environment to lo": 6}
    )
    assert proof.nccl_says(two, "NCCL_HOSTID") == Counter(
        {
            "NCCL_HOSTID set by environment to proof-host-0": 1,
            "NCCL_HOSTID set by environment to proof-host-1": 1,
        }
    )
    assert proof.nccl_says(two, "NCCL_PROTOCOL") == Counter()


def test_nccls_warn_and_invalid_lines_are_read_without_their_prefix(proof: ModuleType) -> None:
    invalid = "vm:1450:1450 [0] NCCL INFO Invalid NCCL_NTHREADS 100 (must be a multiple of 32)"
    said = proof.nccl_says(f"{WARN}\n{invalid}\n", "NCCL_NTHREADS")
    assert said == Counter(
        {
            'WARN Unrecognized element token "LL " when parsing "LL "': 1,
            "Invalid NCCL_NTHREADS 100 (must be a multiple of 32)": 1,
        }
    )
    assert proof.nccl_says(invalid, "NCCL_NTHREAD") == Counter()


def test_the_workloads_times_are_read_from_the_real_log(proof: ModuleType) -> None:
    assert proof.allreduce_times((LOGS / "nccl-2.28.9-two-ranks.log").read_text()) == {
        14336: 4511.7
    }
    assert proof.allreduce_times((LOGS / "nccl-2.28.9-one-rank.log").read_text()) == {}
