"""What `bench` and each of `tune`'s trials share: the options of how decode is measured, and
the progress said as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from nccl_launch.bench import DEFAULT_MAX_TOKENS, DEFAULT_RUNS, TOKEN_LIMIT
from nccl_launch.commands.echo import echo_lines, warn
from nccl_launch.commands.options import F, seconds_option
from nccl_launch.findings import Finding

if TYPE_CHECKING:
    from nccl_launch.bench.result import RunFigure
    from nccl_launch.live.compare import LiveReport


class Echo:
    """Progress as it comes: on stdout with the text report, on stderr beside JSON."""

    def __init__(self, err: bool, asked: int) -> None:
        self.err = err
        self.asked = asked
        self.short = False

    def verified(self, when: str, report: LiveReport) -> None:
        from nccl_launch.render.bench import verified_line

        line = verified_line(when, report)
        if line is not None:
            echo_lines([line], err=self.err)

    def ran(self, kind: str, number: int, total: int, figure: RunFigure) -> None:
        from nccl_launch.render.bench import run_line

        echo_lines([run_line(kind, number, total, figure)], err=self.err)
        if figure.tokens < self.asked and not self.short:
            self.short = True  # once: every run of such a server stops short
            message = f"the server returned {figure.tokens} tokens of the {self.asked} asked "
            message += "(it ignores ignore_eos): a figure of shorter runs, not comparable with "
            message += f"runs of {self.asked}"
            warn(Finding("short-runs", "", message, severity="warning", cause="host"))


# How decode is measured, the same for `bench` and each of `tune`'s trials.
_METHOD_OPTIONS = (
    click.option(
        "--max-tokens",
        type=click.IntRange(min=1, max=TOKEN_LIMIT),
        help=f"Tokens per request  [default: the baseline's, else {DEFAULT_MAX_TOKENS}]",
    ),
    click.option(
        "--runs",
        type=click.IntRange(min=1),
        help=f"Measured requests  [default: the baseline's, else {DEFAULT_RUNS}]",
    ),
    click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True),
    click.option(
        "--prompt", help="The prompt of every request  [default: a one-line request for a story]"
    ),
    click.option(
        "--prompt-tokens",
        type=click.IntRange(min=1, max=TOKEN_LIMIT),
        help="Give each request a prompt of about N tokens (N common words, each one token to "
        "most tokenizers; the server's count is what it reports) and report prefill tok/s, "
        "prompt tokens over time to first token  [default: the baseline's, else --prompt]",
    ),
    seconds_option(
        "--timeout",
        least=0,
        included=False,
        default=60.0,
        show_default=True,
        help_text="Seconds to wait for the connection and between two streamed events; a "
        "request must end within TIMEOUT + max_tokens seconds.",
    ),
)


def method_options(command: F) -> F:
    """--max-tokens, --runs, --warmup, --prompt, --prompt-tokens and --timeout, in order."""
    for option in reversed(_METHOD_OPTIONS):
        command = option(command)
    return command
