"""Reading profiles: `validate`, `show`, `diff`, `list`, `schema`."""

from __future__ import annotations

import json

import click

from nccl_launch.commands.echo import Output, echo_lines, warn
from nccl_launch.commands.options import format_option, profile_argument
from nccl_launch.deploy import exports
from nccl_launch.errors import EXIT_OK


@click.command(name="validate")
@profile_argument("files", nargs=-1, required=True)
@format_option(
    "text",
    "json",
    default="text",
    help_text="json: each file's findings (code, severity, file, location, message, fix).",
)
def validate_command(files: tuple[str, ...], fmt: Output) -> int:
    """Check profile FILES (and what they extend) alone, asking this host nothing; exit 2 if
    any is invalid."""
    from nccl_launch.profile.overview import validate
    from nccl_launch.render.profiles import validate_lines

    validation = validate(files)
    fmt.emit(validation, validate_lines)
    return validation.exit_code


@click.command(name="show")
@profile_argument()
@format_option(
    "toml",
    "json",
    *exports.FORMATS,
    default="toml",
    help_text="toml: the resolved profile; json: everything; the others: the variables the "
    "server gets, quoted for that consumer.",
)
def show_command(profile: str, fmt: Output) -> int:
    """Print PROFILE resolved through its `extends` chain."""
    from nccl_launch.profile.load import load_profile
    from nccl_launch.profile.overview import ShownProfile, show
    from nccl_launch.render.profiles import show_toml

    shown = show(load_profile(profile))

    def json_text(shown: ShownProfile) -> str:
        return shown.model_dump_json(indent=2) + "\n"  # the profile's text as it is, unescaped

    def exported(shown: ShownProfile) -> str:
        return exports.FORMATS[fmt.name](shown.env | shown.markers)

    renderers = {"json": json_text, "toml": show_toml, **dict.fromkeys(exports.FORMATS, exported)}
    click.echo(fmt.document(shown, renderers), nl=False)
    return shown.exit_code


@click.command()
@profile_argument("old")
@profile_argument("new")
def diff(old: str, new: str) -> int:
    """Compare two profiles (or NAME@3 and NAME@4); exit 1 when they differ."""
    from nccl_launch.profile.diff import diff_profiles
    from nccl_launch.render.profiles import diff_lines

    compared = diff_profiles(old, new)
    echo_lines(diff_lines(compared))
    return compared.exit_code


@click.command(name="list")
def list_command() -> int:
    """List the profiles on the search path with name, version, digest and source."""
    from nccl_launch.profile.overview import list_profiles
    from nccl_launch.profile.search import search_path
    from nccl_launch.render.profiles import list_lines

    labelled = search_path()
    rows, refused = list_profiles(labelled)
    for problem in refused:  # the others are listed all the same
        warn(problem)
    echo_lines(list_lines(rows, labelled))
    return EXIT_OK


@click.command()
def schema() -> int:
    """Print the profile format as JSON Schema, for editors.

    Save it beside the profiles and start each profile with `#:schema ./nccl-launch.schema.json`
    (Taplo, Even Better TOML) for completion and checks while typing.
    """
    from nccl_launch.profile.model import profile_schema

    click.echo(json.dumps(profile_schema(), indent=2))
    return EXIT_OK
