"""PostgreSQL: one round trip per transition, in autocommit, with the same semantics.

Each store operation sends exactly one statement and no BEGIN/COMMIT (seen at the driver:
one statement in autocommit, one round trip in libpq's trace), its audit rows are written by
that statement, a lost race writes nothing, and a request wakes LISTENing watchers from inside
the statement. A plan that would send a second statement in autocommit is refused loudly, not
run half outside a transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.aio import NativeAsyncSessionDB
from hermes_state.models import handoff_events
from hermes_state.plans import Plan, Step
from hermes_state.statements import HANDOFF_CHANNEL
from tests.conftest import empty_tables
from tests.support.stores import make_pending, put
from tests.support.wire import driver_wire

OWNER = "gw-1"


@pytest.fixture
def pg_url(migrated_servers: dict[str, URL]) -> URL:
    url = migrated_servers["postgresql"]  # skips when not configured
    empty_tables(url)
    return url


Sent = list[tuple[str, bool]]


def recorder(sent: Sent) -> Callable[..., None]:
    """A ``before_cursor_execute`` hook (for the native async store, on SQLAlchemy's
    connections) noting each statement and whether the driver connection is in autocommit."""

    def statement(conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        sent.append((sql, bool(conn.connection.dbapi_connection.autocommit)))

    return statement


def events(db: SessionDB) -> int:
    query = select(func.count()).select_from(handoff_events)
    return int(db._execute_write(lambda conn: conn.execute(query).scalar_one()))


OPERATIONS: list[tuple[str, Callable[[SessionDB], object]]] = [
    ("request", lambda db: db.request_handoff("idle", "telegram")),
    ("retry", lambda db: db.retry_handoff("failed")),
    ("claim", lambda db: db.claim_handoff("pending")),
    ("batch claim", lambda db: db.claim_pending_handoffs(10)),
    ("complete", lambda db: db.complete_handoff("running")),
    ("fail", lambda db: db.fail_handoff("running", "boom")),
    (
        "fail pending only",
        lambda db: db.fail_handoff("pending", "gave up", only_states=["pending"]),
    ),
    ("renew", lambda db: db.renew_handoff_leases(["running"])),
    (
        "claim given with turns",
        lambda db: db.claim_handoffs(["pending"], turn_holders={"pending": "h"}),
    ),
    ("claim next with turns", lambda db: db.claim_next_handoffs(10, turn_gateway="gw")),
    (
        "finish many, giving turns back",
        lambda db: db.finish_handoffs({"running": None}, release_turns={"running": "h"}),
    ),
    ("refresh turns", lambda db: db.refresh_session_turn_leases({"running": "h"})),
    ("release turns", lambda db: db.release_session_turn_leases({"running": "h"})),
    ("transcripts", lambda db: db.get_transcripts(["idle", "running"])),
    ("reclaim stale", lambda db: db.reclaim_stale_running_handoffs("stranded")),
    ("reclaim expired", lambda db: db.reclaim_expired_handoffs("expired")),
    ("reclaim all", lambda db: db.reclaim_running_handoffs("all")),
    ("create", lambda db: db.create_session("new", "cli")),
    ("append", lambda db: db.append_message("idle", "user", "hello")),
    ("list pending", lambda db: db.list_pending_handoffs()),
    ("has pending", lambda db: db.has_pending_handoffs()),
    ("state", lambda db: db.get_handoff_state("running")),
    ("messages", lambda db: db.get_messages("idle")),
    ("count messages", lambda db: db.count_messages("idle")),
    ("history", lambda db: db.handoff_history("running")),
]


@pytest.mark.parametrize(("name", "operation"), OPERATIONS, ids=[n for n, _ in OPERATIONS])
def test_every_operation_is_one_statement_without_a_transaction(
    pg_url: URL, name: str, operation: Callable[[SessionDB], object]
) -> None:
    with SessionDB(url=pg_url, owner=OWNER, lease_seconds=60.0) as db:
        put(db, "idle", None)
        put(db, "failed", "failed")
        put(db, "running", "running")
        make_pending(db, "pending")
        with driver_wire() as wire:
            operation(db)
    assert len(wire.statements) == 1, wire.sql()
    assert wire.statements[0].autocommit, f"not in autocommit: {wire.statements}"
    # No BEGIN, COMMIT, ping or reset either: the server answered exactly once.
    assert wire.round_trips == {"postgresql": 1}, wire.round_trips


def test_the_statement_records_its_event_and_a_lost_race_records_none(pg_url: URL) -> None:
    with (
        SessionDB(url=pg_url, owner=OWNER, lease_seconds=60.0) as winner,
        SessionDB(url=pg_url, owner="gw-2", lease_seconds=60.0) as loser,
    ):
        make_pending(winner, "s")
        before = events(winner)
        assert winner.claim_handoff("s") is True
        assert events(winner) == before + 1
        assert loser.claim_handoff("s") is False
        assert loser.complete_handoff("s") is False  # fenced: not its claim
        assert loser.request_handoff("s", "telegram") is False  # in flight
        assert events(winner) == before + 1
        history = winner.handoff_history("s")
        assert [(e["from_state"], e["to_state"], e["actor"], e["attempt"]) for e in history] == [
            (None, "pending", OWNER, 0),
            ("pending", "running", OWNER, 1),
        ]


def test_a_request_notifies_from_inside_its_statement(pg_url: URL) -> None:
    conninfo = pg_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with (
        psycopg.connect(conninfo, autocommit=True) as listener,
        SessionDB(url=pg_url) as db,
    ):
        listener.execute(f"LISTEN {HANDOFF_CHANNEL}")
        db.create_session("s", "cli")
        assert db.request_handoff("s", "telegram") is True
        assert db.request_handoff("s", "telegram") is False  # refused: no second wake-up
        received = [note.payload for note in listener.notifies(timeout=2.0, stop_after=2)]
    assert received == ["s"]


def _two_statements(_caps: Any) -> Any:
    yield Step(select(1))
    yield Step(select(2))
    return None


def test_a_plan_that_sends_two_statements_in_autocommit_is_refused(pg_url: URL) -> None:
    with SessionDB(url=pg_url) as db, pytest.raises(RuntimeError, match="second statement"):
        db._run(Plan(_two_statements, writes=True))


@pytest.mark.asyncio
async def test_the_native_async_store_sends_one_statement_too(pg_url: URL) -> None:
    store = NativeAsyncSessionDB(url=pg_url, owner=OWNER, lease_seconds=60.0)
    sent: Sent = []
    try:
        await store.create_session("s", "cli")
        await store.request_handoff("s", "telegram")
        event.listen(store._engine.sync_engine, "before_cursor_execute", recorder(sent))
        assert await store.claim_handoff("s") is True
        assert await store.complete_handoff("s") is True
    finally:
        await store.close()
    assert len(sent) == 2, sent
    assert all(autocommit for _sql, autocommit in sent), sent
