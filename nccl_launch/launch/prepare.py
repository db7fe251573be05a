"""Everything `run` and `preflight` decide before exec: profile, env files, nccl.conf, argv."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from nccl_launch.env.drift import DriftEntry, DriftReport
from nccl_launch.env.env_files import (
    filled_args,
    key_variable_findings,
    profile_layer_findings,
    read_env_files,
)
from nccl_launch.env.merge import EnvLayer, MergeResult, inherited_environment, merge_environment
from nccl_launch.files.reading import read_text
from nccl_launch.files.trust import check_absent, check_trusted
from nccl_launch.findings import Finding, Refused, refuse
from nccl_launch.kinds import kind_of
from nccl_launch.launch.placement import Placement, placement_args
from nccl_launch.launch.program import COMMAND, SERVER_PYTHON, start_findings
from nccl_launch.nccl.conf import ConfEntry, conf_paths, parse
from nccl_launch.profile.lint import run_notes
from nccl_launch.profile.load import LoadedProfile, check_pin, load_profile
from nccl_launch.profile.markers import (
    MARKER_NCCL_DEBUG,
    NCCL_DEBUG_ENV,
    NCCL_DEBUG_FILE,
    NCCL_DEBUG_KEYS,
)
from nccl_launch.profile.plan import ProfilePlan
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import Secrets, secret_words, secrets_of
from nccl_launch.serving.rules import argument_findings, unfilled_findings


@dataclass(frozen=True)
class LaunchPlan:
    """The launch: the loaded profile, the merged env and the final argv."""

    loaded: LoadedProfile
    merged: MergeResult
    argv: list[str]  # as people see it: `${NAME}` of [server] args unfilled
    filled: list[str]  # `argv` as the server gets it
    conf: list[ConfEntry]
    unreadable_conf: list[Finding]  # warnings: NCCL skips such a file too
    # What people must not see of `filled` and `merged.env`, decided once (`secrets_of`).
    secrets: Secrets
    env_files: list[EnvLayer] = dataclasses.field(default_factory=list)  # the profile's
    # With --nccl-debug: the folder under the state home of each process's NCCL log, which
    # `run` creates as it execs.
    nccl_logs: PurePath | None = None

    @property
    def plan(self) -> ProfilePlan:
        return self.loaded.plan

    @property
    def path(self) -> Path:
        return self.loaded.path

    @property
    def cwd(self) -> str | None:
        server = self.loaded.profile.server
        return server.cwd if server is not None else None

    @property
    def shown_argv(self) -> list[str | Secret]:
        """`argv` as it travels to people, what masking hides of it wrapped (`secret_words`)."""
        return secret_words(self.argv)

    def command(self) -> list[str]:
        """The argv to exec; without `[server]` it is what followed `--`, and must be there."""
        if not self.argv:
            message = f"profile {self.plan.label} has no [server] table"
            fix = f"give the command after '--': nccl-launch run {self.path} -- COMMAND..."
            raise Refused([Finding("no-command", "", message, fix)])
        if not self.argv[0]:  # exec cannot run a program without a name
            message = "the command after '--' is an empty word"
            raise Refused([Finding("no-command", "", message, "give the program to run")])
        return self.filled

    def start_findings(self) -> list[Finding]:
        """What keeps the command from starting on this host, its cwd and program judged as
        `preflight` judges them (`program.start_findings`)."""
        what = SERVER_PYTHON if self.loaded.profile.server is not None else COMMAND
        return start_findings(self.filled[0], what, self.cwd, self.merged.env)

    def refusal(self) -> DriftReport | None:
        """The drift that stops the launch, or None when nothing drifts."""
        report = self.merged.report
        return report if report.drifted else None

    def tolerated(self) -> list[DriftEntry]:
        """Differences the policy lets through, worth a warning (the server's own keys are not)."""
        entries = self.merged.report.entries
        return [entry for entry in entries if entry.reason in ("policy", "stripped")]

    def warnings(self) -> list[Finding]:
        """The profile's notes worth saying on every start, and the nccl.conf files that could
        not be read."""
        return [*run_notes(self.loaded.profile), *self.unreadable_conf]


def read_conf(env: Mapping[str, str]) -> tuple[list[ConfEntry], list[Finding], list[Finding]]:
    """The entries of the nccl.conf files NCCL reads for `env`, in precedence order; a
    warning for each file it could not read (this host's), and an error for each regular
    file others could have written, as root (refused, like a profile). An absent file is the
    usual case."""
    entries, unreadable, untrusted = [], [], []
    for path in conf_paths(env):
        try:
            status = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            try:  # NCCL reads it when the server starts: no other user may create it first
                check_absent(path, "nccl.conf", "NCCL")
            except Refused as error:
                untrusted += error.findings
            continue
        except OSError as error:
            unreadable.append(_unreadable(f"nccl.conf {path}: cannot read: {error.strerror}"))
            continue
        if path == Path(os.devnull):
            continue  # the usual way to have NCCL read no file
        if stat.S_ISREG(status.st_mode):
            try:
                check_trusted(path, status, "nccl.conf")
            except Refused as error:
                untrusted += error.findings
                continue
        try:
            # NCCL reads bytes: keep them, as surrogates, rather than refuse the file.
            text = read_text(path, "nccl.conf", trusted=True, errors="surrogateescape")
        except Refused as error:  # this host's file: a warning
            unreadable += [
                dataclasses.replace(each, severity="warning", cause="host")
                for each in error.findings
            ]
            continue
        entries += parse(text, str(path))
    return entries, unreadable, untrusted


def _unreadable(message: str) -> Finding:
    return Finding("unreadable", "", message, severity="warning", cause="host")


def prepare_launch(
    ref: str,
    extra: Sequence[str],
    env_files: Sequence[Path],
    calling: Mapping[str, str],
    placement: Placement | None = None,
    nccl_debug: bool = False,
    pin: str | None = None,
) -> LaunchPlan:
    """Resolve the profile (refused unless it has the digest `pin`, when given), build the argv
    and merge the env; drift is in `merged.report`."""
    placement = placement or Placement()
    # This run says whether NCCL logs for check: a marker inherited from another run does
    # not, and with --nccl-debug neither does the caller's NCCL_DEBUG (replaced below).
    replaced = {MARKER_NCCL_DEBUG, *(NCCL_DEBUG_KEYS if nccl_debug else ())}
    calling = {key: value for key, value in calling.items() if key not in replaced}
    loaded = check_pin(load_profile(ref), pin)
    plan, server = loaded.plan, loaded.profile.server
    # The profile's own env files before any --env-file: a problem in them is said first.
    # Every problem of every file at once, before anything that reads them.
    declared, found = profile_layer_findings(loaded)
    given, misread = read_env_files(env_files)
    refuse(found + misread)
    inherited = inherited_environment(calling, given)
    if server is not None:
        problem = kind_of(server).rules.model_problem(server, model_architecture)
        found += [problem.in_file(str(loaded.path))] if problem is not None else []
        args, unfilled = filled_args(loaded, declared, inherited.env)
        filled_server = server.model_copy(update={"args": args})
        kind = kind_of(server)
        found += unfilled + argument_findings(kind, server, extra, str(loaded.path), ref)
        found += unfilled_findings(kind, extra)
        placed, misplaced = placement_args(server, placement, calling)
        found += misplaced
        more = placed + list(extra)
        argv, filled = plan.argv + more, kind_of(server).command.argv(filled_server) + more
    else:
        if placement != Placement():
            message = f"profile {plan.label} has no [server] table to place on a node"
            found.append(Finding("placement", "", message))
        # Empty when there is nothing to run: `run` refuses, `preflight` not.
        argv = filled = list(extra)
    origins = {key: str(path) for key, path in loaded.origins.items()}
    # Enough of the child's env to know which nccl.conf files NCCL will read.
    conf, unreadable, untrusted = read_conf(inherited.env | plan.env)
    found += untrusted
    merged = merge_environment(
        inherited,
        plan,
        loaded.profile.policy,
        origins,
        conf,
        profile_file=loaded.path,
        env_files=declared,
    )
    if server is not None:
        declared_env = loaded.profile.declared_env()
        found += kind_of(server).rules.environment_findings(server, merged.env, declared_env)
        found += key_variable_findings(loaded, merged.env, merged.sources, filled)
    found += nccl_debug_findings(plan) if nccl_debug else []
    refuse(found)  # every error at once, with the exit code of whose problem they are
    held = {key for layer in declared for key in layer.values}
    secrets = secrets_of(filled, merged.env, held, argv)
    folder: PurePath | None = None
    if nccl_debug:  # NCCL's logs and their reader only for --nccl-debug: off run's path
        from nccl_launch.jsonlines import state_home
        from nccl_launch.live.nccl_logs import debug_file, run_folder

        folder = run_folder(loaded.profile.name, os.getpid())  # `run` names it resolved
        merged = with_nccl_debug(merged, plan, debug_file(state_home().path / folder))
    return LaunchPlan(
        loaded=loaded,
        merged=merged,
        argv=argv,
        conf=conf,
        unreadable_conf=unreadable,
        env_files=declared,
        filled=filled,
        secrets=secrets,
        nccl_logs=folder,
    )


def model_architecture(model_path: str) -> str | None:
    """`architectures[0]` from the model's config.json, when it is readable on this machine."""
    try:
        config = json.loads(read_text(Path(model_path) / "config.json", "model config"))
        architecture = config["architectures"][0]
    except (Refused, ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None  # a regular file of at most 1 MiB, or unknown
    return architecture if isinstance(architecture, str) else None


def nccl_debug_findings(plan: ProfilePlan) -> list[Finding]:
    """Where the profile sets NCCL's logging itself, which --nccl-debug would replace."""
    return [
        Finding("nccl-debug", "", f"the profile declares {name}; drop it or --nccl-debug")
        for name in sorted(NCCL_DEBUG_KEYS & plan.env.keys())
    ]


def with_nccl_debug(
    merged: MergeResult, plan: ProfilePlan, log_file: str | None = None
) -> MergeResult:
    """NCCL_DEBUG=INFO with the ENV subsystem, marked so that `check` tolerates it; with
    `log_file`, NCCL_DEBUG_FILE: each process writes there instead of its standard output,
    and `check` reads it. Whatever the calling environment had for them is replaced."""
    refuse(nccl_debug_findings(plan))
    extra = NCCL_DEBUG_ENV | {MARKER_NCCL_DEBUG: "1"}
    if log_file is not None:
        extra[NCCL_DEBUG_FILE] = log_file
    sources = merged.sources | dict.fromkeys(extra, "--nccl-debug")
    return dataclasses.replace(merged, env=merged.env | extra, sources=sources)
