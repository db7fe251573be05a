"""`tune`: search NCCL values against the decode tok/s of servers it starts, and keep the best."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nccl_launch.commands.echo import Output, echo_lines, warn
from nccl_launch.commands.measuring import Echo, method_options
from nccl_launch.commands.options import format_option, profile_argument, seconds_option
from nccl_launch.errors import EXIT_INTERRUPTED
from nccl_launch.findings import Finding, Refused
from nccl_launch.live.signals import catching

if TYPE_CHECKING:
    from nccl_launch.tune.result import TrialRow
    from nccl_launch.tune.search import Plan

DEFAULT_READY_TIMEOUT = 1200.0  # a large model loads for minutes
# A server's workers free their GPU memory on SIGTERM; a tree still up after this is killed.
STOP_GRACE = 30.0
# How far below the profile's values' a candidate's prefill may be (with --prompt-tokens).
PREFILL_TOLERANCE = 0.05


# Each ends the tune as Ctrl-C does, the trial's server stopped first: SIGTERM (systemd's
# stop, `timeout`) and SIGHUP (the terminal closed), whose default action would end tune
# alone and leave the server, in a session of its own, running orphaned. One ignored (under
# `nohup`) stays ignored.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(number: int, frame: object) -> None:
    raise KeyboardInterrupt


class TuneEcho(Echo):
    """Each trial as it starts and ends, with bench's progress within it."""

    def began(self, label: str, journal: Path, done: int) -> None:
        from nccl_launch.render.tune import began_line

        echo_lines([began_line(label, journal, done)], err=self.err)

    def started(self, number: int, changes: str, digest: str, confirm: bool) -> None:
        from nccl_launch.render.tune import started_line

        echo_lines([started_line(number, changes, digest, confirm)], err=self.err)

    def ended(self, row: TrialRow) -> None:
        from nccl_launch.render.tune import ended_line

        echo_lines([ended_line(row)], err=self.err)

    def warn(self, problem: Finding) -> None:
        warn(problem)

    def planned(self, plan: Plan) -> None:
        from nccl_launch.render.tune import plan_line

        echo_lines([plan_line(plan)], err=True)  # beside the report, as a warning is


@click.command()
@profile_argument()
@click.option(
    "--space",
    "space_file",
    type=click.Path(path_type=Path),
    help="TOML file of the values to try: NAME = [V1, V2, ...] per NCCL variable, without the "
    'NCCL_ prefix; "unset" leaves the variable to NCCL.',
)
@click.option(
    "--try",
    "tries",
    multiple=True,
    metavar="NAME=V1,V2,...",
    help="Values to try for one variable (repeatable; replaces the --space file's).",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    help="At most this many trials (server starts) of the search, those in the journal "
    "included; the confirmation's come after. A search it ends undecided says what is open "
    "and exits 1  [default: no limit]",
)
@click.option("--grid", is_flag=True, help="Try every combination, not coordinate descent.")
@click.option(
    "--confirm",
    "rounds",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Rounds of the confirmation: fresh starts of the profile's values, the winner and "
    "NCCL's defaults, interleaved, that alone judge the winner's gain and give its [baseline].",
)
@click.option(
    "--write",
    is_flag=True,
    help="Write the winner as the profile's next version, its confirmed [baseline] included, "
    "where the confirmation finds it faster than PROFILE's values.",
)
@method_options
@click.option(
    "--prefill-tolerance",
    type=click.FloatRange(0, 1, max_open=True),
    help="With --prompt-tokens (or a [baseline] that records prompt_tokens): a candidate whose "
    "prefill tok/s is, by its one-sided 95% bound, below PROFILE's values' by more than this "
    "fraction cannot win, and the winner's confirmation must show its prefill within it  "
    f"[default: {PREFILL_TOLERANCE}]",
)
@seconds_option(
    "--ready-timeout",
    least=0,
    included=False,
    default=DEFAULT_READY_TIMEOUT,
    show_default=True,
    help_text="Seconds a started server has to answer /health; later, its trial fails.",
)
@format_option("text", "json", default="text")
def tune(
    profile: str,
    space_file: Path | None,
    tries: tuple[str, ...],
    budget: int | None,
    grid: bool,
    rounds: int,
    write: bool,
    max_tokens: int | None,
    runs: int | None,
    warmup: int,
    prompt: str | None,
    prompt_tokens: int | None,
    timeout: float,
    prefill_tolerance: float | None,
    ready_timeout: float,
    fmt: Output,
) -> int:
    """Search NCCL values for PROFILE: start its server with each candidate, measure decode
    tok/s as bench does, keep the fastest the noise between server starts allows.

    Coordinate descent from PROFILE's values (started twice) or NCCL's defaults (once),
    one variable at a time: a change is kept when the 95% lower bound of its gain over the
    best is above 0, the noise pooled over the candidates started more than once; a
    candidate that looks faster but not yet surely is started again, at most 4 times. The
    winner is then confirmed: --confirm rounds of fresh starts of PROFILE's values, the
    winner and NCCL's defaults judge its gain (with its 95% interval) and give its
    [baseline]. Every finished trial goes to a journal under $XDG_STATE_HOME/nccl-launch/tune:
    the same command resumes an interrupted tune to the same decisions. Exit 0 with a winner
    the search decided (or none the noise allows over PROFILE's values), 1 when no trial
    could be measured or --budget ended the search before it decided (what it left open is
    said, and the budget its plan says would decide it), 2 bad options, space or profile, 3 a
    host problem (the port taken, a full disk, another tune of the journal), 130 on Ctrl-C,
    SIGTERM or SIGHUP (the server stopped).

    With --prompt-tokens N every run measures prefill tok/s too, from the same requests: the
    objective stays decode, but a candidate whose prefill costs more than
    --prefill-tolerance cannot win.
    """
    from nccl_launch.bench.method import measuring_method
    from nccl_launch.render.tune import summary_lines
    from nccl_launch.tune.session import open_base, run_tune
    from nccl_launch.tune.space import build_space
    from nccl_launch.tune.trial import TrialSettings

    space = build_space(space_file, tries)
    candidates = open_base(profile)
    baseline = candidates.base.profile.baseline
    method = measuring_method(baseline, max_tokens, runs, warmup, prompt, prompt_tokens)
    if method.prompt_tokens is None and prefill_tolerance is not None:
        said = "prefill is measured only with --prompt-tokens N (or a [baseline] that records "
        said += "prompt_tokens)"
        fix = "give it too, or leave the tolerance out"
        raise Refused(Finding("tolerance-without-prompt", "--prefill-tolerance", said, fix))
    tolerance: float | None = None  # no prefill measured, none judged
    if method.prompt_tokens is not None:
        tolerance = PREFILL_TOLERANCE if prefill_tolerance is None else prefill_tolerance
    settings = TrialSettings(
        method=method, ready_timeout=ready_timeout, request_timeout=timeout, stop_grace=STOP_GRACE
    )
    echo = TuneEcho(err=fmt.aside, asked=method.max_tokens)
    try:
        with catching(STOP_SIGNALS, _interrupt):
            report = run_tune(
                candidates, space, settings, budget, grid, rounds, write, echo, tolerance
            )
    except KeyboardInterrupt:
        echo_lines(
            [
                "interrupted: the trial's server is stopped; the finished trials are in the "
                "journal, and the same command resumes the tune"
            ],
            err=True,
        )
        return EXIT_INTERRUPTED
    fmt.emit(report, summary_lines)
    return report.exit_code
