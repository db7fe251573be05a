"""Deploying a profile: `systemd`, the service unit that runs its server through nccl-launch."""

from __future__ import annotations

from pathlib import Path

import click

from nccl_launch.commands.echo import echo_lines, warn
from nccl_launch.commands.options import LaunchCommand, output_options, profile_argument
from nccl_launch.errors import EXIT_OK
from nccl_launch.escaping import shell_word


@click.command(cls=LaunchCommand)
@profile_argument()
@click.option("--user", help="User= of the service (default: root).")
@click.option(
    "--no-pin",
    is_flag=True,
    help="Leave out --digest: a restart runs the profile file as it is then.",
)
@click.option(
    "--no-nccl-debug",
    is_flag=True,
    help="Leave out run's --nccl-debug: no NCCL log per process for check to read.",
)
@output_options("Write the unit to FILE (atomically) instead of printing it.")
def systemd(
    profile: str,
    user: str | None,
    no_pin: bool,
    no_nccl_debug: bool,
    output: Path | None,
    force: bool,
    command: tuple[str, ...],
) -> int:
    """Print a systemd service unit that runs PROFILE's server through nccl-launch.

    Type=exec (MainPID is the server), preflight as ExecStartPre=, run --nccl-debug as
    ExecStart= (each process writes NCCL's log to a file of its own, which check reads; unless
    the profile sets NCCL_DEBUG itself), both with --digest of the profile as it is now (so an
    edit is refused, exit 1, until the unit is written again), a long TimeoutStartSec for model
    load, Restart=on-failure (at most 5 starts in 10 minutes), KillMode=mixed; one
    EnvironmentFile= for each env file the profile names. A profile whose [server] args refer to
    its key (--api-key ${API_KEY}) needs no ARGS: run fills the key in from the profile's env
    file at each start. ARGS after '--' end both lines, for the server; each ${NAME} in them is
    left for systemd to fill from the unit's environment, so -- --api-key '${API_KEY}' keeps the
    key in an env file, never in the unit.
    """
    from nccl_launch.deploy.systemd import unit_manager, write_unit

    text, notes = write_unit(
        profile, user, output, force, pin=not no_pin, args=command, nccl_debug=not no_nccl_debug
    )
    for note in notes:
        warn(note)
    if output is None:
        click.echo(text, nl=False)
    else:
        manager = unit_manager(output)
        systemctl = "systemctl --user" if manager == "user" else "systemctl"
        then = f"{systemctl} daemon-reload && {systemctl} enable --now {shell_word(output.name)}"
        if manager is None:  # systemd never reads this folder: the copy comes first
            install = f"install -m 0644 {shell_word(str(output))} /etc/systemd/system/"
            echo_lines(
                [f"wrote {output}; systemd does not read {output.parent}: {install} && {then}"]
            )
        else:
            echo_lines([f"wrote {output}; then: {then}"])
    return EXIT_OK
