"""Shell completion of PROFILE arguments, through click's protocol and the installed script."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RunCli, WriteProfile, console_script

KIMI = "kimi-k25-rtx6000bw-tp8-eagle3"


def complete(nccl_launch: RunCli, line: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash gets for the last word of `line` (empty after a trailing space): each
    completion as `type,value`, as click's bash script reads them."""
    words = line.split(" ")
    protocol = {
        "_NCCL_LAUNCH_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    done = nccl_launch(env=protocol | (env or {}))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return [item for item in done.stdout.splitlines() if item]


@pytest.fixture
def tuned(write_profile: WriteProfile, tmp_path: Path) -> dict[str, str]:
    """`tuned` version 2 in ./profiles, version 1 under another file name in an archive on
    $NCCL_LAUNCH_PATH; the environment that finds both."""
    write_profile("tuned", 'schema = 1\nname = "tuned"\nversion = 2\n')
    write_profile("tuned-old", 'schema = 1\nname = "tuned"\nversion = 1\n', folder="archive")
    write_profile("other", 'schema = 1\nname = "other"\nversion = 1\n')
    return {"NCCL_LAUNCH_PATH": str(tmp_path / "archive")}


def test_a_profile_name_completes_to_names_and_versions(
    nccl_launch: RunCli, tuned: dict[str, str]
) -> None:
    assert complete(nccl_launch, "nccl-launch run tu", tuned) == [
        "file,tu",
        "plain,tuned",
        "plain,tuned@1",
        "plain,tuned@2",
    ]


def test_name_at_completes_the_versions_on_the_search_path(
    nccl_launch: RunCli, tuned: dict[str, str]
) -> None:
    assert complete(nccl_launch, "nccl-launch run tuned@", tuned) == [
        "file,tuned@",
        "plain,tuned@1",
        "plain,tuned@2",
    ]


def test_shipped_profiles_complete_too(nccl_launch: RunCli) -> None:
    assert complete(nccl_launch, "nccl-launch show kimi") == [
        "file,kimi",
        f"plain,{KIMI}",
        f"plain,{KIMI}@1",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "nccl-launch run ot",
        "nccl-launch run --dry-run ot",
        "nccl-launch preflight ot",
        "nccl-launch check ot",
        "nccl-launch show ot",
        "nccl-launch diff tuned ot",
        "nccl-launch validate tuned ot",
        "nccl-launch verify-log ot",
        "nccl-launch systemd ot",
    ],
)
def test_every_profile_argument_completes(
    nccl_launch: RunCli, tuned: dict[str, str], line: str
) -> None:
    assert complete(nccl_launch, line, tuned) == ["file,ot", "plain,other", "plain,other@1"]


def test_an_unusable_file_breaks_no_completion(
    nccl_launch: RunCli, tuned: dict[str, str], tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "profiles" / "fifo.toml")  # opened plainly, it would block forever
    (tmp_path / "profiles" / "broken.toml").write_text("schema = 1\nname = ")
    assert complete(nccl_launch, "nccl-launch run tuned@", tuned)[1:] == [
        "plain,tuned@1",
        "plain,tuned@2",
    ]


def test_other_arguments_keep_clicks_completion(nccl_launch: RunCli, tuned: dict[str, str]) -> None:
    assert complete(nccl_launch, "nccl-launch sh", tuned) == ["plain,show"]
    assert complete(nccl_launch, "nccl-launch new ", tuned) == []  # NAME is new: nothing to offer


def test_bash_completes_with_the_script_click_prints(
    nccl_launch: RunCli, tuned: dict[str, str]
) -> None:
    """The real bash function `eval "$(_NCCL_LAUNCH_COMPLETE=bash_source nccl-launch)"`
    defines; a file item must not wipe the names bash was given."""
    bash = shutil.which("bash")
    assert bash is not None
    source = nccl_launch(env={"_NCCL_LAUNCH_COMPLETE": "bash_source"}).stdout
    script = (
        f"{source}\nCOMP_WORDS=(nccl-launch run tuned@); COMP_CWORD=2\n"
        '_nccl_launch_completion nccl-launch 2>/dev/null; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    path = str(Path(console_script()).parent)
    env = os.environ | tuned | {"PATH": f"{path}:{os.environ['PATH']}"}
    done = subprocess.run([bash, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.splitlines() == ["tuned@1", "tuned@2"]
