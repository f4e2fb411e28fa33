"""Generate ``hermes_state/operations/`` from the one declaration of the store surface.

``hermes_state.surface.Store`` declares every operation once: its name, parameters, return
type and docstring. From it this script writes

- ``AsyncStore``, the asyncio Protocol: the same operations as coroutine functions;
- ``SyncOperations`` and ``AsyncOperations``: one method per operation whose plan has the same
  name in ``hermes_state.plans.PlanBook``, running that plan (``self._run(...)``, awaited in
  the asyncio one). ``SessionDB`` inherits the first; ``NativeAsyncSessionDB`` and
  ``AbsentStore`` the second, each with its own ``_run``.

An operation without a plan of its name must be listed in ``surface.HAND_WRITTEN`` (each store
writes it). ``python tools/generate_operations.py`` rewrites the file; ``--check`` exits 1 when
it is out of date (a test runs it).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURFACE = ROOT / "hermes_state" / "surface.py"
PACKAGE = ROOT / "hermes_state" / "operations"

_GENERATED = (
    "(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not "
    "edit;\nchange the declaration and run that command (a test fails while this file is stale)."
)

_IMPORTS = """from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from os import PathLike

    from sqlalchemy.engine import URL

    from ..execution import WriteConnection
    from ..plans import ClaimBatch, Plan, PlanBook, Row

T = TypeVar("T")
"""

#: The generated modules: file name -> (first docstring line, the class it holds).
MODULES = {
    "sync.py": (
        "``SyncOperations``: the operations as methods of a synchronous store, generated",
        "SyncOperations",
    ),
    "awaited.py": (
        "``AsyncOperations``: the operations as coroutines of an asyncio store, generated",
        "AsyncOperations",
    ),
    "protocol.py": ("``AsyncStore``: the asyncio store's Protocol, generated", "AsyncStore"),
}

INIT = '''"""The store's operations, generated from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit
its modules; change the declaration and run that command (a test fails while they are stale).

``SyncOperations`` (``sync``) and ``AsyncOperations`` (``awaited``) run each operation's plan
(``PlanBook`` builds it) through the store's own ``_run``; ``AsyncStore`` (``protocol``) is the
asyncio Protocol.
"""

from .awaited import AsyncOperations
from .protocol import AsyncStore
from .sync import SyncOperations

__all__ = ["AsyncOperations", "AsyncStore", "SyncOperations"]
'''


def _module(file_name: str, body: str) -> str:
    first_line, name = MODULES[file_name]
    header = f'"""{first_line}\nfrom the one declaration of the surface\n{_GENERATED}\n"""\n\n'
    return f'{header}{_IMPORTS}\n__all__ = ["{name}"]\n\n\n{body}'


def _store_class() -> ast.ClassDef:
    for node in ast.parse(SURFACE.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == "Store":
            return node
    raise SystemExit(f"{SURFACE}: no class Store")


def _docstring(function: ast.FunctionDef, indent: str) -> str:
    text = ast.get_docstring(function, clean=True)
    if text is None:
        return ""
    lines = text.splitlines()
    if len(lines) == 1:
        return f'{indent}"""{lines[0]}"""\n'
    body = "\n".join(f"{indent}{line}" if line else "" for line in lines[1:])
    return f'{indent}"""{lines[0]}\n{body}\n{indent}"""\n'


def _signature(function: ast.FunctionDef, *, name: str | None = None, prefix: str = "") -> str:
    returns = f" -> {ast.unparse(function.returns)}" if function.returns else ""
    return f"    {prefix}def {name or function.name}({ast.unparse(function.args)}){returns}:\n"


def _call_arguments(function: ast.FunctionDef) -> str:
    """The parameters passed on by name (``*args`` and ``**fields`` as they are)."""
    args = function.args
    passed = [f"{a.arg}={a.arg}" for a in [*args.posonlyargs, *args.args][1:]]
    if args.vararg is not None:
        passed.append(f"*{args.vararg.arg}")
    passed += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg is not None:
        passed.append(f"**{args.kwarg.arg}")
    return ", ".join(passed)


def _parameter_names(function: ast.FunctionDef) -> set[str]:
    args = function.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs][1:]}


def _is_property(function: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in function.decorator_list)


def _plan_parameters() -> dict[str, tuple[set[str], bool, bool]]:
    """PlanBook's public methods: parameter names, and whether they take *args / **kwargs."""
    sys.path.insert(0, str(ROOT))
    from hermes_state.plans import PlanBook

    found = {}
    for name, method in inspect.getmembers(PlanBook, inspect.isfunction):
        if name.startswith("_"):
            continue
        parameters = list(inspect.signature(method).parameters.values())[1:]
        found[name] = (
            {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)},
            any(p.kind is p.VAR_POSITIONAL for p in parameters),
            any(p.kind is p.VAR_KEYWORD for p in parameters),
        )
    return found


def _hand_written() -> frozenset[str]:
    """``surface.HAND_WRITTEN``, read from the source (importing surface needs the generated
    module this script writes)."""
    for node in ast.parse(SURFACE.read_text()).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "HAND_WRITTEN"
            and isinstance(node.value, ast.Call)
        ):
            return frozenset(ast.literal_eval(node.value.args[0]))
    raise SystemExit(f"{SURFACE}: no HAND_WRITTEN = frozenset({{...}})")


def render() -> dict[Path, str]:
    store = _store_class()
    plans = _plan_parameters()
    hand_written = _hand_written()
    members = [node for node in store.body if isinstance(node, ast.FunctionDef)]
    sync_ops: list[str] = []
    async_ops: list[str] = []
    protocol: list[str] = []
    problems: list[str] = []
    for function in members:
        name = function.name
        if _is_property(function):
            protocol.append(f"    @property\n{_signature(function)}        ...\n")
            continue
        if name in ("__enter__", "__exit__"):
            async_name = "__aenter__" if name == "__enter__" else "__aexit__"
            protocol.append(
                f"{_signature(function, name=async_name, prefix='async ')}        ...\n"
            )
            continue
        protocol.append(f"{_signature(function, prefix='async ')}        ...\n")
        if name in hand_written:
            continue
        if name not in plans:
            problems.append(
                f"{name}: PlanBook has no plan of this name (or list it in HAND_WRITTEN)"
            )
            continue
        accepted, takes_args, takes_kwargs = plans[name]
        missing = _parameter_names(function) - accepted
        if missing or (function.args.vararg and not takes_args):
            problems.append(f"{name}: PlanBook.{name} lacks parameters {sorted(missing)}")
        if function.args.kwarg and not takes_kwargs:
            problems.append(f"{name}: PlanBook.{name} takes no **{function.args.kwarg.arg}")
        call = f"self._plans.{name}({_call_arguments(function)})"
        doc = _docstring(function, " " * 8)
        sync_ops.append(f"{_signature(function)}{doc}        return self._run({call})\n")
        async_ops.append(
            f"{_signature(function, prefix='async ')}{doc}        return await self._run({call})\n"
        )
    if problems:
        raise SystemExit("cannot generate the operations:\n  " + "\n  ".join(problems))
    sync_class = (
        "class SyncOperations:\n"
        '    """The operations of a synchronous store: each runs its plan through '
        '``_run``."""\n\n'
        "    _plans: PlanBook\n\n"
        "    def _run(self, plan: Plan[T]) -> T:\n"
        "        raise NotImplementedError\n\n" + "\n".join(sync_ops)
    )
    async_class = (
        "class AsyncOperations:\n"
        '    """The operations of an asyncio store: each awaits its plan through '
        '``_run``."""\n\n'
        "    _plans: PlanBook\n\n"
        "    async def _run(self, plan: Plan[T]) -> T:\n"
        "        raise NotImplementedError\n\n" + "\n".join(async_ops)
    )
    protocol_class = (
        "class AsyncStore(Protocol):\n"
        '    """The asyncio store: :class:`~hermes_state.surface.Store`\'s operations as '
        "coroutine\n    functions (``NativeAsyncSessionDB``, ``AsyncSessionDB``, "
        '``AbsentStore``); each\n    one\'s docstring is in ``Store``."""\n\n' + "\n".join(protocol)
    )
    bodies = {"sync.py": sync_class, "awaited.py": async_class, "protocol.py": protocol_class}
    texts = {"__init__.py": INIT} | {name: _module(name, body) for name, body in bodies.items()}
    return {PACKAGE / name: _formatted(text, PACKAGE / name) for name, text in texts.items()}


def _formatted(text: str, target: Path) -> str:
    """The text as ``ruff format`` leaves it (configured in pyproject.toml), so the file passes
    the format check."""
    ruff = str(Path(sys.executable).with_name("ruff"))
    # Each module imports what any of them may need; ruff drops what this one does not use.
    for command in (
        [ruff, "check", "--fix", "--quiet", "--select", "F401,I", "--exit-zero"],
        [ruff, "format", "--quiet"],
    ):
        text = subprocess.run(
            [*command, "--stdin-filename", str(target), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    files = render()
    if args.check:
        stale = [
            path for path, text in files.items() if not path.exists() or path.read_text() != text
        ]
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run python tools/generate_operations.py")
        return 1 if stale else 0
    PACKAGE.mkdir(exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
