"""The command line: the group, its commands, and the one place errors become exit codes."""

from __future__ import annotations

import sys
import traceback

import click

from nccl_launch import __version__
from nccl_launch.commands import inspecting, launching, migrating, watching
from nccl_launch.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, NcclLaunchError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nccl-launch")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error.")
def cli(debug: bool) -> None:
    """Start a server with the NCCL environment its profile declares, or refuse with a diff."""


for command in (
    launching.run,
    launching.preflight,
    watching.check,
    watching.verify_log,
    inspecting.validate_command,
    inspecting.show_command,
    inspecting.diff,
    inspecting.list_command,
    inspecting.schema,
    migrating.convert,
    migrating.capture,
    migrating.systemd,
):
    cli.add_command(command)


def _debug_requested(args: list[str]) -> bool:
    own = args[: args.index("--")] if "--" in args else args
    return "--debug" in own


def main(args: list[str] | None = None) -> int:
    """Run the CLI and map every outcome to a documented exit code, in this one place."""
    args = sys.argv[1:] if args is None else args
    try:
        code = cli.main(args, prog_name="nccl-launch", standalone_mode=False)
    except click.exceptions.Exit as done:
        code = done.exit_code
    except click.ClickException as error:
        error.show()
        code = error.exit_code
    except (click.Abort, KeyboardInterrupt):
        code = EXIT_INTERRUPTED
    except NcclLaunchError as error:
        click.echo(error.message(), err=True)
        code = error.exit_code
    except Exception as error:
        if _debug_requested(args):
            traceback.print_exc()
        click.echo(
            f"nccl-launch: internal error: {type(error).__name__}: {error} "
            f"(a bug; rerun with --debug for the traceback)",
            err=True,
        )
        code = EXIT_INTERNAL
    return code if isinstance(code, int) else EXIT_OK
