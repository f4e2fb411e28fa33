"""PostgreSQL's runner: its own psycopg connections in autocommit, and what stays true with them.

Connections the server killed are replaced (idle ones without an error, one killed under a
statement after a clear one), a forked child opens its own, ``close()`` closes every one
(also those busy at that moment, once their call returns), more callers than the engine's pool
lends wait their turn, connections go back to the pool out of autocommit, a plan of several
statements is one transaction, and values come back exactly as SQLAlchemy returns them.
"""

from __future__ import annotations

import contextlib
import decimal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Float, bindparam, func, literal_column, select, text
from sqlalchemy.engine import URL

from hermes_state import DatabaseError, SessionDB
from hermes_state.engine import Patience
from hermes_state.execution import PooledRunner, PostgresRunner
from hermes_state.models import sessions
from hermes_state.plans import Body, Plan, Step
from hermes_state.statements import Capabilities
from tests.conftest import empty_tables
from tests.support.processes import DEADLINE, in_forked_child, wait_until
from tests.support.stores import HandClock, make_pending, put
from tests.support.wire import driver_wire

APP = "hs-runner-test"


@pytest.fixture
def pg_url(migrated_servers: dict[str, URL]) -> URL:
    url = migrated_servers["postgresql"]  # skips when not configured
    empty_tables(url)
    # The store's connections carry this name, so the server can tell them apart.
    return url.update_query_dict({"application_name": APP})


def _backend_pid(_caps: Capabilities) -> Body[int]:
    outcome = yield Step(select(func.pg_backend_pid().label("pid")))
    return int(outcome.rows[0]["pid"])


def backend_pid(db: SessionDB) -> int:
    """The server process behind the connection the store's runner uses next."""
    return db._run(Plan(_backend_pid, writes=False))


def runner(db: SessionDB) -> PostgresRunner:
    assert isinstance(db._runner, PostgresRunner)
    return db._runner


def conninfo(url: URL) -> str:
    return url.set(drivername="postgresql", query={}).render_as_string(hide_password=False)


def store_backends(url: URL, where: str = "true") -> list[int]:
    """Server processes of this test's stores (by application name) matching ``where``."""
    with psycopg.connect(conninfo(url), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = %s "
            f"AND ({where})",
            (url.database, APP),
        ).fetchall()
    return [int(row[0]) for row in rows]


def terminate(url: URL, pid: int) -> None:
    with psycopg.connect(conninfo(url), autocommit=True) as admin:
        # With a timeout, the call returns once the backend has exited (socket closed).
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone() == (True,)


@contextlib.contextmanager
def rows_locked(url: URL, *session_ids: str) -> Iterator[None]:
    """Another session holds these rows' locks until the block ends."""
    with psycopg.connect(conninfo(url)) as locker:
        locker.execute(
            "SELECT id FROM sessions WHERE id = ANY(%s) FOR UPDATE", (list(session_ids),)
        )
        try:
            yield
        finally:
            locker.rollback()


def in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], list[Any]]:
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, results


def join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(DEADLINE)
        assert not thread.is_alive()


# -- connections the server closed --------------------------------------------------------------


def test_the_runner_keeps_its_connection_and_replaces_one_the_server_killed(pg_url: URL) -> None:
    with SessionDB(url=pg_url) as db:
        make_pending(db, "s")
        first = backend_pid(db)
        assert backend_pid(db) == first  # kept between calls: no checkout, no reset
        terminate(pg_url, first)
        # Found dead without a round trip (its socket has the FATAL message): no error.
        assert db.claim_handoff("s") is True
        assert backend_pid(db) != first
        assert first not in store_backends(pg_url)


def _sleep(_caps: Capabilities) -> Body[None]:
    yield Step(select(func.pg_sleep(DEADLINE)))


def test_a_connection_killed_under_a_statement_fails_that_call_and_is_dropped(
    pg_url: URL,
) -> None:
    with SessionDB(url=pg_url) as db:
        put(db, "s", "pending")
        busy = backend_pid(db)
        threads, results = in_threads([lambda: db._run(Plan(_sleep, writes=False))])
        wait_until(
            lambda: store_backends(pg_url, "state = 'active'") == [busy],
            "the statement to run on the runner's connection",
        )
        terminate(pg_url, busy)
        join(threads)
        error = results[0]
        assert isinstance(error, DatabaseError), repr(error)
        assert "terminating connection" in str(error) or "closed" in str(error), str(error)
        assert pg_url.render_as_string(hide_password=True) in str(error)
        # Not put back: the next call gets a working connection.
        assert db.claim_handoff("s") is True
        assert backend_pid(db) != busy


# -- fork, close, threads ----------------------------------------------------------------------


def test_a_forked_child_opens_connections_of_its_own(pg_url: URL) -> None:
    with SessionDB(url=pg_url) as db:
        make_pending(db, "parent", "child")
        parents = backend_pid(db)

        def child() -> str | None:
            assert db.claim_handoff("child") is True
            if backend_pid(db) == parents:
                return "the child used its parent's connection"
            return None

        assert in_forked_child(child) == "ok"
        # The parent's connection is unharmed (the child neither used nor closed it).
        assert backend_pid(db) == parents
        assert db.claim_handoff("parent") is True
        assert db.get_handoff_state("child") == {
            "state": "running",
            "platform": "telegram",
            "error": None,
        }


def test_close_closes_every_connection_also_those_busy_at_that_moment(pg_url: URL) -> None:
    db = SessionDB(url=pg_url)
    ids = ["a", "b", "c"]
    for session_id in ids:
        put(db, session_id, "running")
    with rows_locked(pg_url, *ids[1:]):
        # Two completions wait for the locks, each on a connection of its own.
        threads, results = in_threads([lambda s=s: db.complete_handoff(s) for s in ids[1:]])
        wait_until(
            lambda: len(store_backends(pg_url, "wait_event_type = 'Lock'")) == 2,
            "both completions to wait for their row",
        )
        assert db.complete_handoff("a") is True  # a third connection, idle again afterwards
        db.close()
    join(threads)
    assert results == [True, True]  # the busy calls finished their work...
    # ...and their connections were closed on return instead of kept: none is left.
    wait_until(lambda: not store_backends(pg_url), "every connection of the store to close")
    assert db.get_handoff_state("a") is not None  # a later call opens the database again
    db.close()


def test_more_callers_than_the_pool_lends_wait_their_turn_and_the_pool_gets_them_back_clean(
    pg_url: URL,
) -> None:
    callers = 24  # the engine's pool lends 15 (5 + 10 overflow)
    ids = [f"s{n:02}" for n in range(callers)]
    with SessionDB(url=pg_url) as db:
        for session_id in ids:
            put(db, session_id, "running")
        with rows_locked(pg_url, *ids):
            threads, results = in_threads([lambda s=s: db.complete_handoff(s) for s in ids])
            wait_until(
                lambda: len(store_backends(pg_url, "wait_event_type = 'Lock'")) == 15,
                "the pool's 15 connections to be busy",
            )
        join(threads)
        assert results == [True] * callers
        assert len(runner(db)._idle) <= 5  # the rest went back to the pool
        wait_until(lambda: len(store_backends(pg_url)) <= 10, "the overflow to close")
        # What went back to the pool left autocommit: a failed _execute_write rolls back whole.
        engine = runner(db)._engine
        with contextlib.ExitStack() as stack:
            lent = [stack.enter_context(engine.connect()) for _ in range(5)]
            assert [c.connection.dbapi_connection.autocommit for c in lent] == [False] * 5

        def half_then_fail(conn: Any) -> None:
            conn.execute(text("UPDATE sessions SET title = 'half' WHERE id = 's00'"))
            raise RuntimeError("the caller's own failure")

        for _ in range(5):
            with pytest.raises(RuntimeError):
                db._execute_write(half_then_fail)
        assert db.get_session("s00")["title"] is None


# -- several statements, one transaction -----------------------------------------------------


def test_a_plan_of_several_statements_is_one_transaction(pg_url: URL) -> None:
    with SessionDB(url=pg_url) as db:
        db.create_session("s", "cli")
        kept = backend_pid(db)
        with driver_wire() as wire:
            assert db.try_acquire_session_turn_lease("s", "me") is True
        sql = wire.sql()
        assert sql[0].startswith("BEGIN"), sql
        assert sql[-1] == "COMMIT", sql
        assert len(sql) > 3, sql  # the lineage walk, the lease...: several statements
        assert wire.round_trips == {"postgresql": len(sql)}

        with pytest.raises(RuntimeError, match="after its first statement"):
            db._run(Plan(insert_then_fail, writes=True, single_statement=False))
        assert db.get_session("half") is None  # rolled back
        assert backend_pid(db) == kept  # and the connection, idle again, kept


_INSERT = sessions.insert().values(
    {name: bindparam(name) for name in ("id", "source", "started_at")}
)


def insert_then_fail(_caps: Capabilities) -> Body[None]:
    yield Step(_INSERT, {"id": "half", "source": "cli", "started_at": 1.0})
    raise RuntimeError("the plan failed after its first statement")


# -- values as SQLAlchemy returns them ---------------------------------------------------------


def test_every_read_returns_what_sqlalchemy_returns(pg_url: URL) -> None:
    clock = HandClock(1_700_000_000.0)
    with SessionDB(url=pg_url, clock=clock, owner="gw", lease_seconds=60.0) as db:
        put(db, "done", "completed")
        put(db, "failed", "failed")
        put(db, "running", "running")
        make_pending(db, "pending")
        db.append_message("done", "user", "hello", tool_calls=[{"id": "t1"}])
        plans = db._plans
        sqlalchemy_runner = PooledRunner(runner(db)._engine, Patience(5.0), db.where)
        reads: list[Callable[[], Plan[Any]]] = [
            plans.list_pending_handoffs,
            lambda: plans.list_handoffs(None, 10),
            lambda: plans.list_sessions(),
            lambda: plans.get_session("done"),
            lambda: plans.get_messages("done"),
            lambda: plans.handoff_history("failed"),
            lambda: plans.handoff_events_after(0, 100),
            lambda: plans.recent_handoff_failures(5),
            plans.last_handoff_event_id,
            plans.handoff_stats,
            lambda: plans.preview_reclaim("all"),
            lambda: plans.get_handoff_state("running"),
            plans.has_pending_handoffs,
        ]
        for make in reads:
            expected = sqlalchemy_runner.run(make())
            assert expected, make  # each read finds something, so the comparison means a thing
            assert runner(db).run(make()) == expected


def _typed(_caps: Capabilities) -> Body[Any]:
    outcome = yield Step(select(literal_column("2.5", Float(asdecimal=True)).label("x")))
    return outcome.rows


def test_result_processors_apply_as_in_sqlalchemy(pg_url: URL) -> None:
    with SessionDB(url=pg_url) as db:
        rows = db._run(Plan(_typed, writes=False))
        assert rows == [{"x": decimal.Decimal("2.5")}]
        assert isinstance(rows[0]["x"], decimal.Decimal)


def _expanding(_caps: Capabilities) -> Body[Any]:
    yield Step(select(sessions.c.id).where(sessions.c.id.in_(bindparam("ids", expanding=True))))


def test_a_statement_that_needs_rendering_per_call_is_refused_before_anything_is_sent(
    pg_url: URL,
) -> None:
    with SessionDB(url=pg_url) as db:
        db.create_session("s", "cli")
        with driver_wire() as wire, pytest.raises(TypeError, match="per-call rendering"):
            db._run(Plan(_expanding, writes=False))
        assert wire.statements == []
        assert db.get_session("s") is not None  # the connection is fine afterwards
