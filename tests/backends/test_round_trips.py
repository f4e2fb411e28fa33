"""Round trips per operation on the real servers, counted at the driver (see tests/support/wire.py).

The numbers are docs/throughput.md's table ("Throughput: batches and round trips"). PostgreSQL:
one per operation, the statement itself. MariaDB/MySQL: the statements and the COMMIT, nothing
else: no ping before (a dead idle connection is found by looking at its socket), no ROLLBACK
after (the pool resets a connection only when the server says a transaction is open), and
on MariaDB no read-back of a claim's attempt (the audit INSERT returns it).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pymysql.constants import COMMAND
from sqlalchemy import text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import make_engine
from hermes_state.statements import Capabilities
from tests.conftest import empty_tables
from tests.support.stores import make_pending, put
from tests.support.wire import driver_wire

OWNER = "gw-1"
COM_QUERY = COMMAND.COM_QUERY
COM_PING = COMMAND.COM_PING

Operation = Callable[[SessionDB], object]

#: (name, operation, round trips on PostgreSQL, on MariaDB). ``None`` on MariaDB: see below.
OPERATIONS: list[tuple[str, Operation, int, int | None]] = [
    ("request", lambda db: db.request_handoff("idle", "telegram"), 1, 3),
    ("retry", lambda db: db.retry_handoff("failed"), 1, 3),
    ("claim", lambda db: db.claim_handoff("pending"), 1, None),
    ("complete", lambda db: db.complete_handoff("running"), 1, 3),
    ("fail", lambda db: db.fail_handoff("running", "boom"), 1, 3),
    ("renew", lambda db: db.renew_handoff_leases(["running"]), 1, 2),
    ("reclaim", lambda db: db.reclaim_running_handoffs("all"), 1, 4),
    ("batch claim", lambda db: db.claim_pending_handoffs(10), 1, 5),
    ("complete many", lambda db: db.complete_handoffs(["running"]), 1, 3),
    ("state", lambda db: db.get_handoff_state("running"), 1, 2),
    ("list pending", lambda db: db.list_pending_handoffs(), 1, 2),
]


def claim_round_trips(caps: Capabilities) -> int:
    """MariaDB returns the attempt from the audit INSERT; MySQL (no INSERT ... RETURNING)
    reads it back in the claiming transaction."""
    return 3 if caps.insert_returning else 4


def prepared(url: URL) -> SessionDB:
    empty_tables(url)
    db = SessionDB(url=url, owner=OWNER, lease_seconds=60.0)
    put(db, "idle", None)
    put(db, "failed", "failed")
    put(db, "running", "running")
    make_pending(db, "pending")
    return db


@pytest.mark.parametrize(
    ("name", "operation", "pg", "_mysql"), OPERATIONS, ids=[o[0] for o in OPERATIONS]
)
def test_round_trips_on_postgresql(
    migrated_servers: dict[str, URL], name: str, operation: Operation, pg: int, _mysql: int
) -> None:
    with prepared(migrated_servers["postgresql"]) as db, driver_wire() as wire:
        assert operation(db)
    assert wire.round_trips == {"postgresql": pg}, wire.sql()


@pytest.mark.parametrize(
    ("name", "operation", "_pg", "mysql"), OPERATIONS, ids=[o[0] for o in OPERATIONS]
)
def test_round_trips_on_mariadb(
    migrated_servers: dict[str, URL],
    name: str,
    operation: Operation,
    _pg: int,
    mysql: int | None,
) -> None:
    url = migrated_servers["mysql"]
    with prepared(url) as db:
        expected = mysql if mysql is not None else claim_round_trips(db._runner._caps)  # type: ignore[attr-defined]
        with driver_wire() as wire:
            assert operation(db)
    assert wire.round_trips == {"mysql": expected}, wire.sql()
    assert wire.commands[-1] == (COM_QUERY, "COMMIT"), wire.commands


def test_mariadb_replaces_an_idle_connection_the_server_killed_without_a_ping(
    migrated_servers: dict[str, URL],
) -> None:
    url = migrated_servers["mysql"]
    with prepared(url) as db:
        engine = db._runner._engine  # type: ignore[attr-defined]
        with engine.connect() as connection:
            victim = connection.execute(text("SELECT CONNECTION_ID()")).scalar_one()
        killer = make_engine(url)
        try:
            with killer.connect() as connection:
                connection.execute(text(f"KILL {int(victim)}"))
        finally:
            killer.dispose()
        # The server closed the pooled connection's socket: the checkout sees it and opens
        # another (whose setup is all that is sent besides the claim); nothing fails.
        with driver_wire() as wire:
            assert db.claim_handoff("pending") is True
        assert COM_PING not in [command for command, _ in wire.commands], wire.commands
        with engine.connect() as connection:
            assert connection.execute(text("SELECT CONNECTION_ID()")).scalar_one() != victim


@pytest.mark.parametrize(
    "left_open",
    ["SELECT count(*) FROM sessions", "UPDATE sessions SET title = 'left open' WHERE id = 'idle'"],
    ids=["read", "write"],
)
def test_mariadb_rolls_back_what_a_returned_connection_left_open(
    migrated_servers: dict[str, URL], left_open: str
) -> None:
    """A connection given back with a transaction open (no SQLAlchemy connection does that;
    raw DBAPI use can) is rolled back by the pool: no lock kept (not even the metadata lock of
    a transaction that only read, which the server's status does not report), nothing
    committed later by whoever gets the connection next."""
    url = migrated_servers["mysql"]
    with prepared(url) as db:
        raw = db._runner._engine.raw_connection()  # type: ignore[attr-defined]
        try:
            raw.cursor().execute(left_open)
        finally:
            raw.close()
        other = make_engine(url)
        try:
            with other.connect() as connection:
                # Waits for every lock on the table; fails after 5 s if one is still held.
                connection.execute(text("SET SESSION lock_wait_timeout = 5"))
                connection.execute(text("LOCK TABLES sessions WRITE"))
                connection.execute(text("UNLOCK TABLES"))
        finally:
            other.dispose()
        db.create_session("next", "cli")  # commits on the pool's connection, maybe that one
        assert db.get_session("idle")["title"] is None
