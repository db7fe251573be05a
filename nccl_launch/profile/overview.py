"""What `validate`, `show` and `list` report about profiles, as data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccl_launch.errors import EXIT_OK, EXIT_USAGE, NcclLaunchError
from nccl_launch.profile.lint import lint, review
from nccl_launch.profile.load import LoadedProfile, load_profile
from nccl_launch.profile.model import Baseline
from nccl_launch.profile.plan import build_plan
from nccl_launch.profile.search import profile_files
from nccl_launch.report import Report


@dataclass(frozen=True)
class Validated:
    """One file given to `validate`: its label, digest, warnings and the ids of the warnings
    it acknowledges, or the error it raised."""

    path: str
    label: str = ""
    short_digest: str = ""
    warnings: tuple[str, ...] = ()
    error: NcclLaunchError | None = None
    acknowledged: tuple[str, ...] = ()
    baseline: Baseline | None = None


@dataclass(frozen=True)
class Validation:
    """`validate`'s result: exit 2 if any file is invalid."""

    results: list[Validated]

    @property
    def invalid(self) -> int:
        return sum(result.error is not None for result in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_USAGE if self.invalid else EXIT_OK


def validate(refs: tuple[str, ...]) -> Validation:
    """Each profile judged alone: the host is asked nothing, so CI and a GPU host agree."""
    results = []
    for ref in refs:
        try:
            loaded = load_profile(ref)
        except NcclLaunchError as error:
            results.append(Validated(ref, error=error))
            continue
        plan = build_plan(loaded.profile)
        found = review(loaded.profile)
        warnings = tuple(note.line() for note in found.warnings)
        acknowledged = tuple(note.id for note in found.acknowledged)
        results.append(
            Validated(
                str(loaded.path),
                plan.label,
                plan.short_digest,
                warnings,
                acknowledged=acknowledged,
                baseline=loaded.profile.baseline,
            )
        )
    return Validation(results)


class ShownProfile(Report):
    """`show --format json`: the resolved profile, where it came from, what the server gets."""

    profile: str
    digest: str
    path: str
    chain: list[str]
    env: dict[str, str]
    sources: dict[str, str]
    markers: dict[str, str]
    argv: list[str]
    warnings: list[str]
    resolved: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def show(loaded: LoadedProfile) -> ShownProfile:
    """Everything `show` prints about a loaded profile."""
    plan = build_plan(loaded.profile)
    dumped = loaded.profile.model_dump(by_alias=True, exclude_none=True)
    return ShownProfile(
        profile=plan.label,
        digest=plan.digest,
        path=str(loaded.path),
        chain=[str(path) for path in loaded.chain],
        env=plan.env,
        sources={key: str(path) for key, path in loaded.origins.items()},
        markers=plan.markers,
        argv=plan.argv,
        warnings=lint(loaded.profile),
        resolved={key: value for key, value in dumped.items() if value != {}},
    )


@dataclass(frozen=True)
class ListedProfile:
    """One file on the search path: its name, version and digest, or why it is invalid."""

    path: Path
    name: str = ""
    version: int | None = None
    short_digest: str = ""
    problem: str | None = None


def list_profiles(dirs: list[Path]) -> list[ListedProfile]:
    """Every profile file in `dirs`, in search order; an invalid one is listed, not fatal."""
    rows = []
    for path in profile_files(dirs):
        try:
            profile = load_profile(str(path)).profile
        except NcclLaunchError as error:
            rows.append(ListedProfile(path, problem=str(error).splitlines()[0]))
            continue
        plan = build_plan(profile)
        rows.append(ListedProfile(path, profile.name, profile.version, plan.short_digest))
    return rows
