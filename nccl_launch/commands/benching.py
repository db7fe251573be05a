"""`bench`: measure decode speed on a server proved to run its profile, and its history."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from nccl_launch.bench import TOKEN_LIMIT
from nccl_launch.commands.echo import echo_lines, warn
from nccl_launch.commands.options import PID, F, format_option, profile_argument, seconds_option
from nccl_launch.findings import Finding, Refused
from nccl_launch.secrets.masking import masked_json

if TYPE_CHECKING:
    from nccl_launch.bench.result import Method, RunFigure
    from nccl_launch.live.compare import LiveReport
    from nccl_launch.profile.model import Baseline

DEFAULT_MAX_TOKENS = 500
DEFAULT_RUNS = 5
CONCURRENCY_LIMIT = 1024  # requests in flight: a thread and a connection each
DEFAULT_PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


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


def measuring_method(
    baseline: Baseline | None,
    max_tokens: int | None,
    runs: int | None,
    warmup: int,
    prompt: str | None,
    prompt_tokens: int | None = None,
    concurrency: int | None = None,
) -> Method:
    """The method of the options, the baseline's max_tokens, runs, prompt_tokens and
    concurrency (else bench's) where they are not given; a --prompt overrides the
    baseline's prompt_tokens."""
    from nccl_launch.bench.result import Method
    from nccl_launch.escaping import not_utf8

    if prompt is not None and prompt_tokens is not None:
        said = "give one; each sets the prompt"
        raise Refused(Finding("prompt-twice", "--prompt and --prompt-tokens", said))
    byte = None if prompt is None else not_utf8(prompt)
    if byte is not None:
        said = f"holds the byte {byte}, which is not UTF-8"
        raise Refused(Finding("prompt-not-utf8", "--prompt", said, "write it in UTF-8"))
    if prompt is None and prompt_tokens is None and baseline is not None:
        prompt_tokens = baseline.prompt_tokens
    return Method(
        max_tokens=max_tokens or (baseline and baseline.max_tokens) or DEFAULT_MAX_TOKENS,
        runs=runs or (baseline and baseline.runs) or DEFAULT_RUNS,
        warmup=warmup,
        prompt="" if prompt_tokens is not None else prompt or DEFAULT_PROMPT,
        prompt_tokens=prompt_tokens,
        concurrency=concurrency or (baseline and baseline.concurrency) or 1,
    )


def _history(profile: str | None, record: Path, fmt: str) -> int:
    from nccl_launch.bench import history
    from nccl_launch.render.bench import history_lines

    found = history.read_history(record, profile)
    for problem in found.problems:
        warn(problem)
    if fmt == "json":
        click.echo(masked_json(found))
    elif not found.results:
        echo_lines([f"no results{f' of {profile}' if profile else ''} in {record}"])
    else:
        echo_lines(history_lines(found.results))
    return found.exit_code


@click.command()
@profile_argument(required=False)
@click.option(
    "--url",
    help="The server's base URL, e.g. http://127.0.0.1:30000  [default: the host and port of "
    "PROFILE's [server], 0.0.0.0 and :: read as loopback]",
)
@click.option(
    "--pid",
    type=PID,
    help="The server's main process; it must own the URL's listener  [default: the one "
    "listening on the URL's address and port]",
)
@method_options
@click.option(
    "--record",
    type=click.Path(path_type=Path),
    help="The history file  [default: $XDG_STATE_HOME/nccl-launch/bench.jsonl]",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=CONCURRENCY_LIMIT),
    help="Requests in flight at once, each counted as a run; reports the output tok/s of all "
    "and the time to first token's median and p99  [default: the baseline's, else 1]",
)
@click.option("--history", "show_history", is_flag=True, help="Print the history instead.")
@click.option(
    "--write-baseline",
    is_flag=True,
    help="Write the measured mean, max_tokens and runs (and prefill_tok_s with prompt_tokens, "
    "concurrency) into the [baseline] of PROFILE's file (the file named, not one it "
    "extends), even where it is below the old figure.",
)
@format_option("text", "json", default="text")
def bench(
    profile: str | None,
    url: str | None,
    pid: int | None,
    max_tokens: int | None,
    runs: int | None,
    warmup: int,
    prompt: str | None,
    prompt_tokens: int | None,
    timeout: float,
    record: Path | None,
    concurrency: int | None,
    show_history: bool,
    write_baseline: bool,
    fmt: str,
) -> int:
    """Measure decode tok/s of PROFILE's server (or the one at URL), checked against PROFILE
    before and after.

    Streaming requests to the server's /v1/completions, one at a time (--concurrency: N in
    flight), tokens from its usage figures, sending the API key the server was started
    with: its --api-key, else vLLM's VLLM_API_KEY. Decode tok/s is a request's tokens after
    the first over the time after it; with --prompt-tokens, prefill tok/s is its prompt
    tokens over the time to the first. The result is stamped with
    the profile's name@version and digest and appended to the history; --history [PROFILE]
    prints it as a table per profile and digest. --write-baseline records the figures in the
    profile, only when the server was proved to run it before and after.
    Exit 0 measured, 1 drift or a figure below the profile's [baseline], 2 bad options or
    profile (or one changed while measured), 3 no such server, or a connection, timeout,
    HTTP error, empty or malformed stream (with --concurrency: any request's, the others'
    figures reported), or a profile file that cannot be written.
    """
    from nccl_launch.bench import history
    from nccl_launch.bench.baseline_file import hold_profile, write_figure
    from nccl_launch.bench.measure import measure_decode
    from nccl_launch.live.url import server_url, url_address
    from nccl_launch.profile.load import load_profile
    from nccl_launch.render.bench import summary_lines, unwritten_line, written_line

    if show_history:
        if url is not None or pid is not None or write_baseline:
            said = "--history reads the record only: drop --url, --pid and --write-baseline"
            raise Refused(Finding("history-only", "", said))
        return _history(profile, record or history.default_path(), fmt)
    if profile is None:
        raise Refused(Finding("profile-not-named", "", "name the PROFILE (or use --history)"))
    if url is not None:
        url_address(url)  # a malformed URL is refused before any file is touched
    loaded = load_profile(profile)
    held = hold_profile(loaded) if write_baseline else None  # refused now, not after the runs
    if url is None:
        if loaded.profile.server is None:
            said = "no [server] table to find the server at"
            raise Refused(Finding("no-server-table", str(loaded.path), said, "pass --url"))
        url = server_url(loaded.profile.server)
    method = measuring_method(
        loaded.profile.baseline, max_tokens, runs, warmup, prompt, prompt_tokens, concurrency
    )
    with history.opened(record) as recorder:
        echo = Echo(err=fmt == "json", asked=method.max_tokens)
        # The server found after the history: a file that cannot take it fails first.
        report = measure_decode(loaded, url, pid, method, timeout, echo)
        if report.status == "measured" and not report.failed:
            recorder.append(report)
    aside = fmt == "json"  # what is said beside the JSON document goes to stderr
    if not aside:
        echo_lines(summary_lines(report))
    if report.status == "measured" and not report.failed:
        echo_lines([f"recorded in {recorder.path}"], err=aside)
    try:
        if held is not None and (report.status != "measured" or report.failed):
            echo_lines([unwritten_line(report, held.path)], err=aside)
        elif held is not None:
            previous = loaded.profile.baseline
            old = previous.decode_tok_s if previous is not None else None
            written = write_figure(held, report, old)
            report = report.model_copy(update={"written": written})
            echo_lines([written_line(written, report.method)], err=aside)
    finally:  # the JSON of a figure the host would not keep is printed all the same
        if aside:
            click.echo(masked_json(report))
    return report.exit_code
