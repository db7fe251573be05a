"""The layout shows the architecture (docs/architecture.md): layers, leaves, sizes, no cycles;
and no test module imports another.

Read from the source with `ast`, so a change that breaks a rule fails here with its name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from nccl_launch import kinds

PACKAGE = Path(__file__).parent.parent / "nccl_launch"
# A server kind of this package is one folder, its table's: the registry's built-in kinds.
KIND_FOLDERS = sorted({kind.table.__module__.split(".")[1] for kind in kinds.KINDS.read})
# Bottom to top: a package imports only itself and the packages of lower layers.
# Keep in step with the picture in docs/architecture.md.
LAYERS = (
    ("nccl_launch", "errors"),
    ("findings",),
    ("report", "files", "escaping", "digits", "tools"),
    ("jsonlines",),
    ("nccl",),
    ("serving",),
    tuple(KIND_FOLDERS),
    ("kinds",),
    ("secrets",),
    ("profile",),
    ("env",),
    ("live",),
    ("launch", "deploy", "bench"),
    ("migrate", "tune"),
    ("render",),
    ("commands",),
    ("cli",),
    ("__main__",),
)
# Facts: modules that import nothing of nccl-launch's (but these) and are read by the rest.
LEAVES = {
    **{
        f"nccl_launch.{folder}.facts": {"nccl_launch.serving.flags"}
        for folder in KIND_FOLDERS
        if (PACKAGE / folder / "facts.py").exists()
    },
    "nccl_launch.nccl.catalog": set(),
    "nccl_launch.nccl.grammar": {"nccl_launch.digits"},
    "nccl_launch.nccl.conf": set(),
    "nccl_launch.nccl.others": {"nccl_launch.nccl.catalog"},
    "nccl_launch.profile.markers": {"nccl_launch.nccl.conf"},
    "nccl_launch.bench.stats": set(),
}
# What NCCL makes of a value is read in nccl/ alone (`rules.reading`): the classes of its
# grammar stay there.
GRAMMAR = ("nccl_launch.nccl.grammar", "nccl_launch.nccl.selection")
MAX_MODULES_PER_FOLDER = 12
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()


def imported(name: str) -> set[str]:
    """The nccl-launch modules `name` imports (a package's `__init__` for `from pkg import`)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        targets: Iterator[str]
        if isinstance(node, ast.ImportFrom) and node.module:
            targets = (f"{node.module}.{alias.name}" for alias in node.names)
            targets = (t if t in MODULES else node.module for t in targets)
        elif isinstance(node, ast.Import):
            targets = (alias.name for alias in node.names)
        else:
            continue
        found |= {target for target in targets if target in MODULES}
    return found - {name}


def package_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(package: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if package in layer)


def test_every_package_is_in_a_layer() -> None:
    assert {package_of(name) for name in MODULES} == {p for layer in LAYERS for p in layer}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_only_go_down(name: str) -> None:
    mine = package_of(name)
    upward = [
        target
        for target in imported(name)
        if package_of(target) != mine and layer_of(package_of(target)) >= layer_of(mine)
    ]
    assert upward == [], f"{name} imports from its own layer or above"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_facts_are_leaves(name: str) -> None:
    assert imported(name) <= LEAVES[name] | {"nccl_launch.nccl"}


def test_no_import_cycle() -> None:
    graph = {name: imported(name) for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path[path.index(name) :], name))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def rule_classes() -> set[str]:
    """The classes NCCL's grammar reads values with (and its markers of a reading); not its
    refusal (`Invalid`, a ValueError), which every validator raises."""
    trees = (ast.parse(MODULES[name].read_text(encoding="utf-8")) for name in GRAMMAR)
    return {
        node.name
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and not any(isinstance(base, ast.Name) and base.id == "ValueError" for base in node.bases)
    }


@pytest.mark.parametrize("name", sorted(name for name in MODULES if package_of(name) != "nccl"))
def test_only_nccl_names_the_grammars_rule_classes(name: str) -> None:
    classes = rule_classes()
    named = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nccl_launch.nccl"):
            named |= {alias.name for alias in node.names} & classes
        elif isinstance(node, ast.Attribute) and node.attr in classes:  # `grammar.IntRule`
            named.add(node.attr)
    assert named == set(), f"{name} reads NCCL's values itself: ask nccl.rules.reading"


# Where a secret's value must go, the one place it is unwrapped (`Secret.reveal`): the exec,
# with the child's environment. Everywhere else it travels wrapped and masks itself.
REVEALING = {"nccl_launch.launch.execute"}


def test_only_the_exec_reveals_a_secret() -> None:
    revealing = {
        name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "reveal"
    }
    assert revealing <= REVEALING, "a value leaves its Secret only where it must go"


def defines_commands(name: str) -> bool:
    """Whether module `name` defines a click command (a function under `@click.command`)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    return any(
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "command"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for decorator in node.decorator_list
    )


COMMAND_MODULES = {
    name for name in MODULES if package_of(name) == "commands" and defines_commands(name)
}


def test_no_command_imports_another() -> None:
    # What two commands share is a helper of commands/ (options, echo, measuring) or their
    # domain package's, never one command's module.
    assert "nccl_launch.commands.launching" in COMMAND_MODULES  # the rule reads decorators
    assert "nccl_launch.commands.options" not in COMMAND_MODULES
    importing = {name: sorted(imported(name) & COMMAND_MODULES) for name in COMMAND_MODULES}
    assert {name: targets for name, targets in importing.items() if targets} == {}


FORMATS = {"json", "text", "prometheus", "toml"}
OUTPUT = "nccl_launch.commands.echo"  # `Output`: the one place a format is chosen


@pytest.mark.parametrize(
    "name", sorted(name for name in MODULES if package_of(name) == "commands" and name != OUTPUT)
)
def test_a_command_hands_its_report_to_the_format_chosen(name: str) -> None:
    compared = [
        node.lineno
        for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8")))
        if isinstance(node, ast.Compare)
        for operand in (node.left, *node.comparators)
        if isinstance(operand, ast.Constant) and operand.value in FORMATS
    ]
    assert compared == [], f"{name} chooses a format itself: hand the report to `Output`"


# A server kind is one folder: the registry imports each folder's `kind.py`, nothing else
# imports the folder, and generic code asks the registry.
REGISTRY = "nccl_launch.kinds"


def test_only_the_registry_imports_a_kinds_folder() -> None:
    assert sorted(path.parent.name for path in PACKAGE.glob("*/kind.py")) == KIND_FOLDERS
    outside = {
        name: sorted(target for target in imported(name) if package_of(target) in KIND_FOLDERS)
        for name in MODULES
        if package_of(name) not in KIND_FOLDERS and name != REGISTRY
    }
    assert {name: targets for name, targets in outside.items() if targets} == {}
    kinds = {target for target in imported(REGISTRY) if package_of(target) in KIND_FOLDERS}
    assert kinds == {f"nccl_launch.{folder}.kind" for folder in KIND_FOLDERS}


def test_only_a_kinds_folder_names_it() -> None:
    named = {
        name: [
            node.lineno
            for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and node.value in KIND_FOLDERS
        ]
        for name in MODULES
        if package_of(name) not in KIND_FOLDERS
    }
    assert {name: lines for name, lines in named.items() if lines} == {}


def test_the_registry_wires_no_kind_by_hand() -> None:
    tree = ast.parse(MODULES[REGISTRY].read_text(encoding="utf-8"))
    assert [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Lambda)] == []


# The shell reader reads a script as bash would and knows nothing of the profile it becomes:
# it imports no module of migrate/ outside its own package.
SHELL_READER = "nccl_launch.migrate.shell"


def in_shell_reader(name: str) -> bool:
    return name == SHELL_READER or name.startswith(f"{SHELL_READER}.")


@pytest.mark.parametrize("name", sorted(name for name in MODULES if in_shell_reader(name)))
def test_the_shell_reader_imports_no_other_module_of_migrate(name: str) -> None:
    outside = [
        target
        for target in imported(name)
        if package_of(target) == "migrate" and not in_shell_reader(target)
    ]
    assert outside == [], f"{name} imports from migrate/ outside the shell reader"


# A server's URL masks itself (`Url`): it is read as given only to make the HTTP request and
# to find its host and port, and no module that holds one masks it by hand.
URL = "nccl_launch.secrets.url"
UNMASKING_URL = {"nccl_launch.live.url", "nccl_launch.bench.client"}


def called(name: str) -> set[str]:
    """What `name`'s module calls: each function by its name, each method by its attribute."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    return {
        node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
    }


def test_a_url_is_unmasked_only_where_the_request_is_made() -> None:
    unmasking = {name for name in MODULES if name != URL and "unmasked" in called(name)}
    assert unmasking - UNMASKING_URL == set()


def test_no_module_holding_a_url_masks_it_by_hand() -> None:
    """Neither `masked_url` (the rule a `Url` replaced) anywhere, nor a masking function of
    secrets/masking.py in a module that holds a `Url`: a message says `{url}`."""
    masking = ast.parse(MODULES["nccl_launch.secrets.masking"].read_text(encoding="utf-8"))
    functions = {node.name for node in masking.body if isinstance(node, ast.FunctionDef)}
    by_hand = {"masked_url"} | {each for each in functions if not each.startswith("_")}
    holding = {name for name in MODULES if URL in imported(name) and name != URL}
    found = {name: called(name) & by_hand for name in MODULES if name != URL}
    assert {name: calls for name, calls in found.items() if calls and name in holding} == {}
    assert [name for name, calls in found.items() if "masked_url" in calls] == []


@pytest.mark.parametrize(
    "folder", sorted({path.parent for path in MODULES.values()}), ids=lambda path: path.name
)
def test_folders_stay_small_and_say_what_they_own(folder: Path) -> None:
    assert len([path for path in folder.glob("*.py") if path.name != "__init__.py"]) <= (
        MAX_MODULES_PER_FOLDER
    )
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    assert docstring, f"{folder}/__init__.py says in one line what the package owns"
    assert "\n" not in docstring


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_readable_in_one_sitting(name: str) -> None:
    assert len(MODULES[name].read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_the_architecture_doc_names_every_module() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [
        name
        for name, path in MODULES.items()
        if path.name != "__init__.py" and str(path.relative_to(PACKAGE)) not in doc
    ]
    assert missing == []


TESTS = Path(__file__).parent


@pytest.mark.parametrize("path", sorted(TESTS.glob("test_*.py")), ids=lambda path: path.name)
def test_no_test_module_imports_another(path: Path) -> None:
    """What tests share lives in tests/conftest.py, its fixture plugin tests/standins.py and
    the helper modules beside them (none named test_*): a fixture imported from a test module
    is one more fixture of that name, and an edit of one test module breaks another."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    assert {name for name in found if name.startswith("tests.test_")} == set()


def test_one_vocabulary_per_literal_name() -> None:
    """A status vocabulary has one meaning: no two modules define a `Literal` of one name
    (a `Verdict` of a process and another of a key)."""
    defined: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Subscript):
                continue
            if ast.unparse(node.value.value) == "Literal":
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        defined.setdefault(target.id, []).append(name)
    assert {alias: where for alias, where in defined.items() if len(where) > 1} == {}
