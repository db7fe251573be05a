"""Deployment artefacts read back by their consumers: the exports (python-dotenv, bash,
systemd, Kubernetes JSON) and the systemd unit (systemd-analyze)."""

from __future__ import annotations

import io
import json
import os
import pwd
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

from nccl_launch.deploy.systemd import unit_manager
from tests.conftest import RunCli, WriteProfile, console_script

TRICKY = {
    "SPACES": "two words",
    "QUOTES": 'it\'s "quoted"',
    "BACKSLASH": "C:\\new\\table",
    "DOLLAR": "$HOME and 100%",
    "NEWLINE": "line one\nline two",
    "EQUALS_HASH": "a=b # not a comment",
}
PROFILE = """
schema = 1
name = "tricky"
version = 3
[nccl]
PROTO = "ll"
BUFFSIZE = "16MiB"
[env]
""" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in TRICKY.items())


@pytest.fixture
def expected(write_profile: WriteProfile, run_cli: RunCli) -> dict[str, str]:
    write_profile("tricky", PROFILE)
    shown = json.loads(run_cli("show", "tricky", "--format", "json").stdout)
    env: dict[str, str] = shown["env"] | shown["markers"]
    assert env["NCCL_PROTO"] == "LL"
    assert env["NCCL_BUFFSIZE"] == "16777216"
    return env


def show(run_cli: RunCli, fmt: str) -> str:
    result = run_cli("show", "tricky", "--format", fmt)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dotenv_reads_back_the_same_values(expected: dict[str, str], run_cli: RunCli) -> None:
    text = show(run_cli, "dotenv")
    assert dict(dotenv_values(stream=io.StringIO(text))) == expected


def test_dotenv_refuses_what_dotenv_readers_would_expand(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("tricky", PROFILE + 'TEMPLATE = "${HOME}/x"\n')
    result = run_cli("show", "tricky", "--format", "dotenv")
    assert result.returncode == 2
    assert "TEMPLATE: '${HOME}/x' holds '${', which dotenv readers expand" in result.stderr


def test_bash_sources_the_shell_form(
    expected: dict[str, str], run_cli: RunCli, tmp_path: Path
) -> None:
    exports = tmp_path / "profile.sh"
    exports.write_text(show(run_cli, "shell"))
    dump = f'{sys.executable} -c "import json, os; print(json.dumps(dict(os.environ)))"'
    done = subprocess.run(["bash", "-c", f". {exports} && {dump}"], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    sourced = json.loads(done.stdout)
    assert {key: sourced[key] for key in expected} == expected


def test_systemd_parses_the_environment_lines(
    expected: dict[str, str], run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    lines = show(run_cli, "systemd-env")
    assert 'Environment="QUOTES=it\'s \\"quoted\\""' in lines.splitlines()
    assert 'Environment="DOLLAR=$HOME and 100%%"' in lines.splitlines()
    unit = tmp_path / "tricky.service"
    body = "[Unit]\nDescription=t\n\n[Service]\nType=exec\n{env}ExecStart=/bin/true\n"
    unit.write_text(body.format(env=lines))
    done = subprocess.run(
        [systemd_analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    # The same check does notice a badly quoted line: it really parses Environment=.
    unit.write_text(body.format(env='Environment="A=x y" "B=q"uote" "=x"\n'))
    done = subprocess.run(
        [systemd_analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120
    )
    assert "Invalid syntax" in done.stderr


def test_k8s_env_list_is_json_and_yaml(expected: dict[str, str], run_cli: RunCli) -> None:
    items = json.loads(show(run_cli, "k8s"))
    assert items == [{"name": key, "value": value} for key, value in expected.items()]


def test_plain_env_lists_every_variable(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("tricky", PROFILE.replace('NEWLINE = "line one\\nline two"\n', ""))
    text = show(run_cli, "env")
    assert text.startswith("NCCL_PROTO=LL\nNCCL_BUFFSIZE=16777216\nSPACES=two words\n")
    assert len(text.splitlines()) == len(TRICKY) - 1 + 2 + 4  # [env], [nccl], the markers


# Hostile values: each comes back as exactly one value, or the format refuses it (exit 2).

HOSTILE = {
    "NEWLINE_INJECT": "x\nEVIL_NL=1",
    "CR_INJECT": "x\rExecStartPre=/nonexistent/evil-cr\r#",
    "QUOTE_INJECT": "x'\nEVIL_Q='1",
    "DQUOTE_INJECT": 'x"\nExecStartPre=/nonexistent/evil-dq\n#"',
    "CRLF": "a\r\nb",
    "ESCAPES": "\x1b[2J\x07 tab\t end\x0b\x0c\x08",
    "DEL": "rub\x7fout",
    "TRAILING_BACKSLASH": "x\\",
    "BACKSLASH_NEWLINE": "x\\\ny",
    "SPECIFIERS": "%n %% %i",
    "SHELL": "$EVIL `id` $(id) ;id",
    "UNICODE": "a\u2028b\u0085c\u00e9",
}
# dotenv has no escape for these control characters (and click would eat an ESC sequence).
DOTENV_REFUSED = ("ESCAPES", "DEL")


def hostile_profile(values: dict[str, str]) -> str:
    lines = [f"{key} = {json.dumps(value)}\n" for key, value in values.items()]
    return 'schema = 1\nname = "hostile"\nversion = 1\n[env]\n' + "".join(lines)


def read_back_hostile(
    write_profile: WriteProfile, run_cli: RunCli, values: dict[str, str]
) -> dict[str, str]:
    """Write the hostile profile with `values`; the env (with markers) `show` says it sets."""
    write_profile("hostile", hostile_profile(values))
    shown = json.loads(run_cli("show", "hostile", "--format", "json").stdout)
    env: dict[str, str] = shown["env"] | shown["markers"]
    assert {key: env[key] for key in values} == values
    return env


@pytest.fixture
def hostile(write_profile: WriteProfile, run_cli: RunCli) -> dict[str, str]:
    return read_back_hostile(write_profile, run_cli, HOSTILE)


@pytest.fixture
def dotenv_hostile(write_profile: WriteProfile, run_cli: RunCli) -> dict[str, str]:
    """The hostile values dotenv can hold."""
    values = {key: value for key, value in HOSTILE.items() if key not in DOTENV_REFUSED}
    return read_back_hostile(write_profile, run_cli, values)


def export(fmt: str, tmp_path: Path) -> Path:
    """`show hostile --format FMT > FILE`, byte for byte (no newline translation)."""
    command = [console_script(), "show", "hostile", "--format", fmt]
    done = subprocess.run(command, capture_output=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    path = tmp_path / f"hostile.{fmt}"
    path.write_bytes(done.stdout)
    return path


def test_plain_env_refuses_a_value_that_would_add_a_line(
    hostile: dict[str, str], run_cli: RunCli
) -> None:
    result = run_cli("show", "hostile", "--format", "env")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "nccl-launch: NEWLINE_INJECT: the value holds the control character '\\n', which "
        "--format env cannot hold; use --format shell, dotenv, systemd-env, k8s or json\n"
    )


def test_dotenv_reads_back_hostile_values_one_line_each(
    dotenv_hostile: dict[str, str], tmp_path: Path
) -> None:
    path = export("dotenv", tmp_path)
    text = path.read_text()
    assert len(text.split("\n")) == len(dotenv_hostile) + 1  # one line each, for line readers
    assert dict(dotenv_values(stream=io.StringIO(text))) == dotenv_hostile


def test_dotenv_refuses_control_characters_it_cannot_escape(
    hostile: dict[str, str], run_cli: RunCli
) -> None:
    result = run_cli("show", "hostile", "--format", "dotenv")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "nccl-launch: ESCAPES: the value holds the control character '\\x1b', which "
        "--format dotenv cannot hold; use --format shell, systemd-env, k8s or json\n"
    )


def test_run_env_file_reads_the_dotenv_export_back(
    dotenv_hostile: dict[str, str], write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path
) -> None:
    path = export("dotenv", tmp_path)
    write_profile("empty", 'schema = 1\nname = "empty"\nversion = 1\n')
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    result = nccl_launch("run", "empty", "--env-file", str(path), "--", sys.executable, "-c", dump)
    assert result.returncode == 0, result.stderr
    child = json.loads(result.stdout)
    declared = {key: value for key, value in dotenv_hostile.items() if key in HOSTILE}
    assert {key: child[key] for key in declared} == declared


@pytest.mark.parametrize("sh", ["bash", "dash"])
def test_shells_source_hostile_values_exactly(
    hostile: dict[str, str], run_cli: RunCli, tmp_path: Path, sh: str
) -> None:
    path = export("shell", tmp_path)
    done = subprocess.run([sh, "-c", f". {path} && env -0"], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, check=True, timeout=120)  # fmt: skip
    sourced = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if item)
    assert {key: sourced[key] for key in hostile} == hostile
    assert not {"EVIL_NL", "EVIL_Q"} & set(sourced)


def test_systemd_reads_hostile_environment_lines_as_one_assignment_each(
    hostile: dict[str, str], run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    lines = export("systemd-env", tmp_path).read_text().removesuffix("\n").split("\n")
    assert len(lines) == len(hostile)
    assert all(line.startswith('Environment="') and line.endswith('"') for line in lines)
    assert 'Environment="NEWLINE_INJECT=x\\nEVIL_NL=1"' in lines
    assert 'Environment="ESCAPES=\\x1b[2J\\x07 tab\\t end\\x0b\\x0c\\x08"' in lines
    assert 'Environment="SPECIFIERS=%%n %%%% %%i"' in lines
    unit = tmp_path / "hostile.service"
    body = "[Unit]\nDescription=t\n\n[Service]\nType=exec\n{env}\nExecStart=/bin/true\n"
    unit.write_text(body.format(env="\n".join(lines)))
    done = subprocess.run(
        [systemd_analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    # The same check sees a value that escapes its line: the canary ExecStartPre= is read.
    raw = 'Environment="CR_INJECT=x\rExecStartPre=/nonexistent/evil-cr\r#"'
    unit.write_text(body.format(env=raw))
    done = subprocess.run(
        [systemd_analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120
    )
    assert "/nonexistent/evil-cr" in done.stderr


def test_k8s_reads_back_hostile_values_as_json_and_printable_yaml(
    hostile: dict[str, str], run_cli: RunCli, tmp_path: Path
) -> None:
    text = export("k8s", tmp_path).read_text()
    assert json.loads(text) == [{"name": key, "value": value} for key, value in hostile.items()]
    # YAML reads only printable characters raw (its c-printable); the rest must be escaped.
    assert all(char in "\t\n" or " " <= char <= "~" for char in text)


@pytest.mark.parametrize("fmt", ["env", "dotenv", "shell", "systemd-env", "k8s"])
def test_every_format_refuses_a_nul(write_profile: WriteProfile, run_cli: RunCli, fmt: str) -> None:
    write_profile("nul", 'schema = 1\nname = "nul"\nversion = 1\n[env]\nWITH_NUL = "a\\u0000b"\n')
    result = run_cli("show", "nul", "--format", fmt)
    assert (result.returncode, result.stdout) == (2, "")
    assert "WITH_NUL" in result.stderr
    assert "Traceback" not in result.stderr


# The systemd unit.

SERVER = """
schema = 1
name = "served"
version = 2
description = "Kimi-K2.5 at 100% on 8 GPUs"
[server]
python = "{python}"
model_path = "/models/Kimi-K2.5"
tp_size = 8
cwd = "/srv/my models"
"""


def test_systemd_unit_passes_systemd_analyze(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    path = write_profile("served", SERVER.format(python=sys.executable))
    result = run_cli("systemd", "served", "--user", "root")
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    lines = unit.splitlines()
    assert "Type=exec" in lines
    assert "User=root" in lines
    assert "WorkingDirectory=/srv/my models" in lines
    digest = json.loads(run_cli("show", "served", "--format", "json").stdout)["digest"]
    pinned = f"{path} --digest {digest}"
    assert any(
        line.startswith("ExecStartPre=") and line.endswith(f"preflight {pinned}") for line in lines
    )
    assert any(
        line.startswith("ExecStart=") and line.endswith(f"run --nccl-debug {pinned}")
        for line in lines
    )
    assert "Description=Kimi-K2.5 at 100%% on 8 GPUs (served@2)" in lines
    assert {"TimeoutStartSec=1800", "Restart=on-failure", "KillMode=mixed"} <= set(lines)
    # a server that fails at once stops after 5 starts in 10 minutes, not every 30 s forever
    unit_section = lines[lines.index("[Unit]") : lines.index("[Service]")]
    assert {"StartLimitIntervalSec=600", "StartLimitBurst=5"} <= set(unit_section)
    target = tmp_path / "units" / "sglang-served.service"
    written = run_cli("systemd", "served", "--output", str(target))
    assert written.returncode == 0
    done = subprocess.run(
        [systemd_analyze, "verify", str(target)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    again = run_cli("systemd", "served", "--output", str(target))
    assert (again.returncode, again.stderr) == (
        2,
        f"nccl-launch: {target} exists; pass --force to replace it\n",
    )


def test_the_servers_arguments_end_both_exec_lines_and_only_references_hold_credentials(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    """`systemd PROFILE -- ARGS`: each `${NAME}` is left for systemd to fill from the env
    file, every other `$` and a lone `;` (systemd's command separator) are escaped, and
    systemd-analyze reads one command; a credential written out is refused."""
    path = write_profile(
        "served", 'env_files = ["served.env"]\n' + SERVER.format(python=sys.executable)
    )
    path.with_name("served.env").write_text("API_KEY=sk-live-1\n")
    target = tmp_path / "sglang-served.service"
    args = ["--api-key", "${API_KEY}", "--served-model-name", "a$b c", ";", "--log-level", "debug",
            "--otlp-traces-endpoint", "https://u:${API_KEY}@otel:4317"]  # fmt: skip
    result = run_cli("systemd", "served", "-o", str(target), "--", *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    tail = (' -- --api-key "${API_KEY}" --served-model-name "a$$b c" ";" --log-level debug '
            '--otlp-traces-endpoint "https://u:${API_KEY}@otel:4317"')  # fmt: skip
    lines = target.read_text().splitlines()
    for command in ("ExecStartPre=", "ExecStart="):
        [line] = [line for line in lines if line.startswith(command)]
        assert line.endswith(tail)
    done = subprocess.run(
        [systemd_analyze, "verify", str(target)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    typo = run_cli("systemd", "served", "--", "--api-key", "${API_KEYS}")
    assert typo.returncode == 0
    assert typo.stderr == (
        f"nccl-launch: warning: -- ARGS: ${{API_KEYS}} is set by none of the profile's env files "
        f"({path.with_name('served.env')}), so unless the unit's environment has it, systemd "
        "passes an empty argument; write API_KEYS=VALUE in one of them\n"
    )
    target.unlink()
    refusals = {
        ("--api-key", "sk-live-1"): "-- ARGS: a credential would be written into the unit",
        ("--api-k=sk-${API_KEY}",): "-- ARGS: a credential would be written into the unit",
        # What every printed argv masks: a URL's password, a password= pair, a flag and its
        # value in one word (SGLang's error shows it).
        ("--otlp-traces-endpoint", "https://u:hunter2@otel:4317"): "-- ARGS: a credential",
        ("--x=password=hunter2&tls=1",): "-- ARGS: a credential",
        ("--api-key sk-live-1",): "-- ARGS: a credential",
        ("--log-level", "a\nExecStartPost=/bin/evil"): "-- ARGS: argument 2: holds the control",
        ("--tp", "4"): "-- ARGS: --tp repeats the field tp_size",
        ("--api-key", ""): "-- ARGS: --api-key's value is empty, which SGLang takes as no key",
        ("--admin-api=",): "-- ARGS: --admin-api's value is empty",
        # `-- --api-key ${API_KEY}` unquoted in a shell where it is unset: the word is gone.
        ("--api-key",): "-- ARGS: --api-key has no value (another option follows, or nothing)",
        ("--api-key", "--log-level", "info"): "-- ARGS: --api-key has no value",
    }
    typed = run_cli("systemd", "served", "--api-key", "sk-live-1")  # before '--': a hint
    assert typed.returncode == 2
    assert typed.stderr.splitlines()[-1].endswith(
        "nccl-launch systemd PROFILE -- --api-key '${API_KEY}'"
    )
    for words, refusal in refusals.items():
        refused = run_cli("systemd", "served", "-o", str(target), "--", *words)
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"nccl-launch: {refusal}"), refused.stderr
        assert not target.exists()


def test_a_reference_set_only_by_an_export_line_reaches_systemd_empty(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """systemd's EnvironmentFile= reads `export API_KEY=...` as a variable named
    `export API_KEY` (and drops it), so `${API_KEY}` gives SGLang `--api-key ''`: no key."""
    path = write_profile(
        "served", 'env_files = ["served.env"]\n' + SERVER.format(python=sys.executable)
    )
    path.with_name("served.env").write_text("# sourced by bash too\nexport API_KEY=sk-live-1\n")
    result = run_cli("systemd", "served", "--", "--api-key", "${API_KEY}")
    assert result.returncode == 0
    assert result.stderr == (
        f"nccl-launch: warning: ${{API_KEY}}: {path.with_name('served.env')}:2 sets it with "
        "'export', which systemd's EnvironmentFile= does not read; write API_KEY=VALUE there, "
        "or systemd passes an empty argument\n"
    )
    # A later plain line sets it for systemd.
    path.with_name("served.env").write_text("export API_KEY=sk-1\nAPI_KEY=sk-live-1\n")
    result = run_cli("systemd", "served", "--", "--api-key", "${API_KEY}")
    assert (result.returncode, result.stderr) == (0, "")


def test_an_env_file_value_systemd_may_read_otherwise_is_named_when_the_unit_is_written(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """systemd's EnvironmentFile= and run's dotenv reader part ways on backslashes, `$` in
    double quotes and comments after a value; the unit's run would then refuse the value as
    drift. Such a line is named, never its value; plain and quoted-plain ones are not."""
    path = write_profile(
        "served", 'env_files = ["served.env"]\n' + SERVER.format(python=sys.executable)
    )
    env_file = path.with_name("served.env")
    env_file.write_text(
        '# keys\n\nA=plain/x:1\nB=\'single q\'\nC = "double q"\nD=a\\ b\nE="x\\$y"\n'
        "F=abc # note\nexport G=x\n"
    )
    result = run_cli("systemd", "served")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"nccl-launch: warning: {env_file}:{line}: {key}: systemd's EnvironmentFile= may read "
        "this value otherwise than run does (quotes, blanks, backslashes, $), and the unit's "
        "run would refuse the difference as drift; write it plainly or in single quotes"
        for line, key in ((6, "D"), (7, "E"), (8, "F"))
    ]
    assert "x\\$y" not in result.stderr and "abc" not in result.stderr
    env_file.write_text("A=1\nthis is junk\n")  # what run would refuse at every start
    result = run_cli("systemd", "served")
    assert (result.returncode, result.stdout) == (3, "")
    assert f"env_files: {env_file}:2: not a KEY=VALUE line" in result.stderr
    assert result.stderr == run_cli("run", "--dry-run", "served").stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_file_the_services_user_may_not_read_is_named_when_the_unit_is_written(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """convert writes secrets 0600 for whoever ran it: under User= the unit would fail at
    every start. Named with the fix; once the user owns it, root says only that it cannot
    check its values, not to give it back to root."""
    path = write_profile(
        "served", 'env_files = ["served.env"]\n' + SERVER.format(python=sys.executable)
    )
    env_file = path.with_name("served.env")
    env_file.write_text("HF_TOKEN=hf_x\n")
    env_file.chmod(0o600)
    result = run_cli("systemd", "served", "--user", "nobody")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"nccl-launch: warning: {env_file}: User=nobody may not read it (mode 0600, uid 0), so "
        "the unit's preflight and run would fail at start; chown nobody, or chgrp its group "
        "and chmod 0640\n"
    )
    assert run_cli("systemd", "served", "--user", "root").stderr == ""
    os.chown(env_file, pwd.getpwnam("nobody").pw_uid, -1)
    env_file.write_text("HF_TOKEN=hf x\n")  # read, not run: root still checks its values
    result = run_cli("systemd", "served", "--user", "nobody")
    assert result.stderr == (
        f"nccl-launch: warning: {env_file}:1: HF_TOKEN: systemd's EnvironmentFile= may read "
        "this value otherwise than run does (quotes, blanks, backslashes, $), and the unit's "
        "run would refuse the difference as drift; write it plainly or in single quotes\n"
    )
    env_file.unlink()
    result = run_cli("systemd", "served", "--user", "nobody")
    assert result.stderr == (
        "nccl-launch: warning: env_files: their values are not checked here: this user cannot "
        f"read {env_file}\n"
    )


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("NCCL_PROTO=LL", "NCCL_PROTO: NCCL variables belong in [nccl], validated: PROTO = 'LL'"),
        ("A.B=1", "A.B: not a valid environment variable name"),
        ("HF_HOME=/b", "HF_HOME: the profile declares it too; keep it in one place"),
    ],
)
def test_systemd_refuses_an_env_file_run_would_refuse_at_every_start(
    line: str, said: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """The unit's own run would fail at every start: said before anything is written."""
    (tmp_path / "e.env").write_text(f"{line}\n")
    (tmp_path / "e.env").chmod(0o600)
    text = SERVER.format(python=sys.executable).replace(
        "[server]", '[env]\nHF_HOME = "/a"\n[server]'
    )
    write_profile("served", f'env_files = ["{tmp_path / "e.env"}"]\n{text}')
    unit = tmp_path / "sglang.service"
    refused = run_cli("systemd", "served", "-o", str(unit))
    run = run_cli("run", "--dry-run", "served")
    assert (refused.returncode, run.returncode) == (3, 3), refused.stdout + refused.stderr
    assert said in refused.stderr
    assert refused.stderr == run.stderr
    assert not unit.exists()


def test_the_units_description_is_masked_as_show_masks_it(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    text = SERVER.format(python=sys.executable).replace(
        "Kimi-K2.5 at 100% on 8 GPUs", "db postgres://u:descpw11@h/x password=descpw22"
    )
    write_profile("served", text)
    result = run_cli("systemd", "served")
    assert result.returncode == 0, result.stderr
    assert "descpw" not in result.stdout + result.stderr
    assert "Description=db postgres://***@h/x password=*** (served@2)\n" in result.stdout


def test_the_hint_after_writing_a_unit_says_how_systemd_gets_to_read_it(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("served", SERVER.format(python=sys.executable))
    scratch = tmp_path / "scratch" / "sglang.service"
    written = run_cli("systemd", "served", "-o", str(scratch))
    assert (written.returncode, written.stdout) == (
        0,
        f"wrote {scratch}; systemd does not read {scratch.parent}: install -m 0644 {scratch} "
        "/etc/systemd/system/ && systemctl daemon-reload && "
        "systemctl enable --now sglang.service\n",
    )
    user = Path.home() / ".config" / "systemd" / "user" / "sglang.service"  # HOME is tmp_path
    written = run_cli("systemd", "served", "-o", str(user))
    assert written.stdout == (
        f"wrote {user}; then: systemctl --user daemon-reload && "
        "systemctl --user enable --now sglang.service\n"
    )


@pytest.mark.parametrize(
    ("path", "manager"),
    [
        ("/etc/systemd/system/sglang.service", "system"),
        ("/run/systemd/system/sglang.service", "system"),
        ("/usr/lib/systemd/system/sglang.service", "system"),
        ("/lib/systemd/system/sglang.service", "system"),
        ("/etc/systemd/system/../system/sglang.service", "system"),
        ("/etc/systemd/user/sglang.service", "user"),
        ("/etc/systemd/sglang.service", None),
        ("/tmp/units/sglang.service", None),
        ("sglang.service", None),
    ],
)
def test_the_folders_systemd_reads_units_from(path: str, manager: str | None) -> None:
    assert unit_manager(Path(path)) == manager


def unit_arguments(unit: str, key: str) -> list[str]:
    """The arguments after the launcher of the unit's `key=` line, as systemd splits them."""
    line = next(line for line in unit.splitlines() if line.startswith(f"{key}="))
    words = shlex.split(line.removeprefix(f"{key}="))
    return words[next(i for i, word in enumerate(words) if word in ("run", "preflight")) :]


@pytest.mark.parametrize(
    ("key", "extra"), [("ExecStart", ["--dry-run"]), ("ExecStartPre", ["--skip", "gpus"])]
)
def test_a_unit_refuses_the_profile_edited_after_it_was_written(
    write_profile: WriteProfile, run_cli: RunCli, key: str, extra: list[str]
) -> None:
    path = write_profile("served", SERVER.format(python=sys.executable))
    unit = run_cli("systemd", "served").stdout
    written = json.loads(run_cli("show", "served", "--format", "json").stdout)["digest"]
    # A "quick test" left behind, the version not bumped: the file and a restart would agree.
    write_profile("served", SERVER.format(python=sys.executable) + "[nccl]\nPROTO = 'Simple'\n")
    edited = json.loads(run_cli("show", "served", "--format", "json").stdout)["digest"]
    result = run_cli(*unit_arguments(unit, key), *extra)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"nccl-launch: profile served@2 ({path}) is {edited} but --digest pins {written}: the "
        f"file changed since the pin was taken; review it (nccl-launch show {path}), then "
        f"regenerate the unit (nccl-launch systemd {path}) or pass --digest {edited}\n"
    )
    accepted = run_cli(*unit_arguments(unit, key)[:-1], edited, *extra)
    assert "--digest pins" not in accepted.stderr
    assert accepted.returncode == (0 if key == "ExecStart" else 3), accepted.stderr


def test_a_unit_without_a_pin_runs_the_file_as_it_is(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("served", SERVER.format(python=sys.executable))
    unit = run_cli("systemd", "served", "--no-pin").stdout
    assert "--digest" not in unit
    assert unit_arguments(unit, "ExecStart") == ["run", "--nccl-debug", str(path)]


def test_the_units_run_writes_nccls_log_per_process_unless_told_or_the_profile_logs(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("served", SERVER.format(python=sys.executable))
    unit = run_cli("systemd", "served", "--no-pin", "--no-nccl-debug").stdout
    assert unit_arguments(unit, "ExecStart") == ["run", str(path)]
    path.write_text(path.read_text() + '[nccl]\nDEBUG = "WARN"\n')
    unit = run_cli("systemd", "served", "--no-pin").stdout  # run would refuse --nccl-debug
    assert unit_arguments(unit, "ExecStart") == ["run", str(path)]


@pytest.mark.parametrize("digest", ["sha256:731d3350", "SHA256:" + "a" * 64, "a" * 64, ""])
def test_a_pin_is_a_whole_digest(write_profile: WriteProfile, run_cli: RunCli, digest: str) -> None:
    write_profile("served", SERVER.format(python=sys.executable))
    result = run_cli("run", "--dry-run", "served", "--digest", digest)
    assert result.returncode == 2
    assert f"Invalid value for '--digest': {digest!r} is not a whole digest" in result.stderr


def test_systemd_needs_a_server_table(write_profile: WriteProfile, run_cli: RunCli) -> None:
    write_profile("env-only", 'schema = 1\nname = "env-only"\nversion = 1\n')
    result = run_cli("systemd", "env-only")
    assert result.returncode == 2
    assert "no [server] table, so no server to run as a service" in result.stderr


DESCRIPTION = 'description = "Kimi-K2.5 at 100% on 8 GPUs"'
CWD = 'cwd = "/srv/my models"'
HOSTILE_UNIT = {
    "description": (DESCRIPTION, 'description = "x\\n[Service]\\nExecStartPre=/nonexistent/evil"',
                    "description: holds the control character '\\n'"),
    "cwd-newline": (CWD, 'cwd = "/srv\\nExecStartPre=/nonexistent/evil"',
                    "server.cwd: holds the control character '\\n'"),
    "cwd-cr": (CWD, 'cwd = "/srv\\rExecStartPre=/nonexistent/evil"',
               "server.cwd: holds the control character '\\r'"),
    "cwd-backslash": (CWD, 'cwd = "/srv\\\\"',
                      "server.cwd: ends in a backslash, which joins the unit's next line to it"),
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE_UNIT)
def test_systemd_refuses_what_would_become_unit_structure(
    write_profile: WriteProfile, run_cli: RunCli, case: str
) -> None:
    line, hostile_line, message = HOSTILE_UNIT[case]
    text = SERVER.format(python=sys.executable).replace(line, hostile_line)
    write_profile("served", text)
    result = run_cli("systemd", "served")
    assert (result.returncode, result.stdout) == (2, "")
    # The profile's validation refuses control characters in `cwd` before the unit is built
    # (a line of its own, no prefix); the unit writer refuses the rest (prefixed).
    assert f"profiles/served.toml: {message}" in result.stderr.splitlines()[0]


# What `run` reads as a directory relative to where it starts, or as a path that systemd
# refuses or reads otherwise: `-` (ignore a missing one) and `~` (the user's home) are its own.
@pytest.mark.parametrize(
    "cwd", ["models", "./models", "-/srv/models", "~", "~/models", " /srv/models", "/srv/a/../b"]
)
def test_systemd_refuses_a_cwd_it_would_not_start_in_as_run_does(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, cwd: str
) -> None:
    write_profile("served", SERVER.format(python=sys.executable).replace(CWD, f"cwd = {cwd!r}"))
    result = run_cli("systemd", "served", "--output", str(tmp_path / "served.service"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (  # the profile's to fix: its line starts with its file
        f"profiles/served.toml: server.cwd: {cwd!r} is not an absolute path "
        "without '..', which systemd's WorkingDirectory= needs to start the unit; write the "
        "directory's absolute path\n"
    )
    assert not (tmp_path / "served.service").exists()


def test_systemd_writes_an_absolute_cwd_literally_and_refuses_a_trailing_blank(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    text = SERVER.format(python=sys.executable).replace(CWD, "cwd = '/srv/50%/./-x'")
    write_profile("served", text)
    target = tmp_path / "served.service"
    assert run_cli("systemd", "served", "--output", str(target)).returncode == 0
    assert "WorkingDirectory=/srv/50%%/./-x" in target.read_text().splitlines()
    done = subprocess.run(
        [systemd_analyze, "verify", str(target)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    write_profile("served", text.replace("-x'", "-x '"))
    result = run_cli("systemd", "served")
    assert (result.returncode, result.stderr) == (
        2,
        "profiles/served.toml: server.cwd: ends in a blank, which systemd drops\n",
    )


# systemd refuses a uid of (uid_t) -1, 65535 (a 16-bit -1) or more, and the unit then never
# starts: systemd-analyze verify says "Invalid user/group name or numeric ID" of each.
@pytest.mark.parametrize(
    "user",
    ["root\nExecStartPre=/nonexistent/evil", "", "-root", "a b", "%i",
     "4294967295", "65535", "99999999999999999999", "9" * 5000],
)  # fmt: skip
def test_systemd_refuses_a_user_that_is_no_user_name(
    write_profile: WriteProfile, run_cli: RunCli, user: str
) -> None:
    write_profile("served", SERVER.format(python=sys.executable))
    result = run_cli("systemd", "served", "--user", user)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"nccl-launch: --user: {user!r} is not a user name; valid:")


def test_systemd_says_every_problem_of_its_input_at_once(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """What the unit cannot hold and what run would refuse at every start, one line each;
    exit 2: the profile or the command line must change."""
    write_profile("served", SERVER.format(python=sys.executable).replace(CWD, 'cwd = "srv"'))
    args = ["--", "--api-key", "sk-live-1", "--log-level", "a\nb", "--tp", "4"]
    result = run_cli("systemd", "served", "--user", "-root", *args)
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        ["nccl-launch", "--user"],
        ["profiles/served.toml", "server.cwd"],
        ["nccl-launch", "-- ARGS"],
        ["nccl-launch", "-- ARGS"],
        ["nccl-launch", "-- ARGS"],
    ]
    assert "argument 4: holds the control character '\\n'" in lines[2]
    assert "a credential would be written into the unit" in lines[3]
    assert "--tp repeats the field tp_size" in lines[4]


def test_systemd_takes_the_highest_uid_systemd_takes(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("served", SERVER.format(python=sys.executable))
    result = run_cli("systemd", "served", "--user", "4294967294")
    assert result.returncode == 0, result.stderr
    assert "\nUser=4294967294\n" in result.stdout


def test_systemd_refuses_a_profile_path_with_a_line_break(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    path = write_profile("served", SERVER.format(python=sys.executable),
                         folder="units\nExecStartPre=/nonexistent")  # fmt: skip
    result = run_cli("systemd", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    assert "the profile's path: holds the control character '\\n'" in result.stderr


def test_systemd_refuses_a_byte_that_is_not_utf8(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """A byte that is not UTF-8 (`$'\\xff'`) reaches Python as a lone surrogate: it could not
    be written (an internal error), and systemd ignores a line that is not UTF-8."""
    write_profile("served", SERVER.format(python=sys.executable))
    target = tmp_path / "served.service"
    result = run_cli("systemd", "served", "-o", str(target), "--", "--log-level", "a\udcffb")
    assert (result.returncode, result.stderr) == (
        2,
        "nccl-launch: -- ARGS: argument 2: holds the byte \\xff, which is not UTF-8; systemd "
        "ignores a unit line that is not UTF-8 text\n",
    )
    path = write_profile("served", SERVER.format(python=sys.executable), folder="units\udcff")
    result = run_cli("systemd", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    assert "the profile's path: holds the byte \\xff, which is not UTF-8" in result.stderr
    assert not target.exists()


def test_systemd_keeps_a_hostile_but_printable_description_on_its_line(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    description = 'Kimi "quoted" $HOME ${X} `id` %n \\\\n [Service] ExecStartPre=/bin/true \u00e9'
    text = SERVER.format(python=sys.executable)
    text = text.replace(DESCRIPTION, f"description = {json.dumps(description)}")
    write_profile("served", text)
    target = tmp_path / "served.service"
    result = run_cli("systemd", "served", "--user", "sglang-1", "--output", str(target))
    assert result.returncode == 0, result.stderr
    lines = target.read_text().split("\n")
    assert f"Description={description.replace('%', '%%')} (served@2)" in lines
    assert sum(line.startswith("ExecStartPre=") for line in lines) == 1
    assert "User=sglang-1" in lines
    done = subprocess.run(
        [systemd_analyze, "verify", str(target)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, "")
    assert "Description" not in done.stderr


def test_a_unit_names_the_profiles_env_files_and_runs_with_what_systemd_reads(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    text = SERVER.format(python=sys.executable).replace(
        "[server]", 'env_files = ["kimi.env", "../shared/site.env"]\n[server]'
    )
    write_profile("served", text, folder="my units%")
    (tmp_path / "my units%" / "kimi.env").write_text("HF_TOKEN=hf_unit\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "site.env").write_text("HF_HOME=/cache\n")
    target = tmp_path / "served.service"
    result = run_cli("systemd", str(tmp_path / "my units%" / "served.toml"), "-o", str(target))
    assert result.returncode == 0, result.stderr
    unit = target.read_text()
    files = [line for line in unit.splitlines() if line.startswith("EnvironmentFile=")]
    # Absolute, normalized (systemd ignores a path with `..`), `%` doubled (a specifier).
    assert files == [
        f"EnvironmentFile={tmp_path}/my units%%/kimi.env",
        f"EnvironmentFile={tmp_path}/shared/site.env",
    ]
    done = subprocess.run(
        [systemd_analyze, "verify", str(target)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    # ExecStart= with the environment systemd gives it from those files: no drift.
    env: dict[str, str] = {}
    for line in files:
        values = dotenv_values(line.removeprefix("EnvironmentFile=").replace("%%", "%"))
        env |= {key: value or "" for key, value in values.items()}
    words = [word.replace("%%", "%") for word in unit_arguments(unit, "ExecStart")]
    result = run_cli(*words, "--dry-run", env=env)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
def test_systemd_names_no_env_file_another_user_could_write_or_create(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """systemd reads EnvironmentFile= as root at every start and gives it to nccl-launch
    itself (PYTHONPATH, LD_PRELOAD shape its Python before its run judges any file): a file
    another user wrote, or one absent where another user could create it, is refused; the
    service's own User= may own it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky, as /tmp: anyone may create a new name there
    env_file = shared / "e.env"
    write_profile("served", f'env_files = ["{env_file}"]\n{SERVER.format(python=sys.executable)}')
    unit = tmp_path / "sglang.service"
    absent = run_cli("systemd", "served", "-o", str(unit))
    assert (absent.returncode, absent.stderr) == (
        3,
        f"nccl-launch: profiles/served.toml: env_files: env file {env_file}: absent, and systemd "
        f"(EnvironmentFile=) reads it later: {shared} (uid 0, mode 1777) lets another user "
        "create it first; point it at a folder root alone writes, or create the file (root's, "
        "mode 0644)\n",
    )
    env_file.write_text("HF_HUB_OFFLINE=1\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(env_file, nobody, nobody)
    theirs = run_cli("systemd", "served", "-o", str(unit))
    assert theirs.returncode == 3
    assert f"env file {env_file}: owned by uid {nobody}, not root;" in theirs.stderr
    assert not unit.exists()
    assert run_cli("systemd", "served", "--user", "nobody", "-o", str(unit)).returncode == 0
