"""`tune` end to end on the stand-in SGLang server with its rate model (STANDIN_TUNE_MODEL=1:
the decode rate is a function of the NCCL environment the server started with, best at
LL128 Ring 8 8MiB 256); the search itself on a pure objective function, which is its own test.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tomllib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from nccl_launch.bench.result import Method
from nccl_launch.bench.stats import interval_text, outward, t_quantile
from nccl_launch.profile.model import Baseline
from nccl_launch.render.tune import chart_lines
from nccl_launch.tune.journal import Journal
from nccl_launch.tune.result import CandidateRow, Estimate, Gain, TuneReport
from nccl_launch.tune.search import CAP, Plan, Space, Values, confirm, descend, grid, planned
from nccl_launch.tune.session import open_base
from nccl_launch.tune.trial import TrialSettings
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import CONTAINER, Server, free_port, wait_for
from tests.tuning import (
    CLEAR,
    FACTORS,
    FAST,
    MODEL,
    SEED,
    SPACE,
    START,
    Objective,
    Separable,
    chart,
    journal_lines,
    journals,
)
from tests.watching import listening

# Tunes, first in the run (tests/conftest.py); each trial's stop signals its server's tree:
# in a PID namespace of the test's own.
pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]

JSON_KEYS = {
    "schema_version",
    "profile",
    "digest",
    "path",
    "journal",
    "method",
    "space",
    "strategy",
    "budget",
    "stop",
    "noise",
    "dof",
    "prefill_tolerance",
    "prefill_noise",
    "trials",
    "candidates",
    "profile_candidate",
    "defaults_candidate",
    "winner",
    "confirmation",
    "confirmed",
    "prefill_confirmed",
    "written",
    "unchanged",
    "kept",
    "baseline",
    "written_ref",
    "decided",
    "undecided",
    "untried",
    "untried_count",
    "budget_to_decide",
}


def by_changes(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["changes"]: row for row in document["trials"]}


# The search on a pure function: the algorithm's own tests.


BEST: Values = {"PROTO": "LL128", "MAX_NCHANNELS": "8", "NTHREADS": "256"}


@pytest.mark.parametrize(
    ("p", "dof", "t"),
    [
        (0.95, 1, 6.314),
        (0.95, 2, 2.920),
        (0.95, 3, 2.353),
        (0.95, 5, 2.015),
        (0.95, 10, 1.812),
        (0.95, 30, 1.697),
        (0.975, 1, 12.706),
        (0.975, 4, 2.776),
        (0.975, 6, 2.447),
        (0.975, 15, 2.131),
        (0.99, 7, 2.998),
    ],
)
def test_the_t_quantile_is_the_tables(p: float, dof: int, t: float) -> None:
    assert t_quantile(p, dof) == pytest.approx(t, abs=0.0005)


def test_descent_finds_the_best_and_starts_the_profiles_values_twice() -> None:
    objective = Separable(FACTORS)
    found = descend(START, SPACE, objective, budget=None)
    assert (found.best, found.stop) == (objective.key(BEST), "converged")
    # The profile's values twice (a degree of freedom), NCCL's defaults once, then each
    # candidate once: without noise no decision asks for more.
    assert objective.measured[:3] == [objective.key(START)] * 2 + [
        objective.key(dict.fromkeys(SPACE))
    ]
    assert len(objective.measured) == len(set(objective.measured)) + 1
    assert len(set(objective.measured)) < 3 * 3 * 2  # fewer than the grid


def test_a_change_within_the_noise_between_starts_is_not_kept() -> None:
    # NTHREADS=256 is 3% faster, but each start is up to 8% faster or slower: the candidate
    # looks faster at first, so each is started again, up to the cap, and it is not kept.
    objective = Separable(FACTORS, noise=0.08, seed=4)
    found = descend(START, {"NTHREADS": ("256",)}, objective, None)
    assert found.best == objective.key(START)
    assert len(found.starts[objective.key(START | {"NTHREADS": "256"})]) == CAP


def test_a_change_of_no_effect_is_kept_in_at_most_5_percent_of_decisions() -> None:
    # The rule's error: one decision looks at the figures up to 7 times as starts are added,
    # and each look at 95% would keep a change of no effect in some 14% of decisions.
    kept = 0
    for seed in range(400):
        objective = Separable(FACTORS, noise=0.08, seed=seed)
        kept += descend(START, {"NTHREADS": ("512", "1024")}, objective, None).best != (
            objective.key(START)
        )
    assert kept / 400 <= 0.05


def test_the_defaults_win_where_the_profiles_values_fail() -> None:
    objective = Separable(FACTORS, fails={"PROTO": "LL"})
    found = descend({"PROTO": "LL"}, {"PROTO": ("LL", "LL128")}, objective, None)
    # LL128 (x1.12 of LL) beats the defaults (x0.8 of LL) from which the descent went on.
    assert found.best == objective.key({"PROTO": "LL128"})
    assert objective.measured[:3] == [objective.key({"PROTO": v}) for v in ("LL", None, "LL128")]


def test_the_budget_stops_the_search_with_the_best_so_far() -> None:
    objective = Separable(FACTORS)
    found = descend(START, SPACE, objective, budget=4)
    assert (len(objective.measured), found.stop) == (4, "budget spent")
    assert found.best == objective.key(START | {"PROTO": "LL128"})  # trial 4 beat the start


def test_a_budget_that_ends_the_search_first_names_what_it_left_open() -> None:
    # LL128 (+12%) looked faster after its first start, each start up to 8% off: the noise
    # rule asks for more starts of it, and the budget ends the search there.
    objective = Separable(FACTORS, noise=0.08, seed=0)
    found = descend(START, SPACE, objective, budget=4)
    ll128 = objective.key(START | {"PROTO": "LL128"})
    assert (found.stop, found.best, found.undecided) == (
        "budget spent",
        objective.key(START),
        (ll128,),
    )
    others = [START | {"PROTO": "Simple"}, START | {"MAX_NCHANNELS": "8"}]
    others += [START | {"MAX_NCHANNELS": "32"}, START | {"NTHREADS": "256"}]
    assert (list(found.untried), found.untried_count) == (others, 4)
    # The plan: 4 spent, LL128 up to CAP (3 more), the best up to CAP (2 more), each untried once.
    assert found.to_decide == 4 + 3 + 2 + 4
    # A budget that ends before NCCL's defaults names them too; a search that decides, nothing.
    assert dict.fromkeys(SPACE) in descend(START, SPACE, Separable(FACTORS), budget=2).untried
    decided = descend(START, SPACE, Separable(FACTORS), budget=None)
    assert (decided.undecided, decided.untried, decided.to_decide) == ((), (), None)


def test_a_budget_that_ends_the_grid_counts_what_it_never_started() -> None:
    found = grid(START, SPACE, Separable(FACTORS), budget=5)
    # The start, (LL, 8, 256) and (LL, 8, 512) of the grid's 18 were started.
    assert (found.untried_count, len(found.untried), found.to_decide) == (15, 15, 5 + 15)
    assert found.untried[0] == {"PROTO": "LL", "MAX_NCHANNELS": "16", "NTHREADS": "256"}


def test_the_plan_counts_the_starts_a_search_takes_at_least() -> None:
    # The profile's values twice, NCCL's defaults once, each change of one variable once.
    assert planned(START, SPACE, False, None, 3) == Plan(3 + 5, 5, False, None, 9)
    assert planned(START, SPACE, True, 4, 2) == Plan(3 + 18 - 1, 18, True, 4, 6)
    # A profile that sets none of them: its values are the defaults, twice, then 8 changes.
    assert planned(dict.fromkeys(SPACE), SPACE, False, None, 3) == Plan(2 + 8, 8, False, None, 6)


def test_the_grid_measures_every_combination_and_the_fastest_wins() -> None:
    objective = Separable(FACTORS)
    found = grid(START, SPACE, objective, budget=None)
    assert len(set(objective.measured)) == 2 + 3 * 3 * 2 - 1  # the start is one of them
    assert (found.best, found.stop) == (objective.key(BEST), "grid done")


def test_a_budget_ends_a_huge_grid_without_making_every_combination() -> None:
    names = [f"V{index}" for index in range(5)]
    objective = Separable({name: {} for name in names})
    huge: Space = {name: tuple(str(value) for value in range(10)) for name in names}
    tracemalloc.start()
    try:
        found = grid(dict.fromkeys(names), huge, objective, budget=4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (len(objective.measured), found.stop) == (4, "budget spent")
    assert peak < 1 << 20  # 10^5 combinations made at once take some 20 MB


def test_the_confirmation_interleaves_its_rounds_in_rotating_order() -> None:
    objective = Separable(FACTORS)
    three = [START, BEST, dict.fromkeys(SPACE)]
    starts = confirm(three, 3, objective)
    keys = [objective.key(values) for values in three]
    assert objective.measured == keys + keys[1:] + keys[:1] + keys[2:] + keys[:2]
    assert [len(figures) for figures in starts.values()] == [3, 3, 3]


def test_an_interval_is_rounded_outward_wherever_it_is_shown() -> None:
    # 90.45-93.55 to the nearest tenth is 90.5-93.5, narrower than computed, where the written
    # [baseline] records it outward, [90.4, 93.6]: one rounding, outward, everywhere.
    estimate = Estimate(starts=3, mean=92.0, interval=[90.45, 93.55])
    row = CandidateRow(
        digest="sha256:" + "1" * 64, values={"PROTO": "LL128"}, changes="PROTO=LL128",
        trials=[1], estimate=estimate,
    )  # fmt: skip
    method = Method(max_tokens=40, runs=3, warmup=0, prompt="x")
    report = TuneReport(
        profile="standin@1", digest=row.digest, path="standin.toml", journal="j.jsonl",
        method=method, space={"PROTO": ["LL128"]}, strategy="descent", budget=None,
        stop="converged", noise=0.01, dof=2, trials=[], candidates=[row],
        profile_candidate=None, defaults_candidate=None, winner=row.digest, confirmation=None,
    )  # fmt: skip
    assert "  92.0   90.4-93.6  " in chart_lines(report, [row])[1]
    assert interval_text(estimate.interval or []) == "90.4-93.6"
    assert Baseline(decode_tok_s=92.0, interval=list(outward([90.45, 93.55]))).interval == [
        90.4,
        93.6,
    ]
    gain = Gain(gain=0.2, interval=[0.17355, 0.25145])  # nearest: +17.4%, +25.1%
    assert gain.over("standin@1") == "+20.0% [+17.3%, +25.2%] over standin@1"


# The journal, read back.

TRIAL = {
    "time": "2026-12-01T11:43:09+00:00",
    "digest": "sha256:" + "6" * 64,
    "values": {"PROTO": "LL"},
    "candidate": "c.toml",
    "log": "c.log",
}


@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        ('"runs": [0, 0]', "outcome.runs.0: Input should be greater than 0"),
        ('"runs": [1e308, 1e308]', "outcome.runs.0: Input should be less than 1000000000000"),
        ('"runs": [NaN]', "outcome.runs.0: Input should be a finite number"),
        ('"runs": [Infinity, 1]', "outcome.runs.0: Input should be a finite number"),
        ('"runs": []', "outcome: Value error, a measured trial has runs, and only a measured one"),
    ],
)
def test_a_forged_journal_line_is_skipped_with_its_number(outcome: str, why: str) -> None:
    # Each would fail the mean, the noise or the gains of the whole tune.
    forged = json.dumps(TRIAL)[:-1] + f', "outcome": {{"status": "measured", {outcome}, '
    forged += '"seconds": 1}}'
    settings = TrialSettings(Method(max_tokens=1, runs=1, warmup=0, prompt="x"), 1, 1, 1)
    opened = Journal(Path("journal.jsonl"), -1, settings)
    opened.read_lines(f"\n{forged}\n")
    assert opened.done == []
    assert [problem.line() for problem in opened.problems] == [
        f"journal.jsonl: line 2: not a trial ({why}); skipped"
    ]
    assert {(problem.code, problem.cause) for problem in opened.problems} == {
        ("bad-journal-line", "host")
    }


# A journal as nccl-launch wrote it before a bad line was a finding: a server started, then
# its trial finished.
JOURNAL_BEFORE = (
    '{"time":"2026-12-01T11:43:09+00:00","digest":"sha256:' + "6" * 64 + '",'
    '"values":{"PROTO":"LL"},"candidate":"c.toml","log":"c.log","confirm":false,'
    '"server":{"pid":4194303,"create_time":1.5},"outcome":null}\n'
    '{"time":"2026-12-01T11:44:09+00:00","digest":"sha256:' + "6" * 64 + '",'
    '"values":{"PROTO":"LL"},"candidate":"c.toml","log":"c.log","confirm":false,'
    '"server":null,"outcome":{"status":"measured","runs":[100.0,101.0],"prefill":[],'
    '"detail":"","exit_code":null,"log_tail":[],"seconds":9.5,"confirmed":["NCCL_PROTO"],'
    '"not_read":[],"unconfirmed":[],"ready_timeout":60.0,"request_timeout":60.0}}\n'
)


def test_an_earlier_journal_replays_and_its_bad_line_is_a_finding() -> None:
    settings = TrialSettings(Method(max_tokens=1, runs=1, warmup=0, prompt="x"), 1, 1, 1)
    opened = Journal(Path("journal.jsonl"), -1, settings)
    opened.read_lines(JOURNAL_BEFORE + "{torn\n")
    assert [line.outcome.runs for line in opened.done] == [[100.0, 101.0]]
    assert opened.started == {}
    (problem,) = opened.problems
    assert (problem.code, problem.where, problem.file) == (
        "bad-journal-line",
        "line 3",
        "journal.jsonl",
    )
    assert (problem.severity, problem.cause) == ("warning", "host")


# The command on the stand-in.


# The decision on a seeded objective (bench's clock, `Objective`): one variable worth +25%
# (PROTO=LL128), two worth nothing (ALGO, BUFFSIZE), each start of a server up to 8% faster
# or slower, drawn from a seed: the start-to-start noise of a GPU host. The stand-in serves
# the tokens quickly, the clock says how long they took: the host's delays decide nothing.
EFFECT = {"NCCL_PROTO": {"LL128": 1.25}}
EFFECT_SPACE = (
    "--try",
    "PROTO=LL,LL128",
    "--try",
    "ALGO=Ring,Tree",
    "--try",
    "BUFFSIZE=4MiB,16MiB",
)
QUICK = MODEL | {"STANDIN_TOKEN_RATE": "4000"}
# Runs of 30 tokens; a server not ready within 30 s is late, not broken: a trial that failed
# for a busy host would change what the seeds decide.
EFFECT_METHOD = ("--max-tokens", "30", "--runs", "3", "--warmup", "0", "--ready-timeout", "30")


@pytest.mark.parametrize("seed_number", [1, 2, 3, 4])
def test_tune_finds_the_effect_through_the_noise_between_starts_and_bench_agrees(
    seed_number: int, seed: int, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Objective(EFFECT, tokens=30, noise=0.08, seed=seed_number).install(monkeypatch)
    result = run_cli(
        "tune", "standin", *EFFECT_SPACE, *EFFECT_METHOD, "--write", "--format", "json", env=QUICK
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert set(document) == JSON_KEYS
    winner = next(row for row in document["candidates"] if row["digest"] == document["winner"])
    # The effect is found. ALGO and BUFFSIZE are worth nothing, and the rule keeps a change of
    # no effect in up to 5% of its decisions (see the search's own test above): the seeds'
    # draws decide whether it does here.
    assert winner["values"]["PROTO"] == "LL128", result.stderr
    assert document["confirmed"] is True
    # The interval holds the gain, exactly 25% (a 95% interval: the seeds' draws put it there).
    low, high = document["confirmation"]["gain_over_profile"]["interval"]
    assert 0 < low < 0.25 < high, result.stderr
    # The written [baseline]: the confirmation's figure of the winner, with its interval.
    baseline = Baseline.model_validate(document["baseline"])
    written = tomllib.loads((tmp_path / "profiles" / "standin-2.toml").read_text())["baseline"]
    assert Baseline.model_validate(written) == baseline
    assert (baseline.starts, baseline.max_tokens, baseline.runs) == (3, 30, 3)
    # An independent bench of the written version, without start noise, measures the
    # winner's rate itself (100 tok/s times LL128's 1.25): within that interval.
    Objective(EFFECT, tokens=30).install(monkeypatch)
    server = Server([console_script(), "run", "standin@2"], QUICK, seed)
    try:
        bench = run_cli(
            "bench", "standin@2", "--url", f"http://127.0.0.1:{seed}", "--format", "json",
            "--max-tokens", "30", "--runs", "3",
        )  # fmt: skip
    finally:
        server.stop()
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert json.loads(bench.stdout)["mean_tok_s"] == pytest.approx(125.0)
    assert baseline.interval is not None
    assert baseline.interval[0] <= 125.0 <= baseline.interval[1]


def test_tune_writes_nccls_defaults_where_the_profiles_values_fail(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    env = MODEL | {"STANDIN_EXIT_IF": "NCCL_PROTO=LL"}
    result = run_cli("tune", "standin", "--try", "PROTO=LL", *FAST, "--write", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "trial 1 exited 1: the server exited with code 1" in result.stdout
    lines = chart(result.stdout)
    # One start of the defaults, and no other measured: no noise, no interval yet.
    assert re.fullmatch(r"\* \| *# *\|  [0-9.]+  - +1/1 +PROTO=unset \(NCCL's defaults\)",
                        lines[1]), lines  # fmt: skip
    assert re.fullmatch(r"  \| {24}\|  - +- +0/1 +\(standin@1 as is\)", lines[2]), lines
    assert all(len(line.split("  CANDIDATE")[0].split("  PROTO")[0]) <= 80 for line in lines)
    assert "winner (changes PROTO=unset): " in result.stdout
    written = tomllib.loads((tmp_path / "profiles" / "standin-2.toml").read_text())
    assert "PROTO" not in written["nccl"]
    assert written["baseline"]["starts"] == 3


def test_a_gain_the_confirmation_does_not_find_is_not_written(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    # LL128 doubles the rate of decodes of 40 tokens (the search's, --max-tokens 40) alone:
    # the confirmation measures with the profile's own [baseline] method, 60 tokens.
    # At CLEAR's rate, LL128's double rate is plain in the search whatever the host's delays;
    # each start's draws counted, so that the confirmation's figures are the same at every run
    # (but for the host's delays, 60 ms at most at each end of a run of 0.59 s).
    seed_with(write_profile, bottom="[baseline]\ndecode_tok_s = 800.0\nmax_tokens = 60\n")
    env = CLEAR | {
        "STANDIN_TUNE_FACTORS": json.dumps({"NCCL_PROTO": {"": 0.5, "LL128": 2.0}}),
        "STANDIN_TUNE_MAX_TOKENS": "40",
        "STANDIN_START_COUNT": str(tmp_path / "starts"),
    }
    result = run_cli("tune", "standin", "--try", "PROTO=LL,LL128", *FAST, "--write", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "confirmation: 3 rounds of fresh starts, 3 runs of 60 tokens each;" in result.stdout
    assert "winner (changes PROTO=LL128): " in result.stdout
    assert (
        "no difference the noise allows: keep standin@1's values (the interval of the gain "
        "over them holds 0)\n"
    ) in result.stdout
    assert result.stdout.splitlines()[-1] == "nothing written: standin@1's values are kept"
    assert not (tmp_path / "profiles" / "standin-2.toml").exists()


def test_a_profile_naming_env_files_by_relative_paths_is_measured_as_is(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    (tmp_path / "profiles" / "site.env").write_text("HF_TOKEN=hf_site\n")
    text = SEED.format(python=sys.executable, port=free_port(), nnodes=1)
    write_profile(
        "standin", text.replace("version = 1\n", 'version = 1\nenv_files = ["site.env"]\n')
    )
    result = run_cli(
        "tune", "standin", "--try", "PROTO=LL128", *FAST, "--format", "json", env=CLEAR
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["profile_candidate"] == document["digest"]
    gain = document["confirmation"]["gain_over_profile"]["gain"]
    assert gain > 0.25  # CLEAR's 100%, at least 30% whatever the host's delays
    # The [baseline] as a table: no key for what was not measured (prefill, without
    # --prompt-tokens), so that it is written as TOML as it is.
    baseline = document["baseline"]
    assert None not in baseline.values()
    assert tomllib.loads(tomli_w.dumps({"baseline": baseline}))["baseline"] == baseline


def test_tune_of_a_one_rank_server_keeps_proto_and_algo_as_declared(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    # A server of one rank (NCCL 2.28.9's log: nranks 1, no NCCL_PROTO, no NCCL_ALGO line):
    # neither is read there, NTHREADS=256 is the gain.
    text = SEED.format(python=sys.executable, port=free_port(), nnodes=1)
    write_profile("standin", text.replace("tp_size = 2", "tp_size = 1"))
    factors = {"NCCL_PROTO": {"": 0.5, "LL128": 2.0}, "NCCL_NTHREADS": {"256": 2.0}}
    env = CLEAR | {"STANDIN_TUNE_FACTORS": json.dumps(factors)}  # a gain no delay hides
    tries = ("--try", "PROTO=LL,LL128", "--try", "ALGO=Ring,Tree", "--try", "NTHREADS=256,512")
    result = run_cli("tune", "standin", *tries, *FAST, "--write", "--format", "json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    said = (
        "nccl-launch: warning: NCCL_ALGO, NCCL_PROTO: not read by the server, whose NCCL "
        "communicators have one rank each (NCCL reads them only for two or more ranks); kept "
        "as the profile declares them"
    )
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [said]
    document = json.loads(result.stdout)
    trials = document["trials"]
    assert {row["outcome"]["status"] for row in trials} == {"measured"}
    assert all("PROTO" not in row["changes"] and "ALGO" not in row["changes"] for row in trials)
    written = tomllib.loads((tmp_path / "profiles" / "standin-2.toml").read_text())
    assert (written["nccl"]["PROTO"], written["nccl"]["ALGO"]) == ("LL", "Ring")
    assert written["nccl"]["NTHREADS"] == 256


def seed_with(
    write_profile: WriteProfile, top: str = "", server: str = "", bottom: str = ""
) -> int:
    """The seed, with `top` (keys before its tables), `server` (keys of its [server]) and
    `bottom` (tables after its own) added; its port."""
    port = free_port()
    text = SEED.format(python=sys.executable, port=port, nnodes=1) + bottom
    text = text.replace("version = 1\n", f"version = 1\n{top}")
    write_profile("standin", text.replace("[server]\n", f"[server]\n{server}"))
    return port


def shown(run_cli: RunCli, ref: str) -> dict[str, Any]:
    result = run_cli("show", ref, "--format", "json")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_write_names_env_files_as_the_profile_does_and_reports_the_written_digest(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    # Notes of version 1's values (a problem LL128 fixes) are not true of version 2's.
    provenance = '[provenance]\nhardware = "2 stand-in GPUs"\nnotes = "LL stalls at 2 ranks"\n'
    seed_with(write_profile, top='env_files = ["site.env"]\n', bottom=provenance)
    (tmp_path / "profiles" / "site.env").write_text("HF_TOKEN=hf_site\n")
    result = run_cli(
        "tune", "standin", "--try", "PROTO=LL128", *FAST, "--write", "--format", "json", env=CLEAR
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    written = tmp_path / "profiles" / "standin-2.toml"
    text = tomllib.loads(written.read_text())
    assert text["env_files"] == ["site.env"]
    assert text["provenance"]["hardware"] == "2 stand-in GPUs"
    assert set(text["provenance"]) == {"hardware", "measured", "date", "source"}
    base, tuned = shown(run_cli, "standin@1"), shown(run_cli, "standin@2")
    assert tuned["argv"] == base["argv"]
    changed = {key for key in base["env"].keys() | tuned["env"].keys()
               if base["env"].get(key) != tuned["env"].get(key)}  # fmt: skip
    assert changed == {"NCCL_PROTO"}
    assert document["winner"] == tuned["digest"]
    assert document["profile_candidate"] == base["digest"]  # the profile as it is


def test_the_trials_of_a_server_without_a_key_listen_on_the_loopback_address_alone(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    port = seed_with(write_profile, server='host = "0.0.0.0"\n')
    env = CLEAR | {"STANDIN_START_DELAY": "0.5"}  # up, not yet ready: time to look
    said = open_base("standin").lockdown()
    assert said is not None
    assert (said.code, said.severity, said.cause) == ("trials-on-loopback", "warning", "profile")
    tune = ("tune", "standin", "--try", "PROTO=LL128", *FAST, "--confirm", "2", "--write")
    with listening(port) as seen:
        result = run_cli(*tune, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert seen == {"127.0.0.1"}
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        "nccl-launch: warning: standin@1's server gives no --api-key and its host 0.0.0.0 is "
        "not a loopback address: each trial listens on 127.0.0.1 alone, and is measured "
        "there; a version --write writes keeps host 0.0.0.0"
    ]
    assert "winner (changes PROTO=LL128): " in result.stdout
    written = tomllib.loads((tmp_path / "profiles" / "standin-2.toml").read_text())
    assert written["server"]["host"] == "0.0.0.0"  # noqa: S104 - read, not bound


def test_the_trials_of_a_server_with_a_key_from_an_env_file_get_the_key(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    key = "sk-trial-0123456789"
    (tmp_path / "profiles" / "site.env").write_text(f"API_KEY={key}\n")
    (tmp_path / "profiles" / "site.env").chmod(0o600)
    server = 'host = "0.0.0.0"\nargs = ["--api-key", "${API_KEY}"]\n'
    seed_with(write_profile, top='env_files = ["site.env"]\n', server=server)
    result = run_cli(
        "tune", "standin", "--try", "PROTO=LL128", *FAST, "--format", "json", env=MODEL
    )
    assert (result.returncode, "--api-key" in result.stderr) == (0, False), result.stderr
    document = json.loads(result.stdout)
    assert {row["outcome"]["status"] for row in document["trials"]} == {"measured"}
    for row in document["trials"]:  # the stand-in (401 without the key) got the key itself
        assert f"api_key={key!r}" in Path(row["log"]).read_text()
    # The server's own log holds it, as SGLang prints it; nothing nccl-launch writes does.
    written = [result.stdout, result.stderr, Path(document["journal"]).read_text()]
    written += [Path(row["candidate"]).read_text() for row in document["trials"]]
    assert key not in "".join(written)


def test_a_server_that_exits_or_never_gets_ready_is_a_failed_trial(
    seed: int, run_cli: RunCli
) -> None:
    env = MODEL | {"STANDIN_EXIT_IF": "NCCL_PROTO=Simple", "STANDIN_HANG_IF": "NCCL_PROTO=LL128"}
    result = run_cli("tune", "standin", "--try", "PROTO=LL128,Simple", *FAST, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    table = result.stdout[result.stdout.index("tune standin@1: ") :]
    assert "trial 4 not-ready: no answer 200 from /health within 2 s" in table
    assert "trial 5 exited 1: the server exited with code 1" in table
    assert "  | ncclInvalidArgument: Invalid value for an argument." in table  # its log's end
    blank = r"  \| {24}\|  - +- +0/1 +"  # last in the chart: never measured
    assert re.search(f"^{blank}PROTO=LL128\n{blank}PROTO=Simple\n", table, re.MULTILINE)
    assert "winner (standin@1 as is): " in table
    assert "over NCCL's defaults" in table


def test_a_candidate_the_server_does_not_run_is_refused(seed: int, run_cli: RunCli) -> None:
    # Scheduler 1 starts with NCCL_PROTO=LL whatever the candidate says: only the seed,
    # which declares LL, runs as declared.
    env = MODEL | {"STANDIN_DRIFT_RANK": "1", "STANDIN_DRIFT": "NCCL_PROTO=LL"}
    result = run_cli("tune", "standin", "--try", "PROTO=LL128", *FAST, "--format", "json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    drifted = by_changes(document)["PROTO=LL128"]["outcome"]
    assert (drifted["status"], drifted["runs"]) == ("drift", [])
    assert "NCCL_PROTO LL128 -> LL" in drifted["detail"]
    assert document["winner"] == document["profile_candidate"]


def test_a_tune_whose_every_launch_is_refused_says_so(seed: int, run_cli: RunCli) -> None:
    env = MODEL | {"NCCL_PROTO": "Simple"}  # the calling environment drifts from each candidate
    result = run_cli("tune", "standin", "--try", "PROTO=LL128", *FAST, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    refused = "trial 1 refused: the calling environment drifts from the candidate: "
    assert refused in result.stdout
    assert "coordinate descent, nothing measured after 3 trials" in result.stdout  # not converged
    assert "  log " not in result.stdout  # nothing started, so no log was written
    assert result.stdout.endswith("every trial was refused before its server started: no winner\n")


def test_a_tune_in_a_container_starts_every_trial(seed: int, run_cli: RunCli) -> None:
    env = MODEL | CONTAINER  # NVIDIA's image's NCCL_VERSION, a Kubernetes service link
    result = run_cli("tune", "standin", "--try", "PROTO=LL128", *FAST, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "refused" not in result.stdout
    assert "coordinate descent, converged after" in result.stdout


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(
    "number",
    [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
    ids=["ctrl-c", "sigterm", "terminal-closed"],
)
def test_an_interrupted_tune_resumes_without_measuring_a_finished_trial_again(
    number: signal.Signals, seed: int, tmp_path: Path
) -> None:
    # NCCL's defaults (trial 3, after two starts of the profile's values) never get ready:
    # Ctrl-C (or systemd's stop, or the terminal closed) while tune waits.
    command = [console_script(), "tune", "standin", "--try", "PROTO=LL128", *FAST[:-2]]
    env = MODEL | {"STANDIN_HANG_IF": "NCCL_PROTO="}
    process = subprocess.Popen(
        command, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    for raw in process.stdout:
        if raw.startswith(b"trial 3: starting"):
            break
    wait_for(lambda: port_open(seed), "trial 3's server to listen", process=process)
    process.send_signal(number)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err.decode()
    assert "the same command resumes the tune" in err.decode()
    assert not port_open(seed)  # its server stopped
    (journal,) = journals(tmp_path)
    first = journal_lines(journal)
    assert [line["values"]["PROTO"] for line in first] == ["LL", "LL"]
    torn = len(journal.read_text().splitlines()) + 1
    with journal.open("a") as appended:  # and a line a crash left torn
        appended.write('{"time": "2026-')
    resumed = subprocess.run(
        command,
        env={**os.environ, **MODEL},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "trial 1 (from the journal): measured " in resumed.stdout
    assert "trial 2 (from the journal): measured " in resumed.stdout
    assert "trial 3: starting" in resumed.stdout
    assert "trial 1: starting" not in resumed.stdout
    assert "trial 2: starting" not in resumed.stdout
    assert f"{journal}: line {torn}: not a trial (Invalid JSON" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    lines = journal_lines(journal)
    assert lines[:2] == first  # each start once: what was replayed was not measured again
    ended = re.findall(r"^trial \d+( \(confirmation\))? in ", resumed.stdout, re.MULTILINE)
    assert len(lines) == 2 + len(ended)
    # The confirmation's 3 rounds, each a start of each candidate it compares (2 or 3: the
    # winner may be the profile's values, as 12% measured in 0.1 s runs may look on a busy host).
    confirmed = [json.dumps(line["values"]) for line in lines if line["confirm"]]
    assert len(confirmed) == 3 * len(set(confirmed))


def test_write_gives_the_next_version_whose_baseline_bench_meets(
    seed: int, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a seeded objective: PROTO=LL128 makes 100 tok/s 150, each start up to 2% off; bench
    # of the written version (the same clock) measures the [baseline]'s figure within 4%, so
    # it meets it (less 5%) whatever the host's delays.
    objective = Objective({"NCCL_PROTO": {"LL128": 1.5}}, tokens=80, noise=0.02, seed=1)
    objective.install(monkeypatch)
    method = ("--max-tokens", "80", *FAST[2:], "--ready-timeout", "30")
    result = run_cli("tune", "standin", "--try", "PROTO=LL128", *method, "--write", env=QUICK)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.endswith(
        "wrote profiles/standin-2.toml: the winner with its confirmed [baseline]; start it with: "
        "nccl-launch run standin@2\n"
        "a systemd unit pinned to standin@1's digest keeps running standin@1 until it is "
        "written again: nccl-launch systemd standin@2 -o UNIT --force\n"
    )
    again = run_cli("tune", "standin", "--try", "PROTO=LL128", *method, "--write", env=QUICK)
    assert again.returncode == 2
    assert "--write: standin@2 exists already" in again.stderr
    shown = json.loads(run_cli("show", "standin@2", "--format", "json").stdout)
    assert shown["env"]["NCCL_PROTO"] == "LL128"
    server = Server([console_script(), "run", "standin@2"], QUICK, seed)
    try:
        bench = run_cli("bench", "standin@2", "--url", f"http://127.0.0.1:{seed}")
    finally:
        server.stop()
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert ": met" in bench.stdout  # with the method recorded: 3 runs of 80 tokens


def test_a_tune_the_budget_ends_before_it_decides_says_so_and_exits_1(
    seed: int, run_cli: RunCli
) -> None:
    # The profile's values twice and NCCL's defaults once spend --budget 3: the two changes
    # were never started, so nothing says the profile's values are best.
    tries = ("--try", "PROTO=LL128", "--try", "NTHREADS=256")
    tune = ("tune", "standin", *tries, *FAST, "--budget", "3", "--confirm", "2")
    result = run_cli(*tune, "--format", "json", env=CLEAR)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "the search starts a server at least 5 times (the profile's values twice, NCCL's "
        "defaults once, each of the 2 candidates of a pass once), more where it asks (up to 4 "
        "starts of a candidate not yet told from the best, another pass after one that keeps a "
        "change); the confirmation up to 6; --budget 3 (the journal's trials included) ends "
        "the search before it can decide\n"
    ) in result.stderr
    document = json.loads(result.stdout)
    assert set(document) == JSON_KEYS
    assert (document["decided"], document["undecided"]) == (False, [])
    assert (document["untried"], document["untried_count"]) == (["PROTO=LL128", "NTHREADS=256"], 2)
    assert document["budget_to_decide"] == 5
    # The same command as text: every trial from the journal, the end says what is open.
    again = run_cli(*tune, env=CLEAR)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "best so far (standin@1 as is): " in again.stdout
    assert again.stdout.splitlines()[-3:] == [
        "undecided: --budget 3 was spent (the journal's trials included) before the search decided",
        "  never started: PROTO=LL128, NTHREADS=256",
        "  about 5 starts would decide them (an estimate from the search's plan: each untried "
        "candidate once, each undecided one and the best up to 4; a change kept asks for "
        "another pass): the same command with --budget 5 resumes from the journal",
    ]


def test_a_second_tune_of_the_same_journal_is_refused_while_one_runs(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    tune = ("tune", "standin", "--try", "PROTO=LL128", *FAST, "--budget", "1")
    assert run_cli(*tune, env=MODEL).returncode == 1  # a search --budget 1 ends undecided
    (journal,) = journals(tmp_path)
    with journal.open("a") as running:  # as the first tune holds it
        fcntl.flock(running, fcntl.LOCK_EX)
        second = run_cli(*tune, env=MODEL)
    assert (second.returncode, second.stdout) == (3, "")
    assert second.stderr == (
        f"nccl-launch: tune journal {journal}: another tune of this profile and method is "
        "running (it holds the journal); wait for it, or stop it and run this again to resume\n"
    )


def test_a_journal_that_is_no_regular_file_says_to_move_it_aside(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    tune = ("tune", "standin", "--try", "PROTO=LL128", *FAST, "--budget", "1")
    assert run_cli(*tune, env=MODEL).returncode == 1  # a search --budget 1 ends undecided
    (journal,) = journals(tmp_path)
    journal.unlink()
    os.mkfifo(journal)
    again = run_cli(*tune, env=MODEL)
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == (
        f"nccl-launch: tune journal {journal}: a FIFO; move it aside to start the tune afresh\n"
    )


def test_write_when_the_profiles_own_values_win_writes_nothing(seed: int, run_cli: RunCli) -> None:
    """A version of the same values would be a new name for what runs now (the same digest):
    the figure is said instead."""
    result = run_cli("tune", "standin", "--try", "PROTO=LL", *FAST, "--write", env=MODEL)
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert re.fullmatch(
        r"nothing written: standin@1's own values won; to record the figure, set in "
        r"\[baseline\] of profiles/standin.toml: decode_tok_s = [0-9.]+, max_tokens = 40, "
        r"runs = 3, starts = 3, interval = \[[0-9.]+, [0-9.]+\]",
        last,
    ), last
    assert not Path("profiles/standin-2.toml").exists()


@pytest.mark.parametrize(
    ("profile", "taken", "message"),
    [
        (
            "standin",
            "file",
            "--write: profiles/standin-2.toml exists (not standin@2); tune writes the next "
            "version there and replaces nothing: move it aside",
        ),
        ("standin", "folder", "--write: profiles/standin-2.toml exists (not standin@2)"),
        (
            "kimi-k25-rtx6000bw-tp8-eagle3",
            None,
            "--write: kimi-k25-rtx6000bw-tp8-eagle3@1 is shipped with nccl-launch, and tune "
            "writes nothing into the installed package; copy it first",
        ),
    ],
)
def test_write_that_cannot_write_is_refused_before_any_trial(
    profile: str, taken: str | None, message: str, seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    path = tmp_path / "profiles" / "standin-2.toml"
    if taken == "file":
        path.write_text("not a profile")
    elif taken == "folder":
        path.mkdir()
    result = run_cli("tune", profile, "--try", "PROTO=LL128", *FAST, "--write", env=MODEL)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"nccl-launch: {message}")
    assert result.stderr.count("\n") == 1
    assert journals(tmp_path) == []  # no trial started


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--try", "PROTO=LL,Fast"],
            "PROTO: 'Fast' in 'Fast' is not a protocol; valid: LL, LL128, Simple",
        ),
        (["--try", "NTHREADS=100"], "valid: a decimal integer from 64 to 512 and a multiple of 32"),
        (["--try", "PROTOCOL=LL"], "did you mean NCCL_PROTO?"),
        (["--try", "PROTO"], "--try PROTO: valid: NAME=V1,V2,..."),
        (["--space", "space.toml"], "search space space.toml: BUFFSIZE: '16MB' is"),
        ([], "nothing to search: give the values to try with --space FILE or --try"),
    ],
)
def test_a_bad_search_space_is_one_line_naming_the_key(
    args: list[str], message: str, seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    (tmp_path / "space.toml").write_text('PROTO = ["LL", "unset"]\nBUFFSIZE = ["8MiB", "16MB"]\n')
    result = run_cli("tune", "standin", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_search_space_nested_too_deep_is_refused_before_it_is_parsed(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    """A dotted key of 20,000 parts once cost tomllib seconds and gigabytes."""
    (tmp_path / "space.toml").write_text('PROTO = ["LL"]\nALGO' + ".x" * 20_000 + ' = ["Ring"]\n')
    result = run_cli("tune", "standin", "--space", "space.toml")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: search space space.toml: line 2: nested deeper than 16 levels (each part "
        "of a dotted key or [table] name is one, each array and inline table too)\n"
    )


def test_a_multi_node_profile_is_refused(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("standin", SEED.format(python=sys.executable, port=free_port(), nnodes=2))
    result = run_cli("tune", "standin", "--try", "PROTO=LL128")
    assert result.returncode == 2
    assert "standin@1 is a multi-node profile (nnodes = 2): tune starts one server" in (
        result.stderr
    )


@pytest.mark.parametrize("pid", [-5, 99999999999])
def test_a_started_line_edited_to_name_no_pid_is_a_warning_not_a_crash(
    pid: int, seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    command = ("tune", "standin", "--try", "PROTO=LL128", *FAST, "--budget", "1", "--confirm", "2")
    assert run_cli(*command, env=MODEL).returncode == 1  # a search --budget 1 ends undecided
    (journal,) = journals(tmp_path)
    line = json.loads(journal.read_text().splitlines()[0])
    line["server"]["pid"] = pid
    with journal.open("a") as appended:
        appended.write(json.dumps(line) + "\n")
    number = len(journal.read_text().splitlines())
    again = run_cli(*command, env=MODEL)
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"{journal}: line {number}: not a trial" in again.stderr


def test_write_writes_nothing_where_the_profiles_values_failed_in_the_confirmation(
    seed: int, run_cli: RunCli, tmp_path: Path
) -> None:
    """The search measured the profile's values; their fresh starts all fail: nothing
    confirms the winner's gain over them, so nothing is written."""
    command = ("tune", "standin", "--try", "PROTO=LL128", *FAST, "--confirm", "2")
    assert run_cli(*command, env=CLEAR).returncode == 0  # LL128 wins the search
    (journal,) = journals(tmp_path)
    kept = [line for line in journal.read_text().splitlines() if '"confirm":true' not in line]
    journal.write_text("\n".join(kept) + "\n")
    failing = CLEAR | {"STANDIN_EXIT_IF": "NCCL_PROTO=LL"}  # the profile's value
    result = run_cli(*command, "--write", env=failing)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "not confirmed: standin@1's values were not measured in the confirmation, so nothing "
        "confirms it; keep them"
    ) in result.stdout
    assert not (tmp_path / "profiles" / "standin-2.toml").exists()
