"""The command line: the group, its commands, and the one place errors become exit codes."""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, TextIO, cast

import click

from nccl_launch import __version__
from nccl_launch.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK
from nccl_launch.findings import Finding, Refused

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

HELP_WIDTH = 45  # of a completion's help line, as click's get_short_help_str() cuts it

# name -> (module under nccl_launch.commands, attribute, the first paragraph of its help).
# Importing a command's module costs tens of ms (pydantic models, psutil), so only the command
# that runs is imported; `--help` lists them from here. tests/test_startup.py keeps the help
# texts here equal to the commands' own.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": (
        "launching",
        "run",
        "Validate PROFILE, merge it into the environment and exec the server.",
    ),
    "preflight": (
        "launching",
        "preflight",
        "Check everything `run` would, then the host and the server's own parser on the argv.",
    ),
    "check": (
        "checking",
        "check",
        "Compare a running server's whole process tree with PROFILE.",
    ),
    "bench": (
        "benching",
        "bench",
        "Measure decode tok/s of PROFILE's server (or the one at URL), checked against PROFILE "
        "before and after.",
    ),
    "tune": (
        "tuning",
        "tune",
        "Search NCCL values for PROFILE: start its server with each candidate, measure decode "
        "tok/s as bench does, keep the fastest the noise between server starts allows.",
    ),
    "verify-log": (
        "checking",
        "verify_log",
        "Confirm from NCCL's NCCL_DEBUG=INFO output (LOG, or stdin) that every rank applied "
        "each declared value; exit 1 on a value applied differently or never confirmed.",
    ),
    "validate": (
        "inspecting",
        "validate_command",
        "Check profile FILES (and what they extend) alone, asking this host nothing; exit 2 if "
        "any is invalid.",
    ),
    "show": (
        "inspecting",
        "show_command",
        "Print PROFILE resolved through its `extends` chain.",
    ),
    "diff": (
        "inspecting",
        "diff",
        "Compare two profiles (or NAME@3 and NAME@4); exit 1 when they differ.",
    ),
    "list": (
        "inspecting",
        "list_command",
        "List the profiles on the search path with name, version, digest and source.",
    ),
    "schema": (
        "inspecting",
        "schema",
        "Print the profile format as JSON Schema, for editors.",
    ),
    "new": (
        "authoring",
        "new",
        "Write a new profile NAME.toml: a copy of a profile on the search path (a shipped one) "
        "with its `extends` resolved, or a commented template to fill in.",
    ),
    "convert": (
        "migrating",
        "convert",
        "Turn a start SCRIPT (or '-' for stdin: a raw command line) into a profile.",
    ),
    "capture": (
        "migrating",
        "capture",
        "Write a profile from a running server: its NCCL env, its command line and directory.",
    ),
    "systemd": (
        "deploying",
        "systemd",
        "Print a systemd service unit that runs PROFILE's server through nccl-launch.",
    ),
}


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands by name, each imported the first time it is looked up."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, attribute, _ = COMMANDS[name]  # KeyError: no such command, as for a dict
            loaded = importlib.import_module(f"nccl_launch.commands.{module}")
            self._loaded[name] = getattr(loaded, attribute)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS.keys() | self._loaded.keys())

    def __len__(self) -> int:
        return len(COMMANDS.keys() | self._loaded.keys())


def short_help(name: str, limit: int) -> str:
    """The line `--help` lists for command `name`, shortened by click's own rule."""
    return click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)


class LazyGroup(click.Group):
    """A group that imports only the command that runs, and lists all from COMMANDS."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands()

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's (name, command, rest of the args); the command's module is imported now."""
        found = super().resolve_command(ctx, args)
        # Start-up is over: what it built lives as long as the process, so the collector
        # (off since main began) need not scan it again, in a watch loop or at exit.
        gc.freeze()
        gc.enable()
        return found

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """The command names that start with `incomplete`, from COMMANDS (click's own would
        import every command for its help line: a TAB costing 0.4 s), then the options."""
        from click.shell_completion import CompletionItem

        names = [name for name in self.list_commands(ctx) if name.startswith(incomplete)]
        items = [CompletionItem(name, help=short_help(name, HELP_WIDTH)) for name in names]
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, short_help(name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nccl-launch")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error.")
def cli(debug: bool) -> None:
    """Start a server with the NCCL environment its profile declares, or refuse with a diff."""
    _no_pydantic_plugins()


def _no_pydantic_plugins() -> None:
    """pydantic plugins observe validation; none is meant for nccl-launch's own models. Left
    alone, pydantic's first model reads the entry points of every installed distribution to
    find some (about 10 ms of CPU beside the 300 of a server's environment, docs/performance.md):
    pydantic's plugin loader scans only while its private `_plugins` is None. Setting it here, in
    this process, leaves the environment alone: a user's PYDANTIC_DISABLE_PLUGINS, or none,
    reaches the server as given. Runs before a command, never for --help, --version or a TAB. A
    pydantic without that name only scans again."""
    try:
        from pydantic.plugin import _loader
    except ImportError:
        return
    if getattr(_loader, "_plugins", ...) is None:
        _loader._plugins = {}


def _debug_requested(args: list[str]) -> bool:
    own = args[: args.index("--")] if "--" in args else args
    return "--debug" in own


def _complain(lines: list[str]) -> None:
    """An error's lines on stderr, each as people see it: a path or a key may hold a newline,
    a value a credential."""
    from nccl_launch.secrets.masking import for_people  # only on an error: not on --version's path

    click.echo("\n".join(map(for_people, lines)), err=True)


def _complain_as_click(error: click.ClickException) -> None:
    """click's usage and message for `error`, each line as people see it: click echoes what
    an option was given (`'http://u:pw@db' is not a valid integer`)."""
    import io

    shown = io.StringIO()
    error.show(shown)
    _complain(shown.getvalue().splitlines())


class _Output:
    """Standard output, whose failure to take what is written (a full disk, `> /dev/full`, an
    I/O error) is refused as this host's problem, exit 3, whoever wrote: a command, click's
    --help: its reader has not seen the output. The rest is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise _unwritten(error) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise _unwritten(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _unwritten(error: OSError) -> Refused:
    message = f"cannot write: {error.strerror}"
    return Refused(Finding("unwritten-output", "standard output", message, cause="host"))


def main(args: list[str] | None = None) -> int:
    """Run the CLI and map every outcome to a documented exit code, in this one place."""
    stdout = sys.stdout
    if stdout is not None:  # None: started with it closed (`>&-`); click writes nothing then
        sys.stdout = cast(TextIO, _Output(stdout))
    try:
        return _run(sys.argv[1:] if args is None else args)
    finally:
        sys.stdout = stdout


def _run(args: list[str]) -> int:
    """The command's exit code; its error, if any, said on stderr."""
    gc.disable()  # imports allocate much and free little: collections would find nothing
    try:
        if "_NCCL_LAUNCH_COMPLETE" in os.environ:  # a shell asking for completions (click's var)
            completion = importlib.import_module("nccl_launch.commands.completion")
            completion.check_request(os.environ)  # bash's reads the line; garbage is refused
        code = cli.main(args, prog_name="nccl-launch", standalone_mode=False)
        if sys.stdout is not None:
            sys.stdout.flush()  # what stayed in its buffer: a failure is exit 3 too
    except click.exceptions.Exit as done:
        code = done.exit_code
    except click.ClickException as error:
        _complain_as_click(error)
        code = error.exit_code
    except (click.Abort, KeyboardInterrupt):
        code = EXIT_INTERRUPTED
    except Refused as error:
        _complain(error.lines())
        code = error.exit_code
    except Exception as error:
        _internal_error(error, args)
        code = EXIT_INTERNAL
    finally:
        gc.enable()  # for callers in-process, and where no command was looked up
    return code if isinstance(code, int) else EXIT_OK


def _internal_error(error: Exception, args: list[str]) -> None:
    """A bug said in one line, its traceback too with --debug: each line masked as an argv's
    words, since a bug may quote the command line or the environment it held."""
    from nccl_launch.secrets.masking import mask_words  # only on a bug

    lines = []
    if _debug_requested(args):
        import traceback  # only for a bug, shown on request

        lines = traceback.format_exc().splitlines()
    lines.append(
        f"nccl-launch: internal error: {type(error).__name__}: {error} "
        "(a bug; rerun with --debug for the traceback)"
    )
    _complain([mask_words(line) for line in lines])


def console() -> None:
    """The `nccl-launch` command. A reader that goes away (`| head`, `| grep -q`) ends it
    quietly, by SIGPIPE, as it ends `ps` or `grep`: not with exit 1, which means drift."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    code = main()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError:
        # What standard output would not take (main said so) is dropped: the interpreter's
        # own flush at exit would fail on it again, print a traceback and exit 120.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)
