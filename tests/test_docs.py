"""The docs show real output: the examples that need nothing but the shipped profiles and the
test corpus are run from the source tree and compared with what the docs print, line for line
and exit code for exit code. Examples that need a server, a host or files set up in prose are
checked by the tests of their command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import Isolation, RunCli, console_script

REPO = Path(__file__).parent.parent
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


LOG_EXAMPLES = [  # of docs/systemd-and-monitoring.md, on the test suite's 8-rank logs
    "nccl-launch verify-log kimi-k25-rtx6000bw-tp8-eagle3 server.log",
    "nccl-launch verify-log kimi-k25-rtx6000bw-tp8-eagle3 < drifted.log",
]


def documented(command: str, page: str = "commands.md") -> tuple[list[str], int]:
    """The lines `page` prints after `$ command` up to the next prompt or the block's end,
    and the exit code its `$ echo $?` shows (0 when it shows none)."""
    after = (REPO / "docs" / page).read_text().split(f"$ {command}\n", 1)[1]
    block = after.split("```", 1)[0]
    output, *prompts = re.split(r"^\$ ", block, flags=re.MULTILINE)
    shown = prompts[0].splitlines() if prompts else []
    code = int(shown[1]) if shown and shown[0] == "echo $?" else 0
    return output.splitlines(), code


@pytest.mark.parametrize("command", EXAMPLES, ids=[command[:40] for command in EXAMPLES])
def test_a_docs_example_prints_what_the_docs_show(command: str, isolated: Isolation) -> None:
    expected, code = documented(command)
    script = command.replace("nccl-launch", console_script(), 1)
    result = subprocess.run(
        ["bash", "-c", f"{script} 2>&1"], cwd=REPO, capture_output=True, text=True, check=False
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
    )
    expected = shown["env"] | shown["markers"]
    sourced = json.loads(done.stdout)
    assert {key: sourced.get(key) for key in expected} == expected
    assert expected["NCCL_LAUNCH_PROFILE_FILE"] == str(isolated.root / "profiles" / profile)
