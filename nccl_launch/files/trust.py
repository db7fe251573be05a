"""Trust as root: what another user could have written is never read (sshd's StrictModes)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection
from pathlib import Path

from nccl_launch.files.paths import FileError


def writable_by_others(path: Path, status: os.stat_result) -> bool:
    """Whether group or others may write `path`: by its mode, on a mount that is not read-only
    (a configMap volume's folder shows 0777, and no one writes there)."""
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        with contextlib.suppress(OSError, ValueError):
            return not os.statvfs(path).f_flag & os.ST_RDONLY
        return True
    return False


def _owner_ok(status: os.stat_result, owners: Collection[int] = ()) -> bool:
    return status.st_uid in (0, os.geteuid(), *owners)


def check_trusted(path: Path, status: os.stat_result, what: str) -> None:
    """As root, refuse what another user could have written (sshd's StrictModes): a file that
    is group- or world-writable or owned by another user, or that sits, through any
    directory up to `/` (as given and as resolved), in one other users may write, sticky
    directories (/tmp) and read-only mounts (a configMap volume) aside. Other users are not
    checked: what they may write, they could run themselves."""
    if os.geteuid() != 0:
        return
    fix = "chown root and chmod go-w, or move it out of reach of other users"
    if not _owner_ok(status):
        uid = status.st_uid
        raise FileError(
            f"{what} {path}: owned by uid {uid}, not root; chown root and chmod go-w (chgrp "
            f"the service's group and chmod 0640 where its User= must read it), or run this as "
            f"uid {uid}"
        )
    if writable_by_others(path, status):
        raise FileError(
            f"{what} {path}: writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
            f"; {fix}"
        )
    found = folder_of_others(path)
    if found is not None:
        folder, folder_status = found
        mode = stat.S_IMODE(folder_status.st_mode)
        raise FileError(
            f"{what} {path}: its directory {folder} (uid {folder_status.st_uid}, mode "
            f"{mode:04o}) lets other users replace it; {fix}"
        )


def folder_of_others(
    path: Path, owners: Collection[int] = ()
) -> tuple[Path, os.stat_result] | None:
    """The first directory above `path` (as given, then as it resolves) that another user
    (than root, this one and `owners`) owns or may write, sticky directories such as /tmp
    aside; None when there is none."""
    try:  # the directories as given, before symlinks are followed
        given = path if path.is_absolute() else Path.cwd() / path
    except FileNotFoundError:  # a deleted current directory: no file has a relative path
        return None
    for folder in dict.fromkeys([*given.parents, *given.resolve().parents]):
        try:
            folder_status = folder.stat()
        except OSError:
            continue
        sticky = bool(folder_status.st_mode & stat.S_ISVTX)
        writable = writable_by_others(folder, folder_status) and not sticky
        if not _owner_ok(folder_status, owners) or writable:
            return folder, folder_status
    return None
