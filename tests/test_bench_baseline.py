"""`bench --write-baseline` against the stand-in server: the figure and its method written into
the profile's `[baseline]`, every other byte kept, the digest unchanged; nothing written for a
figure not proved to be the profile's, nor into a file that is not the user's to replace."""

from __future__ import annotations

import json
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from nccl_launch.profile.model import Baseline
from nccl_launch.profile.search import shipped_dir
from tests.benching import FAST, MEAN, history_lines
from tests.conftest import RunCli
from tests.standins import Started, url

# The stand-in's profile as a person writes one: comments, blank lines, odd spacing, literal
# strings, an inline table, and a [baseline] of tune's (several starts) between two tables.
STYLED = """\
# standin: every byte outside [baseline] must survive bench.
schema    = 1
name = "standin"   # the stand-in
version = 1
provenance = { hardware = "none", notes = 'a literal string' }

[nccl]
PROTO = 'LL'     # literal
ALGO="Ring"
BUFFSIZE = '16MiB'

[server]
python = "{python}"
model_path = "/models/m"
tp_size = 2
port = {port}
args = []


[baseline]   # measured on another host
decode_tok_s = 999.0  # far too fast here
tolerance = 0.2
starts = 3
interval = [990.0, 1000.0]

[policy]
undeclared_nccl  =  "refuse"
"""


# The profile as `bench standin` finds it, as its lines name it (JSON gives the absolute path).
AS_NAMED = Path("profiles", "standin.toml")


def styled(server_port: int) -> str:
    return STYLED.replace("{python}", sys.executable).replace("{port}", str(server_port))


def digest(run_cli: RunCli, path: Path) -> str:
    shown = run_cli("show", str(path), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    return str(json.loads(shown.stdout)["digest"])


def test_the_figure_and_its_method_replace_the_baseline_and_nothing_else_changes(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    path = tmp_path / "profiles" / "standin.toml"
    before_digest = digest(run_cli, path)
    path.write_text(styled(server.port))
    assert digest(run_cli, path) == before_digest  # the same profile, written by a person
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--write-baseline")
    assert result.returncode == 1, result.stdout + result.stderr  # below the old 999 tok/s
    found = MEAN.search(result.stdout)
    assert found is not None, result.stdout
    figure = round(
        history_lines(tmp_path / "home/.local/state/nccl-launch/bench.jsonl")[0]["mean_tok_s"], 1
    )
    assert found.group(1) == f"{figure:.1f}"
    assert result.stdout.endswith(
        f"baseline 999.0 -> {figure:.1f} tok/s (60 tokens x 2 runs) written to {path}\n"
    )
    old, new = styled(server.port).split("\n\n\n"), path.read_text().split("\n\n\n")
    assert new[0] == old[0]
    table, rest = new[1].split("\n\n", 1)
    assert rest == old[1].split("\n\n", 1)[1]
    assert table == (
        "[baseline]   # measured on another host\n"
        f"decode_tok_s = {figure}  # far too fast here\n"
        "tolerance = 0.2\n"
        "max_tokens = 60\n"
        "runs = 2"
    )
    assert digest(run_cli, path) == before_digest
    again = run_cli("bench", "standin", "--url", url(server), "--warmup", "0")
    assert again.returncode == 0, again.stdout + again.stderr  # its method is the default now
    assert "Run 2/2: 60 tokens in " in again.stdout
    assert f"baseline {figure:.1f} tok/s less 20% = " in again.stdout


def test_json_says_what_was_written_where_there_was_no_baseline(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    path = tmp_path / "profiles" / "standin.toml"
    text = path.read_text()
    result = run_cli(
        "bench", "standin", "--url", url(server), *FAST, "--write-baseline", "--format", "json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    written = document["written"]
    figure = round(document["mean_tok_s"], 1)
    assert written["path"] == str(path)
    assert written["previous"] is None
    assert Baseline.model_validate(written["baseline"]) == Baseline(
        decode_tok_s=figure, max_tokens=60, runs=2
    )
    assert f"baseline {figure:.1f} tok/s (60 tokens x 2 runs) written to {path}" in result.stderr
    added = f"\n[baseline]\ndecode_tok_s = {figure}\nmax_tokens = 60\nruns = 2\n"
    assert path.read_text() == text + added
    recorded = history_lines(tmp_path / "home/.local/state/nccl-launch/bench.jsonl")
    assert "written" not in recorded[0]  # the history line is the measurement's alone


@pytest.mark.parametrize(
    ("launcher", "env", "said"),
    [
        (False, {}, "no figure, the server did not run it before the runs"),
        (
            True,
            {"STANDIN_DRIFT_AT_REQUEST": "2", "STANDIN_LATE_DRIFT": "NCCL_PROTO=Simple"},
            "no figure, the server drifted from it while measured",
        ),
    ],
    ids=["refused", "discarded"],
)
def test_a_figure_not_proved_to_be_the_profiles_writes_nothing(
    launcher: bool, env: dict[str, str], said: str, start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(launcher=launcher, baseline="[baseline]\ndecode_tok_s = 10\n", env=env)
    path = tmp_path / "profiles" / "standin.toml"
    text = path.read_text()
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--write-baseline")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.endswith(f"nothing written to {AS_NAMED}: {said}\n")
    assert path.read_text() == text


def edit_when_measuring(server_pid: int, edit: Path, text: str) -> threading.Thread:
    """A thread that writes `text` to `edit` once the late scheduler of the second request (the
    first run measured) is up, while bench streams."""

    server = psutil.Process(server_pid)
    started = len(server.children(recursive=True))

    def late_scheduler() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(server.children(recursive=True)) > started:
                edit.write_text(text)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=late_scheduler)
    thread.start()
    return thread


def test_a_file_edited_while_bench_measures_is_not_overwritten(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(rate=60, env={"STANDIN_DRIFT_AT_REQUEST": "2"})  # a late worker, no drift
    path = tmp_path / "profiles" / "standin.toml"
    edited = path.read_text() + "# the user's edit\n"
    thread = edit_when_measuring(server.process.pid, path, edited)
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--write-baseline")
    thread.join()
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        f"nccl-launch: --write-baseline: nothing written: {AS_NAMED} changed while bench measured, "
        "and writing the figure would drop that edit; run bench again on the file as it is now\n"
    )
    assert "checked after: pid " in result.stdout  # the figure itself was good
    assert path.read_text() == edited


def test_a_parent_edited_while_bench_measures_refuses_the_write(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(rate=60, env={"STANDIN_DRIFT_AT_REQUEST": "2"})
    path = tmp_path / "profiles" / "standin.toml"
    text = path.read_text()
    parent = tmp_path / "profiles" / "base.toml"
    parent.write_text('schema = 1\nname = "base"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    child = text.replace("version = 1\n", 'version = 1\nextends = "base"\n', 1)
    path.write_text(child)
    before = digest(run_cli, path)
    thread = edit_when_measuring(
        server.process.pid, parent, parent.read_text() + "NTHREADS = 256\n"
    )
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--write-baseline")
    thread.join()
    assert result.returncode == 2, result.stdout + result.stderr
    now = digest(run_cli, path)
    assert result.stderr == (
        f"nccl-launch: --write-baseline: nothing written: {AS_NAMED} now resolves to {now}, "
        f"not the {before} measured (a file it extends changed meanwhile); run bench again on the "
        "profile as it is now\n"
    )
    assert path.read_text() == child


def test_a_shipped_profile_is_refused_before_any_request(run_cli: RunCli) -> None:
    shipped = shipped_dir()
    assert shipped is not None
    result = run_cli(
        "bench", str(shipped / "rtx6000bw-pcie-tp8.toml"), "--url", "http://127.0.0.1:1",
        "--write-baseline",
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(
        "nccl-launch: --write-baseline: rtx6000bw-pcie-tp8@1 is shipped with nccl-launch, and "
        "bench writes nothing into the installed package; copy it first (nccl-launch new NAME "
        "--from rtx6000bw-pcie-tp8), then measure the copy\n"
    )


def test_a_symlink_or_read_only_file_is_refused_before_any_request(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start()
    path = tmp_path / "profiles" / "standin.toml"
    real = tmp_path / "kept" / "standin.toml"
    real.parent.mkdir()
    shutil.move(path, real)
    path.symlink_to(real)
    linked = run_cli("bench", "standin", "--url", url(server), *FAST, "--write-baseline")
    assert (linked.returncode, linked.stdout) == (2, ""), linked.stderr
    assert linked.stderr == (
        f"nccl-launch: --write-baseline: {AS_NAMED} is a symlink; bench writes the figure into the "
        f"file itself, never through a link: name {real}\n"
    )
    text = real.read_text()
    real.chmod(0o444)
    locked = run_cli("bench", str(real), "--url", url(server), *FAST, "--write-baseline")
    assert (locked.returncode, locked.stdout) == (3, ""), locked.stderr
    assert locked.stderr == (
        f"nccl-launch: --write-baseline: {real}: read-only (mode 0444); bench does not replace "
        "a file that may not be written: chmod u+w it, or drop --write-baseline\n"
    )
    assert real.read_text() == text
    assert stat.S_IMODE(real.stat().st_mode) == 0o444
    assert path.is_symlink() and path.readlink() == real


def test_a_server_that_stops_short_writes_no_figure(
    start: Started, run_cli: RunCli, tmp_path: Path
) -> None:
    server = start(env={"STANDIN_TOKENS": "20"})
    path = tmp_path / "profiles" / "standin.toml"
    text = path.read_text()
    result = run_cli("bench", "standin", "--url", url(server), *FAST, "--write-baseline")
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.endswith(
        f"nccl-launch: --write-baseline: nothing written to {AS_NAMED}: the server stopped its "
        "runs at 20 of the 60 tokens asked (it ignores ignore_eos), so the figure is not one of "
        "max_tokens = 60\n"
    )
    assert path.read_text() == text


def test_history_takes_no_write_baseline(run_cli: RunCli) -> None:
    result = run_cli("bench", "--history", "--write-baseline")
    assert (result.returncode, result.stderr) == (
        2,
        "nccl-launch: --history reads the record only: drop --url, --pid and --write-baseline\n",
    )


def test_a_baseline_of_dotted_keys_the_editor_cannot_change_is_refused_in_one_line() -> None:
    """tomlkit fails to drop the last two `baseline.KEY = ...` of a table (an IndexError)."""
    from nccl_launch.bench.baseline_file import with_baseline
    from nccl_launch.findings import Refused

    text = "schema = 1\nbaseline.decode_tok_s = 100.0\nbaseline.starts = 2\n"
    text += "baseline.interval = [90.0, 110.0]\n"
    with pytest.raises(
        Refused, match=r"dotted keys, baseline.KEY = \.\.\.\); write it as a"
    ) as got:
        with_baseline(text, {"decode_tok_s": 99.0, "max_tokens": 20, "runs": 2})
    (finding,) = got.value.findings
    assert (finding.code, finding.where, finding.cause) == (
        "dotted-baseline",
        "--write-baseline",
        "profile",
    )
