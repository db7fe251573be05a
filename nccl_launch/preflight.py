"""`preflight`: everything `run` checks, then SGLang's own parser on the exact argv."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from importlib import resources
from typing import Any

from nccl_launch import sglang
from nccl_launch.checks import Check, PreflightReport
from nccl_launch.host import conf_checks, env_plugin_check, gpu_check, path_checks, port_check
from nccl_launch.launch import Launch
from nccl_launch.profile import Server

PROBE_MARK = "NCCL_LAUNCH_PROBE "
PROBE_TIMEOUT_S = 300  # importing SGLang (and torch) on a cold disk is slow


def probe_sglang(server: Server, server_args: list[str]) -> dict[str, Any]:
    """Run the probe under the server's interpreter; the script travels inline (`-c`)
    so that nothing beside it on disk can shadow the `sglang` package."""
    source = resources.files("nccl_launch").joinpath("sglang_probe.py").read_text("utf-8")
    try:
        done = subprocess.run(
            [server.python, "-c", source, *server_args],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd=server.cwd,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"stage": "interpreter", "error": f"cannot run {server.python}: {error}"}
    for line in done.stdout.splitlines():
        if line.startswith(PROBE_MARK):
            result: dict[str, Any] = json.loads(line.removeprefix(PROBE_MARK))
            return result
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return {"stage": "interpreter", "error": f"{server.python} did not answer: {tail[0]}"}


def _expected(server: Server) -> dict[str, object]:
    """What SGLang's parser must read back (its attribute names), for the fields the profile
    sets; the others keep SGLang's defaults."""
    values = sglang.structured_values(server)
    return {field.replace(".", "_"): value for field, value in values.items() if value is not None}


def sglang_checks(server: Server, argv: list[str]) -> tuple[list[Check], dict[str, Any]]:
    """The installed SGLang's version and its parser's verdict on the argv."""
    server_args = argv[1 + len(shlex.split(server.entrypoint)) :]
    result = probe_sglang(server, server_args)
    stage = result.get("stage")
    if stage == "interpreter":
        return [Check(name="sglang", status="fail", message=result["error"])], result
    if stage == "import":
        message = f"cannot import SGLang with {server.python}: {result['error']}"
        return [Check(name="sglang", status="fail", message=message)], result
    where = f"{result['python']}, Python {result['python_version']}"
    checks = [Check(name="sglang", status="ok", message=f"SGLang {result['version']} ({where})")]
    if stage == "parse":
        message = f"SGLang's parser rejects the argv: {result['error']}"
        return [*checks, Check(name="argv", status="fail", message=message)], result
    parsed = result["parsed"]
    differs = [
        f"{key}: SGLang parsed {parsed.get(key)!r}, the profile says {value!r}"
        for key, value in _expected(server).items()
        if parsed.get(key) != value
    ]
    if differs:
        message = "SGLang reads the argv differently from the profile"
        checks.append(Check(name="argv", status="fail", message=message, detail=differs))
    else:
        shown = ", ".join(f"{key}={parsed[key]}" for key in _expected(server) if parsed[key])
        checks.append(Check(name="argv", status="ok", message=f"SGLang's parser accepts: {shown}"))
    return checks, result


SKIPPABLE = ("nccl.conf", "env-plugin", "gpus", "port", "paths", "sglang")


def run_preflight(launch: Launch, skip: frozenset[str] = frozenset()) -> PreflightReport:
    """The profile and the environment, then the host and SGLang, less the `skip`ped checks."""
    plan, profile, env = launch.plan, launch.loaded.profile, launch.merged.env
    valid = f"{plan.label} ({plan.short_digest}) from {launch.loaded.path} is valid"
    checks = [Check(name="profile", status="ok", message=valid)]
    checks += [Check(name="profile", status="warn", message=note) for note in profile.lint()]
    refusal = launch.refusal()
    if refusal is None:
        matched = len(launch.merged.report.matched)
        declared = len(plan.env)
        message = f"no drift: the profile sets {declared} variables, {matched} already inherited"
        checks.append(Check(name="environment", status="ok", message=message))
    else:
        lines = refusal.splitlines()
        drift = Check(name="environment", status="fail", message=lines[-1], detail=lines[1:-1])
        checks.append(drift)
    host: dict[str, Callable[[], list[Check]]] = {
        "nccl.conf": lambda: conf_checks(env, launch.conf, launch.unreadable_conf),
        "env-plugin": lambda: [env_plugin_check(env)],
    }
    server = profile.server
    if server is not None:
        host |= {
            "gpus": lambda: [gpu_check(server, env)],
            "port": lambda: [port_check(server)],
            "paths": lambda: path_checks(server),
        }
    for name, run in host.items():
        if name not in skip:
            checks += run()
    probe: dict[str, Any] | None = None
    if server is not None and "sglang" not in skip:
        more, probe = sglang_checks(server, launch.argv)
        checks += more
    return PreflightReport(
        profile=plan.label, digest=plan.digest, argv=launch.argv, checks=checks, sglang=probe
    )
