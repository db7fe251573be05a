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

from nccl_launch.deploy.exports import CONTROL
from nccl_launch.digits import is_ascii_digits
from nccl_launch.env.drift import ENV_FILE
from nccl_launch.env.env_files import (
    Assignment,
    filled_args,
    key_variable_findings,
    profile_env_file_read,
    secret_layers,
)
from nccl_launch.env.merge import EnvLayer
from nccl_launch.errors import UsageError
from nccl_launch.escaping import not_utf8
from nccl_launch.files.writing import write_output
from nccl_launch.findings import Finding, refuse, unset_reference
from nccl_launch.kinds import EXTRA_ARGS, argument_findings, kind_of
from nccl_launch.masking import mask_credentials
from nccl_launch.profile.load import LoadedProfile, load_profile
from nccl_launch.profile.markers import NCCL_DEBUG_KEYS
from nccl_launch.secrets import secrets_of
from nccl_launch.serving.references import REFERENCE
from nccl_launch.serving.table import ServerTable as Server

START_TIMEOUT_S = 1800  # model load and CUDA-graph capture take minutes on 8 GPUs
STOP_TIMEOUT_S = 120
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
# A name or a numeric uid, as useradd and systemd's User= read it; nothing systemd expands.
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?")
UID_INVALID = 2**32 - 1
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


def _one_line(where: str, text: str) -> str:
    """`text` when it can be the value of a unit line: systemd ends a line at a newline, CR or
    NUL, joins the next one to a line ending in a backslash, and ignores one that is not
    UTF-8; so those are refused."""
    found = CONTROL.search(text)
    if found is not None:
        raise UsageError(
            f"{where}: holds the control character {found[0]!r}, which would end the unit's "
            "line; write it on one line without control characters"
        )
    byte = not_utf8(text)
    if byte is not None:
        raise UsageError(
            f"{where}: holds the byte {byte}, which is not UTF-8; systemd ignores a unit line "
            "that is not UTF-8 text"
        )
    if text.endswith("\\"):
        raise UsageError(f"{where}: ends in a backslash, which joins the unit's next line to it")
    return text


def _env_file_line(loaded: LoadedProfile, path: Path) -> str:
    """`EnvironmentFile=` for one of the profile's env files: the path `run` reads, absolute
    and without `..` (systemd refuses a path that is not normalized), its folders' symlinks
    resolved but not the file's own (a rotated `current.env` link stays the one named);
    `%` doubled (a specifier); trailing blanks refused (systemd strips them)."""
    named = Path(os.path.realpath(path.parent)) / path.name
    return "EnvironmentFile=" + _unit_path(f"{loaded.path}: env_files: {path}", str(named))


def _working_directory(loaded: LoadedProfile, cwd: str) -> str:
    """`WorkingDirectory=` for the server's cwd, the directory `run` changes to: systemd
    starts no unit whose path is relative or holds `..`, and reads a leading `-` or `~` as
    its own syntax (relative paths to `run`), so only an absolute path without `..` is
    written, literally."""
    where = f"{loaded.path}: server.cwd"
    if not cwd.startswith("/") or ".." in cwd.split("/"):
        raise UsageError(
            f"{where}: {cwd!r} is not an absolute path without '..', which systemd's "
            "WorkingDirectory= needs to start the unit; write the directory's absolute path"
        )
    return "WorkingDirectory=" + _unit_path(where, cwd)


def _unit_path(where: str, path: str) -> str:
    """`path` as a unit line's value: on one line, `%` doubled (a specifier), a trailing
    blank refused (systemd drops it)."""
    text = _one_line(where, path)
    if text != text.rstrip():
        raise UsageError(f"{where}: ends in a blank, which systemd drops")
    return text.replace("%", "%%")


def _user(user: str) -> str:
    if is_ascii_digits(user):  # a uid to systemd, which refuses (uid_t) -1 and 65535 (16-bit -1)
        valid = len(user) <= 10 and int(user) < UID_INVALID and int(user) != 65535
    else:
        valid = _USER.fullmatch(user) is not None
    if not valid:
        raise UsageError(
            f"--user: {user!r} is not a user name; valid: a name of letters, digits, '_', "
            f"'.', '-', '@' (not starting with '-' or '.') or a numeric uid below {UID_INVALID} "
            "but 65535"
        )
    return user


Assignments = list[tuple[Path, Assignment]]


def server_words(
    loaded: LoadedProfile, args: Sequence[str], assignments: Assignments | None
) -> tuple[str, list[Finding]]:
    """` -- ARGS` of the Exec lines for the server's extra arguments `args` (empty without
    any), `${NAME}` kept for systemd to expand; and a note for each NAME that none of the
    profile's env files sets as systemd reads them (it would pass an empty argument). A
    credential flag's value must be such a reference: written out, anyone could read it."""
    if not args:
        return "", []
    for index, word in enumerate(args, start=1):
        _one_line(f"-- ARGS: argument {index}", word)
    # Split at blanks too, as SGLang's error shows a word: `'--api-key sk-1'` as one word.
    hidden = secrets_of(args, {}).values | secrets_of(" ".join(args).split(), {}).values
    if any(REFERENCE.sub("", value) for value in hidden):
        raise UsageError(
            "-- ARGS: a credential would be written into the unit, which any user may read "
            "(systemctl cat); keep it in an env file of the profile and pass ${NAME}, e.g. "
            "-- --api-key '${API_KEY}'"
        )
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
    profile = loaded.profile
    path = _one_line(f"{loaded.path}: the profile's path", str(loaded.path.resolve()))
    command = " ".join(exec_word(word) for word in launcher())
    # Masked as `show` masks it: `systemctl status` shows it to every user.
    description = _one_line(
        f"{loaded.path}: description",
        mask_credentials(
            profile.description or f"{kind_of(server).title} server of {profile.label}"
        ),
    )
    profile_words = exec_word(path) + (f" --digest {loaded.plan.digest}" if pin else "")
    debug = nccl_debug and not NCCL_DEBUG_KEYS & loaded.plan.env.keys()
    service = [
        "Type=exec",
        *([f"User={_user(user)}"] if user is not None else []),
        *([_working_directory(loaded, server.cwd)] if server.cwd is not None else []),
        # The unit's processes get the secrets from systemd; run reads the same files and
        # finds the same values, a match.
        *[_env_file_line(loaded, path) for path in loaded.env_files],
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
        f"Description={description.replace('%', '%%')} ({profile.label})",
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


def unreadable_by(user: str, paths: Sequence[Path]) -> list[Finding]:
    """A note for each of `paths` (the profile's files, its env files) that the service's
    `user` may not read by its mode, where the unit's preflight and run would fail at every
    start; none for root, or for a user this host does not know (it may be made later)."""
    try:
        entry = pwd.getpwuid(int(user)) if is_ascii_digits(user) else pwd.getpwnam(user)
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
        raise UsageError(f"{loaded.path}: no [server] table, so no server to run as a service")
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
    found = argument_findings(server, args, str(loaded.path), ref)
    if assignments is not None:
        layers = [
            EnvLayer(f"{ENV_FILE}{path}", {each.key: each.value}) for path, each in assignments
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
        notes += unreadable_by(_user(user), [*loaded.chain, *loaded.env_files])
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
