"""What `validate`, `show` and `list` report about profiles, as data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field, field_serializer

from nccl_launch.errors import EXIT_OK
from nccl_launch.findings import Finding, Refused
from nccl_launch.profile.lint import review
from nccl_launch.profile.load import LoadedProfile, load_profile
from nccl_launch.profile.model import Baseline
from nccl_launch.profile.search import folder_refusal, pick, profile_files, unique_dirs
from nccl_launch.report import Report, ReportedFinding


class Validated(BaseModel):
    """One file given to `validate`: its label, digest, the warnings it leaves open and the
    ids of those it acknowledges, or the findings of the error it raised, each as found."""

    path: str
    label: str = ""
    digest: str = ""
    short_digest: str = ""
    warnings: list[Finding] = []
    problems: list[Finding] = []
    acknowledged: list[str] = []
    baseline: Baseline | None = None
    code: int = EXIT_OK  # of the error: 2, or 3 for a file this host failed to read

    @property
    def findings(self) -> list[ReportedFinding]:
        """All it found, each in the file it names, else in this one."""
        found = self.problems + self.warnings
        return [ReportedFinding.of(each.in_file(self.path)) for each in found]


class ValidatedFile(BaseModel):
    """One file of `validate --format json`: the profile it is (when valid), its findings,
    errors and warnings, and the ids of the warnings its `[policy] accept` takes."""

    path: str
    profile: str | None
    digest: str | None
    valid: bool
    findings: list[ReportedFinding]
    accepted: list[str]


class Validation(Report):
    """`validate`'s result: exit 2 if any file is invalid, else 3 if this host failed to read
    any (an I/O error)."""

    results: list[Validated] = Field(exclude=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def files(self) -> list[ValidatedFile]:
        return [
            ValidatedFile(
                path=result.path,
                profile=result.label or None,
                digest=result.digest or None,
                valid=not result.problems,
                findings=result.findings,
                accepted=result.acknowledged,
            )
            for result in self.results
        ]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def invalid(self) -> int:
        return sum(bool(result.problems) for result in self.results)

    @property
    def exit_code(self) -> int:
        return min((result.code for result in self.results if result.problems), default=EXIT_OK)


def validate(refs: tuple[str, ...]) -> Validation:
    """Each profile judged alone: the host is asked nothing, so CI and a GPU host agree."""
    results = []
    for ref in refs:
        try:
            loaded = load_profile(ref)
        except Refused as error:
            results.append(Validated(path=ref, problems=error.findings, code=error.exit_code))
            continue
        plan = loaded.plan
        review_ = review(loaded.profile)
        results.append(
            Validated(
                path=str(loaded.path),
                label=plan.label,
                digest=plan.digest,
                short_digest=plan.short_digest,
                warnings=review_.warnings,
                acknowledged=[note.id for note in review_.acknowledged],
                baseline=loaded.profile.baseline,
            )
        )
    return Validation(results=results)


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
    warnings: list[Finding]
    resolved: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return EXIT_OK

    @field_serializer("warnings")
    def _worded(self, warnings: list[Finding]) -> list[str]:
        """Each warning as its text, the documented form of `show`'s JSON."""
        return [note.text() for note in warnings]


def show(loaded: LoadedProfile) -> ShownProfile:
    """Everything `show` prints about a loaded profile."""
    plan = loaded.plan
    dumped = loaded.profile.model_dump(by_alias=True, exclude_none=True)
    return ShownProfile(
        profile=plan.label,
        digest=plan.digest,
        path=str(loaded.path),
        chain=[str(path) for path in loaded.chain],
        env=plan.env,
        sources={key: str(path) for key, path in loaded.origins.items()},
        markers=plan.markers(loaded.path),
        argv=plan.argv,
        warnings=review(loaded.profile).warnings,
        resolved={key: value for key, value in dumped.items() if value not in ({}, [])},
    )


class ListedProfile(BaseModel):
    """One file on the search path: its name, version and digest, or why it is invalid; the
    label of its folder, and whether it is shadowed (no lookup by name picks it)."""

    path: Path
    source: str
    name: str = ""
    version: int | None = None
    short_digest: str = ""
    problem: Finding | None = None
    shadowed: bool = False


def _shadowed(rows: list[ListedProfile]) -> set[Path]:
    """The files no lookup picks, as `search.pick` decides: not by the file's stem, its NAME
    or its NAME@VERSION (a profile of that name or version in an earlier folder hides it)."""
    files = [row.path for row in rows]
    identities = {row.path: (row.name, row.version) for row in rows if row.version is not None}
    shadowed = set()
    for row in rows:
        refs: list[tuple[str, int | None]] = [(row.path.stem, None)]
        if row.version is not None:
            refs += [(row.name, None), (row.name, row.version)]
        if all(pick(name, version, files, identities.get) != row.path for name, version in refs):
            shadowed.add(row.path)
    return shadowed


def list_profiles(
    search_path: list[tuple[Path, str]],
) -> tuple[list[ListedProfile], list[Finding]]:
    """Every profile file on the labelled `search_path`, in search order, an invalid one
    listed, not fatal; and why a folder's files are not (`folder_refusal`), a warning each."""
    rows, refused, read = [], [], []
    for folder in unique_dirs([folder for folder, _ in search_path]):
        why = folder_refusal(folder)
        label = next(label for each, label in search_path if each == folder)
        if why is None:
            read.append(folder)
        else:
            where = f"{label} folder {folder}"
            refused.append(Finding("folder-not-listed", where, f"not listed: {why}", cause="host"))
    for path in profile_files(read):
        source = next((label for folder, label in search_path if path.parent == folder), "")
        try:
            loaded = load_profile(str(path))
        except Refused as error:
            rows.append(ListedProfile(path=path, source=source, problem=error.findings[0]))
            continue
        profile, digest = loaded.profile, loaded.plan.short_digest
        rows.append(
            ListedProfile(
                path=path,
                source=source,
                name=profile.name,
                version=profile.version,
                short_digest=digest,
            )
        )
    shadowed = _shadowed(rows)
    return [row.model_copy(update={"shadowed": row.path in shadowed}) for row in rows], refused
