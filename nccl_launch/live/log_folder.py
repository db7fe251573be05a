"""A run's folder of NCCL logs read whole, for `verify-log`: each `*.log` file in it (one per
process, `%h.%p.log` as `run --nccl-debug` names them), and the newest run folder of a
profile under the state home (`--latest`)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from nccl_launch.escaping import shell_word
from nccl_launch.files.base_dirs import open_beneath
from nccl_launch.files.reading import StreamLines, open_stream
from nccl_launch.findings import Finding, Refused
from nccl_launch.jsonlines import STATE_FIX, state_home
from nccl_launch.live.nccl_logs import FOLDER, LOG_NAME

SUFFIX = Path(LOG_NAME).suffix
RUN = re.compile(r"(\d{8}T\d{6}Z)-(\d+)")  # run_folder's name: its UTC start and PID


def is_folder(path: str) -> bool:
    """Whether `path` (followed as the user wrote it) is a folder."""
    return path != "-" and Path(path).is_dir()


def folder_logs(path: Path, folder: int | None = None) -> Iterator[tuple[str, StreamLines]]:
    """Each `*.log` file of the folder at `path` (or open as `folder`), by name, and its
    lines, the file open while they are read: a regular file in the folder itself, as
    `verify-log LOG` reads one (another user's too), never followed through a symlink."""
    with contextlib.ExitStack() as stack:
        if folder is None:
            try:
                folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as error:
                message = f"cannot read: {error.strerror}"
                raise Refused(Finding("unreadable", f"log folder {path}", message)) from None
            stack.callback(os.close, folder)
        with os.scandir(folder) as entries:
            names = sorted(entry.name for entry in entries if entry.name.endswith(SUFFIX))
        for name in names:
            with open_stream(str(path / name), "log", folder=folder) as lines:
                yield name, lines


@contextlib.contextmanager
def latest_run(name: str, given: str) -> Iterator[tuple[Path, int]]:
    """The newest run folder of the profile `name` (by its start, then its PID) and a
    descriptor of it, opened as bench's history is: as root, in folders root's alone, and
    never through another user's symlink. Refused when the profile (`given` as the user
    named it) has none."""
    state = state_home()
    runs = state.path / FOLDER / name
    start = f"start it with: nccl-launch run --nccl-debug {shell_word(given)}"
    try:
        found = [RUN.fullmatch(entry.name) for entry in runs.iterdir()]
    except FileNotFoundError:
        none = f"no run of {name} with --nccl-debug: {runs} does not exist"
        raise Refused(Finding("no-run", "", none, start, cause="host")) from None
    except OSError as error:
        unread = f"cannot read {runs}: {error.strerror}"
        raise Refused(Finding("unreadable", "", unread, cause="host")) from None
    newest = max(
        (match for match in found if match), key=lambda run: (run[1], int(run[2])), default=None
    )
    if newest is None:
        none = f"no run of {name} with --nccl-debug in {runs}"
        raise Refused(Finding("no-run", "", none, start, cause="host"))
    where = FOLDER / name / newest[0]
    try:
        fd = open_beneath(state, where, os.O_RDONLY | os.O_DIRECTORY, STATE_FIX)
    except OSError as error:
        unread = f"cannot read {state.path / where}: {error.strerror}"
        raise Refused(Finding("unreadable", "", unread, cause="host")) from None
    try:
        yield state.path / where, fd
    finally:
        os.close(fd)
