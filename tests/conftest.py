"""Isolation for every test, and helpers to run the CLI: in this process (most tests), or the
installed console script for real (where the process itself is what a test is about)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol

import pytest
from hypothesis import settings

from nccl_launch.cli import main
from nccl_launch.nccl.conf import SYSTEM_CONF_VAR
from nccl_launch.profile.markers import SYSTEM_DIR_VAR
from tests.helpers import descendant_pids, stop_left

HERE = Path(__file__).parent
# The stand-ins' fixtures.
pytest_plugins = ["tests.standins"]

# What the host's shell may export that nccl-launch, NCCL, SGLang, vLLM, a scheduler or the tests'
# own profiles and scripts read. NCCL_ covers NCCL_LAUNCH_ too.
HOST_PREFIXES = ("NCCL_", "SGLANG_", "VLLM_", "SPT_", "SLURM_", "LWS_", "CUDA_", "HF_")
HOST_NAMES = frozenset(
    {
        "PYTHONPATH",  # would shadow the stand-in `sglang` package, or this checkout
        "OMP_NUM_THREADS",  # declared by a script that `convert` reads
        "TOKENIZERS_PARALLELISM",  # the same
        "MODEL_DIR",  # a convert test needs it unset
        "XDG_STATE_HOME",  # bench's history goes under the test's HOME
    }
)

# CI (.ci/run exports CI=true): the same examples on every run, and none replayed from a database.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

# A suite started in the background of a script inherits SIGINT ignored, and under `nohup`
# SIGHUP ignored, and so would every process it starts (Ctrl-C tests would then see no Ctrl-C,
# the closed terminal's tests no SIGHUP): caught here, each is reset to the default at each
# exec. An ignored SIGHUP is caught by a handler that does nothing: the suite itself still
# outlives its terminal, as `nohup` asked.
signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda number, frame: None)

# A venv with the real SGLang 0.5.23 (made by .ci/sglang-venv); read before isolation clears it.
SGLANG_PYTHON = os.environ.get("NCCL_LAUNCH_TEST_SGLANG_PYTHON")
# A venv with the real vLLM 0.33.0 (made by .ci/vllm-venv); read before isolation clears it.
VLLM_PYTHON = os.environ.get("NCCL_LAUNCH_TEST_VLLM_PYTHON")
# Set by CI and the README's test command: a missing tool is then a failure, not a skip.
REQUIRE_TOOLS = os.environ.get("NCCL_LAUNCH_REQUIRE_TOOLS") == "1"
# Set by .ci/run as root: the suite runs in a mount namespace with a hostile /etc/nccl.conf.
HOSTILE_ETC = os.environ.get("NCCL_LAUNCH_TEST_HOSTILE_ETC") == "1"


# The host's environment as the suite was started with it, before `isolated` trims it: what a
# test moved into a PID namespace of its own runs its pytest with.
HOST_ENVIRON = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
# Set in that pytest: the test runs there as written.
IN_OWN_PID_NAMESPACE = "NCCL_LAUNCH_TEST_IN_OWN_PID_NAMESPACE"
if IN_OWN_PID_NAMESPACE in HOST_ENVIRON:
    # PID 1 of the namespace gets no signal it has no handler for: a suite stopped with SIGTERM
    # (which `unshare` outside blocks, waiting for it) must end it too, and all it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "own_pid_namespace: nccl-launch signals a process tree in it; the test runs in a pytest "
        "of its own, PID 1 of a new PID namespace, so no signal reaches a process it did not "
        "start and all it started dies with it",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked own_pid_namespace, run again as PID 1 of a new PID namespace (where the
    mark lets it run as written): its outcome is that run's."""
    if pyfuncitem.get_closest_marker("own_pid_namespace") is None or IN_OWN_PID_NAMESPACE in (
        HOST_ENVIRON
    ):
        return None
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-m",
            "pytest", "-q", "-rs", "--tb=short", "-n", "0", "-p", "no:cacheprovider",
            f"--basetemp={Path.cwd() / 'own-pid-namespace'}", pyfuncitem.nodeid]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=pyfuncitem.config.rootpath,
        env={**HOST_ENVIRON, IN_OWN_PID_NAMESPACE: "1"},
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"in its own PID namespace:\n{done.stdout}{done.stderr}", pytrace=False)
    if " skipped" in done.stdout.splitlines()[-1]:
        pytest.skip(f"in its own PID namespace:\n{done.stdout}")
    return True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow first: the workers take the next test as each finishes one, so
    that what runs last is short and they end together."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@dataclass(frozen=True)
class Isolation:
    """Where a test's HOME and the two system paths nccl-launch reads are: under `root`."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def system_dir(self) -> Path:
        """Stands for /etc/nccl-launch/profiles."""
        return self.root / "etc" / "nccl-launch" / "profiles"

    @property
    def system_conf(self) -> Path:
        """Stands for /etc/nccl.conf."""
        return self.root / "etc" / "nccl.conf"

    def environ(self, host: Mapping[str, str]) -> dict[str, str]:
        """`host` without the variables in HOST_PREFIXES and HOST_NAMES, pointed at `root`."""
        kept = {
            key: value
            for key, value in host.items()
            if not key.startswith(HOST_PREFIXES) and key not in HOST_NAMES
        }
        return kept | {
            "HOME": str(self.home),
            SYSTEM_DIR_VAR: str(self.system_dir),
            SYSTEM_CONF_VAR: str(self.system_conf),
        }


def require(found: str | None, message: str) -> str:
    """`found`, or fail (under NCCL_LAUNCH_REQUIRE_TOOLS=1) or skip with `message`."""
    if found:
        return found
    if REQUIRE_TOOLS:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def sglang_python() -> str:
    """The interpreter of a real SGLang install."""
    message = "set NCCL_LAUNCH_TEST_SGLANG_PYTHON=$(.ci/sglang-venv) to run SGLang's parser"
    return require(SGLANG_PYTHON, message)


@pytest.fixture
def vllm_python() -> str:
    """The interpreter of a real vLLM install."""
    message = "set NCCL_LAUNCH_TEST_VLLM_PYTHON=$(.ci/vllm-venv) to run vLLM's parser"
    return require(VLLM_PYTHON, message)


@pytest.fixture
def systemd_analyze() -> str:
    """Debian's systemd-analyze, which parses unit files like systemd does."""
    return require(shutil.which("systemd-analyze"), "install Debian's systemd package")


def console_script() -> str:
    """The `nccl-launch` installed next to this interpreter (the real entry point, not click)."""
    script = Path(sys.executable).with_name("nccl-launch")
    found = str(script) if script.exists() else shutil.which("nccl-launch")
    if found is None:
        pytest.fail("nccl-launch is not installed; run: pip install -e '.[test]'")
    return found


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Isolation:
    """The host's environment, ~/.nccl.conf, /etc/nccl.conf and system profiles stay out:
    os.environ (so every subprocess too) is Isolation.environ, and `./profiles` is empty."""
    isolation = Isolation(tmp_path)
    wanted = isolation.environ(os.environ)
    for key in set(os.environ) - set(wanted):
        monkeypatch.delenv(key)
    for key, value in wanted.items():
        monkeypatch.setenv(key, value)
    isolation.home.mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    return isolation


# The most a test may take (the slowest, building a wheel, takes about a minute).
TEST_LIMIT = 600


@pytest.fixture(autouse=True)
def reaped() -> Iterator[None]:
    """No process a test started outlives it: one left running (the test failed, or timed out
    waiting for it) is killed and reaped, so that no later test meets it. A test still running
    after TEST_LIMIT seconds fails (SIGALRM interrupts what it waits for, and subprocess.run
    kills its child on the way out)."""

    def hang(number: int, frame: object) -> None:
        raise Hang(f"the test still ran after {TEST_LIMIT} s")

    kept = descendant_pids()
    handler = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, TEST_LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        stop_left(kept)


class WriteProfile(Protocol):
    def __call__(self, name: str, text: str, folder: str = "profiles") -> Path: ...


@pytest.fixture
def write_profile(tmp_path: Path) -> WriteProfile:
    """Write `profiles/NAME.toml` (or `folder/NAME.toml`) from dedented TOML text."""

    def write(name: str, text: str, folder: str = "profiles") -> Path:
        path = tmp_path / folder / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    return write


class RunCli(Protocol):
    def __call__(
        self, *args: str, env: dict[str, str] | None = None, stdin_path: Path | None = None
    ) -> subprocess.CompletedProcess[str]: ...


@pytest.fixture
def nccl_launch() -> RunCli:
    """Run the console script with the (isolated) environment plus `env` overrides: for what
    needs a real process (an exec, /proc, signals, the entry point), and a test per command."""

    def run(
        *args: str, env: dict[str, str] | None = None, stdin_path: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script(), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            input=stdin_path.read_text() if stdin_path else None,
            timeout=TIMEOUT,
            check=False,
        )

    return run


class Exec(BaseException):
    """An exec from `run_cli`: it would replace pytest. Not an Exception: main() maps those."""


class Hang(BaseException):
    """`run_cli` past its timeout, raised in the main thread from SIGUSR1 (which interrupts a
    blocking call, an open() of a FIFO): the test fails, as the console script's would. Or a
    test past TEST_LIMIT, from SIGALRM."""


# What the nccl_launch fixture allows a command, and so run_cli too: the slowest, a tune whose
# runs are long enough that a busy host's late wake-ups stay a small share, takes about a
# minute, more beside busy loops.
TIMEOUT = 180


def _no_exec(file: str, argv: list[str], env: Mapping[str, str]) -> NoReturn:
    raise Exec(f"the command would exec {argv!r}: run it with the nccl_launch fixture")


def run_in_process(
    *args: str, env: dict[str, str] | None = None, stdin_path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in this process, as the console script would run it, and return what it
    would: its exit code, stdout and stderr (decoded as `subprocess.run(text=True)` does).

    For the tests that need only a command's exit code and output; `nccl_launch` (a real
    process) stays for exec, /proc, process trees, signals, start-up and the entry point.
    The streams are the console script's under this locale (C.UTF-8: surrogateescape on
    stdin and stdout, backslashreplace on stderr, no tty), stdin empty without `stdin_path`.
    The environment, cwd and signal handlers are restored after each call, and an exec fails
    the test instead of replacing pytest. A command still running after TIMEOUT seconds
    fails the test, as `nccl_launch`'s subprocess timeout does."""
    data = stdin_path.read_text().encode() if stdin_path else b""
    out, err = io.BytesIO(), io.BytesIO()
    streams = (sys.stdin, sys.stdout, sys.stderr)
    environ, cwd = dict(os.environ), Path.cwd()
    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    handlers = {number: signal.getsignal(number) for number in numbers}
    running = [True]

    def hang(number: int, frame: object) -> None:
        if running[0]:
            raise Hang(f"{args!r} still ran after {TIMEOUT} s")

    signal.signal(signal.SIGUSR1, hang)
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    alarm = threading.Timer(TIMEOUT, signal.pthread_kill, (main_thread, signal.SIGUSR1))
    alarm.daemon = True
    # Held here: a wrapper that is collected closes its buffer before it can be read.
    wrappers = (
        io.TextIOWrapper(io.BytesIO(data), "utf-8", "surrogateescape"),
        io.TextIOWrapper(out, "utf-8", "surrogateescape", write_through=True),
        io.TextIOWrapper(err, "utf-8", "backslashreplace", write_through=True),
    )
    sys.stdin, sys.stdout, sys.stderr = wrappers
    os.environ.update(env or {})
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "execvpe", _no_exec)
            alarm.start()
            code = main(list(args))
    except SystemExit as done:  # as the interpreter maps it: click's completion exits
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if not isinstance(done.code, int | None):
            print(done.code, file=sys.stderr)
    except (Exec, Hang) as stopped:
        pytest.fail(str(stopped))
    finally:
        running[0] = False
        alarm.cancel()
        for wrapper in wrappers[1:]:
            wrapper.flush()
        sys.stdin, sys.stdout, sys.stderr = streams
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        for number, handler in handlers.items():
            signal.signal(number, handler)
    result = subprocess.CompletedProcess(list(args), code, _text(out), _text(err))
    del wrappers
    return result


@pytest.fixture
def run_cli() -> RunCli:
    """`run_in_process`; hypothesis tests call it directly (a fixture is not reset between
    examples)."""
    return run_in_process


def _text(stream: io.BytesIO) -> str:
    """Bytes as `subprocess.run(text=True)` decodes them: UTF-8, universal newlines."""
    return stream.getvalue().decode().replace("\r\n", "\n").replace("\r", "\n")
