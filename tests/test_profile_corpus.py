"""A corpus of invalid profiles: each must exit 2 with one line naming its file, key and fix.

Every file in tests/corpus/invalid starts with `# key: KEY` (empty when the problem is the
file as a whole) and `# expect: FRAGMENT`; `# reported-in: PATH` names the file the line
starts with when that is not the case itself (a parent it extends). One `validate` reads
them all, as a profiles repository's CI would; each file is then checked on its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Isolation, RunCli, WriteProfile, console_script

CORPUS = Path(__file__).resolve().parent / "corpus"
INVALID = sorted((CORPUS / "invalid").glob("*.toml"))
REPO_PROFILES = sorted((Path(__file__).parent.parent / "profiles").glob("*.toml"))


@dataclass(frozen=True)
class Case:
    """One corpus file and what its line must say."""

    path: Path
    key: str
    fragment: str
    reported_in: Path


def case(path: Path) -> Case:
    header = path.read_text(encoding="utf-8")
    key = re.search(r"^# key:(.*)$", header, re.MULTILINE)
    expect = re.search(r"^# expect: (.*)$", header, re.MULTILINE)
    assert key and expect, f"{path} lacks its '# key:' and '# expect:' lines"
    reported = re.search(r"^# reported-in: (.*)$", header, re.MULTILINE)
    reported_in = (path.parent / reported.group(1)).resolve() if reported else path
    return Case(path, key.group(1).strip(), expect.group(1), reported_in)


CASES = [case(path) for path in INVALID]


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """`validate` over the whole corpus, once. It outlives each test's isolation, so it runs
    in an isolated environment of its own."""
    root = tmp_path_factory.mktemp("validate")
    return subprocess.run(
        [console_script(), "validate", *map(str, INVALID)],
        capture_output=True,
        text=True,
        env=Isolation(root).environ(os.environ),
        cwd=root,
        timeout=120,
        check=False,
    )


def test_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 30


def test_validate_refuses_every_file_of_the_corpus(
    validated: subprocess.CompletedProcess[str],
) -> None:
    assert validated.returncode == 2, validated.stderr
    assert validated.stdout == f"0 valid, {len(INVALID)} invalid\n"
    assert "Traceback" not in validated.stderr
    lines = validated.stderr.splitlines()
    assert [line for line in lines if not line.startswith(f"{CORPUS}/")] == []


@pytest.mark.parametrize("case", CASES, ids=[case.path.stem for case in CASES])
def test_invalid_profile_names_file_and_key(
    case: Case, validated: subprocess.CompletedProcess[str]
) -> None:
    named = [
        line for line in validated.stderr.splitlines() if line.startswith(f"{case.reported_in}: ")
    ]
    line = next((line for line in named if case.fragment in line), None)
    assert line is not None, f"no line with {case.fragment!r}: {named}"
    if case.key:
        assert line.startswith(f"{case.reported_in}: {case.key}: ")
    else:  # the file as a whole: the problem follows its name
        assert line.startswith(f"{case.path}: {case.fragment}")


def test_validate_json_gives_each_problem_as_a_finding_with_its_file_and_key(
    run_cli: RunCli,
) -> None:
    """The same corpus through `validate --format json`: each file invalid, with a finding in
    the file its line names, at its key, whose parts make up what the line says."""

    def line(finding: dict[str, str]) -> str:
        parts = (finding["file"], finding["location"], finding["message"])
        return ": ".join(part for part in parts if part) + (
            f"; {finding['fix']}" if finding["fix"] else ""
        )

    result = run_cli("validate", "--format", "json", *map(str, INVALID), *map(str, REPO_PROFILES))
    assert (result.returncode, result.stderr) == (2, "")
    report = json.loads(result.stdout)
    assert report["invalid"] == len(INVALID)
    files = {entry["path"]: entry for entry in report["files"]}
    for case in CASES:
        entry = files[str(case.path)]
        assert (entry["valid"], entry["profile"], entry["digest"]) == (False, None, None)
        assert entry["findings"], case.path
        said = [finding for finding in entry["findings"] if case.fragment in line(finding)]
        assert said, (case.path, entry["findings"])
        assert {finding["severity"] for finding in said} == {"error"}
        if case.key:
            assert [f["file"] for f in said if f["location"] == case.key] == [
                str(case.reported_in)
            ], (case.path, said)
    shipped = [files[str(path)] for path in REPO_PROFILES]
    assert all(entry["valid"] and entry["profile"] for entry in shipped)
    assert [f for entry in shipped for f in entry["findings"] if f["severity"] == "error"] == []


def test_one_invalid_file_prints_nothing_on_stdout(run_cli: RunCli) -> None:
    result = run_cli("validate", str(INVALID[0]))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"{INVALID[0]}: ")


def test_validate_reports_every_file_and_every_problem(run_cli: RunCli) -> None:
    bad = [CORPUS / "invalid" / "nthreads-too-large.toml", CORPUS / "invalid" / "not-toml.toml"]
    result = run_cli("validate", *map(str, bad), *map(str, REPO_PROFILES))
    assert result.returncode == 2
    assert "from 64 to 512" in result.stderr
    assert "not valid TOML" in result.stderr
    assert f"{len(REPO_PROFILES)} valid, 2 invalid" in result.stdout


def test_all_problems_of_one_file_are_listed(write_profile: WriteProfile, run_cli: RunCli) -> None:
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
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{path}: nccl.") for line in lines)


def test_the_readmes_first_commands_print_no_warning(run_cli: RunCli) -> None:
    """The shipped Kimi profile answers its own deprecation note in `[policy] accept`: the
    README's first commands (validate the shipped profiles, dry-run Kimi) are clean."""
    result = run_cli("validate", *map(str, REPO_PROFILES))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok (") == len(REPO_PROFILES)
    assert result.stderr == ""
    [kimi] = [path for path in REPO_PROFILES if path.stem == "kimi-k25-rtx6000bw-tp8-eagle3"]
    dry_run = run_cli("run", "--dry-run", str(kimi))
    assert dry_run.returncode == 0
    assert dry_run.stderr == ""


# What a validator refuses is said by its own code (docs/findings.md), read from the refusal
# as data: a rule's kind of problem, not one code for every value refused.
CODES = {
    "algo-second-entry-without-function": ("missing-prefix", "nccl.ALGO"),
    "algo-unknown-name": ("unknown-choice", "nccl.ALGO"),
    "bool-as-word": ("not-a-boolean", "nccl.SHM_DISABLE"),
    "buffsize-decimal-megabytes": ("ambiguous-unit", "nccl.BUFFSIZE"),
    "buffsize-float": ("not-an-integer", "nccl.BUFFSIZE"),
    "buffsize-overflows-int": ("out-of-range", "nccl.BUFFSIZE"),
    "env-bad-variable-name": ("variable-name", "env.MY-VAR"),
    "env-boolean-value": ("wrong-type", "env.HF_HUB_OFFLINE"),
    "env-holds-nccl-variable": ("nccl-in-env", "env.NCCL_PROTO"),
    "env-launcher-variable": ("own-variable", "env.SPT_NOENV"),
    "name-with-space": ("profile-name", "name"),
    "nccl-name-with-prefix": ("prefixed-name", "nccl.NCCL_PROTO"),
    "nul-in-speculative-setting": ("nul-byte", "server.speculative"),
    "policy-server-owned-typo": ("unknown-variable", "policy.server_owned"),
    "proto-with-space": ("whitespace", "nccl.PROTO"),
    "schema-from-the-future": ("unknown-schema", "schema"),
    "secret-files-nccl-setting": ("nccl-secret", "secret_files"),
    "server-entrypoint-unbalanced-quote": ("shell-words", "server.entrypoint"),
    "server-port-out-of-range": ("out-of-range", "server.port"),
    "server-python-empty": ("empty-value", "server.python"),
    "server-tp-size-string": ("wrong-type", "server.tp_size"),
    "speculative-setting-not-scalar": ("not-a-single-value", "server.speculative"),
}


def test_validate_json_names_each_refusal_by_its_code(run_cli: RunCli) -> None:
    paths = [CORPUS / "invalid" / f"{stem}.toml" for stem in CODES]
    result = run_cli("validate", "--format", "json", *map(str, paths))
    assert (result.returncode, result.stderr) == (2, "")
    found = {
        Path(entry["path"]).stem: [(f["code"], f["location"]) for f in entry["findings"]]
        for entry in json.loads(result.stdout)["files"]
    }
    assert found == {stem: [said] for stem, said in CODES.items()}


def test_validate_json_says_a_profile_not_read_by_its_code(run_cli: RunCli, tmp_path: Path) -> None:
    """A file not found or not read is a finding of its own code, in the file given, where
    the text says it."""
    missing = tmp_path / "missing.toml"
    result = run_cli("validate", "--format", "json", str(missing), "nosuchname", os.devnull)
    assert (result.returncode, result.stderr) == (2, "")
    found = [
        (f["code"], f["file"], f["location"], f["message"], f["fix"])
        for entry in json.loads(result.stdout)["files"]
        for f in entry["findings"]
    ]
    assert found[0] == (
        "no-profile-file",
        str(missing),
        "",
        f"profile file not found: {missing}",
        "",
    )
    assert found[1][:4] == ("no-profile", "nosuchname", "", "profile 'nosuchname' not found")
    assert found[2] == (
        "not-regular",
        os.devnull,
        f"profile {os.devnull}",
        "a character device",
        "only regular files are read",
    )
    text = run_cli("validate", os.devnull)
    assert (
        text.stderr
        == f"nccl-launch: profile {os.devnull}: a character device; only regular files are read\n"
    )
