"""XDG base directories, and files beneath them opened without another user's symlinks."""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path, PurePath

from nccl_launch.files.trust import described, lets_others_replace, walk, writable_by_others
from nccl_launch.findings import Finding, Refused


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
        message = f"HOME is {said} and the user database has none for uid {os.geteuid()}"
        fix = f"set HOME or {variable} to an absolute path"
        raise Refused(Finding("no-home", "no home directory", message, fix, cause="host"))
    return Path(known)


def base_directory(variable: str, default: str) -> BaseDirectory:
    """$`variable` when absolute, else ~/`default`: the XDG Base Directory specification
    holds an empty or relative path invalid, to be ignored (HOME too)."""
    value = os.environ.get(variable, "")
    if Path(value).is_absolute():
        return BaseDirectory(Path(value), PurePath())
    return BaseDirectory(_home(variable), PurePath(default))


def _refuse_others(folder: Path, status: os.stat_result, fix: str) -> None:
    """A folder nccl-launch writes in, refused unless this user's alone (root's, as root):
    whoever else owns it or may write it could replace what is made there."""
    if status.st_uid != os.geteuid() or writable_by_others(status):
        me = _me()
        message = f"{described(folder, status)} is not {me}'s alone, and {me} writes nothing "
        raise Refused(Finding("untrusted", "", f"{message}in another user's folder", fix))


def _me() -> str:
    return "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"


def _refuse_way(existing: Path, status: os.stat_result, fix: str) -> None:
    """The folder the base directory starts from, opened (`status`): refused when another
    user owns or could replace something on the way to it (`files.trust.walk`), or it
    itself: as root, unless root's alone (root creates nothing in another user's home)."""
    if os.geteuid() == 0 or lets_others_replace(existing, status):
        _refuse_others(existing, status, fix)
    try:
        way = walk(existing)
    except OSError as error:
        message = f"changed as it was opened ({error.strerror})"
        raise Refused(Finding("changed-while-read", str(existing), message, fix)) from None
    if way.others is not None:
        thing, found = way.others
        if stat.S_ISLNK(found.st_mode):
            raise _others_symlink(thing, found, fix)
        _refuse_others(thing, found, fix)
    if (way.end.st_dev, way.end.st_ino) != (status.st_dev, status.st_ino):
        message = "changed as it was opened"
        raise Refused(Finding("changed-while-read", str(existing), message, fix))


def _others_symlink(link: Path, status: os.stat_result, fix: str) -> Refused:
    message = f"a symlink of uid {status.st_uid}, not followed"
    return Refused(Finding("untrusted", str(link), message, fix))


def _folder_beneath(parent: int, name: str, folder: Path, fix: str) -> int:
    """A descriptor of the folder `name` in `parent`, created 0700 if missing; a symlink is
    followed only when the user's own."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    link = os.stat(name, dir_fd=parent, follow_symlinks=False)
    follow = stat.S_ISLNK(link.st_mode)
    if follow and link.st_uid != os.geteuid():
        raise _others_symlink(folder, link, fix)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(name, flags, dir_fd=parent)
    try:
        _refuse_others(folder, os.fstat(fd), fix)
    except Refused:
        os.close(fd)
        raise
    return fd


def open_beneath(base: BaseDirectory, name: PurePath, flags: int, fix: str) -> int:
    """A descriptor of `name` under `base`, opened with `flags` but never through a symlink;
    the folders missing on the way are created 0700, as the specification says. No other
    user may own or replace anything on the way to the first folder there (`_refuse_way`);
    from there down only the user's own symlinks are followed, and every folder must be the
    user's alone (root's, as root). Refused is a refusal ending with `fix`; OSError, the
    system's answer."""
    existing = next(folder for folder in (base.given, *base.given.parents) if folder.is_dir())
    parts = [*base.given.relative_to(existing).parts, *base.below.parts, *name.parent.parts]
    fd = os.open(existing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _refuse_way(existing, os.fstat(fd), fix)
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
