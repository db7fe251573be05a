"""The command line: parse, call one core function, render, return an exit code."""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click
import tomli_w

from nccl_launch import __version__, exports, live
from nccl_launch.check import LiveReport
from nccl_launch.errors import (
    EXIT_DRIFT,
    EXIT_HOST,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    DriftError,
    NcclLaunchError,
    ProfileError,
    UsageError,
)
from nccl_launch.files import atomic_write
from nccl_launch.launch import Launch, Placement, exec_command, prepare_launch
from nccl_launch.live import OnDrift
from nccl_launch.loader import LoadedProfile, load_profile, profile_files, search_dirs
from nccl_launch.migrate import (
    StartCommand,
    build_profile,
    read_process,
    read_script,
    write_profile,
)
from nccl_launch.ncclog import verify
from nccl_launch.plan import build_plan, profile_changes
from nccl_launch.preflight import SKIPPABLE, run_preflight
from nccl_launch.procs import Target
from nccl_launch.profile import Profile
from nccl_launch.prometheus import metrics
from nccl_launch.render import (
    changes_text,
    command_line,
    drift_lines,
    env_changes,
    live_text,
    log_lines,
    preflight_lines,
)
from nccl_launch.schema import profile_schema
from nccl_launch.unit import unit_file

JSON_SCHEMA_VERSION = 1


def _warn(message: str) -> None:
    click.echo(f"nccl-launch: warning: {message}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nccl-launch")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error.")
def cli(debug: bool) -> None:
    """Start a server with the NCCL environment its profile declares, or refuse with a diff."""


F = TypeVar("F", bound=Callable[..., Any])
PASS_THROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def launch_options(command: F) -> F:
    """PROFILE, the arguments after `--` and the options `run` and `preflight` share."""
    for decorator in reversed(
        [
            click.argument("profile"),
            click.argument("command", nargs=-1, type=click.UNPROCESSED),
            click.option(
                "--env-file",
                "env_files",
                multiple=True,
                type=click.Path(path_type=Path),
                help="dotenv file applied over the calling environment (repeatable, later wins).",
            ),
            click.option(
                "--node-rank",
                type=click.IntRange(min=0),
                help="This node's rank in a multi-node server (default: Slurm or LeaderWorkerSet).",
            ),
            click.option(
                "--dist-init-addr", metavar="HOST:PORT", help="Rendezvous address of node 0."
            ),
        ]
    ):
        command = decorator(command)
    return command


def _prepare(
    profile: str,
    command: tuple[str, ...],
    env_files: tuple[Path, ...],
    node_rank: int | None,
    dist_init_addr: str | None,
    nccl_debug: bool = False,
) -> Launch:
    if command[:1] == ("--",):
        command = command[1:]
    placement = Placement(node_rank=node_rank, dist_init_addr=dist_init_addr)
    return prepare_launch(profile, command, env_files, os.environ, placement, nccl_debug)


@cli.command(context_settings=PASS_THROUGH)
@launch_options
@click.option("--dry-run", is_flag=True, help="Print the env changes and the argv; do not exec.")
@click.option(
    "--nccl-debug",
    is_flag=True,
    help="Add NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,ENV, for verify-log.",
)
def run(dry_run: bool, **options: Any) -> int:
    """Validate PROFILE, merge it into the environment and exec the server.

    With a [server] table, arguments after '--' are appended to the server's argv; without
    one, they are the command to run: nccl-launch run PROFILE -- COMMAND...
    """
    launch = _prepare(**options)
    if not launch.argv:
        raise UsageError(
            f"profile {launch.plan.label} has no [server] table; give the command after '--': "
            f"nccl-launch run {options['profile']} -- COMMAND..."
        )
    refusal = launch.refusal()
    if refusal is not None:
        raise DriftError(refusal)
    for note in [*launch.loaded.profile.lint(), *launch.unreadable_conf]:
        _warn(note)
    tolerated = [
        e for e in launch.merged.report.entries if e.tolerated and e.note != "server-owned"
    ]
    if tolerated:
        _warn(f"environment differs from {launch.plan.label}, tolerated by [policy]:")
        click.echo("\n".join(drift_lines(tolerated)), err=True)
    if not dry_run:
        exec_command(launch.argv, launch.merged.env, launch.cwd)
    plan = launch.plan
    click.echo(f"profile {plan.label} ({plan.short_digest}) from {launch.loaded.path}")
    click.echo("environment changes:")
    for line in env_changes(os.environ, launch.merged.env, launch.merged.sources):
        click.echo(line)
    if launch.cwd is not None:
        click.echo(f"cwd: {launch.cwd}")
    click.echo("argv:")
    click.echo(f"  {command_line(launch.argv)}")
    return EXIT_OK


@cli.command(context_settings=PASS_THROUGH)
@launch_options
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(SKIPPABLE),
    help="Leave out a check (repeatable), e.g. gpus and paths in a profiles repo's CI.",
)
def preflight(fmt: str, skip: tuple[str, ...], **options: Any) -> int:
    """Check everything `run` would, then the host and SGLang's own parser on the argv.

    Host checks: nccl.conf files, the NCCL env plugin, GPUs against tp_size, the port, the
    model paths; then the server's interpreter imports SGLang and parses the exact argv. For
    ExecStartPre=. Exit 0 when every check passes, 1 when the environment drifts, 3 when a
    host or SGLang check fails.
    """
    report = run_preflight(_prepare(**options), frozenset(skip))
    if fmt == "json":
        click.echo(report.model_dump_json(indent=2))
    else:
        for line in preflight_lines(report):
            click.echo(line)
    if any(c.status == "fail" and c.name != "environment" for c in report.checks):
        return EXIT_HOST
    return EXIT_DRIFT if report.failed("environment") else EXIT_OK


@cli.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> int:
    """Check profile FILES (and what they extend); exit 2 if any is invalid."""
    invalid = 0
    for ref in files:
        try:
            loaded = load_profile(ref)
        except NcclLaunchError as error:
            invalid += 1
            click.echo(str(error), err=True)
            continue
        for note in loaded.profile.lint():
            _warn(f"{loaded.path}: {note}")
        plan = build_plan(loaded.profile)
        click.echo(f"{loaded.path}: ok ({plan.label}, {plan.short_digest})")
    if len(files) > 1:
        click.echo(f"{len(files) - invalid} valid, {invalid} invalid")
    return EXIT_USAGE if invalid else EXIT_OK


def _show_data(loaded: LoadedProfile) -> dict[str, Any]:
    plan = build_plan(loaded.profile)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "profile": plan.label,
        "digest": plan.digest,
        "path": str(loaded.path),
        "chain": [str(path) for path in loaded.chain],
        "env": plan.env,
        "sources": {key: str(path) for key, path in loaded.origins.items()},
        "markers": plan.markers,
        "argv": plan.argv,
        "warnings": loaded.profile.lint(),
        "resolved": {
            key: value
            for key, value in loaded.profile.model_dump(by_alias=True, exclude_none=True).items()
            if value != {}
        },
    }


@cli.command()
@click.argument("profile")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["toml", "json", *exports.FORMATS]),
    default="toml",
    show_default=True,
    help="toml: the resolved profile; json: everything; the others: the variables the "
    "server gets, quoted for that consumer.",
)
def show(profile: str, fmt: str) -> int:
    """Print PROFILE resolved through its `extends` chain."""
    loaded = load_profile(profile)
    data = _show_data(loaded)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    elif fmt in exports.FORMATS:
        click.echo(exports.FORMATS[fmt](build_plan(loaded.profile).child_env), nl=False)
    else:
        chain = ", ".join(data["chain"])
        click.echo(f"# {data['profile']} {data['digest']}\n# resolved from {chain}")
        click.echo(tomli_w.dumps(data["resolved"]), nl=False)
    return EXIT_OK


@cli.command()
@click.argument("old")
@click.argument("new")
def diff(old: str, new: str) -> int:
    """Compare two profiles (or NAME@3 and NAME@4); exit 1 when they differ."""
    before, after = load_profile(old), load_profile(new)
    changes = profile_changes(before.profile, after.profile)
    for sign, loaded in (("---", before), ("+++", after)):
        plan = build_plan(loaded.profile)
        click.echo(f"{sign} {plan.label} ({plan.short_digest}) {loaded.path}")
    for line in changes_text(changes):
        click.echo(line)
    click.echo(f"{len(changes)} difference{'' if len(changes) == 1 else 's'}")
    return EXIT_DRIFT if changes else EXIT_OK


LIVE_FORMATS: dict[str, Callable[[LiveReport], str]] = {
    "text": lambda report: live_text(report) + "\n",
    "json": lambda report: report.model_dump_json(indent=2) + "\n",
    "prometheus": metrics,
}


@cli.command()
@click.argument("profile", required=False)
@click.option("--pid", type=int, help="The server's main process.")
@click.option("--port", type=int, help="The server's port: the process listening there.")
@click.option("--pidfile", type=click.Path(path_type=Path), help="A file holding the PID.")
@click.option("--unit", help="A systemd unit: its MainPID.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "prometheus"]),
    default="text",
    show_default=True,
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write the report to FILE atomically (for node_exporter's textfile collector).",
)
@click.option("--watch", type=click.FloatRange(min=0.1), metavar="SECONDS", help="Keep checking.")
@click.option(
    "--on-drift",
    type=click.Choice(["warn", "stop"]),
    default="warn",
    show_default=True,
    help="With --watch: stop = SIGTERM the server, SIGKILL after --grace, exit 1.",
)
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True)
def check(
    profile: str | None,
    pid: int | None,
    port: int | None,
    pidfile: Path | None,
    unit: str | None,
    fmt: str,
    output: Path | None,
    watch: float | None,
    on_drift: OnDrift,
    grace: float,
) -> int:
    """Compare a running server's whole process tree with PROFILE.

    Without PROFILE, the profile the server was started with (its NCCL_LAUNCH_PROFILE) is
    read from the search path. Exit 0 no drift, 1 drift or unreadable processes, 3 no such
    server.
    """
    target = Target(pid=pid, port=port, pidfile=pidfile, unit=unit)
    last: list[str] = []

    def emit(report: LiveReport) -> None:
        rendered = LIVE_FORMATS[fmt](report)
        if output is not None:
            atomic_write(output, rendered, replace=True)
            return
        if watch is not None and fmt == "text":
            if last == [rendered]:
                return  # a watch prints the text report when it changes
            click.echo(f"--- {datetime.now(UTC).isoformat(timespec='seconds')}")
        last[:] = [rendered]
        click.echo(rendered, nl=False)

    if watch is None:
        report = live.check(target, profile)
        emit(report)
        return EXIT_OK if report.ok else EXIT_DRIFT
    return live.watch(target, profile, watch, on_drift, grace, emit, click.echo)


@cli.command()
@click.argument("profile")
@click.option("--user", help="User= of the service (default: root).")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write the unit to FILE (atomically) instead of printing it.",
)
@click.option("--force", is_flag=True, help="Replace an existing FILE.")
def systemd(profile: str, user: str | None, output: Path | None, force: bool) -> int:
    """Print a systemd service unit that runs PROFILE's server through nccl-launch.

    Type=exec (MainPID is the server), preflight as ExecStartPre=, run as ExecStart=, a long
    TimeoutStartSec for model load, Restart=on-failure, KillMode=mixed.
    """
    text = unit_file(load_profile(profile), user)
    if output is None:
        click.echo(text, nl=False)
        return EXIT_OK
    try:
        atomic_write(output, text, replace=force)
    except FileExistsError:
        raise UsageError(f"{output} exists; pass --force to replace it") from None
    click.echo(
        f"wrote {output}; then: systemctl daemon-reload && systemctl enable --now {output.name}"
    )
    return EXIT_OK


@cli.command(name="verify-log")
@click.argument("profile")
@click.argument("log", type=click.File("r", errors="replace"), default="-")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def verify_log(profile: str, log: TextIO, fmt: str) -> int:
    """Confirm from NCCL's NCCL_DEBUG=INFO output (LOG, or stdin) that every rank applied
    each declared value; exit 1 on a value applied differently or never confirmed.

    journalctl -u sglang | nccl-launch verify-log PROFILE
    """
    plan = build_plan(load_profile(profile).profile)
    source = "stdin" if log.name == "<stdin>" else log.name
    report = verify(plan, log, source)
    if fmt == "json":
        click.echo(report.model_dump_json(indent=2))
    else:
        for line in log_lines(report):
            click.echo(line)
    return EXIT_OK if report.ok else EXIT_DRIFT


@cli.command()
def schema() -> int:
    """Print the profile format as JSON Schema, for editors.

    Save it beside the profiles and start each profile with `#:schema ./nccl-launch.schema.json`
    (Taplo, Even Better TOML) for completion and checks while typing.
    """
    click.echo(json.dumps(profile_schema(), indent=2))
    return EXIT_OK


def output_options(command: F) -> F:
    """--name, --output and --force, shared by the commands that write a profile."""
    for decorator in reversed(
        [
            click.option("--name", help="Profile name (default: from the source)."),
            click.option(
                "--output",
                "-o",
                type=click.Path(path_type=Path),
                help="Where to write it (default: profiles/NAME.toml).",
            ),
            click.option("--force", is_flag=True, help="Replace an existing file."),
        ]
    ):
        command = decorator(command)
    return command


def _write(
    start: StartCommand, name: str, source: str, output: Path | None, force: bool, how: str
) -> int:
    data = build_profile(start, name, source, how)
    path = output or Path("profiles") / f"{name}.toml"
    write_profile(path, data, force)
    for note in start.notes:
        _warn(note)
    plan = build_plan(Profile.model_validate(data))
    click.echo(f"wrote {path} ({plan.label}, {plan.short_digest}); check it with:")
    click.echo(f"  nccl-launch run --dry-run {path}")
    return EXIT_OK


def _profile_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "converted"


@cli.command()
@click.argument("script", type=click.File("r"))
@output_options
def convert(script: TextIO, name: str | None, output: Path | None, force: bool) -> int:
    """Turn a start SCRIPT (or '-' for stdin: a raw command line) into a profile.

    Follows export lines, VAR=value prefixes, env, line continuations, comments, cd and
    output redirections up to the `python -m sglang.launch_server` (or `sglang serve`) line.
    """
    source = "stdin" if script.name == "<stdin>" else script.name
    start = read_script(script.read(), os.environ)
    default = "converted" if source == "stdin" else Path(source).stem
    return _write(start, name or _profile_name(default), source, output, force, "converted")


@cli.command()
@click.option("--pid", type=int, required=True, help="The running server's main process.")
@output_options
def capture(pid: int, name: str | None, output: Path | None, force: bool) -> int:
    """Write a profile from a running server: its NCCL env, its command line and directory."""
    start = read_process(pid)
    return _write(start, name or f"captured-{pid}", f"pid {pid}", output, force, "captured")


@cli.command(name="list")
def list_profiles() -> int:
    """List the profiles on the search path with name, version and digest."""
    dirs = search_dirs()
    rows = []
    for path in profile_files(dirs):
        try:
            plan = build_plan(load_profile(str(path)).profile)
        except NcclLaunchError as error:
            rows.append(("(invalid)", "", str(error).splitlines()[0], str(path)))
            continue
        name, version = plan.label.rsplit("@", 1)
        rows.append((name, version, plan.short_digest, str(path)))
    if not rows:
        click.echo(f"no profiles in {', '.join(str(folder) for folder in dirs)}")
        return EXIT_OK
    header = ("NAME", "VERSION", "DIGEST", "PATH")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        click.echo("  ".join([*cells, row[3]]))
    return EXIT_OK


def _debug_requested(args: list[str]) -> bool:
    own = args[: args.index("--")] if "--" in args else args
    return "--debug" in own


def main(args: list[str] | None = None) -> None:
    """Run the CLI and map every outcome to a documented exit code, in this one place."""
    args = sys.argv[1:] if args is None else args
    try:
        code = cli.main(args, prog_name="nccl-launch", standalone_mode=False)
    except click.exceptions.Exit as done:
        code = done.exit_code
    except click.ClickException as error:
        error.show()
        code = error.exit_code
    except (click.Abort, KeyboardInterrupt):
        code = 130
    except NcclLaunchError as error:
        # Profile problems start with the file name and a drift report with its own header.
        prefix = "" if isinstance(error, ProfileError | DriftError) else "nccl-launch: "
        click.echo(f"{prefix}{error}", err=True)
        code = error.exit_code
    except Exception as error:
        if _debug_requested(args):
            traceback.print_exc()
        click.echo(
            f"nccl-launch: internal error: {type(error).__name__}: {error} "
            f"(a bug; rerun with --debug for the traceback)",
            err=True,
        )
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else EXIT_OK)
