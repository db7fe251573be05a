"""`run`'s plan cache (issue 11): a hit is the plan a miss would build, never a stale one, and
never one another user could have written.

The cached `run` is proved through the console script: each test warms the cache, changes
something, and reads what the dry run (or the child itself) says.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from nccl_launch.profile import cache
from nccl_launch.profile.chain import read_chain
from nccl_launch.profile.load import load_profile
from tests.conftest import Isolation, RunCli, WriteProfile

BASE = """
    schema = 1
    name = "base"
    version = 1

    [nccl]
    PROTO = "LL"
    """
CHILD = """
    schema = 1
    name = "child"
    version = 1
    extends = "base"

    [nccl]
    NTHREADS = 512
    """
SHIPPED = Path(__file__).parent.parent / "profiles"


def entries(isolated: Isolation) -> list[Path]:
    return sorted((isolated.home / ".cache" / "nccl-launch" / "plans").glob("*.json"))


def dry_run(nccl_launch: RunCli, ref: str, **env: str) -> str:
    result = nccl_launch("run", "--dry-run", ref, "--", "true", env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def declared(output: str) -> dict[str, str]:
    """NCCL variables the dry run sets: `+ NCCL_PROTO  "LL"  (file)` lines."""
    found = {}
    for line in output.splitlines():
        words = line.split()
        if words[:1] == ["+"] and words[1].startswith("NCCL_") and "_LAUNCH_" not in words[1]:
            found[words[1]] = words[2].strip('"')
    return found


def rewrite_entry(entry: Path, change: dict[str, str]) -> None:
    """Alter the cached plan's env and re-seal it, as its owner could."""
    body = json.loads(entry.read_bytes().partition(b"\n")[2])
    body["spec"]["plan"]["env"] |= change
    text = json.dumps(body, separators=(",", ":")).encode()
    entry.write_bytes(hashlib.sha256(text).hexdigest().encode() + b"\n" + text)


@pytest.fixture
def warmed(nccl_launch: RunCli, write_profile: WriteProfile, isolated: Isolation) -> Path:
    """child extends base; one run has cached it."""
    write_profile("base", BASE)
    child = write_profile("child", CHILD)
    assert declared(dry_run(nccl_launch, "child")) == {
        "NCCL_NTHREADS": "512",
        "NCCL_PROTO": "LL",
    }
    assert len(entries(isolated)) == 1
    return child


def test_a_hit_gives_what_the_miss_gave_and_a_sealed_owned_entry(
    nccl_launch: RunCli, warmed: Path, isolated: Isolation
) -> None:
    (entry,) = entries(isolated)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    before = entry.read_bytes()
    miss = dry_run(nccl_launch, "child", XDG_CACHE_HOME=str(isolated.root / "elsewhere"))
    assert dry_run(nccl_launch, "child") == miss
    assert entry.read_bytes() == before  # a hit writes nothing


def test_the_cached_entry_is_what_the_run_uses(
    nccl_launch: RunCli, warmed: Path, isolated: Isolation
) -> None:
    # The positive control for the tests below: an entry of ours is believed.
    (entry,) = entries(isolated)
    rewrite_entry(entry, {"NCCL_PROTO": "Simple"})
    assert declared(dry_run(nccl_launch, "child"))["NCCL_PROTO"] == "Simple"


def test_an_edit_is_a_miss_even_with_the_same_size_and_mtime(
    nccl_launch: RunCli, warmed: Path
) -> None:
    status = warmed.stat()
    warmed.write_text(warmed.read_text().replace("512", "256"))
    os.utime(warmed, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert declared(dry_run(nccl_launch, "child"))["NCCL_NTHREADS"] == "256"


def test_an_edited_parent_is_a_miss(nccl_launch: RunCli, warmed: Path) -> None:
    parent = warmed.with_name("base.toml")
    parent.write_text(parent.read_text().replace('"LL"', '"Simple"'))
    assert declared(dry_run(nccl_launch, "child"))["NCCL_PROTO"] == "Simple"


def test_a_parent_shadowed_on_the_search_path_is_a_miss(
    nccl_launch: RunCli, write_profile: WriteProfile, warmed: Path
) -> None:
    # child finds `base` next to itself first; move the pair so base comes from the path...
    other = warmed.parent.parent / "more"
    other.mkdir()
    warmed.with_name("base.toml").rename(other / "base.toml")
    assert declared(dry_run(nccl_launch, "child", NCCL_LAUNCH_PATH=str(other)))["NCCL_PROTO"] == (
        "LL"
    )
    # ...then a base next to the child shadows it.
    write_profile("base", BASE.replace('"LL"', '"LL128"'))
    output = dry_run(nccl_launch, "child", NCCL_LAUNCH_PATH=str(other))
    assert declared(output)["NCCL_PROTO"] == "LL128"


def test_a_removed_parent_fails_instead_of_using_the_cache(
    nccl_launch: RunCli, warmed: Path
) -> None:
    warmed.with_name("base.toml").rename(warmed.parent.parent / "moved.toml")
    result = nccl_launch("run", "--dry-run", "child", "--", "true")
    assert result.returncode == 2
    assert "extends: profile 'base' not found" in result.stderr


def test_a_renamed_profile_is_found_under_its_new_name(
    nccl_launch: RunCli, warmed: Path, isolated: Isolation
) -> None:
    renamed = warmed.rename(warmed.with_name("renamed.toml"))
    output = dry_run(nccl_launch, str(renamed))
    assert f"({renamed})" in output  # sources name the file as it is now
    assert len(entries(isolated)) == 2  # one entry per file; the old one is simply unused


def test_an_invalid_edit_is_refused_and_never_cached(
    nccl_launch: RunCli, warmed: Path, isolated: Isolation
) -> None:
    warmed.write_text(warmed.read_text().replace("NTHREADS = 512", "NTHREADS = 500"))
    for _ in range(2):
        result = nccl_launch("run", "--dry-run", "child", "--", "true")
        assert result.returncode == 2
        assert "NTHREADS" in result.stderr


def test_another_version_of_nccl_launch_has_other_keys(
    warmed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = read_chain(warmed)
    key = cache.cache_key(chain)
    monkeypatch.setattr(cache, "__version__", "0.1.1")
    assert cache.cache_key(chain) != key


def test_another_pydantic_has_other_keys(warmed: Path) -> None:
    chain = read_chain(warmed)
    key = cache.cache_key(chain)
    spec = importlib.util.find_spec("pydantic_core")
    assert spec is not None and spec.origin is not None
    module = Path(spec.origin)
    status = module.stat()
    try:
        os.utime(module, ns=(status.st_atime_ns, status.st_mtime_ns + 1))  # as an upgrade would
        assert cache.cache_key(chain) != key
    finally:
        os.utime(module, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert cache.cache_key(chain) == key


def test_an_edited_module_of_nccl_launch_changes_the_keys(
    warmed: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "installed"
    (package / "nccl").mkdir(parents=True)
    module = package / "nccl" / "grammar.py"
    module.write_text("RULES = 1\n")
    monkeypatch.setattr(cache, "_PACKAGE", package)
    chain = read_chain(warmed)
    key = cache.cache_key(chain)
    (package / "nccl" / "__pycache__").mkdir()
    (package / "nccl" / "__pycache__" / "grammar.cpython-311.pyc").write_bytes(b"compiled")
    assert cache.cache_key(chain) == key  # compiling is no change
    module.write_text("RULES = 2\n")
    os.utime(module, ns=(1, 1))
    assert cache.cache_key(chain) != key


@pytest.mark.parametrize("how", ["group-writable", "other owner", "symlink", "fifo", "dir 0777"])
def test_an_entry_another_user_could_have_written_is_ignored(
    nccl_launch: RunCli, warmed: Path, isolated: Isolation, how: str
) -> None:
    (entry,) = entries(isolated)
    rewrite_entry(entry, {"NCCL_PROTO": "Simple"})  # believed if ours (test above)
    if how == "group-writable":
        entry.chmod(0o620)
    elif how == "other owner":
        if os.geteuid() != 0:
            pytest.skip("chown needs root")
        os.chown(entry, 65534, 65534)
    elif how == "symlink":
        target = entry.rename(entry.with_name("elsewhere"))
        entry.symlink_to(target)
    elif how == "fifo":
        entry.unlink()
        os.mkfifo(entry)
    else:
        entry.parent.chmod(0o777)
    assert declared(dry_run(nccl_launch, "child"))["NCCL_PROTO"] == "LL"


@pytest.mark.parametrize("damage", ["torn", "garbage", "empty", "other shape"])
def test_a_damaged_entry_is_a_miss_and_is_replaced(
    nccl_launch: RunCli, warmed: Path, isolated: Isolation, damage: str
) -> None:
    (entry,) = entries(isolated)
    whole = entry.read_bytes()
    if damage == "torn":
        entry.write_bytes(whole[: len(whole) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"\x00\xff" * 100)
    elif damage == "empty":
        entry.write_bytes(b"")
    else:  # sealed, but not a spec
        body = b'{"key": "x", "spec": [1, 2]}'
        entry.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    assert declared(dry_run(nccl_launch, "child"))["NCCL_PROTO"] == "LL"
    check, _, body = entry.read_bytes().partition(b"\n")  # rewritten whole and sealed
    assert check.decode() == hashlib.sha256(body).hexdigest()
    assert json.loads(body)["spec"]["plan"]["env"]["NCCL_PROTO"] == "LL"


@pytest.mark.parametrize("where", ["/dev/null/cache", "/proc/cache", "file"])
def test_a_cache_that_cannot_be_written_costs_only_speed(
    nccl_launch: RunCli, write_profile: WriteProfile, tmp_path: Path, where: str
) -> None:
    # /proc takes no new directory, not even from root.
    write_profile("base", BASE)
    if where == "file":
        (tmp_path / "file").write_text("not a directory")
        where = str(tmp_path / "file")
    for _ in range(2):
        result = nccl_launch(
            "run", "--dry-run", "base", "--", "true", env={"XDG_CACHE_HOME": where}
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""


RICH = """
    schema = 1
    name = "rich"
    version = 3

    [nccl]
    ALGO = "allreduce:ring;broadcast:tree"
    BUFFSIZE = "4MiB"

    [env]
    OMP_NUM_THREADS = 8
    HF_TOKEN = "literal"

    [policy]
    conflict = "warn"
    undeclared_nccl = "strip"
    server_owned = ["NCCL_CUMEM_ENABLE"]

    [server]
    model_path = "/models/m"
    tp_size = 16
    nnodes = 2
    dist_init_addr = "10.0.0.1:5000"
    cwd = "/srv"
    args = ["--enable-deterministic-inference"]

    [server.speculative]
    algorithm = "eagle"
    num_steps = 3
    eagle_topk = 1
    num_draft_tokens = 4
    accept_threshold_single = 0.5
    """


@pytest.mark.parametrize("source", ["rich", *sorted(path.name for path in SHIPPED.glob("*.toml"))])
def test_a_spec_survives_its_json_unchanged(
    source: str, write_profile: WriteProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_profile("rich", RICH) if source == "rich" else SHIPPED / source
    monkeypatch.chdir(SHIPPED.parent)  # the shipped child finds its parent there
    spec = cache.run_spec(load_profile(str(path)).profile)
    assert (spec.notes and spec.server is not None) or source != "rich"  # the sample is rich
    assert cache.RunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_root_creates_no_cache_in_another_users_home(
    nccl_launch: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    # `sudo -E nccl-launch run ...` keeps the user's $HOME: root must leave nothing there.
    if os.geteuid() != 0:
        pytest.skip("needs root to run with another user's home")
    write_profile("base", BASE)
    home = tmp_path / "user-home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    for _ in range(2):
        assert declared(dry_run(nccl_launch, "base", HOME=str(home)))["NCCL_PROTO"] == "LL"
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("home", [None, "", "relative/home", "."])
def test_without_a_usable_home_the_cache_is_under_the_users_own(home: str | None) -> None:
    environ = {"XDG_CACHE_HOME": "relative/cache"} | ({} if home is None else {"HOME": home})
    own = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    assert cache.cache_dir(environ) == own / ".cache" / "nccl-launch" / "plans"
    assert cache.cache_dir({"HOME": "/srv/h"}) == Path("/srv/h/.cache/nccl-launch/plans")
