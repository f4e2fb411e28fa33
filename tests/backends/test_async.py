"""The asyncio stores: the same surface as SessionDB, the same effects, and AsyncSessionDB's
own promises.

The behaviour of every store kind (SessionDB, NativeAsyncSessionDB, AsyncSessionDB over
SessionDB) is one parametrized suite: ``test_transitions.py``, ``test_ownership.py`` and
``test_audit.py`` run each test body on all three through the ``new_any_store`` fixture. Here:
every kind offers the whole surface; one scripted sequence of operations run through each kind
against fresh databases of the same backend gives identical return values, errors and final
rows (a deterministic clock makes timestamps comparable); and what only the facade or only the
native store does.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, literal, select, update
from sqlalchemy.engine import URL

from hermes_state import (
    AsyncSessionDB,
    HermesStateError,
    NativeAsyncSessionDB,
    SessionDB,
)
from hermes_state.models import sessions
from tests.conftest import BACKENDS, migrated_database, sqlite_url
from tests.support.digest import database_snapshot

# -- the surface ---------------------------------------------------------------------------------

#: SessionDB's public methods, and the raw-SQL escape hatch callers use (not the static
#: helpers such as ``sanitize_title``, plain functions on every store).
SURFACE = sorted(
    name
    for name, member in inspect.getmembers(SessionDB, inspect.isfunction)
    if not name.startswith("_") or name == "_execute_write"
    if not isinstance(inspect.getattr_static(SessionDB, name), staticmethod)
)


def test_every_kind_of_store_offers_the_whole_surface(tmp_path: Path) -> None:
    assert {"claim_handoff", "handoff_change_token", "renew_handoff_leases"} <= set(SURFACE)
    missing = [name for name in SURFACE if not hasattr(NativeAsyncSessionDB, name)]
    assert missing == [], "NativeAsyncSessionDB lacks these"
    plain = [
        n for n in SURFACE if not inspect.iscoroutinefunction(getattr(NativeAsyncSessionDB, n))
    ]
    assert plain == [], "NativeAsyncSessionDB methods that are not coroutine functions"
    with SessionDB(tmp_path / "facade.db") as store:
        facade = AsyncSessionDB(store)
        for name in SURFACE:
            assert inspect.iscoroutinefunction(getattr(facade, name)), name


def test_the_change_token_moves_when_another_connection_commits(
    any_store: SessionDB, backend_url: URL
) -> None:
    """The watcher's cheap idle probe, on each kind of store: SQLite's number stays put while
    nothing is committed and moves when another connection commits; servers have none."""
    token = any_store.handoff_change_token()
    if backend_url.get_backend_name() != "sqlite":
        assert token is None
        return
    assert isinstance(token, int)
    assert any_store.handoff_change_token() == token
    with SessionDB(url=backend_url) as other:
        other.create_session("elsewhere", "cli")
    moved = any_store.handoff_change_token()
    assert moved != token
    assert any_store.handoff_change_token() == moved


# -- the script ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def _rename_titles(conn: Any) -> int:
    """An _execute_write callable using a SQLAlchemy statement; returns what it changed."""
    # Titles are unique (upstream's index): each renamed session gets its own.
    renamed = update(sessions).where(sessions.c.source == "cli")
    result = conn.execute(renamed.values(title=literal("bulk ") + sessions.c.id))
    return int(result.rowcount)


def _count_sessions(conn: Any) -> int:
    return int(conn.execute(select(func.count()).select_from(sessions)).scalar_one())


def _fail_inside_write(conn: Any) -> None:
    conn.execute(update(sessions).values(title=literal("rolled back ") + sessions.c.id))
    raise LookupError("the callable changed its mind")


SCRIPT = [
    Op("has_pending_handoffs"),
    Op("list_pending_handoffs"),
    Op("create_session", ("alpha", "cli"), {"title": "first", "started_at": 30.0}),
    Op("create_session", ("beta", "cli"), {"model": "m", "started_at": 10.0}),
    Op("create_session", ("alpha", "telegram"), {"title": "ignored"}),
    Op("ensure_session", ("gamma",)),
    Op("ensure_session", ("delta", "gateway"), {"user_id": "u-1", "started_at": 20.0}),
    Op("create_session", ("it's 🦊 %s ?", "cli"), {"started_at": 40.0}),
    Op("append_message", ("alpha", "user", "hello")),
    Op("append_message", ("alpha", "assistant", None)),
    Op("append_message", ("beta", "user", "ünïcode 🦊 'quoted'")),
    Op("append_message", ("alpha", "user", "x" * 5000)),
    Op("append_message", ("nobody", "user", "lost")),
    Op("get_messages", ("alpha",)),
    Op("get_messages", ("nobody",)),
    Op("count_messages", ("alpha",)),
    Op("count_messages", ("nobody",)),
    Op("get_handoff_state", ("alpha",)),
    Op("get_handoff_state", ("nobody",)),
    Op("request_handoff", ("alpha", "telegram")),
    Op("request_handoff", ("alpha", "discord")),
    Op("request_handoff", ("beta", "discord")),
    Op("request_handoff", ("delta", "slack")),
    Op("request_handoff", ("it's 🦊 %s ?", "telegram")),
    Op("request_handoff", ("nobody", "telegram")),
    Op("has_pending_handoffs"),
    Op("list_pending_handoffs"),
    Op("claim_handoff", ("alpha",)),
    Op("claim_handoff", ("alpha",)),
    Op("claim_handoff", ("gamma",)),
    Op("claim_handoff", ("delta",)),
    Op("fail_handoff", ("beta", "y" * 900), {"only_states": ("running",)}),
    Op("fail_handoff", ("beta", "waiter gave up"), {"only_states": ("pending",)}),
    Op("fail_handoff", ("alpha", "not yours"), {"only_states": ("pending",)}),
    Op("complete_handoff", ("alpha",)),
    Op("complete_handoff", ("alpha",)),
    Op("fail_handoff", ("alpha", "too late")),
    Op("list_handoffs", ("completed",)),
    Op("list_handoffs", ("failed",)),
    Op("reclaim_stale_running_handoffs", (RuntimeError("gateway died " + "z" * 700),)),
    Op("reclaim_stale_running_handoffs", ("nothing left",)),
    Op("request_handoff", ("delta", "telegram")),
    Op("request_handoff", ("beta", "telegram")),
    Op("claim_handoff", ("beta",)),
    Op("list_pending_handoffs"),
    Op("list_handoffs", ("running",)),
    Op("fail_handoff", ("beta", ValueError("platform refused"))),
    Op("get_handoff_state", ("alpha",)),
    Op("get_handoff_state", ("beta",)),
    Op("get_handoff_state", ("delta",)),
    Op("get_handoff_state", ("gamma",)),
    Op("request_handoff", ("", "telegram")),
    Op("claim_handoff", (42,)),
    Op("fail_handoff", ("alpha", "e"), {"only_states": "pending"}),
    Op("create_session", ("epsilon", "cli"), {"colour": "red"}),
    Op("append_message", ("alpha", "user", "nul\x00byte")),
    Op("_execute_write", (_rename_titles,)),
    Op("_execute_write", (_count_sessions,)),
    Op("_execute_write", (_fail_inside_write,)),
    Op("list_pending_handoffs"),
    # The operator surface beyond upstream's.
    Op("retry_handoff", ("beta",)),
    Op("retry_handoff", ("beta", "discord")),
    Op("retry_handoff", ("gamma",)),
    Op("claim_handoff", ("beta",)),
    Op("preview_reclaim", ("all",)),
    Op("preview_reclaim", ("sideways",)),
    Op("renew_handoff_leases", (["beta"],)),
    Op("handoff_stats"),
    Op("reclaim_expired_handoffs", ("nothing has a lease",)),
    Op("reclaim_running_handoffs", ("the operator knows the gateway is gone",)),
    Op("handoff_history", ("beta",)),
    Op("handoff_history", ("nobody",)),
    Op("list_handoffs", (None,), {"limit": 3}),
    Op("prune_handoff_events", (30.0,)),
    Op("prune_handoff_events", (-1,)),
    Op("handoff_history", ("beta",)),
]

Outcome = tuple[str, Any]


def _normalise(value: Any) -> Any:
    # Rows are dicts; keep them as they are, but make tuples and lists compare alike.
    if isinstance(value, list | tuple):
        return [_normalise(item) for item in value]
    if isinstance(value, dict):
        return {key: _normalise(item) for key, item in value.items()}
    return value


def _raised(exc: BaseException) -> Outcome:
    return ("raised", type(exc).__name__)


def fake_clock() -> Callable[[], float]:
    """1000.0, 1001.0, ...: identical timestamps for identical call sequences."""
    counter = itertools.count(1000)
    return lambda: float(next(counter))


def run_sync(store: SessionDB) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for op in SCRIPT:
        try:
            outcomes.append(("ok", _normalise(getattr(store, op.method)(*op.args, **op.kwargs))))
        except Exception as exc:
            outcomes.append(_raised(exc))
    return outcomes


async def run_async(store: Any) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for op in SCRIPT:
        try:
            value = await getattr(store, op.method)(*op.args, **op.kwargs)
            outcomes.append(("ok", _normalise(value)))
        except Exception as exc:
            outcomes.append(_raised(exc))
    return outcomes


@contextlib.contextmanager
def fresh_databases(backend: str, tmp_path: Path, count: int) -> Iterator[list[URL]]:
    """``count`` new databases at head, so message ids start alike in each."""
    if backend == "sqlite":
        urls = []
        for index in range(count):
            folder = tmp_path / f"db-{index}"
            folder.mkdir()
            urls.append(sqlite_url(folder))
        yield urls
        return
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(migrated_database(backend)) for _ in range(count)]


def _content_tables(url: URL) -> dict[str, Any]:
    """Every table (sessions, transcript, and whatever else the stores write, such as an audit
    trail), each database's own bookkeeping included: fresh databases start alike."""
    snapshot = database_snapshot(url)
    assert {"sessions", "messages"} <= set(snapshot)
    return snapshot


#: Per backend, how the native store is reached: (drivername given in the URL, the async driver
#: expected). On PostgreSQL both asyncio drivers are compared.
NATIVE_DRIVERS = {
    "sqlite": [("sqlite", "aiosqlite")],
    "postgresql": [("postgresql+asyncpg", "asyncpg"), ("postgresql+psycopg", "psycopg")],
    "mysql": [("mysql", "aiomysql")],
}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///{tmp}/native.db", "aiosqlite"),
        ("sqlite+pysqlite:///{tmp}/native.db", "aiosqlite"),
        ("{tmp}/native.db", "aiosqlite"),
        ("postgresql://hermes@127.0.0.1:1/hermes", "asyncpg"),
        ("postgresql+asyncpg://hermes@127.0.0.1:1/hermes", "asyncpg"),
        ("postgresql+psycopg://hermes@127.0.0.1:1/hermes", "psycopg"),
        ("mysql://hermes@127.0.0.1:1/hermes", "aiomysql"),
        ("mysql+pymysql://hermes@127.0.0.1:1/hermes", "aiomysql"),
        ("mariadb://hermes@127.0.0.1:1/hermes", "aiomysql"),
    ],
)
async def test_native_store_picks_the_asyncio_driver(url: str, driver: str, tmp_path: Path) -> None:
    """A URL without a driver gets the default asyncio one (asyncpg for PostgreSQL); an explicit
    sync driver maps to its asyncio twin. Nothing connects here (port 1 has no server)."""
    target = url.format(tmp=tmp_path)
    native = NativeAsyncSessionDB(url=target) if "://" in target else NativeAsyncSessionDB(target)
    try:
        assert native._engine.dialect.driver == driver
        assert native._engine.dialect.is_async
    finally:
        await native.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", BACKENDS)
async def test_sync_facade_and_native_stores_agree(backend: str, tmp_path: Path) -> None:
    natives = NATIVE_DRIVERS[backend]
    with fresh_databases(backend, tmp_path, 2 + len(natives)) as urls:
        sync_url, facade_url, *native_urls = urls
        with SessionDB(url=sync_url, clock=fake_clock()) as store:
            expected = run_sync(store)

        wrapped = SessionDB(url=facade_url, clock=fake_clock())
        async with AsyncSessionDB(wrapped) as facade:
            runs = {"AsyncSessionDB": await run_async(facade)}
        finals = {"AsyncSessionDB": _content_tables(facade_url)}

        for url, (drivername, driver) in zip(native_urls, natives, strict=True):
            native = NativeAsyncSessionDB(
                url=url.set(drivername=drivername).render_as_string(hide_password=False),
                clock=fake_clock(),
            )
            async with native:
                assert native._engine.dialect.driver == driver
                runs[driver] = await run_async(native)
            finals[driver] = _content_tables(url)

        for index, op in enumerate(SCRIPT):
            for name, outcomes in runs.items():
                context = f"{name}, step {index}: {op.method}{op.args!r:.80}"
                assert outcomes[index] == expected[index], context
        final = _content_tables(sync_url)
        for name, tables in finals.items():
            assert tables == final, name

    # The script must exercise what it claims to, or agreement would prove little.
    by_step = dict(zip((id(op) for op in SCRIPT), expected, strict=True))

    def outcome(method: str, *args: Any) -> list[Outcome]:
        return [by_step[id(op)] for op in SCRIPT if op.method == method and op.args[:1] == args]

    assert outcome("request_handoff", "alpha") == [("ok", True), ("ok", False)]
    assert outcome("claim_handoff", "alpha") == [("ok", True), ("ok", False)]
    assert outcome("append_message", "nobody") == [("raised", "UnknownSessionError")]
    assert outcome("claim_handoff", 42) == [("raised", "InvalidInputTypeError")]
    assert outcome("request_handoff", "") == [("raised", "InvalidInputError")]
    reclaims = [by_step[id(op)] for op in SCRIPT if op.method == "reclaim_stale_running_handoffs"]
    assert reclaims == [("ok", ["delta"]), ("ok", [])]
    pending_lists = [by_step[id(op)] for op in SCRIPT if op.method == "list_pending_handoffs"]
    assert pending_lists[0] == ("ok", [])
    assert [row["id"] for row in pending_lists[1][1]] == ["beta", "delta", "alpha", "it's 🦊 %s ?"]
    assert outcome("get_handoff_state", "beta") == [
        ("ok", {"state": "failed", "platform": "telegram", "error": "platform refused"})
    ]
    assert outcome("_execute_write", _fail_inside_write) == [("raised", "LookupError")]
    assert outcome("_execute_write", _count_sessions) == [("ok", 5)]
    assert [row["id"] for row in pending_lists[-1][1]] == ["delta", "it's 🦊 %s ?"]
    assert outcome("retry_handoff", "beta") == [("ok", True), ("ok", False)]
    assert outcome("retry_handoff", "gamma") == [("ok", False)]
    assert outcome("preview_reclaim", "sideways") == [("raised", "InvalidInputError")]
    assert outcome("reclaim_running_handoffs", "the operator knows the gateway is gone") == [
        ("ok", ["beta"])
    ]
    assert outcome("prune_handoff_events", -1) == [("raised", "InvalidInputError")]
    pruned = outcome("prune_handoff_events", 30.0)
    assert pruned[0][0] == "ok"
    assert pruned[0][1] > 0


# -- AsyncSessionDB, the thread-offloading facade -------------------------------------------------


@pytest.fixture
def facade(tmp_path: Path) -> Iterator[AsyncSessionDB]:
    store = SessionDB(tmp_path / "facade.db")
    try:
        yield AsyncSessionDB(store)
    finally:
        store.close()


@pytest.mark.asyncio
async def test_facade_looks_methods_up_at_call_time(facade: AsyncSessionDB) -> None:
    store = facade.wrapped
    await facade.create_session("s", "cli")
    bound_early = facade.request_handoff  # fetched before the replacement below

    calls: list[tuple[str, str]] = []

    def replacement(session_id: str, platform: str) -> str:
        calls.append((session_id, platform))
        return "replaced"

    store.request_handoff = replacement  # type: ignore[attr-defined]
    assert await bound_early("s", "telegram") == "replaced"
    assert await facade.request_handoff("s", "discord") == "replaced"
    assert calls == [("s", "telegram"), ("s", "discord")]
    # The real method was never reached.
    assert await facade.get_handoff_state("s") == {"state": None, "platform": None, "error": None}

    del store.request_handoff  # type: ignore[attr-defined]
    assert await facade.request_handoff("s", "slack") is True

    # A method that appears on the store later is offered too.
    store.added_later = lambda: "new"  # type: ignore[attr-defined]
    assert await facade.added_later() == "new"


@pytest.mark.asyncio
async def test_facade_missing_attributes_raise_attribute_error(facade: AsyncSessionDB) -> None:
    with pytest.raises(AttributeError):
        _ = facade.no_such_method
    assert getattr(facade, "no_such_method", None) is None
    assert not hasattr(facade, "optional_method")
    assert hasattr(facade, "reclaim_stale_running_handoffs")


class ThreadProbe:
    """A plain object whose methods report the thread they ran on."""

    answer = 42
    label = "probe"

    def where(self) -> int:
        return threading.get_ident()

    def block(self, entered: Callable[[], object], release: threading.Event) -> bool:
        entered()
        return release.wait(timeout=30)

    def explode(self) -> None:
        raise KeyError("from the worker thread")


@pytest.mark.asyncio
async def test_facade_calls_run_off_the_event_loop_thread() -> None:
    facade = AsyncSessionDB(ThreadProbe())
    loop_thread = threading.get_ident()
    assert await facade.where() != loop_thread


@pytest.mark.asyncio
async def test_facade_never_blocks_the_event_loop() -> None:
    """While a call blocks in its worker thread, the loop runs on and is the one to release it.

    Were the call run on the loop's thread, the loop could not resolve ``entered`` until the
    call gave up waiting (and returned False).
    """
    facade = AsyncSessionDB(ThreadProbe())
    loop = asyncio.get_running_loop()
    entered: asyncio.Future[None] = loop.create_future()
    release = threading.Event()

    call = asyncio.ensure_future(
        facade.block(lambda: loop.call_soon_threadsafe(entered.set_result, None), release)
    )
    await asyncio.wait_for(entered, timeout=30)
    assert not call.done()
    release.set()
    assert await asyncio.wait_for(call, timeout=30) is True


@pytest.mark.asyncio
async def test_facade_real_store_calls_run_off_the_loop(facade: AsyncSessionDB) -> None:
    store = facade.wrapped
    seen: list[int] = []
    original = store.has_pending_handoffs

    def spy() -> bool:
        seen.append(threading.get_ident())
        return original()

    store.has_pending_handoffs = spy  # type: ignore[attr-defined]
    assert await facade.has_pending_handoffs() is False
    assert len(seen) == 1
    assert seen[0] != threading.get_ident()


@pytest.mark.asyncio
async def test_facade_passes_non_callables_through(facade: AsyncSessionDB) -> None:
    store = facade.wrapped
    assert facade.where == store.where
    assert facade.url is store.url
    probe = AsyncSessionDB(ThreadProbe())
    assert probe.answer == 42
    assert probe.label == "probe"


@pytest.mark.asyncio
async def test_facade_propagates_exceptions() -> None:
    facade = AsyncSessionDB(ThreadProbe())
    with pytest.raises(KeyError, match="from the worker thread"):
        await facade.explode()


@pytest.mark.asyncio
async def test_facade_errors_from_the_store_keep_their_type(facade: AsyncSessionDB) -> None:
    with pytest.raises(HermesStateError) as caught:
        await facade.request_handoff("", "telegram")
    assert isinstance(caught.value, ValueError)


# -- the native store on its own ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_native_store_sees_what_the_sync_store_wrote(backend_url: URL) -> None:
    """Both stores on one database: they interoperate row for row."""
    with SessionDB(url=backend_url) as sync_store:
        sync_store.create_session("shared", "cli", started_at=1.0)
        assert sync_store.request_handoff("shared", "telegram") is True
        native = NativeAsyncSessionDB(url=backend_url)
        async with native:
            pending = await native.list_pending_handoffs()
            assert [row["id"] for row in pending] == ["shared"]
            assert pending == sync_store.list_pending_handoffs()
            assert await native.claim_handoff("shared") is True
            assert sync_store.claim_handoff("shared") is False
            assert await native.complete_handoff("shared") is True
        assert sync_store.get_handoff_state("shared") == {
            "state": "completed",
            "platform": "telegram",
            "error": None,
        }
