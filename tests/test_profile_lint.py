"""Warnings worth reading: edit-time notes in `validate` and `preflight`, what `run` repeats on
every start, and `[policy] accept` for the warnings a profile has decided to live with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from nccl_launch.profile.lint import review, run_notes
from nccl_launch.profile.model import Profile
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, free_port, wait_for

KIMI = Path(__file__).parent.parent / "profiles" / "kimi-k25-rtx6000bw-tp8-eagle3.toml"
DEPRECATED = (
    "NCCL_MAX_NCHANNELS: deprecated (Maximum channels/CTAs; deprecated in favor of "
    "NCCL_MAX_CTAS), but NCCL 2.30.7, the catalog's release, still reads it and the value "
    "applies; moving to the "
    "replacement is a tuning change to measure again"
)
ACCEPT_HINT = '[accept: "NCCL_MAX_NCHANNELS deprecated"]'
# No GPU, model files or SGLang are needed for the profile's own lines.
SKIP_HOST = tuple(
    word for name in ("gpus", "python", "paths", "port", "sglang") for word in ("--skip", name)
)


def kimi_accepting(write_profile: WriteProfile, *accept: str) -> str:
    """The shipped Kimi profile, unchanged but for its `[policy] accept` list."""
    write_profile(
        "kimi-accepting",
        f"""
        schema = 1
        name = "kimi-accepting"
        version = 1
        extends = "{KIMI}"
        [policy]
        accept = {json.dumps(list(accept))}
        """,
    )
    return "profiles/kimi-accepting.toml"


def test_validate_names_the_deprecation_its_replacement_and_its_id(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = kimi_accepting(write_profile)
    result = run_cli("validate", path)
    assert result.returncode == 0
    assert result.stderr == f"nccl-launch: warning: {path}: {DEPRECATED} {ACCEPT_HINT}\n"


def test_validate_json_holds_the_same_warning_as_a_finding(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = kimi_accepting(write_profile)
    (found,) = json.loads(run_cli("validate", "--format", "json", path).stdout)["files"][0][
        "findings"
    ]
    said = f"{found['location']}: {found['message']}; {found['fix']}"
    assert (found["code"], found["severity"], found["file"]) == ("deprecated", "note", path)
    assert said == DEPRECATED


def test_preflight_names_the_deprecation_too(write_profile: WriteProfile, run_cli: RunCli) -> None:
    result = run_cli("preflight", *SKIP_HOST, kimi_accepting(write_profile))
    assert result.returncode == 0, result.stdout
    assert f"warn  profile      {DEPRECATED} {ACCEPT_HINT}" in result.stdout.splitlines()


def test_run_of_a_profile_that_has_not_answered_says_nothing_about_deprecation(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    result = run_cli("run", "--dry-run", kimi_accepting(write_profile))
    assert result.returncode == 0
    assert "deprecated" not in result.stderr
    assert "MAX_NCHANNELS" not in result.stderr


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_a_real_start_and_check_of_the_shipped_profile_say_nothing_about_it(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """The shipped Kimi profile, run for real (the stand-in SGLang in its place), then checked:
    the server's log and the check's output are where a note on every start would be read."""
    port = free_port()
    write_profile(
        "kimi-standin",
        f"""
        schema = 1
        name = "kimi-standin"
        version = 1
        extends = "{KIMI}"
        [server]
        python = "{sys.executable}"
        port = {port}
        """,
    )
    env = {**os.environ, "PYTHONPATH": str(STANDIN)}
    argv = [console_script(), "run", "kimi-standin"]
    process = subprocess.Popen(
        argv, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: answers(port), "the stand-in to answer /health", process=process)
        checked = run_cli("check", "kimi-standin", "--port", str(port))
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        _, log = process.communicate(timeout=10)
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines()[-1] == "no drift in 11 processes"
    for said in (log, checked.stdout, checked.stderr):
        assert "deprecated" not in said
        assert "MAX_CTAS" not in said


def test_a_bare_server_python_is_noted_with_an_id_to_accept(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """systemd's PATH is not a login shell's: `python` there may be another interpreter."""
    server = '[server]\npython = "python"\nmodel_path = "/m"\n'
    write_profile("bare", f'schema = 1\nname = "bare"\nversion = 1\n{server}')
    result = run_cli("validate", "bare")
    assert result.returncode == 0
    assert result.stderr == (
        "nccl-launch: warning: profiles/bare.toml: server.python: 'python' is found on the PATH "
        "of whoever starts the server (systemd's is not your shell's); write the interpreter's "
        'absolute path (preflight shows the one it finds) [accept: "server.python bare-name"]\n'
    )
    accepting = '[policy]\naccept = ["server.python bare-name"]\n'
    write_profile("bare", f'schema = 1\nname = "bare"\nversion = 1\n{server}{accepting}')
    assert run_cli("validate", "bare").stderr == ""
    assert run_cli("run", "--dry-run", "bare").stderr == ""  # an edit-time note, not every start


def test_an_accepted_warning_is_listed_as_acknowledged_and_not_warned(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = kimi_accepting(write_profile, "NCCL_MAX_NCHANNELS deprecated")
    validated = run_cli("validate", path)
    assert validated.returncode == 0
    assert validated.stderr == ""
    assert validated.stdout.endswith('; accepts "NCCL_MAX_NCHANNELS deprecated")\n')
    preflight = run_cli("preflight", *SKIP_HOST, path)
    assert not [line for line in preflight.stdout.splitlines() if line.startswith("warn")]
    assert preflight.stdout.splitlines()[-1] == "preflight passed: 0 failed, 0 warnings"
    shown = json.loads(run_cli("show", "--format", "json", path).stdout)
    assert shown["warnings"] == []
    assert shown["resolved"]["policy"]["accept"] == ["NCCL_MAX_NCHANNELS deprecated"]


def test_an_accept_entry_that_matches_no_warning_is_a_warning_with_the_closest_id(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = kimi_accepting(write_profile, "NCCL_MAX_NCHANNEL deprecated")
    result = run_cli("validate", path)
    assert result.returncode == 0  # an upgrade that retires a warning must not break a profile
    assert result.stderr.splitlines() == [
        f"nccl-launch: warning: {path}: {DEPRECATED} {ACCEPT_HINT}",
        f"nccl-launch: warning: {path}: policy.accept: 'NCCL_MAX_NCHANNEL deprecated' matches "
        'no warning of this profile; did you mean "NCCL_MAX_NCHANNELS deprecated"?',
    ]
    both = kimi_accepting(
        write_profile, "NCCL_MAX_NCHANNELS deprecated", "NCCL_MIN_NCHANNELS deprecated"
    )
    assert run_cli("validate", both).stderr == (
        f"nccl-launch: warning: {both}: policy.accept: 'NCCL_MIN_NCHANNELS deprecated' matches "
        "no warning of this profile; drop it\n"
    )
    stale = kimi_accepting(write_profile, "env.HF_TOKEN secret")
    result = run_cli("validate", stale)
    assert (
        f"nccl-launch: warning: {stale}: policy.accept: 'env.HF_TOKEN secret' matches no "
        "warning of this profile; drop it"
    ) in result.stderr.splitlines()


def test_accept_must_be_a_list_of_text(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile(
        "bad", 'schema = 1\nname = "bad"\nversion = 1\n[policy]\naccept = "NCCL_X deprecated"\n'
    )
    result = run_cli("validate", "profiles/bad.toml")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "profiles/bad.toml: policy.accept: Input should be a valid list"
    )


EVERY_KIND: dict[str, Any] = {
    "schema": 1,
    "name": "every-kind",
    "version": 1,
    "nccl": {"MAX_NCHANNELS": 16, "CHECKS_DISABLE": 1, "LL_BUFFSIZE": "1MiB"},
    "env": {"HF_TOKEN": "hf_x", "CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    "server": {"python": "/usr/bin/python3", "model_path": "/m", "args": ["--api-key", "k"]},
}


def test_run_repeats_only_what_changes_or_endangers_the_start() -> None:
    profile = Profile.model_validate(EVERY_KIND)
    assert [note.id for note in review(profile).warnings] == [
        "NCCL_MAX_NCHANNELS deprecated",
        "NCCL_CHECKS_DISABLE ignored",
        "NCCL_LL_BUFFSIZE undocumented",
        "env.CUDA_DEVICE_MAX_CONNECTIONS overridden",
        "env.HF_TOKEN secret",
        "server.args secret",
    ]
    said = run_notes(profile)  # what changes or endangers the start, not how it is written
    assert [note.id for note in said] == [
        "NCCL_CHECKS_DISABLE ignored",  # the start does not do what the profile says
        "env.CUDA_DEVICE_MAX_CONNECTIONS overridden",
        "env.HF_TOKEN secret",
        "server.args secret",
    ]


def test_accepting_every_id_leaves_no_warning_and_none_for_run() -> None:
    ids = [note.id for note in review(Profile.model_validate(EVERY_KIND)).warnings]
    assert len(set(ids)) == len(ids)
    accepting = Profile.model_validate(EVERY_KIND | {"policy": {"accept": ids}})
    found = review(accepting)
    assert found.warnings == []
    assert [note.id for note in found.acknowledged] == ids
    assert run_notes(accepting) == []


def test_a_flag_sglang_reads_by_its_prefix_is_named_where_it_overrides_the_profile(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """SGLang's parser takes `--enable-symm` for `--enable-symm-mem`, which sets
    NCCL_NVLS_ENABLE=1 (and NCCL_CUMEM_ENABLE=1) whatever the environment holds."""
    server = f'[server]\npython = "{sys.executable}"\nmodel_path = "/m"\nargs = ["--enable-symm"]\n'
    write_profile(
        "symm", f'schema = 1\nname = "symm"\nversion = 1\n[nccl]\nNVLS_ENABLE = 0\n{server}'
    )
    said = "--enable-symm-mem: written --enable-symm, makes SGLang override NCCL_NVLS_ENABLE = '0'"
    validated = run_cli("validate", "symm")
    assert validated.returncode == 0
    assert validated.stderr == (
        f"nccl-launch: warning: profiles/symm.toml: {said} "
        '[accept: "--enable-symm-mem overridden"]\n'
    )
    assert run_cli("run", "--dry-run", "symm").stderr == f"nccl-launch: warning: {said}\n"
