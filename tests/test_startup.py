"""Start-up cost (docs/performance.md): which modules each command imports, and the lazy
group's help table.

No timing here (CI times nothing; benchmarks/bench.py does): these tests pin *which* modules a
command loads, which is what decides its start-up time.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import click
import pytest

from nccl_launch import cli
from tests.conftest import console_script

HEAVY = ("psutil", "pydantic", "dotenv", "nccl_launch.commands.", "nccl_launch.launch.preflight")
# What no start needs: the HTTP client (bench, the servers' API), tomlkit (a baseline written
# into a profile), python-dotenv (only with --env-file), shell completion (only on a TAB), the
# other commands' work and reports.
NOT_FOR_START = (
    "click.shell_completion",
    "nccl_launch.commands.completion",
    "httpx",
    "tomlkit",
    "dotenv",
    "traceback",
    "nccl_launch.serving.asking",
    "nccl_launch.launch.preflight",
    "nccl_launch.live.verify_log",
    "nccl_launch.bench",
    "nccl_launch.tune",
    "nccl_launch.migrate",
    "nccl_launch.deploy",
)
# `run` reads no process (psutil) and no NCCL log (only with --nccl-debug), and renders no
# report of check's.
RUN_NEEDS_NOT = (
    *NOT_FOR_START,
    "psutil",
    "nccl_launch.live.nccl_logs",
    "nccl_launch.nccl.log",
    "nccl_launch.render.reports",
)


# Runs the CLI in-process, then lists sys.modules (-X importtime misses importlib.import_module).
PROBE = (
    "import sys\n"
    "from nccl_launch.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "finally:  # a completion request exits inside main\n"
    "    print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def imported(*args: str, cwd: Path | None = None, code: int = 0, **env: str) -> set[str]:
    """The modules `nccl-launch ARGS` has imported by the time it returns (with exit `code`)."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "80", **env},
        timeout=120,
    )
    assert result.returncode == code, result.stderr[-2000:]
    return set(result.stderr.splitlines())


def write_profile(folder: Path) -> None:
    """Profile `p`, one NCCL variable, in `folder`'s profiles/ (on the search path there)."""
    (folder / "profiles").mkdir(exist_ok=True)
    (folder / "profiles" / "p.toml").write_text(
        'schema = 1\nname = "p"\nversion = 1\n\n[nccl]\nPROTO = "LL"\n', encoding="utf-8"
    )


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_no_command(flag: str) -> None:
    modules = imported(flag)
    assert "click" in modules  # the report was read
    assert not {name for name in modules if name.startswith(HEAVY)}


def test_completing_a_command_name_imports_no_command() -> None:
    modules = imported(
        _NCCL_LAUNCH_COMPLETE="bash_complete", COMP_WORDS="nccl-launch ", COMP_CWORD="1"
    )
    assert "nccl_launch.commands.completion" in modules  # the request was read
    heavy = {name for name in modules if name.startswith(HEAVY)}
    assert heavy == {"nccl_launch.commands.completion"}


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_a_tab_on_a_commands_options_imports_only_its_options(name: str) -> None:
    # A command's module imports its work (pydantic, psutil, httpx) in its callback: a TAB
    # reads only its options, and costs about an `import click` (docs/performance.md).
    modules = imported(
        _NCCL_LAUNCH_COMPLETE="bash_complete", COMP_WORDS=f"nccl-launch {name} --", COMP_CWORD="2"
    )
    assert f"nccl_launch.commands.{cli.COMMANDS[name][0]}" in modules  # the request was read
    assert not {module for module in modules if module.startswith(("pydantic", "psutil", "httpx"))}


def test_run_validates_with_pydantic_and_imports_no_other_commands_work(tmp_path: Path) -> None:
    write_profile(tmp_path)
    modules = imported("run", "--dry-run", "p", "--", "true", cwd=tmp_path)
    assert "nccl_launch.commands.launching" in modules  # the report was read
    assert "pydantic" in modules  # every run validates the profile with the one model
    assert not {name for name in modules if name.startswith(RUN_NEEDS_NOT)}
    assert "nccl_launch.commands.checking" not in modules
    # Nothing is cached between runs: no file is written under the home directory.
    assert list(Path(os.environ["HOME"]).rglob("*")) == []


VLLM_PROFILE = (
    'schema = 1\nname = "v"\nversion = 1\n\n[nccl]\nPROTO = "LL"\n\n'
    '[server]\nkind = "vllm"\nmodel_path = "/models/m"\n'
)


# pydantic's first model would read the entry points of every installed distribution, looking
# for pydantic plugins; the probe fails where pydantic's group is read.
NO_SCAN = (
    "import importlib.metadata, sys\n"
    "read = importlib.metadata.entry_points\n"
    "def scan(**selection):\n"
    "    if selection.get('group') == 'pydantic':\n"
    "        raise SystemExit(f'entry points read: {selection}')\n"
    "    return read(**selection)\n"
    "importlib.metadata.entry_points = scan\n"
    "from nccl_launch.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--dry-run", "p", "--", "python", "-c", "pass"],
        ["run", "--dry-run", "v"],
        ["validate"],
    ],
)
def test_a_command_looks_for_no_pydantic_plugins(args: list[str], tmp_path: Path) -> None:
    write_profile(tmp_path)
    (tmp_path / "profiles" / "v.toml").write_text(VLLM_PROFILE, encoding="utf-8")
    if args == ["validate"]:
        args = ["validate", str(tmp_path / "profiles" / "v.toml")]
    result = subprocess.run(
        [sys.executable, "-c", NO_SCAN, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr  # the scan would exit 1, saying so
    assert "entry points read" not in result.stderr


# Reading an entry-point group reads the metadata of every installed distribution (milliseconds
# in a server's venv): the kinds' group is read once however often the kinds are asked.
COUNT_KIND_SCANS = (
    "import atexit, importlib.metadata, sys\n"
    "read, scans = importlib.metadata.entry_points, []\n"
    "def counted(**selection):\n"
    "    scans.append(selection.get('group'))\n"
    "    return read(**selection)\n"
    "importlib.metadata.entry_points = counted\n"
    "atexit.register(lambda: print('scans', scans.count('nccl_launch.kinds'), file=sys.stderr))\n"
    "from nccl_launch.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_a_run_reads_the_kinds_entry_points_once(tmp_path: Path) -> None:
    write_profile(tmp_path)
    (tmp_path / "profiles" / "v.toml").write_text(VLLM_PROFILE, encoding="utf-8")
    # vLLM's argv, masked, asks every kind about each option word; the table is validated
    # against every kind's.
    result = subprocess.run(
        [sys.executable, "-c", COUNT_KIND_SCANS, "run", "--dry-run", "v", "--", "--api-key", "k"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "--api-key '***'" in result.stdout  # the argv was masked, every kind asked
    assert result.stderr.splitlines()[-1] == "scans 1"


SHOW_ENV = "import json, os, sys; json.dump(dict(os.environ), sys.stdout)"


@pytest.mark.parametrize("given", [None, "", "logfire", "__all__"])
def test_the_server_gets_pydantic_disable_plugins_as_the_caller_gave_it(
    given: str | None, tmp_path: Path
) -> None:
    # pydantic's plugins are off in nccl-launch's own process alone: the server's pydantic
    # (SGLang's, vLLM's) finds its plugins as the caller's environment says.
    write_profile(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    argv = [console_script(), "run", "p", "--", sys.executable, "-c", SHOW_ENV]
    result = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    received = json.loads(result.stdout)
    assert received["NCCL_PROTO"] == "LL"  # the server's own environment was read
    assert received.get("PYDANTIC_DISABLE_PLUGINS") == given


def test_run_with_nccl_debug_loads_the_log_folder_it_needs(tmp_path: Path) -> None:
    write_profile(tmp_path)
    modules = imported("run", "--dry-run", "--nccl-debug", "p", "--", "true", cwd=tmp_path)
    assert "nccl_launch.live.nccl_logs" in modules  # the other test would pass without it


def test_a_one_shot_check_imports_what_it_reads_and_no_more(tmp_path: Path) -> None:
    write_profile(tmp_path)
    # This test's process was not started with the profile: drift (exit 1), read all the same.
    modules = imported("check", "--pid", str(os.getpid()), "p", cwd=tmp_path, code=1)
    assert {"psutil", "pydantic", "nccl_launch.live.compare"} <= modules  # the tree was read
    # Nor run's launch, nor the Prometheus text of --format prometheus.
    unwanted = (*NOT_FOR_START, "nccl_launch.launch.", "nccl_launch.render.prometheus")
    assert not {name for name in modules if name.startswith(unwanted)}
    assert "nccl_launch.commands.launching" not in modules


def test_validate_and_check_write_nothing_under_the_cache_or_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = tmp_path / "profiles" / "p.toml"
    profile.write_text('schema = 1\nname = "p"\nversion = 1\n\n[nccl]\nPROTO = "LL"\n')
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert cli.main(["validate", str(profile)]) == 0
    # This test's own process was not started with the profile: drift, read all the same.
    assert cli.main(["check", "--pid", str(os.getpid()), str(profile)]) == 1
    assert not cache.exists()
    assert list(Path(os.environ["HOME"]).rglob("*")) == []


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
@pytest.mark.parametrize("limit", [20, 45, 74, 200])
def test_the_help_table_says_what_each_command_says(name: str, limit: int) -> None:
    command = cli.cli.commands[name]
    assert command.name == name
    assert cli.short_help(name, limit) == command.get_short_help_str(limit)


def test_every_command_is_in_the_table() -> None:
    modules = (
        "authoring",
        "benching",
        "checking",
        "deploying",
        "inspecting",
        "launching",
        "migrating",
        "tuning",
    )
    found = set()
    for module in modules:
        loaded = importlib.import_module(f"nccl_launch.commands.{module}")
        found |= {value.name for value in vars(loaded).values() if isinstance(value, click.Command)}
    assert found - {None} == set(cli.COMMANDS)


def test_a_command_leaves_the_start_up_heap_frozen_and_the_collector_on() -> None:
    # Start-up runs with the collector off; once the command is imported, what start-up built
    # is frozen (never scanned again, in a watch loop or at exit) and collection resumes.
    probe = (
        "import gc, sys\n"
        "from nccl_launch.cli import main\n"
        "code = main(['schema'])\n"
        "print(code, gc.get_freeze_count() > 1000, gc.isenabled(), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.stderr.strip() == "0 True True"


def test_the_collector_is_on_again_after_a_usage_error() -> None:
    assert cli.main(["frobnicate"]) == 2
    assert gc.isenabled()


def test_a_pydantic_without_its_plugin_table_only_scans_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The table is pydantic's private name: a release without it must not stop a command.
    import pydantic.plugin

    renamed = types.SimpleNamespace(plugins=None)
    monkeypatch.setattr(pydantic.plugin, "_loader", renamed)
    cli._no_pydantic_plugins()
    assert vars(renamed) == {"plugins": None}
