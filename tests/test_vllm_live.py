"""`run`, `check`, `capture`, `bench` and `tune` against the vLLM stand-in (tests/standin/vllm:
vLLM 0.33.0's process tree, the environment it changes, its streaming API and its API key) as
they work against the SGLang one; and vLLM's API key read as vLLM reads it."""

from __future__ import annotations

import json
import os
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest

from nccl_launch.profile.load import load_profile
from nccl_launch.tune.candidates import exposed_host
from nccl_launch.vllm.kind import VLLM
from tests.benching import FAST, default_history
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import Server, free_port
from tests.standins import StartVllm, vllm_profile
from tests.tuning import CLEAR, MODEL
from tests.tuning import FAST as FAST_TRIALS
from tests.watching import Watcher, alive, listening

KEY = "sk-vllm-5e1d20"
# tune's short trials; vLLM's tree starts in two spawn generations (the engine core, then its
# workers): on a busy 2-core host that takes longer than --ready-timeout 2.
TRIALS = (*FAST_TRIALS[:-1], "10")
WORKERS = ("VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1")


def titles(document: dict[str, Any]) -> list[str]:
    return sorted(p["title"] for p in document["processes"] if p["title"].startswith("VLLM::"))


# run and check


def test_run_execs_vllm_and_check_sees_its_tree_without_drift(
    start_vllm: StartVllm, run_cli: RunCli
) -> None:
    server = start_vllm()
    main = psutil.Process(server.process.pid)  # run exec'd: the server is the process started
    assert main.cmdline()[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]
    assert {key: main.environ()[key] for key in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_BUFFSIZE")} == {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_BUFFSIZE": "16777216",
    }
    result = run_cli("check", "vstandin", "--port", str(server.port))
    assert result.returncode == 0, result.stdout + result.stderr
    for title in WORKERS:
        assert f"  {title}\n" in result.stdout
    # The API server, multiprocessing's resource tracker (spawn), the engine core, 2 workers.
    assert result.stdout.splitlines()[-1] == "no drift in 5 processes"
    assert "tolerated" not in result.stdout  # vLLM sets no NCCL variable here
    found = run_cli("check", "--pid", str(server.process.pid), "--format", "json")
    document = json.loads(found.stdout)
    assert (found.returncode, document["running_profile"]) == (0, "vstandin@1")
    assert titles(document) == sorted(WORKERS)


def test_check_names_the_vllm_worker_whose_environment_differs(
    start_vllm: StartVllm, run_cli: RunCli
) -> None:
    server = start_vllm(env={"STANDIN_DRIFT_RANK": "1", "STANDIN_DRIFT": "NCCL_PROTO=Simple"})
    result = run_cli("check", "--port", str(server.port))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    worker = next(i for i, line in enumerate(lines) if line.endswith("VLLM::Worker_TP1"))
    assert lines[worker + 1].split()[:5] == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"']
    assert lines[-2] == "drift: 1 drift, of 5 processes"


SLEEP = 'args = ["--enable-sleep-mode", "--sleep-mode-offload-cudagraph"]\n'


def test_check_tolerates_the_graph_register_vllm_sets_in_sleep_mode_and_nothing_more(
    start_vllm: StartVllm, run_cli: RunCli
) -> None:
    # With sleep mode offloading CUDA graphs, vLLM's API server sets NCCL_GRAPH_REGISTER=0
    # before it starts the engine: every process it starts then inherits it, the resource
    # tracker, the engine core and the workers; its own /proc/PID/environ has none.
    sleeping = start_vllm(SLEEP)
    result = run_cli("check", "vstandin", "--port", str(sleeping.port))
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("tolerated: NCCL_GRAPH_REGISTER") == 4
    # Without sleep mode vLLM sets none: the same variable in a worker is drift.
    awake = start_vllm(env={"STANDIN_DRIFT_RANK": "0", "STANDIN_DRIFT": "NCCL_GRAPH_REGISTER=0"})
    result = run_cli("check", "vstandin", "--port", str(awake.port))
    assert result.returncode == 1, result.stdout
    assert '  + NCCL_GRAPH_REGISTER  "0"' in result.stdout


@pytest.mark.own_pid_namespace
def test_watch_stops_the_whole_vllm_tree_when_a_late_worker_drifts(start_vllm: StartVllm) -> None:
    server = start_vllm(env={"STANDIN_LATE_DRIFT": "NCCL_PROTO=Simple"})
    pid = str(server.process.pid)
    watcher = Watcher("--pid", pid, "--watch", "0.2", "--on-drift", "stop", "--grace", "5")
    watcher.wait_for_line("no drift in 5 processes")
    os.kill(server.process.pid, signal.SIGUSR1)  # the engine core starts one more worker
    out = watcher.finish()
    server.process.wait(timeout=10)  # reap it: we are its parent
    assert watcher.process.returncode == 1, out
    assert '"LL" -> "Simple"' in out  # VLLM::Worker_TP2, seen and stopped
    assert f"stopped the server: 6 processes of pid {pid}'s tree ended" in out
    assert alive(server.tree) == []


# capture


def test_capture_of_a_running_vllm_server_gives_a_profile_of_its_argv(
    run_cli: RunCli, tmp_path: Path
) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "/models/m",
            "--tensor-parallel-size", "2", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    server = Server(argv, {"NCCL_PROTO": "LL", "SPT_NOENV": "1"}, port)
    try:
        result = run_cli("capture", "--pid", str(server.process.pid), "--name", "captured")
        running = psutil.Process(server.process.pid).cmdline()
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("profiles/captured.toml").read_text())
    assert (profile["server"]["kind"], profile["nccl"]) == ("vllm", {"PROTO": "LL"})
    shown = run_cli("show", "captured", "--format", "json")
    assert json.loads(shown.stdout)["argv"] == running


# bench


def test_bench_measures_vllm_and_stamps_it(
    start_vllm: StartVllm, run_cli: RunCli, tmp_path: Path
) -> None:
    # EAGLE-3 with 3 drafts: each event carries 4 tokens; the count comes from the usage.
    speculative = '[server.speculative]\nmethod = "eagle3"\nmodel = "/models/d"\n'
    server = start_vllm('args = ["--served-model-name", "m-alias"]\n' + speculative.replace(
        '"/models/d"\n', '"/models/d"\nnum_speculative_tokens = 3\n'))  # fmt: skip
    result = run_cli("bench", "vstandin", *FAST, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["status"] == "measured"
    assert (document["server"], document["server_version"]) == ("vllm", "0.33.0")
    assert (document["sglang_version"], document["model"]) == (None, "m-alias")
    assert [run["tokens"] for run in document["runs"]] == [60, 60]
    text = run_cli("bench", "vstandin", *FAST)
    assert text.returncode == 0, text.stderr
    assert f"server  http://127.0.0.1:{server.port}: vLLM 0.33.0, model m-alias" in text.stdout
    history = run_cli("bench", "--history", "vstandin")
    rows = history.stdout.splitlines()[2:]
    assert [row.split()[5:8] for row in rows] == [["-", "vLLM", "0.33.0"]] * 2  # no prefill


def test_bench_measures_a_vllm_server_a_profile_without_server_table_runs(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    # The profile's env only; the command after `--`: a request names no model, so that
    # vLLM serves it as its own; nothing says the kind, so the result names none.
    port = free_port()
    text = vllm_profile(port)
    write_profile("vstandin", text[: text.index("[server]")])
    serve = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "/models/m", "-tp", "2"]
    argv = [console_script(), "run", "vstandin", "--", *serve, "--port", str(port)]
    server = Server(argv, {}, port)
    try:
        result = run_cli("bench", "vstandin", "--url", f"http://127.0.0.1:{port}", *FAST,
                         "--format", "json")  # fmt: skip
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert (document["status"], document["server"], document["server_version"]) == (
        "measured",
        None,
        None,
    )


@pytest.mark.parametrize(
    ("server", "top", "env_file", "after"),
    [
        (f'args = ["--api_key", "sk-other", "{KEY}"]\n', "", None, ()),
        ("", 'env_files = ["vstandin.env"]\n', f"VLLM_API_KEY={KEY}\n", ()),
        ("", 'env_files = ["vstandin.env"]\n', "VLLM_API_KEY=sk-unused\n", ("--api-key", KEY)),
    ],
    ids=["several-keys-in-args", "env-file", "the-flag-wins"],
)
def test_bench_sends_a_key_vllm_checks_and_nothing_shows_it(
    server: str,
    top: str,
    env_file: str | None,
    after: tuple[str, ...],
    start_vllm: StartVllm,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    if env_file is not None:
        path = tmp_path / "profiles" / "vstandin.env"
        path.parent.mkdir(exist_ok=True)
        path.write_text(env_file)
        path.chmod(0o600)
    started = start_vllm(server, top=top, after=after)
    result = run_cli("bench", "vstandin", *FAST, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["status"] == "measured"
    history = default_history(tmp_path / "home").read_text()
    checked = run_cli("check", "vstandin", "--pid", str(started.process.pid))
    assert KEY not in result.stdout + result.stderr + history + checked.stdout


def test_a_key_from_the_environment_no_http_header_carries_is_refused_unshown(
    start_vllm: StartVllm, run_cli: RunCli
) -> None:
    # No --api-key: vLLM reads VLLM_API_KEY, which the server inherited from run's caller.
    start_vllm(env={"VLLM_API_KEY": "k\u00e9y "})
    result = run_cli("bench", "vstandin", *FAST)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "its VLLM_API_KEY holds a character an HTTP header cannot carry" in result.stderr
    assert "k\u00e9y" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("argv", "env", "key"),
    [
        (["vllm", "serve", "/m", "--api-key", "a", "b", "--port", "1"], {}, "a"),  # nargs "+"
        (["--api-key=a=b", "c"], {}, "a=b"),  # `=`: one word, the next is a positional
        (["--api_key", "a"], {}, "a"),  # `_` read as `-`
        (["--api-k", "a"], {}, "a"),  # the shortest prefix (--api-server-count)
        (["--api-key", "a", "--api-key", "b"], {}, "b"),  # the last one wins
        (["--api-key", "", "b"], {}, "b"),  # empty keys are dropped
        (["--api-key", "-5"], {}, "-5"),  # argparse reads a negative number as a value
        (["--api-key", "a", "--", "b"], {}, "a"),
        ([], {"VLLM_API_KEY": "e"}, "e"),
        (["--api-key", ""], {"VLLM_API_KEY": "e"}, None),  # the flag wins, even empty
        ([], {"VLLM_API_KEY": ""}, None),
        (["--api-key-x", "a"], {}, None),
    ],
)
def test_the_api_key_is_read_as_vllm_reads_it(
    argv: list[str], env: dict[str, str], key: str | None
) -> None:
    assert VLLM.credentials.request_key(argv, env) == key


# tune


@pytest.mark.slow
@pytest.mark.own_pid_namespace
def test_tune_of_a_vllm_profile_locks_its_trials_to_loopback_and_writes_the_winner(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    port = free_port()
    write_profile("vstandin", vllm_profile(port, host=""))  # vLLM's default: every address
    env = CLEAR | {"STANDIN_START_DELAY": "0.5"}  # LL128 doubles the rate: plain on a busy host
    with listening(port) as seen:  # up, not ready for 0.5 s: time to look
        result = run_cli("tune", "vstandin", "--try", "PROTO=LL128", *TRIALS, "--write", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert seen == {"127.0.0.1"}
    warning, plan = result.stderr.splitlines()
    assert warning == (
        "nccl-launch: warning: vstandin@1's server gives no --api-key and its host 0.0.0.0 is "
        "not a loopback address: each trial listens on 127.0.0.1 alone, and is measured "
        "there; a version --write writes keeps host 0.0.0.0"
    )
    assert plan.startswith("the search starts a server at least 4 times "), plan
    assert "winner (changes PROTO=LL128): " in result.stdout, result.stdout
    assert "wrote profiles/vstandin-2.toml" in result.stdout, result.stdout
    written = tomllib.loads((tmp_path / "profiles" / "vstandin-2.toml").read_text())
    assert (written["server"]["kind"], written["nccl"]["PROTO"]) == ("vllm", "LL128")
    assert "host" not in written["server"]
    assert written["baseline"]["decode_tok_s"] > 0


@pytest.mark.parametrize(
    ("args", "env_file", "exposed"),
    [
        ("", None, VLLM.api.default_host),  # every address
        ("", "VLLM_API_KEY=sk-site\n", None),  # vLLM checks the key of its environment
        ("", "VLLM_API_KEY=\n", VLLM.api.default_host),  # an empty one is none
        ('args = ["--api-key", "${API_KEY}"]\n', "API_KEY=sk-site\n", None),
    ],
)
def test_a_vllm_trial_is_locked_to_loopback_unless_its_server_would_check_a_key(
    args: str, env_file: str | None, exposed: str | None, write_profile: WriteProfile
) -> None:
    top = ""
    if env_file is not None:
        top = 'env_files = ["vstandin.env"]\n'
        path = Path("profiles/vstandin.env")
        path.parent.mkdir(exist_ok=True)
        path.write_text(env_file)
        path.chmod(0o600)
    write_profile("vstandin", vllm_profile(free_port(), args, top, host=""))
    assert exposed_host(load_profile("vstandin")) == exposed


@pytest.mark.own_pid_namespace
def test_a_short_key_vllm_logs_at_start_stays_out_of_a_failed_trials_tail_and_journal(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """vLLM without its redaction logs `non-default args: {'api_key': ['KEY']}`: a key shorter
    than any value masked wherever it appears, in a list."""
    key = "s3cr3tK"
    write_profile("vstandin", vllm_profile(free_port(), f'args = ["--api-key", "{key}"]\n'))
    env = MODEL | {"STANDIN_UNREDACTED_ARGS": "1", "STANDIN_EXIT_IF": "NCCL_PROTO=LL128"}
    result = run_cli("tune", "vstandin", "--try", "PROTO=LL128", *TRIALS, env=env)
    said = "'api_key': ***, 'tensor_parallel_size': 2}"
    assert said in result.stdout, result.stdout + result.stderr
    journals = [path.read_text() for path in tmp_path.rglob("journal.jsonl")]
    assert journals and "non-default args" in "".join(journals)
    assert key not in result.stdout + result.stderr + "".join(journals)
