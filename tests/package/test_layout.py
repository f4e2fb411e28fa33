"""The package's shape, as the README's "How it is built" describes it: modules import each other
in one direction only, and every exception the package defines lives in ``errors.py``."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hermes_state"


@functools.cache
def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules.keys()
            imported.update(submodules)
            if len(submodules) < len(node.names):  # some names are the module's attributes
                imported.add(target)
    return {module for module in imported if module in modules and module != name}


@functools.cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start through the graph, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for following in sorted(graph[node]):
            if following == start:
                return [*path, start]
            if following not in seen:
                seen.add(following)
                stack.append((following, [*path, following]))
    return None


def test_the_graph_sees_the_imports_it_must() -> None:
    graph = _graph()
    assert "hermes_state.plans" in graph["hermes_state.store"]
    assert "hermes_state.statements" in graph["hermes_state.plans.book"]  # `from .. import`
    assert "hermes_state.plans.book" in graph["hermes_state.plans"]  # an __init__ and its modules
    assert "hermes_state.drift" in graph["hermes_state.cli.db"]
    assert "hermes_state.cli.common" in graph["hermes_state.cli.handoff"]


@pytest.mark.parametrize("module", sorted(_modules()))
def test_no_module_imports_one_that_imports_it_back(module: str) -> None:
    cycle = _cycle_from(_graph(), module)
    assert cycle is None, " -> ".join(cycle or [])


def test_no_module_of_the_package_imports_the_gateway_module() -> None:
    """``gateway/run.py`` is a compatible module over ``hermes_state.watcher``: the package
    never imports it back (the graph above only sees the package's own modules)."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            if any(target.partition(".")[0] == "gateway" for target in targets):
                found.append(f"{name}, line {node.lineno}")
    assert found == []


def test_every_exception_class_is_defined_in_errors_py() -> None:
    strays = []
    sources = {**_modules(), "gateway.run": PACKAGE.parent / "gateway" / "run.py"}
    for name, path in sources.items():
        if name == "hermes_state.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id.endswith(("Error", "Exception", "Failed"))
                for base in node.bases
            ):
                strays.append(f"{name}.{node.name}")
    assert strays == []


def test_every_exception_derives_from_the_one_root() -> None:
    import hermes_state.errors as errors

    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, BaseException)
    ]
    assert len(classes) > 10
    own = [cls for cls in classes if cls.__module__ == errors.__name__]
    assert all(issubclass(cls, errors.HermesStateError) for cls in own), own
