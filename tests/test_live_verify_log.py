"""`verify-log` on multi-rank NCCL_DEBUG=INFO logs, and `run --nccl-debug` that produces them.

tests/logs/ holds NCCL's own logs, unchanged: NCCL 2.28.9 on one H200, one rank
(nccl-2.28.9-one-rank.log) and two ranks on the one GPU (nccl-2.28.9-two-ranks.log), each
with the profile it ran (H200 below). It also holds an 8-rank TP server's log written in
NCCL's line formats (no GPU of eight here): one where every rank applied the tuned values
(also as journalctl prints it), and one where rank 3 took an old BUFFSIZE, rank 5 never logged
NTHREADS and rank 6 rejected 500 threads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Isolation, RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, STANDIN_SERVER, documented, read_record

LOGS = Path(__file__).parent / "logs"
TUNED = """
schema = 1
name = "tuned"
version = 4
[nccl]
PROTO = "LL"
ALGO = "Ring"
P2P_LEVEL = 4
MAX_NCHANNELS = 16
BUFFSIZE = "16MiB"
NTHREADS = 512
SOCKET_IFNAME = "eno1"
"""


# What the H200 runs declared; the two ranks also NCCL_SOCKET_IFNAME=lo. Each rank set its own
# NCCL_HOSTID (proof-host-0, proof-host-1): a value per rank, which no profile declares.
H200 = """
schema = 1
name = "h200"
version = 1
[nccl]
PROTO = "LL"
ALGO = "Ring"
P2P_LEVEL = "SYS"
MAX_NCHANNELS = 16
BUFFSIZE = 16777216
NTHREADS = 512
"""
ONE_RANK = LOGS / "nccl-2.28.9-one-rank.log"
TWO_RANKS = LOGS / "nccl-2.28.9-two-ranks.log"


@pytest.fixture
def tuned(write_profile: WriteProfile) -> None:
    write_profile("tuned", TUNED)


def test_a_one_rank_process_that_ran_the_profile_passes(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("h200", H200)
    result = run_cli("verify-log", "h200", str(ONE_RANK))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[1:] == [
        'note  NCCL_PROTO          "LL": not read: one-rank communicator (1 process)',
        'note  NCCL_ALGO           "Ring": not read: one-rank communicator (1 process)',
        'ok    NCCL_P2P_LEVEL      "SYS": confirmed by 1 process',
        'ok    NCCL_MAX_NCHANNELS  "16": confirmed by 1 process',
        'ok    NCCL_BUFFSIZE       "16777216": confirmed by 1 process',
        'ok    NCCL_NTHREADS       "512": confirmed by 1 process',
        "verify-log passed: 4 of 4 loggable values confirmed, 2 not read (one-rank communicators)",
    ]
    report = json.loads(run_cli("verify-log", "h200", str(ONE_RANK), "--format", "json").stdout)
    assert report["communicators"] == {"vm:498 [0]": {"0x162dc720": 1}}
    assert report["keys"][0]["verdict"] == "not-read"


def test_two_ranks_confirm_the_interface_and_say_their_own_host_ids(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("h200", H200 + 'SOCKET_IFNAME = "lo"\n')
    result = run_cli("verify-log", "h200", str(TWO_RANKS))
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0].endswith(": 2 NCCL processes")
    assert lines[1:] == [
        'ok    NCCL_PROTO          "LL": confirmed by all 2 processes',
        'ok    NCCL_ALGO           "Ring": confirmed by all 2 processes',
        'ok    NCCL_P2P_LEVEL      "SYS": confirmed by all 2 processes',
        'ok    NCCL_MAX_NCHANNELS  "16": confirmed by all 2 processes',
        'ok    NCCL_BUFFSIZE       "16777216": confirmed by all 2 processes',
        'ok    NCCL_NTHREADS       "512": confirmed by all 2 processes',
        'ok    NCCL_SOCKET_IFNAME  "lo": confirmed by all 2 processes',
        'note  NCCL_HOSTID         undeclared, one value per process: "proof-host-0" by '
        'vm:512 [0], "proof-host-1" by vm:513 [0]',
        "verify-log passed: 7 of 7 loggable values confirmed",
    ]


def _edited(tmp_path: Path, rank1: dict[str, str], last: str = "") -> Path:
    """A copy of the real two-rank log where rank 1 (pid 513) says otherwise, as NCCL would
    have: each `old: new` replaced in its lines, none of its lines after the one holding
    `last` (an init that failed there)."""
    lines, ended = [], False
    for line in TWO_RANKS.read_text().splitlines():
        if line.startswith("vm:513:513 "):
            if ended:
                continue
            ended = bool(last) and last in line
            for old, new in rank1.items():
                line = line.replace(old, new)
        lines.append(line)
    path = tmp_path / "edited.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("policy", "said", "reasons"),
    [
        (
            "",
            'note  NCCL_CUMEM_ENABLE   server-owned; tolerated, applied as "0" by 2 of them',
            {"NCCL_HOSTID": "drift", "NCCL_CUMEM_ENABLE": "server-owned"},
        ),
        (
            '[policy]\nundeclared_nccl = "warn"\nserver_owned = []\n',
            'note  NCCL_CUMEM_ENABLE   undeclared; tolerated, applied as "0" by 2 of them',
            {"NCCL_HOSTID": "policy", "NCCL_CUMEM_ENABLE": "policy"},
        ),
        (
            "[policy]\nserver_owned = []\n",
            'warn  NCCL_CUMEM_ENABLE   undeclared, applied as "0" by 2 of them',
            {"NCCL_HOSTID": "drift", "NCCL_CUMEM_ENABLE": "drift"},
        ),
    ],
)
def test_a_value_the_server_sets_itself_is_said_as_check_says_it(
    policy: str,
    said: str,
    reasons: dict[str, str],
    write_profile: WriteProfile,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    """SGLang sets NCCL_CUMEM_ENABLE in its workers (its kind's `server_owned`): each rank's
    log then says it applied it, and `check` tolerates it in the live server, as here."""
    write_profile("h200", H200 + 'SOCKET_IFNAME = "lo"\n' + policy)
    owned = " NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0."
    lines = [
        f"{line}\n{line.split(' NCCL INFO ')[0]}{owned}"
        if "NCCL_P2P_LEVEL set by environment" in line
        else line
        for line in TWO_RANKS.read_text().splitlines()
    ]
    log = tmp_path / "owned.log"
    log.write_text("\n".join(lines) + "\n")
    result = run_cli("verify-log", "h200", str(log))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[-2] == said
    found = json.loads(run_cli("verify-log", "h200", str(log), "--format", "json").stdout)
    assert found["reasons"] == reasons


def test_the_rank_that_applied_another_protocol_is_named(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    # Rank 1 set NCCL_PROTO=Simple inside itself: the ranks disagree, and a job hangs.
    write_profile("h200", H200)
    said = "NCCL_PROTO set by environment to "
    log = _edited(tmp_path, {f"{said}LL": f"{said}Simple"})
    result = run_cli("verify-log", "h200", str(log))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[1] == 'fail  NCCL_PROTO          "LL": vm:513 [0] applied "Simple"'
    assert lines[-1] == "verify-log failed: 5 of 6 loggable values confirmed"
    report = json.loads(run_cli("verify-log", "h200", str(log), "--format", "json").stdout)
    assert report["keys"][0] == {
        "key": "NCCL_PROTO", "expected": "LL", "verdict": "mismatch",
        "detail": 'vm:513 [0] applied "Simple"',
    }  # fmt: skip


def test_an_init_that_failed_says_why_in_ncclss_warning(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    # Rank 1 read "LL " (a trailing blank): NCCL 2.28.9 warns, with its timestamp, and the
    # init fails, so no Init COMPLETE and nothing after the warning.
    write_profile("h200", H200)
    warning = (
        "[2026-12-04 18:03:05] vm:513:513 [0] graph/tuning.cc:104 NCCL WARN Unrecognized "
        'element token "LL " when parsing "LL "'
    )
    said = "NCCL_PROTO set by environment to "
    log = _edited(tmp_path, {f"{said}LL": f"{said}LL \n\n{warning}"}, last=said)
    result = run_cli("verify-log", "h200", str(log))
    assert result.returncode == 1
    out = result.stdout.splitlines()
    assert out[1:3] == [
        'fail  NCCL_PROTO          "LL": vm:513 [0] applied "LL "',
        'fail  NCCL_ALGO           "Ring": never reported by vm:513 [0] (its init never completed)',
    ]
    assert out[-2] == (
        'warn  vm:513 [0] NCCL WARN graph/tuning.cc:104 Unrecognized element token "LL " when '
        'parsing "LL "'
    )
    report = json.loads(run_cli("verify-log", "h200", str(log), "--format", "json").stdout)
    assert report["warnings"] == {
        "vm:513 [0]": ['graph/tuning.cc:104 Unrecognized element token "LL " when parsing "LL "']
    }


@pytest.mark.parametrize("log", ["tp8-applied.log", "tp8-journal.log"])
def test_every_rank_confirms_every_loggable_value(tuned: None, run_cli: RunCli, log: str) -> None:
    result = run_cli("verify-log", "tuned", str(LOGS / log))
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].startswith("verify-log tuned@4 (sha256:")
    assert lines[0].endswith(f"against {LOGS / log}: 8 NCCL processes")
    assert lines[1:] == [
        'ok    NCCL_PROTO          "LL": confirmed by all 8 processes',
        'ok    NCCL_ALGO           "Ring": confirmed by all 8 processes',
        'ok    NCCL_P2P_LEVEL      "SYS": confirmed by all 8 processes',
        'ok    NCCL_MAX_NCHANNELS  "16": confirmed by all 8 processes',
        'ok    NCCL_BUFFSIZE       "16777216": confirmed by all 8 processes',
        'ok    NCCL_NTHREADS       "512": confirmed by all 8 processes',
        'ok    NCCL_SOCKET_IFNAME  "eno1": confirmed by all 8 processes',
        "verify-log passed: 7 of 7 loggable values confirmed",
    ]


def test_values_applied_differently_or_never_are_failures(tuned: None, run_cli: RunCli) -> None:
    result = run_cli(
        "verify-log", "tuned", "-", "--format", "json", stdin_path=LOGS / "tp8-drifted.log"
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    verdicts = {key["key"]: (key["verdict"], key["detail"]) for key in report["keys"]}
    assert verdicts["NCCL_BUFFSIZE"] == ("mismatch", 'gpu-node-7:48304 [3] applied "4194304"')
    assert verdicts["NCCL_NTHREADS"] == (
        "mismatch",
        'gpu-node-7:48307 [6] said "Invalid NCCL_NTHREADS 500 (must be a multiple of 32)"; '
        "never reported by gpu-node-7:48306 [5]",
    )
    assert verdicts["NCCL_PROTO"][0] == "ok"
    assert report["undeclared"] == {"NCCL_IB_HCA": {"gpu-node-7:48301 [0]": "mlx5_0"}}
    assert report["source"] == "stdin"
    assert len(report["processes"]) == 8


def test_a_rank_that_never_logged_a_value_is_unconfirmed(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    lines = (LOGS / "tp8-drifted.log").read_text().splitlines()
    log = tmp_path / "partial.log"
    log.write_text("\n".join(line for line in lines if "Invalid" not in line) + "\n")
    result = run_cli("verify-log", "tuned", str(log))
    assert result.returncode == 1
    assert (
        'fail  NCCL_NTHREADS       "512": never reported by gpu-node-7:48306 [5], '
        "gpu-node-7:48307 [6]"
    ) in result.stdout.splitlines()
    assert 'warn  NCCL_IB_HCA         undeclared, applied as "mlx5_0" by 1 of them' in result.stdout


def test_a_log_without_nccl_lines_says_how_to_get_them(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("[2026-11-29 09:14:02] INFO The server is fired up and ready to roll!\n")
    result = run_cli("verify-log", "tuned", str(log))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert (
        lines[1]
        == 'fail  NCCL_PROTO          "LL": never reported by any process (no NCCL INFO lines)'
    )
    assert lines[-2] == "no NCCL INFO lines: start the server with nccl-launch run --nccl-debug"


def test_run_nccl_debug_adds_the_logging_verify_log_needs(
    tuned: None, nccl_launch: RunCli, tmp_path: Path
) -> None:
    out = tmp_path / "child.json"
    result = nccl_launch("run", "--nccl-debug", "tuned", "--", sys.executable, str(STANDIN_SERVER),
                         env={"STANDIN_RECORD": str(out)})  # fmt: skip
    assert result.returncode == 0, result.stderr
    env = read_record(out)["env"]
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,ENV")
    assert env["NCCL_LAUNCH_NCCL_DEBUG"] == "1"


def test_nccl_debug_will_not_override_a_declared_debug_setting(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("tuned", TUNED + 'DEBUG = "WARN"\n')
    result = run_cli("run", "--nccl-debug", "tuned", "--", "true")
    assert (result.returncode, result.stderr) == (
        2, "nccl-launch: the profile declares NCCL_DEBUG; drop it or --nccl-debug\n")  # fmt: skip


# Lines that made the old pattern backtrack at every position (minutes for 200 KB), and a
# PID too long for int(); each between the real lines of an 8-rank log, and just under the
# 1 MiB beyond which a line is skipped unread.
HOSTILE_LINES = [
    " " * 1_000_000,
    "a:1:" * 250_000,
    " a:1:2 [" * 125_000,
    "gpu-node-7:48301:48301 [0] NCCL INFO " + " " * 1_000_000 + "x",
    "gpu-node-7:48301:48301 [0] NCCL INFO Invalid NCCL_X a (" + ")" * 1_000_000,
    "h:1:1 [" + " [" * 500_000 + "] NCCL INFO NCCL_PROTO set by environment to Simple",
    f"h:{'1' * 5000}:1 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_1",
    "[2026-12-04 18:03:05] " + "] " * 500_000 + "NCCL WARN x",
    "gpu-node-7:48301:48301 [0] " + "x.cc:1 " * 140_000 + "NCCL WARN y",
    "gpu-node-7:48301:48301 [0] NCCL INFO ncclCommInitRank comm" + " x" * 500_000 + " - Init START",
]


def test_megabyte_lines_are_read_in_linear_time(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    lines = (LOGS / "tp8-applied.log").read_text().splitlines()
    log = tmp_path / "hostile.log"
    log.write_text("\n".join(lines[:40] + HOSTILE_LINES + lines[40:]) + "\n")
    result = run_cli("verify-log", "tuned", str(log))  # the fixture's timeout: 60 s
    assert (result.returncode, result.stderr) == (1, "")
    out = result.stdout.splitlines()
    assert out[0].endswith(": 9 NCCL processes")  # the 8 ranks, and the long PID's
    assert 'ok    NCCL_PROTO          "LL": confirmed by all 9 processes' not in out
    assert "never reported by h:111111" in result.stdout
    assert out[-1] == "verify-log failed: 0 of 7 loggable values confirmed"
    assert 'NCCL_IB_HCA         undeclared, applied as "mlx5_1" by 1 of them' in result.stdout


@pytest.mark.parametrize(("kind", "make"), [("a FIFO", os.mkfifo), ("a character device", None)])
def test_a_log_is_a_regular_file_or_stdin(
    tuned: None, run_cli: RunCli, tmp_path: Path, kind: str, make: Any
) -> None:
    path = tmp_path / "log" if make else Path("/dev/zero")
    if make:
        make(path)
    result = run_cli("verify-log", "tuned", str(path))
    assert (result.returncode, result.stderr) == (
        2, f"nccl-launch: log {path}: {kind}; only regular files are read\n")  # fmt: skip


def test_a_profile_without_nccl_keys_against_a_log_without_nccl_lines(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("bare", 'schema = 1\nname = "bare"\nversion = 1\n')
    log = tmp_path / "empty.log"
    log.write_text("")
    result = run_cli("verify-log", "bare", str(log))
    assert (result.returncode, result.stderr) == (1, "")
    assert result.stdout.splitlines()[1:] == [
        "no NCCL INFO lines: start the server with nccl-launch run --nccl-debug",
        "verify-log failed: 0 of 0 loggable values confirmed",
    ]


def test_bytes_that_are_not_utf8_on_stdin_are_replaced(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    log = b"host:12:34 [0] NCCL INFO NCCL_PROTO set by environment to L\xffL\n"
    result = subprocess.run(
        [console_script(), "verify-log", "p", "--format", "json"],
        input=log, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["keys"][0]["verdict"] == "mismatch"
    assert "L\ufffdL" in report["keys"][0]["detail"]


def test_a_line_longer_than_1_mib_is_skipped_and_said_once(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    # A server may print a huge line of its own (a request, a traceback's repr); NCCL's are
    # short, so the lines around it still prove what each rank applied.
    lines = (LOGS / "tp8-applied.log").read_text().splitlines()
    log = tmp_path / "huge.log"
    longest = "x" * (1 << 20)  # kept: 1 MiB without its line end
    huge = "gpu-node-7:48301:48301 [0] NCCL INFO NCCL_PROTO set by environment to " + longest
    log.write_text("\n".join([*lines[:40], longest, huge, huge + "\r", *lines[40:]]) + "\n")
    result = run_cli("verify-log", "tuned", str(log))
    assert result.returncode == 0, result.stdout[-500:]
    assert result.stderr == (
        f"nccl-launch: warning: log {log}: 2 lines longer than 1 MiB skipped (the first is "
        "line 42); NCCL's INFO lines are short\n"
    )
    assert "verify-log passed: 7 of 7 loggable values confirmed" in result.stdout


def test_an_endless_line_on_a_pipe_is_read_in_bounded_memory(tuned: None) -> None:
    """Through the console script, 64 MiB without a line end before a real log: the peak
    memory of the process is that of reading the log alone, give or take a few MiB."""

    def peak_kib(filler: int) -> tuple[int, str]:
        child = subprocess.Popen(
            [console_script(), "verify-log", "tuned", "-"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert child.stdin is not None and child.stderr is not None
        try:
            for _ in range(filler):
                child.stdin.write(b"x" * (1 << 20))
            child.stdin.write(b"\n" + (LOGS / "tp8-applied.log").read_bytes())
            child.stdin.close()
        except BrokenPipeError:
            pass
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        assert child.returncode == 0, child.stderr.read()
        return usage.ru_maxrss, child.stderr.read().decode()

    alone, _ = peak_kib(0)
    endless, said = peak_kib(64)
    assert endless - alone < 16 << 10, (alone, endless)
    assert said.endswith("1 line longer than 1 MiB skipped (the first is line 1); NCCL's INFO "
                         "lines are short\n")  # fmt: skip


def test_the_commands_reference_shows_what_verify_log_prints_of_the_real_logs(
    isolated: Isolation,
) -> None:
    """docs/commands.md: each command of its NCCL 2.28.9 examples, the two edits of the
    two-rank log included, run in order as printed, prints what the page shows."""
    page = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    assert f"```toml\n{H200.lstrip()}```" in page
    (isolated.root / "profiles" / "h200.toml").write_text(H200.lstrip())
    two = H200.replace('"h200"', '"h200-two"') + 'SOCKET_IFNAME = "lo"\n'
    (isolated.root / "profiles" / "h200-two.toml").write_text(two.lstrip())
    shutil.copy(ONE_RANK, isolated.root / "one-rank.log")
    shutil.copy(TWO_RANKS, isolated.root / "two-ranks.log")
    block = page.split("$ nccl-launch verify-log h200 one-rank.log\n", 1)[1]
    block = "$ nccl-launch verify-log h200 one-rank.log\n" + block.split("```\n\nWhich names", 1)[0]
    commands = [line for line in block.splitlines() if line.startswith("$ ")]
    verify = [command for command in commands if command.startswith("$ nccl-launch")]
    assert len(verify) == 5
    for command in commands:
        if command == "$ echo $?":
            continue
        script = command[2:].replace("nccl-launch", console_script(), 1)
        result = subprocess.run(
            ["bash", "-c", f"{script} 2>&1"],
            cwd=isolated.root, capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        expected, code = documented(command[2:])
        assert (result.stdout.splitlines(), result.returncode) == (expected, code), command


def run_folder_of(log: Path, folder: Path) -> dict[str, list[str]]:
    """`log`'s NCCL lines split as `run --nccl-debug` has them written: a file per process,
    `HOST.PID.log`, beside the run's `pid`; each file's lines, by name."""
    files: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        host, pid, *_ = [*line.split(" ", 1)[0].split(":"), ""]
        if " NCCL " in line and pid.isdigit():
            files.setdefault(f"{host}.{pid}.log", []).append(line)
    folder.mkdir()
    (folder / "pid").write_text("48300\n")
    for name, lines in files.items():
        (folder / name).write_text("\n".join(lines) + "\n")
    return files


def test_a_run_folder_is_read_file_by_file_each_process_named_with_its_file(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    """The 8-rank drifted log as `run --nccl-debug` writes it, a file per rank: the verdicts
    of the one log, each process named with its file; JSON lists each file's processes."""
    folder = tmp_path / "20261129T091402Z-48300"
    files = run_folder_of(LOGS / "tp8-drifted.log", folder)
    assert len(files) == 8
    result = run_cli("verify-log", "tuned", str(folder))
    assert (result.returncode, result.stderr) == (1, "")
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"verify-log tuned@4 (sha256:cfdee08d) against {folder}: 8 NCCL processes in 8 files"
    )
    assert (
        'fail  NCCL_BUFFSIZE       "16777216": gpu-node-7:48304 [3] (gpu-node-7.48304.log) '
        'applied "4194304"'
    ) in lines
    whole = run_cli("verify-log", "tuned", str(LOGS / "tp8-drifted.log"), "--format", "json")
    report = json.loads(run_cli("verify-log", "tuned", str(folder), "--format", "json").stdout)
    assert [key["verdict"] for key in report["keys"]] == [
        key["verdict"] for key in json.loads(whole.stdout)["keys"]
    ]
    assert report["source"] == str(folder)
    assert report["files"] == {
        name: [f"gpu-node-7:{name.split('.')[1]} [{rank}] ({name})"]
        for rank, name in enumerate(sorted(files))
    }
    assert report["processes"] == [process for [process] in report["files"].values()]


def test_a_folder_without_logs_says_so(tuned: None, run_cli: RunCli, tmp_path: Path) -> None:
    """A run whose NCCL never started wrote no log: nothing confirms the values, exit 1, as
    for a log without NCCL's lines; a file without NCCL's lines is named."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "pid").write_text("1\n")
    result = run_cli("verify-log", "tuned", str(folder))
    assert (result.returncode, result.stderr) == (1, "")
    lines = result.stdout.splitlines()
    assert lines[0].endswith(f"against {folder}: 0 NCCL processes in 0 files")
    assert lines[-2:] == [
        f"no NCCL log in {folder}: NCCL started in no process of that run",
        "verify-log failed: 0 of 7 loggable values confirmed",
    ]
    assert (
        json.loads(run_cli("verify-log", "tuned", str(folder), "--format", "json").stdout)["files"]
        == {}
    )
    (folder / "vm.7.log").write_text("")
    result = run_cli("verify-log", "tuned", str(folder))
    assert result.returncode == 1
    assert "note  vm.7.log: no NCCL INFO lines" in result.stdout.splitlines()


def test_a_folders_logs_are_regular_files_never_followed(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    """A symlink or a FIFO among the logs is refused as a LOG of that kind is (exit 2), the
    file named: nothing in the folder leads elsewhere."""
    folder = tmp_path / "run"
    run_folder_of(LOGS / "tp8-applied.log", folder)
    (folder / "vm.9.log").symlink_to(LOGS / "tp8-drifted.log")
    result = run_cli("verify-log", "tuned", str(folder))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"nccl-launch: log {folder}/vm.9.log: a symlink, not followed; only regular files are "
        "read\n"
    )
    (folder / "vm.9.log").unlink()
    os.mkfifo(folder / "vm.9.log")
    result = run_cli("verify-log", "tuned", str(folder))
    assert result.returncode == 2
    assert result.stderr == (
        f"nccl-launch: log {folder}/vm.9.log: a FIFO; only regular files are read\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="root reads another user's log")
def test_as_root_another_users_log_in_the_folder_is_read_as_a_log_file_is(
    tuned: None, run_cli: RunCli, tmp_path: Path
) -> None:
    """`verify-log LOG` reads a log whoever owns it (it shapes no process, it is only
    judged): in a folder too."""
    folder = tmp_path / "run"
    run_folder_of(LOGS / "tp8-applied.log", folder)
    for path in folder.iterdir():
        os.chown(path, 65534, 65534)
    result = run_cli("verify-log", "tuned", str(folder))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[0].endswith(": 8 NCCL processes in 8 files")


# Two ranks of a stand-in NCCL (`nccl_info` of the stand-in servers), started by `run`
# after `--`, each writing its INFO lines to the file NCCL_DEBUG_FILE names.
RANKS = (
    "python3 -c \"import standin_core as s; s.nccl_info('0')\" & "
    "python3 -c \"import standin_core as s; s.nccl_info('1')\"; wait"
)


def test_latest_reads_the_profiles_newest_run_folder(
    tuned: None, nccl_launch: RunCli, run_cli: RunCli, isolated: Isolation
) -> None:
    """The installed script's `run --nccl-debug`, twice (the first with a rank whose NCCL
    applied another protocol): `--latest` reads the second run's folder, file by file."""
    env = {"PYTHONPATH": str(STANDIN)}
    first = nccl_launch("run", "--nccl-debug", "tuned", "--", "sh", "-c", RANKS,
                        env={**env, "STANDIN_NCCL_SAYS": "NCCL_PROTO=Simple"})  # fmt: skip
    assert first.returncode == 0, first.stderr
    runs = isolated.home / ".local" / "state" / "nccl-launch" / "nccl-debug" / "tuned"
    [older] = runs.iterdir()
    assert run_cli("verify-log", "tuned", "--latest").returncode == 1
    second = nccl_launch("run", "--nccl-debug", "tuned", "--", "sh", "-c", RANKS, env=env)
    assert second.returncode == 0, second.stderr
    [newest] = set(runs.iterdir()) - {older}
    result = run_cli("verify-log", "tuned", "--latest")
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0].endswith(f"against {newest}: 2 NCCL processes in 2 files")
    assert lines[-1] == "verify-log passed: 7 of 7 loggable values confirmed"
    report = json.loads(run_cli("verify-log", "tuned", "--latest", "--format", "json").stdout)
    assert sorted(report["files"]) == sorted(path.name for path in newest.glob("*.log"))


def test_latest_without_a_run_or_with_a_log_is_said(tuned: None, run_cli: RunCli) -> None:
    result = run_cli("verify-log", "tuned", "--latest")
    assert (result.returncode, result.stdout) == (3, "")
    runs = Path.home() / ".local" / "state" / "nccl-launch" / "nccl-debug" / "tuned"
    assert result.stderr == (
        f"nccl-launch: no run of tuned with --nccl-debug: {runs} does not exist; start it "
        "with: nccl-launch run --nccl-debug tuned\n"
    )
    result = run_cli("verify-log", "tuned", "--latest", "server.log")
    assert result.returncode == 2
    assert "give --latest or LOG 'server.log', not both" in result.stderr
