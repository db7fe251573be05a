"""Secrets stay out of what people read: `run --dry-run`, refusals, `show`, `diff`, `check`,
`preflight` and validation errors mask them; machine exports keep them; `validate` warns."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccl_launch.secrets.masking import (
    MASK,
    is_secret,
    mask_argv,
    mask_credentials,
    mask_value,
    mask_words,
    masked_values,
)
from nccl_launch.secrets.values import mask_known, secrets_of
from nccl_launch.sglang import facts
from tests.conftest import RunCli, WriteProfile, console_script
from tests.helpers import Server, free_port, sleeper

# Every value here is a secret that must not appear in any human output.
SECRETS = {
    "HF_TOKEN": "hf_tok3n",
    "OPENAI_API_KEY": "sk-apikey",
    "DB_PASSWORD": "pa55word",
    "LDAP_PASSWD": "pa55wd",
    "SSHPASS": "ssh-pa55",
    "GCP_CREDENTIALS": "cred-json",
    "BASIC_AUTH": "auth-value",
    "SSH_PRIVATE": "private-value",
    "APP_SECRET": "s3cret",
}
URL_PW = "url-pa55"
ARGV_SECRETS = ("sk-flag", "hf-flag", "pw-flag", "-dash-flag", "sk-entry")
PROFILE = (
    """
schema = 1
name = "secretive"
version = 1
description = "keys"
[nccl]
PROTO = "LL"
[env]
TOKENIZERS_PARALLELISM = "false"
"""
    + "".join(f'{key} = "{value}"\n' for key, value in SECRETS.items())
    + f"""DATABASE_URL = "postgres://app:{URL_PW}@db:5432/x"
[server]
python = "{sys.executable}"
entrypoint = "-m sglang.launch_server --api-key sk-entry"
model_path = "/models/m"
args = ["--api-key", "sk-flag", "--hf-token=hf-flag", "--password", "pw-flag",
        "--admin-api-key", "-dash-flag", "--max-total-tokens", "4096"]
"""
)
HIDDEN = (*SECRETS.values(), URL_PW, *ARGV_SECRETS)


def assert_hidden(text: str) -> None:
    leaked = [secret for secret in HIDDEN if secret in text]
    assert leaked == [], text


@pytest.fixture
def secretive(write_profile: WriteProfile) -> None:
    write_profile("secretive", PROFILE)


# The rule, on plain values.


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN", "OPENAI_API_KEY", "APIKEY", "HFTOKEN", "DB_PASSWORD", "MYSQL_PASSWD",
        "SSHPASS", "AWS_SECRET_ACCESS_KEY", "GCP_CREDENTIALS", "AZURE_CREDENTIAL", "BASIC_AUTH",
        "OAUTH", "SSH_PRIVATE", "HF_TOKEN_PATH", "api-key", "hf-token", "ssl-keyfile-password",
    ],
)  # fmt: skip
def test_names_that_hold_a_secret(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM", "NCCL_IB_PKEY", "NCCL_LAUNCH_DIGEST", "NCCL_TOKEN",
        "CUDA_VISIBLE_DEVICES", "AUTHOR", "speculative-num-draft-tokens", "max-total-tokens",
        "ssl-keyfile", "tokenizer-path", "PATH",
    ],
)  # fmt: skip
def test_names_that_hold_no_secret(name: str) -> None:
    assert not is_secret(name)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgres://u:pw@db/x", "postgres://***@db/x"),
        ("redis://:pw@cache:6379/0", "redis://***@cache:6379/0"),
        ("https://u:p@ss:w@host/p?q=1", "https://***@host/p?q=1"),
        ("mysql://tok3n@db/x", "mysql://***@db/x"),
        ("http://u:p/ss?w@host:1/", "http://***@host:1/"),
        ("https://h/v1?token=t0k&n=1", "https://h/v1?token=***&n=1"),
        ("http://host:8000/v1", "http://host:8000/v1"),
        ("host=db user=u password=pw dbname=x", "host=db user=u password=*** dbname=x"),
        ("a s3://k:s@b/o and ftp://x:y@z", "a s3://***@b/o and ftp://***@z"),
        # What closes the call or list a pair stands in is not its value; None is no value.
        (
            "ServerArgs(api_key='k', admin_api_key=None)",
            "ServerArgs(api_key='***', admin_api_key=None)",
        ),
        ("f(token=abc123), next", "f(token=***), next"),
    ],
)
def test_passwords_in_urls_are_masked(text: str, masked: str) -> None:
    assert mask_credentials(text) == masked
    assert mask_value("DATABASE_URL", text) == masked
    assert mask_value("SENTRY_DSN", text) == masked


def test_nccl_values_are_never_masked() -> None:
    assert mask_value("NCCL_SOCKET_IFNAME", "postgres://u:pw@db/x") == "postgres://u:pw@db/x"
    assert mask_value("HF_TOKEN", "hf_x") == "***"


def test_credential_flags_have_their_values_masked() -> None:
    argv = ["py", "-m", "x", "--api-key", "K", "--token=T", "--password", "-P", "--hf-token",
            "--port", "8", "--num-draft-tokens", "3", "--url", "http://u:pw@h/"]  # fmt: skip
    assert mask_argv(argv) == [
        "py", "-m", "x", "--api-key", "***", "--token=***", "--password", "***", "--hf-token",
        "--port", "8", "--num-draft-tokens", "3", "--url", "http://***@h/",
    ]  # fmt: skip


def test_a_message_quoting_a_flag_is_masked_as_an_argv_but_its_prose_is_kept() -> None:
    assert mask_words("unrecognized arguments: --openai-api-key sk-1 --hf-token=hf-2") == (
        "unrecognized arguments: --openai-api-key *** --hf-token=***"
    )
    said = "argument --admin-api-key: expected one argument"  # argparse names the flag
    assert mask_words(said) == said


# Human outputs, through the console script.


def test_dry_run_masks_env_changes_and_argv(secretive: None, run_cli: RunCli) -> None:
    result = run_cli("run", "--dry-run", "secretive")
    assert result.returncode == 0, result.stderr
    assert_hidden(result.stdout + result.stderr)
    lines = result.stdout.splitlines()
    assert any(line.split()[:3] == ["+", "HF_TOKEN", '"***"'] for line in lines)
    assert any(line.split()[:3] == ["+", "TOKENIZERS_PARALLELISM", '"false"'] for line in lines)
    assert any(line.split()[:3] == ["+", "NCCL_PROTO", '"LL"'] for line in lines)
    assert any('"postgres://***@db:5432/x"' in line for line in lines)
    argv = lines[lines.index("argv:") + 1]
    assert "--api-key '***' '--hf-token=***' --password '***'" in argv
    assert "--admin-api-key '***' --max-total-tokens 4096" in argv


def test_a_refusal_masks_what_drifts(secretive: None, run_cli: RunCli) -> None:
    calling = {"HF_TOKEN": "hf_other", "DATABASE_URL": "postgres://app:other-pw@db:5432/x"}
    result = run_cli("run", "secretive", env=calling)
    assert result.returncode == 1, result.stderr
    assert_hidden(result.stderr)
    assert "hf_other" not in result.stderr
    assert "other-pw" not in result.stderr
    lines = result.stderr.splitlines()
    assert any(line.split()[:5] == ["~", "HF_TOKEN", '"***"', "->", '"***"'] for line in lines)
    url = '"postgres://***@db:5432/x" -> "postgres://***@db:5432/x"'
    assert any("DATABASE_URL" in line and url in line for line in lines)


def test_preflight_masks_text_and_json_drift(secretive: None, run_cli: RunCli) -> None:
    skip = [arg for name in ("nccl.conf", "env-plugin", "gpus", "port", "paths", "sglang")
            for arg in ("--skip", name)]  # fmt: skip
    calling = {"DATABASE_URL": "postgres://app:other-pw@db:5432/x", "DB_PASSWORD": "other-pa55"}
    text = run_cli("preflight", "secretive", *skip, env=calling)
    assert text.returncode == 1, text.stdout + text.stderr
    assert_hidden(text.stdout + text.stderr)
    assert "other-pw" not in text.stdout
    assert "other-pa55" not in text.stdout
    assert "postgres://***@db:5432/x" in text.stdout
    data = run_cli("preflight", "secretive", *skip, "--format", "json", env=calling).stdout
    drift = next(check["drift"] for check in json.loads(data)["checks"] if check["drift"])
    values = {entry["key"]: (entry["expected"], entry["actual"]) for entry in drift["entries"]}
    assert values["DB_PASSWORD"] == ("***", "***")
    assert values["DATABASE_URL"] == ("postgres://***@db:5432/x",) * 2


def test_show_toml_masks_and_says_so_while_machine_formats_keep_values(
    secretive: None, run_cli: RunCli
) -> None:
    shown = run_cli("show", "secretive")
    assert shown.returncode == 0, shown.stderr
    assert_hidden(shown.stdout)
    assert "# secrets masked as ***: --format json or an export format prints them" in shown.stdout
    assert 'HF_TOKEN = "***"' in shown.stdout
    assert 'TOKENIZERS_PARALLELISM = "false"' in shown.stdout
    assert "entrypoint = \"-m sglang.launch_server --api-key '***'\"" in shown.stdout
    data = json.loads(run_cli("show", "secretive", "--format", "json").stdout)
    assert data["env"]["HF_TOKEN"] == SECRETS["HF_TOKEN"]
    assert "sk-flag" in data["argv"]
    exported = run_cli("show", "secretive", "--format", "env").stdout.splitlines()
    assert "OPENAI_API_KEY=sk-apikey" in exported
    assert f"DATABASE_URL=postgres://app:{URL_PW}@db:5432/x" in exported


def test_show_toml_of_a_profile_without_secrets_has_no_mask_comment(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("plain", 'schema = 1\nname = "plain"\nversion = 1\n[env]\nA = "b"\n')
    assert "masked" not in run_cli("show", "plain").stdout


def test_diff_masks_env_and_argv(
    secretive: None, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    other = PROFILE.replace('name = "secretive"', 'name = "other"').replace("hf_tok3n", "hf_n3w")
    write_profile("other", other.replace("sk-flag", "sk-n3w").replace(URL_PW, "n3w-pw"))
    result = run_cli("diff", "secretive", "other")
    assert result.returncode == 1, result.stderr
    assert_hidden(result.stdout)
    assert "n3w" not in result.stdout
    lines = result.stdout.splitlines()
    assert '  ~ HF_TOKEN      "***" -> "***"' in lines
    assert any(line.startswith("  ~ argv") and "--api-key '***'" in line for line in lines)
    assert "postgres://***@db:5432/x" in result.stdout


LIVE = """
schema = 1
name = "live"
version = {version}
[env]
HF_TOKEN = "{hf}"
DATABASE_URL = "postgres://app:{pw}@db/x"
[server]
python = "{python}"
model_path = "/models/m"
tp_size = 2
port = {port}
"""


def test_check_masks_live_drift(write_profile: WriteProfile, run_cli: RunCli) -> None:
    port = free_port()
    values = {"python": sys.executable, "port": port}
    write_profile("live", LIVE.format(version=1, hf=SECRETS["HF_TOKEN"], pw=URL_PW, **values))
    server = Server([console_script(), "run", "live"], {}, port)
    try:  # the profile edited since the start: other secrets
        write_profile("live", LIVE.format(version=2, hf="hf_n3w", pw="n3w-pw", **values))
        result = run_cli("check", "live", "--port", str(port))
    finally:
        server.stop()
    assert result.returncode == 1, result.stdout + result.stderr
    assert_hidden(result.stdout + result.stderr)
    assert "n3w" not in result.stdout
    assert '"***" -> "***"' in result.stdout
    assert '"postgres://***@db/x" -> "postgres://***@db/x"' in result.stdout


# Validation errors and warnings.


def test_validation_errors_do_not_echo_secret_values(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile(
        "bad",
        """
        schema = 1
        name = "bad"
        version = 1
        [env]
        HF_TOKEN = ["hf_tok3n"]
        DB_URL = ["postgres://u:url-pa55@db/x"]
        [server]
        model_path = "/m"
        args = "--api-key sk-flag"
        [server.speculative]
        algorithm = "EAGLE"
        api_key = ["s3cret"]
        """,
    )
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert_hidden(result.stdout + result.stderr)
    lines = result.stderr.splitlines()
    assert f"{path}: env.HF_TOKEN: *** is not text or an integer; quote it as a string" in lines
    assert f"{path}: env.DB_URL: ['postgres://***@db/x'] is not text or an integer; " \
        "quote it as a string" in lines  # fmt: skip
    assert f"{path}: server.args: Input should be a valid list (got \"--api-key '***'\")" in lines
    assert f"{path}: server.speculative: api_key: *** is not a single value" in lines


def test_validate_names_a_credential_pair_as_a_pair_not_a_url(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("dsn", "schema = 1\nname = \"dsn\"\nversion = 1\n[env]\nDSN = 'password=pw-9z'\n")
    result = run_cli("validate", "profiles/dsn.toml")
    assert result.returncode == 0, result.stderr
    assert "9z" not in result.stderr
    assert "env.DSN: holds the value of a pair named like a credential;" in result.stderr


def test_validate_warns_about_secrets_written_in_the_profile(
    secretive: None, run_cli: RunCli
) -> None:
    result = run_cli("validate", "profiles/secretive.toml")
    assert result.returncode == 0, result.stderr
    assert_hidden(result.stdout + result.stderr)
    warnings = result.stderr.splitlines()
    where = "nccl-launch: warning: profiles/secretive.toml"
    elsewhere = "it belongs in an env file (mode 0600) named in env_files"
    accept = '[accept: "env.HF_TOKEN secret"]'
    assert f"{where}: env.HF_TOKEN: holds a literal secret; {elsewhere} {accept}" in warnings
    accept = '[accept: "env.DATABASE_URL secret"]'
    assert f"{where}: env.DATABASE_URL: holds a password in a URL; {elsewhere} {accept}" in warnings
    assert any(
        f"{where}: server.args: holds a credential; write it in an env file named in env_files"
        in line
        for line in warnings
    )
    assert not any("TOKENIZERS_PARALLELISM" in line for line in warnings)
    assert len(warnings) == len(SECRETS) + 2


def test_validate_is_quiet_about_profiles_without_secrets(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile(
        "quiet",
        """
        schema = 1
        name = "quiet"
        version = 1
        [env]
        TOKENIZERS_PARALLELISM = "false"
        DB_URL = "postgres://db:5432/x"
        """,
    )
    result = run_cli("validate", "profiles/quiet.toml")
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize(
    "word", ["a" * 1_000_000, "a:" * 500_000, "x://" * 250_000, "a=" * 500_000]
)
def test_masking_takes_linear_time(word: str) -> None:
    started = time.process_time()  # this process's CPU time: a busy host does not add to it
    assert mask_credentials(word) == word
    # vLLM reads every word after --api-key up to the next option as a key
    assert mask_argv(["--api-key", word, word]) == ["--api-key", "***", "***"]
    assert mask_argv(["--api-key", word, "--port", word]) == ["--api-key", "***", "--port", word]
    assert not is_secret(word)
    assert time.process_time() - started < 5  # quadratic: hours for a 1 MB word


@pytest.mark.parametrize("fmt", ["text", "json", "prometheus"])
def test_check_masks_a_credential_flag_in_a_process_title(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    with sleeper({b"NCCL_PROTO": b"LL"}, b"--api-key", b"sk-live-123", b"--token=sk-456") as pid:
        result = run_cli("check", "p", "--pid", str(pid), "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert "sk-live-123" not in result.stdout
    assert "sk-456" not in result.stdout
    if fmt == "text":
        assert "--api-key '***' '--token=***'" in result.stdout
    if fmt == "json":
        [process] = json.loads(result.stdout)["processes"]
        assert process["title"].endswith("--api-key '***' '--token=***'")


def test_preflight_json_masks_the_argv_and_what_sglang_quotes_of_it(
    write_profile: WriteProfile, run_cli: RunCli, sglang_python: str
) -> None:
    """The argv, and SGLang's refusal of a flag it does not know, which quotes its value."""
    profile = (
        PROFILE.replace(sys.executable, sglang_python)
        .replace('"--admin-api-key", "-dash-flag",', "")  # SGLang refuses a value like a flag
        .replace('"4096"]', '"4096", "--openai-api-key", "sk-typo"]')
    )
    write_profile("secretive", profile)
    skip = [arg for name in ("nccl.conf", "env-plugin", "gpus", "port", "paths")
            for arg in ("--skip", name)]  # fmt: skip
    text = run_cli("preflight", "secretive", *skip)
    result = run_cli("preflight", "secretive", *skip, "--format", "json")
    assert result.returncode == text.returncode == 3, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["sglang"]["stage"] == "parse"
    assert "--openai-api-key ***" in report["sglang"]["error"]
    assert "--openai-api-key ***" in text.stdout
    assert report["argv"][-4:] == ["--max-total-tokens", "4096", "--openai-api-key", "***"]
    for output in (text.stdout, result.stdout):
        assert_hidden(output)
        assert "sk-typo" not in output


@pytest.mark.parametrize("key", [b"9z x y", b"9z'q", b"9z\nnext", b"9z\x1b[2J"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_process_title_is_masked_before_it_is_quoted(
    key: bytes, fmt: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Quoting first made `'sk x y'` three words, of which masking hid one."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    flags = (b"--api-key", key, b"--ssl-keyfile-password=" + key)
    with sleeper({b"NCCL_PROTO": b"LL"}, *flags) as pid:
        result = run_cli("check", "p", "--pid", str(pid), "--format", fmt)
    assert result.returncode == 0, result.stderr
    title = result.stdout.splitlines()[2] if fmt == "text" else result.stdout
    if fmt == "json":
        [process] = json.loads(result.stdout)["processes"]
        title = process["title"]
    assert title.endswith("--api-key '***' '--ssl-keyfile-password=***'"), title
    assert "9z" not in result.stdout


# SGLang's parser takes any unambiguous prefix of a flag (argparse's allow_abbrev).


@pytest.mark.parametrize(
    "words",
    [
        ["--ap", "K"], ["--api-k", "K"], ["--api-k=K"], ["--admin-api", "K"],
        ["--admin-api-key=K"], ["--ssl-keyfile-passw", "K"], ["--ssl-keyfile-p=K"],
        ["--watermark-config", "K"], ["--watermark-c=K"], ["--api-key="],
        ["--a", "K"],  # ambiguous: SGLang refuses it, and still prints its line
    ],
)  # fmt: skip
def test_a_prefix_of_a_credential_flag_has_its_value_masked(words: list[str]) -> None:
    masked = mask_argv(["python3", *words, "--tp", "8"])
    assert "K" not in " ".join(masked)
    assert masked[-2:] == ["--tp", "8"]


def test_a_flag_of_its_own_that_starts_a_credential_flag_is_kept() -> None:
    assert mask_argv(["--ssl-keyfile", "/k.pem"]) == ["--ssl-keyfile", "/k.pem"]


def test_check_masks_abbreviated_credential_flags_in_a_process_title(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    with sleeper({b"NCCL_PROTO": b"LL"}, b"--ap", b"k1-9z", b"--admin-api=k2-9z") as pid:
        result = run_cli("check", "p", "--pid", str(pid))
    assert result.returncode == 0, result.stderr
    assert "--ap '***' '--admin-api=***'" in result.stdout
    assert "9z" not in result.stdout


def test_sglangs_parser_gives_a_credential_only_to_flags_masked(sglang_python: str) -> None:
    """Each prefix of each credential flag, parsed by SGLang's parser: where the value it
    follows lands in a credential, the argv masks it. Every flag of SGLang a word of which
    names a credential (`--api-key`, `--ssl-keyfile-password`) is in the list, or in the list
    of those known to hold none, whose values are shown."""
    script = """
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
flags, prefixes = json.loads(sys.argv[1])
landed = {}
for prefix in prefixes:
    with contextlib.suppress(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        parsed = vars(parser.parse_known_args([prefix, "V"])[0])
        landed[prefix] = [dest for dest, value in parsed.items() if value == "V"]
options = [option for action in parser._actions for option in action.option_strings]
dests = {option: action.dest for action in parser._actions for option in action.option_strings}
print(json.dumps([options, landed, [dests.get(flag) for flag in flags]]))
"""
    flags = facts.CREDENTIAL_FLAGS
    prefixes = sorted({flag[:end] for flag in flags for end in range(3, len(flag) + 1)})
    argument = json.dumps([flags, prefixes])
    ran = subprocess.run(
        [sglang_python, "-c", script, argument], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    options, landed, dests = json.loads(ran.stdout)
    assert None not in dests, dests  # every credential flag is SGLang's
    credentials = {flag.removeprefix("--").replace("-", "_") for flag in flags}
    for prefix, where in landed.items():
        assert (mask_argv([prefix, "V"]) == [prefix, MASK]) == bool(set(where) & credentials), (
            prefix, where,
        )  # fmt: skip
    # every other flag a word of which reads as a credential's is one known to hold none
    named = {option for option in options if is_secret(option.lstrip("-"))}
    assert named - set(flags) == set(facts.NAMED_LIKE_CREDENTIALS)
    for flag in facts.NAMED_LIKE_CREDENTIALS:
        assert mask_argv([flag, "V", f"{flag}=V"]) == [flag, "V", f"{flag}=V"]


# A value that holds a command line (`EXTRA_ARGS`) is masked as one.


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("--api-key sk-1 --tp 8", "--api-key '***' --tp 8"),
        ("--tp 8 --hf-token=hf-1", "--tp 8 --hf-token=***"),
        ("--api-key 'sk 1' --tp 8", "--api-key '***' --tp 8"),
        ("--ap sk-1", "--ap '***'"),
        ("--url postgres://u:pw@db/x", "--url postgres://***@db/x"),
        ("can't --api-key sk-1", "can't --api-key ***"),
        ("--tp 8 'x y'", "--tp 8 'x y'"),
    ],
)
def test_a_command_line_in_a_value_is_masked(value: str, masked: str) -> None:
    assert mask_value("EXTRA_ARGS", value) == masked


EXTRA = 'schema = 1\nname = "{name}"\nversion = 1\n[env]\nEXTRA_ARGS = "--api-key {key} --tp 8"\n'


@pytest.mark.parametrize(
    "command", [["run", "--dry-run", "x", "--", "true"], ["show", "x"], ["diff", "x", "y"]]
)
def test_a_credential_flag_in_a_variable_is_masked(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("x", EXTRA.format(name="x", key="sk-9z"))
    write_profile("y", EXTRA.format(name="y", key="sk-8z"))
    result = run_cli(*command)
    assert result.returncode in (0, 1), result.stderr
    assert "--api-key '***' --tp 8" in result.stdout
    assert "9z" not in result.stdout + result.stderr
    assert "8z" not in result.stdout + result.stderr


def test_validate_warns_about_a_credential_flag_in_a_variable(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("x", EXTRA.format(name="x", key="sk-9z"))
    result = run_cli("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert (
        f"nccl-launch: warning: {path}: env.EXTRA_ARGS: holds a credential flag's value; it "
        'belongs in an env file (mode 0600) named in env_files [accept: "env.EXTRA_ARGS secret"]'
    ) in result.stderr.splitlines()
    assert "9z" not in result.stderr


def test_a_quoted_credential_in_a_shell_line_is_masked_whole(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Split at spaces, `'sk-9z x'` was two words, of which masking hid one."""
    entrypoint = "-m sglang.launch_server --api-key 'sk-9z x'"
    server = f'[server]\nmodel_path = "/m"\nentrypoint = "{entrypoint}"\n'
    write_profile("q", EXTRA.format(name="q", key="k") + server)
    shown = run_cli("show", "q")
    assert "entrypoint = \"-m sglang.launch_server --api-key '***'\"" in shown.stdout
    path = write_profile("v", "schema = 1\nname = 'v'\nversion = 1\n[server]\n"
                         "args = \"--api-key 'sk-9z x'\"\n")  # fmt: skip
    invalid = run_cli("validate", str(path))
    assert invalid.returncode == 2
    for output in (shown.stdout, invalid.stderr):
        assert "9z" not in output


@pytest.mark.parametrize(
    "text", ["--api-key  sk-9z", "--api-key\tsk-9z", "a\t--token=sk-9z", "--api-key\nsk-9z"]
)
def test_a_text_is_masked_whatever_the_space_between_its_words(text: str) -> None:
    """Split at single spaces, a tab or a second space kept the value in a word of its own."""
    masked = mask_words(text)
    assert "9z" not in masked
    assert masked.replace(MASK, "") == text.replace("sk-9z", "")


def test_an_entrypoint_that_is_no_shell_line_is_refused_without_its_text(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile("e", "schema = 1\nname = 'e'\nversion = 1\n[server]\nmodel_path = '/m'\n"
                         "entrypoint = \"-m x --api-key 'sk-9z\"\n")  # fmt: skip
    result = run_cli("validate", str(path))
    assert (result.returncode, result.stderr) == (2, (
        f"{path}: server.entrypoint: no closing quotation; quote as a shell would\n"
    ))  # fmt: skip


# What pydantic echoes of an invalid value: a credential of the argv stays hidden.


@pytest.mark.parametrize(
    ("server", "line"),
    [
        ('args = ["--api-key", 12345678]', "server.args.1: Input should be a valid string "
         "(got '***')"),
        ('args = {api-key = "sk-live-9z"}', "server.args: Input should be a valid list "
         "(got {'api-key': '***'})"),
        ('host = ["--api-key", "sk-live-9z"]', "server.host: Input should be a valid string "
         "(got ['--api-key', '***'])"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", [["validate"], ["show"], ["run", "--dry-run"]])
def test_validation_errors_never_echo_a_credential_flags_value(
    server: str, line: str, command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    path = write_profile(
        "v", f'schema = 1\nname = "v"\nversion = 1\n[server]\nmodel_path = "/m"\n{server}\n'
    )
    result = run_cli(*command, str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{path}: {line}" in result.stderr.splitlines()
    assert "9z" not in result.stdout + result.stderr
    assert "12345678" not in result.stdout + result.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_check_masks_a_credential_inside_a_shell_line_of_a_process_title(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """`bash -c '... --api-key K'`: the key is inside one word of the argv."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    line = b"exec sglang --api-key sk-live-9z --tp 8"
    with sleeper({b"NCCL_PROTO": b"LL"}, b"-c", line) as pid:
        result = run_cli("check", "p", "--pid", str(pid), "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert "9z" not in result.stdout
    title = result.stdout
    if fmt == "json":
        [process] = json.loads(result.stdout)["processes"]
        title = process["title"]
    assert "--api-key '\"'\"'***'\"'\"' --tp 8" in title


# Credentials in values that no flag names: a URL, a `password = x` pair, a JSON member.

SPELLED = """schema = 1
name = "spelled"
version = 1
[env]
DB = "http://app:p/ss?w-9z@db:5432/x"
LIBPQ = "host=db password = pw-9z"
CONF = '{"password": "js-9z", "port": 1}'
[server]
python = "/usr/bin/python3"
model_path = "/m"
args = ["--x", "password = arg-9z", "--y", '{"api_key": "json-9z"}', "--u", "https://t0k-9z@hub/m"]
"""


@pytest.mark.parametrize("command", [["show"], ["run", "--dry-run"], ["diff", "spelled", "plain"]])
def test_credentials_in_urls_pairs_and_json_members_are_masked(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("spelled", SPELLED)
    write_profile("plain", 'schema = 1\nname = "plain"\nversion = 1\n')
    result = run_cli(*command, *(["spelled"] if command[0] != "diff" else []))
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "9z" not in result.stdout + result.stderr
    for shown in ("http://***@db:5432/x", "password = ***", "password = ***", "https://***@hub/m"):
        assert shown in result.stdout
    assert '"password": "***"' in result.stdout.replace('\\"', '"')
    assert '"api_key": "***"' in result.stdout.replace('\\"', '"')


# The last step: every error, warning and line for people goes through the one masking.


@pytest.mark.parametrize(
    "command",
    [
        ["check", "chat", "--port", "http://app:pw-9z@host:30000"],  # click echoes the value
        ["check", "chat", "--pid", "password = pw-9z"],
    ],
)
def test_an_error_never_echoes_a_credential_given_to_an_option(
    command: list[str], run_cli: RunCli
) -> None:
    result = run_cli(*command)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "9z" not in result.stdout + result.stderr
    assert "***" in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-c", "exec python3 -m sglang.launch_server --api-key sk-live-9z --tp 8"],
        ["--url", "http://app:p/ss?w-9z@db/x", "--x", "password = pw-9z"],
        ["--config", '{"password": "js-9z", "port": 1}', "--hf-token=hf-9z"],
        ["--u", "https://t0k-9z@hub/m", "--q", "https://h/v1?token=q-9z&n=1"],
        ["--j", '{"auth_token": ["t1-9z", "t2-9z"], "password": {"v": "v-9z"}, "n": ""}'],
    ],
)
def test_masked_values_are_what_the_masked_argv_hides(argv: list[str]) -> None:
    """tune masks a server's log tail with these values wherever they appear."""
    hidden = masked_values(argv)
    assert {value for value in hidden if "9z" in value} == hidden != set()
    assert all("9z" not in word for word in mask_argv(argv))
    assert all(any(value in word for word in argv) for value in hidden)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_value_nccl_logged_is_masked_in_verify_logs_text_and_json(
    fmt: str, write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """A value quoted from NCCL's log reaches the JSON as it reaches the text: masked."""
    write_profile("p", 'schema = 1\nname = "p"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    log = tmp_path / "server.log"
    log.write_text(
        "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL\n"
        "h:1:1 [0] NCCL INFO NCCL_NET_PLUGIN set by environment to "
        "https://bob:hunter2@plugins.example/net.so\n"
    )
    result = run_cli("verify-log", "p", str(log), "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert "https://***@plugins.example/net.so" in result.stdout


# A credential's value that is a JSON or Python list or object: masked whole, brackets and all.

BRACKETED = """schema = 1
name = "bracketed"
version = 1
[env]
OTHER = '{"api_key": ["sk-9z", "sk-8z"], "port": 1}'
CONF = "{'password': {'v': 'py-9z'}}"
[server]
python = "/usr/bin/python3"
model_path = "/m"
args = ["--x", '{"auth_token": ["tok-9z"]}', "--y", '{"password": {"v": "[js-9z]"}, "n": 2}']
"""


@pytest.mark.parametrize("command", [["show"], ["run", "--dry-run"]])
def test_a_credential_whose_value_is_a_list_or_an_object_is_masked_whole(
    command: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("bracketed", BRACKETED)
    result = run_cli(*command, "bracketed")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "9z" not in result.stdout + result.stderr
    assert "8z" not in result.stdout + result.stderr
    shown = result.stdout.replace('\\"', '"')
    for masked in ('{"api_key": ***, "port": 1}', "{'password': ***}", '{"auth_token": ***}'):
        assert masked in shown
    assert '{"password": ***, "n": 2}' in shown


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            """non-default args: {'api_key': ['s3cr3tK'], 'port': 8}""",
            "{'api_key': ***, 'port': 8}",
        ),
        ('"password": {"v": "}]\\"x"}, "n": 1', '"password": ***, "n": 1'),
        ("api_key=['k1', 'k2']) tail", "api_key=***) tail"),
        ("Namespace(api_key=('k1',), port=8)", "Namespace(api_key=***, port=8)"),
        ("token=[never-closed, sk-9z", "token=***"),
    ],
)
def test_a_list_or_object_value_is_masked_to_its_closing_bracket(text: str, masked: str) -> None:
    assert mask_credentials(text).endswith(masked)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ('password="pa\\"ss-9z" n=1', 'password="***" n=1'),
        ("{'token': 'it\\'s-9z', 'n': 1}", "{'token': '***', 'n': 1}"),
        ('DSN password="never-closed 9z', 'DSN password="***"'),
        (  # such a pair in a JSON string (a line of `run --dry-run`, a log's JSON)
            json.dumps({"dsn": 'password="pa\\"ss-9z" n=1'}),
            json.dumps({"dsn": 'password="***" n=1'}),
        ),
    ],
)
def test_a_quoted_value_is_masked_past_its_escaped_quotes(text: str, masked: str) -> None:
    """A value's tail after an escaped quote is the credential's too; with no closing quote,
    so is the rest of the text."""
    assert mask_credentials(text) == masked
    assert {'pa\\"ss-9z', 'pa"ss-9z'} <= masked_values(["--x", 'password="pa\\"ss-9z"'])


@pytest.mark.parametrize(
    "text",
    [
        "keys: ['k3y'] (1)",  # a Python list of vLLM's, or a tuple
        "Bearer k3y,",
        '{"keys": ["k3y"]}',
        "unrecognized arguments: --api-keyy k3y",
        "key=k3y\tnext",
    ],
)
def test_a_short_key_handed_to_a_server_is_masked_wherever_it_stands_alone(text: str) -> None:
    assert "k3y" not in mask_known(text, {"k3y"})
    assert MASK in mask_known(text, {"k3y"})


def test_a_short_key_inside_a_longer_word_is_kept() -> None:
    assert mask_known("k3ys k3y_x xk3y 1k3y", {"k3y"}) == "k3ys k3y_x xk3y 1k3y"


@pytest.mark.parametrize("key", ["it's-k3y", 'say "k3y"', "back\\slash-k3y", "tab\tk3y"])
def test_a_key_is_masked_as_python_and_json_quote_it(key: str) -> None:
    """A server logs its arguments as Python's repr or as JSON: the key escaped."""
    for form in (repr([key]), json.dumps([key]), repr((key,)), key):
        masked = mask_known(f"args: {form}", {key})
        assert "k3y" not in masked, (form, masked)


@pytest.mark.parametrize(
    ("argv", "secrets"),
    [
        (["--served-model-name", "sk-1", "--x=a:$b", "--y", "p"], {"sk-1", "a", "p"}),
        (["--served-model-name", "sk-1", "--x=a:$b", "--y", "p", "--tp", "8"], {"sk-1", "a", "p"}),
        (["--served-model-name", "sk-1", "--x=a;$b", "--y", "p"], set()),  # edited since
        (["--served-model-name", "sk-1"], set()),
    ],
)
def test_a_command_line_read_back_gives_what_its_references_were_filled_with(
    argv: list[str], secrets: set[str]
) -> None:
    """A title masks these wherever they appear, whatever the flag: only where the whole argv
    the profile writes still reads as the command line, word for word."""
    written = ["--served-model-name", "${NAME}", "--x=${A}:$$b", "--y", "${P}"]
    assert secrets_of(argv, {}, written=written).values == secrets
