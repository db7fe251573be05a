"""The installed tool carries its profiles and schema: the wheel, the search order, `list`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from tests.conftest import RunCli, WriteProfile

REPO = Path(__file__).parent.parent
KIMI = "kimi-k25-rtx6000bw-tp8-eagle3"
PARENT = "rtx6000bw-pcie-tp8"
VLLM = f"{KIMI}-vllm"  # the same model served by vLLM


def test_the_wheel_lists_every_package_folder() -> None:
    """pyproject.toml names its packages (one of them is profiles/): a new folder must join."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = sorted(
        ".".join(path.parent.relative_to(REPO).parts)
        for path in (REPO / "nccl_launch").rglob("__init__.py")
    )
    assert packages["packages"] == [*folders, "nccl_launch.shipped"]
    assert packages["package-dir"] == {"nccl_launch.shipped": "profiles"}


def _rows(listed: str) -> list[list[str]]:
    return [line.split() for line in listed.splitlines()[1:]]


def test_shipped_profiles_are_found_last_and_list_says_where_each_comes_from(
    nccl_launch: RunCli, write_profile: WriteProfile
) -> None:
    listed = nccl_launch("list")
    assert listed.returncode == 0, listed.stderr
    shipped = {row[0]: row for row in _rows(listed.stdout)}
    assert shipped[KIMI][3] == "shipped"
    assert shipped[KIMI][4] == str(REPO / "profiles" / f"{KIMI}.toml")  # editable: the tree's
    local = f'schema = 1\nname = "{KIMI}"\nversion = 1\n[nccl]\nPROTO = "Simple"\n'
    write_profile(KIMI, local)
    rows = _rows(nccl_launch("list").stdout)
    assert [row[3:] for row in rows if row[0] == KIMI] == [
        ["local", f"profiles/{KIMI}.toml"],
        ["shipped", "(shadowed)", str(REPO / "profiles" / f"{KIMI}.toml")],
    ]
    shown = json.loads(nccl_launch("show", KIMI, "--format", "json").stdout)
    assert shown["env"]["NCCL_PROTO"] == "Simple"
    assert shown["path"] == f"profiles/{KIMI}.toml"


def test_a_local_profile_wins_whatever_its_file_is_named(
    nccl_launch: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """The search order decides across both ways of matching: a folder's NAME.toml first, then
    any file there declaring NAME; the first folder with a match wins."""
    write_profile("my-kimi", f'schema = 1\nname = "{KIMI}"\nversion = 5\n')
    dry = nccl_launch("run", "--dry-run", KIMI, "--", "true")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"profile {KIMI}@5 (sha256:")
    assert dry.stdout.splitlines()[0].endswith(" from profiles/my-kimi.toml")
    shown = json.loads(nccl_launch("show", KIMI, "--format", "json").stdout)
    assert (shown["profile"], shown["path"]) == (f"{KIMI}@5", "profiles/my-kimi.toml")
    at_one = json.loads(nccl_launch("show", f"{KIMI}@1", "--format", "json").stdout)
    assert at_one["path"] == str(REPO / "profiles" / f"{KIMI}.toml")  # still reached by version
    rows = _rows(nccl_launch("list").stdout)
    assert [row[1] + " " + row[3] for row in rows if row[0] == KIMI] == ["5 local", "1 shipped"]
    # A version 1 in an archive on the path: the shipped one is now picked by no lookup.
    archive = f'schema = 1\nname = "{KIMI}"\nversion = 1\n'
    write_profile("kimi-v1", archive, folder="archive")
    env = {"NCCL_LAUNCH_PATH": f"{tmp_path / 'archive'}:archive:{tmp_path / 'archive'}"}
    listed = nccl_launch("list", env=env)
    assert [row[1:] for row in _rows(listed.stdout) if row[0] == KIMI] == [
        ["5", shown["digest"][:15], "local", "profiles/my-kimi.toml"],
        [
            "1",
            json.loads(nccl_launch("show", "archive/kimi-v1.toml", "--format", "json").stdout)[
                "digest"
            ][:15],
            "NCCL_LAUNCH_PATH",
            str(tmp_path / "archive" / "kimi-v1.toml"),
        ],
        [
            "1",
            at_one["digest"][:15],
            "shipped",
            "(shadowed)",
            str(REPO / "profiles" / f"{KIMI}.toml"),
        ],
    ]  # the archive named three times is listed once
    found = json.loads(nccl_launch("show", f"{KIMI}@1", "--format", "json", env=env).stdout)
    assert found["path"] == str(tmp_path / "archive" / "kimi-v1.toml")


def test_a_dangling_link_named_like_a_profile_hides_nothing(
    nccl_launch: RunCli, tmp_path: Path
) -> None:
    (tmp_path / "profiles" / f"{KIMI}.toml").symlink_to(tmp_path / "gone.toml")
    shown = nccl_launch("show", KIMI, "--format", "json")
    assert json.loads(shown.stdout)["path"] == str(REPO / "profiles" / f"{KIMI}.toml")


def test_a_shipped_child_extends_its_shipped_parent_whatever_is_local(
    nccl_launch: RunCli, write_profile: WriteProfile
) -> None:
    write_profile(
        PARENT, f'schema = 1\nname = "{PARENT}"\nversion = 9\n[nccl]\nP2P_LEVEL = "PXB"\n'
    )
    shown = json.loads(nccl_launch("show", KIMI, "--format", "json").stdout)
    assert shown["chain"] == [str(REPO / "profiles" / f"{name}.toml") for name in (PARENT, KIMI)]
    assert shown["env"]["NCCL_P2P_LEVEL"] == "SYS"


# SLOW (about 15 s here): in a fresh venv, `python -m build` makes the sdist
# from a copy of the source tree and the wheel from that sdist (both from the package registry:
# `build`, setuptools, the dependencies); the wheel is installed there and run outside the tree.
@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_venv_carries_its_profiles(tmp_path: Path) -> None:
    source = tmp_path / "source"
    junk = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__")
    shutil.copytree(REPO, source, ignore=junk)
    subprocess.run([sys.executable, "-m", "venv", tmp_path / "venv"], check=True, timeout=900)
    python = str(tmp_path / "venv" / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "install", "-q"]
    subprocess.run([*pip, "build"], check=True, timeout=900)
    dist = tmp_path / "dist"
    subprocess.run(
        [python, "-m", "build", "-q", "-o", str(dist), str(source)], check=True, timeout=900
    )
    (sdist,) = dist.glob("nccl_launch-*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {name.split("/", 1)[1] for name in archive.getnames() if "/profiles/" in name}
    assert {f"profiles/{KIMI}.toml", "profiles/nccl-launch.schema.json"} <= shipped
    (wheel,) = dist.glob("nccl_launch-*.whl")  # built from the sdist
    subprocess.run([*pip, str(wheel)], check=True, timeout=900)
    empty = tmp_path / "empty"
    empty.mkdir()

    def installed(*args: str) -> subprocess.CompletedProcess[str]:
        script = tmp_path / "venv" / "bin" / "nccl-launch"
        return subprocess.run(
            [script, *args], cwd=empty, capture_output=True, text=True, timeout=60, check=False
        )

    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages/nccl_launch/shipped"))
    listed = installed("list")
    assert listed.returncode == 0, listed.stderr
    assert {(row[0], row[3], row[4]) for row in _rows(listed.stdout)} == {
        (name, "shipped", str(site / f"{name}.toml")) for name in (KIMI, PARENT, VLLM)
    }
    shown = installed("show", KIMI)
    assert shown.returncode == 0, shown.stderr
    assert f"# resolved from {site / f'{PARENT}.toml'}, {site / f'{KIMI}.toml'}\n" in shown.stdout
    dry = installed("run", "--dry-run", KIMI)
    assert dry.returncode == 0, dry.stderr
    assert re.search(r'\+ NCCL_PROTO +"LL" +\(' + re.escape(str(site / KIMI)), dry.stdout)
    assert installed("schema").stdout == (site / "nccl-launch.schema.json").read_text()
    made = installed("new", "site", "--from", KIMI)
    assert made.returncode == 0, made.stderr
    checked = installed("validate", "profiles/site.toml")
    assert checked.returncode == 0, checked.stderr
    digests = [
        json.loads(installed("show", ref, "--format", "json").stdout)["digest"]
        for ref in (KIMI, "site")
    ]
    assert digests[0] == digests[1]  # the copy runs what the shipped profile runs
    assert list(empty.iterdir()) == [empty / "profiles"]
