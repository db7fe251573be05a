"""What people read never holds a raw control character: paths, names, values and the text
of logs and processes that a line quotes are escaped (`\\n`, `\\x1b`, `\\x9b`), whichever
command prints them and whichever option brought them in. Raw, they would forge a line in a
log that others read (the tool runs as root under systemd) or drive the terminal."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RunCli
from tests.helpers import sleeper

# ESC, an OSC title sequence, BEL, a newline then a forged line, C1's CSI (U+009B), U+2028
# (a line separator to some viewers) and U+202E (it reverses what follows on screen).
HOSTILE = "x\x1b]0;T\x07\nFORGED\u009b\u2028\u202e"
PROFILE = 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n[server]\nmodel_path = "/m"\n'


def assert_escaped(result: subprocess.CompletedProcess[str], what: str) -> None:
    """No line starts with what followed the newline; nothing but newlines is unprintable."""
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, what
    for output in (result.stdout, result.stderr):
        assert not any(line.startswith("FORGED") for line in output.splitlines()), what
        assert output.replace("\n", "").isprintable(), (what, output)
    assert "FORGED" in result.stdout + result.stderr, what  # the text was shown, escaped


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "profiles" / "p.toml"
    path.write_text(PROFILE)
    return path


def test_files_named_by_options_are_escaped_where_they_are_named(
    profile: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    (tmp_path / f"e{HOSTILE}.env").write_text("A=1\n")
    (tmp_path / f"log{HOSTILE}").write_text("")
    cases = [
        ["run", f"--x{HOSTILE}", "p"],  # an option run does not have: the hint quotes it
        ["preflight", "p", f"extra{HOSTILE}"],  # an argument that belongs after '--'
        ["new", "n", "--dir", f"d{HOSTILE}"],
        ["systemd", "p", "-o", f"u{HOSTILE}.service"],
        ["bench", "--history", f"p{HOSTILE}", "--record", f"h{HOSTILE}.jsonl"],
        ["verify-log", "p", f"log{HOSTILE}"],
        ["run", "--dry-run", "--env-file", f"e{HOSTILE}.env", "p", "--", "true"],
        ["show", f"p{HOSTILE}"],  # no such profile
    ]
    for args in cases:
        assert_escaped(run_cli(*args), args[0])


def test_an_nccl_conf_path_and_a_stripped_name_are_escaped_in_run(
    profile: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    conf = tmp_path / f"c{HOSTILE}.conf"
    conf.write_text("NCCL_ALGO=Tree\n")
    refused = run_cli("run", "--dry-run", "p", "--", "true", env={"NCCL_CONF_FILE": str(conf)})
    assert refused.returncode == 1  # undeclared_nccl = "refuse" by default
    assert_escaped(refused, "nccl.conf")
    profile.write_text(PROFILE + '[policy]\nundeclared_nccl = "strip"\n')
    stripped = run_cli("run", "--dry-run", "p", "--", "true", env={f"NCCL_{HOSTILE}": "1"})
    assert stripped.returncode == 0, stripped.stderr
    assert_escaped(stripped, "stripped")


def test_a_log_line_quoted_by_verify_log_is_escaped(profile: Path, run_cli: RunCli) -> None:
    log = profile.parent / "nccl.log"
    line = f"NCCL_PROTO set by environment to LL{HOSTILE.replace(chr(10), '')}"  # one line
    log.write_text(f"h:1:1 [0] NCCL INFO {line}\n")
    result = run_cli("verify-log", "p", str(log))
    assert result.returncode == 1
    assert_escaped(result, "verify-log")


def test_what_a_process_holds_is_escaped_in_checks_report(profile: Path, run_cli: RunCli) -> None:
    """The marker of the profile it runs, a tolerated variable's name, in the text report
    printed and in the one written by `-o`."""
    profile.write_text(PROFILE + '[policy]\nundeclared_nccl = "warn"\n')
    env = {"NCCL_PROTO": "LL", "NCCL_LAUNCH_PROFILE": f"q{HOSTILE}", f"NCCL_{HOSTILE}": "1"}
    written = profile.parent / "report.txt"
    with sleeper({os.fsencode(k): os.fsencode(v) for k, v in env.items()}) as pid:
        printed = run_cli("check", "p", "--pid", str(pid))
        saved = run_cli("check", "p", "--pid", str(pid), "-o", str(written))
    assert printed.returncode == saved.returncode == 0, printed.stdout + printed.stderr
    assert_escaped(printed, "check")
    assert written.read_text() == printed.stdout


def test_the_command_new_suggests_pastes_back_into_bash_as_the_same_path(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """A byte that is not UTF-8 (0xff) is shown as bash's `\\xff`, not as the code point
    Python decodes it to, so the suggested command names the file that was written."""
    folder = "d\udcff\x1b"  # the argv bytes b"d\xff\x1b"
    result = run_cli("new", "n", "--dir", folder)
    assert result.returncode == 0, result.stderr
    hint = result.stdout.splitlines()[1].removeprefix("  nccl-launch validate ")
    assert hint == "$'d\\xff\\x1b/n.toml'"
    pasted = subprocess.run(
        ["bash", "-c", f'printf "%s" {hint}'], capture_output=True, check=True, timeout=120
    )
    assert pasted.stdout == os.fsencode(f"{folder}/n.toml")
    assert (tmp_path / folder / "n.toml").is_file()
