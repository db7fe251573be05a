"""Preflight's host checks with real files, sockets and stand-in `nvidia-smi` programs."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Protocol

import pytest

from nccl_launch.nccl.conf import applied, conf_paths, parse
from tests.conftest import Isolation, RunCli, WriteProfile
from tests.helpers import free_port

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
    ]
    assert entries[1].where == "/etc/nccl.conf:3"


def test_conf_long_lines_are_cut_like_ncclss_buffer() -> None:
    [entry] = parse("NCCL_TOPO_FILE=" + "x" * 5000 + "\n", "f")
    assert len(entry.key) + 1 + len(entry.value) == 4095


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
    write_profile: WriteProfile, nccl_launch: RunCli
) -> None:
    write_profile("conf", ENV_ONLY.format(extra=""))
    conf = Path(os.environ["HOME"]) / ".nccl.conf"
    conf.write_text("# site defaults\nNCCL_PROTO=Simple\nNCCL_IB_HCA=mlx5_0\nNCCL_PROTOCOL=LL\n")
    result = nccl_launch("run", "conf", "--", "true")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[1].split()[:3] == ["+", "NCCL_IB_HCA", '"mlx5_0"']
    assert f"({conf}:3; undeclared)" in lines[1]
    assert f"({conf}:4; undeclared, unknown to NCCL; did you mean NCCL_PROTO?)" in lines[2]
    assert "NCCL_PROTO " not in result.stderr.replace("NCCL_PROTOCOL", "")  # the env wins


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
    write_profile: WriteProfile, nccl_launch: RunCli, isolated: Isolation
) -> None:
    write_profile("conf", ENV_ONLY.format(extra=""))
    isolated.system_conf.parent.mkdir(parents=True)
    isolated.system_conf.write_text("NCCL_IB_HCA=mlx5_0\n")
    result = nccl_launch("run", "conf", "--", "true")
    assert result.returncode == 1
    assert f'NCCL_IB_HCA  "mlx5_0"  ({isolated.system_conf}:1; undeclared)' in result.stderr


# Preflight with stand-ins for the GPU tooling: no GPU exists here.

SERVER = """
schema = 1
name = "host"
version = 1
[server]
python = "{python}"
model_path = "{model}"
tp_size = {tp}
port = {port}
{extra}
"""


def fake_nvidia_smi(folder: Path, gpus: int) -> None:
    """`nvidia-smi -L` as the driver prints it; with no GPU it fails like the real one."""
    folder.mkdir(exist_ok=True)
    lines = "".join(
        f"echo 'GPU {n}: NVIDIA RTX PRO 6000 Blackwell Workstation Edition (UUID: GPU-{n:08x})'\n"
        for n in range(gpus)
    )
    body = lines if gpus else "echo 'No devices were found'\nexit 6\n"
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}")
    script.chmod(0o755)


Checks = dict[str, list[dict[str, Any]]]  # preflight's JSON checks, by name


class Preflight(Protocol):
    def __call__(
        self, gpus: int | None = 8, tp: int = 8, model: str | None = None, extra: str = "",
        env: dict[str, str] | None = None, port: int | None = None,
    ) -> tuple[int, Checks]: ...  # fmt: skip


@pytest.fixture
def host(write_profile: WriteProfile, nccl_launch: RunCli, tmp_path: Path) -> Preflight:
    """`preflight` of a TP server profile, with `gpus` GPUs behind a stand-in nvidia-smi."""

    def preflight(
        gpus: int | None = 8, tp: int = 8, model: str | None = None, extra: str = "",
        env: dict[str, str] | None = None, port: int | None = None,
    ) -> tuple[int, Checks]:  # fmt: skip
        if model is None:
            (tmp_path / "model").mkdir(exist_ok=True)
            model = str(tmp_path / "model")
        write_profile("host", SERVER.format(python=sys.executable, model=model, tp=tp,
                                            port=port or free_port(), extra=extra))  # fmt: skip
        bin_dir = tmp_path / "bin"
        if gpus is not None:
            fake_nvidia_smi(bin_dir, gpus)
        # Only the stand-in: a GPU host's own nvidia-smi in /usr/bin must not answer.
        path = str(bin_dir)
        result = nccl_launch("preflight", "--skip", "sglang", "--format", "json", "host",
                             env={"PATH": path, **(env or {})})  # fmt: skip
        checks: Checks = {}
        for check in json.loads(result.stdout)["checks"]:
            checks.setdefault(check["name"], []).append(check)
        return result.returncode, checks

    return preflight


def test_eight_gpus_for_tp8_pass(host: Preflight) -> None:
    code, checks = host(gpus=8)
    assert code == 0, checks
    assert checks["gpus"][0]["message"] == "8 GPUs visible (8 installed), 8 needed"


def test_too_few_gpus_fail(host: Preflight) -> None:
    code, checks = host(gpus=4)
    assert code == 3
    assert checks["gpus"][0]["status"] == "fail"
    assert checks["gpus"][0]["message"] == "4 GPUs visible (4 installed); this node's ranks need 8"


def test_cuda_visible_devices_limits_the_gpus(host: Preflight) -> None:
    code, checks = host(gpus=8, env={"CUDA_VISIBLE_DEVICES": "0,1,9,3"})
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "2 GPUs visible (8 installed, CUDA_VISIBLE_DEVICES=0,1,9,3); this node's ranks need 8"
    )


def test_no_gpu_found_by_the_driver_fails_with_its_words(host: Preflight) -> None:
    code, checks = host(gpus=0)
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "0 GPUs visible (0 installed) (No devices were found); this node's ranks need 8"
    )


def test_no_gpu_tooling_at_all_fails_clearly(host: Preflight) -> None:
    code, checks = host(gpus=None)
    assert code == 3
    assert checks["gpus"][0]["message"] == (
        "no GPU tooling: nvidia-smi is not on PATH (is the NVIDIA driver installed?)"
    )


def test_a_busy_port_fails_naming_who_holds_it(host: Preflight) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code, checks = host(port=port)
    assert code == 3
    message = checks["port"][0]["message"]
    assert message.startswith(f"127.0.0.1:{port} is in use by pid {os.getpid()} (")


def test_missing_model_and_draft_paths_fail_hub_ids_warn(host: Preflight, tmp_path: Path) -> None:
    speculative = (
        '[server.speculative]\nalgorithm = "EAGLE3"\n'
        f'draft_model_path = "{tmp_path / "no-draft"}"\n'
    )
    code, checks = host(model=str(tmp_path / "no-model"), extra=speculative)
    assert code == 3
    assert [(c["status"], c["message"]) for c in checks["paths"]] == [
        ("fail", f"model_path {tmp_path / 'no-model'} does not exist"),
        ("fail", f"draft_model_path {tmp_path / 'no-draft'} does not exist"),
    ]
    code, checks = host(model="meta-llama/Llama-3.1-8B-Instruct")
    assert code == 0
    assert checks["paths"][0]["status"] == "warn"


def test_an_env_plugin_on_the_library_path_is_warned(host: Preflight, tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "libnccl-env.so").write_bytes(b"\x7fELF")
    code, checks = host(env={"LD_LIBRARY_PATH": str(libs)})
    assert code == 0
    assert checks["env-plugin"][0]["status"] == "warn"
    assert checks["env-plugin"][0]["message"].startswith(f"{libs}/libnccl-env.so would answer")
    code, checks = host(env={"LD_LIBRARY_PATH": str(libs)}, extra='[nccl]\nENV_PLUGIN = "none"')
    assert checks["env-plugin"][0] == {
        "name": "env-plugin", "status": "ok", "detail": [], "drift": None,
        "message": "NCCL_ENV_PLUGIN=none: NCCL reads the process environment",
    }  # fmt: skip


def test_nccl_conf_lines_name_what_applies(host: Preflight, isolated: Isolation) -> None:
    conf = isolated.home / ".nccl.conf"
    conf.write_text("NCCL_SOCKET_IFNAME=eth0\n")
    code, checks = host(extra='[policy]\nundeclared_nccl = "warn"')
    assert code == 0
    assert checks["nccl.conf"][0]["message"] == (
        f"{conf}: applies NCCL_SOCKET_IFNAME=eth0 ({conf}:1); 0 shadowed"
    )
    assert checks["nccl.conf"][1]["message"] == f"{isolated.system_conf}: not present"
    isolated.system_conf.parent.mkdir(parents=True)
    isolated.system_conf.write_text("NCCL_SOCKET_IFNAME=eth1\nNCCL_IB_HCA=mlx5_0\n")
    code, checks = host(extra='[policy]\nundeclared_nccl = "warn"')
    assert code == 0
    system = isolated.system_conf
    assert checks["nccl.conf"][1]["message"] == (
        f"{system}: applies NCCL_IB_HCA=mlx5_0 ({system}:2); 1 shadowed"
    )
