"""files/ on real files: FIFOs, devices, symlinks, sizes, owners and modes, atomic writes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nccl_launch.files.reading import open_stream, read_text
from nccl_launch.files.trust import check_trusted
from nccl_launch.files.writing import atomic_write
from nccl_launch.findings import Refused
from tests.conftest import RunCli, console_script
from tests.standins import start_standin
from tests.watching import Opens

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
NOBODY = 65534


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return path


def test_a_regular_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("name = 'p'\n")
    assert read_text(path, "profile") == "name = 'p'\n"
    with open_stream(str(path), "log") as stream:
        assert list(stream) == ["name = 'p'"]


def test_what_is_no_regular_file_is_looked_at_never_opened(fifo: Path, tmp_path: Path) -> None:
    """A FIFO's open wakes a writer waiting on it, a device's may start what it drives (a
    watchdog's open arms it): every read looks (O_PATH) before it opens. inotify sees each
    open; a look is none."""
    regular = tmp_path / "p.toml"
    regular.write_text("name = 'p'\n")
    with Opens(regular) as opens:
        read_text(regular, "profile", trusted=True)
        assert opens.seen() == 1  # inotify sees a read
    with Opens(fifo) as opens:
        for trusted in (False, True):
            with pytest.raises(Refused, match="a FIFO"):
                read_text(fifo, "profile", trusted=trusted)
        with pytest.raises(Refused, match="a FIFO"), open_stream(str(fifo), "log"):
            pass
        assert opens.seen() == 0


def test_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    # Nothing writes to the FIFO: a plain open would hang this test forever.
    with pytest.raises(
        Refused, match=r"^nccl-launch: profile .*fifo.toml: a FIFO; only regular files"
    ):
        read_text(fifo, "profile")
    with pytest.raises(Refused, match="a FIFO"), open_stream(str(fifo), "log"):
        pass


@pytest.mark.parametrize(
    ("target", "kind"), [("/dev/zero", "a character device"), ("/tmp", "a directory")]
)
def test_devices_and_directories_are_refused_through_a_symlink(
    tmp_path: Path, target: str, kind: str
) -> None:
    link = tmp_path / "zz.toml"
    link.symlink_to(target)
    with pytest.raises(Refused, match=f"zz.toml: {kind}; only regular files are read"):
        read_text(link, "profile")


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("loop.toml", "Too many levels of symbolic links"),
        ("absent.toml", "No such file or directory"),
    ],
)
def test_a_profile_path_through_a_link_that_loops_or_names_nothing_says_so(
    target: str, why: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """Not "not found": the link is there, and `list` says the same of it."""
    link = tmp_path / "loop.toml"
    link.symlink_to(target)
    for command in (["validate", str(link)], ["show", str(link)]):
        result = run_cli(*command)
        assert (result.returncode, result.stderr) == (
            2,
            f"nccl-launch: profile {link}: cannot read: {why}\n",
        )


def test_size_nul_and_encoding_are_clear_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.env"
    big.write_bytes(b"A=1\n" * 300_000)
    with pytest.raises(Refused, match=r"larger than 1048576 bytes"):
        read_text(big, "env file")
    with pytest.raises(Refused, match="cannot hold a NUL byte"):
        read_text(tmp_path / "a\0b", "env file")
    latin = tmp_path / "latin.env"
    latin.write_bytes(b"A=caf\xe9\n")
    with pytest.raises(Refused, match=r"not UTF-8 text \(byte 5\)"):
        read_text(latin, "env file")
    assert read_text(latin, "nccl.conf", errors="surrogateescape") == "A=caf\udce9\n"
    with pytest.raises(Refused, match="cannot read: No such file or directory"):
        read_text(tmp_path / "absent", "env file")


@AS_ROOT
def test_root_refuses_files_others_could_write(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("")
    check_trusted(path, path.stat(), "profile")  # root's own 0644 file
    path.chmod(0o666)
    with pytest.raises(Refused, match=r"writable by group or others \(mode 0666\)"):
        check_trusted(path, path.stat(), "profile")
    path.chmod(0o644)
    os.chown(path, NOBODY, -1)
    with pytest.raises(Refused) as refused:
        check_trusted(path, path.stat(), "profile")
    # the fix keeps the file readable by a service's User= (a 0600 file chowned root is not)
    assert refused.value.findings[0].text() == (
        f"profile {path}: owned by uid {NOBODY}, not root; chown root and chmod go-w (chgrp the "
        f"service's group and chmod 0640 where its User= must read it), or run this as uid "
        f"{NOBODY}"
    )
    with pytest.raises(Refused, match="owned by uid"):
        read_text(path, "profile", trusted=True)
    assert read_text(path, "profile") == ""  # trust is asked for, not implied


@AS_ROOT
def test_root_refuses_a_file_in_a_directory_others_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "p.toml"
    path.write_text("")
    shared.chmod(0o777)
    with pytest.raises(Refused, match=r"its directory .*shared \(uid 0, mode 0777\)"):
        check_trusted(path, path.stat(), "profile")
    shared.chmod(0o777 | stat.S_ISVTX)  # sticky, like /tmp: others cannot replace root's file
    check_trusted(path, path.stat(), "profile")


@AS_ROOT
def test_root_checks_the_directories_a_symlink_leads_through(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o755)
    target = hidden / "real.toml"
    target.write_text("")
    os.chown(hidden, NOBODY, -1)
    link = tmp_path / "p.toml"
    link.symlink_to(target)
    with pytest.raises(Refused, match=r"its directory .*hidden \(uid 65534"):
        read_text(link, "profile", trusted=True)


@AS_ROOT
def test_root_walks_a_path_as_the_kernel_does(tmp_path: Path) -> None:
    """`..` after a symlink is the parent of its target, not of the link: the folder judged
    is the one the kernel goes through (another user's here), whatever the path spells."""
    (tmp_path / "a").mkdir()
    theirs = tmp_path / "b"
    (theirs / "c").mkdir(parents=True)
    (theirs / "x.toml").write_text("")
    os.chown(theirs, NOBODY, -1)
    (tmp_path / "a" / "x.toml").write_text("")  # what `a/link/..` spells, never read
    (tmp_path / "a" / "link").symlink_to(theirs / "c")
    path = tmp_path / "a" / "link" / ".." / "x.toml"
    with pytest.raises(Refused, match=rf"its directory {theirs} \(uid {NOBODY}, mode 0755\)"):
        read_text(path, "profile", trusted=True)
    os.chown(theirs, 0, -1)
    assert read_text(path, "profile", trusted=True) == ""


def test_atomic_write_makes_folders_no_other_user_may_write(tmp_path: Path) -> None:
    """Under umask 0 a plain `mkdir -p` makes 0777 folders, and a root `run` refuses every
    profile in them: the folders atomic_write makes are 0755 less the umask."""
    path = tmp_path / "a" / "b" / "p.toml"
    old = os.umask(0)
    try:
        atomic_write(path, "one\n", replace=False, mode=0o644)
    finally:
        os.umask(old)
    modes = [stat.S_IMODE(folder.stat().st_mode) for folder in (path.parent, path.parent.parent)]
    assert modes == [0o755, 0o755]


def test_atomic_write_respects_the_umask_and_keeps_a_replaced_mode(tmp_path: Path) -> None:
    path = tmp_path / "out" / "unit.service"
    old = os.umask(0o027)
    try:
        atomic_write(path, "one\n", replace=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    path.chmod(0o600)
    atomic_write(path, "two\n", replace=True)
    assert path.read_text() == "two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    atomic_write(path, "three\n", replace=True, mode=0o644)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    with pytest.raises(FileExistsError):
        atomic_write(path, "four\n", replace=False)
    assert path.read_text() == "three\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["unit.service"]


@AS_ROOT
def test_atomic_write_keeps_no_mode_another_user_chose(tmp_path: Path) -> None:
    """Root replacing another user's 0666 file in a sticky folder (a textfile, a profile)
    writes a file of its own with the umask's mode: else that user could write it next."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    path = shared / "metrics.prom"
    path.write_text("planted\n")
    path.chmod(0o666)
    os.chown(path, NOBODY, NOBODY)
    old = os.umask(0o022)
    try:
        atomic_write(path, "one\n", replace=True)
    finally:
        os.umask(old)
    status = path.stat()
    assert (status.st_uid, stat.S_IMODE(status.st_mode)) == (0, 0o644)


def test_atomic_write_leaves_nothing_behind_on_error(tmp_path: Path) -> None:
    path = tmp_path / "out" / "p.toml"
    with pytest.raises(UnicodeEncodeError):
        atomic_write(path, "bad \udce9\n", replace=True)
    assert not path.parent.exists()
    # A full disk, as RLIMIT_FSIZE makes it: the write fails half-way (in a child, so that
    # the limit does not reach pytest's own files).
    script = (
        "import resource, signal, sys; from pathlib import Path; "
        "from nccl_launch.files.writing import atomic_write; "
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY)); "
        "atomic_write(Path(sys.argv[1]), 'x' * 100_000, replace=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert "File too large" in done.stderr
    assert list(path.parent.iterdir()) == []


def test_a_reader_never_sees_half_a_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    atomic_write(path, "a" * 100_000, replace=True)
    seen: set[int] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(len(path.read_text()))

    reader = threading.Thread(target=read)
    reader.start()
    for size in (200_000, 100_000) * 10:
        atomic_write(path, "a" * size, replace=True)
    done.set()
    reader.join()
    assert seen <= {100_000, 200_000}


def test_written_files_follow_the_umask_and_keep_a_replaced_mode(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """convert, systemd -o and check -o write through atomic_write: no fixed 0644."""
    (tmp_path / "profiles" / "srv.toml").write_text(
        'schema = 1\nname = "srv"\nversion = 1\n[server]\nmodel_path = "/m"\n'
    )
    script = tmp_path / "start.sh"
    script.write_text("python3 -m sglang.launch_server --model-path /m\n")
    converted, unit = tmp_path / "out.toml", tmp_path / "srv.service"
    for args in (
        ["convert", str(script), "-o", str(converted)],
        ["systemd", "srv", "-o", str(unit)],
    ):
        done = subprocess.run(
            ["sh", "-c", 'umask 027 && exec "$@"', "sh", console_script(), *args],
            capture_output=True, text=True, check=False, timeout=120
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(converted.stat().st_mode) == 0o640
    assert stat.S_IMODE(unit.stat().st_mode) == 0o640
    unit.chmod(0o600)
    assert run_cli("systemd", "srv", "-o", str(unit), "--force").returncode == 0
    assert stat.S_IMODE(unit.stat().st_mode) == 0o600
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def test_an_output_that_cannot_be_written_is_one_line_naming_it(
    tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd -o and check -o: a folder that is a file, or one this user may not write (as a
    drift timer's User= meets node_exporter's folder), is exit 2 and one line, no traceback."""
    (tmp_path / "profiles" / "srv.toml").write_text(
        'schema = 1\nname = "srv"\nversion = 1\n[server]\nmodel_path = "/m"\n'
    )
    (tmp_path / "file").write_text("")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for command in (["systemd", "srv"], ["check", "srv", "--pid", str(sleeper.pid)]):
            done = run_cli(*command, "-o", str(tmp_path / "file" / "out"))
            assert (done.returncode, done.stderr) == (
                2,
                f"nccl-launch: {tmp_path}/file/out: cannot write: {tmp_path}/file is not a "
                "directory\n",
            )

            def refused(**_: object) -> tuple[int, str]:
                raise PermissionError(13, "Permission denied")

            with monkeypatch.context() as patched:
                patched.setattr("tempfile.mkstemp", refused)
                done = run_cli(*command, "-o", str(tmp_path / "out"))
            assert (done.returncode, done.stderr) == (
                2,
                f"nccl-launch: {tmp_path}/out: cannot write: Permission denied; it is replaced "
                f"by a new file written in {tmp_path}, so that folder must be writable by this "
                "user\n",
            )
    finally:
        sleeper.kill()
        sleeper.wait()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name(f"{path.name}.fifo"))
    path.symlink_to(f"{path.name}.fifo")


def _device(path: Path) -> None:
    """A twin of /dev/null: a character device that is safe to destroy."""
    if os.geteuid() != 0:
        pytest.skip("only root makes a device")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


@pytest.mark.parametrize(
    ("make", "kind", "is_kind"),
    [
        (_fifo, "a FIFO", stat.S_ISFIFO),
        (_link_to_fifo, "a FIFO", stat.S_ISFIFO),
        (_device, "a character device", stat.S_ISCHR),
        (Path.mkdir, "a directory", stat.S_ISDIR),
    ],
    ids=["fifo", "symlink-to-fifo", "device", "directory"],
)
def test_an_output_that_is_no_regular_file_is_refused_by_every_writer(
    make: Any, kind: str, is_kind: Any, tmp_path: Path, run_cli: RunCli
) -> None:
    """check/systemd/convert/capture -o and new's file, with or without --force: exit 2, one
    line naming the path and what it is; the FIFO, device or folder is still there after."""
    (tmp_path / "profiles" / "srv.toml").write_text(
        'schema = 1\nname = "srv"\nversion = 1\n[server]\nmodel_path = "/m"\n'
    )
    (tmp_path / "start.sh").write_text("python3 -m sglang.launch_server --model-path /m\n")
    out, new = tmp_path / "out", Path("profiles/made.toml")
    make(out)
    make(tmp_path / new)
    server = start_standin(tmp_path, {}, [])
    both: list[list[str]] = [[], ["--force"]]
    try:
        for command, path, force in [
            (["check", "srv", "--pid", str(server.pid), "-o", str(out)], out, both[:1]),
            (["systemd", "srv", "-o", str(out)], out, both),
            (["convert", "start.sh", "-o", str(out)], out, both),
            (["capture", "--pid", str(server.pid), "-o", str(out)], out, both),
            (["new", "made"], new, both),
        ]:
            for extra in force:
                done = run_cli(*command, *extra)
                assert (done.returncode, done.stderr) == (
                    2,
                    f"nccl-launch: {path}: {kind}; only a regular file is written\n",
                ), command
    finally:
        server.kill()
        server.wait()
    assert is_kind(out.stat().st_mode)
    assert is_kind((tmp_path / new).stat().st_mode)
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


FULL_DISK = """
import os, resource, sys
from nccl_launch.findings import Refused
from nccl_launch.jsonlines import append_line
path, limit = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # a disk with `limit` bytes
fd = os.open(path, os.O_RDWR | os.O_APPEND)
try:
    append_line(fd, "x" * 100 + "\\n", "tune journal " + path)
except Refused as error:
    print(error.exit_code, error.findings[0].code, error.findings[0].text())
"""


def test_a_line_the_disk_takes_in_part_or_not_at_all_is_a_host_problem(tmp_path: Path) -> None:
    """A full disk (here a file size limit; Python ignores SIGXFSZ, so the write fails or
    writes short) is said, naming the file, with a host problem's exit code."""
    journal = tmp_path / "journal.jsonl"
    journal.write_text("y" * 9 + "\n")
    for limit, said in (
        (50, "only 40 of 101 bytes written"),
        (10, "cannot append: File too large"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", FULL_DISK, str(journal), str(limit)],
            capture_output=True, text=True, check=True, timeout=120
        )  # fmt: skip
        assert done.stdout == f"3 unappendable tune journal {journal}: {said}\n", done.stderr


@pytest.mark.parametrize("command", [["verify-log", "p.toml", "-"], ["convert", "-"]])
def test_a_closed_stdin_is_named_not_an_internal_error(command: list[str], tmp_path: Path) -> None:
    """`<&-` starts the process with no fd 0 at all: Python then has no sys.stdin."""
    (tmp_path / "p.toml").write_text('schema = 1\nname = "p"\nversion = 1\n')
    result = subprocess.run(
        ["bash", "-c", 'exec "$@" <&-', "closed", console_script(), *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "nccl-launch: stdin: closed; give a file, or '-' with something on standard input\n"
    )


# /proc/self/mem is a regular file that opens, and whose first page (unmapped in every
# process) the kernel fails to read: EIO, as a failing disk or network file system gives.
UNREADABLE = "/proc/self/mem"
READING_A_KEY = """schema = 1
name = "p"
version = 1
secret_files = { API_KEY = "/proc/self/mem" }
[server]
model_path = "/m"
args = ["--api-key", "${API_KEY}"]
"""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["validate", UNREADABLE], f"profile {UNREADABLE}"),
        (["validate", "p.toml", UNREADABLE], f"profile {UNREADABLE}"),
        (["run", "--dry-run", "p.toml", "--env-file", UNREADABLE], f"env file {UNREADABLE}"),
        (
            ["run", "--dry-run", "secret.toml"],
            f"secret.toml: secret_files: API_KEY: secret file {UNREADABLE}",
        ),
        (["verify-log", "p.toml", UNREADABLE], f"log {UNREADABLE}"),
        (["convert", UNREADABLE], f"script {UNREADABLE}"),
        (["check", "p.toml", "--pidfile", UNREADABLE], f"pidfile {UNREADABLE}"),
    ],
)
def test_a_file_the_host_fails_to_read_is_exit_3_naming_it(
    command: list[str], said: str, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text('schema = 1\nname = "p"\nversion = 1\n')
    (tmp_path / "secret.toml").write_text(READING_A_KEY)
    result = run_cli(*command)
    assert result.returncode == 3
    assert result.stderr == f"nccl-launch: {said}: cannot read: Input/output error\n"


@AS_ROOT
def test_a_file_with_another_name_in_a_sticky_folder_is_not_read_as_root(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """Where fs.protected_hardlinks is 0 (not here: root makes the link, as another user
    could there), a user may link a root-only file into /tmp under the name a profile's
    secret file has: root's, mode 0600, yet not the file meant. Its second name is refused
    in a folder where any user may add names, and only there."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    key = private / "id_ed25519"
    key.write_text("PRIVATE-KEY-9z\n")
    key.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    os.link(key, shared / "api_key")
    profile = tmp_path / "p.toml"
    profile.write_text(
        'schema = 1\nname = "p"\nversion = 1\n'
        f'secret_files = {{ API_KEY = "{shared / "api_key"}" }}\n'
        '[server]\npython = "/usr/bin/python3"\nmodel_path = "/m"\n'
        'args = ["--api-key", "${API_KEY}"]\n'
    )
    result = run_cli("run", "--dry-run", str(profile))
    assert result.returncode == 3, result.stdout
    assert (
        f"secret file {shared / 'api_key'}: has 2 names, and any user may add one in {shared} "
        "(mode 1777): another user may have linked a file of root's there;"
    ) in result.stderr
    os.link(key, private / "api_key")  # a second name where root alone adds names: read
    profile.write_text(profile.read_text().replace(str(shared), str(private)))
    assert run_cli("run", "--dry-run", str(profile)).returncode == 0


@AS_ROOT
def test_root_writes_nothing_through_another_users_symlink(tmp_path: Path, run_cli: RunCli) -> None:
    """An output named in a folder another user points elsewhere (their symlink in /tmp):
    root would write where they chose, a folder of root's; refused, nothing written."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = shared / "out"
    link.symlink_to(private)
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    script = tmp_path / "start.sh"
    script.write_text("python3 -m sglang.launch_server --model-path /m\n")
    result = run_cli("convert", str(script), "-o", str(link / "p.toml"))
    assert (result.returncode, result.stderr) == (
        2,
        f"nccl-launch: {link}/p.toml: its folder {link}: the symlink {link} (uid {NOBODY}) on "
        "its way is another user's, who may point it elsewhere; name the file itself\n",
    )
    assert list(private.iterdir()) == []
