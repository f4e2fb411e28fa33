"""Durable session turn leases: one holder per conversation, across threads and processes.

Semantics on every backend (SQLite, PostgreSQL, MariaDB) through the sync store, the native
async store and the threaded proxy; then real contention: several processes race for the same
conversations, fresh and expired, and exactly one wins each.
"""

from __future__ import annotations

import asyncio
import queue
import shutil
import sqlite3
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hermes_state import AsyncSessionDB, NativeAsyncSessionDB, SessionDB
from hermes_state.cli import main
from hermes_state.errors import InvalidInputError, InvalidInputTypeError
from tests.support.digest import sync_url
from tests.support.processes import FORKSERVER
from tests.support.stores import HandClock
from tests.support.vintages import REAL_SCHEMA11

PROCESSES = 6
ROUNDS = 8
WAIT = 120.0  # a safety net against a hung racer, never a synchronisation tool


def lease_rows(url: URL) -> list[tuple[str, str, float, float]]:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as connection:
            query = (
                "SELECT conversation_id, holder, acquired_at, expires_at FROM session_turn_leases"
            )
            rows = connection.execute(text(query + " ORDER BY conversation_id")).all()
            return [(a, b, float(c), float(d)) for a, b, c, d in rows]
    finally:
        engine.dispose()


# -- semantics ---------------------------------------------------------------------------------


def test_one_holder_until_released(new_store: Callable[..., SessionDB], backend_url: URL) -> None:
    clock = HandClock(1000.0)
    db = new_store(clock=clock)
    db.create_session("s1", "cli")

    assert db.try_acquire_session_turn_lease("s1", "turn-a", ttl_seconds=30) is True
    assert db.try_acquire_session_turn_lease("s1", "turn-a") is True  # already its own
    assert db.try_acquire_session_turn_lease("s1", "gateway-b") is False
    assert lease_rows(backend_url) == [("s1", "turn-a", 1000.0, 1030.0)]

    db.release_session_turn_lease("s1", "gateway-b")  # not the holder: nothing happens
    assert db.try_acquire_session_turn_lease("s1", "gateway-b") is False

    db.release_session_turn_lease("s1", "turn-a")
    assert lease_rows(backend_url) == []
    assert db.try_acquire_session_turn_lease("s1", "gateway-b") is True
    db.release_session_turn_lease("s1", "turn-a")  # released twice: still nothing
    assert [row[1] for row in lease_rows(backend_url)] == ["gateway-b"]


def test_expired_lease_is_taken_over_and_its_holder_cannot_refresh(
    new_store: Callable[..., SessionDB], backend_url: URL
) -> None:
    clock = HandClock(1000.0)
    db = new_store(clock=clock)

    assert db.try_acquire_session_turn_lease("conv", "slow", ttl_seconds=10) is True
    clock.advance(5)
    assert db.refresh_session_turn_lease("conv", "slow", ttl_seconds=10) is True
    clock.advance(9)  # 14 s: alive thanks to the refresh
    assert db.try_acquire_session_turn_lease("conv", "fast") is False
    clock.advance(2)  # 16 s: expired at 15
    assert db.try_acquire_session_turn_lease("conv", "fast", ttl_seconds=60) is True
    assert db.refresh_session_turn_lease("conv", "slow") is False  # lost it
    assert lease_rows(backend_url) == [("conv", "fast", 1016.0, 1076.0)]
    assert db.refresh_session_turn_lease("conv", "fast", ttl_seconds=100) is True
    assert lease_rows(backend_url)[0][3] == 1116.0


def test_the_key_is_the_lineage_root_of_a_compressed_session(
    store: SessionDB, backend_url: URL
) -> None:
    store.create_session("root", "cli", end_reason="compression")
    store.create_session("segment-2", "cli", parent_session_id="root", end_reason="compression")
    store.create_session("segment-3", "cli", parent_session_id="segment-2")
    store.create_session("fork", "cli", parent_session_id="segment-3")  # parent not compressed

    assert store.try_acquire_session_turn_lease("segment-3", "turn") is True
    assert lease_rows(backend_url)[0][:2] == ("root", "turn")
    # Every segment of the conversation is the same lease; another conversation is not.
    assert store.try_acquire_session_turn_lease("segment-2", "gateway") is False
    assert store.try_acquire_session_turn_lease("root", "gateway") is False
    assert store.try_acquire_session_turn_lease("fork", "gateway") is True
    assert store.refresh_session_turn_lease("segment-2", "turn") is True
    store.release_session_turn_lease("root", "turn")
    assert store.try_acquire_session_turn_lease("segment-3", "gateway") is True


def test_a_lease_needs_no_session_row(store: SessionDB) -> None:
    """Upstream takes leases for conversations it has not written yet."""
    assert store.try_acquire_session_turn_lease("not-yet-a-session", "turn") is True


def test_bad_input(store: SessionDB) -> None:
    assert store.try_acquire_session_turn_lease("", "turn") is False
    assert store.try_acquire_session_turn_lease("s", "") is False
    assert store.refresh_session_turn_lease("", "turn") is False
    store.release_session_turn_lease("s", "")
    with pytest.raises(InvalidInputTypeError, match="holder must be a str"):
        store.try_acquire_session_turn_lease("s", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="ttl_seconds must be finite"):
        store.try_acquire_session_turn_lease("s", "turn", ttl_seconds=float("nan"))


def test_patience_asks_again_until_the_lease_frees_up(store: SessionDB) -> None:
    assert store.try_acquire_session_turn_lease("s", "first", ttl_seconds=0.3) is True
    assert store.try_acquire_session_turn_lease("s", "second") is False
    # The first lease expires within the patience: the second holder gets it.
    assert store.try_acquire_session_turn_lease("s", "second", patience_s=20.0) is True
    assert store.try_acquire_session_turn_lease("s", "first", patience_s=0.1) is False


def test_async_stores_have_the_same_semantics(backend_url: URL) -> None:
    async def scenario(db: Any) -> None:
        assert await db.try_acquire_session_turn_lease("a", "one", ttl_seconds=30) is True
        assert await db.try_acquire_session_turn_lease("a", "two") is False
        assert await db.refresh_session_turn_lease("a", "two") is False
        assert await db.refresh_session_turn_lease("a", "one", ttl_seconds=60) is True
        await db.release_session_turn_lease("a", "two")
        assert await db.try_acquire_session_turn_lease("a", "two", patience_s=0.1) is False
        await db.release_session_turn_lease("a", "one")
        assert await db.try_acquire_session_turn_lease("a", "two") is True
        await db.release_session_turn_lease("a", "two")

    async def both() -> None:
        async with NativeAsyncSessionDB(url=backend_url) as native:
            await scenario(native)
        async with AsyncSessionDB(SessionDB(url=backend_url)) as proxy:
            await scenario(proxy)

    asyncio.run(both())


# -- contention between processes --------------------------------------------------------------


def _racer(url: str, worker: int, start: Any, results: Any) -> None:
    """A spawned child: per round, wait for the others, then try to take the round's lease."""
    try:
        with SessionDB(url=url) as db:
            db.has_pending_handoffs()  # connect and check the schema before racing
            for round_ in range(ROUNDS):
                start.wait(WAIT)
                holder = f"racer-{worker}"
                # Even rounds: a fresh conversation. Odd rounds: one whose lease expired.
                won = db.try_acquire_session_turn_lease(f"conv-{round_}", holder, ttl_seconds=600)
                results.put((worker, round_, "ok", won))
    except BaseException:
        results.put((worker, -1, "error", traceback.format_exc()))


def test_processes_race_for_leases_and_exactly_one_wins(
    new_store: Callable[..., SessionDB], backend_url: URL
) -> None:
    long_ago = new_store(clock=HandClock(1000.0))
    for round_ in range(1, ROUNDS, 2):
        # Expired long ago: every racer may take it over, only one may end up holding it.
        assert long_ago.try_acquire_session_turn_lease(f"conv-{round_}", "dead", ttl_seconds=1)
    context = FORKSERVER
    start = context.Barrier(PROCESSES)
    results = context.Queue()
    url = backend_url.render_as_string(hide_password=False)
    processes = [
        context.Process(target=_racer, args=(url, worker, start, results))
        for worker in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    winners: dict[int, list[int]] = {round_: [] for round_ in range(ROUNDS)}
    errors: list[str] = []
    try:
        for _ in range(PROCESSES * ROUNDS):
            try:
                worker, round_, status, payload = results.get(timeout=WAIT)
            except queue.Empty:
                pytest.fail("a racer stopped reporting")
            if status == "error":
                errors.append(payload)
                break
            if payload:
                winners[round_].append(worker)
    finally:
        for process in processes:
            process.join(timeout=WAIT)
            if process.is_alive():
                process.kill()
    assert not errors, "\n".join(errors)
    assert all(len(won) == 1 for won in winners.values()), winners
    held = {conversation: holder for conversation, holder, _, _ in lease_rows(backend_url)}
    assert held == {f"conv-{r}": f"racer-{won[0]}" for r, won in winners.items()}


# -- adoption ----------------------------------------------------------------------------------

UPSTREAM_FILE = REAL_SCHEMA11


def _indexes_on_pending(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions'"
            " AND (name LIKE '%handoff_pending%' OR name LIKE '%handoff_state%') ORDER BY name"
        ).fetchall()
    return [name for (name,) in rows]


def _upstream_file_with_leases(tmp_path: Path) -> Path:
    """The real upstream file, given the lease table, a live lease and the pending index the
    way a newer upstream writes them."""
    path = tmp_path / "state.db"
    shutil.copyfile(UPSTREAM_FILE, path)
    with sqlite3.connect(path) as connection:
        if "handoff_state" not in {
            row[1] for row in connection.execute("PRAGMA table_info(sessions)")
        }:
            connection.execute("ALTER TABLE sessions ADD COLUMN handoff_state TEXT")
        connection.executescript(
            "CREATE TABLE session_turn_leases (conversation_id TEXT PRIMARY KEY,"
            " holder TEXT NOT NULL, acquired_at REAL NOT NULL, expires_at REAL NOT NULL);"
            "INSERT INTO session_turn_leases VALUES ('upstream-conv', 'pid=1:turn', 1.0, 9e12);"
            "CREATE INDEX idx_sessions_handoff_state ON sessions(handoff_state, started_at);"
        )
    return path


def test_an_adopted_file_keeps_its_lease_table_rows_and_single_index(tmp_path: Path) -> None:
    path = _upstream_file_with_leases(tmp_path)
    before = (
        sqlite3.connect(path)
        .execute("SELECT sql FROM sqlite_master WHERE name = 'session_turn_leases'")
        .fetchone()
    )

    with SessionDB(path) as db:  # adopts the file: upgrade to head
        assert db.try_acquire_session_turn_lease("upstream-conv", "gateway") is False
        assert db.try_acquire_session_turn_lease("other", "gateway") is True
    assert main(["--url", str(path), "db", "check"]) == 0  # upstream's index is no drift
    assert _indexes_on_pending(path) == ["idx_sessions_handoff_state"]
    with sqlite3.connect(path) as connection:
        assert (
            connection.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'session_turn_leases'"
            ).fetchone()
            == before
        )
        rows = connection.execute(
            "SELECT conversation_id, holder FROM session_turn_leases ORDER BY 1"
        ).fetchall()
    assert rows == [("other", "gateway"), ("upstream-conv", "pid=1:turn")]

    # (--yes: 0006 drops upstream's later columns, which hold their defaults on these rows)
    assert main(["--url", str(path), "db", "downgrade", "0004_upstream_columns", "--yes"]) == 0
    with sqlite3.connect(path) as connection:
        kept = connection.execute("SELECT COUNT(*) FROM session_turn_leases").fetchone()
    assert kept == (2,), "the table was upstream's: a downgrade keeps it and its rows"
    assert _indexes_on_pending(path) == [
        "idx_sessions_handoff_state",  # upstream's, kept
        "ix_sessions_handoff_pending",
    ]


def test_a_new_file_gets_the_table_and_the_downgrade_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    assert _indexes_on_pending(path) == ["idx_sessions_handoff_state"]

    assert main(["--url", str(path), "db", "downgrade", "0004_upstream_columns"]) == 0
    with sqlite3.connect(path) as connection:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master")}
        adoption = connection.execute("SELECT kind FROM hermes_state_adoption").fetchall()
    assert "session_turn_leases" not in tables
    assert _indexes_on_pending(path) == ["ix_sessions_handoff_pending"]
    assert all(not kind.startswith("r5_") for (kind,) in adoption)
    SessionDB(path).close()  # and up again
    assert _indexes_on_pending(path) == ["idx_sessions_handoff_state"]


def test_conn_is_the_calling_threads_own_sqlite_connection(tmp_path: Path) -> None:
    import threading

    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", "cli")
        mine = db._conn
        assert isinstance(mine, sqlite3.Connection)
        assert db._conn is mine
        row = mine.execute("SELECT id FROM sessions").fetchone()
        assert (row[0], row["id"]) == ("s", "s")  # by index and by name, as upstream's rows
        theirs: list[sqlite3.Connection] = []
        thread = threading.Thread(target=lambda: theirs.append(db._conn))
        thread.start()
        thread.join()
        assert len(theirs) == 1
        assert theirs[0] is not mine


def test_servers_have_no_conn(store: SessionDB, backend_url: URL) -> None:
    if backend_url.get_backend_name() == "sqlite":
        pytest.skip("SQLite has one")
    assert getattr(store, "_conn", None) is None


@pytest.mark.parametrize(
    "name",
    [
        "try_acquire_session_turn_lease",
        "refresh_session_turn_lease",
        "release_session_turn_lease",
        "get_session",
    ],
)
def test_the_native_async_store_offers_the_same_signature(name: str) -> None:
    import inspect

    sync = inspect.signature(getattr(SessionDB, name))
    native = getattr(NativeAsyncSessionDB, name)
    assert inspect.iscoroutinefunction(native)
    assert inspect.signature(native).parameters.keys() == sync.parameters.keys()
    for parameter in sync.parameters.values():
        assert inspect.signature(native).parameters[parameter.name].default == parameter.default
