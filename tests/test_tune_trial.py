"""One `tune` trial against the stand-in SGLang server (a real process tree on loopback, started
in a session of its own): measured at the rate its NCCL environment gives, a server that exits
or never gets ready, a launch refused for drift, drift while it runs, Ctrl-C; the tree is
stopped and the port free after each. No GPU here: the stand-in nvidia-smi lists the stand-in's
schedulers as the processes holding GPU memory."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import psutil
import pytest

from nccl_launch.bench.client import Client
from nccl_launch.bench.result import Method, RunFigure
from nccl_launch.findings import Refused
from nccl_launch.live.compare import LiveReport
from nccl_launch.tune import trial
from nccl_launch.tune.orphans import Owner
from nccl_launch.tune.trial import TrialSettings, run_trial, tail_lines
from tests.benching import Ticks
from tests.conftest import RunCli, WriteProfile
from tests.helpers import STANDIN, free_port, stop_left, wait_for
from tests.watching import free

# Each trial's stop signals the server's tree: in a PID namespace of the test's own.
pytestmark = pytest.mark.own_pid_namespace

RATE = 400  # STANDIN_TOKEN_RATE: a run of 40 tokens takes some 0.1 s
SETTINGS = TrialSettings(
    method=Method(max_tokens=40, runs=2, warmup=0, prompt="Hello"),
    ready_timeout=5,
    request_timeout=5,
    stop_grace=2,
)
BEST = {"PROTO": "LL128", "ALGO": "Ring", "MAX_NCHANNELS": 8, "BUFFSIZE": "8MiB", "NTHREADS": 256}
SEED = {"PROTO": "LL", "ALGO": "Ring", "MAX_NCHANNELS": 16, "BUFFSIZE": "16MiB", "NTHREADS": 512}
# Whose trials these are: no journal records their servers.
OWNER = Owner(Path("journal.jsonl"), "sha256:" + "0" * 64, {}, lambda server: None)


class Progress:
    """bench's Progress, kept: what a trial told as it went."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def verified(self, when: str, report: LiveReport) -> None:
        self.told.append(f"{when} ok={report.ok}")

    def ran(self, kind: str, number: int, total: int, figure: RunFigure) -> None:
        self.told.append(f"{kind} {number}/{total}")


class Candidate(Protocol):
    def __call__(self, name: str = "candidate", **nccl: object) -> str: ...


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def candidate(write_profile: WriteProfile, port: int) -> Candidate:
    """A candidate profile file with these NCCL values, its server the stand-in on `port`."""

    def write(name: str = "candidate", **nccl: object) -> str:
        values = [f"{key} = {json.dumps(value)}" for key, value in nccl.items()]
        head = ["schema = 1", 'name = "standin"', "version = 1", "[nccl]", *values]
        server = [f'python = "{sys.executable}"', 'model_path = "/models/m"', "tp_size = 2"]
        text = "\n".join([*head, "[server]", *server, f"port = {port}", ""])
        return str(write_profile(name, text, "tune"))

    return write


@pytest.fixture(autouse=True)
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stand-in as `python -m sglang.launch_server`, rated by its NCCL environment; no
    process a trial started may outlive the test."""
    monkeypatch.setenv("PYTHONPATH", str(STANDIN))
    monkeypatch.setenv("STANDIN_TUNE_MODEL", "1")
    monkeypatch.setenv("STANDIN_SEED", "0")
    monkeypatch.setenv("STANDIN_TOKEN_RATE", str(RATE))
    yield
    assert stop_left() == [], "a trial left processes running"


def test_a_trial_measures_the_rate_the_candidates_environment_gives(
    candidate: Candidate, port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apps = tmp_path / "compute-apps"
    monkeypatch.setenv("PATH", f"{STANDIN / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_COMPUTE_APPS", str(apps))
    # 50 tok/s: runs of 0.61 s (BEST) and 0.78 s (SEED), long against the host's delays.
    monkeypatch.setenv("STANDIN_TOKEN_RATE", "50")
    progress = Progress()
    best = run_trial(candidate("best", **BEST), SETTINGS, tmp_path / "best.log", progress, OWNER)
    assert len(apps.read_text().split()) == 2  # both schedulers held "GPU memory" while up
    # The same port at once: the first server's port and GPU memory were waited free.
    seed = run_trial(candidate("seed", **SEED), SETTINGS, tmp_path / "seed.log", Progress(), OWNER)
    assert (best.status, seed.status) == ("measured", "measured"), (best, seed)
    assert progress.told == ["before ok=True", "run 1/2", "run 2/2", "after ok=True"]
    # The candidate's environment decides its rate: the stand-in's factors for BEST (see
    # TUNE_FACTORS in tests/standin/standin_core.py) make its runs 0.61 s, SEED's 0.78 s; a
    # busy host would have to wake the server or bench 0.17 s late at one end of a run to
    # hide that. The figures themselves are bench's clock's: the test below.
    assert (len(best.runs), len(seed.runs)) == (2, 2)
    assert min(best.runs) > max(seed.runs)
    assert (best.detail, best.exit_code, best.log_tail) == ("", None, [])
    assert best.seconds > sum(40 / run for run in best.runs)  # the whole trial
    assert stat.S_IMODE((tmp_path / "best.log").stat().st_mode) == 0o600
    assert free(port)


def test_a_trials_figures_are_the_times_of_bench_clock(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each look a quarter second after the one before: each run's 39 tokens after the first
    # in 0.25 s, whatever the candidate's rate and however busy the host.
    monkeypatch.setattr(Client, "clock", staticmethod(Ticks(0.25)))
    outcome = run_trial(candidate("best", **BEST), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "measured", outcome
    assert outcome.runs == [156.0, 156.0]


def test_a_server_that_answers_503_at_first_is_waited_for(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_START_DELAY", "0.4")  # /health: 503, then 200
    settings = TrialSettings(Method(max_tokens=10, runs=1, warmup=0, prompt="x"), 5, 5, 2)
    outcome = run_trial(candidate(PROTO="LL"), settings, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "measured", outcome
    assert outcome.seconds > 0.4  # and ready within ready_timeout: it was measured


def test_a_server_that_exits_at_start_is_a_failed_trial_with_its_code_and_masked_tail(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "postgres://tuner:hunter2@db/\x1b[31mruns"
    monkeypatch.setenv("DATABASE_URL", url)  # passed through to the server, which prints it
    monkeypatch.setenv("STANDIN_EXIT_IF", f"NCCL_PROTO=LL,DATABASE_URL={url}")
    outcome = run_trial(candidate(PROTO="Simple"), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert (outcome.status, outcome.exit_code) == ("exited", 1), outcome
    assert outcome.detail == "the server exited with code 1"
    tail = tail_lines(outcome.log_tail)  # as printed and journaled
    assert tail[-1] == r"Invalid value DATABASE_URL=postgres://***@db/\x1b[31mruns"
    assert tail[1].startswith("torch.distributed.DistBackendError: NCCL error")
    assert "hunter2" in (tmp_path / "log").read_text()  # the log keeps what the server said
    assert outcome.runs == []


def test_the_tail_masks_the_credentials_the_server_was_given_wherever_it_prints_them(
    write_profile: WriteProfile, port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, admin, token = "sk-tuned-key-4711", "sk-admin-key-4712", "hf_tunedtoken0815"
    text = f"""schema = 1
name = "standin"
version = 1
[env]
HF_TOKEN = "{token}"
[server]
python = "{sys.executable}"
model_path = "/models/m"
tp_size = 2
port = {port}
args = ["--api-key", "{key}", "--admin-api={admin}"]
"""
    # It logs server_args with the keys, then an error naming the token: neither is an argv.
    monkeypatch.setenv("STANDIN_EXIT_IF", f"HF_TOKEN={token}")
    ref = str(write_profile("secret", text, "tune"))
    outcome = run_trial(ref, SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "exited", outcome
    tail = tail_lines(outcome.log_tail)  # as printed and journaled
    assert tail[0] == (
        "server_args=ServerArgs(model_path='/models/m', api_key='***', admin_api_key='***')"
    )
    assert tail[-1] == "Invalid value HF_TOKEN=***"
    assert key in (tmp_path / "log").read_text()  # the 0600 log keeps what the server said


def test_a_server_never_ready_is_stopped_at_the_timeout(
    candidate: Candidate, port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_HANG_IF", "NCCL_PROTO=LL")
    settings = TrialSettings(SETTINGS.method, 0.5, SETTINGS.request_timeout, 0.5)
    outcome = run_trial(candidate(PROTO="LL"), settings, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "not-ready", outcome
    assert outcome.detail == "no answer 200 from /health within 0.5 s"
    assert outcome.exit_code is None
    assert 0.5 <= outcome.seconds < 60  # stopped at the timeout, not left to run forever
    assert psutil.Process().children(recursive=True) == []
    assert free(port)


def test_a_launch_refused_for_drift_starts_nothing(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    outcome = run_trial(
        candidate(PROTO="LL", ALGO="Ring"), SETTINGS, tmp_path / "log", Progress(), OWNER
    )
    assert outcome.status == "refused", outcome
    assert (
        outcome.detail
        == "the calling environment drifts from the candidate: NCCL_ALGO Ring -> Tree"
    )
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize(
    ("knobs", "when"),
    [
        ({"STANDIN_DRIFT_RANK": "1", "STANDIN_DRIFT": "NCCL_PROTO=Simple"}, "before"),
        ({"STANDIN_DRIFT_AT_REQUEST": "2", "STANDIN_LATE_DRIFT": "NCCL_PROTO=Simple"}, "after"),
    ],
)
def test_a_worker_that_drifts_fails_the_trial_naming_it(
    knobs: dict[str, str],
    when: str,
    candidate: Candidate,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in knobs.items():
        monkeypatch.setenv(key, value)
    outcome = run_trial(candidate(PROTO="LL"), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "drift", outcome
    assert outcome.detail.startswith(f"checked {when}: pid ")
    assert outcome.detail.endswith(": NCCL_PROTO LL -> Simple")
    assert "sglang::scheduler_TP" in outcome.detail
    assert outcome.runs == []


def test_a_server_that_fails_the_measurement_is_a_failed_trial(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_COMPLETIONS_STATUS", "500")
    outcome = run_trial(candidate(PROTO="LL"), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "failed", outcome
    assert outcome.detail.endswith(
        '/v1/completions answered HTTP 500: {"object": "error", "code": 500}'
    )
    assert outcome.exit_code is None


def test_a_log_that_is_a_symlink_is_refused_and_its_target_kept(
    candidate: Candidate, tmp_path: Path
) -> None:
    target = tmp_path / "precious"
    target.write_text("kept\n")
    (tmp_path / "log").symlink_to(target)
    with pytest.raises(Refused, match=r"cannot write the trial's log .*: Too many levels") as got:
        run_trial(candidate(PROTO="LL"), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert [(each.code, each.cause) for each in got.value.findings] == [("trial-log", "host")]
    assert target.read_text() == "kept\n"


def test_a_port_taken_before_the_start_stops_the_tune(
    candidate: Candidate, port: int, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(Refused) as refused:
            run_trial(candidate(PROTO="LL"), SETTINGS, tmp_path / "log", Progress(), OWNER)
    # The finding `run` would say, carried as it is: its code, whose problem, its exit code.
    (finding,) = refused.value.findings
    assert finding.text().startswith(f"127.0.0.1:{port} is in use")
    assert (finding.code, finding.cause, refused.value.exit_code) == ("port", "host", 3)
    assert not (tmp_path / "log").exists()


def test_an_interpreter_run_could_not_start_stops_the_tune_in_runs_words(
    candidate: Candidate, tmp_path: Path
) -> None:
    path = Path(candidate(PROTO="LL"))
    path.write_text(path.read_text().replace(sys.executable, "/nonexistent/python3"))
    refusal = "[server] python /nonexistent/python3 does not exist"
    with pytest.raises(Refused, match=re.escape(refusal)) as refused:
        run_trial(str(path), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert [each.code for each in refused.value.findings] == ["not-executable"]
    assert not (tmp_path / "log").exists()


def test_gpu_memory_still_held_after_the_stop_stops_the_tune(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{STANDIN / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_COMPUTE_APPS", str(tmp_path / "compute-apps"))
    monkeypatch.setenv("STANDIN_GPU_LINGER", "1")  # a driver that never frees it
    monkeypatch.setattr(trial, "RELEASE_TIMEOUT", 0.3)  # not the 10 s a real driver gets
    with pytest.raises(Refused, match=r"after the trial's server stopped: pids \[\d+, \d+\] "):
        run_trial(candidate(PROTO="LL"), SETTINGS, tmp_path / "log", Progress(), OWNER)


# Run as PID 1 of a PID namespace: nothing it starts can outlive it, nor a signal reach others.
CTRL_C = """
import json, os, socket, sys
from pathlib import Path
import psutil
from nccl_launch.bench.result import Method
from nccl_launch.tune.orphans import Owner
from nccl_launch.tune.trial import TrialSettings, run_trial

class Quiet:
    def verified(self, *_): pass
    def ran(self, *_): pass

settings = TrialSettings(Method(max_tokens=10, runs=1, warmup=0, prompt="x"), 30, 5, 1)
try:
    owner = Owner(Path("journal.jsonl"), "sha256:" + "0" * 64, {}, lambda server: None)
    run_trial(sys.argv[1], settings, Path(sys.argv[2]), Quiet(), owner)
except KeyboardInterrupt:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", int(sys.argv[3])))  # free again
    children = psutil.Process().children(recursive=True)  # orphans, reaped by no one here
    left = [child.pid for child in children if child.status() != psutil.STATUS_ZOMBIE]
    print(json.dumps({"left": left}))
    sys.exit(130)
"""


def test_ctrl_c_while_waiting_stops_the_server_and_goes_on(
    candidate: Candidate, port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_HANG_IF", "NCCL_PROTO=LL")
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", CTRL_C]
    argv += [candidate(PROTO="LL"), str(tmp_path / "log"), str(port)]
    unshare = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: not free(port), "the server to listen", process=unshare, timeout=10)
        tune = psutil.Process(unshare.pid).children()[0]  # PID 1 of the namespace
        tune.send_signal(signal.SIGINT)
        out, err = unshare.communicate(timeout=10)
    finally:
        unshare.kill()
        unshare.wait()
    assert unshare.returncode == 130, err
    assert json.loads(out) == {"left": []}
    assert free(port)


# NCCL's own proof: the stand-in prints NCCL's INFO lines when NCCL_DEBUG=INFO asks for them.


def test_a_trial_says_which_values_nccls_own_log_confirmed(
    candidate: Candidate, tmp_path: Path
) -> None:
    outcome = run_trial(candidate("seed", **SEED), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "measured", outcome
    declared = ["NCCL_PROTO", "NCCL_ALGO", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS"]
    assert (sorted(outcome.confirmed), outcome.unconfirmed) == (sorted(declared), [])
    log = (tmp_path / "log").read_text()
    assert re.search(
        r":\d+:\d+ \[1\] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216\.", log
    )


def test_a_trial_replaces_the_callers_nccl_logging_with_its_own(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tune turns NCCL's logging on itself: a shell's NCCL_DEBUG=WARN (or a file for it)
    refuses no trial, and NCCL's lines still come where the trial reads them."""
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "elsewhere.%p"))
    outcome = run_trial(candidate("seed", **SEED), SETTINGS, tmp_path / "log", Progress(), OWNER)
    assert outcome.status == "measured", outcome
    assert (
        "NCCL INFO NCCL_BUFFSIZE set by environment to 16777216." in (tmp_path / "log").read_text()
    )


def test_a_trial_whose_values_nccl_contradicted_or_ignored_is_not_measured(
    candidate: Candidate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NCCL took another protocol (a tuner plugin, say) and never read the algorithm, the two
    # values searched; the threads it took otherwise are the profile's, the same in every trial.
    monkeypatch.setenv("STANDIN_NCCL_SAYS", "NCCL_PROTO=Simple,NCCL_ALGO=,NCCL_NTHREADS=256")
    owner = Owner(OWNER.journal, OWNER.digest, {"PROTO": "LL", "ALGO": "Ring"}, OWNER.started)
    outcome = run_trial(candidate("seed", **SEED), SETTINGS, tmp_path / "log", Progress(), owner)
    assert (outcome.status, outcome.runs) == ("ignored", []), outcome
    rank = r"[\w.-]+:\d+ \[\d\]"
    assert re.fullmatch(
        "NCCL did not apply the candidate's values: "
        rf'NCCL_PROTO LL: {rank} applied "Simple"; {rank} applied "Simple"; '
        rf"NCCL_ALGO Ring: never reported by {rank}, {rank}",
        outcome.detail,
    ), outcome.detail
    assert sorted(outcome.confirmed) == ["NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS"]
    assert sorted(outcome.unconfirmed) == ["NCCL_ALGO", "NCCL_NTHREADS", "NCCL_PROTO"]
    monkeypatch.setenv("STANDIN_NCCL_SAYS", "NCCL_NTHREADS=256")  # those alone: measured
    again = run_trial(candidate("seed", **SEED), SETTINGS, tmp_path / "log", Progress(), owner)
    assert (again.status, again.unconfirmed) == ("measured", ["NCCL_NTHREADS"]), again


def test_a_one_rank_server_that_never_reads_proto_or_algo_is_measured(
    candidate: Candidate, tmp_path: Path
) -> None:
    # As NCCL 2.28.9 did on one H200: a communicator of one rank logs no NCCL_PROTO and no
    # NCCL_ALGO (NCCL tunes no such communicator), and its init line says nranks 1.
    seed = Path(candidate("seed", **SEED))
    seed.write_text(seed.read_text().replace("tp_size = 2", "tp_size = 1"))
    owner = Owner(OWNER.journal, OWNER.digest, {"PROTO": "LL", "ALGO": "Ring"}, OWNER.started)
    outcome = run_trial(str(seed), SETTINGS, tmp_path / "log", Progress(), owner)
    assert outcome.status == "measured", outcome
    assert (sorted(outcome.not_read), outcome.unconfirmed) == (["NCCL_ALGO", "NCCL_PROTO"], [])
    assert " nranks 1 " in (tmp_path / "log").read_text()
    assert " NCCL_PROTO set by environment" not in (tmp_path / "log").read_text()


def test_a_log_without_any_nccl_line_leaves_the_values_unconfirmed_not_the_trial_failed(
    candidate: Candidate, tmp_path: Path
) -> None:
    # The profile's own NCCL_DEBUG=WARN: NCCL prints no INFO line, and tune keeps it.
    outcome = run_trial(
        candidate(DEBUG="WARN", PROTO="LL"), SETTINGS, tmp_path / "log", Progress(), OWNER
    )
    assert outcome.status == "measured", outcome
    assert (outcome.confirmed, sorted(outcome.unconfirmed)) == ([], ["NCCL_DEBUG", "NCCL_PROTO"])
    assert " NCCL INFO " not in (tmp_path / "log").read_text()


def test_a_candidate_whose_value_nccl_contradicted_never_wins(
    candidate: Candidate, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LL128 is the fastest protocol of the stand-in's model, but NCCL says it ran LL.
    monkeypatch.setenv("STANDIN_NCCL_SAYS", "NCCL_PROTO=LL")
    seed = candidate("standin", PROTO="LL")
    method = ("--max-tokens", "20", "--runs", "2", "--warmup", "0")
    result = run_cli("tune", seed, "--try", "PROTO=LL128", *method, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    rows = {row["changes"]: row["outcome"] for row in document["trials"]}
    assert rows["PROTO=LL128"]["status"] == "ignored"
    assert rows["none"]["confirmed"] == ["NCCL_PROTO"]
    winner = next(row for row in document["trials"] if row["digest"] == document["winner"])
    assert winner["changes"] == "none"
