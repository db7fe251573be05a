"""Proof from NCCL itself: `verify-log` reads NCCL's NCCL_DEBUG=INFO lines."""

from __future__ import annotations

import click

from nccl_launch.commands.echo import echo_lines, warn
from nccl_launch.commands.options import format_option, profile_argument
from nccl_launch.masking import masked_json


@click.command(name="verify-log")
@profile_argument()
@click.argument("log", default="-")
@format_option("text", "json", default="text")
def verify_log(profile: str, log: str, fmt: str) -> int:
    """Confirm from NCCL's NCCL_DEBUG=INFO output (LOG, or stdin) that every rank applied
    each declared value; exit 1 on a value applied differently or never confirmed.

    journalctl -u sglang | nccl-launch verify-log PROFILE
    """
    from nccl_launch.files.reading import LINE_LIMIT, open_stream
    from nccl_launch.live.verify_log import verify_profile
    from nccl_launch.render.reports import log_lines

    source = "stdin" if log == "-" else log
    with open_stream(log, "log") as lines:
        report = verify_profile(profile, lines, source)
    if lines.skipped:
        said = "1 line" if lines.skipped == 1 else f"{lines.skipped} lines"
        warn(
            f"log {source}: {said} longer than {LINE_LIMIT >> 20} MiB skipped (the first is line "
            f"{lines.first_skipped}); NCCL's INFO lines are short"
        )
    if fmt == "json":
        click.echo(masked_json(report))
    else:
        echo_lines(log_lines(report))
    return report.exit_code
