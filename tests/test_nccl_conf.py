"""nccl.conf: NCCL's syntax and precedence, the files it reads, and what `run` makes of them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nccl_launch.nccl.conf import applied, conf_paths, parse
from tests.conftest import Isolation, RunCli, WriteProfile

# nccl.conf syntax, as src/misc/param.cc reads it.


def test_conf_syntax_is_nccls_not_a_shells() -> None:
    text = (
        "# a comment in column 0\n"
        " # NCCL_PROTO=Simple\n"  # '#' only comments in column 0: this sets ' # NCCL_PROTO'
        "NCCL_PROTO=LL\n"
        "NCCL_ALGO = Ring\n"  # key 'NCCL_ALGO ', value ' Ring'
        'NCCL_SOCKET_IFNAME="eth0"\n'  # the quotes are part of the value
        "NCCL_DEBUG_FILE=/tmp/nccl.%h.log=x\n"  # only the first '=' splits
        "NCCL_IB_HCA=mlx5_0\r\n"  # CR stripped (NCCL 2.30+)
        "export NCCL_NTHREADS=256\n"  # no `export`: the key has a space in it
        "NCCL_EMPTY=\n"
        "=no key\n"
        "no equals sign\n"
        "NCCL_SOCKET_IFNAME=eth1\0 ignored\n"  # NCCL reads a C string: it ends at the NUL
        "NCCL_\0NTHREADS=64\n"  # no '=' before the NUL: skipped
    )
    entries = parse(text, "/etc/nccl.conf")
    assert [(e.line, e.key, e.value) for e in entries] == [
        (2, " # NCCL_PROTO", "Simple"),
        (3, "NCCL_PROTO", "LL"),
        (4, "NCCL_ALGO ", " Ring"),
        (5, "NCCL_SOCKET_IFNAME", '"eth0"'),
        (6, "NCCL_DEBUG_FILE", "/tmp/nccl.%h.log=x"),
        (7, "NCCL_IB_HCA", "mlx5_0"),
        (8, "export NCCL_NTHREADS", "256"),
        (9, "NCCL_EMPTY", ""),
        (12, "NCCL_SOCKET_IFNAME", "eth1"),
    ]
    assert entries[1].where == "/etc/nccl.conf:3"


def test_conf_long_lines_continue_as_assignments_and_each_field_is_cut_at_1023_bytes() -> None:
    # fgets into 4096 bytes: 4095 bytes a read; the rest of the line is read as a line of its
    # own. strncpy(..., 1023) cuts the key and the value.
    long_value = "NCCL_TOPO_FILE=" + "x" * 4080 + "NCCL_IB_HCA=mlx5_9"  # rest starts at byte 4095
    text = long_value + "\nNCCL_PROTO=LL\n" + "K" * 1100 + "=v\n" + "A" * 4095 + "\n"
    first, smuggled, second, third = parse(text, "f")
    assert (first.line, first.key, first.value) == (1, "NCCL_TOPO_FILE", "x" * 1023)
    assert (smuggled.line, smuggled.key, smuggled.value) == (1, "NCCL_IB_HCA", "mlx5_9")
    assert (second.line, second.key, second.value) == (2, "NCCL_PROTO", "LL")
    assert (third.key, third.value) == ("K" * 1023, "v")  # the 4095-byte line: no '=', skipped


def test_conf_a_continuation_is_read_like_a_line() -> None:
    comment = "#" + "c" * 4094 + "NCCL_ALGO=Tree\n"  # a comment's rest is no comment
    cr = "NCCL_DEBUG=WARN\r\n"
    entries = parse(comment + cr, "f")
    assert [(e.line, e.key, e.value) for e in entries] == [
        (1, "NCCL_ALGO", "Tree"),
        (2, "NCCL_DEBUG", "WARN"),
    ]


def test_conf_value_is_cut_at_1023_bytes_not_characters() -> None:
    raw = ("NCCL_SOCKET_IFNAME=" + "a" * 1022 + "é\n").encode()  # é is 2 bytes: cut in two
    [entry] = parse(raw.decode("utf-8", "surrogateescape"), "f")
    assert entry.value.encode("utf-8", "surrogateescape") == b"a" * 1022 + "é".encode()[:1]


def test_conf_precedence_environment_then_first_file() -> None:
    user = parse("NCCL_PROTO=Simple\nNCCL_IB_HCA=mlx5_1\n", "/home/u/.nccl.conf")
    system = parse("NCCL_IB_HCA=mlx5_0\nNCCL_SOCKET_IFNAME=eth0\n", "/etc/nccl.conf")
    effective = applied(user + system, {"NCCL_PROTO": "LL"})
    assert [(e.key, e.value, e.where) for e in effective] == [
        ("NCCL_IB_HCA", "mlx5_1", "/home/u/.nccl.conf:2"),
        ("NCCL_SOCKET_IFNAME", "eth0", "/etc/nccl.conf:2"),
    ]


@pytest.mark.parametrize(
    ("env", "paths"),
    [
        ({"HOME": "/home/u"}, ["/home/u/.nccl.conf", "/etc/nccl.conf"]),
        ({"HOME": "/home/u", "NCCL_CONF_FILE": "/opt/n.conf"}, ["/opt/n.conf", "/etc/nccl.conf"]),
        ({"HOME": "/home/u", "NCCL_CONF_FILE": ""}, ["/home/u/.nccl.conf", "/etc/nccl.conf"]),
        ({}, ["/etc/nccl.conf"]),
        ({"NCCL_LAUNCH_SYSTEM_CONF": "/srv/etc/nccl.conf"}, ["/srv/etc/nccl.conf"]),
        ({"NCCL_LAUNCH_SYSTEM_CONF": ""}, ["/etc/nccl.conf"]),
    ],
)
def test_conf_file_choice(env: dict[str, str], paths: list[str]) -> None:
    assert [str(path) for path in conf_paths(env)] == paths


ENV_ONLY = 'schema = 1\nname = "conf"\nversion = 1\n[nccl]\nPROTO = "LL"\n{extra}'


def test_run_refuses_an_undeclared_value_from_the_users_nccl_conf(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("conf", ENV_ONLY.format(extra=""))
    conf = Path(os.environ["HOME"]) / ".nccl.conf"
    conf.write_text("# site defaults\nNCCL_PROTO=Simple\nNCCL_IB_HCA=mlx5_0\nNCCL_PROTOCOL=LL\n")
    result = run_cli("run", "conf", "--", "true")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[1].split()[:3] == ["+", "NCCL_IB_HCA", '"mlx5_0"']
    assert f"({conf}:3; undeclared)" in lines[1]
    assert f"({conf}:4; undeclared, unknown to NCCL; did you mean NCCL_PROTO?)" in lines[2]
    assert "NCCL_PROTO " not in result.stderr.replace("NCCL_PROTOCOL", "")  # the env wins


def test_a_refusal_says_how_to_fix_it_once_naming_each_place_a_value_came_from(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    """One fix line per kind of drift, not per variable: the remedy for the calling
    environment, an --env-file and an nccl.conf, each once, and the [policy] to tolerate."""
    write_profile("conf", ENV_ONLY.format(extra=""))
    conf = Path(os.environ["HOME"]) / ".nccl.conf"
    conf.write_text("NCCL_IB_HCA=mlx5_0\nNCCL_IB_GID_INDEX=3\n")
    env_file = tmp_path / "site.env"
    env_file.write_text("NCCL_SOCKET_IFNAME=eth0\n")
    caller = {"NCCL_IB_TIMEOUT": "20", "NCCL_NET_GDR_LEVEL": "PHB"}  # NCCL_DEBUG has its own
    result = run_cli("run", "conf", "--env-file", str(env_file), "--", "true", env=caller)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "fix + (undeclared): declare it in [nccl] with the value the server should get, unset "
        "it in the calling environment (the shell, the unit's Environment=), remove it from "
        f"env file {env_file}, remove it from {conf}, or let the server have it: [policy] "
        'undeclared_nccl = "warn"'
    )
    assert result.stderr.count("fix ") == 1


def test_a_declared_conf_file_replaces_the_users_and_warn_tolerates(
    write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path
) -> None:
    (Path(os.environ["HOME"]) / ".nccl.conf").write_text("NCCL_IB_HCA=mlx5_0\n")
    site = tmp_path / "site.conf"
    site.write_text("NCCL_SOCKET_IFNAME=eth0\n")
    extra = f'CONF_FILE = "{site}"\n[policy]\nundeclared_nccl = "warn"\n'
    write_profile("conf", ENV_ONLY.format(extra=extra))
    result = nccl_launch("run", "conf", "--", "true")
    assert result.returncode == 0, result.stderr
    assert "NCCL_IB_HCA" not in result.stderr  # ~/.nccl.conf is not read any more
    assert f'NCCL_SOCKET_IFNAME  "eth0"  ({site}:1; undeclared; tolerated)' in result.stderr


def test_run_reads_the_system_conf_where_the_launcher_variable_points(
    write_profile: WriteProfile, run_cli: RunCli, isolated: Isolation
) -> None:
    write_profile("conf", ENV_ONLY.format(extra=""))
    isolated.system_conf.parent.mkdir(parents=True)
    isolated.system_conf.write_text("NCCL_IB_HCA=mlx5_0\n")
    result = run_cli("run", "conf", "--", "true")
    assert result.returncode == 1
    assert f'NCCL_IB_HCA  "mlx5_0"  ({isolated.system_conf}:1; undeclared)' in result.stderr


# Reading the files: only regular files, trusted as root; an absent one is the usual case.


def _declaring(write_profile: WriteProfile, conf: Path | str) -> None:
    write_profile("conf", ENV_ONLY.format(extra=f'CONF_FILE = "{conf}"\n'))


def test_a_device_or_fifo_as_nccl_conf_is_a_warning_not_a_hang(
    write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "fifo.conf")
    for conf, kind in ((tmp_path / "fifo.conf", "a FIFO"), ("/dev/zero", "a character device")):
        _declaring(write_profile, conf)
        result = nccl_launch("run", "conf", "--", "true")
        assert result.returncode == 0, result.stderr
        assert f"warning: nccl.conf {conf}: {kind}; only regular files are read" in result.stderr
    # /dev/null is how one tells NCCL to read no file: nothing to warn about.
    _declaring(write_profile, "/dev/null")
    assert nccl_launch("run", "conf", "--", "true").stderr == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
def test_root_refuses_an_nccl_conf_others_could_replace(
    write_profile: WriteProfile, run_cli: RunCli, nccl_launch: RunCli, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    conf = shared / "nccl.conf"
    conf.write_text("NCCL_PROTO=Simple\n")
    _declaring(write_profile, conf)
    ran = tmp_path / "ran"
    result = run_cli("run", "conf", "--", "touch", str(ran))
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"nccl-launch: nccl.conf {conf}: its directory {shared} (uid 0, mode 0777) lets other "
        "users replace it; chown root and chmod go-w"
    )
    assert not ran.exists()
    assert run_cli("preflight", "conf").returncode == 2
    conf.unlink()  # absent: NCCL reads it when the server starts, whoever created it first
    for mode in (0o777, 0o1777):  # sticky as /tmp: anyone may still create a new name there
        shared.chmod(mode)
        absent = run_cli("run", "conf", "--", "touch", str(ran))
        assert (absent.returncode, absent.stderr) == (
            2,
            f"nccl-launch: nccl.conf {conf}: absent, and NCCL reads it later: {shared} (uid 0, "
            f"mode {mode:04o}) lets another user create it first; point it at a folder root "
            "alone writes, or create the file (root's, mode 0644)\n",
        )
    assert not ran.exists()
    shared.chmod(0o755)  # absent where root alone writes: the usual case, not a refusal
    assert nccl_launch("run", "conf", "--", "touch", str(ran)).returncode == 0
    assert ran.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
def test_root_refuses_the_calling_envs_conf_file_and_a_writable_home_conf(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    write_profile("conf", ENV_ONLY.format(extra='[policy]\nundeclared_nccl = "warn"\n'))
    conf = tmp_path / "site.conf"
    conf.write_text("NCCL_IB_HCA=mlx5_0\n")
    conf.chmod(0o646)
    ran = tmp_path / "ran"
    env = {"NCCL_CONF_FILE": str(conf)}
    result = run_cli("run", "conf", "--", "touch", str(ran), env=env)
    assert result.returncode == 2
    assert f"nccl.conf {conf}: writable by group or others (mode 0646)" in result.stderr
    home_conf = Path(os.environ["HOME"]) / ".nccl.conf"
    home_conf.write_text("NCCL_IB_HCA=mlx5_0\n")
    home_conf.chmod(0o664)
    result = run_cli("run", "conf", "--", "touch", str(ran))
    assert result.returncode == 2
    assert f"nccl.conf {home_conf}: writable by group or others (mode 0664)" in result.stderr
    assert not ran.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="trust is checked for root only")
def test_an_nccl_conf_others_could_replace_is_refused_with_the_starts_other_problems(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    _declaring(write_profile, tmp_path / "site.conf")
    conf = tmp_path / "site.conf"
    conf.write_text("NCCL_PROTO=Simple\n")
    conf.chmod(0o646)
    result = run_cli("run", "conf", "--node-rank", "1", "--", "true")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "nccl-launch: profile conf@1 has no [server] table to place on a node",
        f"nccl-launch: nccl.conf {conf}: writable by group or others (mode 0646); chown root "
        "and chmod go-w, or move it out of reach of other users",
    ]


def test_bytes_of_an_nccl_conf_that_are_not_utf8_are_kept_and_shown_in_json(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    conf = tmp_path / "site.conf"
    conf.write_bytes(b"NCCL_SOCKET_IFNAME=e\xe9th0\n")
    _declaring(write_profile, conf)
    skip = ("--skip", "gpus", "--skip", "sglang", "--skip", "port", "--skip", "paths")
    result = run_cli("preflight", "conf", "--format", "json", *skip)
    assert result.returncode == 1, result.stderr  # undeclared: drift, not a crash
    [check] = [check for check in json.loads(result.stdout)["checks"] if check["drift"]]
    [entry] = check["drift"]["entries"]
    assert entry["key"] == "NCCL_SOCKET_IFNAME"
    assert entry["actual"].encode("utf-8", "surrogateescape") == b"e\xe9th0"  # NCCL's bytes
