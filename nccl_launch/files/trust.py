"""Trust: what another user could have written, or could point elsewhere, is never read as
root (sshd's StrictModes), and nothing is written through it."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from nccl_launch.findings import Finding, Refused

MAX_LINKS = 40  # the symlinks one lookup follows before the kernel says ELOOP
FIX = "chown root and chmod go-w, or move it out of reach of other users"


def writable_by_others(status: os.stat_result) -> bool:
    """Whether its mode lets group or others write it. A read-only mount changes nothing:
    a read-only bind of a 0666 file is written where it comes from."""
    return bool(status.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def described(path: Path, status: os.stat_result) -> str:
    """`path` with its owner and mode (`status`), as a refusal names what it refuses."""
    return f"{path} (uid {status.st_uid}, mode {stat.S_IMODE(status.st_mode):04o})"


def _owner_ok(status: os.stat_result, owners: Collection[int] = ()) -> bool:
    return status.st_uid in (0, os.geteuid(), *owners)


def lets_others_replace(folder: Path, status: os.stat_result, owners: Collection[int] = ()) -> bool:
    """Whether another user (than root, this one and `owners`) may put, rename or remove an
    entry of `folder`: it is theirs, or
    its mode lets them write it, unless it is sticky (/tmp: only an entry's owner may replace
    it) or root's on a read-only mount (a configMap volume's 0777 folder, where nothing can
    be renamed: the mount, not the mode, decides who writes a folder root owns)."""
    if not _owner_ok(status, owners):
        return True
    if not writable_by_others(status) or status.st_mode & stat.S_ISVTX:
        return False
    if status.st_uid == 0:
        with contextlib.suppress(OSError, ValueError):
            return not os.statvfs(folder).f_flag & os.ST_RDONLY
    return True


@dataclass(frozen=True)
class Way:
    """A path walked: the first thing on it that another user owns or could replace (a
    symlink or a folder, and its status), None when there is none; and the status of what
    the path names at its end."""

    others: tuple[Path, os.stat_result] | None
    end: os.stat_result


def walk(path: Path, owners: Collection[int] = ()) -> Way:
    """`path` walked as the kernel looks it up, each symlink replaced by its target, judged
    at every step: a symlink must be root's, this user's or one of `owners`', and a folder
    looked into must not `lets_others_replace`. The walk stops at the first that fails.
    OSError when the path leads nowhere (a missing name, a loop)."""
    todo = list(reversed(path.absolute().parts[1:]))
    root = Path("/")
    at, at_status, links = root, root.stat(), 0
    while todo:
        part = todo.pop()
        if part == "..":  # `at` is a real folder: its parent was judged on the way to it
            at = at.parent
            at_status = at.stat()
            continue
        if not stat.S_ISDIR(at_status.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(at))
        if lets_others_replace(at, at_status, owners):
            return Way((at, at_status), at_status)
        step = at / part
        status = step.lstat()
        if not stat.S_ISLNK(status.st_mode):
            at, at_status = step, status
            continue
        if not _owner_ok(status, owners):
            return Way((step, status), status)
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
        target = step.readlink()
        if target.is_absolute():
            at, at_status = root, root.stat()
        todo += reversed(target.parts[1:] if target.is_absolute() else target.parts)
    return Way(None, at_status)


def others_on_way(
    path: Path, status: os.stat_result, what: str, owners: Collection[int] = ()
) -> None:
    """Refused when another user owns or could replace something on the way to `path`
    (`walk`), or when the way no longer leads to the file of `status`: it was replaced as it
    was read, which only one who may replace something on it can do."""
    try:
        way = walk(path, owners)
    except OSError as error:
        message = f"changed as it was read ({error.strerror})"
        raise Refused(Finding("changed-while-read", f"{what} {path}", message)) from None
    if way.others is not None:
        thing, found = way.others
        if stat.S_ISLNK(found.st_mode):
            message = f"the symlink {thing} (uid {found.st_uid}) on its way is another user's, "
            message += "who may point it elsewhere"
            raise Refused(Finding("untrusted", f"{what} {path}", message, "name the file itself"))
        raise _replaceable(path, what, thing, found)
    if (way.end.st_dev, way.end.st_ino) != (status.st_dev, status.st_ino):
        message = "changed as it was read"
        raise Refused(Finding("changed-while-read", f"{what} {path}", message, "read it again"))
    if stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
        _linked_by_others(path, status, what)


def _linked_by_others(path: Path, status: os.stat_result, what: str) -> None:
    """Refused when a file of several names is in a folder where any user may add a name
    (sticky and writable by others, as /tmp): where fs.protected_hardlinks is 0, another
    user may link a file of root's there (a private key as a secret file) that root then
    reads as the one it names."""
    folder = Path(os.path.realpath(path)).parent
    found = folder.stat()
    if not writable_by_others(found) or os.statvfs(folder).f_flag & os.ST_RDONLY:
        return
    message = f"has {status.st_nlink} names, and any user may add one in {folder} (mode "
    message += f"{stat.S_IMODE(found.st_mode):04o}): another user may have linked a file of "
    message += "root's there"
    fix = "copy it in, or move it out of reach of other users"
    raise Refused(Finding("untrusted", f"{what} {path}", message, fix))


def _nearest_folder(path: Path) -> Path:
    """The folder `path` goes in, or the nearest one above it that is there (those missing
    are made on the way). FileNotFoundError when the current directory, of a relative
    `path`, was deleted."""
    return next((each for each in path.absolute().parents if each.is_dir()), Path("/"))


def check_trusted(
    path: Path,
    status: os.stat_result,
    what: str,
    *,
    exists: bool = True,
    owners: Collection[int] = (),
) -> None:
    """As root, refuse what another user could have written (sshd's StrictModes): a file
    (`status`, of what was opened) that is group- or world-writable or owned by another user,
    whatever the mount; or one whose way, walked as the kernel walks it, passes a symlink of
    another user or a folder others may write (`walk`). Unless `exists` is False (a file to
    be written), the way must still lead to the file opened. `owners` are users trusted
    beside root (a server's own user, for the pidfile it writes). Other users are not
    checked: what they may write, they could run themselves."""
    if os.geteuid() != 0:
        return
    if not _owner_ok(status, owners):
        uid = status.st_uid
        trusted = " or ".join(["root", *(f"uid {owner}" for owner in owners)])
        fix = "chown root and chmod go-w (chgrp the service's group and chmod 0640 where its "
        fix += f"User= must read it), or run this as uid {uid}"
        message = f"owned by uid {uid}, not {trusted}"
        raise Refused(Finding("untrusted", f"{what} {path}", message, fix))
    if writable_by_others(status):
        message = f"writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
        raise Refused(Finding("untrusted", f"{what} {path}", message, FIX))
    if exists:
        others_on_way(path, status, what, owners)
        return
    try:  # the folder it goes to, or the nearest one above that is there (made on the way)
        folder = _nearest_folder(path)
        status = folder.stat()
    except FileNotFoundError:  # a deleted current directory: nothing is written by this path
        return
    others_on_way(folder, status, what)
    if lets_others_replace(folder, status):
        raise _replaceable(path, what, folder, status)


def _replaceable(path: Path, what: str, folder: Path, status: os.stat_result) -> Refused:
    message = f"its directory {described(folder, status)} lets other users replace it"
    return Refused(Finding("untrusted", f"{what} {path}", message, FIX))


def check_write_way(path: Path) -> None:
    """As root, refuse to write `path` through another user's symlink, or through a folder
    another user could replace on the way to the folder it goes in (made there if missing):
    they could point the write at a file of root's. The folder itself may be anyone's:
    a file is made in it, by a name only it holds."""
    if os.geteuid() != 0:
        return
    try:
        folder = _nearest_folder(path)
        status = folder.stat()
    except FileNotFoundError:
        return
    others_on_way(folder, status, f"{path}: its folder")


def others_may_create(folder: Path, what: str) -> os.stat_result | None:
    """As root, the status of the directory `folder` when another user may create a name in
    it: it is not root's, or others may write it (a sticky one such as /tmp too: there anyone
    may create a new name), unless on a read-only mount; else None. Refused naming `what`
    when another user owns or could replace something on its way (`others_on_way`)."""
    if os.geteuid() != 0:
        return None
    status = folder.stat()
    others_on_way(folder, status, what)
    read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)  # nothing is created there
    return status if status.st_uid != 0 or (writable_by_others(status) and not read_only) else None


def check_absent(path: Path, what: str, reader: str) -> None:
    """As root, refuse a file absent now that `reader` reads later (NCCL, its nccl.conf when
    the server starts) where another user could create it meanwhile (`others_may_create` of
    the nearest folder there)."""
    try:
        folder = _nearest_folder(path)
        status = others_may_create(folder, f"{what} {path}: its folder")
    except FileNotFoundError:
        return
    if status is not None:
        message = f"absent, and {reader} reads it later: {described(folder, status)} lets "
        message += "another user create it first"
        fix = "point it at a folder root alone writes, or create the file (root's, mode 0644)"
        raise Refused(Finding("untrusted", f"{what} {path}", message, fix))
