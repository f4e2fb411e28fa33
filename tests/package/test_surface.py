"""The declared store surface (``hermes_state.surface``): the two Protocols agree with each other,
every store offers every method with the declared parameters, and the store of a database that
does not exist yet answers as an empty database does.

Names, kinds and defaults are compared at run time; the types are mypy's job (each store module
assigns its class to a variable of its Protocol's type under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import (
    AsyncSessionDB,
    DatabaseUnavailableError,
    HermesStateError,
    NativeAsyncSessionDB,
    SessionDB,
)
from hermes_state.absent import AbsentStore
from hermes_state.store import StoreSettings
from hermes_state.surface import HAND_WRITTEN, AsyncStore, Store
from tests.support.digest import database_digest

SYNC_ONLY = {"__enter__", "__exit__"}
ASYNC_ONLY = {"__aenter__", "__aexit__"}


def declared(protocol: type) -> dict[str, Any]:
    """The members written in the bodies of the Protocol and of the surface's Protocols it
    inherits: methods and properties (not what ``typing.Protocol`` adds to every protocol
    class)."""
    found: dict[str, Any] = {}
    for klass in reversed(protocol.__mro__):
        if not klass.__module__.startswith("hermes_state."):
            continue
        prefix = f"{klass.__qualname__}."
        found |= {
            name: member
            for name, member in vars(klass).items()
            if isinstance(member, property)
            or (inspect.isfunction(member) and member.__qualname__.startswith(prefix))
        }
    return found


def methods(protocol: type) -> dict[str, Callable[..., Any]]:
    return {n: m for n, m in declared(protocol).items() if not isinstance(m, property)}


def properties(protocol: type) -> set[str]:
    return {n for n, m in declared(protocol).items() if isinstance(m, property)}


def shape(function: Callable[..., Any], *, bound: bool = False) -> list[tuple[str, Any, Any]]:
    """Parameter names, kinds and defaults; ``self`` left out of an unbound function's."""
    parameters = list(inspect.signature(function).parameters.values())
    if not bound:
        parameters = parameters[1:]
    return [(p.name, p.kind, p.default) for p in parameters]


def mismatches(store: object, protocol: type, *, bound: bool = False) -> list[str]:
    """Every way ``store`` (a class, or with ``bound`` an instance) falls short of
    ``protocol``: a missing method, a method that is (not) a coroutine function, a different
    parameter list. Empty when it implements it."""
    wants_coroutines = protocol is AsyncStore
    found = []
    for name, declaration in methods(protocol).items():
        implementation = getattr(store, name, None)
        if implementation is None or not callable(implementation):
            found.append(f"{name}: missing")
            continue
        is_coroutine = inspect.iscoroutinefunction(implementation)
        if is_coroutine != wants_coroutines:
            found.append(f"{name}: {'a' if is_coroutine else 'not a'} coroutine function")
        expected = shape(declaration)
        actual = shape(implementation, bound=bound)
        if actual != expected:
            found.append(f"{name}: parameters {actual} instead of {expected}")
    return found


#: Pure helpers every store shares from ``StoreSettings`` as static methods (``sanitize_title``):
#: they touch no database, so they are not operations of the surface.
STATIC_HELPERS = frozenset(
    name for name, member in vars(StoreSettings).items() if isinstance(member, staticmethod)
)


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls)
        if callable(member) and not isinstance(member, type) and not name.startswith("_")
    } - STATIC_HELPERS


def test_the_static_helpers_are_the_same_function_on_every_store() -> None:
    assert {"sanitize_title", "_sanitize_fts5_query", "_contains_cjk", "_count_cjk"} == (
        STATIC_HELPERS
    )
    for cls in (SessionDB, NativeAsyncSessionDB, AbsentStore):
        assert cls.sanitize_title("  a\u200b  b ") == "a b"
        assert cls._sanitize_fts5_query("chat-send*") == '"chat-send"*'
        assert cls._contains_cjk("a 大")
        assert cls._count_cjk("大别山 a") == 3


# -- the Protocols ---------------------------------------------------------------------------


def test_the_two_protocols_declare_the_same_surface() -> None:
    sync, aio = methods(Store), methods(AsyncStore)
    assert set(sync) - SYNC_ONLY == set(aio) - ASYNC_ONLY
    assert set(sync) >= SYNC_ONLY
    assert set(aio) >= ASYNC_ONLY
    for name in set(sync) - SYNC_ONLY:
        assert shape(sync[name]) == shape(aio[name]), name
        assert not inspect.iscoroutinefunction(sync[name]), name
        assert inspect.iscoroutinefunction(aio[name]), name
    assert shape(sync["__exit__"]) == shape(aio["__aexit__"])
    assert (
        properties(Store)
        == properties(AsyncStore)
        == {
            "url",
            "where",
            "owner",
            "lease_seconds",
            "actor",
        }
    )


def test_every_public_method_of_every_store_is_declared() -> None:
    """A method added to a store but not to the Protocols fails here: the surface is declared
    in one place."""
    declared_sync = set(methods(Store))
    assert public_methods(SessionDB) <= declared_sync, public_methods(SessionDB) - declared_sync
    assert "_execute_write" in declared_sync
    for cls in (NativeAsyncSessionDB, AbsentStore):
        undeclared = public_methods(cls) - set(methods(AsyncStore))
        assert not undeclared, f"{cls.__name__}: {sorted(undeclared)}"


def test_the_check_catches_a_missing_method_and_a_changed_parameter() -> None:
    """The comparison these tests rely on does fail: a store lacking a method, one with a
    different default, one whose keyword-only parameter became positional, and a synchronous
    method where a coroutine function is declared."""

    class Incomplete(AbsentStore):
        claim_handoff = None  # type: ignore[assignment]

        async def list_handoffs(  # type: ignore[override]
            self, state: str | None = "pending", *, limit: int | None = None
        ) -> list[Any]:
            return []

        async def fail_handoff(  # type: ignore[override]
            self, session_id: str, error: object, only_states: Any = None
        ) -> bool:
            return False

        def has_pending_handoffs(self) -> bool:  # type: ignore[override]
            return False

    found = mismatches(Incomplete, AsyncStore)
    assert "claim_handoff: missing" in found
    assert any(f.startswith("list_handoffs: parameters") for f in found), found
    assert any(f.startswith("fail_handoff: parameters") for f in found), found
    assert "has_pending_handoffs: not a coroutine function" in found
    assert len(found) == 4, found


# -- each store against its Protocol ----------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "protocol"),
    [(SessionDB, Store), (NativeAsyncSessionDB, AsyncStore), (AbsentStore, AsyncStore)],
    ids=["SessionDB", "NativeAsyncSessionDB", "AbsentStore"],
)
def test_each_store_class_implements_its_protocol(store: type, protocol: type) -> None:
    assert mismatches(store, protocol) == []


@pytest.fixture
def sync_store(tmp_path: Path) -> Iterator[SessionDB]:
    with SessionDB(tmp_path / "state.db", owner="gw", lease_seconds=30.0) as store:
        yield store


def test_the_threaded_store_offers_every_method_as_a_coroutine_function(
    sync_store: SessionDB,
) -> None:
    """``AsyncSessionDB`` makes its methods at call time (``__getattr__``): over a real store,
    each one declared is a coroutine function with the wrapped method's parameters."""
    threaded = AsyncSessionDB(sync_store)
    assert mismatches(threaded, AsyncStore, bound=True) == []


@pytest.mark.asyncio
async def test_every_store_has_the_declared_properties(tmp_path: Path) -> None:
    sync = SessionDB(tmp_path / "state.db", owner="gw", lease_seconds=30.0)
    native = NativeAsyncSessionDB(tmp_path / "state.db", owner="gw", lease_seconds=30.0)
    absent = AbsentStore(tmp_path / "nothing" / "state.db", owner="gw", lease_seconds=30.0)
    threaded = AsyncSessionDB(sync)
    try:
        for store in (sync, native, absent, threaded):
            for name in properties(Store):
                assert hasattr(store, name), (store, name)
            assert (store.owner, store.lease_seconds, store.actor) == ("gw", 30.0, "gw")
        for name in properties(Store):
            assert getattr(threaded, name) == getattr(sync, name)  # passed through as they are
        assert native.where == sync.where == str(tmp_path / "state.db")
        assert absent.where == str(tmp_path / "nothing" / "state.db")
    finally:
        await native.close()
        sync.close()


# -- the store of a database that does not exist yet -----------------------------------------

#: A value for each parameter without a default, by name (a new method whose parameter is not
#: here fails below with the parameter's name).
SAMPLES: dict[str, Any] = {
    "session_id": "s-1",
    "source": "cli",
    "role": "user",
    "platform": "telegram",
    "error": "telegram is down",
    "limit": 5,
    "session_ids": ["s-1", "s-2", "s-1"],
    "errors": {"s-1": "bounced", "s-2": "bounced"},
    "outcomes": {"s-1": None, "s-2": "bounced"},
    "turn_holders": {"s-1": "gateway-1", "s-2": "gateway-1"},
    "holder": "gateway-1",
    "older_than_seconds": 60.0,
    "title": "quarterly report",
    "base_title": "quarterly report #2",
    "end_reason": "user_exit",
    "system_prompt": "be brief",
    "model": "gpt-5",
    "fn": lambda conn: conn.execute("SELECT 1").scalar_one(),
    "archived": True,
    "pinned": True,
    "hidden": True,
    "session_id_or_prefix": "s-",
    "key": "last_auto_archive",
    "value": "1700000000.0",
    # -- messages
    "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
    "around_message_id": 1,
    "target_message_id": 1,
    # -- search (issue 24)
    "query": "zanzibar",
    # -- retention (issue 24)
    #
    # -- portability (issue 24)
    "sessions": [{"id": "s-imported", "messages": [{"role": "user", "content": "hi"}]}],
}
#: What an empty database does only by writing: the absent store refuses it instead.
WRITES = {
    "create_session",
    "ensure_session",
    "update_token_counts",  # creates the session it accounts for, as upstream
    "try_acquire_session_turn_lease",
    "acquire_session_turn_lease",
    "_execute_write",
    "set_meta",
    # -- search (issue 24)
    #
    # -- retention (issue 24)
    #
    # -- portability (issue 24)
    "import_sessions",
}
#: Where the absent store's answer differs from an empty file's, on purpose.
DIFFERENT = {
    "handoff_change_token",  # None: there is no file whose commits it could count
    # -- retention (issue 24): timings, and the pages of the file (there is none)
    "prune_report",
    "storage_report",
}
LIFE_CYCLE = {"close", "__aenter__", "__aexit__"}


@dataclasses.dataclass(frozen=True)
class Arguments:
    """A call's arguments: by position, and the keyword-only ones by name."""

    positional: list[Any]
    named: dict[str, Any]

    def call(self, store: Any, name: str) -> Any:
        return getattr(store, name)(*self.positional, **self.named)


def _required(name: str) -> list[inspect.Parameter]:
    """The parameters of ``name`` a call must give (no default, no ``*args``/``**kwargs``)."""
    return [
        p
        for p in inspect.signature(methods(AsyncStore)[name]).parameters.values()
        if p.name != "self" and p.default is inspect.Parameter.empty
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _arguments(parameters: list[inspect.Parameter], values: dict[str, Any]) -> Arguments:
    positional = [values[p.name] for p in parameters if p.kind is not p.KEYWORD_ONLY]
    named = {p.name: values[p.name] for p in parameters if p.kind is p.KEYWORD_ONLY}
    return Arguments(positional, named)


def sample_arguments(name: str) -> Arguments:
    required = _required(name)
    for parameter in required:
        assert parameter.name in SAMPLES, f"add a sample value for {name}'s {parameter.name}"
    return _arguments(required, SAMPLES)


async def outcome(store: Any, name: str, arguments: Arguments) -> tuple[str, Any]:
    """What ``store.name(...)`` returned with ``arguments``, or the class of the error it
    raised."""
    try:
        return ("returned", await arguments.call(store, name))
    except HermesStateError as exc:
        return ("raised", type(exc))


def calls() -> list[str]:
    return sorted(set(methods(AsyncStore)) - LIFE_CYCLE)


@pytest.mark.asyncio
async def test_the_absent_store_answers_as_an_empty_database_and_creates_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "profiles" / "new" / "state.db"
    absent = AbsentStore(missing)
    empty_file = tmp_path / "empty" / "state.db"
    async with NativeAsyncSessionDB(empty_file) as empty:
        for name in (n for n in calls() if n not in WRITES | DIFFERENT):
            arguments = sample_arguments(name)
            answer = await outcome(absent, name, arguments)
            expected = await outcome(empty, name, arguments)
            assert answer == expected, name
        # Nothing above wrote to the empty file, so every answer was an empty database's.
        assert (await empty.handoff_stats())["counts"]["pending"] == 0
        assert await empty.last_handoff_event_id() == 0
    assert await absent.handoff_change_token() is None
    for name in sorted(WRITES):
        with pytest.raises(DatabaseUnavailableError, match="there is no database at"):
            await sample_arguments(name).call(absent, name)
    async with absent as same:
        assert same is absent
    assert not missing.parent.exists()


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(WRITES - {"_execute_write"}))
async def test_what_the_absent_store_refuses_is_what_would_write(name: str, tmp_path: Path) -> None:
    url_file = tmp_path / "state.db"
    async with NativeAsyncSessionDB(url_file) as empty:
        await empty.last_handoff_event_id()  # the file exists, migrated, empty
        before = database_digest(empty.url)
        await sample_arguments(name).call(empty, name)
        assert database_digest(empty.url) != before


#: A wrong value for some of the parameters, by name.
BAD = {
    "session_id": 7,
    "session_ids": "s-1",
    "limit": -1,
    "errors": ["s-1"],
    "holder": " ",
    "archived": "yes",
    "pinned": None,
    "hidden": 2,
    "session_id_or_prefix": 7,
    "key": " ",
    "value": 7,
    # -- messages
    "messages": "not a list",
    # -- search (issue 24)
    "query": 7,
}


def with_bad_input(name: str) -> Arguments | None:
    """Sample arguments with every parameter that has a wrong value in BAD given it; None
    when the method takes none of them."""
    required = _required(name)
    if not any(p.name in BAD for p in required):
        return None
    return _arguments(required, {**SAMPLES, **BAD})


@pytest.mark.asyncio
@pytest.mark.parametrize("name", [n for n in calls() if with_bad_input(n) is not None])
async def test_the_absent_store_refuses_bad_input_as_the_store_does(
    name: str, tmp_path: Path
) -> None:
    """Bad arguments are refused by the same checks, before anything else happens."""
    arguments = with_bad_input(name)
    assert arguments is not None
    absent = AbsentStore(tmp_path / "missing" / "state.db")
    async with NativeAsyncSessionDB(tmp_path / "state.db") as empty:
        answer = await outcome(absent, name, arguments)
        expected = await outcome(empty, name, arguments)
    assert answer == expected
    assert answer[0] == "raised", answer


# -- the one declaration and what is generated from it ------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate_operations", ROOT / "tools" / "generate_operations.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_operations_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "generate_operations.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_operation_without_a_plan_is_refused_by_the_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A declaration the plan book cannot run is named, not generated half-way."""
    generator = _generator()
    declared_text = (ROOT / "hermes_state" / "surface.py").read_text()
    anchor = "    def handoff_stats(self) -> Row:"
    assert anchor in declared_text
    changed = tmp_path / "surface.py"
    changed.write_text(
        declared_text.replace(
            anchor,
            '    def frobnicate(self, depth: int) -> int:\n        """New."""\n        ...\n\n'
            + anchor,
        )
    )
    monkeypatch.setattr(generator, "SURFACE", changed)
    with pytest.raises(SystemExit) as refused:
        generator.render()
    assert "frobnicate: PlanBook has no plan of this name" in str(refused.value)


def test_each_generated_method_runs_the_plan_of_its_name() -> None:
    """One docstring per operation: the generated methods carry the declaration's."""
    for name, declaration in methods(Store).items():
        if name in HAND_WRITTEN or name.startswith("__"):
            continue
        assert getattr(SessionDB, name).__doc__ == declaration.__doc__, name
        assert getattr(NativeAsyncSessionDB, name).__doc__ == declaration.__doc__, name
        assert f"self._plans.{name}(" in inspect.getsource(getattr(SessionDB, name)), name
