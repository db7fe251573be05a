"""`bench --write-baseline`: the measured figure written into the `[baseline]` table of the
profile file bench was given, edited with tomlkit so that every byte outside that table stays
as its author wrote it (comments, blank lines, spacing), and only when the file still is what
was measured: its bytes as read before the runs, its digest the one the server ran."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccl_launch.bench.result import BenchReport, WrittenBaseline
from nccl_launch.files.reading import read_text
from nccl_launch.files.writing import write_output
from nccl_launch.findings import Finding, Refused, of_host
from nccl_launch.profile.chain import ChainFile, ProfileChain, read_chain
from nccl_launch.profile.document import parse_profile_toml
from nccl_launch.profile.load import LoadedProfile, validate_chain
from nccl_launch.profile.search import is_shipped

WRITE = "--write-baseline"  # where each of its refusals is
# What a figure of one server start does not have: `tune`'s mean over several starts.
OF_SEVERAL_STARTS = ("starts", "interval")
# Written where the measurement has them, dropped where it has not: a figure of another method.
OF_SOME_METHODS = ("prefill_tok_s", "prompt_tokens", "concurrency")


@dataclass(frozen=True)
class HeldProfile:
    """The profile file bench was given (`path`, not a file it extends), as read before the
    runs (`text`): the figure is written into it only if it is still that text."""

    path: Path
    text: str


def hold_profile(loaded: LoadedProfile) -> HeldProfile:
    """The file the figure goes to, refused now rather than after the runs: shipped with
    nccl-launch, a symlink, or a file (or folder) this user may not write."""
    path = loaded.path
    if is_shipped(path):
        said = f"{loaded.plan.label} is shipped with nccl-launch, and bench writes nothing "
        said += "into the installed package"
        fix = f"copy it first (nccl-launch new NAME --from {loaded.profile.name}), then measure "
        fix += "the copy"
        raise Refused(Finding("shipped-profile", WRITE, said, fix))
    _check_replaceable(path)
    return HeldProfile(path, read_text(path, "profile", trusted=True))


def _check_replaceable(path: Path) -> None:
    """Refused for a symlink (the new text would replace the link, not the file it names),
    and, as this host's problem, unless this user may replace `path`: a read-only file (no
    write bit: root too respects it) is its owner's wish, and the new text is written beside
    it, so its folder must take a file. A file on a read-only mount (a configMap's, linked
    into the kubelet's timestamped folder) is said so first, by the path given: the path it
    resolves to is gone at the volume's next update."""
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        fix = "bench writes nothing there: change the file where it comes from, or drop "
        fix += "--write-baseline"
        said = f"{path}: on a read-only mount"
        raise Refused(Finding("profile-on-read-only-mount", WRITE, said, fix, cause="host"))
    if path.is_symlink():
        fix = "bench writes the figure into the file itself, never through a link: name "
        fix += os.path.realpath(path)
        raise Refused(Finding("profile-symlink", WRITE, f"{path} is a symlink", fix))
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o222 or not os.access(path, os.W_OK):
        said = f"{path}: read-only (mode {mode:04o})"
        fix = "bench does not replace a file that may not be written: chmod u+w it, or drop "
        fix += "--write-baseline"
        raise Refused(Finding("read-only-profile", WRITE, said, fix, cause="host"))
    if not os.access(path.parent, os.W_OK):
        said = f"{path}: its folder {path.parent} is not writable by this user, and the file is "
        said += "replaced by a new one written there"
        raise Refused(Finding("profile-folder-unwritable", WRITE, said, cause="host"))


def measured_baseline(report: BenchReport, path: Path) -> dict[str, Any]:
    """The `[baseline]` keys bench owns: the mean rounded as the profile shows figures, and
    the method it was measured with; refused, as this host's problem, when the server stopped
    its runs short of max_tokens, whose figure is not one of that method."""
    method = report.method
    fewest = min((run.tokens for run in report.runs), default=0)
    if report.mean_tok_s is None or fewest < method.max_tokens:
        said = f"nothing written to {path}: the server stopped its runs at {fewest} of the "
        said += f"{method.max_tokens} tokens asked (it ignores ignore_eos), so the figure is not "
        said += f"one of max_tokens = {method.max_tokens}"
        raise Refused(Finding("short-runs", WRITE, said, cause="host"))
    figures: dict[str, Any] = {
        "decode_tok_s": round(report.mean_tok_s, 1),
        "max_tokens": method.max_tokens,
        "runs": method.runs,
    }
    if method.prompt_tokens is not None:
        if report.prefill_tok_s is None:
            said = f"nothing written to {path}: the server reported no prompt_tokens in its "
            said += "usage figures, so there is no prefill figure"
            raise Refused(Finding("no-prefill", WRITE, said, cause="host"))
        figures |= {"prefill_tok_s": round(report.prefill_tok_s, 1)}
        figures |= {"prompt_tokens": method.prompt_tokens}
    if method.concurrency > 1:
        figures |= {"concurrency": method.concurrency}
    return figures


def with_baseline(text: str, baseline: dict[str, Any]) -> str:
    """`text` with `baseline`'s keys set in its `[baseline]` table (added at the end if it has
    none) and the keys of a figure of several starts, or of a method `baseline` was not
    measured with, dropped; the rest, byte for byte."""
    import tomlkit  # only --write-baseline pays for it

    # `text` is a profile write_figure has read through parse_profile_toml, so its nesting is
    # bounded (tomlkit, like tomllib, recurses on nested arrays).
    document = tomlkit.parse(text)
    table = document.get("baseline")
    if table is None:
        table = tomlkit.table()
        document.append("baseline", table)
    try:
        for key, value in baseline.items():
            table[key] = value
        for key in (*OF_SEVERAL_STARTS, *OF_SOME_METHODS):
            if key not in baseline:
                table.pop(key, None)
    except (IndexError, KeyError):  # tomlkit, emptying some `baseline.KEY = ...` dotted keys
        said = "nothing written: the profile's [baseline] is written in a form the TOML editor "
        said += "cannot change (dotted keys, baseline.KEY = ...)"
        fix = "write it as a [baseline] table"
        raise Refused(Finding("dotted-baseline", WRITE, said, fix)) from None
    return document.as_string()


def _resolved(held: HeldProfile, text: str) -> LoadedProfile:
    """The profile `held.path` resolves to with `text` in place of the file: its parents as
    they are now."""
    chain = read_chain(held.path)
    child = ChainFile(held.path, parse_profile_toml(held.path, text))
    return validate_chain(ProfileChain((child, *chain.files[1:]), chain.pending))


def write_figure(held: HeldProfile, report: BenchReport, previous: float | None) -> WrittenBaseline:
    """Write the measured figure into `held`'s `[baseline]`, atomically, keeping the file's
    mode; refused when the file (or a file it extends) changed since it was read, or when the
    server stopped its runs short of max_tokens."""
    figure = measured_baseline(report, held.path)
    _check_replaceable(held.path)
    if read_text(held.path, "profile", trusted=True) != held.text:
        said = f"nothing written: {held.path} changed while bench measured, and writing the "
        said += "figure would drop that edit"
        fix = "run bench again on the file as it is now"
        raise Refused(Finding("changed-while-measured", WRITE, said, fix))
    before = _resolved(held, held.text)
    if before.plan.digest != report.digest:
        said = f"nothing written: {held.path} now resolves to {before.plan.digest}, not the "
        said += f"{report.digest} measured (a file it extends changed meanwhile)"
        fix = "run bench again on the profile as it is now"
        raise Refused(Finding("changed-while-measured", WRITE, said, fix))
    text = with_baseline(held.text, figure)
    after = _resolved(held, text)
    baseline = after.profile.baseline
    # Cannot happen ([baseline] is outside the digest), and cheap to prove: a bug, exit 4.
    if after.plan.digest != before.plan.digest or baseline is None:
        raise AssertionError(
            f"--write-baseline: nothing written: the edited {held.path} is not the profile "
            f"measured with a [baseline] (digest {before.plan.digest} -> {after.plan.digest})"
        )
    inherited = [key for key in OF_SEVERAL_STARTS if getattr(baseline, key) is not None]
    if inherited:
        said = f"nothing written: {held.path} extends a [baseline] with "
        said += f"{' and '.join(inherited)}, which a figure of one server start does not have"
        fix = "remove them from the [baseline] of the file it extends"
        raise Refused(Finding("inherited-starts", WRITE, said, fix))
    try:
        write_output(held.path, text, replace=True)
    except Refused as error:  # the figure is measured: the host refuses to keep it
        raise of_host(error) from None
    return WrittenBaseline(path=str(held.path.absolute()), baseline=baseline, previous=previous)
