"""What a systemd unit cannot hold of the user's input, as findings: a value that would end
its line or that systemd reads otherwise, a cwd it would not start in, a `--user` that is no
user, a credential written out in `-- ARGS`. `systemd` refuses them all at once, with run's
own checks of the profile and the arguments; the unit is then written without a check."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from nccl_launch.deploy.exports import CONTROL
from nccl_launch.digits import is_ascii_digits
from nccl_launch.escaping import not_utf8
from nccl_launch.findings import Finding
from nccl_launch.kinds import kind_of
from nccl_launch.profile.load import LoadedProfile
from nccl_launch.secrets.masking import mask_credentials
from nccl_launch.secrets.values import secrets_of
from nccl_launch.serving.references import REFERENCE
from nccl_launch.serving.table import ServerTable as Server

# A name or a numeric uid, as useradd and systemd's User= read it; nothing systemd expands.
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?")
UID_INVALID = 2**32 - 1


def profile_path(loaded: LoadedProfile) -> str:
    """The profile's path as the unit names it: as it was given (`unit_path`), so that a
    configMap's update, which removes the timestamped folder its link led to, leaves the
    unit working; each start judges what it then resolves to."""
    return unit_path(loaded.path)


def description(loaded: LoadedProfile, server: Server) -> str:
    """The unit's description, masked as `show` masks it: `systemctl status` shows it to
    every user."""
    profile = loaded.profile
    return mask_credentials(
        profile.description or f"{kind_of(server).title} server of {profile.label}"
    )


def unit_path(path: Path) -> str:
    """A file's path as a unit names it: absolute and without `..` (systemd refuses a path
    that is not normalized), its folders' symlinks resolved but not the file's own (a rotated
    `current.env` link, a configMap's `kimi.toml` link stays the one named)."""
    return str(Path(os.path.realpath(path.parent)) / path.name)


def _line(where: str, text: str, file: str = "", path: bool = False) -> Finding | None:
    """Why `text` cannot be the value of a unit line: systemd ends a line at a newline, CR or
    NUL, joins the next one to a line ending in a backslash, and ignores one that is not
    UTF-8; and drops the trailing blanks of a `path`."""
    found = CONTROL.search(text)
    if found is not None:
        message = f"holds the control character {found[0]!r}, which would end the unit's line"
        fix = "write it on one line without control characters"
        return Finding("unit-line", where, message, fix, file=file)
    byte = not_utf8(text)
    if byte is not None:
        message = f"holds the byte {byte}, which is not UTF-8"
        return Finding(
            "unit-line",
            where,
            message,
            "systemd ignores a unit line that is not UTF-8 text",
            file=file,
        )
    if text.endswith("\\"):
        message = "ends in a backslash, which joins the unit's next line to it"
        return Finding("unit-line", where, message, file=file)
    if path and text != text.rstrip():
        return Finding("unit-line", where, "ends in a blank, which systemd drops", file=file)
    return None


def _cwd(cwd: str, file: str) -> Finding | None:
    """systemd starts no unit whose WorkingDirectory= is relative or holds `..`, and reads a
    leading `-` or `~` as its own syntax (relative paths to `run`): only an absolute path
    without `..` is written, literally."""
    if not cwd.startswith("/") or ".." in cwd.split("/"):
        message = (
            f"{cwd!r} is not an absolute path without '..', which systemd's WorkingDirectory= "
            "needs to start the unit"
        )
        return Finding(
            "unit-cwd", "server.cwd", message, "write the directory's absolute path", file=file
        )
    return _line("server.cwd", cwd, file, path=True)


def _user(user: str) -> Finding | None:
    if is_ascii_digits(user):  # a uid to systemd, which refuses (uid_t) -1 and 65535 (16-bit -1)
        valid = len(user) <= 10 and int(user) < UID_INVALID and int(user) != 65535
    else:
        valid = _USER.fullmatch(user) is not None
    if valid:
        return None
    fix = (
        "valid: a name of letters, digits, '_', '.', '-', '@' (not starting with '-' or '.') "
        f"or a numeric uid below {UID_INVALID} but 65535"
    )
    return Finding("unit-user", "--user", f"{user!r} is not a user name", fix)


def _args(args: Sequence[str]) -> list[Finding | None]:
    """Each argument on one line; a credential flag's value a `${NAME}`: written out, anyone
    could read it."""
    found = [_line(f"-- ARGS: argument {index}", word) for index, word in enumerate(args, 1)]
    # Split at blanks too, as SGLang's error shows a word: `'--api-key sk-1'` as one word.
    hidden = secrets_of(args, {}).values | secrets_of(" ".join(args).split(), {}).values
    if any(REFERENCE.sub("", value) for value in hidden):
        message = (
            "a credential would be written into the unit, which any user may read (systemctl cat)"
        )
        fix = (
            "keep it in an env file of the profile and pass ${NAME}, e.g. -- --api-key '${API_KEY}'"
        )
        found.append(Finding("unit-credential", "-- ARGS", message, fix))
    return found


def unit_findings(
    loaded: LoadedProfile, server: Server, user: str | None, args: Sequence[str]
) -> list[Finding]:
    """Every problem of the input that a unit for `server` of `loaded`, run as `user` with
    the server's extra `args`, could not hold."""
    file = str(loaded.path)
    found = [
        _line("the profile's path", profile_path(loaded), file),
        _line("description", description(loaded, server), file),
        *([] if user is None else [_user(user)]),
        *([] if server.cwd is None else [_cwd(server.cwd, file)]),
        *[_line(f"env_files: {path}", unit_path(path), file, True) for path in loaded.env_files],
        *_args(args),
    ]
    return [each for each in found if each is not None]
