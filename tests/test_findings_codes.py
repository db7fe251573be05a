"""Every finding's code is documented in docs/findings.md, once, and every documented code is
found somewhere: a code is read from the source with `ast`, where it is written.

A code is the first argument of `Finding(...)`, of a function whose first parameter is `code`
or of a class whose constructor's (or first field) is (a validator's refusal, `Invalid`; a
catalog's note on a name, `NameNote`): a string, or a module's constant naming one. Only such
a function may pass a code it was given, or the `code` of what carries one
(`Finding(refused.code, ...)`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "nccl_launch"
DOCS = Path(__file__).parent.parent / "docs" / "findings.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \|", re.MULTILINE)


def _takes_code(function: ast.FunctionDef | ast.AsyncFunctionDef, skip: int) -> bool:
    given = (function.args.posonlyargs + function.args.args)[skip:]
    return bool(given) and given[0].arg == "code"


def _forwarders(trees: dict[Path, ast.Module]) -> set[str]:
    """The functions that take a code as their first parameter, and the classes whose
    constructor does."""
    names = {"Finding"}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _takes_code(node, 0):
                names.add(node.name)
            elif isinstance(node, ast.ClassDef):
                fields = [
                    field.target.id
                    for field in node.body
                    if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                ]
                inits = [
                    init
                    for init in node.body
                    if isinstance(init, ast.FunctionDef) and init.name == "__init__"
                ]
                if fields[:1] == ["code"] or any(_takes_code(init, 1) for init in inits):
                    names.add(node.name)
    return names


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def written_codes() -> tuple[set[str], list[str]]:
    """The codes the package writes, and where a code is neither a string nor a constant."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}
    forwarders = _forwarders(trees)
    codes: set[str] = set()
    unread = []
    for path, tree in trees.items():
        constants = _constants(tree)
        passing = {
            id(call)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef)
            and "code" in [arg.arg for arg in function.args.args + function.args.kwonlyargs]
            for call in ast.walk(function)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _called(node) not in forwarders:
                continue
            given = node.args[0] if node.args else None
            given = given or next((k.value for k in node.keywords if k.arg == "code"), None)
            if isinstance(given, ast.Constant) and isinstance(given.value, str):
                codes.add(given.value)
            elif isinstance(given, ast.Name) and given.id in constants:
                codes.add(constants[given.id])
            elif isinstance(given, ast.Attribute) and given.attr == "code":
                continue  # passed on from what carries it, read where that was made
            elif id(node) not in passing:
                unread.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return codes, unread


def documented() -> list[str]:
    """The codes of the tables under the page's sections (the first table lists causes)."""
    return ROW.findall(DOCS.read_text().partition("\n## ")[2])


def test_every_code_is_a_string_where_it_is_written() -> None:
    assert written_codes()[1] == []


def test_every_code_is_documented_once_and_used() -> None:
    rows = documented()
    assert sorted({code for code in rows if rows.count(code) > 1}) == []
    codes = written_codes()[0]
    assert sorted(codes - set(rows)) == [], "undocumented codes"
    assert sorted(set(rows) - codes) == [], "documented codes nothing writes"
