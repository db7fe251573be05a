"""What a resolved profile declares: the env, the argv, and the digest that names them."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from nccl_launch.kinds import kind_of
from nccl_launch.profile.markers import MARKER_DIGEST, MARKER_PROFILE, MARKER_PROFILE_FILE
from nccl_launch.profile.model import Profile

# A whole digest as `digest` writes it: a pin is never a prefix, which an edit could be made
# to match in a few billion tries.
DIGEST = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)


def short_digest(digest: str) -> str:
    """The digest as people read it: `sha256:` and its first 8 hex digits."""
    return digest[: len("sha256:") + 8]


@dataclass(frozen=True)
class ProfilePlan:
    """The environment a profile declares and the command it runs, identified by a digest."""

    label: str
    env: dict[str, str]
    argv: list[str]
    digest: str

    @property
    def short_digest(self) -> str:
        return short_digest(self.digest)

    def markers(self, profile_file: Path) -> dict[str, str]:
        """The variables nccl-launch sets in the child, the one list `run` and `show` print:
        which profile runs, its digest, the file it was loaded from (absolute, symlinks kept,
        so that `check` finds it from any directory; the digest ignores it), and a readable
        environment for `check`."""
        return {
            MARKER_PROFILE: self.label,
            MARKER_DIGEST: self.digest,
            MARKER_PROFILE_FILE: str(profile_file.absolute()),
            "SPT_NOENV": "1",
        }


def digest(
    env: dict[str, str],
    argv: list[str],
    cwd: str | None = None,
    env_files: list[str] | None = None,
    secret_files: dict[str, str] | None = None,
) -> str:
    """sha256 over the canonical JSON of the declared env, the profile's argv, the server's
    cwd when one is set (it decides what a relative path in the argv names) and the env and
    secret files it names, as paths (their values are secrets of one host); a profile without
    a cwd or such files has the digest it had before they counted."""
    document = {"env": env, "argv": argv} | ({"cwd": cwd} if cwd is not None else {})
    document |= {"env_files": env_files} if env_files else {}
    document |= {"secret_files": secret_files} if secret_files else {}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def build_plan(profile: Profile) -> ProfilePlan:
    """The plan of a resolved profile; argv is empty when it has no `[server]`."""
    env = profile.declared_env()
    server = profile.server
    argv = kind_of(server).command.argv(server) if server is not None else []
    cwd = server.cwd if server is not None else None
    plan_digest = digest(env, argv, cwd, profile.env_files, profile.secret_files)
    return ProfilePlan(label=profile.label, env=env, argv=argv, digest=plan_digest)
