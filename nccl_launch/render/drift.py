"""Drift as text: the aligned diff `run` refuses with, and the env changes of a dry run."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nccl_launch.env.drift import DriftEntry, DriftKind, DriftReport, Reason
from nccl_launch.escaping import escaped, shell_word
from nccl_launch.profile.markers import NCCL_DEBUG_KEYS
from nccl_launch.secrets.masking import is_secret
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import Secrets, secret_value

if TYPE_CHECKING:  # a launch is drawn by run's dry run alone: check's reports load no launch
    from nccl_launch.launch.prepare import LaunchPlan

_MARKS: dict[DriftKind, str] = {"changed": "~", "missing": "-", "undeclared": "+"}
# At start, what ends each kind of drift besides removing the value where it came from, and
# the [policy] that tolerates it ("missing" is only found in a running server).
_FIXES: dict[DriftKind, str] = {
    "changed": 'or start with the profile\'s value anyway: [policy] conflict = "warn"',
    "undeclared": 'or let the server have it: [policy] undeclared_nccl = "warn"',
}


def quoted(value: str | Secret | None) -> str:
    """A value as reports print it: quoted (a `Secret` masks itself), or `unset`."""
    return "unset" if value is None else json.dumps(str(value))


def quoted_value(key: str, value: str | None, held: bool = False) -> str:
    """A value of the launch's environment as reports print it (`quoted`), masked when it
    looks like a secret or an env file of the profile holds it (`secret_value`)."""
    return quoted(None if value is None else secret_value(key, value, held))


def _entry_value(entry: DriftEntry) -> str:
    shown = [quoted(value) for value in (entry.expected, entry.actual)]
    return shown[1] if entry.kind == "undeclared" else " -> ".join(shown)


def details(entry: DriftEntry) -> list[str]:
    """Where the value came from, what NCCL makes of it, and why it is tolerated: the words
    of every report that shows an entry."""
    note = entry.note if entry.declared_by is None else f"declared by {entry.declared_by}"
    reasons: dict[Reason, list[str | None]] = {
        "drift": [note],
        "policy": [note, "tolerated"],
        "stripped": [note, "removed from the child", "tolerated"],
        "server-owned": ["server-owned", "tolerated"],
        "nccl-debug": ["--nccl-debug", "tolerated"],
        "not-nccl": [entry.note],  # what it is is why: never drift
    }
    return [text for text in (entry.source, *reasons[entry.reason]) if text]


def drift_lines(entries: Sequence[DriftEntry], indent: str = "  ") -> list[str]:
    """One aligned line per entry: mark, key, values, then where the value came from and why;
    each starts with `indent` (none for a finding's details, which the writer indents)."""
    if not entries:
        return []
    keys = {entry.key: escaped(entry.key) for entry in entries}  # an inherited name is any text
    key_width = max(map(len, keys.values()))
    value_width = max(len(_entry_value(entry)) for entry in entries)
    lines = []
    for entry in entries:
        said = details(entry)
        suffix = f"  ({'; '.join(said)})" if said else ""
        key, value = keys[entry.key].ljust(key_width), _entry_value(entry).ljust(value_width)
        lines.append(f"{indent}{_MARKS[entry.kind]} {key}  {value}{suffix}".rstrip())
    return lines


def _removal(entry: DriftEntry) -> str:
    """How to take a value away where it came from: the calling environment, or the file
    that sets it (an env file `run --env-file` named, an nccl.conf)."""
    if entry.set_in is None:
        return "unset it in the calling environment (the shell, the unit's Environment=)"
    return f"remove it from {entry.set_in}"


def _places(entries: Sequence[DriftEntry]) -> str:
    return ", ".join(dict.fromkeys(map(_removal, entries)))


def _declaring(entry: DriftEntry) -> str:
    """Where the value the server should get goes: [nccl] for an undeclared variable, the
    env file that declares it, an env file of the profile for a secret (the profile is
    shown, diffed and committed), else the profile."""
    if entry.kind == "undeclared" and entry.key in NCCL_DEBUG_KEYS:
        return (
            "for NCCL's log use nccl-launch run --nccl-debug (each process writes a file of "
            "its own, which check reads)"
        )
    if entry.kind == "undeclared":
        return "declare it in [nccl] with the value the server should get"
    where = "the profile"
    if entry.declared_by is not None:
        where = entry.declared_by
    elif is_secret(entry.key):
        where = "an env file the profile names (env_files), never the profile itself"
    return f"put the value the server should get in {where}"


def fix_lines(entries: Sequence[DriftEntry]) -> list[str]:
    """How to end each kind of drift among `entries` at start, one line per kind: where the
    values came from, and the [policy] that would tolerate them; a name NCCL does not read
    (a misspelling) has a line of its own, as declaring it is no fix."""
    drifted = [entry for entry in entries if not entry.tolerated]
    unknown = [entry for entry in drifted if entry.kind == "undeclared" and not entry.read_by_nccl]
    lines = []
    for kind, tolerate in _FIXES.items():
        found = [entry for entry in drifted if entry.kind == kind and entry not in unknown]
        for what in dict.fromkeys(map(_declaring, found)):
            alike = [entry for entry in found if _declaring(entry) == what]
            lines.append(f"fix {_MARKS[kind]} ({kind}): {what}, {_places(alike)}, {tolerate}")
    misspelled = [entry for entry in unknown if entry.close_to is not None]
    if misspelled:
        lines.append(
            f"fix {_MARKS['undeclared']} (unknown to NCCL): NCCL reads no such name, so it is "
            f"most likely misspelled (see its did-you-mean): {_places(misspelled)}"
        )
    if others := [entry for entry in unknown if entry not in misspelled]:
        lines.append(
            f"fix {_MARKS['undeclared']} (unknown to NCCL): NCCL reads no such name, nor one "
            f"close to it: {_places(others)}, or, where this site sets it for a program of its "
            "own, name it in [policy] not_nccl"
        )
    return lines


def restart_line(path: str, server: bool, undeclared: bool) -> str:
    """How to end drift in a running server, whose environment cannot change: a restart
    through `run` with the profile at `path` (its command after `--` without a [server]);
    `undeclared` when it runs with a variable NCCL reads that the profile does not declare."""
    command = shell_word(path) + ("" if server else " -- COMMAND...")
    declare = "; an undeclared variable it should keep goes in [nccl] first" if undeclared else ""
    return (
        "fix: a process keeps the environment it started with: restart the server through "
        f"nccl-launch run {command} (its unit, or that command){declare}"
    )


# Where NCCL's log of a process says a value its /proc/PID/environ does not hold.
LATE_LINE = (
    "fix: NCCL's log says what the process set inside itself after start (a wrapper's late "
    "export, a library's os.environ): remove that there; a restart alone runs it again"
)


def refusal_lines(launch: LaunchPlan, report: DriftReport) -> list[str]:
    """Why `run` will not start: a header, one aligned line per entry, a summary, the fixes."""
    plan = launch.plan
    header = f"refusing to start: environment drifts from {plan.label} ({plan.short_digest})"
    return [header, *drift_lines(report.entries), report.summary(), *fix_lines(report.entries)]


def env_changes(
    calling: Mapping[str, str], env: Mapping[str, str], sources: Mapping[str, str], secrets: Secrets
) -> list[str]:
    """What the child's environment adds, changes and removes relative to the calling one,
    each value as the launch's `secrets` wrap it (`Secrets.value`): the keys an env file of
    the profile sets masked, the value before them too (it may be the key of before)."""
    rows = []
    for key in sorted(set(calling) | set(env)):
        if key not in env:
            rows.append(("-", key, "", f"was {quoted(secrets.value(key, calling[key]))}"))
        elif key not in calling:
            rows.append(("+", key, quoted(secrets.value(key, env[key])), sources[key]))
        elif calling[key] != env[key]:
            was, now = (quoted(secrets.value(key, each)) for each in (calling[key], env[key]))
            rows.append(("~", key, now, f"was {was}; {sources[key]}"))
    key_width = max((len(key) for _, key, _, _ in rows), default=0)
    # Long values (the digest) are left to overhang rather than push every column right.
    value_width = max((len(value) for _, _, value, _ in rows if len(value) <= 24), default=0)
    return [
        f"  {mark} {key.ljust(key_width)}  {value.ljust(value_width)}  ({detail})"
        for mark, key, value, detail in rows
    ]


def dry_run_lines(launch: LaunchPlan, calling: Mapping[str, str]) -> list[str]:
    """What `run --dry-run` prints: the profile, the env changes, the cwd, the argv."""
    plan = launch.plan
    lines = [f"profile {plan.label} ({plan.short_digest}) from {launch.path}"]
    lines += [
        "environment changes:",
        *env_changes(calling, launch.merged.env, launch.merged.sources, launch.secrets),
    ]
    others = [entry for entry in launch.merged.report.entries if entry.reason == "not-nccl"]
    if others:
        lines += ["not NCCL's, left as they are:", *drift_lines(others)]
    if launch.cwd is not None:
        lines.append(f"cwd: {launch.cwd}")
    return [*lines, "argv:", "  " + " ".join(shell_word(str(word)) for word in launch.shown_argv)]
