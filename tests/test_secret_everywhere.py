"""One test secret pushed through every command and output format: an API key filled into
`--api-key` from an env file (`${API_KEY}`), an admin key filled from a secret file, a password
in a URL and a token in [env], and the same key and password in a start script. Each row is a
command line and what it must not show: its value appears in none of stdout, stderr and the
files the command writes, and the mask stands where the value would be.

Outputs that no row reaches, and why:
- `show --format json|env|dotenv|shell|systemd-env|k8s` print the profile's own [env] values as
  the server gets them (the URL's password and the token included): they are for machines, by
  design. Their rows hold them only to what is read from files (the env file, the secret file).
- Each tune trial's log (0600) is the server's own output as it wrote it, as its journal is
  under systemd: what nccl-launch shows of it (the failed trial's tail, on the terminal and
  in the journal) is a row.
- The secrets file `convert` and `capture` write beside the profile (0600), the profile they
  write with `--secrets-in-profile` (0600), and the env and secret files themselves hold the
  values: that is what they are for.
- `new` without `--from` writes a profile of its defaults; `schema` prints the format;
  completion completes names: none reads a value.
- `check --watch --on-drift stop` signals only a server of the profile it checks, which runs
  undrifted here: its lines are `check --watch`'s, a row.
- `check --unit` asks systemd, which the suite does not run; it reads the tree `--pid` does.
- A bug quoting the argv as a Python list (`['--api-key', 'sk-...']`), whose words no rule of
  masking reads (see BUGS).
- vLLM's views of a live server: tests/test_masking_sinks.py runs them with a secret file's
  value in a flag no rule masks.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from nccl_launch.launch import execute
from nccl_launch.secrets.masking import MASK
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import STANDIN, Server, free_port, wait_for

KEY = "sk-Zq8envkey"  # the env file's API_KEY, filled into --api-key
ADMIN = "adm-Zq8filekey"  # the secret file's ADMIN_KEY, filled into --admin-api-key
IN_URL = "pw-Zq8url"  # DATABASE_URL's password, in [env]
HF = "hf-Zq8token"  # HF_TOKEN, in [env]
FROM_FILES = (KEY, ADMIN)  # what only a launch reads: never printed by any format
EVERY = (*FROM_FILES, IN_URL, HF)
SITE = "st-Zq8sitetoken"  # SITE_TOKEN, in an --env-file

PROFILE = """schema = 1
name = "secret"
version = {version}
env_files = ["secrets.env"]
secret_files = {{ ADMIN_KEY = "admin" }}
[nccl]
PROTO = "LL"
[env]
DATABASE_URL = "postgres://app:{password}@{host}/x"
HF_TOKEN = "{token}"
[server]
python = "{python}"
model_path = "/models/m"
host = "127.0.0.1"
port = {port}
args = ["--api-key", "${{API_KEY}}", "--admin-api-key", "${{ADMIN_KEY}}"]
"""

SCRIPT = f"""#!/bin/bash
export NCCL_PROTO=LL
export DATABASE_URL=postgres://app:{IN_URL}@db/x
export HF_TOKEN={HF}
python -m sglang.launch_server --model-path /models/m --api-key {KEY} --admin-api-key {ADMIN}
"""


def profiles(write_profile: WriteProfile, port: int) -> Path:
    """`secret@1` and `secret@2` (its database on another host), the env file and the secret
    file beside them; the folder."""
    given = {"password": IN_URL, "token": HF, "python": sys.executable, "port": port}
    write_profile("secret", PROFILE.format(version=1, host="db", **given))
    folder = write_profile("secret-2", PROFILE.format(version=2, host="db2", **given)).parent
    (folder / "secrets.env").write_text(f"API_KEY={KEY}\n")
    (folder / "admin").write_text(f"{ADMIN}\n")
    for name in ("secrets.env", "admin"):
        (folder / name).chmod(0o600)
    return folder


@dataclass(frozen=True)
class Row:
    """A command line and its exit code; the secrets it must not show; the mask it must show,
    if any; the files it writes (glob patterns in the test's folder); the environment it is
    called with."""

    argv: tuple[str, ...]
    code: int = 0
    hidden: tuple[str, ...] = EVERY
    shows: str | None = None
    files: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


SKIP_HOST = ("--skip", "gpus", "--skip", "paths", "--skip", "port", "--skip", "sglang")
URL = f"postgres://{MASK}@db/x"
ARGV = f"--api-key '{MASK}' --admin-api-key '{MASK}'"

# The commands that read the profiles alone, no server running.
STATIC = {
    "validate": Row(("validate", "secret")),
    "validate json": Row(("validate", "secret", "--format", "json")),
    "show toml": Row(("show", "secret"), shows=URL),
    **{
        f"show {fmt}": Row(("show", "secret", "--format", fmt), hidden=FROM_FILES)
        for fmt in ("json", "env", "dotenv", "shell", "systemd-env", "k8s")
    },
    "diff": Row(("diff", "secret@1", "secret@2"), 1, shows=f'{URL}" -> "postgres://{MASK}@db2'),
    "list": Row(("list",)),
    "run --dry-run": Row(("run", "secret", "--dry-run"), shows=URL),
    # The calling environment holds other values of the profile's variables: the refusal's
    # diff shows both sides, masked.
    "run refusal": Row(
        ("run", "secret"),
        1,
        hidden=(*EVERY, "pw-Zq8other", "hf-Zq8other"),
        shows=f'"{MASK}" -> "{MASK}"',
        env={"DATABASE_URL": "postgres://app:pw-Zq8other@db/x", "HF_TOKEN": "hf-Zq8other"},
    ),
    "preflight": Row(("preflight", "secret", *SKIP_HOST)),
    "preflight json": Row(("preflight", "secret", *SKIP_HOST, "--format", "json")),
    "systemd": Row(("systemd", "secret")),
    "systemd -o": Row(("systemd", "secret", "-o", "unit/secret.service"), files=("unit/*",)),
    # An --env-file's variable is masked by its name, as the calling environment's is: one
    # under a plain name (`HF_HOME=/cache`) is shown, which tests/test_launch.py pins.
    "run --dry-run --env-file": Row(
        ("run", "secret", "--dry-run", "--env-file", "site.env"),
        hidden=(*EVERY, SITE),
        shows=f'SITE_TOKEN                "{MASK}"',
    ),
    # A password in the URL given to bench is refused, naming the URL masked.
    **{
        f"bench --url with a password {fmt}": Row(
            ("bench", "secret", "--url", "http://app:pw-Zq8bench@127.0.0.1:1", "--format", fmt),
            2,
            hidden=(*EVERY, "pw-Zq8bench"),
            shows=f"--url http://{MASK}@127.0.0.1:1",
        )
        for fmt in ("text", "json")
    },
    # A copy is the user's own profile again (its literal [env] values too, as the source
    # holds them): never the values its files hold.
    "new --from": Row(
        ("new", "copy", "--from", "secret", "--dir", "copy"), hidden=FROM_FILES, files=("copy/*",)
    ),
    "convert": Row(
        ("convert", "start.sh", "--name", "conv", "-o", "out/conv.toml"), files=("out/conv.toml",)
    ),
    "convert stdin": Row(
        ("convert", "-", "--name", "raw", "-o", "raw/raw.toml"), files=("raw/raw.toml",)
    ),
}


def leaks(row: Row, result: subprocess.CompletedProcess[str], root: Path) -> list[str]:
    """What `row`'s command showed of its secrets: each secret found, and where."""
    said = {"stdout": result.stdout, "stderr": result.stderr}
    for pattern in row.files:
        for path in sorted(root.glob(pattern)):
            if path.is_file():
                said[str(path.relative_to(root))] = path.read_text(errors="replace")
    return [
        f"{secret} in {where}"
        for where, text in said.items()
        for secret in row.hidden
        if secret in text or secret in text.replace('\\"', '"')
    ]


def run_row(row: Row, run_cli: RunCli, root: Path) -> list[str]:
    """`row` run in-process: its leaks, and a missing mask or a crash as one too."""
    stdin = root / "start.sh" if row.argv[:2] == ("convert", "-") else None
    result = run_cli(*row.argv, env=row.env, stdin_path=stdin)
    found = leaks(row, result, root)
    if result.returncode != row.code:  # a refusal shows too little to prove anything
        found.append(f"exit {result.returncode}: {result.stdout}{result.stderr}")
    if row.shows is not None and row.shows not in result.stdout + result.stderr:
        found.append(f"no {row.shows!r} in: {result.stdout}{result.stderr}")
    return found


@pytest.mark.parametrize("name", list(STATIC))
def test_a_command_of_the_profile_shows_none_of_its_secrets(
    name: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    profiles(write_profile, free_port())
    (tmp_path / "start.sh").write_text(SCRIPT)
    (tmp_path / "site.env").write_text(f"SITE_TOKEN={SITE}\n")
    assert run_row(STATIC[name], run_cli, tmp_path) == []


@pytest.fixture
def live(write_profile: WriteProfile) -> Iterator[Server]:
    """The SGLang stand-in started by `nccl-launch run --nccl-debug secret`: the key and the
    admin key in its argv, the password and the token in its environment, NCCL's log written
    to a run folder under the state home."""
    port = free_port()
    profiles(write_profile, port)
    server = Server([console_script(), "run", "--nccl-debug", "secret"], {}, port)
    yield server
    server.stop()


def live_rows(server: Server) -> dict[str, Row]:
    """The commands that look at the live server, or at what it left."""
    port, url = str(server.port), f"http://127.0.0.1:{server.port}"
    fast = ("--max-tokens", "8", "--runs", "1", "--warmup", "0")
    state = ".local/state/nccl-launch"
    return {
        # secret@2's database is on another host: each process drifts (exit 1), both URLs shown.
        **{f"check {fmt}": Row(("check", "secret@2", "--port", port, "--format", fmt), 1,
                               shows=URL) for fmt in ("text", "json")},
        "check prometheus": Row(("check", "secret@2", "--port", port, "--format", "prometheus"),
                                1),
        "check -v": Row(("check", "secret", "--port", port, "-v")),
        "check -o": Row(("check", "secret@2", "--port", port, "-o", "report/m.prom"), 1,
                        files=("report/*",)),
        "check --pid json -o": Row(
            ("check", "secret@2", "--pid", str(server.process.pid), "--format", "json", "-o",
             "report/c.json"), 1, files=("report/*",)),
        # The argv it shows holds the references, `${API_KEY}`, never what filled them.
        **{f"preflight {fmt} (port taken)": Row(
            ("preflight", "secret", "--skip", "gpus", "--skip", "paths", "--skip", "sglang",
             "--format", fmt), 3) for fmt in ("text", "json")},
        **{f"bench {fmt}": Row(("bench", "secret", "--url", url, *fast, "--format", fmt,
                                "--record", "bench/history.jsonl"), files=("bench/*",))
           for fmt in ("text", "json")},
        "bench to the state home": Row(("bench", "secret", *fast), files=(f"home/{state}/**/*",)),
        **{f"bench --history {fmt}": Row(("bench", "--history", "--format", fmt))
           for fmt in ("text", "json")},
        **{f"verify-log --latest {fmt}": Row(("verify-log", "secret", "--latest", "--format", fmt),
                                             files=(f"home/{state}/**/*",))
           for fmt in ("text", "json")},
        "capture": Row(("capture", "--pid", str(server.process.pid), "--name", "cap", "-o",
                        "cap/cap.toml"), files=("cap/cap.toml",)),
    }  # fmt: skip


def test_every_view_of_a_live_server_shows_none_of_its_secrets(
    live: Server, run_cli: RunCli, tmp_path: Path
) -> None:
    argv = Path(f"/proc/{live.process.pid}/cmdline").read_bytes()
    assert KEY.encode() in argv and ADMIN.encode() in argv  # what the rows must not show
    # It answers 401 without the key: bench and check send the one the env file holds.
    assert httpx.get(f"http://127.0.0.1:{live.port}/server_info").status_code == 401
    found = {name: run_row(row, run_cli, tmp_path) for name, row in live_rows(live).items()}
    assert not any(found.values()), "\n".join(
        f"{name}: {leaked}" for name, leaked in found.items() if leaked
    )
    names = [str(path) for path in (tmp_path / "home").rglob("*")]
    assert [name for name in names if any(secret in name for secret in EVERY)] == []
    for fmt in ("text", "json"):  # check --watch's lines as they come
        shown = watched(live.port, fmt, tmp_path / f"watch-{fmt}.out")
        assert [secret for secret in EVERY if secret in shown] == [], shown


def watched(port: int, fmt: str, path: Path) -> str:
    """What `check secret@2 --watch` printed until it showed the URL masked twice (then it is
    interrupted)."""
    watch = ("--watch", "0.2", "--format", fmt)
    argv = [console_script(), "check", "secret@2", "--port", str(port), *watch]
    with path.open("w") as out:
        watcher = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: path.read_text().count(URL) >= 2, "two reports", timeout=60)
        finally:
            if watcher.poll() is None:
                watcher.send_signal(signal.SIGINT)
            watcher.wait(timeout=30)
    return path.read_text()


# A bug on run's way to the exec, which quotes what it holds in its exception: the one-line
# message and the --debug traceback are masked by masking's rules (an argv's words, a URL's
# password, a pair named like a credential); each bug, and what stands where its values were.
# Out of the table: a bug quoting the argv as a Python list (`['--api-key', 'sk-...']`), whose
# words no rule reads: only a value that masks itself would show the mask there.
BUGS: dict[str, tuple[Callable[[list[str], dict[str, str]], str], str]] = {
    "the environment": (
        lambda argv, env: f"cannot start with {dict(env)!r}",
        f"'DATABASE_URL': '{URL}', 'HF_TOKEN': '{MASK}'",
    ),
    "the command line": (lambda argv, env: f"cannot start {' '.join(argv)}", ARGV.replace("'", "")),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_bugs_traceback_shows_none_of_the_secrets_it_holds(
    bug: str, write_profile: WriteProfile, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles(write_profile, free_port())
    said, shows = BUGS[bug]

    def broken(argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        raise RuntimeError(said(argv, env))

    monkeypatch.setattr(execute, "exec_command", broken)
    result = run_cli("--debug", "run", "secret")
    assert result.returncode == 4, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert [secret for secret in EVERY if secret in result.stderr] == [], result.stderr
    assert result.stderr.count(shows) == 2, result.stderr  # in the traceback and the message


@pytest.mark.slow
@pytest.mark.own_pid_namespace
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_tune_shows_none_of_the_secrets_on_the_terminal_or_in_its_journal(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """Its second trial's server exits at start: the tail of its log, which quotes its
    arguments (`ServerArgs(..., api_key=...)`), is shown and journaled."""
    profiles(write_profile, free_port())
    env = {"PYTHONPATH": str(STANDIN), "STANDIN_EXIT_IF": "NCCL_BUFFSIZE=1048576"}
    fast = ("--max-tokens", "8", "--runs", "1", "--warmup", "0", "--ready-timeout", "5")
    journaled = "home/.local/state/nccl-launch/tune/*/journal.jsonl"
    command = ("tune", "secret", "--try", "BUFFSIZE=1048576", *fast, "--format", fmt)
    row = Row(command, shows="api_key='***'", files=(journaled,), env=env)
    assert run_row(row, run_cli, tmp_path) == []
    [journal] = (tmp_path / "home").rglob("journal.jsonl")
    assert "api_key='***'" in journal.read_text()
    # Each trial's log is the server's own output, as it wrote it: for its owner alone.
    logs = list(journal.parent.glob("*.log"))
    assert logs and {log.stat().st_mode & 0o777 for log in logs} == {0o600}


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_preflight_with_sglangs_own_parser_shows_none_of_the_secrets(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, sglang_python: str
) -> None:
    """The real SGLang parses the argv the keys are filled into, and answers what it read."""
    folder = profiles(write_profile, free_port())
    text = (folder / "secret.toml").read_text().replace(sys.executable, sglang_python)
    (folder / "secret.toml").write_text(text)
    row = Row(("preflight", "secret", "--skip", "gpus", "--skip", "paths", "--format", fmt),
              shows="SGLang's parser accepts")  # fmt: skip
    assert run_row(row, run_cli, tmp_path) == []
