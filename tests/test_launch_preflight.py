"""`preflight`: SGLang's own parser on the argv, and the host checks with stand-in tooling.

The parser is the real SGLang 0.5.23 (installed by .ci/sglang-venv in CI); the GPUs are a
stand-in `nvidia-smi`, as no GPU exists here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any, Protocol

import psutil
import pytest

from tests.conftest import TIMEOUT, Isolation, RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, free_port

REPO_PROFILES = Path(__file__).parent.parent / "profiles"
SHIPPED = [path for path in sorted(REPO_PROFILES.glob("*.toml")) if "[server]" in path.read_text()]
SHIPPED_VLLM = [path for path in SHIPPED if 'kind = "vllm"' in path.read_text()]
SHIPPED_SERVERS = [path for path in SHIPPED if path not in SHIPPED_VLLM]  # SGLang's


def with_python(write_profile: WriteProfile, shipped: Path, python: str, env: str = "") -> str:
    """The shipped profile, unchanged but for the interpreter (the one with SGLang here) and
    the `env` table's lines."""
    write_profile(
        "under-test",
        f"""
        schema = 1
        name = "under-test"
        version = 1
        extends = "{shipped}"
        [server]
        python = "{python}"
        [env]
        {env}
        """,
    )
    return "under-test"


# No GPU, model files or free port 8000 are promised here: those host checks have their own
# tests (below); these are about SGLang's parser.
SKIP_HOST = ("--skip", "gpus", "--skip", "paths", "--skip", "port")


def preflight_json(run_cli: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("preflight", "--format", "json", *SKIP_HOST, *args)
    return result.returncode, json.loads(result.stdout)


def test_there_is_a_shipped_server_profile_of_each_kind() -> None:
    assert SHIPPED_SERVERS
    assert SHIPPED_VLLM


@pytest.mark.parametrize("shipped", SHIPPED_SERVERS, ids=[p.stem for p in SHIPPED_SERVERS])
def test_sglang_accepts_the_argv_of_every_shipped_profile(
    shipped: Path, write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    name = with_python(write_profile, shipped, sglang_python)
    code, report = preflight_json(run_cli, name)
    assert code == 0, report
    assert report["sglang"]["version"] == "0.5.23"
    parsed = report["sglang"]["parsed"]
    assert parsed["tp_size"] == 8
    assert parsed["speculative_algorithm"] == "EAGLE3"
    assert parsed["speculative_draft_model_path"] == "/models/Kimi-K2.5-EAGLE3"
    assert (parsed["speculative_num_steps"], parsed["speculative_eagle_topk"]) == (2, 1)
    assert parsed["speculative_num_draft_tokens"] == 3
    assert [check["status"] for check in report["checks"] if check["name"] == "argv"] == ["ok"]


@pytest.mark.parametrize("shipped", SHIPPED_VLLM, ids=[p.stem for p in SHIPPED_VLLM])
def test_vllm_accepts_the_argv_of_every_shipped_vllm_profile(
    shipped: Path, write_profile: WriteProfile, run_cli: RunCli, vllm_python: str
) -> None:
    name = with_python(write_profile, shipped, vllm_python)
    code, report = preflight_json(run_cli, name)
    assert code == 0, report
    assert report["vllm"]["version"] == "0.33.0"
    parsed = report["vllm"]["parsed"]
    assert (parsed["model"], parsed["tensor_parallel_size"]) == ("/models/Kimi-K2.5", 8)
    assert parsed["speculative_config"] == {
        "method": "eagle3",
        "model": "/models/Kimi-K2.5-EAGLE3",
        "num_speculative_tokens": 3,
    }
    assert [check["status"] for check in report["checks"] if check["name"] == "argv"] == ["ok"]


def test_a_misspelled_flag_fails_with_vllms_own_message(
    write_profile: WriteProfile, run_cli: RunCli, vllm_python: str
) -> None:
    name = with_python(write_profile, SHIPPED_VLLM[0], vllm_python)
    result = run_cli("preflight", *SKIP_HOST, name, "--", "--tensor-paralel-size", "4")
    assert result.returncode == 3
    assert (
        "fail  argv         vLLM's parser rejects the argv: unrecognized arguments: "
        "--tensor-paralel-size 4"
    ) in result.stdout.splitlines()


def test_a_console_script_as_python_is_asked_through_its_interpreter(
    write_profile: WriteProfile, run_cli: RunCli, vllm_python: str, tmp_path: Path
) -> None:
    """`convert` of `/venv/bin/vllm serve ...` writes the script as `python` and `serve` as
    the entrypoint: the probe runs under the script's `#!` interpreter, as the script does."""
    script = tmp_path / "vllm"
    main = "import sys\nfrom vllm.entrypoints.cli.main import main\nsys.exit(main())\n"
    script.write_text(f"#!{vllm_python}\n{main}")
    script.chmod(0o755)
    write_profile(
        "script",
        f"""
        schema = 1
        name = "script"
        version = 1
        extends = "{SHIPPED_VLLM[0]}"
        [server]
        python = "{script}"
        entrypoint = "serve"
        """,
    )
    code, report = preflight_json(run_cli, "script")
    assert code == 0, report
    assert report["argv"][:3] == [str(script), "serve", "/models/Kimi-K2.5"]
    assert report["vllm"]["python"] == vllm_python
    assert report["vllm"]["parsed"]["tensor_parallel_size"] == 8


def test_a_stale_flag_fails_with_sglangs_own_message(
    write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    name = with_python(write_profile, SHIPPED_SERVERS[0], sglang_python)
    result = run_cli("preflight", *SKIP_HOST, name, "--", "--cuda-graph-max-bs", "8")
    assert result.returncode == 3
    assert (
        "fail  argv         SGLang's parser rejects the argv: ambiguous option: "
        "--cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    ) in result.stdout.splitlines()
    # the shipped profile accepts its one warning
    assert result.stdout.splitlines()[-1] == "preflight failed: 1 failed, 0 warnings"


def test_a_pass_through_speculative_setting_reaches_sglangs_parser(
    write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    write_profile(
        "ngram",
        f"""
        schema = 1
        name = "ngram"
        version = 1
        [server]
        python = "{sglang_python}"
        model_path = "/models/small"
        [server.speculative]
        algorithm = "NGRAM"
        ngram_capacity = 100000
        typo_setting = 1
        """,
    )
    code, report = preflight_json(run_cli, "ngram")
    assert code == 3
    argv_check = next(check for check in report["checks"] if check["name"] == "argv")
    assert argv_check["message"] == (
        "SGLang's parser rejects the argv: unrecognized arguments: --speculative-typo-setting 1"
    )


def test_no_sglang_in_the_server_interpreter_fails_clearly(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    name = with_python(write_profile, SHIPPED_SERVERS[0], sys.executable)
    code, report = preflight_json(run_cli, name)
    assert code == 3
    sglang_check = next(check for check in report["checks"] if check["name"] == "sglang")
    assert sglang_check["status"] == "fail"
    assert sglang_check["message"] == (
        f"cannot import SGLang with {sys.executable}: ModuleNotFoundError: No module named 'sglang'"
    )


def test_missing_server_interpreter_fails(write_profile: WriteProfile, run_cli: RunCli) -> None:
    name = with_python(write_profile, SHIPPED_SERVERS[0], "/nonexistent/bin/python3")
    result = run_cli("preflight", *SKIP_HOST, name)
    assert result.returncode == 3
    # The python line and the sglang line say it alike: SGLang is not asked.
    fail = "[server] python /nonexistent/bin/python3 does not exist"
    assert f"fail  python       {fail}" in result.stdout.splitlines()
    assert f"fail  sglang       {fail}" in result.stdout.splitlines()
    code, report = preflight_json(run_cli, name)
    assert code == 3
    assert report["sglang"] == {"stage": "interpreter", "error": fail}  # as the probe says it


def test_drift_fails_preflight_with_exit_1(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("env-only", 'schema = 1\nname = "env-only"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    result = run_cli("preflight", "env-only", env={"NCCL_PROTO": "Simple"})
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[1] == "fail  environment  1 drift (1 changed), 0 match"
    assert lines[2].split()[:5] == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"']
    assert lines[3] == (
        "      fix ~ (changed): put the value the server should get in the profile, unset it in "
        "the calling environment (the shell, the unit's Environment=), or start with the "
        'profile\'s value anyway: [policy] conflict = "warn"'
    )
    assert lines[-1] == "preflight failed: 1 failed, 0 warnings"


def test_invalid_profile_is_exit_2_before_any_check(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("bad", 'schema = 1\nname = "bad"\nversion = 1\n[nccl]\nNTHREADS = 1000\n')
    result = run_cli("preflight", "bad")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "nccl.NTHREADS: 1000 is not valid" in result.stderr


# The host, with stand-ins for the GPU tooling.

SERVER = """
schema = 1
name = "host"
version = 1
[server]
python = "{python}"
model_path = "{model}"
tp_size = {tp}
port = {port}
{extra}
"""


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_a_server_cwd_that_is_no_directory_is_named_as_the_cwd(
    kind: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    cwd = tmp_path / "srv-kimi"
    if kind == "a file":
        cwd.write_text("")
    write_profile(
        "cwd",
        f"""
        schema = 1
        name = "cwd"
        version = 1
        [server]
        python = "{sys.executable}"
        model_path = "{tmp_path}"
        tp_size = 1
        cwd = "{cwd}"
        """,
    )
    result = run_cli("preflight", "--skip", "gpus", "--skip", "port", "cwd")
    assert result.returncode == 3
    lines = result.stdout.splitlines()
    what = "does not exist" if kind == "missing" else "is not a directory"
    assert f"fail  paths        [server] cwd {cwd} {what}" in lines
    # In the words of the paths line, which `run` says too: SGLang is not asked.
    assert f"fail  sglang       [server] cwd {cwd} {what}" in lines
    assert "python" not in " ".join(line for line in lines if line.startswith("fail"))
    run = run_cli("run", "cwd")
    assert (run.returncode, run.stderr) == (3, f"nccl-launch: [server] cwd {cwd} {what}\n")


def fake_nvidia_smi(folder: Path, gpus: int) -> None:
    """`nvidia-smi -L` as the driver prints it; with no GPU it fails like the real one."""
    folder.mkdir(exist_ok=True)
    lines = "".join(
        f"echo 'GPU {n}: NVIDIA RTX PRO 6000 Blackwell Workstation Edition (UUID: GPU-{n:08x})'\n"
        for n in range(gpus)
    )
    body = lines if gpus else "echo 'No devices were found'\nexit 6\n"
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}")
    script.chmod(0o755)


Checks = dict[str, list[dict[str, Any]]]  # preflight's JSON checks, by name


class Preflight(Protocol):
    def __call__(
        self, gpus: int | None = 8, tp: int = 8, model: str | None = None, extra: str = "",
        env: dict[str, str] | None = None, port: int | None = None,
    ) -> tuple[int, Checks]: ...  # fmt: skip


@pytest.fixture
def host(write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path) -> Preflight:
    """`preflight` of a TP server profile, with `gpus` GPUs behind a stand-in nvidia-smi."""

    def preflight(
        gpus: int | None = 8, tp: int = 8, model: str | None = None, extra: str = "",
        env: dict[str, str] | None = None, port: int | None = None,
    ) -> tuple[int, Checks]:  # fmt: skip
        if model is None:
            (tmp_path / "model").mkdir(exist_ok=True)
            model = str(tmp_path / "model")
        write_profile("host", SERVER.format(python=sys.executable, model=model, tp=tp,
                                            port=port or free_port(), extra=extra))  # fmt: skip
        bin_dir = tmp_path / "bin"
        if gpus is not None:
            fake_nvidia_smi(bin_dir, gpus)
        # Only the stand-in: a GPU host's own nvidia-smi in /usr/bin must not answer.
        path = str(bin_dir)
        result = run_cli("preflight", "--skip", "sglang", "--format", "json", "host",
                             env={"PATH": path, **(env or {})})  # fmt: skip
        checks: Checks = {}
        for check in json.loads(result.stdout)["checks"]:
            checks.setdefault(check["name"], []).append(check)
        return result.returncode, checks

    return preflight


def test_eight_gpus_for_tp8_pass(host: Preflight) -> None:
    code, checks = host(gpus=8)
    assert code == 0, checks
    assert checks["gpus"][0]["message"] == "8 GPUs visible (8 installed), 8 needed"


def test_too_few_gpus_fail(host: Preflight) -> None:
    code, checks = host(gpus=4)
    assert code == 3
    assert checks["gpus"][0]["status"] == "fail"
    assert checks["gpus"][0]["message"] == "4 GPUs visible (4 installed); this node's ranks need 8"


def test_cuda_visible_devices_limits_the_gpus(host: Preflight) -> None:
    code, checks = host(gpus=8, env={"CUDA_VISIBLE_DEVICES": "0,1,9,3"})
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "2 GPUs visible (8 installed, CUDA_VISIBLE_DEVICES=0,1,9,3); this node's ranks need 8"
    )


def test_cuda_visible_devices_counts_only_ascii_digits(host: Preflight) -> None:
    _, checks = host(gpus=8, env={"CUDA_VISIBLE_DEVICES": "0,٣,1"})  # CUDA stops at '٣'
    assert checks["gpus"][0]["message"].startswith("1 GPUs visible (8 installed")


def test_no_gpu_found_by_the_driver_fails_with_its_words(host: Preflight) -> None:
    code, checks = host(gpus=0)
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "0 GPUs visible (0 installed) (No devices were found); this node's ranks need 8"
    )


def test_a_byte_nvidia_smi_prints_that_is_not_utf8_is_read_not_a_crash(
    host: Preflight, tmp_path: Path
) -> None:
    fake_nvidia_smi(tmp_path / "bin", 0)
    (tmp_path / "bin" / "nvidia-smi").write_text(
        "#!/bin/sh\nprintf 'No GPU \\377 here\\n'; exit 6\n"
    )
    code, checks = host(gpus=None)
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "0 GPUs visible (0 installed) (No GPU \ufffd here); this node's ranks need 8"
    )


def test_no_gpu_tooling_at_all_fails_clearly(host: Preflight) -> None:
    code, checks = host(gpus=None)
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "no GPU tooling: nvidia-smi is not on PATH (is the NVIDIA driver installed?)"
    )


def test_a_busy_port_fails_naming_who_holds_it(host: Preflight) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code, checks = host(port=port)
    assert code == 3
    message = checks["port"][0]["message"]
    assert message.startswith(f"127.0.0.1:{port} is in use by pid {os.getpid()} (")


def test_missing_model_and_draft_paths_fail_hub_ids_warn(host: Preflight, tmp_path: Path) -> None:
    speculative = (
        '[server.speculative]\nalgorithm = "EAGLE3"\n'
        f'draft_model_path = "{tmp_path / "no-draft"}"\n'
    )
    code, checks = host(model=str(tmp_path / "no-model"), extra=speculative)
    assert code == 3
    assert [(c["status"], c["message"]) for c in checks["paths"]] == [
        ("fail", f"model_path {tmp_path / 'no-model'} does not exist"),
        ("fail", f"draft_model_path {tmp_path / 'no-draft'} does not exist"),
    ]
    code, checks = host(model="meta-llama/Llama-3.1-8B-Instruct")
    assert code == 0
    assert checks["paths"][0]["status"] == "warn"


def test_a_bare_python_is_shown_as_the_file_the_servers_path_finds_or_fails(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """The name is looked up on the PATH the server gets, as exec looks it up."""
    write_profile("bare", SERVER.format(python="python3", model="/m", tp=1, port=free_port(),
                                        extra=""))  # fmt: skip
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "python3").write_text("#!/bin/sh\n")
        (folder / "python3").chmod(0o755)
    (first / "python3").chmod(0o644)  # not executable: exec goes on to the next folder
    path = f"{first}:{second}"
    result = run_cli("preflight", "--skip", "sglang", "bare", env={"PATH": path})
    found = f"ok    python       [server] python 'python3' is {second}/python3 on the server's PATH"
    assert found in result.stdout.splitlines()
    result = run_cli("preflight", "--skip", "sglang", "bare", env={"PATH": str(first)})
    assert result.returncode == 3
    assert (
        f"fail  python       [server] python 'python3' is not found on the server's PATH "
        f"({first}); write the interpreter's absolute path"
    ) in result.stdout.splitlines()


def test_an_env_plugin_on_the_library_path_is_warned(host: Preflight, tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "libnccl-env.so").write_bytes(b"\x7fELF")
    code, checks = host(env={"LD_LIBRARY_PATH": str(libs)})
    assert code == 0
    assert checks["env-plugin"][0]["status"] == "warn"
    assert checks["env-plugin"][0]["message"].startswith(f"{libs}/libnccl-env.so would answer")
    code, checks = host(env={"LD_LIBRARY_PATH": str(libs)}, extra='[nccl]\nENV_PLUGIN = "none"')
    assert checks["env-plugin"][0] == {
        "name": "env-plugin", "status": "ok", "detail": [], "drift": None,
        "message": "NCCL_ENV_PLUGIN=none: NCCL reads the process environment",
    }  # fmt: skip


def test_nccl_conf_lines_name_what_applies(host: Preflight, isolated: Isolation) -> None:
    conf = isolated.home / ".nccl.conf"
    conf.write_text("NCCL_SOCKET_IFNAME=eth0\n")
    code, checks = host(extra='[policy]\nundeclared_nccl = "warn"')
    assert code == 0
    assert checks["nccl.conf"][0]["message"] == (
        f"{conf}: applies NCCL_SOCKET_IFNAME=eth0 ({conf}:1); 0 shadowed"
    )
    assert checks["nccl.conf"][1]["message"] == f"{isolated.system_conf}: not present"
    isolated.system_conf.parent.mkdir(parents=True)
    isolated.system_conf.write_text("NCCL_SOCKET_IFNAME=eth1\nNCCL_IB_HCA=mlx5_0\n")
    code, checks = host(extra='[policy]\nundeclared_nccl = "warn"')
    assert code == 0
    system = isolated.system_conf
    assert checks["nccl.conf"][1]["message"] == (
        f"{system}: applies NCCL_IB_HCA=mlx5_0 ({system}:2); 1 shadowed"
    )


@pytest.mark.parametrize(
    "answer",
    [
        "NCCL_LAUNCH_PROBE {not json",
        "NCCL_LAUNCH_PROBE []",
        'NCCL_LAUNCH_PROBE {"stage": "parse"}',
        'NCCL_LAUNCH_PROBE {"python": "p", "python_version": "3", "version": "1", "parsed": {}}',
        "NCCL_LAUNCH_PROBE " + "[" * 100_000,
        "\udcff not text",
    ],
    ids=["not-json", "a-list", "no-keys", "no-parsed-fields", "deep", "bytes"],
)
def test_a_broken_interpreter_is_a_failed_check_not_a_crash(
    answer: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """The server's python is whatever the profile names: its answer is checked, not trusted."""
    fake = tmp_path / "python3"
    fake.write_bytes(b"#!/bin/sh\nprintf '%s\\n' \"$ANSWER\"\n")
    fake.chmod(0o755)
    with_python(write_profile, SHIPPED_SERVERS[0], str(fake))
    env = {"ANSWER": answer}  # a lone surrogate reaches the child as the byte 0xff
    result = run_cli("preflight", *SKIP_HOST, "under-test", env=env)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("fail  sglang")]
    assert f"{fake} answered " in line or f"{fake} did not answer" in line


def test_the_probe_reads_no_input_and_a_timeout_names_no_argument(
    write_profile: WriteProfile, run_cli: RunCli, nccl_launch: RunCli, tmp_path: Path
) -> None:
    """With PYTHONINSPECT in the server's environment, a terminal on the probe's stdin held it
    at Python's prompt; the timeout's message then printed the argv, --api-key and all."""
    fake = tmp_path / "python3"
    fake.write_text('#!/bin/sh\necho "stdin is $(readlink /proc/self/fd/0)"\nsleep "${SLOW:-0}"\n')
    fake.chmod(0o755)
    with_python(write_profile, SHIPPED_SERVERS[0], str(fake))
    args = ("preflight", *SKIP_HOST, "under-test", "--", "--api-key", "sk-live-1")
    typed = tmp_path / "typed"
    typed.write_text("import os\n")
    result = nccl_launch(*args, stdin_path=typed)  # preflight's stdin: a pipe
    assert "did not answer: stdin is /dev/null" in result.stdout
    result = run_cli(*args[:-3], "--timeout", "1", *args[-3:], env={"SLOW": "5"})
    assert result.returncode == 3
    assert f"fail  sglang       {fake} did not answer in 1 s; " in result.stdout
    assert "sk-live-1" not in result.stdout + result.stderr


def a_probe_that_never_answers(write_profile: WriteProfile, tmp_path: Path) -> Path:
    """The shipped profile with an interpreter that never answers, as a hung import: it
    writes its PID to `probe.pid`, starts a `sleep` (its PID in `child.pid`) and waits."""
    fake = tmp_path / "python3"
    fake.write_text(
        f"#!/bin/sh\necho $$ >{tmp_path}/probe.pid\n"
        f"sleep 600 &\necho $! >{tmp_path}/child.pid\nwait\n"
    )
    fake.chmod(0o755)
    with_python(write_profile, SHIPPED_SERVERS[0], str(fake))
    return fake


def waited_lines(fake: Path, timeout: str) -> re.Pattern[str]:
    """A line saying how long preflight has waited for `fake`, and when it gives up."""
    what = re.escape(f"preflight: {fake} imports SGLang and parses the argv...")
    return re.compile(rf"{what} \d+ s \(gives up after {timeout} s: --timeout\)")


def test_a_probe_that_never_answers_is_said_on_stderr_and_fails_at_timeout(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import that hangs kept preflight silent for five minutes: stderr (a pod's log, not
    a terminal) says every few seconds what it waits for (every 0.2 s here), stdout stays the
    JSON report, and the check fails at --timeout saying what to do."""
    fake = a_probe_that_never_answers(write_profile, tmp_path)
    monkeypatch.setattr("nccl_launch.launch.preflight.PROGRESS_S", 0.2)
    args = ("preflight", "--format", "json", *SKIP_HOST, "--timeout", "2", "under-test")
    result = run_cli(*args)
    assert result.returncode == 3
    report = json.loads(result.stdout)
    late = f"{fake} did not answer in 2 s"
    assert report["sglang"] == {"stage": "timeout", "error": late}
    assert [check for check in report["checks"] if check["status"] == "fail"] == [
        {"name": "sglang", "status": "fail", "detail": [], "drift": None, "message": (
            f"{late}; a cold disk or a loaded host may need longer: --timeout SECONDS, "
            "or leave the check out: --skip sglang"
        )},
    ]  # fmt: skip
    waited = result.stderr.splitlines()
    assert waited, "nothing said while waiting"
    assert all(waited_lines(fake, "2").fullmatch(line) for line in waited), waited


def test_a_quick_answer_says_nothing_on_stderr(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """The progress lines are for a wait that takes a while: an interpreter that answers at
    once leaves stderr empty where it is no terminal."""
    an_interpreter_that_answers_nothing(write_profile, tmp_path, "bin/python3")
    result = run_cli("preflight", *SKIP_HOST, "under-test")
    assert result.returncode == 3
    assert result.stderr == ""


def test_a_probe_that_never_answers_is_killed_with_what_it_started(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    """The installed script, in a process group this test kills: at --timeout the probe's
    whole process group is killed (the `sleep` it started too), not its first process alone."""
    fake = a_probe_that_never_answers(write_profile, tmp_path)
    argv = [console_script(), "preflight", *SKIP_HOST, "--timeout", "3", "under-test"]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for name in ("probe.pid", "child.pid"):  # should preflight have left them running
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int((tmp_path / name).read_text()), signal.SIGKILL)
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)
    assert process.returncode == 3, stderr
    assert f"fail  sglang       {fake} did not answer in 3 s; " in stdout
    child = int((tmp_path / "child.pid").read_text())
    # Its parent is gone: reaped by whoever adopted it, or a zombie it has not reaped yet.
    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_the_status_line_counts_the_seconds_on_a_terminal(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    """On a terminal the one status line says how long preflight has waited (every 5 s), each
    time over the line before, and is erased when the check fails."""
    fake = a_probe_that_never_answers(write_profile, tmp_path)
    args = ["preflight", *SKIP_HOST, "--timeout", "8", "under-test"]
    code, stdout, terminal = run_with_stderr_on_a_terminal(args, dict(os.environ), columns=500)
    assert code == 3
    assert f"{fake} did not answer in 8 s; " in stdout
    first, *updates, last = terminal.split("\r\x1b[K")
    assert first == f"preflight: {fake} imports SGLang and parses the argv..."
    assert updates, terminal
    assert all(waited_lines(fake, "8").fullmatch(line) for line in updates), updates
    assert last == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--timeout 0: valid: 0 < SECONDS <= 86400"),
        ("nan", "--timeout nan: valid: 0 < SECONDS <= 86400"),
        ("inf", "--timeout inf: valid: 0 < SECONDS <= 86400"),
        ("soon", "Invalid value for '--timeout': 'soon' is not a valid float."),
    ],
)
def test_a_timeout_that_is_no_time_is_a_usage_error(
    value: str, message: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    with_python(write_profile, SHIPPED_SERVERS[0], sys.executable)
    result = run_cli("preflight", "--timeout", value, "under-test")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 or "Invalid value" in message, result.stderr
    assert message in result.stderr
    assert result.stdout == ""


def run_with_stderr_on_a_terminal(
    args: list[str], env: dict[str, str], columns: int = 0
) -> tuple[int, str, str]:
    """The installed script with stderr on a real pseudo-terminal (`columns` wide where
    given), stdout on a pipe."""
    controller, terminal = os.openpty()
    if columns:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        process = subprocess.Popen(
            [console_script(), *args], stdout=subprocess.PIPE, stderr=terminal, env=env
        )
    finally:
        os.close(terminal)
    seen = b""
    try:
        while select.select([controller], [], [], 60)[0]:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the last process holding the terminal is gone
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    stdout, _ = process.communicate(timeout=60)
    return process.returncode, stdout.decode(), seen.decode()


STATUS = "imports SGLang and parses the argv..."


def test_preflight_shows_what_it_waits_for_on_a_terminal_only(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """The stand-in SGLang (no parser: the check fails) is imported in its own interpreter."""
    with_python(write_profile, SHIPPED_SERVERS[0], sys.executable)
    env = {**os.environ, "PYTHONPATH": str(STANDIN)}
    args = ["preflight", *SKIP_HOST, "under-test"]
    code, stdout, terminal = run_with_stderr_on_a_terminal(args, env, columns=500)
    assert code == 3  # wide enough for any path to this interpreter (CI's is longer than ours)
    assert f"preflight: {sys.executable} {STATUS}\r\x1b[K" in terminal  # shown, then erased
    assert STATUS not in stdout
    assert "fail  sglang       cannot import SGLang" in stdout
    piped = run_cli(*args, env={"PYTHONPATH": str(STANDIN)})
    assert piped.returncode == 3
    assert piped.stdout == stdout
    assert "preflight:" not in piped.stderr
    assert "\x1b" not in piped.stderr


def test_sglang_is_probed_in_the_environment_run_gives_the_server(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """A package the server finds through the profile's PYTHONPATH, which the calling
    environment lacks, is the one the probe imports (it reported no SGLang at all)."""
    package = tmp_path / "site" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "9.9.9"\n')
    (package / "srt" / "server_args.py").write_text(
        "def prepare_server_args(argv):\n    raise ValueError('a stand-in parser')\n"
    )
    with_python(
        write_profile, SHIPPED_SERVERS[0], sys.executable, f'PYTHONPATH = "{package.parent}"'
    )
    assert "PYTHONPATH" not in os.environ
    result = run_cli("preflight", *SKIP_HOST, "under-test")
    assert result.returncode == 3, result.stdout
    assert f"ok    sglang       SGLang 9.9.9 ({sys.executable}, Python " in result.stdout
    assert "fail  argv         SGLang's parser rejects the argv: ValueError: a stand-in parser" in (
        result.stdout
    )


def test_sglangs_words_about_an_argument_are_escaped(
    write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    """An extra argument is free text; SGLang's parser quotes it back in its error, and that
    error is printed escaped, so it cannot forge a check's line or drive the terminal."""
    forged = "ok    sglang       SGLang 0.5.23 (forged)"
    name = with_python(write_profile, SHIPPED_SERVERS[0], sglang_python)
    result = run_cli("preflight", *SKIP_HOST, name, "--", f"--bogus\x1b[31m\n{forged}")
    assert result.returncode == 3
    assert forged not in result.stdout.splitlines()
    assert "\x1b" not in result.stdout
    assert (  # the probe keeps the first line of SGLang's error
        "fail  argv         SGLang's parser rejects the argv: unrecognized arguments: "
        "--bogus\\x1b[31m"
    ) in result.stdout.splitlines()


def test_sglangs_parsed_values_are_masked_as_the_argv_is(
    write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    """What SGLang's parser read is shown, masked as the argv is: a model URL's password
    never reaches the report."""
    write_profile(
        "under-test",
        f"""
        schema = 1
        name = "under-test"
        version = 1
        [server]
        python = "{sglang_python}"
        model_path = "https://user:hunter2@hub.example/Kimi"
        [server.speculative]
        algorithm = "EAGLE3"
        draft_model_path = "/models/draft"
        """,
    )
    result = run_cli("preflight", *SKIP_HOST, "under-test")
    assert "hunter2" not in result.stdout + result.stderr
    assert "SGLang's parser accepts: model_path=https://***@hub.example/Kimi," in result.stdout


def an_interpreter_that_answers_nothing(
    write_profile: WriteProfile, tmp_path: Path, python: str
) -> None:
    """The shipped profile with `python` (relative) a script under `tmp_path`, its cwd, that
    exits without an answer: one that would not start is not asked at all."""
    script = tmp_path / python
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\nexit 1\n")
    script.chmod(0o755)
    write_profile(
        "under-test",
        f"""
        schema = 1
        name = "under-test"
        version = 1
        extends = "{SHIPPED_SERVERS[0]}"
        [server]
        python = "{python}"
        cwd = "{tmp_path}"
        """,
    )


@pytest.mark.parametrize(
    ("folder", "shown"),
    [
        ("long-directory-name", "preflight: long-directory-name/long-dir"),
        ("模型目录", "preflight: 模型目录/模型目录/模型目录/"),  # 38 cells: 模 makes 40
    ],
)
def test_the_status_line_is_cut_to_the_terminal_width(
    folder: str, shown: str, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """A line wider than the terminal wraps, and `\\r\\x1b[K` would erase only its last row:
    it is cut to 39 cells of a 40-column terminal."""
    python = f"{folder}/" * 8 + "python3"
    an_interpreter_that_answers_nothing(write_profile, tmp_path, python)
    args = ["preflight", *SKIP_HOST, "under-test"]
    code, stdout, terminal = run_with_stderr_on_a_terminal(args, dict(os.environ), columns=40)
    assert code == 3
    assert f"{python} did not answer: exit 1" in stdout
    assert terminal.partition("\r\x1b[K") == (shown, "\r\x1b[K", "")


def test_the_status_line_escapes_what_a_terminal_would_obey(
    write_profile: WriteProfile, tmp_path: Path
) -> None:
    """server.python refuses control characters, not U+2028 or U+202E (which reverses what
    follows on screen): the status line shows them escaped."""
    an_interpreter_that_answers_nothing(write_profile, tmp_path, "a\u2028\u202eb/python3")
    args = ["preflight", *SKIP_HOST, "under-test"]
    code, _, terminal = run_with_stderr_on_a_terminal(args, dict(os.environ), columns=200)
    assert code == 3
    shown = "preflight: a\\u2028\\u202eb/python3 imports SGLang and parses the argv..."
    assert terminal == f"{shown}\r\x1b[K"


def test_who_holds_a_busy_port_is_named_with_its_credentials_masked(host: Preflight) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    argv = ["python", "-c", "import time; time.sleep(60)", "--api-key", "9z-key"]
    holder = subprocess.Popen(argv, executable=sys.executable, pass_fds=[listener.fileno()])
    listener.close()  # the child alone holds the port
    try:
        code, checks = host(port=port)
    finally:
        holder.kill()
        holder.wait()
    assert code == 3
    message = checks["port"][0]["message"]
    assert message.endswith(f"by pid {holder.pid} (python -c 'import time; time.sleep(60)' "
                            "--api-key '***')"), message  # fmt: skip


def test_every_check_the_report_names_can_be_skipped_by_that_name(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """`--skip` takes the names the report gives its lines, and leaves out those lines only."""
    write_profile("named", SERVER.format(python=sys.executable, model=tmp_path, tp=1,
                                         port=free_port(), extra=""))  # fmt: skip

    def names(*skip: str) -> list[str]:
        words = [word for name in skip for word in ("--skip", name)]
        result = run_cli("preflight", "--format", "json", "--skip", "sglang", *words, "named")
        assert result.returncode in (0, 3), result.stderr
        return [check["name"] for check in json.loads(result.stdout)["checks"]]

    everything = names()
    assert "python" in everything
    for name in sorted(set(everything) - {"profile", "environment"}):
        assert names(name) == [each for each in everything if each != name]
    refused = run_cli("preflight", "--skip", "environment", "named")
    assert refused.returncode == 2
    assert "'environment' is not one of" in refused.stderr
