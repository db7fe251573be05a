"""Shell completion of PROFILE arguments, through click's protocol and the installed script."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import time
from pathlib import Path

import pytest

from nccl_launch.commands.completion import DEFAULT_WORDBREAKS, replaced_part
from tests.conftest import RunCli, WriteProfile, console_script

KIMI = "kimi-k25-rtx6000bw-tp8-eagle3"


def complete(run_cli: RunCli, line: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash gets for the last word of `line` (empty after a trailing space): each
    completion as `type,value`, as click's bash script reads them."""
    words = line.split(" ")
    protocol = {
        "_NCCL_LAUNCH_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    done = run_cli(env=protocol | (env or {}))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return [item for item in done.stdout.splitlines() if item]


@pytest.fixture
def tuned(write_profile: WriteProfile, tmp_path: Path) -> dict[str, str]:
    """`tuned` version 2 in ./profiles, version 1 under another file name in an archive on
    $NCCL_LAUNCH_PATH; the environment that finds both."""
    write_profile("tuned", 'schema = 1\nname = "tuned"\nversion = 2\n')
    write_profile("tuned-old", 'schema = 1\nname = "tuned"\nversion = 1\n', folder="archive")
    write_profile("other", 'schema = 1\nname = "other"\nversion = 1\n')
    return {"NCCL_LAUNCH_PATH": str(tmp_path / "archive")}


def test_a_profile_name_completes_to_names_and_versions(
    run_cli: RunCli, tuned: dict[str, str]
) -> None:
    assert complete(run_cli, "nccl-launch run tu", tuned) == [
        "file,tu",
        "plain,tuned",
        "plain,tuned@1",
        "plain,tuned@2",
    ]


def test_name_at_completes_the_versions_on_the_search_path(
    run_cli: RunCli, tuned: dict[str, str]
) -> None:
    assert complete(run_cli, "nccl-launch run tuned@", tuned) == [
        "file,tuned@",
        "plain,tuned@1",
        "plain,tuned@2",
    ]


@pytest.mark.parametrize(
    "line",
    ["nccl-launch run a b ", "nccl-launch preflight a b c", "nccl-launch run a b -- "],
)
def test_after_a_stray_argument_nothing_completes_quietly(line: str, run_cli: RunCli) -> None:
    assert complete(run_cli, line) == []


def test_shipped_profiles_complete_too(run_cli: RunCli) -> None:
    assert complete(run_cli, "nccl-launch show kimi") == [
        "file,kimi",
        f"plain,{KIMI}",
        f"plain,{KIMI}-vllm",
        f"plain,{KIMI}-vllm@1",
        f"plain,{KIMI}@1",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "nccl-launch run ot",
        "nccl-launch run --dry-run ot",
        "nccl-launch preflight ot",
        "nccl-launch check ot",
        "nccl-launch show ot",
        "nccl-launch diff tuned ot",
        "nccl-launch validate tuned ot",
        "nccl-launch verify-log ot",
        "nccl-launch systemd ot",
        "nccl-launch bench ot",
    ],
)
def test_every_profile_argument_completes(
    run_cli: RunCli, tuned: dict[str, str], line: str
) -> None:
    assert complete(run_cli, line, tuned) == ["file,ot", "plain,other", "plain,other@1"]


def test_an_unusable_file_breaks_no_completion(
    run_cli: RunCli, tuned: dict[str, str], tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "profiles" / "fifo.toml")  # opened plainly, it would block forever
    (tmp_path / "profiles" / "broken.toml").write_text("schema = 1\nname = ")
    assert complete(run_cli, "nccl-launch run tuned@", tuned)[1:] == [
        "plain,tuned@1",
        "plain,tuned@2",
    ]


def test_other_arguments_keep_clicks_completion(run_cli: RunCli, tuned: dict[str, str]) -> None:
    assert complete(run_cli, "nccl-launch sh", tuned) == ["plain,show"]
    assert complete(run_cli, "nccl-launch new ", tuned) == []  # NAME is new: nothing to offer


def test_with_the_line_bash_gets_the_part_after_its_word_break(
    run_cli: RunCli, tuned: dict[str, str]
) -> None:
    """Real bash splits `tuned@` at '@' (COMP_WORDBREAKS) and replaces only the '@' onwards;
    the script nccl-launch prints passes the line, and gets `@1` for `tuned@1`."""
    line = {"COMP_LINE": "nccl-launch run tuned@", "COMP_WORDBREAKS": "@:="}
    broken = "nccl-launch run tuned @"  # COMP_WORDS as bash fills it
    assert complete(run_cli, broken, tuned | line) == ["file,tuned@", "plain,@1", "plain,@2"]
    option = {"COMP_LINE": "nccl-launch new x --from=tu", "COMP_WORDBREAKS": "@:="}
    assert complete(run_cli, "nccl-launch new x --from = tu", tuned | option) == [
        "file,tu",
        "plain,tuned",
        "plain,tuned@1",
        "plain,tuned@2",
    ]


@pytest.mark.parametrize(
    ("value", "word", "replaced"),
    [
        ("tuned@1", "tuned@", "@1"),  # bash replaces from the '@'
        ("tuned@12", "tuned@1", "@12"),
        ("a:b", "a:", "b"),  # and after a ':'
        ("tuned@1", "tu", "tuned@1"),
        ("tuned", "--from=tu", "tuned"),  # click completed the option's value alone
        ("tuned@1", "--from=tuned@", "@1"),
        ("--from", "--fr", "--from"),
    ],
)
def test_the_part_bash_replaces(value: str, word: str, replaced: str) -> None:
    assert replaced_part(value, word, DEFAULT_WORDBREAKS) == replaced


def test_interactive_bash_completes_name_at_version(run_cli: RunCli, tuned: dict[str, str]) -> None:
    """bash -i on a pty, with the script `_NCCL_LAUNCH_COMPLETE=bash_source nccl-launch`
    writes saved to a file and sourced (docs/commands.md): TAB after `other@` gives `other@1`."""
    pid, fd = interactive_bash(run_cli, tuned)
    try:
        os.write(fd, b"nccl-launch run other@\t")
        os.write(fd, b"\x01echo completed: \n")  # to the line's start (^A), print it
        read_until(fd, "\ncompleted: nccl-launch run other@1\r\n")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def interactive_bash(run_cli: RunCli, env: dict[str, str]) -> tuple[int, int]:
    """An interactive bash on a pty (pid, terminal fd), without the host's rc files, that has
    sourced the file `_NCCL_LAUNCH_COMPLETE=bash_source nccl-launch` wrote."""
    bash = shutil.which("bash")
    assert bash is not None
    source = run_cli(env={"_NCCL_LAUNCH_COMPLETE": "bash_source"}).stdout
    script = Path("complete.bash")
    script.write_text(source)
    bin_dir = str(Path(console_script()).parent)
    path = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TERM": "dumb", "PS1": "$ "}
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.execve(bash, [bash, "--norc", "--noprofile", "-i"], os.environ | env | path)
    os.write(fd, f"source {script}\n".encode())
    return pid, fd


def read_until(fd: int, text: str, timeout: float = 30) -> str:
    """What the terminal shows (escape sequences dropped) once `text` appears in it."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        assert ready, f"waited {timeout}s for {text!r}; the terminal shows: {seen!r}"
        seen += re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", os.read(fd, 4096).decode(errors="replace"))
    return seen


def hostile(write_profile: WriteProfile, target: Path) -> None:
    """Files on the search path whose name or version no profile could have, each made to
    harm a shell that is offered it: a command, a forged completion line, an escape
    sequence, a glob, versions that are not positive integers."""
    write_profile("inject", f'schema = 1\nname = "x;touch${{IFS}}{target}"\nversion = 1\n')
    write_profile("forge", 'schema = 1\nname = "a\\nfile,zzz"\nversion = 1\n')
    write_profile("escape", 'schema = 1\nname = "e\\u001b]0;owned\\u0007"\nversion = 1\n')
    write_profile("glob", 'schema = 1\nname = "st*r"\nversion = 1\n')
    write_profile("flag", 'schema = 1\nname = "z"\nversion = true\n')
    write_profile("negative", 'schema = 1\nname = "y"\nversion = -3\n')


def test_names_and_versions_no_profile_can_have_are_not_offered(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    hostile(write_profile, tmp_path / "PWNED")
    write_profile("fine", 'schema = 1\nname = "fine"\nversion = 3\n')
    offered = complete(run_cli, "nccl-launch run ")
    assert [item for item in offered if KIMI not in item and "rtx6000bw-pcie" not in item] == [
        "file,",
        "plain,fine",
        "plain,fine@3",
    ]
    for prefix in ("x", "a", "e", "st", "z", "y"):
        assert complete(run_cli, f"nccl-launch run {prefix}") == [f"file,{prefix}"]


def test_interactive_bash_runs_nothing_a_profile_name_holds(
    run_cli: RunCli, write_profile: WriteProfile, tmp_path: Path
) -> None:
    """bash -i on a pty: TAB after `run x`, then Enter, with a file on the search path named
    `x;touch${IFS}PATH`. Offered, bash would insert it as it is and run the `touch`."""
    target = tmp_path / "PWNED"
    hostile(write_profile, target)
    pid, fd = interactive_bash(run_cli, {})
    try:
        os.write(fd, b"nccl-launch run x\t\n")
        os.write(fd, b"echo $((6 * 7))done\n")  # printed once the line before has run
        read_until(fd, "42done")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    assert not target.exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COMP_WORDS": "nccl-launch run "}, "COMP_CWORD not set; the completion script sets"),
        ({}, "COMP_WORDS and COMP_CWORD not set"),
        ({"COMP_WORDS": "nccl-launch run ", "COMP_CWORD": "abc"}, "COMP_CWORD='abc': the index"),
        ({"COMP_WORDS": "nccl-launch run ", "COMP_CWORD": "-1"}, "COMP_CWORD='-1': the index"),
        ({"_NCCL_LAUNCH_COMPLETE": "zsh_complete"}, "COMP_WORDS and COMP_CWORD not set"),
        (
            {"_NCCL_LAUNCH_COMPLETE": "fish_complete", "COMP_WORDS": "nccl-launch run"},
            "COMP_CWORD not set",
        ),
        (
            {"_NCCL_LAUNCH_COMPLETE": "fish_complete", "COMP_WORDS": "x", "COMP_CWORD": " "},
            "COMP_CWORD=' ': the word completed, or nothing",
        ),
        (
            {"_NCCL_LAUNCH_COMPLETE": "zsh_complete", "COMP_WORDS": "x", "COMP_CWORD": "sh"},
            "COMP_CWORD='sh': the index of the word completed",
        ),
        (
            {"_NCCL_LAUNCH_COMPLETE": "bogus_source"},
            "_NCCL_LAUNCH_COMPLETE='bogus_source': valid: bash_source, bash_complete, zsh_source",
        ),
        ({"_NCCL_LAUNCH_COMPLETE": "bash_"}, "_NCCL_LAUNCH_COMPLETE='bash_': valid: "),
    ],
)
def test_a_completion_request_no_script_makes_is_refused_with_one_line(
    run_cli: RunCli, env: dict[str, str], message: str
) -> None:
    """Only a hand-made environment gets here; it is told what is wrong (exit 2), where click
    alone raised KeyError or ValueError (exit 4) or exited 1 without a word."""
    done = run_cli(env={"_NCCL_LAUNCH_COMPLETE": "bash_complete"} | env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("nccl-launch: ")
    assert message in done.stderr
    assert done.stderr.count("\n") == 1


NOT_UTF8 = "\udcff"  # byte 0xff as os.environ holds it (surrogateescape)


@pytest.mark.parametrize(
    "env",
    [
        {"COMP_WORDS": f"nccl-launch run tu{NOT_UTF8}", "COMP_CWORD": "2"},
        {"COMP_WORDS": f"nccl-launch run ./p{NOT_UTF8}", "COMP_CWORD": "2"},  # a path's word
        {"COMP_WORDS": "nccl-launch run tu", "COMP_CWORD": "2",
         "COMP_LINE": f"nccl-launch run tu{NOT_UTF8}"},
        {"_NCCL_LAUNCH_COMPLETE": "zsh_complete", "COMP_WORDS": f"nccl-launch {NOT_UTF8}",
         "COMP_CWORD": "1"},
        {"_NCCL_LAUNCH_COMPLETE": "fish_complete", "COMP_WORDS": f"nccl-launch {NOT_UTF8}",
         "COMP_CWORD": NOT_UTF8},
    ],
)  # fmt: skip
def test_a_word_with_a_byte_that_is_not_utf8_completes_to_nothing(
    run_cli: RunCli, tuned: dict[str, str], env: dict[str, str]
) -> None:
    """No profile name holds such a byte, and click cannot write back a word that does (it
    exited 4): nothing is offered."""
    done = run_cli(env=tuned | {"_NCCL_LAUNCH_COMPLETE": "bash_complete"} | env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_scripts_requests_still_work(run_cli: RunCli) -> None:
    for shell in ("bash", "zsh", "fish"):
        source = run_cli(env={"_NCCL_LAUNCH_COMPLETE": f"{shell}_source"})
        assert (source.returncode, source.stderr) == (0, ""), shell
        assert "_NCCL_LAUNCH_COMPLETE" in source.stdout
    words = {"COMP_WORDS": "nccl-launch sh"}
    zsh = run_cli(env=words | {"_NCCL_LAUNCH_COMPLETE": "zsh_complete", "COMP_CWORD": "1"})
    assert (zsh.returncode, zsh.stdout.splitlines()[:2]) == (0, ["plain", "show"])
    fish = run_cli(env=words | {"_NCCL_LAUNCH_COMPLETE": "fish_complete", "COMP_CWORD": "sh"})
    assert (fish.returncode, fish.stdout.split("\t")[0]) == (0, "plain,show")
