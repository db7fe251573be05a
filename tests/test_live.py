"""`check` and `check --watch` against the stand-in SGLang server (a real process tree on
loopback), and the comparison itself on plain snapshots."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nccl_launch.env.merge import inherited_environment, merge_environment
from nccl_launch.findings import Finding
from nccl_launch.live.compare import evaluate
from nccl_launch.live.processes import ProcessSnapshot
from nccl_launch.profile.load import load_profile
from nccl_launch.profile.model import Policy, Profile
from nccl_launch.profile.plan import ProfilePlan, build_plan
from nccl_launch.render.prometheus import metrics
from nccl_launch.render.reports import live_lines, live_text
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import (
    EVIL,
    PROFILE,
    STANDIN,
    Server,
    free_port,
    sleeper,
    wait_for,
    wait_for_record,
)
from tests.standins import Started
from tests.watching import Opens, Watcher, alive


def test_a_server_started_by_run_has_no_drift_in_any_process(
    start: Started, run_cli: RunCli
) -> None:
    server = start()
    result = run_cli("check", "standin", "--port", str(server.port))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("check standin@1 (sha256:")
    assert "sglang::scheduler_TP0" in result.stdout
    assert "sglang::scheduler_TP1" in result.stdout
    assert "sglang::detokenizer" in result.stdout
    assert "tolerated: NCCL_CUMEM_ENABLE, NCCL_GRAPH_REGISTER, NCCL_NVLS_ENABLE" in result.stdout
    assert lines[-1] == "no drift in 5 processes"


def test_check_expects_the_values_of_the_profiles_env_files(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    port = free_port()
    text = PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
    path = write_profile("standin", text.replace("[nccl]", 'env_files = ["standin.env"]\n[nccl]'))
    env_file = path.with_suffix(".env")
    env_file.write_text("HF_TOKEN=hf_first\n")
    server = Server([console_script(), "run", "standin"], {}, port)
    try:
        result = run_cli("check", "standin", "--port", str(port))
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == "no drift in 5 processes"
        env_file.write_text("HF_TOKEN=hf_rotated\n")  # the server still runs the first
        result = run_cli("check", "standin", "--port", str(port))
        assert result.returncode == 1
        drift = f'  ~ HF_TOKEN  "***" -> "***"  (declared by env file {env_file})'
        assert result.stdout.splitlines().count(drift) == 5
        assert "hf_" not in result.stdout
        entry = json.loads(run_cli("check", "standin", "--port", str(port), "--format", "json")
                           .stdout)["processes"][0]["entries"][0]  # fmt: skip
        assert (entry["expected"], entry["actual"]) == ("***", "***")
        env_file.unlink()  # or a monitoring user may not read it: said once, not failed
        result = run_cli("check", "standin", "--port", str(port))
        assert result.returncode == 0, result.stdout
        unread = (
            f"not checked: profiles/standin.toml: env_files: env file {env_file}: cannot read: "
            "No such file or directory"
        )
        assert result.stdout.splitlines().count(unread) == 1
        shown = json.loads(run_cli("check", "standin", "--port", str(port), "--format", "json")
                           .stdout)  # fmt: skip
        assert shown["unchecked_env_files"] == [unread.removeprefix("not checked: ")]
        metrics = run_cli("check", "standin", "--port", str(port), "--format", "prometheus")
        [family] = [f for f in text_string_to_metric_families(metrics.stdout)
                    if f.name == "nccl_launch_env_files_unchecked"]  # fmt: skip
        assert [sample.value for sample in family.samples] == [1]
    finally:
        server.stop()


def test_without_profile_the_servers_own_marker_names_it(start: Started, run_cli: RunCli) -> None:
    server = start()
    result = run_cli("check", "--pid", str(server.process.pid), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema_version"] == 1
    assert report["profile"] == report["running_profile"] == "standin@1"
    assert report["digest"] == report["running_digest"]
    assert {p["pid"] for p in report["processes"]} == set(server.tree)
    titles = sorted(p["title"] for p in report["processes"] if p["title"].startswith("sglang::"))
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert all(p["readable"] for p in report["processes"])
    drifted = [e for p in report["processes"] for e in p["entries"] if not e["tolerated"]]
    assert drifted == []


def test_the_old_way_names_missing_keys_and_unreadable_workers(
    start: Started, run_cli: RunCli
) -> None:
    server = start(launcher=False, env={"NCCL_PROTO": "LL"})
    result = run_cli("check", "standin", "--port", str(server.port))
    assert result.returncode == 1
    text = result.stdout
    assert f"pid {server.process.pid} was not started by nccl-launch" in text
    assert '  - NCCL_ALGO      "Ring" -> unset' in text
    assert '  - NCCL_BUFFSIZE  "16777216" -> unset' in text
    assert text.count("unreadable: environment overwritten by setproctitle") == 3
    assert "NCCL_PROTO  " not in text.split("sglang::")[0]  # set by hand: it matches
    assert text.splitlines()[-2:] == [
        "drift: 2 drift, 3 unreadable, of 5 processes",
        "fix: a process keeps the environment it started with: restart the server through "
        "nccl-launch run profiles/standin.toml (its unit, or that command)",
    ]


def test_one_drifted_worker_is_named(start: Started, run_cli: RunCli) -> None:
    server = start(env={"STANDIN_DRIFT_RANK": "1", "STANDIN_DRIFT": "NCCL_PROTO=Simple"})
    result = run_cli("check", "--port", str(server.port))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    worker = next(i for i, line in enumerate(lines) if line.endswith("sglang::scheduler_TP1"))
    assert lines[worker + 1].split()[:5] == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"']
    assert lines[-2:] == [
        "drift: 1 drift, of 5 processes",
        "fix: a process keeps the environment it started with: restart the server through "
        f"nccl-launch run {Path('profiles/standin.toml').resolve()} (its unit, or that command)",
    ]


def test_check_never_writes_its_report_over_the_profile_it_checks(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    text = path.read_text()
    with sleeper({b"NCCL_PROTO": b"LL"}) as pid:
        result = run_cli("check", str(path), "--pid", str(pid), "-o", str(path))
    said = f"nccl-launch: -o {path}: the profile checked; give the report a file of its own\n"
    assert (result.returncode, result.stderr) == (2, said)
    assert path.read_text() == text


def test_prometheus_textfile_parses_and_says_drift(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(env={"STANDIN_DRIFT_RANK": "0", "STANDIN_DRIFT": "NCCL_ALGO="})
    textfile = tmp_path / "textfile" / "nccl_launch.prom"
    result = run_cli("check", "--port", str(server.port), "--format", "prometheus",
                         "--output", str(textfile))  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(textfile.read_text())
        for sample in family.samples
    }
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for (name, label_pairs), value in samples.items():
        by_name.setdefault(name, []).append((dict(label_pairs), value))
    [(labels, drift)] = by_name["nccl_launch_drift"]
    assert drift == 1
    assert labels["profile"] == "standin"
    assert labels["version"] == "1"
    assert labels["digest"].startswith("sha256:")
    missing = [v for lab, v in by_name["nccl_launch_drift_variables"] if lab["kind"] == "missing"]
    assert missing == [1]
    [(running, one)] = by_name["nccl_launch_running_info"]
    assert (running["running_profile"], one) == ("standin@1", 1)
    assert running["running_digest"] == labels["digest"]
    states = {lab["state"]: v for lab, v in by_name["nccl_launch_processes"]}
    assert states == {"ok": 4, "drift": 1, "unreadable": 0}
    assert [v for _, v in by_name["nccl_launch_env_files_unchecked"]] == [0]
    assert [path.name for path in textfile.parent.iterdir()] == ["nccl_launch.prom"]


def test_a_newer_profile_file_than_the_server_runs_is_reported(
    start: Started, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    server = start()
    write_profile("standin", PROFILE.format(version=2, buffsize="32MiB", python=sys.executable,
                                            port=server.port))  # fmt: skip
    result = run_cli("check", "--pid", str(server.process.pid))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("check standin@2 (sha256:")
    assert lines[1].startswith("server runs standin@1 (sha256:")
    assert ", the file is standin@2 (sha256:" in lines[1]
    assert '  ~ NCCL_BUFFSIZE  "33554432" -> "16777216"' in lines
    assert lines[-2] == "drift: 5 drift, another digest running, of 5 processes"
    assert lines[-1].startswith("fix: a process keeps the environment it started with: ")


def test_check_refuses_a_profile_edited_away_from_its_pin(
    start: Started, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    server = start()
    pinned = json.loads(run_cli("show", "standin", "--format", "json").stdout)["digest"]
    assert run_cli("check", "--pid", str(server.process.pid), "--digest", pinned).returncode == 0
    # Edited without a new version: the server restarted from it would agree with the file.
    text = PROFILE.format(version=1, buffsize="32MiB", python=sys.executable, port=server.port)
    path = write_profile("standin", text)
    edited = json.loads(run_cli("show", "standin", "--format", "json").stdout)["digest"]
    # The file the server recorded (by its full path), or the profile named (found as named).
    for ref, shown in (([], path.absolute()), (["standin"], "profiles/standin.toml")):
        result = run_cli("check", *ref, "--pid", str(server.process.pid), "--digest", pinned)
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr.startswith(
            f"nccl-launch: profile standin@1 ({shown}) is {edited} but --digest pins "
            f"{pinned}: the file changed since the pin was taken; "
        )


def test_watch_keeps_checking_against_the_pinned_version_after_an_edit(
    start: Started, run_cli: RunCli
) -> None:
    server = start()
    pinned = json.loads(run_cli("show", "standin", "--format", "json").stdout)["digest"]
    watcher = Watcher("--port", str(server.port), "--watch", "0.2", "--digest", pinned)
    watcher.wait_for_line("no drift in 5 processes")
    profile = Path("profiles/standin.toml")
    profile.write_text(profile.read_text().replace('"LL"', '"Simple"'))
    line = watcher.wait_for_start("profile invalid now, checked against this last good version: ")
    assert f"but --digest pins {pinned}: the file changed since the pin was taken" in line
    watcher.process.send_signal(signal.SIGTERM)
    out = watcher.finish()
    assert watcher.process.returncode == 0
    assert out.endswith("no drift in 5 processes")  # the server runs the pinned version


def test_a_json_watch_prints_one_object_a_line_when_it_changes(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    with sleeper({b"NCCL_PROTO": b"LL"}) as pid:
        watcher = Watcher(str(path), "--pid", str(pid), "--watch", "0.1", "--format", "json")
        watcher.wait_for_start("{")
        time.sleep(0.5)  # five more looks at the same environment: nothing more to say
        watcher.process.send_signal(signal.SIGTERM)
        out = watcher.finish()
    assert watcher.process.returncode == 0
    [line] = out.splitlines()
    assert json.loads(line)["processes"][0]["pid"] == pid
    prometheus = run_cli("check", str(path), "--pid", "1", "--watch", "1", "--format", "prometheus")
    said = "nccl-launch: --watch --format prometheus rewrites a textfile: give -o FILE\n"
    assert (prometheus.returncode, prometheus.stderr) == (2, said)


@pytest.mark.own_pid_namespace
def test_watch_stops_the_whole_tree_when_a_late_worker_drifts(start: Started) -> None:
    server = start(env={"STANDIN_LATE_DRIFT": "NCCL_PROTO=Simple"})
    pid = str(server.process.pid)
    watcher = Watcher("--pid", pid, "--watch", "0.2", "--on-drift", "stop", "--grace", "5")
    watcher.wait_for_line("no drift in 5 processes")
    os.kill(server.process.pid, signal.SIGUSR1)  # a scheduler that appears later, drifted
    out = watcher.finish()
    server.process.wait(timeout=10)  # reap it: we are its parent
    assert watcher.process.returncode == 1, out
    assert out.startswith("--- ")
    assert '"LL" -> "Simple"' in out  # the late worker, seen and stopped
    assert f"stopped the server: 6 processes of pid {pid}'s tree ended" in out
    assert alive(server.tree) == []
    assert [p for p in psutil.process_iter(["cmdline"]) if any(
        str(server.port) in part for part in (p.info["cmdline"] or []))] == []  # fmt: skip


def test_sigterm_ends_the_watch_and_leaves_the_server_alone(start: Started) -> None:
    server = start()
    watcher = Watcher("--port", str(server.port), "--watch", "0.2")
    watcher.wait_for_line("no drift in 5 processes")
    with Opens(Path("profiles/standin.toml")) as profile_reads:
        profile_reads.wait(3, watcher.process)  # three more rounds: each reads the profile once
    watcher.process.send_signal(signal.SIGTERM)
    out = watcher.finish(timeout=10)
    assert watcher.process.returncode == 0
    assert out.count("--- ") == 1  # printed once: nothing changed
    assert alive(server.tree) == server.tree


def test_a_watch_started_with_sigint_ignored_keeps_it_ignored(start: Started) -> None:
    server = start()
    watcher = Watcher("--port", str(server.port), "--watch", "0.2", ignoring="INT")
    watcher.wait_for_line("no drift in 5 processes")
    watcher.process.send_signal(signal.SIGINT)
    with Opens(Path("profiles/standin.toml")) as profile_reads:
        profile_reads.wait(3, watcher.process)  # still looking, three rounds later
    watcher.process.send_signal(signal.SIGTERM)
    watcher.finish(timeout=10)
    assert watcher.process.returncode == 0
    assert alive(server.tree) == server.tree


def gauges(textfile: Path) -> dict[str, float]:
    """The value of each one-sample metric in a textfile (none before it is first written)."""
    try:
        text = textfile.read_text()
    except FileNotFoundError:
        return {}
    families = text_string_to_metric_families(text)
    return {f.name: f.samples[0].value for f in families if len(f.samples) == 1}


def wait_for_gauge(
    textfile: Path, name: str, value: float, process: subprocess.Popen[str]
) -> dict[str, float]:
    """The textfile's gauges once `name` reads `value`."""

    def reached() -> dict[str, float]:
        found = gauges(textfile)
        return found if found.get(name) == value else {}

    return wait_for(reached, f"{name} to read {value}", process=process)


BROKEN = 'schema = 1\nname = "standin"\nversion = 2\n[nccl]\nPROTO = "'  # saved mid-edit


def test_watch_keeps_the_last_good_profile_while_the_file_is_invalid(
    start: Started, tmp_path: Path
) -> None:
    server = start()
    profile = Path("profiles/standin.toml")
    good = profile.read_text()
    textfile = tmp_path / "nccl_launch.prom"
    watcher = Watcher("--pid", str(server.process.pid), "--watch", "0.2",
                      "--format", "prometheus", "--output", str(textfile))  # fmt: skip
    wait_for_gauge(textfile, "nccl_launch_profile_valid", 1, watcher.process)
    profile.write_text(BROKEN)
    invalid = wait_for_gauge(textfile, "nccl_launch_profile_valid", 0, watcher.process)
    assert invalid["nccl_launch_drift"] == 0  # the server still matches the last good version
    stamp = invalid["nccl_launch_check_timestamp_seconds"]
    wait_for(lambda: gauges(textfile)["nccl_launch_check_timestamp_seconds"] > stamp,
             "another round: the textfile is not frozen", process=watcher.process)  # fmt: skip
    profile.write_text(good.replace('"LL"', '"Simple"'))  # valid again, and now different
    fixed = wait_for_gauge(textfile, "nccl_launch_drift", 1, watcher.process)
    assert fixed["nccl_launch_profile_valid"] == 1
    watcher.process.send_signal(signal.SIGTERM)
    watcher.finish()
    assert watcher.process.returncode == 0
    assert watcher.process.stderr is not None
    [warning] = watcher.process.stderr.read().splitlines()  # once, not every round
    assert warning.startswith(
        "nccl-launch: warning: profile invalid, still checking against standin@1: "
        f"{profile.absolute()}: not valid TOML: "  # the file run recorded, by its full path
    )
    assert alive(server.tree) == server.tree


def test_watch_text_says_which_version_it_checks_while_the_file_is_invalid(
    start: Started,
) -> None:
    server = start()
    watcher = Watcher("--port", str(server.port), "--watch", "0.2")
    watcher.wait_for_line("no drift in 5 processes")
    Path("profiles/standin.toml").write_text(BROKEN)
    line = watcher.wait_for_start("profile invalid now, checked against this last good version: ")
    assert line.endswith("not valid TOML: Unterminated string (at end of document)")
    watcher.process.send_signal(signal.SIGTERM)
    out = watcher.finish()
    assert watcher.process.returncode == 0
    assert out.count("--- ") == 2 and out.endswith("no drift in 5 processes")


def test_a_profile_invalid_at_the_first_look_is_an_error_even_watching(
    start: Started, run_cli: RunCli
) -> None:
    server = start()
    Path("profiles/standin.toml").write_text(BROKEN)
    result = run_cli("check", "--pid", str(server.process.pid), "--watch", "0.2")
    assert result.returncode == 2
    assert result.stderr.startswith(f"{Path.cwd()}/profiles/standin.toml: not valid TOML: ")


def test_on_drift_stop_needs_watch(run_cli: RunCli) -> None:
    result = run_cli("check", "--pid", "1", "--on-drift", "stop")
    assert (result.returncode, result.stderr) == (
        2,
        "nccl-launch: --on-drift stop needs --watch SECONDS: one check never stops a server\n",
    )


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--watch", "inf"), "--watch inf: valid: 0.1 <= SECONDS <= 86400"),
        (("--watch", "1e10"), "--watch 1e+10: valid: 0.1 <= SECONDS <= 86400"),
        (("--watch", "nan"), "--watch nan: valid: 0.1 <= SECONDS <= 86400"),
        (("--grace", "nan"), "--grace nan: valid: 0 <= SECONDS <= 86400"),
        (("--grace", "-1"), "--grace -1: valid: 0 <= SECONDS <= 86400"),
    ],
)
def test_watch_and_grace_take_finite_seconds_only(
    option: tuple[str, str], message: str, run_cli: RunCli
) -> None:
    result = run_cli("check", "--pid", "1", "--watch", "1", *option)
    assert (result.returncode, result.stderr) == (2, f"nccl-launch: {message}\n")


ONE_TARGET = "nccl-launch: name the server with exactly one of --pid, --port, --pidfile, --unit\n"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--pid", "4194303"], 3, "nccl-launch: no process with pid 4194303\n"),
        (["--pidfile", "missing.pid"], 3,
         "nccl-launch: pidfile missing.pid: cannot read: No such file or directory\n"),
        ([], 2, ONE_TARGET),
        (["--pid", "1", "--port", "1"], 2, ONE_TARGET),
    ],
)  # fmt: skip
def test_target_errors(args: list[str], code: int, message: str, run_cli: RunCli) -> None:
    result = run_cli("check", *args)
    assert (result.returncode, result.stderr) == (code, message)


def test_port_nobody_listens_on_is_a_target_error(run_cli: RunCli) -> None:
    port = free_port()
    result = run_cli("check", "--port", str(port))
    assert (result.returncode, result.stderr) == (
        3,
        f"nccl-launch: no process listens on port {port}\n",
    )


def test_pidfile_and_systemd_unit_targets(start: Started, run_cli: RunCli, tmp_path: Path) -> None:
    server = start()
    Path("server.pid").write_text(f"{server.process.pid}\n")
    assert run_cli("check", "--pidfile", "server.pid").returncode == 0
    # No systemd runs here, so `systemctl` is a stand-in that answers like `systemctl show`.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    show = "show --property MainPID --value"
    systemctl.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "{show} -- sglang.service" ] && echo {server.process.pid} && exit 0\n'
        f'[ "$*" = "{show} -- stopped.service" ] && echo 0 && exit 0\n'
        # What another machine (-H) would answer: a unit's name is never an option.
        f'[ "$*" = "{show} -Hroot@elsewhere" ] && echo {server.process.pid} && exit 0\n'
        "printf 'Failed to get properties: \\377\\n' >&2; exit 1\n"
    )
    systemctl.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    assert run_cli("check", "--unit", "sglang.service", env=env).returncode == 0
    stopped = run_cli("check", "--unit", "stopped.service", env=env)
    assert (stopped.returncode, stopped.stderr) == (
        3, "nccl-launch: unit stopped.service has no running main process\n")  # fmt: skip
    elsewhere = run_cli("check", "--unit=-Hroot@elsewhere", env=env)
    assert (elsewhere.returncode, elsewhere.stderr) == (
        3, "nccl-launch: systemctl show -Hroot@elsewhere failed: Failed to get properties: "
           "\ufffd\n")  # fmt: skip


def test_a_unit_systemctl_cannot_answer_for_is_one_clean_line(
    run_cli: RunCli, tmp_path: Path
) -> None:
    # systemctl on a host not booted with systemd: two lines on stderr, exit 1.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(
        "#!/bin/sh\n"
        "echo 'System has not been booted with systemd as init system (PID 1).' >&2\n"
        "echo 'Failed to connect to bus: Host is down' >&2\n"
        "exit 1\n"
    )
    systemctl.chmod(0o755)
    result = run_cli("check", "--unit", "sglang.service", env={"PATH": str(bin_dir)})
    assert (result.returncode, result.stderr) == (
        3,
        "nccl-launch: systemctl show sglang.service failed: System has not been booted with "
        "systemd as init system (PID 1).\n",
    )


# The comparison itself, on plain dicts.


def plan_and_policy(**policy: Any) -> tuple[ProfilePlan, Policy]:
    profile = Profile.model_validate({"schema": 1, "name": "p", "version": 3,
                                      "nccl": {"PROTO": "LL", "CUMEM_ENABLE": 1},
                                      "policy": policy})  # fmt: skip
    return build_plan(profile), profile.policy


def test_unreadable_is_never_reported_as_missing_keys() -> None:
    plan, policy = plan_and_policy()
    report = evaluate(plan, policy, "p.toml", [ProcessSnapshot(1, 0.0, ("main",), None, "denied")])
    [process] = report.processes
    assert (process.readable, process.reason, process.entries) == (False, "denied", [])
    assert not report.ok
    assert not report.drifts
    assert report.exit_code == 3  # nothing could be read: a target problem, not drift
    # nor is a process whose markers could not be read said not to be nccl-launch's
    assert live_lines(report)[1:] == [
        "pid 1  main",
        "  unreadable: denied",
        "drift: 1 unreadable, of 1 process",
    ]
    env = {"NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "1"}
    mixed = [
        ProcessSnapshot(1, 0.0, ("main",), env),
        ProcessSnapshot(2, 0.0, ("w",), None, "denied"),
    ]
    assert evaluate(plan, policy, "p.toml", mixed).exit_code == 1


@pytest.mark.parametrize(
    ("undeclared", "clause"),
    [
        ("NCCL_IB_HCA", "; an undeclared variable it should keep goes in [nccl] first"),
        ("NCCL_PROTOCOL", ""),  # a misspelling: [nccl] refuses it, so it is no fix
    ],
)
def test_the_restart_line_fits_the_profile_and_the_drift(undeclared: str, clause: str) -> None:
    """A profile without [server] is restarted with its command after `--`."""
    plan, policy = plan_and_policy()
    env = {"NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "1", undeclared: "x"}
    report = evaluate(plan, policy, "p.toml", [ProcessSnapshot(1, 0.0, ("main",), env)])
    assert live_lines(report)[-1] == (
        "fix: a process keeps the environment it started with: restart the server through "
        f"nccl-launch run p.toml -- COMMAND... (its unit, or that command){clause}"
    )


def test_an_empty_environment_is_read_not_called_overwritten(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("empty", 'schema = 1\nname = "empty"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    process = subprocess.Popen(["/usr/bin/env", "-i", "/bin/sleep", "30"])
    try:
        # Once `env` has exec'd sleep, the process holds the empty environment it was given.
        wait_for(lambda: psutil.Process(process.pid).cmdline()[:1] == ["/bin/sleep"],
                 "env -i to exec sleep", process=process)  # fmt: skip
        result = run_cli("check", "empty", "--pid", str(process.pid))
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 1
    assert '  - NCCL_PROTO  "LL" -> unset' in result.stdout.splitlines()
    assert "unreadable" not in result.stdout


def test_server_owned_and_undeclared_in_a_worker() -> None:
    plan, policy = plan_and_policy(undeclared_nccl="warn")
    env = {"NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "0", "NCCL_IB_HCA": "mlx5_0",
           "NCCL_NVLS_ENABLE": "0"}  # fmt: skip
    report = evaluate(plan, policy, "p.toml", [ProcessSnapshot(1, 0.0, ("w",), env)])
    [process] = report.processes
    assert [(e.key, e.reason, e.tolerated) for e in process.entries] == [
        ("NCCL_CUMEM_ENABLE", "server-owned", True),
        ("NCCL_IB_HCA", "policy", True),
        ("NCCL_NVLS_ENABLE", "server-owned", True),
    ]
    assert report.ok
    strict_plan, strict = plan_and_policy()
    assert not evaluate(strict_plan, strict, "p.toml", [ProcessSnapshot(1, 0.0, ("w",), env)]).ok


def test_nccl_debug_variables_are_tolerated_when_run_added_them(
    start: Started, run_cli: RunCli
) -> None:
    server = start(nccl_debug=True)
    result = run_cli("check", "--port", str(server.port))
    assert result.returncode == 0, result.stdout
    tolerated = "tolerated: NCCL_DEBUG, NCCL_DEBUG_FILE, NCCL_DEBUG_SUBSYS"
    assert f"no drift, 3 match, {tolerated}" in result.stdout


# The process a check reads, as another user or an older nccl-launch may have started it.


@pytest.mark.parametrize(
    "label", ["{path}@1", "../elsewhere/evil@1", "evil.toml@1", "evil", "evil@", "evil@1@2"]
)
def test_the_servers_marker_is_a_name_never_a_path(
    write_profile: WriteProfile, run_cli: RunCli, label: str
) -> None:
    path = write_profile("evil", EVIL, folder="elsewhere")
    label = label.format(path=path)
    with sleeper({b"NCCL_LAUNCH_PROFILE": label.encode(), b"NCCL_PROTO": b"LL"}) as pid:
        result = run_cli("check", "--pid", str(pid))
    assert (result.returncode, result.stderr) == (2, (
        f"nccl-launch: pid {pid}: NCCL_LAUNCH_PROFILE is {label!r}, not NAME@VERSION of a "
        "profile; name the PROFILE to check it against\n"))  # fmt: skip


def test_check_finds_the_file_the_server_was_started_from_in_any_directory(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("moved", EVIL.replace('"evil"', '"moved"'), folder="deploy")
    digest = build_plan(load_profile(str(path)).profile).digest
    env = {b"NCCL_LAUNCH_PROFILE": b"moved@1", b"NCCL_LAUNCH_DIGEST": digest.encode(),
           b"NCCL_LAUNCH_PROFILE_FILE": bytes(path), b"NCCL_PROTO": b"LL"}  # fmt: skip
    with sleeper(env) as pid:
        found = run_cli("check", "--pid", str(pid), "--format", "json")
        path.write_text(EVIL.replace('"evil"', '"moved"').replace('"LL"', '"Simple"'))
        changed = run_cli("check", "--pid", str(pid))
        path.write_text(EVIL)
        renamed = run_cli("check", "--pid", str(pid))
    assert found.returncode == 0, found.stderr  # ./profiles has no moved.toml: the marker
    assert json.loads(found.stdout)["path"] == str(path)
    assert changed.returncode == 1  # the same file, edited since: the digest tells
    assert changed.stdout.splitlines()[1].startswith("server runs moved@1 (sha256:")
    assert (renamed.returncode, renamed.stderr) == (2, (
        f"nccl-launch: pid {pid} runs moved, but its NCCL_LAUNCH_PROFILE_FILE {path} now "
        "declares evil; name the PROFILE to check it against\n"))  # fmt: skip


@pytest.mark.parametrize("file", ["/etc/passwd", "profiles/moved.toml"])
def test_a_profile_file_marker_that_is_no_profile_path_is_refused(
    write_profile: WriteProfile, run_cli: RunCli, file: str
) -> None:
    write_profile("moved", EVIL.replace('"evil"', '"moved"'))
    env = {b"NCCL_LAUNCH_PROFILE": b"moved@1", b"NCCL_LAUNCH_PROFILE_FILE": file.encode()}
    with sleeper(env) as pid:
        result = run_cli("check", "--pid", str(pid))
    assert (result.returncode, result.stderr) == (2, (
        f"nccl-launch: pid {pid}: NCCL_LAUNCH_PROFILE_FILE is {file!r}, not the absolute path "
        "of a .toml file; name the PROFILE to check it against\n"))  # fmt: skip


def test_the_launch_records_the_absolute_profile_file_outside_the_digest() -> None:
    plan, policy = plan_and_policy()
    result = merge_environment(
        inherited_environment({}, []), plan, policy, {}, profile_file=Path("profiles/p.toml")
    )
    assert result.env["NCCL_LAUNCH_PROFILE_FILE"] == str(Path.cwd() / "profiles" / "p.toml")
    assert result.sources["NCCL_LAUNCH_PROFILE_FILE"] == "nccl-launch"
    assert result.report.digest == plan.digest == plan_and_policy()[0].digest


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("\u0663\n", "pidfile server.pid holds '\u0663', not a PID"),  # ARABIC-INDIC DIGIT THREE
        ("0\n", "pidfile server.pid holds '0', not a PID"),
        ("1" * 5000, "pidfile server.pid: larger than 64 bytes; this is not a pidfile"),
        (b"\xff1", "pidfile server.pid: not UTF-8 text (byte 0)"),
        (os.mkfifo, "pidfile server.pid: a FIFO; only regular files are read"),
    ],
)
def test_a_pidfile_holds_ascii_digits_in_a_small_regular_file(
    run_cli: RunCli, content: Any, message: str
) -> None:
    pidfile = Path("server.pid")
    if isinstance(content, bytes):
        pidfile.write_bytes(content)
    elif isinstance(content, str):
        pidfile.write_text(content)
    else:
        content(pidfile)
    result = run_cli("check", "--pidfile", "server.pid")
    assert (result.returncode, result.stderr) == (3, f"nccl-launch: {message}\n")


@pytest.mark.parametrize(
    ("option", "value", "valid"),
    [
        ("--pid", "-5", "1<=x<=4194303"),
        ("--pid", "0", "1<=x<=4194303"),
        ("--pid", "4194304", "1<=x<=4194303"),  # above any pid_max Linux allows
        ("--pid", "99999999999999999999", "1<=x<=4194303"),
        ("--port", "-5", "1<=x<=65535"),
        ("--port", "0", "1<=x<=65535"),
        ("--port", "70000", "1<=x<=65535"),
    ],
)
def test_a_pid_or_port_no_process_can_have_is_a_usage_error(
    run_cli: RunCli, option: str, value: str, valid: str
) -> None:
    result = run_cli("check", option, value)
    assert result.returncode == 2
    assert f"Invalid value for '{option}': {value} is not in the range {valid}." in result.stderr
    if option == "--pid":  # bench and capture take a PID the same way
        for command in (["bench", "standin"], ["capture"]):
            other = run_cli(*command, "--pid", value)
            assert other.returncode == 2, command
            assert f"Invalid value for '--pid': {value} is not in the range {valid}." in (
                other.stderr
            )


def test_bytes_that_are_not_utf8_are_shown_escaped_in_every_format(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("raw", EVIL.replace('"evil"', '"raw"') + 'BUFFSIZE = "16MiB"\n')
    env = {b"NCCL_LAUNCH_PROFILE": b"raw@1", b"NCCL_PROTO": b"L\xffL",
           b"NCCL_BUFFSIZE": b"16777216\xfe", b"NCCL_\xfd": b"1", b"X\xfc": b"\xfb"}  # fmt: skip
    with sleeper(env, b"ti\xfatle") as pid:
        results = {fmt: run_cli("check", "--pid", str(pid), "--format", fmt)
                   for fmt in ("text", "json", "prometheus")}  # fmt: skip
    for fmt, result in results.items():
        assert (fmt, result.returncode, result.stderr) == (fmt, 1, "")
    [process] = json.loads(results["json"].stdout)["processes"]
    assert process["title"].endswith("'import time; time.sleep(60)' 'ti\\xfatle'")
    entries = {entry["key"]: entry["actual"] for entry in process["entries"]}
    # NCCL reads the leading digits of BUFFSIZE: the same size, so it matches.
    assert entries == {"NCCL_PROTO": "L\\xffL", "NCCL_\\xfd": "1"}
    assert process["matched"] == ["NCCL_BUFFSIZE"]
    line = '  ~ NCCL_PROTO  "LL" -> "L\\\\xffL"  (NCCL rejects it: init fails with ncclInvalidUsage'
    assert any(text.startswith(line) for text in results["text"].stdout.splitlines())


def test_what_a_process_says_of_its_profile_is_masked_and_escaped_in_every_format(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """The markers are the process's to write: a credential or a CR in them reaches no output."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    env = {b"NCCL_PROTO": b"LL", b"NCCL_LAUNCH_PROFILE": b"http://u:pw1secret@h\r",
           b"NCCL_LAUNCH_DIGEST": b"password=pw2secret"}  # fmt: skip
    with sleeper(env) as pid:
        results = {fmt: run_cli("check", "p", "--pid", str(pid), "--format", fmt)
                   for fmt in ("text", "json", "prometheus")}  # fmt: skip
    for fmt, result in results.items():
        assert result.returncode in (0, 1), (fmt, result.stderr)
        written = result.stdout + result.stderr
        assert "secret" not in written and "\r" not in written, fmt
    families = text_string_to_metric_families(results["prometheus"].stdout)
    [info] = [family for family in families if family.name == "nccl_launch_running_info"]
    assert info.samples[0].labels["running_profile"] == "http://***@h\\r"
    assert info.samples[0].labels["running_digest"] == "password=***"


def test_a_report_against_the_last_good_version_says_so_in_every_format() -> None:
    plan, policy = plan_and_policy()
    env = {"NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "1"}
    snapshots = [ProcessSnapshot(1, 0.0, ("main",), env)]
    invalid = [
        Finding("not-toml", "", "not valid TOML: line 2", file="p.toml"),
        Finding("repeated-field", "nccl", "PROTO given twice", "keep one", file="p.toml"),
    ]
    said = "p.toml: not valid TOML: line 2; p.toml: nccl: PROTO given twice; keep one"
    report = evaluate(plan, policy, "p.toml", snapshots, profile_error=invalid)
    assert json.loads(report.model_dump_json())["profile_error"] == said
    assert live_text(report).splitlines()[1] == (
        f"profile invalid now, checked against this last good version: {said}"
    )
    assert 'nccl_launch_profile_valid{profile="p",version="3",' in metrics(report)
    assert json.loads(evaluate(plan, policy, "p.toml", snapshots).model_dump_json())[
        "profile_error"] is None  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked only as root")
def test_the_recorded_profile_file_is_read_through_the_trusting_loader(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("moved", EVIL.replace('"evil"', '"moved"'), folder="deploy")
    os.chown(path, 65534, 65534)  # nobody's file: as root, never read
    env = {b"NCCL_LAUNCH_PROFILE": b"moved@1", b"NCCL_LAUNCH_PROFILE_FILE": bytes(path)}
    with sleeper(env) as pid:
        result = run_cli("check", "--pid", str(pid))
    assert result.returncode == 2
    assert result.stderr.startswith(f"nccl-launch: profile {path}: owned by uid 65534, not root")


def test_a_server_started_by_run_is_checked_from_any_directory(
    start: Started, tmp_path: Path
) -> None:
    """run records the profile's absolute path, so check needs neither PROFILE nor the cwd."""
    server = start()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [console_script(), "check", "--pid", str(server.process.pid), "--format", "json"],
        cwd=elsewhere, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["path"] == str(tmp_path / "profiles" / "standin.toml")


# The tree walk through /proc/PID/task/TID/children, against psutil's scan of every process.

from nccl_launch.live.processes import descendants, snapshot_tree  # noqa: E402
from nccl_launch.live.resolve import hold  # noqa: E402
from nccl_launch.live.target import Target  # noqa: E402


def _has_children_files() -> bool:
    pid = os.getpid()
    return Path(f"/proc/{pid}/task/{pid}/children").exists()


needs_children_files = pytest.mark.skipif(
    not _has_children_files(), reason="this kernel has no CONFIG_PROC_CHILDREN"
)


def _pids(processes: list[psutil.Process]) -> set[int]:
    return {process.pid for process in processes}


@needs_children_files
def test_the_walk_finds_the_same_tree_as_psutil(start: Started) -> None:
    server = start()
    main = psutil.Process(server.process.pid)
    walked = descendants(main)
    assert len(server.tree) >= 4  # two schedulers, a detokenizer, the resource tracker
    assert _pids(walked) == _pids(main.children(recursive=True)) == set(server.tree[1:])
    with hold(Target(pid=main.pid)) as held:
        snapshots = [snapshot.pid for snapshot in snapshot_tree(held)]
    assert (snapshots[0], sorted(snapshots)) == (main.pid, sorted(server.tree))


THREADED = """
import subprocess, sys, threading, time
def spawn():
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(grandchild.pid, threading.get_native_id(), flush=True)
    time.sleep(60)  # alive: a thread's children move to another thread when it ends
threading.Thread(target=spawn, daemon=True).start()
time.sleep(60)
"""


@needs_children_files
def test_the_walk_finds_a_grandchild_started_by_a_thread_of_a_child() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", THREADED], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert child.stdout is not None
        grandchild, thread = map(int, child.stdout.readline().split())
        tasks = Path(f"/proc/{child.pid}/task")
        assert thread != child.pid
        assert (tasks / str(thread) / "children").read_text().split() == [str(grandchild)]
        assert str(grandchild) not in (tasks / str(child.pid) / "children").read_text().split()
        main = psutil.Process(os.getpid())
        walked = _pids(descendants(main))
        assert {child.pid, grandchild} <= walked
        assert walked == _pids(main.children(recursive=True))
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert child.stdout is not None
        child.stdout.close()


def test_without_children_files_the_walk_falls_back_to_psutil(
    start: Started, tmp_path: Path
) -> None:
    server = start()
    main = psutil.Process(server.process.pid)
    task = tmp_path / str(main.pid) / "task" / str(main.pid)
    task.mkdir(parents=True)  # the process is there, its children file is not
    assert _pids(descendants(main, proc=tmp_path)) == set(server.tree[1:])
    (task / "children").write_text("")  # a file that lists none: the walk reads it
    assert descendants(main, proc=tmp_path) == []


def test_a_process_title_cannot_forge_a_line_of_checks_report() -> None:
    # A worker's title is whatever its argv says (setproctitle, or the argv after `--`).
    from nccl_launch.live.compare import LiveReport, ProcessReport
    from nccl_launch.render.reports import live_text

    forged = "sglang::scheduler\nno drift in 9 processes\x1b[2J"
    process = ProcessReport(pid=7, title=forged, readable=True)
    report = LiveReport(
        profile="p@1", digest="sha256:0", path="p.toml", main_pid=7, running_profile="p@1",
        running_digest="sha256:0", processes=[process],
    )  # fmt: skip
    text = live_text(report)
    assert "sglang::scheduler\\nno drift in 9 processes\\x1b[2J" in text
    assert "\x1b" not in text
    assert not any(line.startswith("no drift in 9") for line in text.splitlines())


# A server that exits and a newcomer that takes its PID, in a PID namespace of the test's own,
# where writing ns_last_pid chooses the next PID. The driver is the namespace's PID 1: when it
# exits, every process left in the namespace dies with it.

REUSE = """
import json, signal, subprocess, sys, time

def server(**markers):
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    return subprocess.Popen(argv, env={"NCCL_PROTO": "LL", **markers})

def reuse(old, env=None):
    old.kill()
    old.wait()
    with open("/proc/sys/kernel/ns_last_pid", "w") as file:
        file.write(str(old.pid - 1))
    newcomer = subprocess.Popen(["sleep", "1000"], env=env)
    assert newcomer.pid == old.pid, (newcomer.pid, old.pid)
    return newcomer

def watch(profile, script, digest):
    # Started as `run` starts it: --on-drift stop signals nothing else.
    old = server(NCCL_LAUNCH_PROFILE="evil@1", NCCL_LAUNCH_DIGEST=digest)
    argv = [script, "check", profile, "--pid", str(old.pid), "--watch", "0.3",
            "--on-drift", "stop", "--grace", "1"]
    watcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    while not seen or not seen[-1].startswith("no drift"):
        seen.append(watcher.stdout.readline())
        assert seen[-1], seen
    watcher.send_signal(signal.SIGSTOP)  # between two rounds: the last one has printed
    newcomer = reuse(old)
    watcher.send_signal(signal.SIGCONT)
    out = "".join(seen) + watcher.communicate(timeout=20)[0]
    alive = newcomer.poll() is None
    return {"pid": old.pid, "code": watcher.returncode, "out": out, "alive": alive}

def held():
    from nccl_launch.findings import Refused
    from nccl_launch.live.processes import snapshot_tree, stop_tree
    from nccl_launch.live.resolve import hold
    from nccl_launch.live.target import Target

    old = server()
    with hold(Target(pid=old.pid)) as server_held:
        snapshots = snapshot_tree(server_held)
        newcomer = reuse(old)
        try:
            snapshot_tree(server_held)
            error = None
        except Refused as raised:
            error = raised.findings[0].message
        ended = stop_tree(server_held, snapshots, 1)
    return {"pid": old.pid, "error": error, "ended": ended, "alive": newcomer.poll() is None}

def bench(profile, script, standin, port):
    # The main process only starts the server: the server lives on when it is killed.
    start = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)"
    argv = [sys.executable, "-c", start, sys.executable, "-m", "sglang.launch_server",
            "--model-path", "/models/m", "--tp", "2", "--port", port]
    env = {"NCCL_PROTO": "LL", "PYTHONPATH": standin, "SPT_NOENV": "1"}
    env["STANDIN_TOKEN_RATE"] = "100"  # 2 runs of 50 tokens: a second to take the PID
    old = subprocess.Popen(argv, env=env)
    argv = [script, "bench", profile, "--url", f"http://127.0.0.1:{port}", "--pid",
            str(old.pid), "--max-tokens", "50", "--runs", "2", "--warmup", "0", "--record",
            "bench.jsonl"]
    for _ in range(100):  # until the server listens
        done = subprocess.run([script, "check", profile, "--port", port], capture_output=True)
        if done.returncode == 0:
            break
        time.sleep(0.1)
    bencher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    while not seen or not seen[-1].startswith("checked before: pid"):
        seen.append(bencher.stdout.readline())
        assert seen[-1], seen
    newcomer = reuse(old, {"NCCL_PROTO": "LL"})  # the profile's environment, to the letter
    out = "".join(seen) + bencher.communicate(timeout=30)[0]
    return {"pid": old.pid, "code": bencher.returncode, "out": out}

mode = {"watch": watch, "held": held, "bench": bench}[sys.argv[1]]
print(json.dumps(mode(*sys.argv[2:])))
"""


def in_own_pid_namespace(*args: str) -> dict[str, Any]:
    """What the REUSE driver found, run as PID 1 of a new PID namespace."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", REUSE, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_watch_whose_server_pid_is_reused_ends_and_never_signals_the_newcomer(
    write_profile: WriteProfile,
) -> None:
    path = write_profile("evil", EVIL)
    digest = build_plan(load_profile(str(path)).profile).digest
    found = in_own_pid_namespace("watch", str(path), console_script(), digest)
    pid = found["pid"]
    assert (found["code"], found["alive"]) == (3, True), found["out"]
    assert found["out"].splitlines()[-1] == (
        f"server gone: pid {pid} ended, and its PID now names another process"
    )
    assert "stopped the server" not in found["out"]


def test_a_held_server_whose_pid_is_reused_is_neither_read_nor_signalled() -> None:
    found = in_own_pid_namespace("held")
    assert found["error"] == f"pid {found['pid']} ended, and its PID now names another process"
    assert (found["ended"], found["alive"]) == (1, True)


def test_bench_refuses_to_check_after_its_runs_another_process_than_before(
    write_profile: WriteProfile,
) -> None:
    path = write_profile("evil", EVIL)
    port = str(free_port())
    found = in_own_pid_namespace("bench", str(path), console_script(), str(STANDIN), port)
    assert found["code"] == 3, found["out"]
    assert found["out"].splitlines()[-1] == (
        f"nccl-launch: pid {found['pid']} ended, and its PID now names another process"
    )


# Which process a target names, and what `--on-drift stop` may signal.


@pytest.mark.own_pid_namespace
def test_check_refuses_listeners_of_two_trees_on_its_port(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    port = free_port()
    # A stranger on ::1, started first (the lower PID), and the profile's server on 127.0.0.1.
    argv = [sys.executable, "-m", "http.server", "--bind", "::1", str(port)]
    stranger = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    write_profile(
        "standin", PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
    )
    try:
        wait_for(lambda: listening(stranger.pid, port), "http.server to listen on ::1")
        server = Server([console_script(), "run", "standin"], {}, port)
        try:
            once = run_cli("check", "standin", "--port", str(port))
            watcher = Watcher("standin", "--port", str(port), "--watch", "0.2", "--on-drift",
                              "stop", "--grace", "1")  # fmt: skip
            watcher.finish()
            assert watcher.process.stderr is not None
            stopping = watcher.process.stderr.read()
        finally:
            server.stop()
        assert stranger.poll() is None  # never signalled
    finally:
        stranger.kill()
        stranger.wait()
    first, second = sorted([stranger.pid, server.process.pid])
    for code, stderr in [(once.returncode, once.stderr), (watcher.process.returncode, stopping)]:
        assert code == 3, stderr
        assert stderr.startswith(
            f"nccl-launch: processes of different trees listen on port {port}: pid {first} ("
        )
        assert f"), pid {second} (" in stderr
        assert stderr.endswith("); name the server with --pid\n")
        assert len(stderr.splitlines()) == 1


def listening(pid: int, port: int) -> bool:
    return any(
        connection.laddr and connection.laddr.port == port
        for connection in psutil.Process(pid).net_connections()
    )


@pytest.mark.own_pid_namespace
@pytest.mark.parametrize(
    ("markers", "said"),
    [
        ({}, "it has no NCCL_LAUNCH_PROFILE and NCCL_LAUNCH_DIGEST"),
        ({b"NCCL_LAUNCH_PROFILE": b"other@1", b"NCCL_LAUNCH_DIGEST": b"sha256:0"},
         "its NCCL_LAUNCH_PROFILE is 'other@1'"),
    ],
)  # fmt: skip
def test_a_stale_pidfile_is_refused_before_on_drift_stop_signals_anything(
    write_profile: WriteProfile, markers: dict[bytes, bytes], said: str
) -> None:
    write_profile("evil", EVIL)
    # Whatever now has the PID the pidfile holds: a process nccl-launch did not start as evil,
    # whose environment drifts. It is this test's child, not reaped, so its PID is its own.
    with sleeper({b"NCCL_PROTO": b"Simple", **markers}) as pid:
        Path("server.pid").write_text(f"{pid}\n")
        watcher = Watcher("evil", "--pidfile", "server.pid", "--watch", "0.2", "--on-drift",
                          "stop", "--grace", "1")  # fmt: skip
        out = watcher.finish()
        alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert watcher.process.stderr is not None
    assert (watcher.process.returncode, out, alive) == (3, "", True)
    assert watcher.process.stderr.read() == (
        f"nccl-launch: pid {pid} was not started by nccl-launch as evil@1: {said}; --on-drift stop "
        "signals only such a server (a stale pidfile names another process)\n"
    )


# The environment as NCCL reads it: glibc's getenv scans it in order and takes the first entry
# of a name; an entry without '=' (an empty one too) is one that matches no name.


@contextlib.contextmanager
def raw_environ(*entries: bytes) -> Iterator[int]:
    """A real process whose environment is exactly `entries`, in order, as execve takes them
    (duplicates and empty entries included: no mapping in between); its PID."""
    script = (
        "import ctypes, os, sys\n"
        "def array(words):\n"
        "    return (ctypes.c_char_p * (len(words) + 1))(*words, None)\n"
        "argv = [os.fsencode(sys.executable), b'-c', b'import time; time.sleep(60)']\n"
        "env = [os.fsencode(word) for word in sys.argv[1:]]\n"
        "ctypes.CDLL(None, use_errno=True).execve(argv[0], array(argv), array(env))\n"
        "sys.exit(f'execve: {os.strerror(ctypes.get_errno())}')\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script, *map(os.fsdecode, entries)])
    try:
        shown = b"".join(entry + b"\0" for entry in entries)
        environ = Path(f"/proc/{process.pid}/environ")
        wait_for(lambda: environ.read_bytes() == shown, "the exec", process=process)
        yield process.pid
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ((b"NCCL_PROTO=Simple", b"NCCL_PROTO=LL"), 1),  # NCCL reads Simple
        ((b"NCCL_PROTO=LL", b"NCCL_PROTO=Simple"), 0),  # NCCL reads LL
        ((b"LANG=C", b"", b"NCCL_PROTO=LL"), 0),  # read past the empty entry
        ((b"NCCL_PROTO", b"NCCL_PROTO=LL"), 0),  # no '=': matches no name
    ],
)
def test_check_reads_the_environment_as_nccls_getenv_does(
    write_profile: WriteProfile, run_cli: RunCli, entries: tuple[bytes, ...], code: int
) -> None:
    write_profile("evil", EVIL)
    with raw_environ(*entries) as pid:
        result = run_cli("check", "evil", "--pid", str(pid))
    assert result.returncode == code, result.stdout + result.stderr
    assert ('"LL" -> "Simple"' in result.stdout) == (code == 1)


def test_capture_writes_what_nccls_getenv_reads(run_cli: RunCli) -> None:
    with raw_environ(b"NCCL_PROTO=Simple", b"", b"NCCL_ALGO=Ring", b"NCCL_PROTO=LL") as pid:
        result = run_cli("capture", "--pid", str(pid), "-o", "live.toml")
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("live.toml").read_text())["nccl"] == {
        "PROTO": "Simple",
        "ALGO": "Ring",
    }


def test_capture_of_a_server_whose_directory_was_deleted_says_so(
    run_cli: RunCli, tmp_path: Path
) -> None:
    gone = tmp_path / "release-1"
    gone.mkdir()
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m"]
    record = tmp_path / "server.json"
    env = {"PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(record), "STANDIN_WAIT": "1",
           "NCCL_PROTO": "LL"}  # fmt: skip
    process = subprocess.Popen(argv, env=env, cwd=gone)
    try:
        wait_for_record(record, process)
        gone.rmdir()
        result = run_cli("capture", "--pid", str(process.pid), "-o", "live.toml")
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("live.toml").read_text())["server"]["cwd"] == str(gone)
    assert (
        f"nccl-launch: warning: its working directory {gone} was deleted after it started; "
        "[server] cwd names that path, where `run` fails until it exists again: create it or "
        "edit cwd"
    ) in result.stderr.splitlines()


# As PID 1 of a PID namespace of its own (`unshare --pid --fork --mount-proc`): a server of
# uid 65534 whose child is a setuid program of uid 1000, root's `check --on-drift stop` of it,
# and whether that child outlived the stop. Everything in the namespace ends with it.
SETUID_CHILD = """
import json, subprocess, sys, time
import psutil
setuid, script, profile, digest = sys.argv[1:]
markers = ["NCCL_LAUNCH_PROFILE=p@1", "NCCL_LAUNCH_DIGEST=" + digest, "NCCL_PROTO=Simple"]
server = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "env", "-i", *markers, "sh", "-c", '"$0" 600 & exec sleep 600', setuid])
deadline = time.monotonic() + 30
while True:
    children = psutil.Process(server.pid).children()
    if children and children[0].uids().effective == 1000:
        break
    assert time.monotonic() < deadline, "the setuid program never ran"
    time.sleep(0.05)
argv = [script, "check", profile, "--pid", str(server.pid), "--watch", "0.2",
        "--on-drift", "stop", "--grace", "1"]
done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
other = children[0]
alive = other.is_running() and other.status() != psutil.STATUS_ZOMBIE
print(json.dumps({"code": done.returncode, "out": done.stdout + done.stderr,
                  "pid": server.pid, "alive": alive}))
"""


def test_on_drift_stop_leaves_a_descendant_of_another_user_alone(
    write_profile: WriteProfile,
) -> None:
    """A server of uid 65534 whose tree holds a setuid program of uid 1000 (as `sudo` would
    be root's): that process is not the server's, and its user could not signal it. Root's
    stop ends the server's own processes only."""
    if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs root (beside two users), setpriv and unshare")
    path = write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    digest = load_profile(str(path)).plan.digest
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # tmp_path is root's 0700: none may exec there
    try:
        folder.chmod(0o755)
        setuid = folder / "sleep"
        shutil.copy(shutil.which("sleep") or "/bin/sleep", setuid)
        os.chown(setuid, 1000, 1000)
        setuid.chmod(0o4755)
        argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                SETUID_CHILD, str(setuid), console_script(), str(path), digest]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["code"] == 1, found["out"]
        assert f"stopped the server: 1 processes of pid {found['pid']}'s tree ended" in found["out"]
        assert found["alive"], found["out"]
    finally:
        shutil.rmtree(folder)
