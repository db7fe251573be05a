"""The profile search path: `./profiles`, `$NCCL_LAUNCH_PATH`, the system directory, then the
profiles shipped with nccl-launch; lookups by path, `NAME` and `NAME@VERSION` (a lookup peeks at
each file's name and version)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from nccl_launch.digits import is_ascii_digits
from nccl_launch.files.paths import status_of
from nccl_launch.files.trust import described, lets_others_replace, walk
from nccl_launch.findings import Finding, Refused
from nccl_launch.profile.document import read_profile_toml
from nccl_launch.profile.markers import SEARCH_PATH_VAR, SYSTEM_DIR_VAR

SYSTEM_DIR = "/etc/nccl-launch/profiles"
# pyproject.toml installs the source tree's profiles/ as this package's data (an editable
# install maps the name onto profiles/ itself), so the import system knows where they are.
SHIPPED_PACKAGE = "nccl_launch.shipped"
# A profile's name (the model checks it; completion offers only such names): it names a file,
# and a shell reads it, so nothing that a file name or a shell word treats specially.
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def search_dirs(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """`./profiles`, then each `$NCCL_LAUNCH_PATH` entry, then the system directory."""
    extra = [Path(entry) for entry in environ.get(SEARCH_PATH_VAR, "").split(":") if entry]
    return [Path("profiles"), *extra, Path(environ.get(SYSTEM_DIR_VAR) or SYSTEM_DIR)]


def shipped_dir() -> Path | None:
    """The folder of the profiles installed with nccl-launch; None where this install has none."""
    import importlib.util  # only a lookup that reaches the shipped set pays for it

    spec = importlib.util.find_spec(SHIPPED_PACKAGE)
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(locations[0]).resolve() if locations else None


def is_shipped(path: Path) -> bool:
    """Whether `path` is a file of the installed package's profiles, which nothing writes to."""
    return real_path(path.parent) == str(shipped_dir())


def real_path(folder: Path) -> str:
    """The folder's real path; a relative one as given when the current directory was deleted
    (a shell left in it), where it names nothing and a lookup finds no file in it."""
    try:
        return os.path.realpath(folder)
    except FileNotFoundError:  # os.getcwd() of a deleted directory
        return str(folder)


def search_path(environ: Mapping[str, str] = os.environ) -> list[tuple[Path, str]]:
    """Every folder a lookup reads, in order, with where it comes from: `local` (./profiles),
    `NCCL_LAUNCH_PATH`, `system`, then `shipped` (so a local profile of the same name wins)."""
    local, *extra, system = search_dirs(environ)
    labelled = [(local, "local"), *((folder, SEARCH_PATH_VAR) for folder in extra)]
    labelled.append((system, "system"))
    shipped = shipped_dir()
    # In a source checkout (editable install) ./profiles may be the shipped folder itself.
    if shipped is not None and str(shipped) not in [real_path(folder) for folder, _ in labelled]:
        labelled.append((shipped, "shipped"))
    return labelled


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.endswith(".toml")


def unique_dirs(dirs: list[Path]) -> list[Path]:
    """`dirs` without a folder named again (`a:./a`, or a link to one before), first kept."""
    kept: dict[str, Path] = {}
    for folder in dirs:
        kept.setdefault(real_path(folder), folder)
    return list(kept.values())


def folder_refusal(folder: Path) -> str | None:
    """Why no profile of the search folder `folder` is read: it cannot be read, or, as root,
    another user could replace its files (the rule every profile file is read by); None
    when its profiles are read, or it is not there (most of the search path is not)."""
    try:
        with os.scandir(folder):
            pass
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        return f"cannot read it: {error.strerror}"
    if os.geteuid() != 0:
        return None
    try:
        way = walk(folder)
    except OSError as error:
        return f"cannot read it: {error.strerror}"
    if way.others is not None:
        other, status = way.others
    elif lets_others_replace(folder, way.end):
        other, status = folder, way.end
    else:
        return None
    return (
        f"{described(other, status)} lets other users replace its profiles, which root does "
        "not read; chown root and chmod go-w, or move them out of reach of other users"
    )


def profile_files(dirs: list[Path]) -> list[Path]:
    """Every `*.toml` file in the given directories, in search order, each folder once."""
    # os.path.isdir: False, not an error, for a name too long or otherwise unusable
    found = [folder for folder in unique_dirs(dirs) if os.path.isdir(folder)]  # noqa: PTH112
    return [path for folder in found for path in sorted(folder.glob("*.toml"))]


def declared_identity(path: Path) -> tuple[str, int] | Finding | None:
    """The file's name and version; None when it declares none; the first problem when it is
    unreadable, untrusted or no TOML, which a lookup skips (one bad file never breaks the
    others)."""
    try:
        data = read_profile_toml(path)
    except Refused as error:
        return error.findings[0]
    name, version = data.get("name"), data.get("version")
    return (name, version) if isinstance(name, str) and isinstance(version, int) else None


def is_reference(name: str, version: int) -> bool:
    """Whether `name` and `version` make a valid `NAME@VERSION` (a version is a positive int,
    not a bool)."""
    return bool(PROFILE_NAME.fullmatch(name)) and type(version) is int and version >= 1


def split_reference(ref: str) -> tuple[str, str]:
    """NAME and VERSION of `NAME@VERSION`; VERSION is empty for a bare NAME (a name holds no
    `@`, so the first one splits)."""
    name, _, version = ref.partition("@")
    return name, version


Identity = tuple[str, int] | Finding | None


def pick(
    name: str, version: int | None, files: list[Path], identity: Callable[[Path], Identity]
) -> Path | None:
    """The file a lookup of `name` (or `name@version`) takes from `files`, in search order:
    folder by folder, `name.toml` (bare name only), else the newest file declaring the name
    (the one of that version); the first folder with a match wins, so an earlier folder's
    profile hides a later one's whatever their file names."""
    for folder in dict.fromkeys(path.parent for path in files):
        in_folder = [path for path in files if path.parent == folder]
        named = folder / f"{name}.toml"  # a dangling link is no match, as it never was
        if version is None and named in in_folder and os.path.exists(named):  # noqa: PTH110
            return named
        best: tuple[int, Path] | None = None
        for path in in_folder:
            found = identity(path)
            if not isinstance(found, tuple) or found[0] != name:
                continue
            if (version is None or found[1] == version) and (best is None or found[1] > best[0]):
                best = (found[1], path)
        if best is not None:
            return best[1]
    return None


def find_profile(ref: str, near: Path | None = None) -> Path:
    """A profile file from a path, `NAME` or `NAME@VERSION` (searched near a file first, then
    as `pick` says)."""
    if _looks_like_path(ref):
        path = Path(os.path.normpath(near / ref if near is not None else ref))
        if not os.path.lexists(path):
            # One this user cannot look at is not said missing; one too long is (a usage error).
            status_of(path, "profile", report_too_long=False)
            raise Refused(Finding("no-profile-file", "", f"profile file not found: {path}"))
        # Reading it says what else may be wrong: a FIFO, a device, untrusted, a symlink
        # that loops or names nothing.
        return path
    name, version = split_reference(ref)
    # Few enough digits for a 64-bit version.
    if version and not (is_ascii_digits(version) and len(version) <= 19):
        message = f"a version after '@' is a positive integer, as in {name}@4"
        raise Refused(Finding("profile-version", repr(ref), message))
    dirs = unique_dirs(([near] if near is not None else []) + [dir_ for dir_, _ in search_path()])
    read: dict[Path, Identity] = {}  # each file peeked at once, for the pick and the error

    def identity(path: Path) -> Identity:
        if path not in read:
            read[path] = declared_identity(path)
        return read[path]

    picked = pick(name, int(version) if version else None, profile_files(dirs), identity)
    if picked is None:
        where = ", ".join(str(folder) for folder in dirs)
        # An unusable file is skipped, and said why when nothing is found.
        skipped = [found.line() for found in read.values() if isinstance(found, Finding)]
        unread = f"; skipped {len(skipped)} unusable, first: {skipped[0]}" if skipped else ""
        message = f"profile {ref!r} not found{_other_versions(name, read)}"
        raise Refused(Finding("no-profile", "", message, f"searched {where}{unread}"))
    return picked


def _other_versions(name: str, read: dict[Path, Identity]) -> str:
    """`; there is kimi@2 (profiles/kimi.toml)`: the versions of `name` the files declare."""
    found = [
        f"{name}@{identity[1]} ({path})"
        for path, identity in read.items()
        if isinstance(identity, tuple) and identity[0] == name
    ]
    return f"; there is {', '.join(found)}" if found else ""
