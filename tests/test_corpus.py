"""A corpus of invalid profiles: each must exit 2 with one line naming its file, key and fix.

Every file in tests/corpus/invalid starts with `# key: KEY` and `# expect: FRAGMENT`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import RunCli

CORPUS = Path(__file__).parent / "corpus"
INVALID = sorted((CORPUS / "invalid").glob("*.toml"))
REPO_PROFILES = sorted((Path(__file__).parent.parent / "profiles").glob("*.toml"))


def expectation(path: Path) -> tuple[str, str]:
    header = path.read_text(encoding="utf-8")
    key = re.search(r"^# key: (.*)$", header, re.MULTILINE)
    expect = re.search(r"^# expect: (.*)$", header, re.MULTILINE)
    assert key and expect, f"{path} lacks its '# key:' and '# expect:' lines"
    return key.group(1), expect.group(1)


def test_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 30


@pytest.mark.parametrize("path", INVALID, ids=[path.stem for path in INVALID])
def test_invalid_profile_exits_2_naming_file_and_key(path: Path, nccl_launch: RunCli) -> None:
    key, fragment = expectation(path)
    result = nccl_launch("validate", str(path))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr
    line = next(line for line in result.stderr.splitlines() if fragment in line)
    assert line.startswith(str(path.parent.parent)), line  # names the file
    assert f": {key}" in line if key else True


def test_validate_reports_every_file_and_every_problem(nccl_launch: RunCli) -> None:
    bad = [CORPUS / "invalid" / "nthreads-too-large.toml", CORPUS / "invalid" / "not-toml.toml"]
    result = nccl_launch("validate", *map(str, bad), *map(str, REPO_PROFILES))
    assert result.returncode == 2
    assert "from 64 to 512" in result.stderr
    assert "not valid TOML" in result.stderr
    assert f"{len(REPO_PROFILES)} valid, 2 invalid" in result.stdout


def test_all_problems_of_one_file_are_listed(write_profile, nccl_launch: RunCli) -> None:  # type: ignore[no-untyped-def]
    path = write_profile(
        "many",
        """
        schema = 1
        name = "many"
        version = 1
        [nccl]
        PROTO = "LL, Simple"
        NTHREADS = 500
        PROTOCOL = "LL"
        """,
    )
    result = nccl_launch("validate", str(path))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{path}: nccl.") for line in lines)


def test_shipped_profiles_are_valid(nccl_launch: RunCli) -> None:
    result = nccl_launch("validate", *map(str, REPO_PROFILES))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok (") == len(REPO_PROFILES)
    assert "NCCL_MAX_NCHANNELS is deprecated" in result.stderr  # a warning, not a failure
