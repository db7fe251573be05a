"""`bench`: measure decode speed on a server proved to run its profile, and its history."""

from __future__ import annotations

from pathlib import Path

import click

from nccl_launch.commands.echo import Output, warn
from nccl_launch.commands.measuring import Echo, method_options
from nccl_launch.commands.options import PID, format_option, profile_argument
from nccl_launch.findings import Finding, Refused

CONCURRENCY_LIMIT = 1024  # requests in flight: a thread and a connection each


def _history(profile: str | None, record: Path, fmt: Output) -> int:
    from nccl_launch.bench import history
    from nccl_launch.render.bench import history_lines

    found = history.read_history(record, profile)
    for problem in found.problems:
        warn(problem)

    def text(found: history.History) -> list[str]:
        if not found.results:
            return [f"no results{f' of {profile}' if profile else ''} in {record}"]
        return history_lines(found.results)

    fmt.emit(found, text)
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
    fmt: Output,
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
    from nccl_launch.bench.method import measuring_method
    from nccl_launch.live.url import checked_url, server_url
    from nccl_launch.profile.load import load_profile
    from nccl_launch.render.bench import summary_lines, unwritten_line, written_line

    if show_history:
        if url is not None or pid is not None or write_baseline:
            only = "--history reads the record only: drop --url, --pid and --write-baseline"
            raise Refused(Finding("history-only", "", only))
        return _history(profile, record or history.default_path(), fmt)
    if profile is None:
        raise Refused(Finding("profile-not-named", "", "name the PROFILE (or use --history)"))
    # A malformed URL is refused before any file is touched.
    given = None if url is None else checked_url(url)
    loaded = load_profile(profile)
    held = hold_profile(loaded) if write_baseline else None  # refused now, not after the runs
    if given is None:
        if loaded.profile.server is None:
            none = "no [server] table to find the server at"
            raise Refused(Finding("no-server-table", str(loaded.path), none, "pass --url"))
        given = server_url(loaded.profile.server)
    method = measuring_method(
        loaded.profile.baseline, max_tokens, runs, warmup, prompt, prompt_tokens, concurrency
    )
    with history.opened(record) as recorder:
        echo = Echo(err=fmt.aside, asked=method.max_tokens)
        # The server found after the history: a file that cannot take it fails first.
        report = measure_decode(loaded, given, pid, method, timeout, echo)
        if report.status == "measured" and not report.failed:
            recorder.append(report)
    said: list[str] = []  # after the summary, or on stderr before the JSON
    if report.status == "measured" and not report.failed:
        said.append(f"recorded in {recorder.path}")
    try:
        if held is not None and (report.status != "measured" or report.failed):
            said.append(unwritten_line(report, held.path))
        elif held is not None:
            previous = loaded.profile.baseline
            old = previous.decode_tok_s if previous is not None else None
            written = write_figure(held, report, old)
            report = report.model_copy(update={"written": written})
            said.append(written_line(written, report.method))
    finally:  # the report of a figure the host would not keep is printed all the same
        fmt.emit(report, summary_lines, said)
    return report.exit_code
