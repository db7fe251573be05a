"""Profiles through the console script: `show`, `diff`, `list`, lookups, the JSON Schema."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from pathlib import Path

import jsonschema
import pytest

from nccl_launch.profile.chain import MAX_EXTENDS
from nccl_launch.render.profiles import list_lines
from tests.conftest import Isolation, RunCli, WriteProfile
from tests.watching import as_a_user

V1 = """
schema = 1
name = "tuned"
version = 1

[nccl]
PROTO = "Simple"
BUFFSIZE = "4MiB"
"""

V2 = """
schema = 1
name = "tuned"
version = 2
description = "after tuning"
extends = "base"

[nccl]
PROTO = "LL"
BUFFSIZE = "16MiB"

[env]
HF_TOKEN = "hf_secret"

[server]
python = "/opt/ml-env/bin/python3"
model_path = "/models/Kimi-K2.5"
tp_size = 8
"""

BASE = """
schema = 1
name = "base"
version = 1

[nccl]
P2P_LEVEL = "SYS"
MAX_NCHANNELS = 16

[policy]
undeclared_nccl = "warn"
"""


@pytest.fixture
def versions(write_profile: WriteProfile) -> None:
    write_profile("base", BASE)
    write_profile("tuned", V2)
    write_profile("tuned-v1", V1, folder="archive")


def test_show_toml_is_the_resolved_profile_and_reads_back(
    versions: None, run_cli: RunCli, tmp_path: Path
) -> None:
    result = run_cli("show", "tuned")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# tuned@2 sha256:")
    data = tomllib.loads(result.stdout)
    assert data["nccl"] == {
        "P2P_LEVEL": "SYS",
        "MAX_NCHANNELS": "16",
        "PROTO": "LL",
        "BUFFSIZE": "16777216",
    }
    assert data["policy"]["undeclared_nccl"] == "warn"
    assert data["env"] == {"HF_TOKEN": "***"}  # secrets are masked in this human format
    # With the secret put back, the output is itself a valid profile with the same digest.
    (tmp_path / "profiles" / "copy.toml").write_text(
        result.stdout.replace('extends = "base"\n', "").replace('"***"', '"hf_secret"')
    )
    digest = result.stdout.split()[2]
    again = run_cli("show", "profiles/copy.toml")
    assert again.stdout.split()[2] == digest


def test_show_toml_escapes_what_a_terminal_would_obey_and_reads_back(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """tomli-w writes C1 controls (U+009B is CSI to an 8-bit terminal), U+2028 and format
    characters raw; show writes them as TOML escapes, and a path in its header escaped."""
    text = "a\u009b31mb\u2028c\U000e0041d"
    path = write_profile(
        "odd\nname = 'forged'", f'schema = 1\nname = "x"\nversion = 1\ndescription = "{text}"\n'
    )
    result = run_cli("show", str(path))
    assert result.returncode == 0, result.stderr
    assert '\ndescription = "a\\u009b31mb\\u2028c\\U000e0041d"\n' in result.stdout
    assert all(char.isprintable() for char in result.stdout.replace("\n", ""))
    assert f"# resolved from {path.parent}/odd\\nname = 'forged'.toml\n" in result.stdout
    assert tomllib.loads(result.stdout)["description"] == text


def test_show_env_is_what_the_child_gets(versions: None, run_cli: RunCli) -> None:
    result = run_cli("show", "tuned", "--format", "env")
    lines = result.stdout.splitlines()
    assert "NCCL_BUFFSIZE=16777216" in lines
    assert "NCCL_P2P_LEVEL=SYS" in lines
    assert "HF_TOKEN=hf_secret" in lines  # an export for the user's own deployment, not a report
    assert "NCCL_LAUNCH_PROFILE=tuned@2" in lines
    assert "SPT_NOENV=1" in lines


def launcher_variables(lines: list[str]) -> dict[str, str]:
    """The NCCL_LAUNCH_* and SPT_* variables among `KEY=value` lines."""
    pairs = dict(line.split("=", 1) for line in lines)
    return {key: value for key, value in pairs.items() if key.startswith(("NCCL_LAUNCH_", "SPT_"))}


def test_show_exports_every_variable_run_sets(versions: None, run_cli: RunCli) -> None:
    shown = run_cli("show", "tuned", "--format", "env")
    dry_run = run_cli("run", "--dry-run", "tuned", "--", "true")
    assert (shown.returncode, dry_run.returncode) == (0, 0), dry_run.stderr
    added = re.findall(r'^  \+ (\S+) +("(?:[^"\\]|\\.)*") +\(nccl-launch\)$', dry_run.stdout, re.M)
    run_sets = [f"{key}={json.loads(value)}" for key, value in added]
    assert launcher_variables(shown.stdout.splitlines()) == launcher_variables(run_sets)
    assert "NCCL_LAUNCH_PROFILE_FILE" in launcher_variables(run_sets)
    json_markers = json.loads(run_cli("show", "tuned", "--format", "json").stdout)["markers"]
    assert json_markers == launcher_variables(run_sets)


def test_show_json_has_versioned_keys(versions: None, run_cli: RunCli) -> None:
    data = json.loads(run_cli("show", "tuned", "--format", "json").stdout)
    assert set(data) == {
        "schema_version", "profile", "digest", "path", "chain", "env", "sources",
        "markers", "argv", "warnings", "resolved",
    }  # fmt: skip
    assert data["schema_version"] == 1
    assert data["chain"] == ["profiles/base.toml", "profiles/tuned.toml"]
    assert data["sources"]["NCCL_P2P_LEVEL"] == "profiles/base.toml"
    assert data["argv"][:4] == [
        "/opt/ml-env/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
    ]
    assert data["warnings"] == [
        "NCCL_MAX_NCHANNELS: deprecated (Maximum channels/CTAs; deprecated in favor of "
        "NCCL_MAX_CTAS), but NCCL 2.30.7, the catalog's release, still reads it and the value "
        "applies; moving to the "
        "replacement is a tuning change to measure again",
        "env.HF_TOKEN: holds a literal secret; it belongs in an env file (mode 0600) named in "
        "env_files",
    ]


def test_diff_two_versions_by_name(versions: None, nccl_launch: RunCli, tmp_path: Path) -> None:
    env = {"NCCL_LAUNCH_PATH": str(tmp_path / "archive")}
    result = nccl_launch("diff", "tuned@1", "tuned@2", env=env)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("--- tuned@1 (sha256:")
    assert lines[0].endswith(str(tmp_path / "archive" / "tuned-v1.toml"))
    assert lines[1].startswith("+++ tuned@2 (sha256:")
    assert '  ~ NCCL_BUFFSIZE           "4194304" -> "16777216"' in lines
    assert '  + NCCL_P2P_LEVEL          "SYS"' in lines
    assert '  + HF_TOKEN                "***"' in lines
    assert ["+", "argv", '"/opt/ml-env/bin/python3', "-m"] in [line.split()[:4] for line in lines]
    assert '  ~ policy.undeclared_nccl  "refuse" -> "warn"' in lines
    assert lines[-1] == "8 differences, 2 outside the digest (description, policy.undeclared_nccl)"


def test_diff_of_equal_meaning_is_empty(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("a", 'schema = 1\nname = "a"\nversion = 1\n[nccl]\nBUFFSIZE = "16MiB"\n')
    write_profile("b", 'schema = 1\nname = "b"\nversion = 7\n[nccl]\nBUFFSIZE = 16777216\n')
    result = run_cli("diff", "a", "b")
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == "0 differences"


def test_diff_shows_a_cwd_and_what_the_digest_does_not_cover(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    server = '[server]\npython = "/p"\nmodel_path = "models/m"\n'
    write_profile("a", f'schema = 1\nname = "a"\nversion = 1\n{server}cwd = "/srv/a"\n')
    write_profile("b", f'schema = 1\nname = "a"\nversion = 2\n{server}cwd = "/srv/b"\n')
    write_profile("c", f'schema = 1\nname = "c"\nversion = 1\ndescription = "x"\n{server}')
    write_profile("d", f'schema = 1\nname = "d"\nversion = 1\n{server}')
    result = run_cli("diff", "a", "b")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].split()[2] != lines[1].split()[2]  # the digests differ
    assert lines[2:] == ['  ~ cwd  "/srv/a" -> "/srv/b"', "1 difference"]
    result = run_cli("diff", "c", "d")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].split()[2] == lines[1].split()[2]  # the same digest
    assert lines[2:] == [
        '  ~ description  "x" -> ""',
        "1 difference, 1 outside the digest (description)",
    ]


def test_list_shows_the_search_path(
    versions: None, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("broken", "schema = 1\nname = ")
    result = run_cli("list", env={"NCCL_LAUNCH_PATH": str(tmp_path / "archive")})
    assert result.returncode == 0
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["NAME", "VERSION", "DIGEST", "SOURCE", "PATH"]
    names = [(row[0], row[1], row[3]) for row in rows[1:] if row[0] != "(invalid)"]
    names = [name for name in names if name[2] != "shipped"]
    assert names == [
        ("base", "1", "local"),
        ("tuned", "2", "local"),
        ("tuned", "1", "NCCL_LAUNCH_PATH"),
    ]
    assert any(row[0] == "(invalid)" and row[-1] == "profiles/broken.toml" for row in rows)


NOT_READ = (
    "lets other users replace its profiles, which root does not read; chown root and chmod "
    "go-w, or move them out of reach of other users"
)


def _listed(stdout: str) -> list[tuple[str, str, str]]:
    """The name, version and source of each row of `list` but the shipped ones."""
    rows = [line.split() for line in stdout.splitlines()[1:]]
    return [(row[0], row[1], row[3]) for row in rows if row[3] != "shipped"]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's rule: another user's folder")
def test_list_says_a_folder_another_user_could_write_in_one_line_and_lists_the_rest(
    versions: None, run_cli: RunCli, tmp_path: Path
) -> None:
    """A folder of the search path whose files root does not read (another user's, as a
    volume a pod's fsGroup owns): one warning line for it on stderr, and the table of the
    others, exit 0; not a row per file with the folder's problem."""
    archive = tmp_path / "archive"
    archive.chmod(0o755)
    os.chown(archive, 65534, 65534)
    result = run_cli("list", env={"NCCL_LAUNCH_PATH": str(archive)})
    assert result.returncode == 0
    assert result.stderr == (
        f"nccl-launch: warning: NCCL_LAUNCH_PATH folder {archive}: not listed: {archive} "
        f"(uid 65534, mode 0755) {NOT_READ}\n"
    )
    assert _listed(result.stdout) == [("base", "1", "local"), ("tuned", "2", "local")]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv (to drop the capabilities that read any folder)",
)
def test_list_says_a_folder_it_cannot_read_and_lists_the_rest(
    versions: None, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """A folder this user may not read (the installed script as root without the
    capabilities that let root past a folder's mode): it was left out without a word."""
    closed = tmp_path / "closed"
    write_profile("other", V1, folder="closed")
    closed.chmod(0o300)  # searchable and writable by its owner, not readable
    try:
        result = as_a_user("list", env={"NCCL_LAUNCH_PATH": str(closed)})
    finally:
        closed.chmod(0o755)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"nccl-launch: warning: NCCL_LAUNCH_PATH folder {closed}: not listed: cannot read it: "
        "Permission denied\n"
    )
    assert _listed(result.stdout) == [("base", "1", "local"), ("tuned", "2", "local")]


def test_list_escapes_control_characters_in_paths(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """A file name holding ESC and a newline cannot colour the terminal or forge a row."""
    write_profile("ev\x1b[31mil\nfake  9  sha256:0  local", 'schema = 1\nname = "x"\nversion = 1\n')
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    local = [line for line in listed.stdout.splitlines() if " local " in line]
    assert len(local) == 1
    assert local[0].endswith("profiles/ev\\x1b[31mil\\nfake  9  sha256:0  local.toml")
    assert "\x1b" not in listed.stdout


FORGED = "ev\x1b[31mil\nforged.toml: ok (x@9"  # a file name that would colour and forge a line
SHOWN = "ev\\x1b[31mil\\nforged.toml: ok (x@9"


def test_a_profiles_path_is_escaped_in_every_line_that_names_it(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """validate's ok line, its warning and its error, run --dry-run's header and diff's name
    the file on one line each, its newline and ESC written as escapes."""
    good = write_profile(FORGED, 'schema = 1\nname = "x"\nversion = 1\n[nccl]\nMAX_NCHANNELS = 4\n')
    bad = write_profile(FORGED + "2", 'schema = 1\nname = "x"\nversion = 1\n[nccl]\nPROTO = "X"\n')
    validated = run_cli("validate", str(good), str(bad))
    assert validated.returncode == 2
    assert validated.stdout.startswith(f"{good.parent}/{SHOWN}.toml: ok (x@1, sha256:")
    err = validated.stderr.splitlines()
    assert len(err) == 2, validated.stderr
    assert err[0].startswith(f"nccl-launch: warning: {good.parent}/{SHOWN}.toml: NCCL_MAX_NCH")
    assert err[1].startswith(f"{bad.parent}/{SHOWN}2.toml: nccl.PROTO: ")
    dry = run_cli("run", "--dry-run", str(good), "--", "true")
    assert dry.stdout.splitlines()[0].endswith(f"from {good.parent}/{SHOWN}.toml"), dry.stdout
    diffed = run_cli("diff", str(good), str(good))
    assert [line.split(" ", 3)[3] for line in diffed.stdout.splitlines()[:2]] == [
        f"{good.parent}/{SHOWN}.toml"
    ] * 2
    for result in (validated, dry, diffed):
        assert "\x1b" not in result.stdout + result.stderr


def test_list_with_nothing_says_where_it_looked(isolated: Isolation) -> None:
    labelled = [(Path("profiles"), "local"), (isolated.system_dir, "system")]
    assert list_lines([], labelled) == [f"no profiles in profiles, {isolated.system_dir}"]


def test_name_lookup_finds_a_declared_name_in_another_file(
    versions: None, run_cli: RunCli, tmp_path: Path
) -> None:
    env = {"NCCL_LAUNCH_PATH": str(tmp_path / "archive")}
    assert run_cli("show", "tuned@1", env=env).stdout.startswith("# tuned@1 ")
    assert run_cli("show", "tuned@3", env=env).returncode == 2
    assert run_cli("show", "tuned@x", env=env).returncode == 2


# The JSON Schema.

REPO = Path(__file__).parent.parent


def test_shipped_schema_is_the_current_one(nccl_launch: RunCli) -> None:
    shipped = (REPO / "profiles" / "nccl-launch.schema.json").read_text()
    assert nccl_launch("schema").stdout == shipped, (
        "run: nccl-launch schema > profiles/nccl-launch.schema.json"
    )


def test_schema_accepts_the_shipped_profiles_and_flags_what_validate_refuses() -> None:
    schema = json.loads((REPO / "profiles" / "nccl-launch.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((REPO / "profiles").glob("*.toml")):
        assert list(validator.iter_errors(tomllib.loads(path.read_text()))) == [], path
    refused = (
        "unknown-nccl-name",
        "buffsize-decimal-megabytes",
        "p2p-level-lowercase",
        "nthreads-not-multiple-of-32",
        "env-holds-nccl-variable",
        "unknown-server-key",
    )
    for case in refused:
        data = tomllib.loads((REPO / "tests" / "corpus" / "invalid" / f"{case}.toml").read_text())
        assert list(validator.iter_errors(data)), case


def test_a_version_not_found_names_the_versions_there_are_and_their_files(
    versions: None, run_cli: RunCli, tmp_path: Path
) -> None:
    (tmp_path / "profiles" / "tuned.toml").rename(tmp_path / "profiles" / "tuned-v2.toml")
    result = run_cli("run", "--dry-run", "tuned@1")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "nccl-launch: profile 'tuned@1' not found; there is tuned@2 (profiles/tuned-v2.toml); "
        "searched profiles, "
    )
    assert run_cli("show", "tuned@2").returncode == 0  # the version it names is found


# The search path: one bad file never breaks the others.

GOOD = 'schema = 1\nname = "good"\nversion = 1\n'


def test_devices_and_fifos_on_the_search_path_break_no_lookup(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("good", GOOD)
    (tmp_path / "profiles" / "zz.toml").symlink_to("/dev/zero")  # read whole, it never ends
    os.mkfifo(tmp_path / "profiles" / "fifo.toml")  # opened plainly, it blocks forever
    result = run_cli("show", "nosuch")
    assert result.returncode == 2
    assert "profile 'nosuch' not found; searched profiles, " in result.stderr
    assert "skipped 2 unusable, first: profile profiles/fifo.toml: a FIFO" in result.stderr
    assert run_cli("show", "good@1").stdout.startswith("# good@1 ")
    listed = run_cli("list")
    assert listed.returncode == 0
    rows = {line.split()[-1]: line for line in listed.stdout.splitlines()[1:]}
    assert rows["profiles/good.toml"].startswith("good ")
    assert "a character device; only regular files are read" in rows["profiles/zz.toml"]
    assert "a FIFO; only regular files are read" in rows["profiles/fifo.toml"]
    result = run_cli("validate", "profiles/zz.toml")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: profile profiles/zz.toml: a character device; only regular files are read\n"
    )


BAD_FILES = {
    "unbalanced-quote": (
        '[server]\nmodel_path = "/m"\nentrypoint = "-m \'sglang.launch_server"\n',
        "server.entrypoint: no closing quotation; quote as a shell would",
    ),
    "huge-version": ("version = " + "9" * 5000 + "\n", "an integer with thousands of digits"),
    "huge-hex": ("tp = 0x" + "f" * 5000 + "\n", "tp: integer out of range; TOML integers"),
    "nested-arrays": ("x = " + "[" * 1000 + "]" * 1000 + "\n", "line 4: nested deeper than 16"),
    "nested-tables": ("x = " + "{a=" * 1000 + "1" + "}" * 1000 + "\n", "line 4: nested deeper"),
    "nested-20": ("x = " + "[" * 20 + "]" * 20 + "\n", "line 4: nested deeper than 16 levels"),
    "dotted-20000": ("x" + ".x" * 20_000 + " = 1\n", "line 4: nested deeper than 16 levels"),
    "parent-name-too-long": (f'extends = "{"9" * 5000}.toml"\n', "extends: profile file not found"),
}


@pytest.mark.parametrize(("body", "fragment"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_bad_file_is_an_invalid_row_and_lookups_skip_it(
    write_profile: WriteProfile, run_cli: RunCli, body: str, fragment: str
) -> None:
    write_profile("good", GOOD)
    header = 'schema = 1\nname = "bad"\n' + ("" if body.startswith("version") else "version = 1\n")
    write_profile("bad", header + body)
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    bad_row = next(line for line in listed.stdout.splitlines() if "bad.toml" in line)
    assert bad_row.startswith("(invalid)")
    assert fragment in bad_row
    assert "good.toml" in listed.stdout
    assert run_cli("show", "good@1").returncode == 0
    for command in (("validate", "profiles/bad.toml"), ("show", "bad"), ("show", "bad@1")):
        result = run_cli(*command)
        assert result.returncode == 2, (command, result.stderr)
        assert "Traceback" not in result.stderr
    assert fragment in run_cli("validate", "profiles/bad.toml").stderr


def test_a_version_or_name_of_thousands_of_characters_is_a_usage_error(
    run_cli: RunCli,
) -> None:
    for name in ("a" * 5000, "a" * 5000 + "@1", "profiles/" + "a" * 5000 + ".toml"):
        result = run_cli("show", name)
        assert result.returncode == 2, result.stderr
        assert "not found" in result.stderr
    result = run_cli("show", "good@" + "9" * 5000)
    assert result.returncode == 2
    assert "a version after '@' is a positive integer" in result.stderr
    assert run_cli("show", "good@\u0663").returncode == 2  # '٣' is no 3


def test_extends_chains_are_followed_without_recursion_up_to_64_files(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    length = MAX_EXTENDS + 2  # one past the limit, and one more
    for index in range(length):
        parent = f'extends = "c{index + 1}"\n' if index < length - 1 else ""
        write_profile(f"c{index}", f'schema = 1\nname = "c{index}"\nversion = 1\n{parent}')
    result = run_cli("validate", "profiles/c0.toml")
    assert result.returncode == 2
    assert result.stderr == (
        f"profiles/c{MAX_EXTENDS - 1}.toml: extends: a chain of more than {MAX_EXTENDS} files "
        "from profiles/c0.toml\n"
    )
    last = length - MAX_EXTENDS  # the first of the last MAX_EXTENDS files
    assert run_cli("validate", f"profiles/c{last}.toml").returncode == 0  # 64 files


# env_files: the profile names its secrets' files; their values are never part of it.

SECRETS_BASE = 'schema = 1\nname = "base"\nversion = 1\nenv_files = ["site.env"]\n'
SECRETS_CHILD = (
    'schema = 1\nname = "kimi"\nversion = 1\nextends = "../base/base.toml"\n'
    'env_files = ["kimi.env", "/etc/nccl-launch/node.env"]\n'
)


def test_env_files_add_up_along_extends_and_count_in_the_digest_as_paths(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("base", SECRETS_BASE, folder="base")
    child = write_profile("kimi", SECRETS_CHILD)
    (tmp_path / "profiles" / "kimi.env").write_text("HF_TOKEN=hf_one\n")
    shown = json.loads(run_cli("show", str(child), "--format", "json").stdout)
    assert shown["resolved"]["env_files"] == ["site.env", "kimi.env", "/etc/nccl-launch/node.env"]
    (tmp_path / "profiles" / "kimi.env").write_text("HF_TOKEN=hf_two\n")
    again = json.loads(run_cli("show", str(child), "--format", "json").stdout)
    assert again["digest"] == shown["digest"]  # a value is no part of it
    write_profile("kimi", SECRETS_CHILD.replace("kimi.env", "other.env"))
    moved = run_cli("diff", str(child), str(write_profile("v1", SECRETS_CHILD)))
    assert moved.returncode == 1
    assert moved.stdout.splitlines()[2:] == [
        '  ~ env_files  "site.env other.env /etc/nccl-launch/node.env" -> '
        '"site.env kimi.env /etc/nccl-launch/node.env"',
        "1 difference",
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('[""]', "env_files: an empty path; give the env file's path"),
        (
            '["a\\nb.env"]',
            "env_files.0: holds the control character '\\n', which no path or name needs; "
            "remove it",
        ),
        ('"kimi.env"', "env_files: Input should be a valid list (got 'kimi.env')"),
    ],
)
def test_env_files_are_paths_without_control_characters(
    write_profile: WriteProfile, run_cli: RunCli, value: str, message: str
) -> None:
    write_profile("kimi", f'schema = 1\nname = "kimi"\nversion = 1\nenv_files = {value}\n')
    result = run_cli("validate", "kimi")
    assert (result.returncode, result.stderr) == (2, f"profiles/kimi.toml: {message}\n")
