"""Poll cost: the watcher's idle probe and listing at 1,000 and at 1,000,000 sessions.

Requirement (design, "polling must cost O(pending), not O(sessions)"; issue 6): one poll,
``has_pending_handoffs()`` then ``list_pending_handoffs()``, costs about the same whatever the
number of sessions, because both queries read the partial index on pending rows.

Each backend has one case, with a handful of rows pending (:data:`PENDING`) among sessions of
which one in twenty has a completed handoff (history the index must leave out):

* ``SessionDB @ 1,000`` (the baseline) and ``SessionDB @ 1,000,000``: the store's methods; the
  ratio of the two is the answer (about 1 when polling is O(pending)).
* ``raw driver, same SQL @ 1,000,000`` (context): the store's two statements, compiled from
  :mod:`hermes_state.statements`, sent through ``sqlite3`` / psycopg, one transaction each:
  the floor the store's own overhead sits on.
* ``full scan, same result @ 1,000,000`` (context): the same two queries with the index made
  unusable (``+handoff_state`` on SQLite, ``handoff_state || ''`` on PostgreSQL): what a poll
  would cost if it were O(sessions). Its query plan is checked to be a scan, and the store's
  query plan is printed in the note.

Every poll's result is checked (the probe says yes, the listing holds exactly the pending ids,
oldest first). Quick mode uses 100,000 sessions instead of 1,000,000.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Select
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import BUSY_TIMEOUT_MS, make_engine, resolve_url
from hermes_state.models import HandoffState
from hermes_state.statements import has_pending_handoffs, list_handoffs

from . import fixtures
from .common import Batch, BenchmarkError, Result, interleaved_counts, summarize

__all__ = ["run"]

NAME: Final = "poll_cost"
PENDING: Final = 5


@dataclass(frozen=True, slots=True)
class Settings:
    small: int
    big: int
    rounds: int
    warmup: int
    #: Polls per batch for the indexed contenders (a full scan does one per batch).
    polls: int


FULL: Final = Settings(small=1_000, big=1_000_000, rounds=40, warmup=4, polls=20)
QUICK: Final = Settings(small=1_000, big=100_000, rounds=10, warmup=2, polls=10)


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    results = _sqlite_case(settings)
    server = fixtures.pg_server()
    if server is None:
        fixtures.skipping("poll_cost on PostgreSQL")
    else:
        results.extend(_postgres_case(server, settings))
    return results


def _pending_indexes(size: int) -> list[int]:
    """Rows spread over the table, none of them a completed one; in ``started_at`` order."""
    return [index * size // PENDING + 1 for index in range(PENDING)]


def _expected(size: int) -> list[str]:
    return fixtures.session_ids(_pending_indexes(size))


def _mark_pending_sql() -> str:
    return (
        "UPDATE sessions SET handoff_state = 'pending', handoff_platform = 'telegram', "
        "handoff_requested_at = started_at WHERE id = ?"
    )


def _statements(dialect: Any) -> tuple[str, str]:
    """The store's probe and listing, compiled for ``dialect`` with their literal values."""
    probe: Select[Any] = has_pending_handoffs()
    listing: Select[Any] = list_handoffs(HandoffState.PENDING)
    return tuple(  # type: ignore[return-value]
        str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        for statement in (probe, listing)
    )


def _unindexed(sql: str, dialect_name: str) -> str:
    """The same query with the index on ``handoff_state`` made unusable."""
    condition = "sessions.handoff_state = 'pending'"
    if condition not in sql:
        raise BenchmarkError(f"unexpected SQL for the pending rows: {sql}")
    disabled = (
        "+sessions.handoff_state" if dialect_name == "sqlite" else "sessions.handoff_state || ''"
    )
    return sql.replace(condition, f"{disabled} = 'pending'")


Poll = Callable[[], tuple[bool, list[str]]]


def _checked(poll: Poll, expected: list[str], contender: str, count: int) -> Batch:
    def batch() -> None:
        for _ in range(count):
            found, ids = poll()
            if not found or ids != expected:
                raise BenchmarkError(f"{contender}: poll saw {found!r}, {ids!r}; want {expected}")

    return batch


def _store_poll(store: SessionDB) -> Poll:
    def poll() -> tuple[bool, list[str]]:
        found = store.has_pending_handoffs()
        return found, [row["id"] for row in store.list_pending_handoffs()]

    return poll


# -- SQLite ------------------------------------------------------------------------------------


def _sqlite_file(size: int, folder: Path) -> Path:
    path = fixtures.copy_sqlite(fixtures.sqlite_sessions(size), folder / f"poll-{size}.db")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.executemany(_mark_pending_sql(), ((i,) for i in _expected(size)))
        connection.execute("COMMIT")
        connection.execute("ANALYZE")
    finally:
        connection.close()
    return path


def _sqlite3_connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    for pragma in (
        f"busy_timeout = {BUSY_TIMEOUT_MS}",
        "journal_mode = WAL",
        "synchronous = NORMAL",
        "foreign_keys = ON",
    ):
        connection.execute(f"PRAGMA {pragma}")
    return connection


def _sqlite3_poll(connection: sqlite3.Connection, probe: str, listing: str) -> Poll:
    """One read transaction per query, rows turned into dicts: what the store does."""

    def poll() -> tuple[bool, list[str]]:
        connection.execute("BEGIN")
        found = connection.execute(probe).fetchone() is not None
        connection.execute("COMMIT")
        connection.execute("BEGIN")
        cursor = connection.execute(listing)
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        connection.execute("COMMIT")
        return found, [row["id"] for row in rows]

    return poll


def _sqlite_plan(connection: sqlite3.Connection, sql: str) -> str:
    rows = connection.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
    return "; ".join(str(row[-1]) for row in rows)


def _sqlite_case(settings: Settings) -> list[Result]:
    folder = fixtures.scratch() / NAME
    small_path = _sqlite_file(settings.small, folder)
    big_path = _sqlite_file(settings.big, folder)
    engine_dialect = _sqlite_dialect(big_path)
    probe, listing = _statements(engine_dialect)
    scan_probe, scan_listing = (_unindexed(sql, "sqlite") for sql in (probe, listing))
    small, big = f"{settings.small:,}", f"{settings.big:,}"
    store_small, store_big = f"SessionDB @ {small}", f"SessionDB @ {big}"
    raw, scan = f"sqlite3, same SQL @ {big}", f"full scan, same result @ {big}"
    with contextlib.ExitStack() as stack:
        db_small = stack.enter_context(SessionDB(small_path))
        db_big = stack.enter_context(SessionDB(big_path))
        raw_connection = _sqlite3_connect(big_path)
        stack.callback(raw_connection.close)
        plan = _sqlite_plan(raw_connection, listing)
        scan_plan = _sqlite_plan(raw_connection, scan_listing)
        if "SCAN sessions" not in scan_plan:
            raise BenchmarkError(f"the full-scan contender does not scan: {scan_plan}")
        expected_small, expected_big = _expected(settings.small), _expected(settings.big)
        samples = interleaved_counts(
            {
                store_small: (
                    _checked(_store_poll(db_small), expected_small, store_small, settings.polls),
                    settings.polls,
                ),
                store_big: (
                    _checked(_store_poll(db_big), expected_big, store_big, settings.polls),
                    settings.polls,
                ),
                raw: (
                    _checked(
                        _sqlite3_poll(raw_connection, probe, listing),
                        expected_big,
                        raw,
                        settings.polls,
                    ),
                    settings.polls,
                ),
                scan: (
                    _checked(
                        _sqlite3_poll(raw_connection, scan_probe, scan_listing),
                        expected_big,
                        scan,
                        1,
                    ),
                    1,
                ),
            },
            rounds=settings.rounds,
            warmup=settings.warmup,
        )
    return summarize(
        NAME,
        f"has_pending + list_pending, {PENDING} pending [sqlite]",
        samples,
        baseline=store_small,
        ops_per_round=settings.polls,
        notes={store_big: f"plan: {plan}", scan: f"plan: {scan_plan}"},
    )


def _sqlite_dialect(path: Path) -> Any:
    """The dialect of an engine configured like the store's, after it met the database."""
    engine = make_engine(resolve_url(path))
    try:
        with engine.connect():
            pass
        return engine.dialect
    finally:
        engine.dispose()


# -- PostgreSQL --------------------------------------------------------------------------------


def _pg_fill(url: URL, size: int) -> None:
    import psycopg

    fixtures.pg_load_sessions(url, size)
    with psycopg.connect(fixtures.pg_conninfo(url), autocommit=True) as connection:
        for session_id in _expected(size):
            connection.execute(_mark_pending_sql().replace("?", "%s"), (session_id,))
        connection.execute("ANALYZE sessions")


def _psycopg_poll(connection: Any, probe: str, listing: str) -> Poll:
    """One transaction per query, rows as dicts, as the store does (without its pre-ping)."""

    def poll() -> tuple[bool, list[str]]:
        found = connection.execute(probe).fetchone() is not None
        connection.commit()
        cursor = connection.execute(listing)
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        connection.commit()
        return found, [row["id"] for row in rows]

    return poll


def _pg_plan(connection: Any, sql: str) -> str:
    """The plan's lines without their cost estimates."""
    rows = connection.execute(f"EXPLAIN {sql}").fetchall()
    connection.commit()
    return "; ".join(re.sub(r"\s*\(cost=[^)]*\)", "", str(row[0])).strip() for row in rows)


@contextlib.contextmanager
def _pg_filled(server: URL, size: int) -> Iterator[URL]:
    with fixtures.server_database(server) as url:
        _pg_fill(url, size)
        yield url


def _postgres_case(server: URL, settings: Settings) -> list[Result]:
    import psycopg

    engine = make_engine(server)
    probe, listing = _statements(engine.dialect)  # compiling needs no connection
    engine.dispose()
    scan_probe, scan_listing = (_unindexed(sql, "postgresql") for sql in (probe, listing))
    small, big = f"{settings.small:,}", f"{settings.big:,}"
    store_small, store_big = f"SessionDB @ {small}", f"SessionDB @ {big}"
    raw, scan = f"psycopg, same SQL @ {big}", f"full scan, same result @ {big}"
    polls = max(1, settings.polls // 2)
    with contextlib.ExitStack() as stack:
        small_url = stack.enter_context(_pg_filled(server, settings.small))
        big_url = stack.enter_context(_pg_filled(server, settings.big))
        db_small = stack.enter_context(SessionDB(url=small_url))
        db_big = stack.enter_context(SessionDB(url=big_url))
        connection = stack.enter_context(psycopg.connect(fixtures.pg_conninfo(big_url)))
        plan = _pg_plan(connection, listing)
        scan_plan = _pg_plan(connection, scan_listing)
        if "Seq Scan" not in scan_plan:
            raise BenchmarkError(f"the full-scan contender does not scan: {scan_plan}")
        expected_small, expected_big = _expected(settings.small), _expected(settings.big)
        samples = interleaved_counts(
            {
                store_small: (
                    _checked(_store_poll(db_small), expected_small, store_small, polls),
                    polls,
                ),
                store_big: (_checked(_store_poll(db_big), expected_big, store_big, polls), polls),
                raw: (
                    _checked(_psycopg_poll(connection, probe, listing), expected_big, raw, polls),
                    polls,
                ),
                scan: (
                    _checked(
                        _psycopg_poll(connection, scan_probe, scan_listing), expected_big, scan, 1
                    ),
                    1,
                ),
            },
            rounds=settings.rounds,
            warmup=settings.warmup,
        )
    return summarize(
        NAME,
        f"has_pending + list_pending, {PENDING} pending [postgresql]",
        samples,
        baseline=store_small,
        ops_per_round=polls,
        notes={store_big: f"plan: {plan}", scan: f"plan: {scan_plan}"},
    )
