"""Every command against hostile input: bytes, NULs, huge numbers, deep nesting, devices,
FIFOs, symlinks. Whatever comes in, the exit code is 0, 1, 2 or 3 with a message, never a
traceback and never exit 4 (which is kept for bugs)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.profile.chain import MAX_EXTENDS
from tests.conftest import RunCli, run_in_process

EXPECTED = {0, 1, 2, 3}
KEYS = ["schema", "name", "version", "description", "extends", "nccl", "env", "policy",
        "server", "provenance", "speculative", "PROTO", "BUFFSIZE", "P2P_LEVEL", "NTHREADS",
        "HF_TOKEN", "python", "entrypoint", "model_path", "tp_size", "args", "cwd", "port",
        "algorithm", "conflict", "undeclared_nccl", "server_owned"]  # fmt: skip
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\x00", "a\x00b", "\n[Service]\nExecStartPre=/bin/sh", "'", '"', "\\",
                     "${X}", "$(id)", "`id`", "é", "9" * 5000,
                     "LL, Simple", "^LL128", "16MiB", "0x200", "-1", "../../etc/shadow"]),
)  # fmt: skip
HOSTILE_INT = st.one_of(
    st.integers(), st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**4000])
)
SCALARS = st.one_of(HOSTILE_TEXT, HOSTILE_INT, st.booleans(), st.floats(allow_nan=False))


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"x": value}
    return value


TABLES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)
PROFILES = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), TABLES, max_size=8),
    st.fixed_dictionaries(
        {"schema": st.just(1), "name": st.just("p"), "version": HOSTILE_INT},
        optional={
            "nccl": st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=4),
            "env": st.dictionaries(st.text(max_size=8), TABLES, max_size=4),
            "server": st.dictionaries(st.sampled_from(KEYS), TABLES, max_size=6),
            "description": HOSTILE_TEXT,
            "extends": HOSTILE_TEXT,
        },
    ),
    st.integers(min_value=100, max_value=2000).map(lambda depth: {"deep": nested(depth)}),
)
COMMANDS = [
    ["validate", "{p}"],
    ["show", "{p}"],
    ["show", "{p}", "--format", "json"],
    ["show", "{p}", "--format", "env"],
    ["systemd", "{p}"],
    ["run", "{p}", "--dry-run", "--", "true"],
    ["preflight", "{p}", "--skip", "gpus", "--skip", "port", "--skip", "sglang", "--", "x"],
    ["diff", "{p}", "{p}"],
    ["list"],
    ["verify-log", "{p}", "{p}"],
]
FUZZ = settings(max_examples=25, deadline=None)


@contextmanager
def fresh() -> Iterator[Path]:
    """A folder of one example's own, as the test's tmp_path is to a test: the working
    directory, with an empty ./profiles, and HOME under it."""
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        root = Path(folder)
        (root / "profiles").mkdir()
        (root / "home").mkdir()
        patch.chdir(root)
        patch.setenv("HOME", str(root / "home"))
        yield root


def assert_handled(result: subprocess.CompletedProcess[str], what: str) -> None:
    assert result.returncode in EXPECTED, f"{what}: exit {result.returncode}\n{result.stderr}"
    assert "Traceback" not in result.stderr, what
    assert "internal error" not in result.stderr, what


def write_toml(path: Path, data: dict[str, Any]) -> bool:
    try:
        path.write_text(tomli_w.dumps(data), encoding="utf-8")
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
        return False  # not expressible as TOML: nothing to feed
    return True


@FUZZ
@given(data=PROFILES, command=st.sampled_from(COMMANDS))
def test_hostile_profiles(data: dict[str, Any], command: list[str]) -> None:
    with fresh() as tmp_path:
        path = tmp_path / "profiles" / "p.toml"
        if write_toml(path, data):
            args = [arg.format(p=path) for arg in command]
            assert_handled(run_in_process(*args), " ".join(args))


@FUZZ
@given(raw=st.binary(max_size=300), command=st.sampled_from(COMMANDS))
def test_hostile_bytes_as_profile_and_log(raw: bytes, command: list[str]) -> None:
    with fresh() as tmp_path:
        path = tmp_path / "profiles" / "p.toml"
        path.write_bytes(raw)
        args = [arg.format(p=path) for arg in command]
        assert_handled(run_in_process(*args), " ".join(args))


@FUZZ
@given(raw=st.binary(max_size=300), value=st.sampled_from(["", "9" * 5000, "LL;", "\xff"]))
def test_hostile_scripts_and_environments(raw: bytes, value: str) -> None:
    with fresh() as tmp_path:
        script = tmp_path / "start.sh"
        script.write_bytes(raw)
        assert_handled(run_in_process("convert", str(script), "--force"), "convert")
        profile = tmp_path / "profiles" / "p.toml"
        profile.write_text('schema = 1\nname = "p"\nversion = 1\n[nccl]\nBUFFSIZE = 4096\n')
        env = {"NCCL_BUFFSIZE": value, "NCCL_PROTO": value, "NCCL_P2P_LEVEL": value}
        assert_handled(run_in_process("run", "--dry-run", "p", "--", "true", env=env), "run")


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory", "missing", "null"])
@pytest.mark.parametrize(
    "command",
    [
        ["validate", "{p}"],
        ["show", "{p}"],
        ["run", "--dry-run", "ok", "--env-file", "{p}", "--", "true"],
        ["convert", "{p}"],
        ["verify-log", "ok", "{p}"],
        ["check", "ok", "--pidfile", "{p}"],
        ["show", "nosuch"],
        ["list"],
    ],
)
def test_special_files_anywhere(
    kind: str, command: list[str], tmp_path: Path, run_cli: RunCli
) -> None:
    """Nothing hangs on a FIFO, reads /dev/zero forever or crashes on a directory: the
    special file is both the argument and a file on the search path."""
    (tmp_path / "profiles" / "ok.toml").write_text('schema = 1\nname = "ok"\nversion = 1\n')
    special = tmp_path / "profiles" / "zz.toml"
    if kind == "fifo":
        os.mkfifo(special)
    elif kind == "zero":
        special.symlink_to("/dev/zero")
    elif kind == "directory":
        special.mkdir()
    elif kind == "null":
        special.symlink_to("/dev/null")
    args = [arg.format(p=special) for arg in command]
    result = run_cli(*args)  # the fixture's timeout turns a hang into a failure
    assert_handled(result, " ".join(args))


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--pid", "-5"],
        ["check", "--pid", "0"],
        ["check", "--pid", str(2**70)],
        ["capture", "--pid", "-3"],
        ["run", "ok", "--", ""],
        ["run", "ok", "--node-rank", str(10**30), "--", "true"],
        ["check", "--port", "99999999"],
        ["diff", "ok@" + "9" * 5000, "ok"],
        ["show", "ok@-1"],
    ],
)
def test_hostile_numbers_and_words(args: list[str], tmp_path: Path, run_cli: RunCli) -> None:
    (tmp_path / "profiles" / "ok.toml").write_text('schema = 1\nname = "ok"\nversion = 1\n')
    assert_handled(run_cli(*args), " ".join(args))


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 5000 + "]" * 5000,
        "x = " + "{a = " * 3000 + "1" + "}" * 3000,
        'schema = 1\nname = "p"\nversion = ' + "9" * 5000,
        'schema = 1\nname = "p"\nversion = 1\n[server]\nmodel_path = "m"\nentrypoint = "-m \'x"',
        'schema = 1\nname = "p\\u0000"\nversion = 1',
    ],
    ids=["deep-arrays", "deep-tables", "huge-version", "unbalanced-quote", "nul-name"],
)
@pytest.mark.parametrize("command", [["validate", "{p}"], ["show", "p@1"], ["list"]])
def test_one_bad_file_never_crashes_a_command(
    text: str, command: list[str], tmp_path: Path, run_cli: RunCli
) -> None:
    path = tmp_path / "profiles" / "p.toml"
    path.write_text(text)
    args = [arg.format(p=path) for arg in command]
    assert_handled(run_cli(*args), " ".join(args))


def test_a_long_extends_chain_is_an_error_not_a_crash(tmp_path: Path, run_cli: RunCli) -> None:
    length = MAX_EXTENDS + 2  # one past the limit, and one more
    for index in range(length):
        parent = f'extends = "c{index + 1}"\n' if index < length - 1 else ""
        (tmp_path / "profiles" / f"c{index}.toml").write_text(
            f'schema = 1\nname = "c{index}"\nversion = 1\n{parent}'
        )
    assert_handled(run_cli("validate", "c0"), "validate c0")


# C0 and DEL: what a UTF-8 terminal acts on (C1, U+0080 to U+009F, it shows or ignores).
CONTROL = st.characters(max_codepoint=0x7F, categories=["Cc"])
SERVER_STRINGS = ["python", "entrypoint", "model_path", "cwd", "host", "dist_init_addr", "args",
                  "draft_model_path", "pass_through"]  # fmt: skip


@FUZZ
@given(
    key=st.sampled_from(SERVER_STRINGS),
    text=st.text(st.one_of(CONTROL, st.sampled_from("ab ;'\\")), min_size=1, max_size=12),
    command=st.sampled_from(
        [c for c in COMMANDS if c[0] in ("validate", "show", "run", "preflight")]
    ),
)
def test_control_characters_in_server_strings_reach_no_output_raw(
    key: str, text: str, command: list[str]
) -> None:
    """A path or name holding one is refused; `args` is kept and escaped where people read
    it. Either way no output holds a raw control character but the newlines that end its
    lines, and no line starts with what followed a newline in the profile."""
    value = f"/a{text}\nFORGED"
    server: dict[str, Any] = {"model_path": "/m", key: [value] if key == "args" else value}
    if key in ("draft_model_path", "pass_through"):  # [server.speculative]
        server = {"model_path": "/m", "speculative": {"algorithm": "NGRAM", key: value}}
    with fresh() as tmp_path:
        path = tmp_path / "profiles" / "p.toml"
        write_toml(path, {"schema": 1, "name": "p", "version": 1, "server": server})
        args = [arg.format(p=path) for arg in command]
        result = run_in_process(*args)
    assert_handled(result, " ".join(args))
    for output in (result.stdout, result.stderr):
        assert not any(line.startswith("FORGED") for line in output.splitlines()), args
        # A tab (TOML keeps it raw in `show`) only moves the cursor on; DEL a terminal
        # ignores, and JSON (`show --format json`) rightly keeps it raw.
        raw = {char for char in output if unicodedata.category(char) == "Cc"} - set("\n\t\x7f")
        assert not raw, (args, raw)


def test_an_inherited_variable_name_is_escaped_in_the_refusal(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """A name in the calling environment is any text but `=` and NUL."""
    (tmp_path / "profiles" / "k.toml").write_text('schema = 1\nname = "k"\nversion = 1\n')
    env = {"NCCL_X\x1b]0;pwn\x07\nnccl-launch: wrote fake": "1"}
    result = run_cli("run", "--dry-run", "k", "--", "true", env=env)
    assert result.returncode == 1
    assert "  + NCCL_X\\x1b]0;pwn\\x07\\nnccl-launch: wrote fake  " in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("99999999999999999999MB", "NCCL keeps its default: strtoll overflows"),
        ("4096MB", "NCCL would read it as 4096"),
        ("16GB", "NCCL would read it as 16"),
    ],
)
def test_a_huge_decimal_size_says_what_nccl_does_and_the_valid_units_once(
    value: str, read: str, tmp_path: Path, run_cli: RunCli
) -> None:
    path = tmp_path / "b.toml"
    path.write_text(f'schema = 1\nname = "b"\nversion = 1\n[nccl]\nBUFFSIZE = "{value}"\n')
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{path}: nccl.BUFFSIZE: '{value}' is not a size ({read}); ")
    assert line.count("valid: bytes as an integer or with a unit K, KiB, M, MiB, G, GiB") == 1
    assert line.count("nothing: it is out of range") == 2


@pytest.mark.parametrize(
    ("toml", "key", "shown"),
    [
        ("[provenance]\ndate = 2025-01-02T03:04:05", "provenance.date", "2025-01-02T03:04:05"),
        ("[provenance]\nsource = 2025-01-02", "provenance.source", "2025-01-02"),
        ('[server]\nmodel_path = "/m"\ncwd = 03:04:05', "server.cwd", "03:04:05"),
    ],
)
def test_an_unquoted_date_is_named_not_shown_as_python(
    toml: str, key: str, shown: str, tmp_path: Path, run_cli: RunCli
) -> None:
    path = tmp_path / "d.toml"
    path.write_text(f'schema = 1\nname = "d"\nversion = 1\n{toml}\n')
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert result.stderr == (
        f"{path}: {key}: {shown} is a TOML date/time; quote it to keep it as text\n"
    )
