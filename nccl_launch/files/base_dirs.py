"""XDG base directories, and files beneath them opened without another user's symlinks."""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path, PurePath

from nccl_launch.errors import HostError
from nccl_launch.files.paths import FileError
from nccl_launch.files.trust import folder_of_others, writable_by_others


@dataclass(frozen=True)
class BaseDirectory:
    """An XDG base directory: `given`, an absolute path from the environment, followed as its
    user wrote it; `below`, the folders under it that nccl-launch walks itself."""

    given: Path
    below: PurePath

    @property
    def path(self) -> Path:
        return self.given / self.below


def _home(variable: str) -> Path:
    """$HOME when absolute, else the effective user's home in the user database."""
    home = os.environ.get("HOME", "")
    if Path(home).is_absolute():
        return Path(home)
    try:
        known = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        known = ""
    if not Path(known).is_absolute():
        said = f"relative ({home})" if home else "empty"
        raise HostError(
            f"no home directory: HOME is {said} and the user database has none for uid "
            f"{os.geteuid()}; set HOME or {variable} to an absolute path"
        )
    return Path(known)


def base_directory(variable: str, default: str) -> BaseDirectory:
    """$`variable` when absolute, else ~/`default`: the XDG Base Directory specification
    holds an empty or relative path invalid, to be ignored (HOME too)."""
    value = os.environ.get(variable, "")
    if Path(value).is_absolute():
        return BaseDirectory(Path(value), PurePath())
    return BaseDirectory(_home(variable), PurePath(default))


def _refuse_others(folder: Path, status: os.stat_result, fix: str) -> None:
    """As root, a folder another user owns or may write: root creates nothing there."""
    if os.geteuid() == 0 and (status.st_uid != 0 or writable_by_others(folder, status)):
        mode = stat.S_IMODE(status.st_mode)
        raise FileError(
            f"{folder} (uid {status.st_uid}, mode {mode:04o}) is not root's alone, and root "
            f"writes nothing in another user's folder; {fix}"
        )


def _folder_beneath(parent: int, name: str, folder: Path, fix: str) -> int:
    """A descriptor of the folder `name` in `parent`, created 0700 if missing; a symlink is
    followed only when the user's own."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    link = os.stat(name, dir_fd=parent, follow_symlinks=False)
    follow = stat.S_ISLNK(link.st_mode)
    if follow and link.st_uid != os.geteuid():
        raise FileError(f"{folder}: a symlink of uid {link.st_uid}, not followed; {fix}")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(name, flags, dir_fd=parent)
    try:
        _refuse_others(folder, os.fstat(fd), fix)
    except FileError:
        os.close(fd)
        raise
    return fd


def open_beneath(base: BaseDirectory, name: PurePath, flags: int, fix: str) -> int:
    """A descriptor of `name` under `base`, opened with `flags` but never through a symlink;
    the folders missing on the way are created 0700, as the specification says. Below
    `base.given` only the user's own symlinks are followed, and as root every folder from
    `base.given` down must be root's alone. FileError is a refusal ending with `fix`;
    OSError, the system's answer."""
    existing = next(folder for folder in (base.given, *base.given.parents) if folder.is_dir())
    parts = [*base.given.relative_to(existing).parts, *base.below.parts, *name.parent.parts]
    fd = os.open(existing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _refuse_others(existing, os.fstat(fd), fix)
        found = folder_of_others(existing) if os.geteuid() == 0 else None
        if found is not None:
            _refuse_others(*found, fix)
        folder = existing
        for part in parts:
            folder /= part
            parent, fd = fd, -1
            try:
                fd = _folder_beneath(parent, part, folder, fix)
            finally:
                os.close(parent)
        return os.open(name.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)
