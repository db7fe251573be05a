"""Warnings that leave a profile valid: deprecated names, SGLang overrides, host questions,
secrets written into the file; each with an id that `[policy] accept` can acknowledge."""

from __future__ import annotations

from dataclasses import dataclass

from nccl_launch.masking import is_secret, mask_argv, mask_credentials, mask_value
from nccl_launch.nccl import catalog
from nccl_launch.profile.model import Profile
from nccl_launch.sglang.argv import server_argv
from nccl_launch.sglang.rules import server_warnings

_ELSEWHERE = "it belongs in an env file (mode 0600) named in env_files"
# Name notes said on every start: the value does nothing. A deprecated or undocumented name
# NCCL still reads is a note on how the profile is written, for `validate` and `preflight`.
_EVERY_START_KINDS = ("ignored",)


@dataclass(frozen=True)
class Note:
    """One warning: `id` ("SUBJECT KIND", what `[policy] accept` names; empty for a note on
    the accept list itself), the message, and whether `run` says it on every start."""

    id: str
    message: str
    every_start: bool

    def line(self) -> str:
        """The message, with the id to copy into `[policy] accept` when it has one."""
        return f'{self.message} [accept: "{self.id}"]' if self.id else self.message


@dataclass(frozen=True)
class Review:
    """A profile's warnings: the ones it has not acknowledged, and the ones it has."""

    warnings: list[Note]
    acknowledged: list[Note]


def secret_notes(profile: Profile) -> list[Note]:
    """Secrets written into the profile, which is read by many and shown in reviews and logs."""
    notes = []
    for key, value in profile.env.items():
        if is_secret(key):
            notes.append(_secret(f"env.{key}", "holds a literal secret"))
        elif mask_credentials(value) != value:
            notes.append(_secret(f"env.{key}", "holds a password in a URL"))
        elif mask_value(key, value) != value:
            notes.append(_secret(f"env.{key}", "holds a credential flag's value"))
    argv = server_argv(profile.server) if profile.server is not None else []
    if mask_argv(argv) != argv:
        message = (
            "server: its command line holds a credential; pass it after '--' from the calling "
            'environment (nccl-launch run PROFILE -- --api-key "$API_KEY")'
        )
        notes.append(Note("server.args secret", message, every_start=True))
    return notes


def _secret(key: str, what: str) -> Note:
    return Note(f"{key} secret", f"{key}: {what}; {_ELSEWHERE}", every_start=True)


def notes(profile: Profile) -> list[Note]:
    """Every warning about the profile, judged from the profile alone, acknowledged or not."""
    found = []
    for key in profile.nccl:
        note = catalog.name_note(catalog.PREFIX + key)
        if note is not None:
            kind, message = note
            name = catalog.PREFIX + key
            found.append(Note(f"{name} {kind}", message, kind in _EVERY_START_KINDS))
    if profile.server is not None:
        warnings = server_warnings(profile.server, profile.declared_env())
        found += [Note(f"{subject} sglang", text, every_start=True) for subject, text in warnings]
        found += _interpreter_notes(profile.server.python)
    return found + secret_notes(profile)


def _interpreter_notes(python: str) -> list[Note]:
    """A bare interpreter name is looked up on PATH when the server starts: systemd's PATH
    is not a login shell's, and a venv's python is not first on it."""
    if "/" in python:
        return []
    message = (
        f"server.python: {python!r} is found on the PATH of whoever starts the server "
        "(systemd's is not your shell's); write the interpreter's absolute path (preflight "
        "shows the one it finds)"
    )
    return [Note("server.python bare-name", message, every_start=False)]


def review(profile: Profile) -> Review:
    """The profile's warnings split by `[policy] accept`; an accept entry that matches no
    warning is a warning itself, with the closest id when one is close."""
    found = notes(profile)
    accepted = set(profile.policy.accept)
    warnings = [note for note in found if note.id not in accepted]
    ids = [note.id for note in found]
    open_ids = [note.id for note in warnings]
    for entry in profile.policy.accept:
        if entry not in ids:
            import difflib  # only for an entry that matches nothing: rare, off the usual path

            close = difflib.get_close_matches(entry, open_ids, n=1, cutoff=0.6)
            hint = f'; did you mean "{close[0]}"?' if close else "; drop it"
            message = f"policy.accept: {entry!r} matches no warning of this profile{hint}"
            warnings.append(Note("", message, every_start=False))
    return Review(warnings, [note for note in found if note.id in accepted])


def lint(profile: Profile) -> list[str]:
    """Every warning the profile has not acknowledged, as `show` lists them."""
    return [note.message for note in review(profile).warnings]


def run_notes(profile: Profile) -> list[str]:
    """What `run` warns about on every start: a value NCCL ignores, a value SGLang overrides,
    a secret in the file; not what the profile's author reviews in `validate` and `preflight`
    (a deprecated or undocumented name NCCL still reads), nor what the profile acknowledges."""
    return [note.message for note in review(profile).warnings if note.every_start]
