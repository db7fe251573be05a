"""Warnings that leave a profile valid: deprecated names, server overrides, host questions,
secrets written into the file; each with an id that `[policy] accept` can acknowledge."""

from __future__ import annotations

from dataclasses import dataclass

from nccl_launch.findings import Finding, Severity
from nccl_launch.kinds import kind_of
from nccl_launch.nccl import catalog, rules
from nccl_launch.profile.model import Profile
from nccl_launch.secrets.values import secret_because, secrets_of

_ELSEWHERE = "it belongs in an env file (mode 0600) named in env_files"
_UNMATCHED = "unmatched-accept"
_HOLDS = {
    "name": "holds a literal secret",
    "url": "holds a password in a URL",
    "pair": "holds the value of a pair named like a credential",
    "flag": "holds a credential flag's value",
}
# A name NCCL no longer reads is a warning, said on every start: the value does nothing. A
# deprecated or undocumented name NCCL still reads is a note on how the profile is written.
_WARNING_KINDS = ("ignored",)


@dataclass(frozen=True)
class Review:
    """A profile's warnings and notes: the ones it has not acknowledged, and the ones it has."""

    warnings: list[Finding]
    acknowledged: list[Finding]


def secret_notes(profile: Profile) -> list[Finding]:
    """Secrets written into the profile, which is read by many and shown in reviews and logs,
    and a `${NAME}` in [env] meant to keep one out, which nothing fills."""
    server = profile.server
    argv = kind_of(server).command.argv(server) if server is not None else []
    secrets = secrets_of(argv, profile.env)
    notes = []
    for key, value in profile.env.items():
        if "${" in value:
            message = "holds '${', which only [server] args fill: the server gets it as written"
            fix = f"set {key} in an env file named in env_files instead"
            notes.append(Finding("reference", f"env.{key}", message, fix, "warning"))
        if key not in secrets.names:
            continue
        notes.append(_secret(f"env.{key}", _HOLDS[secret_because(key, value)], _ELSEWHERE))
    if secrets.words:
        fix = "write it in an env file named in env_files and refer to it: --api-key ${API_KEY}"
        notes.append(_secret("server.args", "holds a credential", fix))
    return notes


def _secret(where: str, what: str, fix: str) -> Finding:
    return Finding("secret", where, what, fix, "warning")


def notes(profile: Profile) -> list[Finding]:
    """Every warning and note on the profile, judged from the profile alone, acknowledged or
    not; `[policy] accept` names each by its id."""
    found = []
    for key in profile.nccl:
        name = catalog.PREFIX + key
        note = catalog.name_note(name)
        if note is not None:
            severity: Severity = "warning" if note.code in _WARNING_KINDS else "note"
            found.append(Finding(note.code, name, note.message, note.fix, severity))
        slip = rules.size_slip(name, profile.nccl[key])
        if slip is not None:
            found.append(Finding("size", name, *slip, "warning"))
    if profile.server is not None:
        found += kind_of(profile.server).rules.warnings(profile.server, profile.declared_env())
        found += _interpreter_notes(profile.server.python)
    return found + secret_notes(profile)


def _interpreter_notes(python: str) -> list[Finding]:
    """A bare interpreter name is looked up on PATH when the server starts: systemd's PATH
    is not a login shell's, and a venv's python is not first on it."""
    if "/" in python:
        return []
    message = (
        f"{python!r} is found on the PATH of whoever starts the server "
        "(systemd's is not your shell's)"
    )
    fix = "write the interpreter's absolute path (preflight shows the one it finds)"
    return [Finding("bare-name", "server.python", message, fix, "note")]


def review(profile: Profile) -> Review:
    """The profile's findings split by `[policy] accept`; an accept entry that matches none
    is a note itself, with the closest id when one is close."""
    found = notes(profile)
    accepted = set(profile.policy.accept)
    warnings = [note for note in found if note.id not in accepted]
    ids = [note.id for note in found]
    open_ids = [note.id for note in warnings]
    for entry in profile.policy.accept:
        if entry not in ids:
            import difflib  # only for an entry that matches nothing: rare, off the usual path

            close = difflib.get_close_matches(entry, open_ids, n=1, cutoff=0.6)
            fix = f'did you mean "{close[0]}"?' if close else "drop it"
            message = f"{entry!r} matches no warning of this profile"
            warnings.append(Finding(_UNMATCHED, "policy.accept", message, fix, "note"))
    return Review(warnings, [note for note in found if note.id in accepted])


def accept_line(finding: Finding) -> str:
    """The finding's text with the id to copy into `[policy] accept`, for what it can take."""
    if finding.code == _UNMATCHED:  # an accept entry names a finding, not another entry
        return finding.text()
    return f'{finding.text()} [accept: "{finding.id}"]'


def run_notes(profile: Profile) -> list[Finding]:
    """What `run` warns about on every start (a warning, not a note): a value NCCL ignores, a
    value the server overrides, a secret in the file; not what the profile's author reviews in
    `validate` and `preflight` (a deprecated or undocumented name NCCL still reads), nor what
    the profile acknowledges."""
    return [note for note in review(profile).warnings if note.severity == "warning"]
