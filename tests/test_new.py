"""`new`: a site profile from a shipped one (a resolved copy) or from scratch, never clobbering."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.conftest import RunCli, WriteProfile, console_script

KIMI = "kimi-k25-rtx6000bw-tp8-eagle3"


def digest(run_cli: RunCli, ref: str) -> str:
    shown = run_cli("show", ref, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    value: str = json.loads(shown.stdout)["digest"]
    return value


def test_new_from_a_shipped_profile_is_a_resolved_copy_with_its_digest(
    run_cli: RunCli, tmp_path: Path
) -> None:
    made = run_cli("new", "site", "--from", KIMI)
    assert made.returncode == 0, made.stderr
    path = tmp_path / "profiles" / "site.toml"
    assert made.stdout.startswith("wrote profiles/site.toml (site@1, sha256:")
    data = tomllib.loads(path.read_text())
    assert (data["name"], data["version"]) == ("site", 1)
    assert "extends" not in data  # the parent's values are in the file itself
    assert data["nccl"]["P2P_LEVEL"] == "SYS"  # from the shipped parent
    assert data["nccl"]["MAX_NCHANNELS"] == 16  # as the shipped file writes it, not "16"
    assert data["provenance"]["source"].startswith(f"nccl-launch new --from {KIMI}@1 (sha256:")
    assert digest(run_cli, "site") == digest(run_cli, KIMI)
    validated = run_cli("validate", "profiles/site.toml")
    assert validated.returncode == 0, validated.stderr
    assert sorted(path.parent.iterdir()) == [path]  # no temporary file left


def test_new_from_scratch_is_a_valid_template(nccl_launch: RunCli, tmp_path: Path) -> None:
    made = nccl_launch("new", "mine")
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "profiles" / "mine.toml").read_text()
    assert 'name = "mine"' in text
    assert '# BUFFSIZE = "16MiB"' in text  # commented examples of what to fill in
    assert nccl_launch("validate", "mine").returncode == 0
    assert nccl_launch("run", "--dry-run", "mine", "--", "true").returncode == 0


@pytest.mark.parametrize(
    "args",
    [("mine",), ("n3", "--dir", "-rf"), ("site", "--dir", "-rf", "--from", KIMI)],
    ids=["template", "dash-dir", "copy"],
)
def test_the_command_new_suggests_works_when_pasted(
    args: tuple[str, ...], run_cli: RunCli, tmp_path: Path
) -> None:
    made = run_cli("new", *args)
    assert made.returncode == 0, made.stderr
    suggested = made.stdout.splitlines()[1]
    path = f"{Path(console_script()).parent}{os.pathsep}{os.environ['PATH']}"
    pasted = subprocess.run(
        ["bash", "-c", suggested],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        cwd=tmp_path,
        check=False,
    )
    assert pasted.returncode == 0, (suggested, pasted.stderr)


def test_new_never_replaces_a_file_without_force(
    run_cli: RunCli, write_profile: WriteProfile
) -> None:
    path = write_profile("site", 'schema = 1\nname = "site"\nversion = 7\n')
    before = path.read_text()
    refused = run_cli("new", "site", "--from", KIMI)
    assert refused.returncode == 2
    assert refused.stderr == "nccl-launch: profiles/site.toml exists; pass --force to replace it\n"
    assert path.read_text() == before
    assert run_cli("new", "site", "--from", KIMI, "--force").returncode == 0
    assert tomllib.loads(path.read_text())["version"] == 1


def test_new_writes_where_dir_says(run_cli: RunCli, tmp_path: Path) -> None:
    made = run_cli("new", "site", "--dir", "etc/profiles")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "etc" / "profiles" / "site.toml").is_file()
    (tmp_path / "plain").write_text("")
    refused = run_cli("new", "site", "--dir", "plain")
    assert (refused.returncode, refused.stderr) == (
        2,
        "nccl-launch: plain: not a directory, so site.toml cannot be written in it; give another "
        "--dir\n",
    )


CHAT = 'schema = 1\nname = "chat"\nversion = 1\nenv_files = ["chat.env"]\n'


def test_a_copy_beside_its_source_keeps_its_env_files_and_digest(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("chat", CHAT)
    (tmp_path / "profiles" / "chat.env").write_text("HF_TOKEN=hf_x\n")
    made = run_cli("new", "site", "--from", "chat")
    assert (made.returncode, made.stderr) == (0, "")
    copy = tmp_path / "profiles" / "site.toml"
    assert tomllib.loads(copy.read_text())["env_files"] == ["chat.env"]
    assert digest(run_cli, "site") == digest(run_cli, "chat")
    assert run_cli("run", "--dry-run", str(copy), "--", "true").returncode == 0


@pytest.mark.parametrize("moved", ["dir", "parent"])
def test_a_copy_elsewhere_names_the_same_env_files_and_says_its_digest_differs(
    moved: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("chat", CHAT)
    (tmp_path / "profiles" / "chat.env").write_text("HF_TOKEN=hf_x\n")
    if moved == "dir":  # the copy goes to another folder
        args, copy = ["--dir", "etc/profiles"], tmp_path / "etc" / "profiles" / "site.toml"
    else:  # the file that names the env file is a parent in another folder
        child = 'schema = 1\nname = "child"\nversion = 1\nextends = "../profiles/chat.toml"\n'
        write_profile("child", child, folder="site")
        args, copy = ["--dir", "site"], tmp_path / "site" / "site.toml"
    source = "chat" if moved == "dir" else "site/child.toml"
    made = run_cli("new", "site", "--from", source, *args)
    assert made.returncode == 0, made.stderr
    absolute = f"{tmp_path}/profiles/chat.env"
    label = "chat@1" if moved == "dir" else "child@1"
    assert made.stderr == (
        f"nccl-launch: warning: env_files: 'chat.env' is written as {absolute}: from the "
        "copy's folder, the path as written would name another file; so the digest differs "
        f"from {label}'s by that path\n"
    )
    assert tomllib.loads(copy.read_text())["env_files"] == [absolute]
    assert digest(run_cli, str(copy)) != digest(run_cli, source)
    assert run_cli("run", "--dry-run", str(copy), "--", "true").returncode == 0


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "a b",
            "nccl-launch: NAME: name: 'a b' is not valid; valid: letters, digits, '.', '_', '-'",
        ),
        ("../up", "nccl-launch: NAME: name: '../up' is not valid; valid: letters"),
        ("line\nbreak", "nccl-launch: NAME: name: 'line\\nbreak' is not valid; valid: letters"),
        ("x" * 300, "nccl-launch: NAME: 300 characters; a profile name has at most 200"),
    ],
)
def test_new_refuses_a_bad_name_with_one_line_and_writes_nothing(
    run_cli: RunCli, tmp_path: Path, name: str, message: str
) -> None:
    refused = run_cli("new", name, "--from", KIMI)
    assert refused.returncode == 2
    assert refused.stderr.startswith(message)
    assert refused.stderr.count("\n") == 1
    assert list((tmp_path / "profiles").iterdir()) == []
    assert not (tmp_path / "up.toml").exists()


def test_new_from_a_missing_or_invalid_profile_writes_nothing(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    missing = run_cli("new", "site", "--from", "nosuch")
    assert missing.returncode == 2
    assert missing.stderr.startswith("nccl-launch: profile 'nosuch' not found; searched profiles")
    write_profile("bad", 'schema = 1\nname = "bad"\nversion = 1\n[nccl]\nPROTOCOL = "LL"\n')
    invalid = run_cli("new", "site", "--from", "bad")
    assert invalid.returncode == 2
    assert "profiles/bad.toml: nccl.PROTOCOL" in invalid.stderr
    assert sorted(path.name for path in (tmp_path / "profiles").iterdir()) == ["bad.toml"]


def test_a_copy_of_a_private_profile_stays_private(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    secret = write_profile(
        "secret", 'schema = 1\nname = "secret"\nversion = 1\n[env]\nHF_TOKEN = "hf_x"\n'
    )
    secret.chmod(0o600)
    assert run_cli("new", "copy", "--from", "secret").returncode == 0
    assert stat.S_IMODE((tmp_path / "profiles" / "copy.toml").stat().st_mode) == 0o600


def test_a_copy_keeps_the_source_of_what_it_copies(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    body = 'schema = 1\nname = "conv"\nversion = 3\n[provenance]\nsource = "converted from a.sh"\n'
    write_profile("conv", body)
    assert run_cli("new", "copy", "--from", "conv").returncode == 0
    source = tomllib.loads((tmp_path / "profiles" / "copy.toml").read_text())["provenance"]
    assert source["source"].startswith("nccl-launch new --from conv@3 (sha256:")
    assert source["source"].endswith(", profiles/conv.toml); its source: converted from a.sh")


def test_new_refuses_a_folder_run_would_refuse_as_root(run_cli: RunCli, tmp_path: Path) -> None:
    """We run as root here: `run` refuses a profile in a directory others may write to, so
    `new` refuses to write one there, with check_trusted's reason and fix."""
    shared = tmp_path / "ww"
    shared.mkdir()
    shared.chmod(0o777)
    refused = run_cli("new", "p1", "--dir", "ww")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"nccl-launch: profile ww/p1.toml: its directory {shared} (uid 0, mode 0777) lets other"
        " users replace it; chown root and chmod go-w, or move it out of reach of other users;"
        " run refuses it as root, so nothing is written\n"
    )
    assert list(shared.iterdir()) == []
    shared.chmod(0o755)
    assert run_cli("new", "p1", "--dir", "ww").returncode == 0
    assert run_cli("run", "--dry-run", "ww/p1.toml", "--", "true").returncode == 0


def test_new_over_a_symlink_writes_a_file_of_its_own_mode(run_cli: RunCli, tmp_path: Path) -> None:
    """--force replaces the link, not its target, and does not take the target's mode (0666
    here, which `run` refuses as root)."""
    target = tmp_path / "target"
    target.write_text("")
    target.chmod(0o666)
    (tmp_path / "s.toml").symlink_to(target)
    made = run_cli("new", "s", "--dir", ".", "--force")
    assert made.returncode == 0, made.stderr
    written = (tmp_path / "s.toml").lstat()
    assert stat.S_ISREG(written.st_mode)
    assert stat.S_IMODE(written.st_mode) == 0o644  # the umask the tests run with: 022
    assert (target.read_text(), stat.S_IMODE(target.stat().st_mode)) == ("", 0o666)
    assert run_cli("run", "--dry-run", "s.toml", "--", "true").returncode == 0


def test_new_will_not_replace_a_file_others_may_write_as_one_run_refuses(
    run_cli: RunCli, tmp_path: Path
) -> None:
    old = tmp_path / "profiles" / "o.toml"
    old.write_text("old")
    old.chmod(0o666)
    exists = run_cli("new", "o")  # first what a --force would change
    assert exists.stderr == "nccl-launch: profiles/o.toml exists; pass --force to replace it\n"
    refused = run_cli("new", "o", "--force")
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "nccl-launch: profile profiles/o.toml: writable by group or others (mode 0666)"
    )
    assert refused.stderr.count("\n") == 1
    assert old.read_text() == "old"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("foo.toml", "nccl-launch: NAME: 'foo.toml': give the name without .toml, as in 'foo'\n"),
        ("-x", "is not valid; valid: letters, digits, '.', '_', '-', starting with a letter or"),
    ],
)
def test_new_explains_a_name_it_cannot_take(
    run_cli: RunCli, tmp_path: Path, name: str, message: str
) -> None:
    refused = run_cli("new", "--", name)
    assert refused.returncode == 2
    assert message in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert list((tmp_path / "profiles").iterdir()) == []


def test_new_says_up_front_that_its_file_is_a_directory(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "profiles" / "dir.toml").mkdir(parents=True)
    for force in ([], ["--force"]):
        refused = run_cli("new", "dir", *force)
        assert (refused.returncode, refused.stderr) == (
            2,
            "nccl-launch: profiles/dir.toml: a directory; only a regular file is written\n",
        )


def test_new_from_a_profile_whose_parent_is_missing_names_each_folder_once(
    run_cli: RunCli, write_profile: WriteProfile
) -> None:
    write_profile("orphan", 'schema = 1\nname = "orphan"\nversion = 1\nextends = "gone"\n')
    refused = run_cli("new", "n", "--from", "orphan")
    assert refused.returncode == 2
    searched = refused.stderr.split("searched ")[1].rstrip("\n").split(", ")
    assert searched[0] == "profiles"
    assert len(searched) == len(set(searched))


def test_a_copy_holding_a_secret_is_written_0600_whatever_its_source(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """As `convert` writes what it would mask: a credential-looking [env] key, from a 0644 file."""
    body = 'schema = 1\nname = "open"\nversion = 1\n[env]\nHF_TOKEN = "hf_x"\n'
    write_profile("open", body).chmod(0o644)
    assert run_cli("new", "copy", "--from", "open").returncode == 0
    assert stat.S_IMODE((tmp_path / "profiles" / "copy.toml").stat().st_mode) == 0o600
    write_profile("plain", 'schema = 1\nname = "plain"\nversion = 1\n[env]\nHF_HOME = "/x"\n')
    assert run_cli("new", "copy2", "--from", "plain").returncode == 0
    assert stat.S_IMODE((tmp_path / "profiles" / "copy2.toml").stat().st_mode) == 0o644
