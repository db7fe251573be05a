"""One exception root; each subclass carries the exit code DESIGN.md documents."""

from __future__ import annotations

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_USAGE = 2
EXIT_HOST = 3
EXIT_INTERNAL = 4


class NcclLaunchError(Exception):
    """Root of every error a user can cause; `str()` is the message shown."""

    exit_code = EXIT_INTERNAL


class UsageError(NcclLaunchError):
    exit_code = EXIT_USAGE


class ProfileError(NcclLaunchError):
    """An invalid profile: each entry of `problems` is one line naming file, key and fix."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class DriftError(NcclLaunchError):
    exit_code = EXIT_DRIFT


class HostError(NcclLaunchError):
    exit_code = EXIT_HOST
