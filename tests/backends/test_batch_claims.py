"""Batch claims: ``claim_pending_handoffs(limit, *, platform=None)`` on every store and backend.

Claimed rows come back as claimed (running, owner, lease, attempt), oldest ``started_at``
first; each has exactly one ``pending -> running`` event; a platform filter and the limit are
honoured. Under contention, gateway processes with their own owners drain one backlog in
batches and every row is claimed exactly once: by identity (the row's owner and attempt are
the winner's, and the audit trail names the winner once per row), not only by counting.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import URL

from hermes_state import AsyncSessionDB, InvalidInputError, InvalidInputTypeError, SessionDB
from hermes_state.aio import NativeAsyncSessionDB
from hermes_state.engine import make_engine
from hermes_state.models import handoff_events
from hermes_state.plans import MAX_BATCH
from tests.support.processes import FORKSERVER
from tests.support.stores import HandClock, handoff_row, make_pending, put

LEASE = 120.0
PROCESSES = 4
ROWS = 300
BATCH = 7  # not a divisor of ROWS, so the last batches come back short
WAIT = 120.0  # seconds; a safety net against a hung claimer, never a synchronisation tool


def claim_events(db: SessionDB) -> list[dict[str, Any]]:
    e = handoff_events.c
    query = (
        select(e.session_id, e.actor, e.attempt, e.from_state)
        .where(e.to_state == "running")
        .order_by(e.id)
    )
    return db._execute_write(lambda conn: [dict(row) for row in conn.execute(query).mappings()])


def test_claims_the_oldest_rows_as_claimed(new_store: Callable[..., SessionDB]) -> None:
    clock = HandClock(1000.0)
    db = new_store(owner="gw-a", lease_seconds=LEASE, clock=clock)
    # Started in the reverse of their names' order: the oldest session is claimed first.
    make_pending(db, "s5", "s4", "s3", "s2", "s1", started_at=10.0)
    clock.advance(5)

    claimed = db.claim_pending_handoffs(3)

    assert [row["id"] for row in claimed] == ["s5", "s4", "s3"]
    for row in claimed:
        assert row["handoff_state"] == "running"
        assert row["handoff_owner"] == "gw-a"
        assert row["handoff_attempt"] == 1
        assert row["handoff_claimed_at"] == 1005.0
        assert row["handoff_lease_expires_at"] == 1005.0 + LEASE
        assert row["handoff_platform"] == "telegram"
        assert row == {**row, "source": "cli"}  # whole rows, not only the handoff columns
        assert handoff_row(db, row["id"])["state"] == "running"
    assert [row["id"] for row in db.list_pending_handoffs()] == ["s2", "s1"]
    events = claim_events(db)
    assert sorted((e["session_id"], e["actor"], e["attempt"], e["from_state"]) for e in events) == [
        (session_id, "gw-a", 1, "pending") for session_id in ("s3", "s4", "s5")
    ]


def test_a_claimed_batch_is_fenced_like_single_claims(
    new_store: Callable[..., SessionDB],
) -> None:
    gateway = new_store(owner="gw-a", lease_seconds=LEASE)
    other = new_store(owner="gw-b", lease_seconds=LEASE)
    make_pending(gateway, "a", "b")
    claimed = gateway.claim_pending_handoffs(10)
    assert [row["id"] for row in claimed] == ["a", "b"]

    assert other.complete_handoff("a") is False  # not its claim
    assert gateway.complete_handoff("a") is True
    assert gateway.fail_handoff("b", "no route") is True
    assert gateway.get_handoff_state("b") == {
        "state": "failed",
        "platform": "telegram",
        "error": "no route",
    }


def test_nothing_pending_claims_nothing_and_records_nothing(
    new_store: Callable[..., SessionDB],
) -> None:
    db = new_store(owner="gw-a")
    put(db, "done", "completed")
    put(db, "busy", "running")
    assert db.claim_pending_handoffs(5) == []
    assert [e["session_id"] for e in claim_events(db)] == ["done", "busy"]  # put()'s claims


def test_a_platform_filter_claims_only_that_platform(new_store: Callable[..., SessionDB]) -> None:
    db = new_store()
    make_pending(db, "t1", started_at=1.0)
    make_pending(db, "d1", platform="discord", started_at=2.0)
    make_pending(db, "t2", started_at=3.0)

    claimed = db.claim_pending_handoffs(10, platform="discord")

    assert [row["id"] for row in claimed] == ["d1"]
    assert claimed[0]["handoff_owner"] is None  # an ownerless store stamps no owner
    assert [row["id"] for row in db.list_pending_handoffs()] == ["t1", "t2"]
    assert [row["id"] for row in db.claim_pending_handoffs(10)] == ["t1", "t2"]


@pytest.mark.parametrize(
    ("limit", "error"),
    [
        (0, InvalidInputError),
        (-3, InvalidInputError),
        (MAX_BATCH + 1, InvalidInputError),
        (99999999999999999999, InvalidInputError),
        (2.5, InvalidInputTypeError),
        ("10", InvalidInputTypeError),
        (True, InvalidInputTypeError),
        (None, InvalidInputTypeError),
    ],
)
def test_a_bad_limit_is_refused_before_anything_is_claimed(
    store: SessionDB, limit: object, error: type[Exception]
) -> None:
    make_pending(store, "x")
    with pytest.raises(error, match="limit"):
        store.claim_pending_handoffs(limit)  # type: ignore[arg-type]
    assert [row["id"] for row in store.list_pending_handoffs()] == ["x"]


def test_a_bad_platform_is_refused(store: SessionDB) -> None:
    make_pending(store, "x")
    with pytest.raises(InvalidInputError, match="platform"):
        store.claim_pending_handoffs(1, platform="")
    assert store.get_handoff_state("x")["state"] == "pending"


@pytest.mark.asyncio
async def test_the_async_stores_claim_batches_too(backend_url: URL) -> None:
    with SessionDB(url=backend_url) as db:
        make_pending(db, "n1", "n2", "n3", "t1", started_at=1.0)
    native = NativeAsyncSessionDB(url=backend_url, owner="native", lease_seconds=LEASE)
    threaded = AsyncSessionDB(SessionDB(url=backend_url, owner="threaded"))
    try:
        first = await native.claim_pending_handoffs(3)
        second = await threaded.claim_pending_handoffs(3)
    finally:
        await native.close()
        await threaded.close()
    assert [(row["id"], row["handoff_owner"]) for row in first] == [
        ("n1", "native"),
        ("n2", "native"),
        ("n3", "native"),
    ]
    assert [(row["id"], row["handoff_owner"]) for row in second] == [("t1", "threaded")]


# -- contention: gateway processes draining one backlog ---------------------------------------


def _drain(url: str, owner: str, start: Any) -> list[tuple[str, str, int]]:
    """Runs in a spawned child: a gateway's store claims batches until nothing is left."""
    won: list[tuple[str, str, int]] = []
    with SessionDB(url=url, owner=owner, lease_seconds=LEASE) as db:
        db.has_pending_handoffs()  # connect and check the schema before the race
        start.wait(WAIT)
        while batch := db.claim_pending_handoffs(BATCH):
            won.extend((row["id"], row["handoff_owner"], row["handoff_attempt"]) for row in batch)
    return won


def test_gateway_processes_claim_each_row_exactly_once(store: SessionDB, backend_url: URL) -> None:
    ids = [f"race-{index:04d}" for index in range(ROWS)]
    make_pending(store, *ids, started_at=0.0)
    owners = [f"gw-{worker}" for worker in range(PROCESSES)]
    context = FORKSERVER
    with context.Manager() as manager, ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        start = manager.Barrier(PROCESSES)
        plain_url = backend_url.render_as_string(hide_password=False)
        futures = [pool.submit(_drain, plain_url, owner, start) for owner in owners]
        claims = [claim for future in futures for claim in future.result(timeout=WAIT)]

    counts = Counter(session_id for session_id, _, _ in claims)
    assert sorted(counts) == ids, "some rows were never claimed"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    assert all(owner_seen in owners and attempt == 1 for _, owner_seen, attempt in claims)
    # By identity: the row, and the audit trail, name the process that reported the claim.
    winner = {session_id: owner for session_id, owner, _ in claims}
    for session_id in ids:
        row = handoff_row(store, session_id)
        assert (row["state"], row["owner"], row["attempt"]) == ("running", winner[session_id], 1)
    events = claim_events(store)
    assert sorted((e["session_id"], e["actor"], e["attempt"]) for e in events) == sorted(
        (session_id, owner, 1) for session_id, owner in winner.items()
    )
    assert store.has_pending_handoffs() is False


# A lock wait on the server, seen from another connection: PostgreSQL's ungranted locks in
# this database, InnoDB's lock waits (MariaDB).
_LOCK_WAITS = {
    "postgresql": "SELECT count(*) FROM pg_locks WHERE NOT granted AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())",
    "mysql": "SELECT count(*) FROM information_schema.INNODB_LOCK_WAITS",
}


def test_a_batch_claim_never_waits_for_a_row_it_does_not_take(
    store: SessionDB, backend_url: URL
) -> None:
    """Another transaction holds one pending row among many: the batch claim skips it and
    waits for nothing. (On MariaDB a locking read locks every row it scans: on a small table
    the optimizer scanned the pending rows for the claim's ``id IN (...)`` list, so the claim
    queued behind rows it never picked, and two claimers deadlocked on each other's rows.)"""
    backend = backend_url.get_backend_name()
    if backend == "sqlite":
        pytest.skip("SQLite has no row locks: its writers queue for the whole database")
    ids = [f"many-{index:04d}" for index in range(ROWS)]
    engine = make_engine(backend_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO sessions (id, source, started_at, handoff_state,"
                    " handoff_platform, handoff_requested_at)"
                    " VALUES (:id, 'cli', :at, 'pending', 'telegram', :at)"
                ),
                [{"id": session_id, "at": float(index)} for index, session_id in enumerate(ids)],
            )
        with engine.connect() as connection:
            analyse = "ANALYZE TABLE sessions" if backend == "mysql" else "ANALYZE sessions"
            connection.execute(text(analyse))
            connection.commit()
        held = ids[BATCH * 3]  # among the rows the claim would otherwise take
        claimed: list[list[dict[str, Any]]] = []
        with engine.connect() as holder, engine.connect() as watcher:
            holder.execute(text("SELECT id FROM sessions WHERE id = :id FOR UPDATE"), {"id": held})
            claimer = threading.Thread(
                target=lambda: claimed.append(store.claim_pending_handoffs(100))
            )
            claimer.start()
            waited = 0
            deadline = time.monotonic() + WAIT
            while claimer.is_alive() and not waited and time.monotonic() < deadline:
                waited = watcher.execute(text(_LOCK_WAITS[backend])).scalar_one()
                watcher.rollback()
                time.sleep(0.01)
            holder.rollback()  # let a claim that did wait finish
            claimer.join(WAIT)
    finally:
        engine.dispose()
    assert not waited, "the batch claim waited for a row another transaction held"
    taken = [row["id"] for row in claimed[0]]
    assert held not in taken
    assert taken == [session_id for session_id in ids if session_id != held][:100]


# -- finishing many claims at once ------------------------------------------------------------


def test_complete_many_each_fenced_by_its_own_claim(new_store: Callable[..., SessionDB]) -> None:
    clock = HandClock(1000.0)
    mine = new_store(owner="gw-a", lease_seconds=LEASE, clock=clock)
    theirs = new_store(owner="gw-b", lease_seconds=LEASE, clock=clock)
    # The same gateway name in another process (or this gateway's next life): its own ledger.
    again = new_store(owner="gw-a", lease_seconds=LEASE, clock=clock)
    make_pending(mine, "ok-1", "ok-2", "rescued", "reclaimed", "waiting", started_at=1.0)
    claimed = [r["id"] for r in mine.claim_pending_handoffs(4)]
    assert claimed == ["ok-1", "ok-2", "rescued", "reclaimed"]
    # Every lease expires and another gateway reclaims the rows. Then "rescued" is retried and
    # claimed again under the same owner name: a newer attempt our stale claim must not finish;
    # "reclaimed" is retried and claimed by gw-b.
    clock.advance(LEASE + 1)
    assert theirs.reclaim_expired_handoffs("expired") == sorted(claimed)
    for session_id in claimed:
        assert theirs.retry_handoff(session_id) is True
    assert again.claim_handoff("rescued") is True
    assert theirs.claim_handoff("reclaimed") is True
    assert [r["id"] for r in mine.claim_pending_handoffs(2)] == ["ok-1", "ok-2"]
    before = len(mine.handoff_history("ok-1"))

    done = mine.complete_handoffs(["ok-1", "rescued", "reclaimed", "ok-2", "waiting", "unknown"])

    assert done == {
        "ok-1": True,
        "rescued": False,  # gw-a's newer attempt, not the one this store claimed
        "reclaimed": False,  # gw-b's claim
        "ok-2": True,
        "waiting": False,  # pending, never claimed
        "unknown": False,
    }
    assert handoff_row(mine, "rescued") == {**handoff_row(mine, "rescued"), "state": "running"}
    assert (handoff_row(mine, "rescued")["owner"], handoff_row(mine, "rescued")["attempt"]) == (
        "gw-a",
        2,
    )
    assert handoff_row(mine, "reclaimed")["owner"] == "gw-b"
    assert mine.get_handoff_state("waiting")["state"] == "pending"
    history = mine.handoff_history("ok-1")
    assert len(history) == before + 1
    assert (history[-1]["from_state"], history[-1]["to_state"], history[-1]["actor"]) == (
        "running",
        "completed",
        "gw-a",
    )
    assert history[-1]["attempt"] == 2
    assert mine.complete_handoffs(["ok-1"]) == {"ok-1": False}  # a finished claim is over


def test_fail_many_stores_each_error(new_store: Callable[..., SessionDB]) -> None:
    db = new_store(owner="gw-a", lease_seconds=LEASE)
    make_pending(db, "a", "b", "c", started_at=1.0)
    db.claim_pending_handoffs(2)

    done = db.fail_handoffs({"a": "403 Forbidden", "b": ValueError("x" * 600), "c": "pending"})

    assert done == {"a": True, "b": True, "c": False}
    assert db.get_handoff_state("a")["error"] == "403 Forbidden"
    assert db.get_handoff_state("b")["error"] == "x" * 500
    assert db.get_handoff_state("c") == {"state": "pending", "platform": "telegram", "error": None}
    details = [db.handoff_history(i)[-1]["detail"] for i in ("a", "b")]
    assert details == ["403 Forbidden", "x" * 500]


def test_an_ownerless_store_finishes_any_running_row(new_store: Callable[..., SessionDB]) -> None:
    gateway = new_store(owner="gw-a")
    operator = new_store()
    make_pending(gateway, "a", "b", started_at=1.0)
    gateway.claim_pending_handoffs(2)
    assert operator.complete_handoffs(["a", "b"]) == {"a": True, "b": True}
    assert operator.complete_handoffs([]) == {}


def test_bad_batches_are_refused_before_anything_changes(store: SessionDB) -> None:
    make_pending(store, "a")
    store.claim_handoff("a")
    with pytest.raises(InvalidInputTypeError):
        store.complete_handoffs("a")  # a string is not a list of ids
    with pytest.raises(InvalidInputTypeError):
        store.fail_handoffs(["a"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.complete_handoffs(["a", ""])
    assert store.get_handoff_state("a")["state"] == "running"


@pytest.mark.asyncio
async def test_the_async_stores_finish_batches_too(backend_url: URL) -> None:
    native = NativeAsyncSessionDB(url=backend_url, owner="native", lease_seconds=LEASE)
    try:
        for session_id in ("a", "b"):
            await native.create_session(session_id, "cli")
            assert await native.request_handoff(session_id, "telegram")
        assert len(await native.claim_pending_handoffs(5)) == 2
        assert await native.complete_handoffs(["a"]) == {"a": True}
        assert await native.fail_handoffs({"b": "boom", "a": "late"}) == {"b": True, "a": False}
    finally:
        await native.close()
