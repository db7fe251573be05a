"""What only the host can tell: nccl.conf, the NCCL env plugin, GPUs, the port, the model.

Each check says what it saw: a line that passes (preflight's `ok`), or a finding of this host
(exit 3) for each problem."""

from __future__ import annotations

import dataclasses
import errno
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nccl_launch.digits import is_ascii_digits
from nccl_launch.files.paths import is_regular, status_of
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import address, kind_of
from nccl_launch.launch.program import Seen, cwd_seen, problem
from nccl_launch.nccl.conf import ConfEntry, applied, conf_paths
from nccl_launch.serving.table import ServerTable as Server
from nccl_launch.tools import ask

if TYPE_CHECKING:  # the launch's, decided where it is prepared
    from nccl_launch.secrets.values import Secrets

ENV_PLUGIN = "libnccl-env.so"
LIBRARY_DIRS = (
    "/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
)  # fmt: skip
_GPU_LINE = re.compile(r"^GPU [0-9]+: ", re.MULTILINE)
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def conf_checks(env: Mapping[str, str], conf: list[ConfEntry], unreadable: list[Finding]) -> Seen:
    """Which nccl.conf files NCCL will read for this server, and what they still set; with
    the warnings of those that could not be read (`prepare.read_conf`)."""
    seen: Seen = list(unreadable)
    effective = applied(conf, env)
    for path in conf_paths(env):
        mine = [entry for entry in conf if entry.path == str(path)]
        used = [entry for entry in effective if entry.path == str(path)]
        try:
            present = status_of(path, "nccl.conf") is not None
        except Refused:
            continue  # among the files that could not be read, warned above
        if not present:
            seen.append(f"{path}: not present")
        elif not used:
            seen.append(f"{path}: sets nothing the environment does not already set")
        else:
            keys = ", ".join(f"{entry.key}={entry.value} ({entry.where})" for entry in used)
            seen.append(f"{path}: applies {keys}; {len(mine) - len(used)} shadowed")
    return seen


def _library_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where dlopen looks: LD_LIBRARY_PATH, the ld.so cache, the default directories."""
    dirs = [Path(entry) for entry in env.get("LD_LIBRARY_PATH", "").split(":") if entry]
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        cache = ask([ldconfig, "-p"], timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        cache = ""
    for line in cache.splitlines():
        if ENV_PLUGIN in line and "=> " in line:
            dirs.append(Path(line.split("=> ", 1)[1]).parent)
    return dirs + [Path(folder) for folder in LIBRARY_DIRS]


def env_plugin_check(env: Mapping[str, str]) -> str | Finding:
    """NCCL 2.28+ asks an env plugin for every NCCL_* value when one is loaded."""
    plugin = env.get("NCCL_ENV_PLUGIN")
    if plugin == "none":
        return "NCCL_ENV_PLUGIN=none: NCCL reads the process environment"
    if plugin:
        message = f"NCCL_ENV_PLUGIN={plugin} answers every NCCL lookup"
        fix = "the profile holds only if that plugin passes the environment through"
        return problem("env-plugin", message, fix, "warning")
    for folder in _library_dirs(env):
        if is_regular(folder / ENV_PLUGIN):
            message = (
                f"{folder / ENV_PLUGIN} would answer every NCCL lookup (NCCL_ENV_PLUGIN is unset)"
            )
            fix = 'declare ENV_PLUGIN = "none" unless that plugin is intended'
            return problem("env-plugin", message, fix, "warning")
    return f"no {ENV_PLUGIN} on the library path"


def _visible(devices: str, installed: int) -> int:
    """How many GPUs CUDA_VISIBLE_DEVICES leaves: CUDA stops at the first invalid entry."""
    count = 0
    for entry in devices.split(","):
        entry = entry.strip()
        valid = entry.startswith(("GPU-", "MIG-")) or (
            is_ascii_digits(entry) and int(entry) < installed
        )
        if not valid:
            break
        count += 1
    return count


def gpu_check(server: Server, env: Mapping[str, str]) -> str | Finding:
    """`nvidia-smi -L` and CUDA_VISIBLE_DEVICES against the GPUs this node's ranks need."""
    needed = server.tp_size * server.pp_size // server.nnodes
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        message = "no GPU tooling: nvidia-smi is not on PATH (is the NVIDIA driver installed?)"
        return problem("gpus", message)
    try:
        done = ask([smi, "-L"], timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return problem("gpus", f"nvidia-smi -L failed: {error}")
    installed = len(_GPU_LINE.findall(done.stdout)) if done.returncode == 0 else 0
    devices = env.get("CUDA_VISIBLE_DEVICES")
    visible = installed if devices is None else _visible(devices, installed)
    where = f"{installed} installed" + (f", CUDA_VISIBLE_DEVICES={devices}" if devices else "")
    if visible < needed:
        reason = (done.stdout or done.stderr).strip().splitlines()[:1] if not installed else []
        detail = f" ({reason[0]})" if reason else ""
        message = f"{visible} GPUs visible ({where}){detail}; this node's ranks need {needed}"
        return problem("gpus", message)
    return f"{visible} GPUs visible ({where}), {needed} needed"


def port_check(
    server: Server, secrets: Secrets | None = None, digest: str | None = None
) -> str | Finding:
    """The server's port must be free: nothing, another server included, may listen there.
    Who holds it is named by a title that masks the `secrets` of the launch of `digest`: it
    may be a server of that launch, given the same values (one of another, by its profile)."""
    host, port = address(server)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As SGLang and vLLM bind (SO_REUSEADDR): the connections a server just stopped leaves in
        # TIME_WAIT do not keep the next one from the port, a listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                return problem("port", f"cannot bind {host}:{port}: {error.strerror}")
            return problem("port", f"{host}:{port} is in use{_owner(port, secrets, digest)}")
    return f"{host}:{port} is free"


def _owner(port: int, secrets: Secrets | None, digest: str | None) -> str:
    # Imported here: only a taken port needs psutil.
    from nccl_launch.live.resolve import listener_title

    owner = listener_title(port, secrets, digest)
    return "" if owner is None else f" by {owner}"  # who holds it is a courtesy


def path_checks(server: Server) -> Seen:
    """The server's cwd is a directory; the model and the draft model exist here, or are
    Hugging Face ids the server downloads."""
    kind = kind_of(server)
    paths = {"model_path": server.model_path, kind.rules.draft_key: kind.rules.draft_model(server)}
    seen: Seen = [] if server.cwd is None else [cwd_seen(server.cwd)]
    for key, value in paths.items():
        if value is None:
            continue
        try:
            found = status_of(Path(server.cwd or ".") / value, key) is not None
        except Refused as error:
            seen.append(dataclasses.replace(error.findings[0], code="model"))
            continue
        if found:
            seen.append(f"{key} {value} exists")
        elif not value.startswith((".", "/")) and _HUB_ID.fullmatch(value):
            message = f"{key} {value} is not a local path; {kind.title} will fetch it from the Hub"
            seen.append(problem("hub-model", message, severity="warning"))
        else:
            seen.append(problem("model", f"{key} {value} does not exist"))
    return seen
