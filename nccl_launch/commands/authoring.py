"""Starting a profile by hand: `new`."""

from __future__ import annotations

from pathlib import Path

import click

from nccl_launch.commands.echo import say_wrote_profile, warn
from nccl_launch.commands.options import profile_option
from nccl_launch.errors import EXIT_OK


@click.command()
@click.argument("name")
@profile_option("--from", "source", help="Copy this profile (NAME, NAME@VERSION or a file).")
@click.option(
    "--dir",
    "folder",
    type=click.Path(path_type=Path),
    default=Path("profiles"),
    show_default=True,
    help="Where to write NAME.toml.",
)
@click.option("--force", is_flag=True, help="Replace an existing file.")
def new(name: str, source: str | None, folder: Path, force: bool) -> int:
    """Write a new profile NAME.toml: a copy of a profile on the search path (a shipped one)
    with its `extends` resolved, or a commented template to fill in.

    It asks nothing: what it needs comes from the options. The copy has the digest of the
    profile it came from until it is edited, and does not change when nccl-launch is
    upgraded; but where the profile names an env file by a relative path that names
    another file from --dir (the copy goes to another folder than the file naming it),
    the copy names it by its absolute path, says so, and its digest differs by that path.
    """
    from nccl_launch.profile.new import new_profile

    path, plan, notes = new_profile(name, source, folder, force)
    for note in notes:
        warn(note)
    say_wrote_profile(path, plan)
    return EXIT_OK
