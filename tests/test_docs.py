"""The docs show real output: the examples that need nothing but the shipped profiles and the
test corpus are run from the source tree and compared with what the docs print, line for line
and exit code for exit code. Examples that need a server, a host or files set up in prose are
checked by the tests of their command."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import Isolation, RunCli, console_script, require
from tests.helpers import REPO, documented, free_port, healthy, wait_for

# Where the docs' dry run was taken: the absolute path of the profile's file differs by clone.
DOC_CHECKOUT = "/srv/nccl-launch"
PRINTS_THE_VARIABLE = """python3 -c 'import os; print(os.environ["NCCL_P2P_LEVEL"])'"""
INVALID = " ".join(
    f"tests/corpus/invalid/{name}.toml"
    for name in ("buffsize-decimal-megabytes", "unknown-nccl-name")
)
EXAMPLES = [  # of docs/commands.md
    "nccl-launch run --dry-run kimi-k25-rtx6000bw-tp8-eagle3",
    f"nccl-launch run rtx6000bw-pcie-tp8 -- {PRINTS_THE_VARIABLE}",
    f"nccl-launch validate profiles/*.toml {INVALID}",
    "nccl-launch show kimi-k25-rtx6000bw-tp8-eagle3 --format env",
    "nccl-launch show rtx6000bw-pcie-tp8 --format systemd-env",
    "nccl-launch show rtx6000bw-pcie-tp8 --format json",
    "nccl-launch show rtx6000bw-pcie-tp8 --format shell",
    "nccl-launch tune kimi-k25-rtx6000bw-tp8-eagle3 --try PROTO=LL,LL128 --try NTHREADS=384,1024",
]
VLLM_EXAMPLE = "nccl-launch run --dry-run kimi-k25-rtx6000bw-tp8-eagle3-vllm"  # of docs/vllm.md


LOG_EXAMPLES = [  # of docs/systemd-and-monitoring.md, on the test suite's 8-rank logs
    "nccl-launch verify-log kimi-k25-rtx6000bw-tp8-eagle3 server.log",
    "nccl-launch verify-log kimi-k25-rtx6000bw-tp8-eagle3 < drifted.log",
]


@pytest.mark.parametrize(
    ("page", "command"),
    [*(("commands.md", command) for command in EXAMPLES), ("vllm.md", VLLM_EXAMPLE)],
    ids=[*(command[:40] for command in EXAMPLES), "vllm.md"],
)
def test_a_docs_example_prints_what_the_docs_show(
    page: str, command: str, isolated: Isolation
) -> None:
    expected, code = documented(command, page)
    script = command.replace("nccl-launch", console_script(), 1)
    result = subprocess.run(
        ["bash", "-c", f"{script} 2>&1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.stdout.replace(str(REPO), DOC_CHECKOUT).splitlines() == expected
    assert result.returncode == code


@pytest.mark.parametrize("command", LOG_EXAMPLES, ids=["file", "stdin"])
def test_a_verify_log_example_prints_what_the_docs_show(command: str, isolated: Isolation) -> None:
    profile = "kimi-k25-rtx6000bw-tp8-eagle3.toml"
    shutil.copy(REPO / "profiles" / profile, isolated.root / "profiles" / profile)
    shutil.copy(REPO / "tests" / "logs" / "tp8-applied.log", isolated.root / "server.log")
    shutil.copy(REPO / "tests" / "logs" / "tp8-drifted.log", isolated.root / "drifted.log")
    expected, code = documented(command, "systemd-and-monitoring.md")
    script = command.replace("nccl-launch", console_script(), 1)
    result = subprocess.run(
        ["bash", "-c", f"{script} 2>&1"],
        cwd=isolated.root,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (result.stdout.splitlines(), result.returncode) == (expected, code)


def test_the_readme_names_every_option_of_run(run_cli: RunCli) -> None:
    options = set(re.findall(r"^  (--[a-z-]+)", run_cli("run", "--help").stdout, re.MULTILINE))
    row = next(
        line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `run ")
    )
    assert {option for option in options - {"--help"} if f"`{option}`" not in row} == set()


def test_the_readme_installs_the_wheel_pip_wheel_writes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wheel = f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"
    readme = (REPO / "README.md").read_text()
    assert "python3 -m pip wheel --no-deps -w dist .  " in readme
    assert f"pipx install dist/{wheel}\n" in readme


def test_the_direnv_recipe_exports_what_show_json_lists(
    isolated: Isolation, run_cli: RunCli
) -> None:
    """The `.envrc` of docs/commands.md, run by bash as direnv runs it (its `watch_file` a
    no-op here), in a folder holding the profile."""
    text = (REPO / "docs" / "commands.md").read_text()
    envrc = text.split("```bash\n# .envrc\n", 1)[1].split("```", 1)[0]
    profile = "rtx6000bw-pcie-tp8.toml"
    shutil.copy(REPO / "profiles" / profile, isolated.root / "profiles" / profile)
    shown = json.loads(run_cli("show", "rtx6000bw-pcie-tp8", "--format", "json").stdout)
    dump = f'{sys.executable} -c "import json, os; print(json.dumps(dict(os.environ)))"'
    path = f"{Path(console_script()).parent}:/usr/bin:/bin"
    done = subprocess.run(
        ["bash", "-c", f"watch_file() {{ :; }}\n{envrc}{dump}"],
        cwd=isolated.root,
        env=os.environ | {"PATH": path},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    expected = shown["env"] | shown["markers"]
    sourced = json.loads(done.stdout)
    assert {key: sourced.get(key) for key in expected} == expected
    assert expected["NCCL_LAUNCH_PROFILE_FILE"] == str(isolated.root / "profiles" / profile)


def normalized(lines: list[str]) -> list[str]:
    """Lines with what differs between two runs made alike: numbers, digests, this host."""
    host = socket.gethostname()
    return [
        re.sub(r"\d+", "N", re.sub(r"sha256:[0-9a-f]+", "sha256:H", line))
        for line in (line.replace(f"host    {host} at ", "host    vm at ") for line in lines)
        if not (line.startswith("GPUs ") and shutil.which("nvidia-smi"))
    ]


def test_the_baseline_guide_runs_as_printed(isolated: Isolation) -> None:
    """Sections 1 and 2 of docs/baseline.md in a clone's root (its `tests/`), the test
    install's venv first on PATH: the profile as printed (on a free port), its `run` line
    (streaming faster), its `bench` line (with fewer tokens); the output is the doc's, line by
    line, but for numbers and digests."""
    text = (REPO / "docs" / "baseline.md").read_text()
    profile = text.split("```toml\n", 1)[1].split("```", 1)[0]
    port = free_port()
    clone = isolated.root / "clone"
    (clone / "profiles").mkdir(parents=True)
    (clone / "tests").symlink_to(REPO / "tests")
    (clone / "profiles" / "kimi-standin.toml").write_text(profile.replace("30714", str(port)))
    block = text.split("## 2. ", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    require(shutil.which("curl"), "install curl: docs/baseline.md waits for its server with it")
    start, wait, bench, *_ = re.findall(r"^\$ (.*)$", block, re.MULTILINE)
    assert start.endswith(" &")
    assert wait.startswith("until curl ")
    expected, code = documented(bench, "baseline.md")
    bin_dir = str(Path(console_script()).parent)
    env = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    validated = subprocess.run(
        ["nccl-launch", "validate", "profiles/kimi-standin.toml"],
        cwd=clone, env=env, capture_output=True, text=True, check=False, timeout=120
    )  # fmt: skip
    assert (validated.returncode, validated.stderr) == (0, "")
    fast = start.removesuffix(" &").replace("RATE=90", "RATE=5000").replace("TTFT=0.12", "TTFT=0")
    server = subprocess.Popen(["bash", "-c", fast], cwd=clone, env=env, start_new_session=True)
    try:
        wait_for(lambda: healthy(port), "the doc's server", process=server)
        subprocess.run(["bash", "-c", wait.replace("30714", str(port))], timeout=30, check=True)
        done = subprocess.run(
            ["bash", "-c", f"{bench} --max-tokens 20 2>&1"],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    shown = done.stdout.replace(str(isolated.home), "/tmp/bench-demo/home").splitlines()
    assert normalized(shown) == normalized(expected)
    assert done.returncode == code


def test_the_readmes_refusal_prints_what_the_readme_shows(isolated: Isolation) -> None:
    readme = (REPO / "README.md").read_text()
    block = readme.split("```text\n$ ", 1)[1].split("```", 1)[0]
    first, second, rest = block.split("\n", 2)  # the command is continued with a backslash
    command = first.removesuffix("\\") + second.replace("nccl-launch", console_script(), 1)
    output, code = rest.split("$ echo $?\n")
    done = subprocess.run(
        ["bash", "-c", f"{command} 2>&1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (done.stdout, done.returncode) == (output, int(code))


def test_the_systemd_guides_unit_and_refused_edit_are_what_the_commands_print(
    isolated: Isolation, run_cli: RunCli
) -> None:
    """docs/systemd-and-monitoring.md: the unit `systemd` writes from the shipped profile in
    /etc/nccl-launch/profiles, and `preflight --digest` once the file was edited."""
    page = (REPO / "docs" / "systemd-and-monitoring.md").read_text()
    name = "kimi-k25-rtx6000bw-tp8-eagle3.toml"
    isolated.system_dir.mkdir(parents=True)
    profile = isolated.system_dir / name
    shutil.copy(REPO / "profiles" / name, profile)
    unit = isolated.root / "sglang.service"
    assert run_cli("systemd", name.removesuffix(".toml"), "--output", str(unit)).returncode == 0
    shown = unit.read_text().replace(str(isolated.system_dir), "/etc/nccl-launch/profiles")
    shown = shown.replace(console_script(), "/opt/nccl-launch/bin/nccl-launch")
    assert shown == page.split("$ cat /etc/systemd/system/sglang.service\n", 1)[1].split("$ ")[0]
    profile.write_text(profile.read_text().replace('PROTO = "LL"', 'PROTO = "Simple"', 1))
    command = next(
        line for line in page.splitlines() if line.startswith("$ nccl-launch preflight /")
    )
    expected, code = documented(command.removeprefix("$ "), "systemd-and-monitoring.md")
    args = command.split()[2:]
    done = run_cli(
        *(arg.replace("/etc/nccl-launch/profiles", str(isolated.system_dir)) for arg in args)
    )
    said = done.stderr.replace(str(isolated.system_dir), "/etc/nccl-launch/profiles")
    assert (said.splitlines(), done.returncode) == (expected, code)


def test_the_secrets_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    script, _ = documented("cat start_chat.sh", "migrating.md")
    Path("start_chat.sh").write_text("\n".join(script) + "\n")
    expected, _ = documented("nccl-launch convert start_chat.sh --name chat", "migrating.md")
    result = run_cli("convert", "start_chat.sh", "--name", "chat")
    assert (result.returncode, result.stdout.splitlines()) == (0, expected)
    head, _ = documented("head -8 profiles/chat.toml", "migrating.md")
    assert Path("profiles/chat.toml").read_text().splitlines()[:8] == head
    assert "hf_" not in Path("profiles/chat.toml").read_text()


def test_the_key_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    for name in ("secrets.env", "start_api.sh"):
        text, _ = documented(f"cat {name}", "migrating.md")
        Path(name).write_text("\n".join(text) + "\n")
    expected, _ = documented("nccl-launch convert start_api.sh --name api", "migrating.md")
    result = run_cli("convert", "start_api.sh", "--name", "api")
    assert result.returncode == 0
    assert [*result.stderr.splitlines(), *result.stdout.splitlines()] == expected
    profile, _ = documented("cat profiles/api.toml", "migrating.md")
    assert Path("profiles/api.toml").read_text().splitlines() == profile


def test_the_key_file_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    for name in ("start_k8s.sh", "start_vault.sh"):
        script, _ = documented(f"cat {name}", "migrating.md")
        Path(name).write_text("\n".join(script) + "\n")
    expected, _ = documented("nccl-launch convert start_k8s.sh --name k8s", "migrating.md")
    result = run_cli("convert", "start_k8s.sh", "--name", "k8s")
    assert result.returncode == 0
    assert [*result.stderr.splitlines(), *result.stdout.splitlines()] == expected
    shown, _ = documented(
        "sed -n '/^\\[secret_files\\]/,/^\\[provenance\\]/p' profiles/k8s.toml", "migrating.md"
    )
    text = Path("profiles/k8s.toml").read_text()
    assert text[text.index("[secret_files]") :].splitlines()[: len(shown)] == shown
    refused, code = documented("nccl-launch convert start_vault.sh --name vault", "migrating.md")
    result = run_cli("convert", "start_vault.sh", "--name", "vault")
    assert (result.returncode, result.stderr.splitlines()) == (code, refused)


def test_the_key_variable_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    for name in ("start_compose.sh", "start_bearer.sh"):
        script, _ = documented(f"cat {name}", "migrating.md")
        Path(name).write_text("\n".join(script) + "\n")
    expected, _ = documented("nccl-launch convert start_compose.sh --name compose", "migrating.md")
    result = run_cli("convert", "start_compose.sh", "--name", "compose")
    assert (result.returncode, result.stdout.splitlines()) == (0, expected)
    shown, _ = documented(
        "sed -n '/^\\[secret_files\\]/,/^\\[provenance\\]/p' profiles/compose.toml",
        "migrating.md",
    )
    text = Path("profiles/compose.toml").read_text()
    assert text[text.index("[secret_files]") :].splitlines()[: len(shown)] == shown
    refused, code = documented("nccl-launch convert start_bearer.sh --name bearer", "migrating.md")
    result = run_cli("convert", "start_bearer.sh", "--name", "bearer")
    assert (result.returncode, result.stderr.splitlines()) == (code, refused)


def test_the_vllm_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    script, _ = documented("cat start_vllm.sh", "migrating.md")
    Path("start_vllm.sh").write_text("\n".join(script) + "\n")
    expected, _ = documented("nccl-launch convert start_vllm.sh --name kimi-vllm", "migrating.md")
    result = run_cli("convert", "start_vllm.sh", "--name", "kimi-vllm")
    assert result.returncode == 0
    assert [*result.stderr.splitlines(), *result.stdout.splitlines()] == expected
    table, _ = documented("sed -n '/^\\[server\\]/,/^$/p' profiles/kimi-vllm.toml", "migrating.md")
    text = Path("profiles/kimi-vllm.toml").read_text()
    assert text.split("\n[server]\n", 1)[1].split("\n\n", 1)[0].splitlines() == table[1:-1]
    assert "sk-live" not in text


def test_the_nccl_conf_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    conf, _ = documented("cat nccl.conf", "migrating.md")
    Path("nccl.conf").write_text("\n".join(conf) + "\n")
    expected, _ = documented("nccl-launch convert nccl.conf -o site.toml", "migrating.md")
    result = run_cli("convert", "nccl.conf", "-o", "site.toml")
    assert result.returncode == 0
    assert [*result.stderr.splitlines(), *result.stdout.splitlines()] == expected
    profile, _ = documented("cat site.toml", "migrating.md")
    assert Path("site.toml").read_text().splitlines() == profile


def test_the_unexported_example_of_migrating_prints_what_the_docs_show(run_cli: RunCli) -> None:
    for name in ("tuned.env", "plain.sh"):
        text, _ = documented(f"cat {name}", "migrating.md")
        Path(name).write_text("\n".join(text) + "\n")
    expected, _ = documented("nccl-launch convert plain.sh", "migrating.md")
    result = run_cli("convert", "plain.sh")
    assert result.returncode == 0
    assert [*result.stderr.splitlines(), *result.stdout.splitlines()] == expected


def test_the_sourcing_example_of_migrating_prints_what_the_docs_show(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """The docs' venv was at /tmp/demo/venv; here it is the test's own, made by venv (so the
    digest, over the interpreter's path, differs too)."""
    for name in ("nccl.env", "start.sh"):
        text, _ = documented(f"cat {name}", "migrating.md")
        Path(name).write_text("\n".join(text) + "\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "venv"], check=True, timeout=120)
    expected, _ = documented("nccl-launch convert start.sh", "migrating.md")
    result = run_cli("convert", "start.sh")
    assert result.returncode == 0
    printed = [*result.stderr.splitlines(), *result.stdout.splitlines()]
    digest = re.compile(r"sha256:[0-9a-f]{8}")
    assert [digest.sub("sha256:", line) for line in printed] == [
        digest.sub("sha256:", line) for line in expected
    ]
    profile, _ = documented("cat profiles/start.toml", "migrating.md")
    written = Path("profiles/start.toml").read_text().replace(str(tmp_path), "/tmp/demo")
    assert written.splitlines() == profile


def test_the_tutorials_completion_lines_write_each_shells_script(isolated: Isolation) -> None:
    """Each line of docs/tutorial.md's completion block, run by bash in an empty HOME, writes
    the script click makes for its shell, where that shell reads it."""
    text = (REPO / "docs" / "tutorial.md").read_text()
    block = text.split("TAB completes", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if not line.startswith("#")]
    path = f"{Path(console_script()).parent}:{os.environ['PATH']}"
    for line in lines:
        subprocess.run(
            ["bash", "-ec", line], env=os.environ | {"PATH": path}, check=True, timeout=120
        )
    written = {
        ".local/share/bash-completion/completions/nccl-launch": "_nccl_launch_completion()",
        ".nccl-launch-complete.bash": "_nccl_launch_completion()",
        ".zfunc/_nccl-launch": "#compdef nccl-launch",
        ".config/fish/completions/nccl-launch.fish": "function _nccl_launch_completion",
    }
    assert len(lines) == len(written)
    for name, start in written.items():
        assert (isolated.home / name).read_text().startswith(start), name


def bash_prints(command: str, page: str, nth: int = 0) -> None:
    """`command`, run by bash with `nccl-launch` on PATH, prints what `page` shows for it
    (its `nth` showing) and exits as the page says."""
    path = f"{Path(console_script()).parent}:{os.environ['PATH']}"
    done = subprocess.run(
        ["bash", "-c", f"{command} 2>&1"],
        env=os.environ | {"PATH": path},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (done.stdout.splitlines(), done.returncode) == documented(command, page, nth), command


def test_the_tutorials_first_steps_print_what_the_tutorial_shows(isolated: Isolation) -> None:
    """Steps 1 to 3 of docs/tutorial.md, by bash in an empty folder with `nccl-launch` on
    PATH: the profile as printed, its validation, the fix, the run, the refusal."""
    text = (REPO / "docs" / "tutorial.md").read_text()
    profile = text.split("`profiles/first.toml`:\n\n```toml\n", 1)[1].split("```", 1)[0]
    (isolated.root / "profiles" / "first.toml").write_text(profile)

    def shown(command: str, nth: int = 0) -> None:
        bash_prints(command, "tutorial.md", nth)

    validate = "nccl-launch validate profiles/first.toml"
    shown(validate)
    (isolated.root / "profiles" / "first.toml").write_text(
        profile.replace("NTHREADS = 500", "NTHREADS = 512")
    )
    shown(validate, nth=1)
    steps = text.split("## 2. ", 1)[1].split("## 4. ", 1)[0]
    commands = re.findall(r"^\$ (?!echo )(.*)$", steps, re.MULTILINE)
    assert len(commands) == 2
    for command in commands:
        shown(command)


def test_the_vllm_pages_profiles_print_what_the_page_shows(isolated: Isolation) -> None:
    """docs/vllm.md's profiles (each block after a `profiles/NAME.toml`:) in an empty folder,
    each command of the page run there by bash with `nccl-launch` on PATH; the batch-invariant
    profile validated twice: as printed, then with the page's `[policy]` table added."""
    text = (REPO / "docs" / "vllm.md").read_text()
    profiles = re.findall(r"`profiles/([\w-]+)\.toml`:\n\n```toml\n(.*?)```", text, re.DOTALL)
    for name, body in profiles:
        (isolated.root / "profiles" / f"{name}.toml").write_text(body)

    def shown(command: str, nth: int = 0) -> None:
        bash_prints(command, "vllm.md", nth)

    deterministic = "nccl-launch validate profiles/vllm-deterministic.toml"
    commands = [
        "nccl-launch validate profiles/vllm-tp4.toml",
        "nccl-launch run --dry-run vllm-2n --node-rank 1 | tail -1",
        deterministic,
        "nccl-launch show vllm-deterministic | sed -n '/^server_owned/,/^]/p'",
        "nccl-launch validate profiles/vllm-sleep.toml",
    ]
    # Recorded against a running stand-in (PIDs, times): tests/test_vllm_live.py runs the same.
    recorded = {
        "nccl-launch check kimi-vllm-standin --port 8011",
        "nccl-launch bench kimi-vllm-standin --runs 3 --max-tokens 200",
    }
    on_the_page = re.findall(r"^\$ (nccl-launch .*)$", text, re.MULTILINE)
    assert set(on_the_page) == {VLLM_EXAMPLE, *commands, *recorded}
    for command in commands[:3]:
        shown(command)
    policy = text.split("With this table added", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    with (isolated.root / "profiles" / "vllm-deterministic.toml").open("a") as profile:
        profile.write("\n" + policy)
    shown(deterministic, nth=1)
    for command in commands[3:]:
        shown(command)


def test_the_systemd_guides_api_key_and_drift_units_pass_systemd_analyze(
    isolated: Isolation, run_cli: RunCli, systemd_analyze: str
) -> None:
    """docs/systemd-and-monitoring.md: the unit of migrating.md's chat profile with the
    server's `-- --api-key '${API_KEY}'` prints and holds what the page shows, a key written
    out is refused as shown; that unit and the drift units verify."""
    page = "systemd-and-monitoring.md"
    script, _ = documented("cat start_chat.sh", "migrating.md")
    Path("start_chat.sh").write_text("\n".join(script) + "\n")
    assert run_cli("convert", "start_chat.sh", "--name", "chat").returncode == 0
    with Path("profiles/chat.env").open("a") as env_file:
        env_file.write("API_KEY=sk-live-7Hq2\n")
    unit = isolated.root / "sglang-chat.service"
    written = run_cli(
        *("systemd", "profiles/chat.toml", "--user", "sglang", "--force", "--output", str(unit)),
        *("--", "--api-key", "${API_KEY}"),
    )
    command = (
        "nccl-launch systemd profiles/chat.toml --user sglang --force --output "
        "/tmp/doc/sglang-chat.service -- --api-key '${API_KEY}'"
    )
    shown, _ = documented(command, page)
    assert written.stdout.replace(str(isolated.root), "/tmp/doc").splitlines() == shown
    shown, _ = documented("grep ^Exec /tmp/doc/sglang-chat.service", page)
    exec_lines = [line for line in unit.read_text().splitlines() if line.startswith("Exec")]
    text = "\n".join(exec_lines).replace(str(isolated.root), "/tmp/doc")
    assert text.replace(console_script(), "/opt/nccl-launch/bin/nccl-launch").splitlines() == shown
    shown, code = documented(
        "nccl-launch systemd profiles/chat.toml -- --api-key sk-live-7Hq2", page
    )
    refused = run_cli("systemd", "profiles/chat.toml", "--", "--api-key", "sk-live-7Hq2")
    assert (refused.stderr.splitlines(), refused.returncode) == (shown, code)
    text = (REPO / "docs" / page).read_text()
    units = [unit]
    for body in re.findall(r"```ini\n# /etc/systemd/system/(\S+)\n(.*?)```", text, re.DOTALL):
        units.append(isolated.root / body[0])
        units[-1].write_text(body[1].replace("/opt/nccl-launch/bin/nccl-launch", console_script()))
    assert [path.name for path in units[1:]] == [
        "sglang-drift.service", "sglang-drift.timer", "sglang-watch.service"
    ]  # fmt: skip
    (isolated.root / "sglang.service").write_text("[Service]\nExecStart=/bin/true\n")
    done = subprocess.run(
        [systemd_analyze, "verify", *map(str, units)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert "User=sglang" in units[1].read_text() and "User=sglang" in units[3].read_text()
