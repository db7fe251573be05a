"""After start: `check` the live process tree, once or `--watch`; and `verify-log`, the proof
from NCCL itself in its NCCL_DEBUG=INFO lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nccl_launch.commands.echo import Output, echo_lines, warn
from nccl_launch.commands.options import (
    PID,
    PORT,
    digest_option,
    format_option,
    output_options,
    profile_argument,
    seconds_option,
)
from nccl_launch.findings import Finding, Refused

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nccl_launch.files.reading import StreamLines
    from nccl_launch.live.compare import LiveReport
    from nccl_launch.live.watch import OnDrift

LIVE_FORMATS = ("text", "json", "prometheus")


def _rendered(fmt: Output, report: LiveReport, stream: bool, verbose: bool) -> str:
    """`report` in `fmt`, one of LIVE_FORMATS; JSON on one line in a `stream` (JSON Lines);
    the text `verbose` (what is not NCCL's, process by process). JSON and Prometheus hold
    every entry of every process."""

    def text(report: LiveReport) -> str:
        from nccl_launch.render.reports import live_text

        return live_text(report, verbose) + "\n"

    def prometheus(report: LiveReport) -> str:
        from nccl_launch.render.prometheus import metrics  # not on a one-shot check's path

        return metrics(report)

    renderers = {"text": text, "prometheus": prometheus}
    return fmt.document(report, renderers, indent=None if stream else 2)


@click.command()
@profile_argument(required=False)
@digest_option
@click.option("--pid", type=PID, help="The server's main process.")
@click.option("--port", type=PORT, help="The server's port: the process listening there.")
@click.option("--pidfile", type=click.Path(path_type=Path), help="A file holding the PID.")
@click.option("--unit", help="A systemd unit: its MainPID.")
@format_option(*LIVE_FORMATS, default="text")
@output_options(
    "Write the report to FILE atomically (for node_exporter's textfile collector).", force=False
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="In the text, list what is not NCCL's (an image's NCCL_VERSION, a pod's service "
    "links) under each process, not once for the tree.",
)
@seconds_option("--watch", least=0.1, help_text="Keep checking, every SECONDS.")
@click.option(
    "--on-drift",
    type=click.Choice(["warn", "stop"]),
    default="warn",
    show_default=True,
    help="With --watch only: stop = SIGTERM the server, SIGKILL after --grace, exit 1.",
)
@seconds_option(
    "--grace",
    least=0,
    default=30.0,
    show_default=True,
    help_text="With --on-drift stop: seconds from SIGTERM to SIGKILL.",
)
def check(
    profile: str | None,
    pin: str | None,
    pid: int | None,
    port: int | None,
    pidfile: Path | None,
    unit: str | None,
    fmt: Output,
    output: Path | None,
    verbose: bool,
    watch: float | None,
    on_drift: OnDrift,
    grace: float,
) -> int:
    """Compare a running server's whole process tree with PROFILE.

    Without PROFILE, the profile the server was started with: the file its
    NCCL_LAUNCH_PROFILE_FILE names, else its NCCL_LAUNCH_PROFILE's name on the search path.
    A server started by run --nccl-debug is also judged by each process's own NCCL log:
    a value NCCL applied otherwise than the profile is drift, with NCCL's line.
    With --digest, a profile of another digest is refused before any comparison.
    Exit 0 no drift, 1 drift, another digest than --digest or unreadable processes, 2
    invalid profile, 3 no such server.
    """
    from nccl_launch.files.writing import write_output
    from nccl_launch.live import watch as live
    from nccl_launch.live.target import Target

    if on_drift == "stop" and watch is None:
        said = "--on-drift stop needs --watch SECONDS: one check never stops a server"
        raise Refused(Finding("stop-without-watch", "", said))
    stream = watch is not None and output is None
    if stream and not fmt.streams:
        said = "--watch --format prometheus rewrites a textfile: give -o FILE"
        raise Refused(Finding("prometheus-stream", "", said))
    target = Target(pid=pid, port=port, pidfile=pidfile, unit=unit)
    last: list[str] = []

    def emit(report: LiveReport) -> None:
        rendered = _rendered(fmt, report, stream, verbose)
        if output is not None:
            # Rewritten at each look, so no --force: but never over the profile it reads.
            if output.resolve() == Path(report.path).resolve():
                said = "the profile checked; give the report a file of its own"
                raise Refused(Finding("output-is-profile", f"-o {output}", said))
            write_output(output, rendered, replace=True)
            return
        if stream and last == [rendered]:
            return  # a watch prints the report when it changes
        if stream and not fmt.aside:  # people read when each report came
            click.echo(f"--- {datetime.now(UTC).isoformat(timespec='seconds')}")
        last[:] = [rendered]
        click.echo(rendered, nl=False)

    if watch is None:
        report = live.check(target, profile, pin)
        emit(report)
        return report.exit_code

    def say(line: str) -> None:
        echo_lines([line])

    return live.watch(target, profile, watch, on_drift, grace, emit, say=say, warn=warn, pin=pin)


@click.command(name="verify-log")
@profile_argument()
@click.argument("log", default="-")
@click.option(
    "--latest",
    is_flag=True,
    help="Read the profile's newest run folder of `run --nccl-debug` (instead of LOG).",
)
@format_option("text", "json", default="text")
def verify_log(profile: str, log: str, latest: bool, fmt: Output) -> int:
    """Confirm from NCCL's NCCL_DEBUG=INFO output (LOG, or stdin) that every rank applied
    each declared value; exit 1 on a value applied differently or never confirmed. LOG may be
    a folder of `run --nccl-debug`: each of its *.log files is read.

    journalctl -u sglang | nccl-launch verify-log PROFILE
    """
    from nccl_launch.files.reading import LINE_LIMIT, open_stream
    from nccl_launch.live.log_folder import folder_logs, is_folder, latest_run
    from nccl_launch.live.verify_log import verify, verify_files
    from nccl_launch.profile.load import load_profile
    from nccl_launch.render.reports import log_lines

    if latest and log != "-":
        said = f"give --latest or LOG {log!r}, not both: --latest reads a run folder"
        raise Refused(Finding("latest-and-log", "", said))
    loaded = load_profile(profile)
    read: list[tuple[str, StreamLines]] = []  # each file's lines, to say what was skipped

    def kept(
        folder: Path, files: Iterator[tuple[str, StreamLines]]
    ) -> Iterator[tuple[str, StreamLines]]:
        for name, lines in files:
            read.append((str(folder / name), lines))
            yield name, lines

    if latest:
        with latest_run(loaded.profile.name, profile) as (folder, fd):
            report = verify_files(loaded, kept(folder, folder_logs(folder, fd)), str(folder))
    elif is_folder(log):
        report = verify_files(loaded, kept(Path(log), folder_logs(Path(log))), log)
    else:
        source = "stdin" if log == "-" else log
        with open_stream(log, "log") as lines:
            report = verify(loaded, lines, source)
        read.append((source, lines))
    for name, lines in read:
        if lines.skipped:
            said = "1 line" if lines.skipped == 1 else f"{lines.skipped} lines"
            said += f" longer than {LINE_LIMIT >> 20} MiB skipped (the first is line "
            said += f"{lines.first_skipped})"
            fix = "NCCL's INFO lines are short"
            warn(Finding("long-lines-skipped", f"log {name}", said, fix, cause="host"))
    fmt.emit(report, log_lines)
    return report.exit_code
