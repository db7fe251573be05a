"""`convert` of an environment file and of an nccl.conf: the profile says what `run` would
otherwise have read from the file, so running the profile beside the file drifts nothing."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.conftest import Isolation, RunCli

CONF = (
    "# site values\n"
    "NCCL_PROTO=LL\n"
    "NCCL_BUFFSIZE=16777216\n"
    "NCCL_PROTO=Simple\n"
    "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
)


def test_an_nccl_conf_becomes_the_profile_of_what_nccl_applies_from_it(
    run_cli: RunCli, isolated: Isolation
) -> None:
    """The first line of a key counts, as NCCL never overwrites a value; run with the same
    file as /etc/nccl.conf, nothing the file sets is left out of the profile."""
    isolated.system_conf.parent.mkdir(parents=True)
    isolated.system_conf.write_text(CONF)
    Path("nccl.conf").write_text(CONF)
    result = run_cli("convert", "nccl.conf", "-o", "site.toml")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "nccl-launch: warning: line 4: NCCL_PROTO is set again; NCCL keeps the value of line 2\n"
    )
    text = Path("site.toml").read_text()
    profile = tomllib.loads(text)
    assert profile["nccl"] == {"PROTO": "LL", "BUFFSIZE": "16MiB"}
    assert profile["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert "server" not in profile
    assert 'BUFFSIZE = "16MiB"  # line 3' in text.splitlines()
    assert run_cli("run", "--dry-run", "site.toml", "--", "true").returncode == 0
    isolated.system_conf.write_text(CONF + "NCCL_ALGO=Tree\n")  # a key the profile lacks
    assert run_cli("run", "--dry-run", "site.toml", "--", "true").returncode == 1


def test_an_environment_file_becomes_the_profile_run_env_file_would_give(
    run_cli: RunCli,
) -> None:
    Path("site.env").write_text('export NCCL_ALGO=Ring\nHF_HOME="/data/hf cache"\nNCCL_ALGO=Tree\n')
    result = run_cli("convert", "site.env")
    assert result.returncode == 0, result.stderr
    text = Path("profiles/site.toml").read_text()
    assert tomllib.loads(text)["nccl"] == {"ALGO": "Tree"}
    assert tomllib.loads(text)["env"] == {"HF_HOME": "/data/hf cache"}
    assert 'ALGO = "Tree"  # line 3' in text.splitlines()
    dry_run = run_cli("run", "--dry-run", "site", "--env-file", "site.env", "--", "true")
    assert dry_run.returncode == 0, dry_run.stdout


def test_from_names_the_kind_of_input_the_file_name_does_not(run_cli: RunCli) -> None:
    Path("default").write_text("NCCL_ALGO=Ring\n")  # /etc/default/sglang, for systemd
    assert run_cli("convert", "default", "-o", "a.toml").returncode == 2  # read as a script
    result = run_cli("convert", "--from", "env", "default", "-o", "a.toml")
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(Path("a.toml").read_text())["nccl"] == {"ALGO": "Ring"}
    result = run_cli("convert", "--from", "nccl-conf", "-")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: --from nccl-conf reads a file: name it (stdin is read as a script)\n"
    )


def test_an_nccl_conf_line_nothing_would_read_is_refused_with_its_line(run_cli: RunCli) -> None:
    """NCCL takes all before the `=` as the name: `NCCL_PROTO = LL` sets `NCCL_PROTO `."""
    Path("nccl.conf").write_text("NCCL_ALGO=Ring\nNCCL_PROTO = LL\n")
    result = run_cli("convert", "nccl.conf")
    assert result.returncode == 2
    assert result.stderr == (
        "nccl-launch: nccl.conf: line 2: 'NCCL_PROTO ' is not a variable name: NCCL sets a "
        "variable of exactly that name, which nothing reads; write KEY=VALUE without spaces\n"
    )
    Path("nccl.conf").write_text("NCCL_ALGO=Rign\n")  # values are checked as for a script
    result = run_cli("convert", "nccl.conf")
    assert result.returncode == 2
    assert result.stderr.startswith("nccl.conf: line 1: NCCL_ALGO: ")
