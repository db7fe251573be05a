"""`systemd PROFILE`: a service unit that preflights, then execs the server through the launcher."""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from nccl_launch.deploy.unit_input import description, profile_path, unit_findings, unit_path
from nccl_launch.digits import is_ascii_digits
from nccl_launch.env.env_files import (
    Assignment,
    filled_args,
    key_variable_findings,
    profile_env_file_read,
    secret_layers,
)
from nccl_launch.env.merge import EnvLayer
from nccl_launch.files.trust import check_absent, check_trusted
from nccl_launch.files.writing import write_output
from nccl_launch.findings import EXTRA_ARGS, Finding, Refused, refuse, unset_reference
from nccl_launch.kinds import kind_of
from nccl_launch.profile.load import LoadedProfile, load_profile
from nccl_launch.profile.markers import NCCL_DEBUG_KEYS
from nccl_launch.serving.references import REFERENCE
from nccl_launch.serving.rules import argument_findings
from nccl_launch.serving.table import ServerTable as Server

START_TIMEOUT_S = 1800  # model load and CUDA-graph capture take minutes on 8 GPUs
STOP_TIMEOUT_S = 120
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
# Where systemd's managers load units from (systemd.unit(5)); the user ones under HOME too.
SYSTEM_UNIT_DIRS = (
    "/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system", "/lib/systemd/system",
)  # fmt: skip
USER_UNIT_DIRS = ("/etc/systemd/user", "/run/systemd/user", "/usr/lib/systemd/user")
HOME_UNIT_DIRS = (".config/systemd/user", ".local/share/systemd/user")


def launcher() -> list[str]:
    """The installed console script beside this interpreter, else `python -m nccl_launch`."""
    script = Path(sys.executable).with_name("nccl-launch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nccl_launch"]


def exec_word(argument: str, expand: bool = False) -> str:
    """One argument of an Exec line: `%` and `$` escaped, quoted when it has other specials;
    with `expand`, each `${NAME}` is kept for systemd to replace with the variable's value
    (as one argument, blanks and all) from the unit's environment."""
    parts = REFERENCE.split(argument) if expand else [argument]
    escaped = "".join(
        part if index % 2 else part.replace("%", "%%").replace("$", "$$")
        for index, part in enumerate(parts)
    )
    if _PLAIN.fullmatch(argument):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


Assignments = list[tuple[Path, Assignment]]


def server_words(
    loaded: LoadedProfile, args: Sequence[str], assignments: Assignments | None
) -> tuple[str, list[Finding]]:
    """` -- ARGS` of the Exec lines for the server's extra arguments `args` (empty without
    any), `${NAME}` kept for systemd to expand; and a note for each NAME that none of the
    profile's env files sets as systemd reads them (it would pass an empty argument).
    `unit_input.unit_findings` has judged them first."""
    if not args:
        return "", []
    words = " -- " + " ".join(exec_word(word, expand=True) for word in args)
    names = {name[2:-1] for word in args for name in REFERENCE.findall(word)}
    if assignments is None:
        return words, []  # a file this user cannot read: nothing to say
    set_for_systemd = {each.key for _, each in assignments if not each.exported}
    exported = {each.key: f"{path}:{each.line}" for path, each in assignments if each.exported}
    files = [str(path) for path in loaded.env_files]
    notes = []
    for name in sorted(names - set_for_systemd):
        if name in exported:
            message = (
                f"{exported[name]} sets it with 'export', which systemd's EnvironmentFile= does "
                "not read"
            )
            fix = f"write {name}=VALUE there, or systemd passes an empty argument"
            notes.append(Finding("exported", f"${{{name}}}", message, fix, "warning"))
        else:
            then = ", so unless the unit's environment has it, systemd passes an empty argument"
            notes.append(unset_reference(name, EXTRA_ARGS, files, then=then))
    return words, notes


def unit_file(
    loaded: LoadedProfile,
    server: Server,
    user: str | None,
    pin: bool,
    extra: str,
    nccl_debug: bool = True,
) -> str:
    """The unit text for `server`, the profile's: Type=exec so MainPID is the server,
    preflight as ExecStartPre=; with `pin`, both refuse the profile once its digest is no
    longer the one written here; `extra` (from `server_words`) ends both lines. With
    `nccl_debug`, run --nccl-debug, unless the profile sets NCCL's logging itself (run
    would refuse the two at every start)."""
    profile, env_files = loaded.profile, loaded.env_files
    path = profile_path(loaded)
    command = " ".join(exec_word(word) for word in launcher())
    profile_words = exec_word(path) + (f" --digest {loaded.plan.digest}" if pin else "")
    debug = nccl_debug and not NCCL_DEBUG_KEYS & loaded.plan.env.keys()
    service = [
        "Type=exec",
        *([f"User={user}"] if user is not None else []),
        # Literally: `%` doubled (a specifier).
        *([f"WorkingDirectory={server.cwd.replace('%', '%%')}"] if server.cwd else []),
        # The unit's processes get the secrets from systemd; run reads the same files and
        # finds the same values, a match.
        *[f"EnvironmentFile={unit_path(each).replace('%', '%%')}" for each in env_files],
        f"ExecStartPre={command} preflight {profile_words}{extra}",
        f"ExecStart={command} run {'--nccl-debug ' * debug}{profile_words}{extra}",
        f"TimeoutStartSec={START_TIMEOUT_S}",
        f"TimeoutStopSec={STOP_TIMEOUT_S}",
        "Restart=on-failure",
        "RestartSec=30",
        "# SIGTERM to the server's main process only (its workers die with it), SIGKILL to any",
        "# process of the unit left after TimeoutStopSec.",
        "KillMode=mixed",
    ]
    lines = [
        f"# Generated by nccl-launch from {path} ({profile.label})",
        "[Unit]",
        f"Description={description(loaded, server).replace('%', '%%')} ({profile.label})",
        "Wants=network-online.target",
        "After=network-online.target",
        "# A server that fails at once is started 5 times in 10 minutes, then left failed.",
        "StartLimitIntervalSec=600",
        "StartLimitBurst=5",
        "",
        "[Service]",
        *service,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def environment_file_findings(loaded: LoadedProfile, user: str | None) -> list[Finding]:
    """As root, a problem of each env file the unit names (EnvironmentFile=) that a user other
    than root and the service's `user` could have written, or could create while it is
    absent: systemd reads it as root at every start and gives it to nccl-launch itself, whose
    Python it shapes (PYTHONPATH, LD_PRELOAD) before its run judges any file."""
    try:
        entry = None if user is None else _account(user)
    except (KeyError, OverflowError, ValueError):  # ValueError: past int()'s digits
        entry = None  # a user this host does not know (yet, or no user): root alone is trusted
    owners = () if entry is None else (entry.pw_uid,)
    found = []
    for path in loaded.env_files:
        try:
            try:
                status = path.stat()
            except FileNotFoundError:
                check_absent(path, "env file", "systemd (EnvironmentFile=)")
                continue
            check_trusted(path, status, "env file", owners=owners)
        except Refused as error:  # said at env_files, in the profile
            found += [
                Finding("host-file", "env_files", each.text(), cause="host", file=str(loaded.path))
                for each in error.findings
            ]
    return found


def _account(user: str) -> pwd.struct_passwd:
    return pwd.getpwuid(int(user)) if is_ascii_digits(user) else pwd.getpwnam(user)


def unreadable_by(user: str, paths: Sequence[Path]) -> list[Finding]:
    """A note for each of `paths` (the profile's files, its env files) that the service's
    `user` may not read by its mode, where the unit's preflight and run would fail at every
    start; none for root, or for a user this host does not know (it may be made later)."""
    try:
        entry = _account(user)
    except (KeyError, OverflowError):
        return []
    if entry.pw_uid == 0:
        return []
    member = {group.gr_gid for group in grp.getgrall() if entry.pw_name in group.gr_mem}
    notes = []
    for path in paths:
        try:
            status = path.stat()
        except OSError:
            continue  # missing: preflight says so
        if status.st_uid == entry.pw_uid:
            bit = stat.S_IRUSR
        else:
            bit = stat.S_IRGRP if status.st_gid in {entry.pw_gid, *member} else stat.S_IROTH
        if not status.st_mode & bit:
            message = (
                f"User={user} may not read it (mode {stat.S_IMODE(status.st_mode):04o}, uid "
                f"{status.st_uid}), so the unit's preflight and run would fail at start"
            )
            fix = f"chown {user}, or chgrp its group and chmod 0640"
            notes.append(Finding("unreadable", str(path), message, fix, "warning"))
    return notes


def write_unit(
    ref: str,
    user: str | None,
    output: Path | None,
    force: bool,
    pin: bool = True,
    args: Sequence[str] = (),
    nccl_debug: bool = True,
) -> tuple[str, list[Finding]]:
    """The unit of profile `ref` (its digest pinned unless `pin` is False, run with --nccl-debug
    unless `nccl_debug` is False, the server's extra `args` after `--`), written atomically to
    `output` when given (never replacing a file without `force`); and the notes on `args`.
    """
    loaded = load_profile(ref)
    server = loaded.profile.server
    if server is None:
        message = "no [server] table, so no server to run as a service"
        raise Refused([Finding("no-server", "", message, file=str(loaded.path))])
    notes: list[Finding] = []
    files = [*loaded.env_files, *loaded.secret_files.values()]
    unread = [str(path) for path in files if not os.access(path, os.R_OK)]
    assignments: Assignments | None = None
    if unread:  # the service's User= may read them (or they come later): its run judges them
        why = f"their values are not checked here: this user cannot read {', '.join(unread)}"
        notes.append(Finding("unchecked", "env_files", why, "", "warning"))
    else:
        # Held to run's rules, which would refuse them at every start; read, not trusted: the
        # service's User= runs with them, and its run judges who may write them.
        assignments, misread = [], []
        for path in loaded.env_files:
            read, problems = profile_env_file_read(loaded, path, trusted=False)
            assignments += [(path, each) for each in read]
            misread += problems
        refuse(misread)  # every problem of every file, before anything reads them
    # Refused as run would refuse it at every start: a ${NAME} of [server] args that none of
    # the env files sets (the unit's environment may set those its policy takes from there),
    # or a credential flag left without a key.
    found = unit_findings(loaded, server, user, args)
    found += argument_findings(kind_of(server), server, args, str(loaded.path), ref)
    found += environment_file_findings(loaded, user)
    if assignments is not None:
        layers = [
            EnvLayer(str(path), {each.key: each.value}) for path, each in assignments
        ] + secret_layers(loaded, trusted=False)
        unit_env = dict.fromkeys(loaded.profile.policy.environment_references, "-")
        filled, unfilled = filled_args(loaded, layers, unit_env)
        unit = {key: value for layer in layers for key, value in layer.values.items()}
        sources = dict.fromkeys(loaded.profile.env, f"{loaded.path} [env]")
        sources |= {key: layer.source for layer in layers for key in layer.values}
        env = loaded.profile.env | unit
        found = unfilled + found + key_variable_findings(loaded, env, sources, [*filled, *args])
    refuse(found)
    extra, on_args = server_words(loaded, args, assignments)
    notes += on_args
    otherwise = (
        "systemd's EnvironmentFile= may read this value otherwise than run does (quotes, "
        "blanks, backslashes, $), and the unit's run would refuse the difference as drift"
    )
    notes += [
        Finding(
            "read-otherwise",
            f"{path}:{each.line}: {each.key}",
            otherwise,
            "write it plainly or in single quotes",
            "warning",
        )
        for path, each in assignments or []
        if not each.alike
    ]
    if user is not None:
        notes += unreadable_by(user, [*loaded.chain, *loaded.env_files])
    text = unit_file(loaded, server, user, pin, extra, nccl_debug)
    if output is not None:
        write_output(output, text, replace=force)
    return text, notes


def unit_manager(path: Path) -> str | None:
    """`system` or `user`: the systemd manager that loads units from the folder of `path`;
    None for a folder systemd never reads (a scratch directory)."""
    folder = os.path.realpath(path.parent)
    home = [str(Path.home() / relative) for relative in HOME_UNIT_DIRS]
    for manager, dirs in (("system", SYSTEM_UNIT_DIRS), ("user", (*USER_UNIT_DIRS, *home))):
        if folder in {os.path.realpath(candidate) for candidate in dirs}:
            return manager
    return None
