"""`${NAME}` in a profile's [server] args, filled at start from the profile's env files: the
server gets the value as one argument, every command shows the reference, no digest moves
when the value does, and no byte nccl-launch writes holds the value."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import PROFILE, Server, free_port

# Blanks, quotes, `$` and a reference of its own: filled once, as one word, never again.
KEY = """sk-live 1234 $HOME "q" ${API_KEY} $$"""
ENV_LINE = f"API_KEY='{KEY}'\n"  # single quotes: python-dotenv takes it as it is
# The server's own argv, printed as JSON: what exec gave it.
PRINTS_ARGV = """-c 'import json, sys; print(json.dumps(sys.argv[1:]))'"""

KEYED = """
schema = 1
name = "keyed"
version = 1
env_files = ["secrets.env"]
[nccl]
PROTO = "LL"
[server]
python = "{python}"
entrypoint = "{entrypoint}"
model_path = "/models/m"
args = ["--api-key", "${{API_KEY}}", "--note=a$$b:${{API_KEY}}"]
"""


def keyed(write_profile: WriteProfile, entrypoint: str = "-m sglang.launch_server") -> Path:
    """The profile `keyed` and its 0600 env file, which holds KEY."""
    text = KEYED.format(python=sys.executable, entrypoint=entrypoint.replace('"', '\\"'))
    path = write_profile("keyed", text)
    secrets = path.parent / "secrets.env"
    secrets.write_text(ENV_LINE)
    secrets.chmod(0o600)
    return path


def test_the_server_gets_the_env_files_value_as_one_argument(
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    keyed(write_profile, PRINTS_ARGV)
    result = nccl_launch("run", "keyed")
    assert result.returncode == 0, result.stderr
    argv = json.loads(result.stdout)
    assert argv[-3:] == ["--api-key", KEY, f"--note=a$b:{KEY}"]
    assert KEY not in result.stderr


def test_every_view_shows_the_reference_and_rotating_the_key_changes_no_digest(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    path = keyed(write_profile)
    shown = run_cli("show", "keyed", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    digest = json.loads(shown.stdout)["digest"]
    assert json.loads(shown.stdout)["argv"][-3:-1] == ["--api-key", "${API_KEY}"]
    views = [
        run_cli("validate", "keyed"),
        run_cli("show", "keyed"),
        run_cli("run", "keyed", "--dry-run"),
        run_cli("preflight", "keyed", "--skip", "sglang", "--format", "json"),
    ]
    assert [view.returncode for view in views[:3]] == [0, 0, 0], [v.stderr for v in views]
    assert json.loads(views[3].stdout)["argv"][-3:-1] == ["--api-key", "${API_KEY}"]
    assert "--api-key '${API_KEY}'" in views[2].stdout
    assert all(KEY not in view.stdout + view.stderr for view in views)
    copy = path.with_name("keyed-2.toml")
    copy.write_text(path.read_text().replace("version = 1", "version = 2"))
    diff = run_cli("diff", "keyed@1", "keyed@2")
    assert KEY not in diff.stdout + diff.stderr
    (path.parent / "secrets.env").write_text("API_KEY=rotated\n")
    after = run_cli("show", "keyed", "--format", "json")
    assert json.loads(after.stdout)["digest"] == digest


@pytest.mark.parametrize(
    "command", [["run", "--dry-run"], ["preflight", "--skip", "sglang"], ["systemd"]]
)
def test_a_name_no_env_file_sets_is_refused_naming_the_files_looked_in(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = keyed(write_profile)
    (path.parent / "secrets.env").write_text("OTHER=1\n")
    result = run_cli(*command, "keyed")
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"nccl-launch: {Path('profiles/keyed.toml')}: server.args: ${{API_KEY}} is set by none "
        f"of the profile's env files ({path.parent / 'secrets.env'}); write API_KEY=VALUE in "
        "one of them, or name the file that holds it in secret_files\n"
    )


@pytest.mark.parametrize(
    "command", [["run", "--dry-run"], ["preflight", "--skip", "sglang"], ["systemd"]]
)
def test_a_key_its_env_file_sets_empty_is_refused_naming_the_file(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """SGLang takes `--api-key ''` as no key and serves every request."""
    path = keyed(write_profile)
    (path.parent / "secrets.env").write_text("API_KEY=\n")
    result = run_cli(*command, "keyed")
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"nccl-launch: {Path('profiles/keyed.toml')}: server.args: --api-key's ${{API_KEY}} is "
        f"empty in env file {path.parent / 'secrets.env'}, which SGLang takes as no key (every "
        "request served); write the key there\n"
    )


@pytest.mark.parametrize(
    "command", [["run", "--dry-run"], ["preflight", "--skip", "sglang"], ["systemd"]]
)
def test_every_error_is_said_at_once_with_the_exit_code_of_whose_problem_it_is(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """This host's env file gives the key empty (exit 3 alone), and the command line repeats a
    field of the profile (the command's to fix): both are said, and the exit is 2."""
    path = keyed(write_profile)
    (path.parent / "secrets.env").write_text("API_KEY=\n")
    empty = (
        f"nccl-launch: {Path('profiles/keyed.toml')}: server.args: --api-key's ${{API_KEY}} is "
        f"empty in env file {path.parent / 'secrets.env'}, which SGLang takes as no key (every "
        "request served); write the key there"
    )
    alone = run_cli(*command, "keyed")
    assert (alone.returncode, alone.stderr.splitlines()) == (3, [empty])
    both = run_cli(*command, "keyed", "--", "--tp-size", "2", "--api-key", "")
    assert (both.returncode, both.stdout) == (2, "")
    assert both.stderr.splitlines() == [
        empty,
        "nccl-launch: -- ARGS: --tp-size repeats the field tp_size, which `--` cannot change; "
        f"set tp_size in [server] of {Path('profiles/keyed.toml')} (or of a copy: "
        "nccl-launch new NAME --from keyed)",
        "nccl-launch: -- ARGS: --api-key's value is empty, which SGLang takes as no key "
        "(every request served); pass the key after '--' (a unit's ${NAME} that no "
        "EnvironmentFile= sets is empty)",
    ]


def test_a_reference_nothing_could_fill_is_invalid_unless_the_policy_takes_it_from_the_caller(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = keyed(write_profile)
    text = path.read_text().replace('env_files = ["secrets.env"]\n', "")
    path.write_text(text)
    invalid = run_cli("validate", "keyed")
    assert (invalid.returncode, invalid.stderr) == (
        2,
        f"{Path('profiles/keyed.toml')}: server.args: ${{API_KEY}} is set by none of the "
        "profile's env files (none); name one that sets API_KEY in env_files, or name the file "
        "that holds it in secret_files\n",
    )
    path.write_text(text + '[policy]\nenvironment_references = ["API_KEY"]\n')
    assert run_cli("validate", "keyed").returncode == 0
    unset = run_cli("run", "keyed", "--dry-run")
    assert unset.returncode == 3
    assert "is set by none of the profile's env files (none) nor the calling environment" in (
        unset.stderr
    )
    given = run_cli("run", "keyed", "--dry-run", env={"API_KEY": KEY})
    assert given.returncode == 0, given.stderr
    assert KEY not in given.stdout + given.stderr


def test_the_unit_of_a_profile_with_a_reference_needs_nothing_after_the_dashes(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    keyed(write_profile)
    unit = tmp_path / "units" / "sglang-keyed.service"
    result = run_cli("systemd", "keyed", "-o", str(unit))
    assert result.returncode == 0, result.stderr
    text = unit.read_text()
    assert KEY not in text
    assert "--api-key" not in text
    assert f"EnvironmentFile={tmp_path / 'profiles' / 'secrets.env'}" in text.splitlines()
    done = subprocess.run(
        [systemd_analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "args",
    [
        '["--api-key", "${K}"]',
        '["--api-key=${K}"]',
        '["--ssl-keyfile-passw", "x${K}"]',
        '["--url", "http://user:${K}@db/"]',
    ],
)
def test_a_reference_that_fills_a_credential_must_be_named_as_a_secret(
    args: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Masking goes by name: a key filled from `K` would be shown as `+ K "sk-..."` by
    `run --dry-run`, drift reports and `check`."""
    path = keyed(write_profile)
    path.write_text(
        path.read_text().replace('args = ["--api-key", "${API_KEY}"', f"args = {args[:-1]}")
    )
    (path.parent / "secrets.env").write_text(f"K={KEY}\n")
    result = run_cli("validate", "keyed")
    assert (result.returncode, result.stderr) == (
        2,
        f"{Path('profiles/keyed.toml')}: server.args: ${{K}} fills a credential, but masking "
        "shows a variable named K, so its value would be printed wherever the server's "
        "environment is; name it with a word ending in KEY, TOKEN, SECRET or PASSWORD "
        "(API_KEY)\n",
    )


def test_a_variable_holding_the_key_under_any_name_stays_out_of_the_profile_and_its_views(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """`--api-key "$SK"`: the key moves to the secrets file as API_KEY, and SK, which the
    script exported with the same key, goes with it rather than into [env]; the secrets
    file's values are masked whatever their names."""
    script = tmp_path / "start.sh"
    script.write_text(
        f"export SK='{KEY}'\n"
        'exec /opt/py/bin/python3 -m sglang.launch_server --model-path /m --api-key "$SK"\n'
    )
    converted = run_cli("convert", str(script), "--name", "s", "-o", str(tmp_path / "o/s.toml"))
    assert converted.returncode == 0, converted.stderr
    shown = run_cli("run", "--dry-run", str(tmp_path / "o/s.toml"))
    assert shown.returncode == 0, shown.stderr
    assert "+ SK  " in shown.stdout.replace("    ", "  ")
    printed = converted.stdout + converted.stderr + shown.stdout + shown.stderr
    assert KEY not in printed + (tmp_path / "o/s.toml").read_text()
    assert (tmp_path / "o/s.env").read_text().count(KEY) == 2


@pytest.mark.parametrize("key", ["sk-SECRETKEY-abc123xyz", "k3y"])
def test_sglangs_parser_quoting_a_filled_key_back_is_masked(
    key: str, write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    """`--api-keyy ${API_KEY}` is valid to nccl-launch (SGLang's parser judges flags), and
    SGLang answers `unrecognized arguments: --api-keyy KEY`: the filled key, however short."""
    path = keyed(write_profile)
    text = path.read_text().replace(sys.executable, sglang_python)
    # Alone in its word: a key shorter than 8 characters is masked as a word only.
    args = 'args = ["--api-keyy", "${API_KEY}"]'
    path.write_text(re.sub(r"^args = .*$", args, text, flags=re.MULTILINE))
    (path.parent / "secrets.env").write_text(f"API_KEY={key}\n")
    for form in ("text", "json"):
        result = run_cli("preflight", "keyed", "--skip", "gpus", "--format", form)
        assert result.returncode == 3, result.stdout + result.stderr
        assert "unrecognized arguments: --api-keyy ***" in result.stdout
        assert key not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("table", "line", "where"),
    [
        ("server", 'entrypoint = "-m sglang.launch_server --api-key ${API_KEY}"', "entrypoint"),
        ("server", 'model_path = "/models/${MODEL}"', "model_path"),
        ("server.speculative", 'algorithm = "NGRAM"\nsecret = "${API_KEY}"', "speculative.secret"),
    ],
)
def test_a_reference_outside_args_is_refused_as_nothing_would_fill_it(
    table: str, line: str, where: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """SGLang would get the text as written: `${API_KEY}` itself as the key."""
    path = keyed(write_profile)
    text = path.read_text()
    if table == "server":
        key = line.split(" = ")[0]
        text = re.sub(rf"^{key} = .*$", line, text, flags=re.MULTILINE)
    else:
        text += f"[{table}]\n{line}\n"
    path.write_text(text)
    result = run_cli("validate", "keyed")
    assert (result.returncode, result.stderr) == (
        2,
        f"{Path('profiles/keyed.toml')}: server: {where}: holds '${{', but only [server] args "
        'fill a ${NAME} at start; write the flag there (args = ["--api-key", "${API_KEY}"])\n',
    )


def test_a_reference_in_env_is_a_warning_that_nothing_fills_it(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = keyed(write_profile)
    path.write_text(path.read_text() + '[env]\nOPENAI_API_KEY = "${API_KEY}"\n')
    result = run_cli("validate", "keyed")
    assert result.returncode == 0, result.stderr
    assert (
        f"nccl-launch: warning: {Path('profiles/keyed.toml')}: env.OPENAI_API_KEY: holds '${{', "
        "which only [server] args fill: the server gets it as written; set OPENAI_API_KEY in an "
        'env file named in env_files instead [accept: "env.OPENAI_API_KEY reference"]'
    ) in result.stderr.splitlines()


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["preflight", "--skip", "sglang"]])
def test_a_key_after_the_dashes_no_shell_filled_is_refused(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """A unit's `-- --api-key '${API_KEY}'` typed in a shell: its quotes keep the text, which
    SGLang would take as the key (systemd fills the unit's line before run sees it)."""
    keyed(write_profile)
    result = run_cli(*command, "keyed", "--", "--admin-api-key", "${API_KEY}")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "nccl-launch: -- ARGS: --admin-api-key's value is a ${NAME} nothing filled, so SGLang "
        "would take that text as the key; refer to the key in the profile's [server] args, or "
        'give it: -- --api-key "$API_KEY"\n'
    )


# A Secret volume's file, or systemd's credential: the value alone, with the newline `echo`
# or `kubectl create secret --from-file` leaves, which `$(cat FILE)` drops.
FROM_FILE = """
schema = 1
name = "mounted"
version = 1
secret_files = {{ API_KEY = "api_key" }}
[server]
python = "{python}"
entrypoint = "{entrypoint}"
model_path = "/models/m"
args = ["--api-key", "${{API_KEY}}"]
"""


def mounted(write_profile: WriteProfile) -> Path:
    """The profile `mounted`, whose key is in the file `api_key` beside it (KEY and two
    newlines, 0600); the file's path."""
    text = FROM_FILE.format(python=sys.executable, entrypoint=PRINTS_ARGV)
    path = write_profile("mounted", text).parent / "api_key"
    path.write_text(KEY + "\n\n")
    path.chmod(0o600)
    return path


def test_a_secret_file_fills_a_reference_as_cat_reads_it_and_only_its_path_is_shown(
    write_profile: WriteProfile, run_cli: RunCli, nccl_launch: RunCli
) -> None:
    secret = mounted(write_profile)
    result = nccl_launch("run", "mounted")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[-2:] == ["--api-key", KEY]
    views = [
        run_cli("validate", "mounted"),
        run_cli("show", "mounted"),
        run_cli("run", "mounted", "--dry-run"),
        run_cli("preflight", "mounted", "--skip", "sglang", "--format", "json"),
    ]
    assert [view.returncode for view in views[:3]] == [0, 0, 0], [v.stderr for v in views]
    assert all(KEY not in view.stdout + view.stderr for view in views)
    assert 'API_KEY = "api_key"' in views[1].stdout
    # It fills the argument alone: no variable of the server's environment.
    assert "API_KEY" not in views[2].stdout.replace("'${API_KEY}'", "")
    digest = json.loads(run_cli("show", "mounted", "--format", "json").stdout)["digest"]
    secret.write_text("rotated\n")
    assert json.loads(run_cli("show", "mounted", "--format", "json").stdout)["digest"] == digest
    secret.rename(secret.with_name("key"))
    profile = secret.with_name("mounted.toml")
    text = profile.read_text().replace('"api_key"', '"key"')
    profile.with_name("mounted-2.toml").write_text(text.replace("version = 1", "version = 2"))
    diff = run_cli("diff", "mounted@1", "mounted@2")
    assert diff.returncode == 1
    assert '  ~ secret_files.API_KEY  "api_key" -> "key"' in diff.stdout.splitlines()
    profile.write_text(text)
    assert json.loads(run_cli("show", "mounted", "--format", "json").stdout)["digest"] != digest


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: path.unlink(), "cannot read: No such file or directory"),
        (lambda path: (path.unlink(), path.mkdir()), "a directory; only regular files are read"),
        (lambda path: path.write_text("k" * 65537), "larger than 65536 bytes"),
        (lambda path: path.write_bytes(b"k\x00"), "holds a NUL byte"),
    ],
)
@pytest.mark.parametrize("command", [["run", "--dry-run"], ["preflight", "--skip", "sglang"]])
def test_a_secret_file_that_holds_no_value_is_refused_naming_profile_key_and_file(
    make: Any, why: str, command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    secret = mounted(write_profile)
    make(secret)
    result = run_cli(*command, "mounted")
    assert (result.returncode, result.stdout) == (3, ""), result.stderr
    assert result.stderr.startswith(
        f"nccl-launch: {Path('profiles/mounted.toml')}: secret_files: API_KEY: "
    )
    assert why in result.stderr and str(secret) in result.stderr


def test_a_secret_file_and_an_env_file_that_both_set_a_name_are_refused(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    secret = mounted(write_profile)
    profile = secret.with_name("mounted.toml")
    text = profile.read_text().replace("version = 1\n", 'version = 1\nenv_files = ["k.env"]\n')
    profile.write_text(text)
    secret.with_name("k.env").write_text("API_KEY=other\n")
    result = run_cli("run", "--dry-run", "mounted")
    assert result.returncode == 3
    assert "secret_files: API_KEY: env file " in result.stderr
    assert result.stderr.endswith("sets it too; keep it in one place\n")


def test_every_file_of_this_host_that_fails_is_named_at_once(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """An env file with a line that is no assignment and a secret file that is missing: both
    said, so that one start tells what to fix on the host (exit 3)."""
    secret = mounted(write_profile)
    profile = secret.with_name("mounted.toml")
    text = profile.read_text().replace("version = 1\n", 'version = 1\nenv_files = ["k.env"]\n')
    profile.write_text(text)
    secret.with_name("k.env").write_text("not an assignment\n")
    secret.unlink()
    result = run_cli("run", "--dry-run", "mounted")
    assert (result.returncode, result.stdout) == (3, "")
    named = f"nccl-launch: {Path('profiles/mounted.toml')}: "
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{named}env_files: {secret.with_name('k.env')}:1: ")
    assert lines[1].startswith(f"{named}secret_files: API_KEY: ") and str(secret) in lines[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
def test_as_root_a_secret_file_others_could_write_is_refused(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    secret = mounted(write_profile)
    secret.chmod(0o666)
    result = run_cli("run", "--dry-run", "mounted")
    assert result.returncode == 3
    assert f"secret file {secret}: writable by group or others (mode 0666)" in result.stderr


@pytest.mark.parametrize(
    "command", [["run", "--dry-run"], ["preflight", "--skip", "sglang"], ["systemd"]]
)
def test_a_key_its_secret_file_holds_empty_is_refused_naming_the_file(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """A newline alone is no key: `$(cat FILE)` gives "" and SGLang serves every request."""
    secret = mounted(write_profile)
    secret.write_text("\n")
    result = run_cli(*command, "mounted")
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"nccl-launch: {Path('profiles/mounted.toml')}: server.args: --api-key's ${{API_KEY}} "
        f"is empty in secret file {secret}, which SGLang takes as no key (every request "
        "served); write the key there\n"
    )


def test_a_copy_in_another_folder_names_the_same_secret_file(
    write_profile: WriteProfile, run_cli: RunCli, nccl_launch: RunCli, tmp_path: Path
) -> None:
    """`new --from` (and tune's trial files) write the profile elsewhere: a relative path would
    name another file from there, so the copy names it by its absolute path."""
    secret = mounted(write_profile)
    result = run_cli("new", "copy", "--from", "mounted", "--dir", str(tmp_path / "elsewhere"))
    assert result.returncode == 0, result.stderr
    copy = tmp_path / "elsewhere" / "copy.toml"
    assert tomllib.loads(copy.read_text())["secret_files"] == {"API_KEY": str(secret)}
    ran = nccl_launch("run", str(copy))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)[-2:] == ["--api-key", KEY]


def test_check_expects_a_secret_files_variable_where_the_server_gets_it(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Through the console script and the stand-in: HF_TOKEN reaches every process's
    environment, and `check` reads its file as `run` did; API_KEY fills `--api-key` alone and
    is in no environment, nor expected there. No view prints either value."""
    port = free_port()
    text = PROFILE.format(version=1, python=sys.executable, port=port, buffsize="4194304")
    files = 'secret_files = {API_KEY = "key", HF_TOKEN = "token"}\n'
    text = text.replace("version = 1\n", f"version = 1\n{files}", 1)
    path = write_profile("standin", text + 'args = ["--api-key", "${API_KEY}"]\n')
    for name, value in {"key": KEY, "token": "hf-token-9z"}.items():
        (path.parent / name).write_text(value + "\n")
        (path.parent / name).chmod(0o600)
    server = Server([console_script(), "run", "standin"], {}, port)
    try:
        environments = [psutil.Process(pid).environ() for pid in server.tree]
        checked = run_cli("check", "standin", "--port", str(port))
        (path.parent / "key").write_text("rotated\n")
        rotated_key = run_cli("check", "standin", "--port", str(port))
        (path.parent / "token").write_text("rotated\n")
        drifted = run_cli("check", "standin", "--port", str(port), "--format", "json")
    finally:
        server.stop()
    assert all("API_KEY" not in env and "HF_TOKEN" in env for env in environments)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no drift in" in checked.stdout
    assert rotated_key.returncode == 0, rotated_key.stdout + rotated_key.stderr
    # The server still runs with the token it started with: drift, until it starts again.
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "HF_TOKEN" in drifted.stdout
    for output in (checked, rotated_key, drifted):
        assert KEY not in output.stdout + output.stderr
        assert "9z" not in output.stdout + output.stderr
        assert "rotated" not in output.stdout + output.stderr


# The server's arguments and the names of its environment, as it got them.
PRINTS_ARGV_AND_ENV = (
    """-c 'import json, os, sys; print(json.dumps([sys.argv[1:], sorted(os.environ)]))'"""
)
FILES = """
schema = 1
name = "files"
version = 1
env_files = ["files.env"]
secret_files = {{ API_KEY = "api_key", HF_TOKEN = "hf_token", VLLM_API_KEY = "vllm_key" }}
[server]
kind = "{kind}"
python = "{python}"
entrypoint = "{entrypoint}"
model_path = "/models/m"
args = ["--api-key", "${{API_KEY}}", "--x", "${{VLLM_API_KEY}}"]
"""


def secret_files(write_profile: WriteProfile, kind: str) -> Path:
    """The profile `files` of `kind`: API_KEY fills `--api-key` alone, HF_TOKEN no argument,
    VLLM_API_KEY (vLLM's own variable) an argument too; an env file sets OTHER. Its folder."""
    text = FILES.format(kind=kind, python=sys.executable, entrypoint=PRINTS_ARGV_AND_ENV)
    folder = write_profile("files", text).parent
    for name, value in {"api_key": KEY, "hf_token": "hf-9z", "vllm_key": "vk-9z"}.items():
        (folder / name).write_text(value + "\n")
        (folder / name).chmod(0o600)
    (folder / "files.env").write_text("OTHER=1\n")
    (folder / "files.env").chmod(0o600)
    return folder


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_a_secret_file_reaches_the_servers_environment_only_where_it_is_read_there(
    kind: str, write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    """A key the profile gives only in the server's arguments stays out of the environment
    every process of the server inherits; HF_TOKEN, which no argument takes, and a variable
    of vLLM's own (VLLM_API_KEY, where vLLM reads its key) reach it as an env file's do."""
    secret_files(write_profile, kind)
    result = nccl_launch("run", "files")
    assert result.returncode == 0, result.stderr
    argv, names = json.loads(result.stdout)
    assert argv[-4:] == ["--api-key", KEY, "--x", "vk-9z"]
    assert "API_KEY" not in names
    assert {"HF_TOKEN", "OTHER"} <= set(names)
    assert ("VLLM_API_KEY" in names) == (kind == "vllm")


def test_preflight_counts_a_secret_files_variable_as_one_of_its_secret_files(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    secret_files(write_profile, "sglang")
    skip = [word for check in ("nccl.conf", "env-plugin", "gpus", "port", "python", "paths",
                               "sglang") for word in ("--skip", check)]  # fmt: skip
    result = run_cli("preflight", "files", *skip)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[1] == (
        "ok    environment  no drift: the profile sets 2 variables (1 from its env files, 1 "
        "from its secret files; API_KEY, VLLM_API_KEY only fill its arguments), 0 already "
        "inherited"
    )
