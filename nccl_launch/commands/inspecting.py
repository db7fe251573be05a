"""Reading profiles: `validate`, `show`, `diff`, `list`, `schema`."""

from __future__ import annotations

import json
from typing import Any

import click
import tomli_w

from nccl_launch import exports
from nccl_launch.commands.options import warn
from nccl_launch.errors import EXIT_DRIFT, EXIT_OK, EXIT_USAGE, NcclLaunchError
from nccl_launch.loader import LoadedProfile, load_profile, profile_files, search_dirs
from nccl_launch.plan import build_plan, profile_changes
from nccl_launch.render import changes_text
from nccl_launch.schema import profile_schema

JSON_SCHEMA_VERSION = 1


@click.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> int:
    """Check profile FILES (and what they extend); exit 2 if any is invalid."""
    invalid = 0
    for ref in files:
        try:
            loaded = load_profile(ref)
        except NcclLaunchError as error:
            invalid += 1
            click.echo(str(error), err=True)
            continue
        for note in loaded.profile.lint():
            warn(f"{loaded.path}: {note}")
        plan = build_plan(loaded.profile)
        click.echo(f"{loaded.path}: ok ({plan.label}, {plan.short_digest})")
    if len(files) > 1:
        click.echo(f"{len(files) - invalid} valid, {invalid} invalid")
    return EXIT_USAGE if invalid else EXIT_OK


def _show_data(loaded: LoadedProfile) -> dict[str, Any]:
    plan = build_plan(loaded.profile)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "profile": plan.label,
        "digest": plan.digest,
        "path": str(loaded.path),
        "chain": [str(path) for path in loaded.chain],
        "env": plan.env,
        "sources": {key: str(path) for key, path in loaded.origins.items()},
        "markers": plan.markers,
        "argv": plan.argv,
        "warnings": loaded.profile.lint(),
        "resolved": {
            key: value
            for key, value in loaded.profile.model_dump(by_alias=True, exclude_none=True).items()
            if value != {}
        },
    }


@click.command()
@click.argument("profile")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["toml", "json", *exports.FORMATS]),
    default="toml",
    show_default=True,
    help="toml: the resolved profile; json: everything; the others: the variables the "
    "server gets, quoted for that consumer.",
)
def show(profile: str, fmt: str) -> int:
    """Print PROFILE resolved through its `extends` chain."""
    data = _show_data(load_profile(profile))
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    elif fmt in exports.FORMATS:
        click.echo(exports.FORMATS[fmt](data["env"] | data["markers"]), nl=False)
    else:
        chain = ", ".join(data["chain"])
        click.echo(f"# {data['profile']} {data['digest']}\n# resolved from {chain}")
        click.echo(tomli_w.dumps(data["resolved"]), nl=False)
    return EXIT_OK


@click.command()
@click.argument("old")
@click.argument("new")
def diff(old: str, new: str) -> int:
    """Compare two profiles (or NAME@3 and NAME@4); exit 1 when they differ."""
    before, after = load_profile(old), load_profile(new)
    changes = profile_changes(before.profile, after.profile)
    for sign, loaded in (("---", before), ("+++", after)):
        plan = build_plan(loaded.profile)
        click.echo(f"{sign} {plan.label} ({plan.short_digest}) {loaded.path}")
    for line in changes_text(changes):
        click.echo(line)
    click.echo(f"{len(changes)} difference{'' if len(changes) == 1 else 's'}")
    return EXIT_DRIFT if changes else EXIT_OK


@click.command(name="list")
def list_profiles() -> int:
    """List the profiles on the search path with name, version and digest."""
    dirs = search_dirs()
    rows = []
    for path in profile_files(dirs):
        try:
            plan = build_plan(load_profile(str(path)).profile)
        except NcclLaunchError as error:
            rows.append(("(invalid)", "", str(error).splitlines()[0], str(path)))
            continue
        name, version = plan.label.rsplit("@", 1)
        rows.append((name, version, plan.short_digest, str(path)))
    if not rows:
        click.echo(f"no profiles in {', '.join(str(folder) for folder in dirs)}")
        return EXIT_OK
    header = ("NAME", "VERSION", "DIGEST", "PATH")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        click.echo("  ".join([*cells, row[3]]))
    return EXIT_OK


@click.command()
def schema() -> int:
    """Print the profile format as JSON Schema, for editors.

    Save it beside the profiles and start each profile with `#:schema ./nccl-launch.schema.json`
    (Taplo, Even Better TOML) for completion and checks while typing.
    """
    click.echo(json.dumps(profile_schema(), indent=2))
    return EXIT_OK
