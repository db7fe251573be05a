"""`preflight`: everything `run` checks, then the server's own parser on the exact argv."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from nccl_launch.env.merge import EnvLayer
from nccl_launch.escaping import escaped
from nccl_launch.findings import Finding
from nccl_launch.kinds import kind_of
from nccl_launch.launch.check_names import CheckName
from nccl_launch.launch.host import (
    conf_checks,
    env_plugin_check,
    gpu_check,
    path_checks,
    port_check,
)
from nccl_launch.launch.preflight_report import Check, PreflightReport
from nccl_launch.launch.prepare import LaunchPlan
from nccl_launch.launch.program import SERVER_PYTHON, Seen, program_seen, start_findings
from nccl_launch.profile.lint import review
from nccl_launch.secrets.values import Quoted, Secrets
from nccl_launch.serving.table import ServerTable


def _cut(text: str, columns: int) -> str:
    """The start of `text` that fits in `columns` terminal cells: a wide character (CJK)
    takes two, a combining mark none."""
    import unicodedata  # only on a terminal

    used = 0
    for index, char in enumerate(text):
        wide = unicodedata.east_asian_width(char) in "WF"
        used += 0 if unicodedata.combining(char) else 2 if wide else 1
        if used > columns:
            return text[:index]
    return text


PROGRESS_S = 5.0  # a wait shorter than this says nothing where stderr is no terminal


@contextmanager
def waiting_for(what: str, timeout: float) -> Iterator[None]:
    """While the body runs, stderr says what preflight waits for (never stdout: `--format
    json` stays whole). On a terminal, one status line from the start, its seconds updated
    every PROGRESS_S and erased when the wait ends; where stderr is a file or a pipe (a
    pod's log, the journal), a line every PROGRESS_S, so that a slow wait is never silent and
    a quick one says nothing. A terminal's line is cut to its width less one: `\\x1b[K`
    erases only the row the cursor is on, so a line that wrapped would leave its first rows
    behind."""
    terminal = sys.stderr.isatty()
    width = 0
    if terminal:
        try:
            width = os.get_terminal_size(sys.stderr.fileno()).columns or 80
        except OSError:
            width = 80

    def say(text: str, erase: str = "\r\x1b[K") -> None:
        """On a terminal the status line, over the one before (`erase`: back to the line's
        start, erase to its end); elsewhere a line of its own."""
        line = escaped(f"preflight: {what}...{text}")
        if terminal:
            sys.stderr.write(erase + _cut(line, max(width - 1, 1)))
        else:
            sys.stderr.write(f"{line}\n")
        sys.stderr.flush()

    if terminal:
        say("", erase="")
    done, started = threading.Event(), time.monotonic()

    def tick() -> None:
        while not done.wait(PROGRESS_S):
            waited = time.monotonic() - started
            say(f" {waited:.0f} s (gives up after {timeout:g} s: --timeout)")

    ticking = threading.Thread(target=tick, daemon=True)
    ticking.start()
    try:
        yield
    finally:
        done.set()
        ticking.join()
        if terminal:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def lines_of(name: CheckName, seen: Seen) -> list[Check]:
    """A check's lines: what passes, and each finding (an error fails, a warning warns)."""
    return [
        Check(name=name, passed=each) if isinstance(each, str) else Check(name=name, finding=each)
        for each in seen
    ]


def _failed(code: str, name: CheckName, message: Quoted, fix: str = "") -> Check:
    """A failed check of the server's: its words masked as the report shows them."""
    return Check(name=name, finding=Finding(code, "", message.shown(), fix, cause="host"))


def server_checks(
    server: ServerTable,
    argv: list[str],
    env: Mapping[str, str],
    secrets: Secrets,
    timeout: float,
) -> tuple[list[Check], dict[str, Any] | Finding]:
    """The installed server's version and its parser's verdict on the argv, in the server's
    environment `env`, given in `timeout` seconds; what the server says quoted, to be masked
    with the `secrets` given to it where it is shown, or why it was never started.
    The check is named after the kind, as `--skip` names it."""
    kind = kind_of(server)
    name = kind.name
    # What keeps `run` from starting the server keeps it from answering: said as `run` says it.
    unstarted = start_findings(server.python, SERVER_PYTHON, server.cwd, env)
    if unstarted:
        return lines_of(name, [unstarted[0]]), unstarted[0]
    parser = importlib.import_module(kind.probe)  # not on `run`'s path
    with waiting_for(f"{server.python} imports {kind.title} and parses the argv", timeout):
        result = parser.probe(server, argv, env, timeout)
    said = secrets.quoting  # what the server says, masked where it is shown
    stage = result.get("stage")
    if stage == "interpreter":
        return [_failed("interpreter", name, said("", result["error"]))], result
    if stage == "timeout":
        fix = (
            "a cold disk or a loaded host may need longer: --timeout SECONDS, "
            f"or leave the check out: --skip {name}"
        )
        return [_failed("probe-timeout", name, said("", result["error"]), fix)], result
    if stage == "import":
        message = said(f"cannot import {kind.title} with {server.python}: ", result["error"])
        return [_failed("server-import", name, message)], result
    version, python = result["version"], f"{result['python']}, Python {result['python_version']}"
    checks = [Check(name=name, passed=said(f"{kind.title} ", version, " (", python, ")"))]
    if stage == "parse":
        message = said(f"{kind.title}'s parser rejects the argv: ", result["error"])
        return [*checks, _failed("argv-rejected", "argv", message)], result
    parsed, expected = result["parsed"], parser.expected_values(server)
    differs = [
        said(f"{key}: ", f"{kind.title} parsed {parsed.get(key)!r}, the profile says {value!r}")
        for key, value in expected.items()
        if parsed.get(key) != value
    ]
    if differs:
        reads = f"{kind.title} reads the argv differently from the profile"
        shown = tuple(each.shown() for each in differs)
        finding = Finding("argv-differs", "", reads, cause="host", details=shown)
        checks.append(Check(name="argv", finding=finding))
    else:
        accepted = ", ".join(f"{key}={parsed[key]}" for key in expected if parsed[key])
        checks.append(Check(name="argv", passed=said(f"{kind.title}'s parser accepts: ", accepted)))
    return checks, result


def _from_files(layers: Sequence[EnvLayer]) -> str:
    """How many variables of the server's environment the profile's env files and secret
    files set (a name two env files set is one), and the secret files' that only fill its
    arguments: ` (2 from its env files, 1 from its secret files; API_KEY only fills its
    arguments)`."""
    counts: dict[str, set[str]] = {"env files": set(), "secret files": set()}
    arguments: list[str] = []
    for layer in layers:
        if not layer.exported:
            arguments += layer.values
            continue
        counts["secret files" if layer.secret else "env files"].update(layer.values)
    verb = "only fills" if len(arguments) == 1 else "only fill"
    parts = [
        ", ".join(f"{len(names)} from its {what}" for what, names in counts.items() if names),
        f"{', '.join(arguments)} {verb} its arguments" if arguments else "",
    ]
    said = "; ".join(part for part in parts if part)
    return f" ({said})" if said else ""


def run_preflight(
    launch: LaunchPlan, timeout: float, skip: frozenset[str] = frozenset()
) -> PreflightReport:
    """The profile and the environment, then the host and the server (its answer awaited
    `timeout` seconds), less the `skip`ped checks."""
    plan, env = launch.plan, launch.merged.env
    profile = launch.loaded.profile
    valid = f"{plan.label} ({plan.short_digest}) from {launch.path} is valid"
    checks = [Check(name="profile", passed=valid)]
    checks += [Check(name="profile", finding=note) for note in review(profile).warnings]
    report = launch.merged.report
    if report.drifted:
        drifts = Finding("environment-drift", "", report.summary(), cause="drift")
        checks.append(Check(name="environment", finding=drifts, drift=report))
    else:
        exported = {key for layer in launch.env_files if layer.exported for key in layer.values}
        matched, files = len(report.matched), _from_files(launch.env_files)
        declared = len(plan.env) + len(exported)
        message = (
            f"no drift: the profile sets {declared} variables{files}, {matched} already inherited"
        )
        # What is tolerated is shown, as `run --dry-run` and `check` show it.
        shown = report if report.entries else None
        checks.append(Check(name="environment", passed=message, drift=shown))
    host: dict[CheckName, Callable[[], Seen]] = {
        "nccl.conf": lambda: conf_checks(env, launch.conf, launch.unreadable_conf),
        "env-plugin": lambda: [env_plugin_check(env)],
    }
    server = profile.server
    if server is not None:
        host |= {
            "gpus": lambda: [gpu_check(server, env)],
            "port": lambda: [port_check(server, launch.secrets, launch.plan.digest)],
            "python": lambda: [program_seen(server.python, SERVER_PYTHON, server.cwd, env)],
            "paths": lambda: path_checks(server),
        }
    for name, run in host.items():
        if name not in skip:
            checks += lines_of(name, run())
    answers: dict[str, dict[str, Any] | Finding] = {}  # the kind's answer, on the argv it parsed
    if server is not None and kind_of(server).name not in skip:
        more, answer = server_checks(server, launch.filled, env, launch.secrets, timeout)
        # Every text of it (its error, the parsed values) masked where shown, as it says it.
        answers[kind_of(server).name] = launch.secrets.quoting_texts(answer)
        checks += [check for check in more if check.name not in skip]
    return PreflightReport(
        profile=plan.label,
        digest=plan.digest,
        argv=launch.shown_argv,
        checks=checks,
        answers=answers,
    )
