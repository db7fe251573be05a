"""`capture`: a running server's own environment, command line and directory."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from nccl_launch.env.env_files import env_file_lines
from nccl_launch.escaping import escaped, not_utf8
from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import KINDS
from nccl_launch.live.environ import OVERWRITTEN, getenv_view
from nccl_launch.live.resolve import hold
from nccl_launch.live.target import Target
from nccl_launch.live.watch import started_profile
from nccl_launch.migrate.start import StartCommand
from nccl_launch.nccl import catalog, others
from nccl_launch.profile.markers import (
    MARKER_NCCL_DEBUG,
    MARKER_PROFILE,
    NCCL_DEBUG_KEYS,
    OWN_VARIABLES,
)
from nccl_launch.serving import references

# Variables worth keeping from a running server's environment besides NCCL_*: those every
# server kind reads (SGLANG_*, VLLM_*), and these.
CAPTURED_PREFIXES = (
    "CUDA_", "HF_", "TORCH_", "PYTORCH_", "TRANSFORMERS_", "FLASHINFER_",
    "NVSHMEM_", "UCX_", "TOKENIZERS_", "OMP_NUM_THREADS",
    *(kind.env_prefix for kind in KINDS),
)  # fmt: skip


# What the kernel appends to the directory of /proc/PID/cwd once that directory is deleted.
DELETED = " (deleted)"


def _cwd_deleted(pid: int) -> bool:
    """Whether the process's working directory was removed: no name links to it any more (the
    path /proc shows ends in DELETED, as a directory's own name also may)."""
    try:
        return Path(f"/proc/{pid}/cwd").stat().st_nlink == 0
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None


def _check_text(pid: int, what: str, text: str) -> None:
    if not_utf8(text) is not None:  # psutil keeps a byte that is not UTF-8 as a surrogate
        message = f"{what} is not UTF-8 text, which a profile cannot hold"
        fix = "write the profile by hand"
        raise Refused(Finding("not-utf8", f"process {pid}", message, fix, cause="host"))


@dataclass
class _Filled:
    """What a process nccl-launch started got from its profile's files: its argv as `[server]
    args` write it, the secret files and the env files (with the values) its `${NAME}`s are
    read from; `unknown`, why that cannot be told."""

    words: list[str] = field(default_factory=list)
    secret_files: dict[str, str] = field(default_factory=dict)
    sourced: dict[str, tuple[str, str]] = field(default_factory=dict)
    unknown: str | None = None

    def notes(self) -> list[Finding]:
        if self.unknown is None:
            return []
        message = "which of its words its profile filled from secret files cannot be told "
        message += f"({self.unknown}): they are written as read, and the profile readable by "
        message += "its owner only"
        return [
            Finding(
                "filled-unknown", "", message, "move a secret to an env file", severity="warning"
            )
        ]


def _filled(pid: int, environ: Mapping[str, str], argv: list[str]) -> _Filled:
    """For a process nccl-launch started, each word that the profile it runs filled from a
    secret file or an env file, written as that profile writes it (`${NAME}`: as its value,
    the secret would be written into the new profile). Nothing for another process; when
    the profile cannot be read back, why."""
    if MARKER_PROFILE not in environ:
        return _Filled()
    try:
        loaded = started_profile(pid, environ)
        written = loaded.plan.argv
        filled = references.read_back(written, argv) if references.names(written) else {}
        if filled is None:
            return _Filled(unknown=f"its command line no longer reads as {loaded.path} says")
        secret_files = {key: str(path) for key, path in loaded.secret_files.items()}
        sourced = {
            each.key: (str(path), each.value)
            for path in reversed(loaded.env_files)  # the first file that sets a name gives it
            for each in env_file_lines(path)
            if filled.get(each.key) == each.value and each.key not in secret_files
        }
    except Refused as refused:
        return _Filled(unknown="; ".join(finding.line() for finding in refused.findings))
    known = {key for key in filled if key in secret_files or key in sourced}
    words = [
        word if set(references.names([word])) <= known else references.literal(given)
        for word, given in zip(written, argv, strict=False)
    ] + [references.literal(given) for given in argv[len(written) :]]
    # A secret file's variable the server got in its environment is that file's too.
    used = {key: file for key, file in secret_files.items() if key in known or key in environ}
    return _Filled(words, used, {key: sourced[key] for key in known - used.keys()})


def read_process(pid: int) -> StartCommand:
    """A running process's own environment (as NCCL's getenv reads it), command line and
    directory, read while a pidfd holds it: of a process that ended meanwhile, or whose PID
    now names another, nothing is read."""
    with hold(Target(pid=pid)) as server:
        try:
            process = server.process()
            if process is None:
                raise psutil.NoSuchProcess(pid)
            with process.oneshot():
                argv, cwd, deleted = process.cmdline(), process.cwd(), _cwd_deleted(pid)
            environ = getenv_view(pid)
        except psutil.NoSuchProcess:
            raise Refused(server.gone()) from None
        except psutil.AccessDenied:
            raise Refused(server.denied()) from None
        # Still running after the reads: the PID was never free, so they were of this process.
        if not server.running():
            raise Refused(server.gone())
    if environ is None:
        raise Refused(Finding("environ-overwritten", f"process {pid}", OVERWRITTEN, cause="host"))
    filled = _filled(pid, environ, argv)
    if argv and "/" not in argv[0]:
        argv[0] = shutil.which(argv[0], path=environ.get("PATH")) or argv[0]
    wanted = (catalog.PREFIX, *CAPTURED_PREFIXES)
    # The image's own variables (CUDA_VERSION, NCCL_VERSION, NV_*) are no setting of the
    # server's: in the profile, the next base image would be drift.
    image = {name: what for name in environ if (what := others.image_variable(name))}
    # What `run --nccl-debug` added (its marker says so) is that run's, not the server's: its
    # NCCL_DEBUG_FILE names that run's folder.
    debug = NCCL_DEBUG_KEYS & environ.keys() if environ.get(MARKER_NCCL_DEBUG) == "1" else set()
    ours = OWN_VARIABLES | debug
    keep = {
        k: v
        for k, v in environ.items()
        if k.startswith(wanted) and k not in ours | image.keys() | filled.secret_files.keys()
    }
    for key, value in keep.items():
        _check_text(pid, f"${key}" if not_utf8(key) is None else "a variable's name", key + value)
        if not key.isprintable():  # nor a name a profile's [env] can hold
            message = "a variable's name holds a control character, which a profile cannot hold"
            fix = "write the profile by hand"
            where = f"process {pid}: ${key}"
            raise Refused(Finding("name-control-character", where, message, fix, cause="host"))
    for index, word in enumerate(argv):
        _check_text(pid, f"argument {index} of its command line", word)
    _check_text(pid, "its working directory", cwd)
    # Named, never their values, escaped (a name may hold any byte but NUL and `=`);
    # nccl-launch's own markers aside, which `run` sets again.
    left = sorted(escaped(name) for name in environ.keys() - keep.keys() - image.keys() - ours)
    notes = []
    if deleted:
        cwd = cwd.removesuffix(DELETED)
        message = f"its working directory {escaped(cwd)} was deleted after it started; [server] "
        message += "cwd names that path, where `run` fails until it exists again: create it or "
        message += "edit cwd"
        notes.append(Finding("cwd-deleted", "", message, severity="warning"))
    if left:
        message = f"left out {len(left)} variable{'s' if len(left) > 1 else ''} of the process "
        message += "(neither NCCL_* nor a captured prefix such as CUDA_ or HF_; add to [env] what "
        message += f"the server needs): {', '.join(left)}"
        notes.append(Finding("left-out", "", message, severity="warning"))
    if image:
        who = "; ".join(sorted(set(image.values())))
        names = ", ".join(sorted(map(escaped, image)))
        message = f"left out the image's own variables ({who}): {names}"
        notes.append(Finding("image-variables", "", message, severity="warning"))
    if debug:
        message = "left out what run --nccl-debug added (run the profile with --nccl-debug for "
        message += f"them): {', '.join(sorted(debug))}"
        notes.append(Finding("nccl-debug-added", "", message, severity="warning"))
    if MARKER_PROFILE in environ:
        message = f"the process was started by nccl-launch as {environ[MARKER_PROFILE]}"
        notes.append(Finding("started-by-nccl-launch", "", message, severity="warning"))
    notes += filled.notes()
    return StartCommand(
        env=keep,
        argv=argv,
        cwd=cwd,
        notes=notes,
        origin=f"pid {pid}",
        words=filled.words,
        sourced=filled.sourced,
        secret_files=filled.secret_files,
        private=filled.unknown is not None,
    )
