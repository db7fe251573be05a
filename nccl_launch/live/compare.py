"""Live drift: every process of a running server compared with its profile (pure; on dicts)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, field_serializer

from nccl_launch.env.drift import DriftEntry, diff_env
from nccl_launch.env.merge import Declared, EnvLayer, declared_environment
from nccl_launch.errors import EXIT_DRIFT, EXIT_HOST, EXIT_OK
from nccl_launch.findings import Finding, lines
from nccl_launch.live.nccl_logs import NcclLog, NcclLogs
from nccl_launch.profile.markers import MARKER_DIGEST, MARKER_NCCL_DEBUG, MARKER_PROFILE
from nccl_launch.profile.model import Policy
from nccl_launch.profile.plan import ProfilePlan
from nccl_launch.report import Report
from nccl_launch.secrets.masking import mask_argv
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import Secrets, secrets_of

if TYPE_CHECKING:  # read from /proc by live/processes.py, which imports psutil
    from nccl_launch.live.processes import ProcessSnapshot


TITLE_WIDTH = 100


def title(argv: Sequence[str | Secret], secrets: Secrets | None = None) -> str:
    """A command line read back (`ProcessSnapshot.argv`) as people see it: each word with the
    values the launch's `secrets` know masked too (`Secrets.known`: a name the profile filled
    in is no credential by any rule), before it is quoted and cut to TITLE_WIDTH, so that no
    part of one is left at the cut."""
    shown = [str(word) for word in argv]  # a `Secret` as people see it
    words = shown if secrets is None else [secrets.known(word) for word in shown]
    line = words[0] if len(words) == 1 else shlex.join(words)
    return line if len(line) <= TITLE_WIDTH else line[: TITLE_WIDTH - 3] + "..."


class ProcessReport(BaseModel):
    """The comparison for one process of the tree (its `title`, the secrets masked): its
    entries are /proc's, then those of NCCL's log where it says otherwise (`nccl_log`, for a
    process started by `run --nccl-debug`)."""

    pid: int
    title: str
    readable: bool
    reason: str | None = None
    entries: list[DriftEntry] = []
    matched: list[str] = []
    nccl_log: NcclLog | None = None

    @property
    def drifted(self) -> list[DriftEntry]:
        return [entry for entry in self.entries if not entry.tolerated]


class LiveReport(Report):
    """`check`'s result, rendered as text, JSON (this model) or Prometheus."""

    profile: str
    digest: str
    path: str
    main_pid: int
    running_profile: str | None
    running_digest: str | None
    processes: list[ProcessReport]
    # Set while `check --watch` finds the profile invalid and compares with its last good
    # version: why it is invalid (in JSON its lines joined, else null).
    profile_error: list[Finding] = Field(default_factory=list)
    # The profile's env files this checker could not read (whose keys went unchecked): why
    # (in JSON each finding's line).
    unchecked_env_files: list[Finding] = Field(default_factory=list)
    # Whether the profile has a [server] (else `run` takes the command after `--`); not in
    # the JSON, which has the profile's path.
    server: bool = Field(default=True, exclude=True)
    # What people must not see of the tree (`secrets_of`), for what is shown of the server
    # beside this report (the model it names, bench's failed requests); not in the JSON.
    secrets: Secrets = Field(default_factory=lambda: secrets_of([], {}), exclude=True)

    @property
    def profile_problem(self) -> str | None:
        """Why the profile is invalid now, its findings' lines joined; None while valid."""
        return "; ".join(lines(self.profile_error)) or None

    @field_serializer("profile_error")
    def _profile_error(self, _: list[Finding]) -> str | None:
        return self.profile_problem

    @field_serializer("unchecked_env_files")
    def _unchecked(self, unchecked: list[Finding]) -> list[str]:
        return [each.line() for each in unchecked]

    @property
    def digest_differs(self) -> bool:
        return self.running_digest is not None and self.running_digest != self.digest

    @property
    def unreadable(self) -> list[ProcessReport]:
        return [process for process in self.processes if not process.readable]

    @property
    def drifts(self) -> bool:
        """A drifted key in some process, or the server runs another digest than the file's."""
        return self.digest_differs or any(process.drifted for process in self.processes)

    @property
    def ok(self) -> bool:
        """No drift, and every process could be read: nothing is left unverified."""
        return not (self.drifts or self.unreadable)

    @property
    def exit_code(self) -> int:
        """0 ok; 3 when no process could be read at all (a target problem); 1 otherwise."""
        if self.ok:
            return EXIT_OK
        return EXIT_HOST if len(self.unreadable) == len(self.processes) else EXIT_DRIFT


def process_report(
    declared: Declared,
    policy: Policy,
    snapshot: ProcessSnapshot,
    logs: NcclLogs,
    secrets: Secrets | None = None,
) -> ProcessReport:
    """One process against what the profile declares, by /proc and by its NCCL log read on
    in `logs`: a missing key is drift here (the profile set it at start). Its title masks
    the `secrets` of the launch."""
    shown = title(snapshot.argv, secrets)
    if snapshot.env is None:
        return ProcessReport(
            pid=snapshot.pid, title=shown, readable=False, reason=snapshot.unreadable
        )
    debug = snapshot.env.get(MARKER_NCCL_DEBUG) == "1"  # started with `run --nccl-debug`
    entries, matched = diff_env(
        declared.env,
        snapshot.env,
        {},
        policy,
        "live",
        nccl_debug=debug,
        declared_by=declared.files,
    )
    nccl_log, said = logs.judge(snapshot, declared.env, policy)
    contradicted = {entry.key for entry in said}  # NCCL's word wins over /proc's
    return ProcessReport(
        pid=snapshot.pid,
        title=shown,
        readable=True,
        entries=entries + said,
        matched=[key for key in matched if key not in contradicted],
        nccl_log=nccl_log,
    )


def evaluate(
    plan: ProfilePlan,
    policy: Policy,
    path: str,
    snapshots: Sequence[ProcessSnapshot],
    profile_error: Sequence[Finding] = (),
    env_files: Sequence[EnvLayer] = (),
    unchecked_env_files: Sequence[Finding] = (),
    logs: NcclLogs | None = None,
) -> LiveReport:
    """The live report of a process tree; `snapshots[0]` is the server's main process.
    `env_files` are those of the profile's env files this checker could read, and
    `unchecked_env_files` why it could not read the others; `logs`, the NCCL logs a watch
    follows from look to look (a single look reads them afresh). The titles mask the
    secrets of the launch as `run` decided them, read back from the main process's command
    line, and the values of the files read."""
    main_env = snapshots[0].env or {}
    declared = declared_environment(plan, env_files)
    held = {key: value for layer in env_files for key, value in layer.values.items()}
    written = mask_argv(plan.argv)  # as the command line was read: masked by the rules
    read = [str(word) for word in snapshots[0].argv]  # as people see it, word for word
    secrets = secrets_of(read, plan.env | held, held, written)
    logs = NcclLogs() if logs is None else logs
    logs.look(snapshots)
    return LiveReport(
        profile=plan.label,
        digest=plan.digest,
        path=path,
        main_pid=snapshots[0].pid,
        running_profile=main_env.get(MARKER_PROFILE),
        running_digest=main_env.get(MARKER_DIGEST),
        processes=[
            process_report(declared, policy, snapshot, logs, secrets) for snapshot in snapshots
        ],
        profile_error=list(profile_error),
        unchecked_env_files=list(unchecked_env_files),
        server=bool(plan.argv),
        secrets=secrets,
    )
