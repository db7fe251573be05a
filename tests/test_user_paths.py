"""A path a user names (`[server] python`, the model, the cwd) that this user cannot look at is
one line naming the key and the file, with exit 3, never an internal error.

The case behind it: a unit whose `User=` cannot search the folder of a venv under /root (mode
0700). The suite runs as root in CI, and root reads every folder; so the console script runs
here without the two capabilities that let root past a folder's mode (`setpriv` drops them
from its bounding set), and the kernel refuses it as it refuses any other user. The folder is
another user's, mode 0700, as /root is to a service user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunCli, WriteProfile
from tests.helpers import free_port
from tests.watching import AS_A_USER, as_a_user

NOBODY = 65534
PROFILE = """
schema = 1
name = "paths"
version = 1
[server]
python = "{python}"
model_path = "{model}"
tp_size = 1
port = {port}
{extra}
"""
SKIP = ("--skip", "gpus", "--skip", "port", "--skip", "sglang")


def _write(write_profile: WriteProfile, python: str, model: str, extra: str = "") -> None:
    write_profile(
        "paths", PROFILE.format(python=python, model=model, port=free_port(), extra=extra)
    )


@pytest.fixture
def closed(tmp_path: Path) -> Path:
    """A folder of another user's, mode 0700, holding a venv's interpreter and a model."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (another user's folder) and setpriv (to act as a user)")
    folder = tmp_path / "closed"
    (folder / "venv" / "bin").mkdir(parents=True)
    python = folder / "venv" / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (folder / "model").mkdir()
    for path in (folder, *folder.rglob("*")):
        os.chown(path, NOBODY, NOBODY)
    folder.chmod(0o700)
    return folder


def test_the_user_of_this_test_is_refused_the_folder(closed: Path) -> None:
    """Else the tests below could not fail: the refusal is the kernel's."""
    done = subprocess.run([*AS_A_USER, "ls", str(closed)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "Permission denied" in done.stderr


def test_an_interpreter_this_user_cannot_look_at_is_a_failed_check(
    closed: Path, write_profile: WriteProfile
) -> None:
    python = closed / "venv" / "bin" / "python"
    _write(write_profile, str(python), "/")
    result = as_a_user("preflight", *SKIP, "paths")
    assert result.returncode == 3, result.stderr
    assert result.stderr == ""
    assert (
        f"fail  python       [server] python {python}: cannot look at it: Permission denied; "
        f"every folder on its way must be searchable by uid 0, the user running this"
    ) in result.stdout.splitlines()
    # `run` says the same of it, in the same words, with the same exit code, before it execs.
    result = as_a_user("run", "paths")
    assert result.returncode == 3
    assert result.stderr == (
        f"nccl-launch: [server] python {python}: cannot look at it: Permission denied; every "
        "folder on its way must be searchable by uid 0, the user running this\n"
    )


def test_a_model_or_cwd_this_user_cannot_look_at_is_a_failed_check(
    closed: Path, write_profile: WriteProfile
) -> None:
    model, cwd = closed / "model", closed / "srv"
    _write(write_profile, sys.executable, str(model), f'cwd = "{cwd}"')
    result = as_a_user("preflight", *SKIP, "paths")
    assert result.returncode == 3, result.stderr
    assert result.stderr == ""
    fails = [line for line in result.stdout.splitlines() if line.startswith("fail")]
    reason = "cannot look at it: Permission denied; every folder on its way must be searchable"
    assert fails == [
        f"fail  paths        [server] cwd {cwd}: {reason} by uid 0, the user running this",
        f"fail  paths        model_path {model}: {reason} by uid 0, the user running this",
    ]


@pytest.mark.parametrize("key", ["python", "model_path", "cwd"])
@pytest.mark.parametrize("limit", ["NAME_MAX", "PATH_MAX"])
def test_a_path_longer_than_the_system_takes_is_a_failed_check(
    key: str, limit: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    # One name past NAME_MAX (255), or short names past PATH_MAX (4096) in all.
    long = str(tmp_path / ("x" * 300 if limit == "NAME_MAX" else "/".join(["x" * 200] * 21)))
    python = long if key == "python" else sys.executable
    model = long if key == "model_path" else str(tmp_path)
    _write(write_profile, python, model, f'cwd = "{long}"' if key == "cwd" else "")
    result = run_cli("preflight", *SKIP, "paths")
    assert result.returncode == 3, result.stderr
    assert result.stderr == ""
    named = {"python": "[server] python", "model_path": "model_path", "cwd": "[server] cwd"}[key]
    [fail] = [line for line in result.stdout.splitlines() if line.startswith("fail")]
    assert fail.endswith(f"{named} {long}: cannot look at it: File name too long")


def test_a_fifo_as_the_interpreter_is_named_as_one(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    fifo = tmp_path / "python"
    os.mkfifo(fifo)
    _write(write_profile, str(fifo), str(tmp_path))
    result = run_cli("preflight", *SKIP, "paths")
    assert result.returncode == 3, result.stderr
    assert (
        f"fail  python       [server] python {fifo} is a FIFO, not an executable file"
    ) in result.stdout.splitlines()


def test_a_nul_byte_in_a_path_is_refused_with_the_profile(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    _write(write_profile, "/usr/bin/py\\u0000thon", "/")
    result = run_cli("preflight", *SKIP, "paths")
    assert result.returncode == 2
    assert result.stderr.startswith("profiles/paths.toml: server.python: holds a NUL byte")


REASON = "cannot look at it: Permission denied; every folder on its way must be searchable by uid 0"


def test_a_profile_this_user_cannot_look_at_is_not_said_missing(closed: Path) -> None:
    profile = closed / "p.toml"
    result = as_a_user("run", str(profile), "--", "true")
    assert result.returncode == 3
    assert result.stderr == f"nccl-launch: profile {profile}: {REASON}, the user running this\n"


def test_new_in_a_folder_this_user_cannot_look_at_is_one_line(closed: Path) -> None:
    folder = closed / "profiles"
    result = as_a_user("new", "q", "--dir", str(folder))
    assert result.returncode == 3
    assert result.stderr == f"nccl-launch: folder {folder}: {REASON}, the user running this\n"


def test_a_bench_history_this_user_cannot_look_at_is_one_line(closed: Path) -> None:
    state = closed / "state"
    result = as_a_user("bench", "--history", "p", env={"XDG_STATE_HOME": str(state)})
    assert result.returncode == 3
    history = state / "nccl-launch" / "bench.jsonl"
    assert result.stderr == (
        f"nccl-launch: bench history {history}: {REASON}, the user running this\n"
    )


@pytest.mark.parametrize(
    ("args", "what"),
    [(("run", "{long}", "--", "true"), "profile"), (("new", "q", "--dir", "{long}"), "folder")],
    ids=["profile", "new-dir"],
)
def test_a_name_longer_than_the_system_takes_is_one_line(
    args: tuple[str, ...], what: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A profile no file can be is a usage error, as any profile not found; a folder to
    write in that the system refuses is a host problem."""
    long = str(tmp_path / ("x" * 300))
    result = run_cli(*(arg.format(long=long) for arg in args))
    if what == "profile":
        assert (result.returncode, result.stderr) == (
            2,
            f"nccl-launch: profile file not found: {long}\n",
        )
        return
    assert result.returncode == 3
    assert result.stderr == f"nccl-launch: {what} {long}: cannot look at it: File name too long\n"


def test_preflight_passes_over_library_and_conf_folders_this_user_cannot_search(
    closed: Path, write_profile: WriteProfile
) -> None:
    """As the loader passes over a folder of LD_LIBRARY_PATH it cannot search; an nccl.conf
    that cannot be read is a warning, as `run` gives it."""
    _write(write_profile, sys.executable, "/")
    env = {"LD_LIBRARY_PATH": str(closed), "NCCL_CONF_FILE": str(closed / "nccl.conf")}
    result = as_a_user("preflight", *SKIP, "paths", env=env)
    assert result.stderr == ""
    assert "ok    env-plugin   no libnccl-env.so on the library path" in result.stdout
    assert (
        f"warn  nccl.conf    nccl.conf {closed / 'nccl.conf'}: cannot read: Permission denied"
    ) in result.stdout


def test_convert_looks_up_sourced_files_and_commands_as_bash_past_such_folders(
    closed: Path, tmp_path: Path
) -> None:
    """bash's PATH search passes over a folder it cannot search; a file named by its path in
    one is a sourced file that cannot be read."""
    start = tmp_path / "start.sh"
    serve = "exec python3 -m sglang.launch_server --model-path /m --tp 1\n"
    start.write_text(f"#!/bin/bash\nexport PATH={closed}:/usr/bin\n{serve}")
    result = as_a_user("convert", str(start), "-o", str(tmp_path / "out.toml"))
    assert result.returncode == 0, result.stderr
    activate = closed / "venv" / "bin" / "activate"
    start.write_text(f"#!/bin/bash\nsource {activate}\n{serve}")
    result = as_a_user("convert", str(start), "-o", str(tmp_path / "out2.toml"))
    assert result.returncode == 2
    assert result.stderr == (
        f"nccl-launch: {start}: line 2: sourced file {activate}: cannot read: Permission denied\n"
    )
