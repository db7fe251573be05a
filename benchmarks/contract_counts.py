"""The design review's counts of one tree: how far each concept is one contract (not a test).

    python benchmarks/contract_counts.py [REV]

counts the working tree, or the commit REV (read with `git archive`, nothing checked out).
Each count is read from the source with `ast`, so the rule behind it is written here once;
docs/architecture.md ("The review's counts") keeps what it printed before and after.
"""

from __future__ import annotations

import ast
import io
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

# The prose exceptions a problem was raised as before findings held it.
PROSE_ERRORS = {
    "NcclLaunchError",
    "UsageError",
    "HostError",
    "PinError",
    "ProfileError",
    "FileError",
    "PathError",
    "ReadFailed",
}
# Where masking belongs: the secrets package itself and the writers that show text to people
# (cli.py writes errors and tracebacks).
WRITERS = (
    "nccl_launch/secrets/",
    "nccl_launch/render/",
    "nccl_launch/commands/echo.py",
    "nccl_launch/cli.py",
)
# The functions of the secrets package that decide what is secret, or wrap a value that is so
# it masks itself, where it is produced: no masking, counted apart.
DECIDING = {
    "credential_values",
    "is_secret",
    "secret_because",
    "secret_name",
    "secret_value",
    "secret_words",
    "secrets_of",
    "unmasked_references",
}
# What a wall clock is read with, and the names of what it measures, in a test.
CLOCKS = {"monotonic", "perf_counter", "time"}
TIMED = {"seconds", "elapsed", "rate", "tok_s", "duration", "took", "wall"}


def sources(rev: str | None) -> dict[str, str]:
    """Each `.py` file of `nccl_launch/` and `tests/`, by its path, at `rev` or as it is now."""
    if rev is None:
        return {
            path.as_posix(): path.read_text(encoding="utf-8")
            for folder in ("nccl_launch", "tests")
            for path in sorted(Path(folder).rglob("*.py"))
        }
    git = shutil.which("git") or "git"
    archive = subprocess.run(
        [git, "archive", rev, "nccl_launch", "tests"], capture_output=True, check=True
    ).stdout
    found = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.name.endswith(".py") else None
            if extracted is not None:
                found[member.name] = extracted.read().decode()
    return found


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    return (node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _masking_names(files: dict[str, str]) -> set[str]:
    """The functions of the secrets package that mask or decide what is secret (`DECIDING`)."""
    return {
        node.name
        for path, text in files.items()
        if path.startswith("nccl_launch/secrets/")
        for node in ast.parse(text).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def _kind_members(files: dict[str, str]) -> int:
    """The members of the `Kind` class a kind implements (its methods and fields)."""
    for path, text in files.items():
        if path.startswith("nccl_launch/"):
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef) and node.name == "Kind":
                    return sum(
                        isinstance(each, ast.FunctionDef | ast.AnnAssign | ast.Assign)
                        for each in node.body
                    )
    return 0


def _is_prose(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr | ast.BinOp) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def _is_string_list(node: ast.AST) -> bool:
    """A field, argument or function of problems, warnings or notes typed `list[str]`."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        name, annotation = node.target.id, node.annotation
    elif isinstance(node, ast.arg) and node.annotation is not None:
        name, annotation = node.arg, node.annotation
    elif isinstance(node, ast.FunctionDef) and node.returns is not None:
        name, annotation = node.name, node.returns
    else:
        return False
    words = ("problem", "warning", "note")
    return any(word in name for word in words) and ast.unparse(annotation) in (
        "list[str]",
        "'list[str]'",
    )


def _clocked_asserts(tree: ast.AST) -> int:
    """Asserts that bound a time or a rate: an order comparison of what a wall clock read, or
    of a name of what it measures (`seconds`, `rate`, ...)."""
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        if not any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.test.ops):
            continue
        named = {_name(each) for each in ast.walk(node.test) if isinstance(each, ast.expr)}
        count += bool(named & (TIMED | CLOCKS))
    return count


def counts(files: dict[str, str]) -> dict[str, int]:
    masking = _masking_names(files)
    found = dict.fromkeys(
        (
            "findings made",
            "prose raises",
            "free-string warnings",
            "string lists of problems or warnings",
            "masking calls outside the writers",
            "secret decisions outside the writers",
            "Kind members",
            "command modules importing a command",
            "test-module imports of a test module",
            "wall-clock assertions in tests",
        ),
        0,
    )
    found["Kind members"] = _kind_members(files)
    # A module of commands/ that defines a command (its helpers, options and echo, define none).
    commands = {
        path
        for path, text in files.items()
        if path.startswith("nccl_launch/commands/") and "@click.command" in text
    }
    for path, text in sorted(files.items()):
        tree = ast.parse(text)
        package = path.startswith("nccl_launch/")
        for call in _calls(tree):
            called = _name(call.func)
            if package and called == "Finding":
                found["findings made"] += 1
            if package and called == "warn" and call.args and _is_prose(call.args[0]):
                found["free-string warnings"] += 1
            if package and called in masking and not path.startswith(WRITERS):
                deciding = called in DECIDING
                found[
                    "secret decisions outside the writers"
                    if deciding
                    else "masking calls outside the writers"
                ] += 1
        for node in ast.walk(tree):
            if package and _is_string_list(node):
                found["string lists of problems or warnings"] += 1
            if package and isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                # click's own UsageError (a usage line, click's parse errors) is click's.
                found["prose raises"] += isinstance(node.exc.func, ast.Name) and (
                    node.exc.func.id in PROSE_ERRORS
                )
            if isinstance(node, ast.ImportFrom) and node.module:
                own = PurePosixPath(path).stem
                if path in commands and node.module.startswith("nccl_launch.commands."):
                    imported = node.module.rpartition(".")[2]
                    target = f"nccl_launch/commands/{imported}.py"
                    found["command modules importing a command"] += (
                        target in commands and imported != own
                    )
                if path.startswith("tests/test_") and node.module.startswith("tests.test_"):
                    found["test-module imports of a test module"] += 1
        if path.startswith("tests/test_"):
            found["wall-clock assertions in tests"] += _clocked_asserts(tree)
    return found


def main() -> int:
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    for name, value in counts(sources(rev)).items():
        print(f"{value:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
