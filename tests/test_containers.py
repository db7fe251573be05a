"""Where users run: in NVIDIA's CUDA images and Kubernetes pods. The image's NCCL_VERSION, a
build system's NCCL_HOME and the service links of a Service named nccl-proxy are never drift
in any command, are shown as what they are and left to the server; capture and convert write
none of them (nor CUDA_VERSION, NV_*, NVIDIA_*) into a profile. A name nobody documents is
still refused."""

from __future__ import annotations

import json
import signal
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nccl_launch.env.drift import DriftEntry
from nccl_launch.live.compare import LiveReport, ProcessReport
from nccl_launch.nccl import catalog, others
from nccl_launch.render.reports import live_lines
from nccl_launch.secrets.masking import masked_json
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import (
    BUILD,
    CONTAINER,
    LINKS,
    PROFILE,
    STANDIN,
    Server,
    free_port,
    while_running,
)
from tests.watching import Watcher

NOT_NCCL = sorted(name for name in CONTAINER if name.startswith("NCCL_"))
SHOWN = {
    "NCCL_VERSION": "set by NVIDIA's CUDA image, not read by NCCL",
    "NCCL_HOME": "read by nccl-tests' build, not read by NCCL",
    "NCCL_LIB_DIR": "read by PyTorch's build, not read by NCCL",
    "NCCL_PROXY_PORT": "a Kubernetes service link, not read by NCCL",
    "NCCL_PROXY_PORT_8080_TCP_ADDR": "a Kubernetes service link, not read by NCCL",
}
PLAIN = 'schema = 1\nname = "plain"\nversion = 1\n[nccl]\nPROTO = "LL"\n'


def test_each_name_is_known_by_its_origin_and_no_nccl_name_is_swallowed() -> None:
    assert [name for name in NOT_NCCL if others.what_is(name, CONTAINER[name]) is None] == []
    values = {*LINKS.values(), "x", ""}
    swallowed = [
        name
        for name in catalog.catalog()
        if any(others.what_is(name, value) is not None for value in values)
    ]
    assert swallowed == []  # NCCL_PROXY_CPUSET, NCCL_RAS_ADDR: NCCL's, never a service link


# A Service named plain `nccl`: its prefix is NCCL itself.
SERVICE_NCCL = {
    "NCCL_SERVICE_HOST": "10.0.0.9", "NCCL_SERVICE_PORT": "8080", "NCCL_PORT": "tcp://10.0.0.9:8080",
    "NCCL_PORT_8080_TCP": "tcp://10.0.0.9:8080", "NCCL_PORT_8080_TCP_PROTO": "tcp",
    "NCCL_PORT_8080_TCP_PORT": "8080", "NCCL_PORT_8080_TCP_ADDR": "10.0.0.9",
}  # fmt: skip


def test_the_links_of_a_service_named_nccl_are_service_links() -> None:
    said = {name: others.what_is(name, value) for name, value in SERVICE_NCCL.items()}
    assert said == dict.fromkeys(SERVICE_NCCL, others.SERVICE_LINK)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NCCL_PROXY_PORT", "8080"),  # a link's _PORT is a URL
        ("NCCL_PROXY_SERVICE_HOST", "eth0"),
        ("NCCL_PROXY_PORT_8080_TCP_PROTO", "ib"),
        ("NCCL_PROTOCOL", "LL"),
    ],
)
def test_a_name_of_a_service_links_shape_with_another_value_is_nobodys(
    name: str, value: str
) -> None:
    assert others.what_is(name, value) is None


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("NCCL_VERSION", None),  # not NCCL_IBVERBS_LIB: only "NCCL_" and a few letters shared
        *((name, None) for name in BUILD),
        ("NCCL_PROXY_SERVICE_HOST", None),
        ("NCCL_PROTOCOL", "NCCL_PROTO"),
        ("NCCL_SOCKET_IFNAM", "NCCL_SOCKET_IFNAME"),
        ("NCCL_NETWORK", "NCCL_NET"),
    ],
)
def test_did_you_mean_only_where_the_names_are_close(typed: str, meant: str | None) -> None:
    assert catalog.did_you_mean(typed) == meant


def test_run_dry_run_in_a_container_starts_and_shows_them_as_what_they_are(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("plain", PLAIN)
    result = run_cli("run", "--dry-run", "plain", "--", "true", env=CONTAINER)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    shown = result.stdout.split("not NCCL's, left as they are:\n")[1].split("argv:")[0]
    assert [line.split()[1] for line in shown.splitlines()] == NOT_NCCL
    for name, what in SHOWN.items():
        line = next(line for line in shown.splitlines() if line.split()[1] == name)
        assert line.endswith(f"(calling environment; {what})"), line
    assert '+ NCCL_VERSION "2.28.3-1" (calling' in " ".join(shown.split())


def test_a_name_nobody_documents_is_still_refused_beside_them(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("plain", PLAIN)
    result = run_cli(
        "run", "--dry-run", "plain", "--", "true", env=CONTAINER | {"NCCL_PROTOCOL": "LL"}
    )
    assert result.returncode == 1, result.stdout
    lines = result.stderr.splitlines()
    assert [" ".join(line.split()) for line in lines if "unknown to NCCL" in line] == [
        '+ NCCL_PROTOCOL "LL" (calling environment; undeclared, unknown to NCCL; did you mean '
        "NCCL_PROTO?)",
        "fix + (unknown to NCCL): NCCL reads no such name, so it is most likely misspelled (see "
        "its did-you-mean): unset it in the calling environment (the shell, the unit's "
        "Environment=)",
    ]
    assert f"1 drift (1 undeclared), {len(NOT_NCCL)} tolerated, 0 match" in lines


@pytest.mark.parametrize("policy", ["refuse", "warn", "strip"])
def test_the_server_gets_them_untouched_whatever_the_policy(
    policy: str, write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    """A real exec: even `strip`, which removes undeclared NCCL variables, leaves them."""
    write_profile("plain", PLAIN + f'[policy]\nundeclared_nccl = "{policy}"\n')
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    result = nccl_launch("run", "plain", "--", sys.executable, "-c", dump, env=CONTAINER)
    assert (result.returncode, result.stderr) == (0, "")
    child = json.loads(result.stdout)
    assert {name: child.get(name) for name in CONTAINER} == CONTAINER
    assert child["NCCL_PROTO"] == "LL"


def test_preflight_passes_and_shows_them(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("plain", PLAIN)
    result = run_cli("preflight", "plain", env=CONTAINER)
    assert result.returncode == 0, result.stdout
    assert "ok    environment  no drift: the profile sets 1 variables, 0 already inherited" in (
        result.stdout
    )
    assert "(calling environment; set by NVIDIA's CUDA image, not read by NCCL)" in result.stdout
    document = json.loads(run_cli("preflight", "plain", "--format", "json", env=CONTAINER).stdout)
    [environment] = [check for check in document["checks"] if check["name"] == "environment"]
    reasons = {entry["key"]: entry["reason"] for entry in environment["drift"]["entries"]}
    assert reasons == dict.fromkeys(NOT_NCCL, "not-nccl")


@pytest.fixture
def container_server(write_profile: WriteProfile) -> Iterator[Server]:
    """The stand-in server (a real tree: main process, 2 schedulers, detokenizer), started
    by `run` in a container's environment."""
    port = free_port()
    text = PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
    write_profile("standin", text)
    server = Server([console_script(), "run", "standin"], CONTAINER, port)
    yield server
    server.stop()


def test_check_of_a_server_started_in_a_container_finds_no_drift(
    container_server: Server, run_cli: RunCli
) -> None:
    port = str(container_server.port)
    text = run_cli("check", "standin", "--port", port)
    assert text.returncode == 0, text.stdout
    assert text.stdout.splitlines()[-1] == "no drift in 5 processes"
    words = [" ".join(line.split()) for line in text.stdout.splitlines()]
    line = '+ NCCL_VERSION "2.28.3-1" (set by NVIDIA\'s CUDA image, not read by NCCL)'
    # Said once for the tree, not once a process: a pod's every process has them all.
    header = "not NCCL's, left as they are, in all 5 processes:"
    assert words[-len(NOT_NCCL) - 2 :: len(NOT_NCCL) + 1] == [header, "no drift in 5 processes"]
    assert sorted(word.split()[1] for word in words[-len(NOT_NCCL) - 1 : -1]) == NOT_NCCL
    assert words.count(line) == 1
    assert "tolerated: NCCL_CUMEM_ENABLE, NCCL_GRAPH_REGISTER, NCCL_NVLS_ENABLE" in text.stdout
    verbose = run_cli("check", "standin", "--port", port, "--verbose")
    assert verbose.returncode == 0, verbose.stdout
    words = [" ".join(line.split()) for line in verbose.stdout.splitlines()]
    assert (words.count(line), header in words) == (5, False)  # each process, as before
    document = json.loads(run_cli("check", "standin", "--port", port, "--format", "json").stdout)
    for process in document["processes"]:
        entries = [entry for entry in process["entries"] if entry["key"] in CONTAINER]
        assert {(entry["reason"], entry["tolerated"]) for entry in entries} == {("not-nccl", True)}
        assert len(entries) == len(NOT_NCCL)
    prometheus = run_cli("check", "standin", "--port", port, "--format", "prometheus")
    assert prometheus.returncode == 0
    families = {family.name: family for family in text_string_to_metric_families(prometheus.stdout)}
    assert [sample.value for sample in families["nccl_launch_drift"].samples] == [0]


def test_what_only_some_processes_carry_is_said_once_with_how_many() -> None:
    def entry(key: str) -> DriftEntry:
        return DriftEntry(key=key, kind="undeclared", expected=None, actual=CONTAINER[key],
                          note=SHOWN[key], reason="not-nccl")  # fmt: skip

    version, link = entry("NCCL_VERSION"), entry("NCCL_PROXY_PORT")
    processes = [
        ProcessReport(pid=pid, title="sglang", readable=True, entries=entries)
        for pid, entries in [(7, [version, link]), (8, [version, link]), (9, [version])]
    ]
    report = LiveReport(
        profile="p@1", digest="sha256:0", path="p.toml", main_pid=7, running_profile="p@1",
        running_digest="sha256:0", processes=processes,
    )  # fmt: skip
    assert live_lines(report)[-5:] == [
        "not NCCL's, left as they are, in all 3 processes:",
        '  + NCCL_VERSION  "2.28.3-1"  (set by NVIDIA\'s CUDA image, not read by NCCL)',
        "not NCCL's, left as they are, in 2 of 3 processes:",
        '  + NCCL_PROXY_PORT  "tcp://10.0.0.7:8080"  (a Kubernetes service link, not read by NCCL)',
        "no drift in 3 processes",
    ]
    verbose = live_lines(report, verbose=True)  # under each process that carries it
    assert [line.split()[1] for line in verbose if line.startswith("  + ")] == [
        "NCCL_VERSION", "NCCL_PROXY_PORT", "NCCL_VERSION", "NCCL_PROXY_PORT", "NCCL_VERSION"
    ]  # fmt: skip
    assert verbose[-1] == "no drift in 3 processes"
    document = json.loads(masked_json(report))  # JSON keeps every entry of every process
    assert [len(process["entries"]) for process in document["processes"]] == [2, 2, 1]


def test_check_of_a_server_started_with_nccl_debug_in_a_container_finds_no_drift(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """NCCL logs only what it reads (the stand-in as NCCL): none of the container's names is
    NCCL's word."""
    port = free_port()
    write_profile(
        "standin", PROFILE.format(version=1, buffsize="16MiB", python=sys.executable, port=port)
    )
    server = Server([console_script(), "run", "--nccl-debug", "standin"], CONTAINER, port)
    try:
        document = json.loads(
            run_cli("check", "standin", "--port", str(port), "--format", "json").stdout
        )
    finally:
        server.stop()
    logs = [process["nccl_log"] for process in document["processes"]]
    assert sorted(log["state"] for log in logs) == ["none-yet"] * 3 + ["read"] * 2
    drift = [
        (e["key"], e["source"])
        for p in document["processes"]
        for e in p["entries"]
        if not e["tolerated"]
    ]
    assert drift == []


@pytest.mark.own_pid_namespace
def test_watch_on_drift_stop_leaves_a_healthy_server_in_a_container_running(
    container_server: Server,
) -> None:
    port = str(container_server.port)
    watcher = Watcher("--port", port, "--watch", "0.2", "--on-drift", "stop", "--grace", "1")
    watcher.wait_for_line("no drift in 5 processes")
    time.sleep(1)  # five more rounds
    watcher.process.send_signal(signal.SIGTERM)
    out = watcher.finish(timeout=10)
    assert watcher.process.returncode == 0, out
    assert "stopped the server" not in out
    assert all(psutil.pid_exists(pid) for pid in container_server.tree)


def test_capture_writes_none_of_the_images_variables(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "server.json"
    env = CONTAINER | {
        "PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out), "STANDIN_WAIT": "1",
        "NCCL_PROTO": "LL", "HF_HOME": "/hf", "CUDA_HOME": "/usr/local/cuda",
    }  # fmt: skip
    argv = [sys.executable, "-m", "sglang.launch_server", "--model", "/m"]
    result = while_running(
        argv,
        env,
        tmp_path,
        out,
        lambda pid: run_cli("capture", "--pid", str(pid), "-o", "live.toml"),
    )
    assert result.returncode == 0, result.stderr
    profile = tomllib.loads(Path("live.toml").read_text())
    assert profile["nccl"] == {"PROTO": "LL"}
    assert profile["env"] == {"HF_HOME": "/hf", "CUDA_HOME": "/usr/local/cuda"}
    warnings = result.stderr.splitlines()
    assert (
        "nccl-launch: warning: left out the image's own variables (set by NVIDIA's CUDA image): "
        "CUDA_VERSION, NCCL_VERSION, NVARCH, NVIDIA_REQUIRE_CUDA, NVIDIA_VISIBLE_DEVICES, "
        "NV_LIBNCCL_PACKAGE_NAME, NV_LIBNCCL_PACKAGE_VERSION"
    ) in warnings
    left = "nccl-launch: warning: left out what NCCL does not read: "
    [line] = [line for line in warnings if line.startswith(left)]
    assert "NCCL_HOME (read by nccl-tests' build)" in line
    assert "NCCL_PROXY_PORT (a Kubernetes service link)" in line
    assert run_cli("run", "--dry-run", "live.toml", env=CONTAINER).returncode == 0


def test_convert_of_a_script_that_exports_them_leaves_them_out(
    run_cli: RunCli,
) -> None:
    Path("start.sh").write_text(
        "export NCCL_VERSION=2.28.3-1 NCCL_HOME=/opt/nccl NCCL_PROTO=LL\n"
        "python3 -m sglang.launch_server --model-path /m\n"
    )
    result = run_cli("convert", "start.sh", "--name", "s", "-o", "s.toml", env=CONTAINER)
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("s.toml").read_text())["nccl"] == {"PROTO": "LL"}
    assert (
        "nccl-launch: warning: left out what NCCL does not read: NCCL_HOME (read by nccl-tests' "
        "build), NCCL_VERSION (set by NVIDIA's CUDA image)"
    ) in result.stderr.splitlines()


SITE = 'schema = 1\nname = "site"\nversion = 1\n[nccl]\nPROTO = "LL"\n'


def test_a_sites_own_name_goes_in_policy_not_nccl(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("site", SITE)
    before = run_cli("run", "--dry-run", "site", "--", "true", env={"NCCL_SITE_RACK": "r7"})
    assert before.returncode == 1
    assert "(calling environment; undeclared, unknown to NCCL)" in before.stderr  # no guess
    assert before.stderr.splitlines()[-1] == (
        "fix + (unknown to NCCL): NCCL reads no such name, nor one close to it: unset it in the "
        "calling environment (the shell, the unit's Environment=), or, where this site sets it "
        "for a program of its own, name it in [policy] not_nccl"
    )
    digest = run_cli("validate", "site").stdout
    write_profile("site", SITE + '[policy]\nnot_nccl = ["NCCL_SITE_RACK"]\n')
    assert run_cli("validate", "site").stdout == digest  # the policy is no part of the digest
    after = run_cli("run", "--dry-run", "site", "--", "true", env={"NCCL_SITE_RACK": "r7"})
    assert (after.returncode, after.stderr) == (0, "")
    assert (
        '  + NCCL_SITE_RACK  "r7"  (calling environment; named by [policy] not_nccl, not read by '
        "NCCL)" in after.stdout.splitlines()
    )


def test_a_profile_that_sets_one_in_env_is_told_it_is_left_to_the_server(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Not "NCCL variables belong in [nccl]", where it would be refused as unknown to NCCL."""
    path = write_profile("site", SITE + '[env]\nNCCL_HOME = "/opt/nccl"\n')
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert result.stdout + result.stderr == (
        f"{path}: env.NCCL_HOME: read by nccl-tests' build, not read by NCCL and never drift: "
        "the server gets it from the calling environment untouched; remove it here\n"
    )


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        (
            'server_owned = ["NCCL_VERSION"]',
            "policy.server_owned: NCCL_VERSION is set by NVIDIA's CUDA image, not read by NCCL, "
            "and never drift: remove it",
        ),
        (
            'server_owned = ["NCCL_SITE_RACK"]',
            "policy.server_owned: NCCL_SITE_RACK is not a variable NCCL documents or reads (NCCL "
            "ignores it); a name of this site's that NCCL does not read goes in not_nccl",
        ),
        (
            'not_nccl = ["NCCL_PROTO"]',
            "policy.not_nccl: NCCL reads NCCL_PROTO: declare it in [nccl], or in server_owned "
            "where the server sets it",
        ),
        (
            'not_nccl = ["SITE_RACK"]',
            "policy.not_nccl: 'SITE_RACK': only a name with NCCL's prefix could be drift; valid: "
            "NCCL_ then letters, digits, '_'",
        ),
        (
            'not_nccl = ["NCCL_PROTOCOL"]',
            "policy.not_nccl: NCCL_PROTOCOL is close to NCCL_PROTO, which NCCL reads: most "
            "likely a misspelling",
        ),
        # Read by NCCL 2.21.5 to 2.30.4: a name of NCCL's, whichever release the server loads.
        (
            'not_nccl = ["NCCL_SHM_MEMCPY_MODE"]',
            "policy.not_nccl: NCCL reads NCCL_SHM_MEMCPY_MODE (read by NCCL 2.21.5-2.30.4, not "
            "2.30.7): declare it in [nccl], or in server_owned where the server sets it",
        ),
        (
            'not_nccl = ["NCCL_CREATE_THREAD_CONTEXT"]',
            "policy.not_nccl: NCCL reads NCCL_CREATE_THREAD_CONTEXT (read by NCCL 2.21.5-2.30.4",
        ),
        (
            'not_nccl = ["NCCL_NET_GDR"]',
            "policy.not_nccl: NCCL_NET_GDR is close to NCCL_NET_GDR_LEVEL, which NCCL reads",
        ),
        ('not_nccl = ["NCCL_"]', "policy.not_nccl: 'NCCL_': only a name with NCCL's prefix"),
        (
            "not_nccl = [" + ", ".join(f'"NCCL_SITE_{i}"' for i in range(257)) + "]",
            "policy.not_nccl: 257 names; at most 256",
        ),
        (
            'not_nccl = ["NCCL_LAUNCH_PROFILE"]',
            "policy.not_nccl: NCCL_LAUNCH_PROFILE: nccl-launch sets this variable itself, never "
            "drift: remove it",
        ),
        # What is never drift whatever the profile says is refused in both lists alike.
        (
            'server_owned = ["NCCL_LAUNCH_PROFILE"]',
            "policy.server_owned: NCCL_LAUNCH_PROFILE: nccl-launch sets this variable itself, "
            "never drift: remove it",
        ),
        (
            'not_nccl = ["NCCL_VERSION"]',
            "policy.not_nccl: NCCL_VERSION is set by NVIDIA's CUDA image, not read by NCCL, "
            "and never drift: remove it",
        ),
    ],
)
def test_policy_names_that_cannot_be_there_are_refused(
    policy: str, said: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("site", SITE + f"[policy]\n{policy}\n")
    result = run_cli("validate", str(path))
    assert result.returncode == 2, result.stdout
    assert said in result.stdout + result.stderr
