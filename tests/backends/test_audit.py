"""The handoff audit trail (``handoff_events``), on every backend.

Each transition writes its event in its own transaction: the trail is complete and in order
after a mixed run of operations, a refused transition writes nothing, and a transition whose
UPDATE fails after its event was inserted leaves neither the event nor the change behind.
Also: pruning old events, and ``retry_handoff``'s rules.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import HermesStateError, InvalidInputError, SessionDB
from hermes_state.errors import InvalidInputTypeError
from hermes_state.models import handoff_events
from tests.support.digest import database_digest, sync_url
from tests.support.stores import HandClock, put

T0 = 1_700_000_000.0
WAITER_ERROR = "nobody picked the handoff up in time"
DELIVERY_ERROR = "the platform rejected the message"
RECLAIM_ERROR = "the gateway died mid-delivery; run /handoff again"


@pytest.fixture
def clock() -> HandClock:
    return HandClock(T0)


@pytest.fixture
def open_store(
    new_any_store: Callable[..., SessionDB], clock: HandClock
) -> Callable[..., SessionDB]:
    """Stores on the test's database, all driven by the test's clock, closed at the end; of
    each kind: SessionDB, the native asyncio store and AsyncSessionDB."""
    return functools.partial(new_any_store, clock=clock)


def trail(db: SessionDB, session_id: str) -> list[tuple[Any, ...]]:
    return [
        (e["from_state"], e["to_state"], e["actor"], e["attempt"], e["detail"], e["at"])
        for e in db.handoff_history(session_id)
    ]


def event_count(url: URL) -> int:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(select(func.count()).select_from(handoff_events)).scalar_one()
            )
    finally:
        engine.dispose()


# -- the trail after a mixed sequence -----------------------------------------------------------


def test_the_trail_is_complete_and_ordered(
    open_store: Callable[..., SessionDB], clock: HandClock, backend_url: URL
) -> None:
    api = open_store()  # no owner: the actor is "api"
    gw1 = open_store(owner="gw-1", lease_seconds=30)
    gw2 = open_store(owner="gw-2", lease_seconds=30)
    assert api.actor == "api"
    assert gw1.actor == "gw-1"

    api.create_session("A", "cli")
    api.create_session("B", "cli")
    expected_a: list[tuple[Any, ...]] = []
    expected_b: list[tuple[Any, ...]] = []

    def step(
        done: bool, expected: list[tuple[Any, ...]] | None = None, event: tuple[Any, ...] = ()
    ) -> None:
        assert done
        if expected is not None:
            expected.append((*event, clock.now))
        clock.advance()

    step(
        api.request_handoff("A", "telegram"),
        expected_a,
        (None, "pending", "api", 0, "requested for telegram"),
    )
    step(gw1.claim_handoff("A"), expected_a, ("pending", "running", "gw-1", 1, None))
    # Renewing a lease is not a transition: no event.
    step(gw1.renew_handoff_leases(["A"]) == ["A"])
    step(gw1.complete_handoff("A"), expected_a, ("running", "completed", "gw-1", 1, None))
    # Session B's events interleave with A's in the table but never show in A's history.
    step(
        api.request_handoff("B", "slack"),
        expected_b,
        (None, "pending", "api", 0, "requested for slack"),
    )
    step(
        api.request_handoff("A", "discord"),
        expected_a,
        ("completed", "pending", "api", 1, "requested for discord"),
    )
    step(api.claim_handoff("A"), expected_a, ("pending", "running", "api", 2, None))
    step(
        api.fail_handoff("A", DELIVERY_ERROR),
        expected_a,
        ("running", "failed", "api", 2, DELIVERY_ERROR),
    )
    step(api.retry_handoff("A"), expected_a, ("failed", "pending", "api", 2, "retry for discord"))
    step(gw2.claim_handoff("A"), expected_a, ("pending", "running", "gw-2", 3, None))
    # gw-2 dies; once its lease has run out, gw-1 reclaims the row.
    clock.advance(100)
    assert gw1.reclaim_stale_running_handoffs(RECLAIM_ERROR) == ["A"]
    expected_a.append(("running", "failed", "gw-1", 3, RECLAIM_ERROR, clock.now))
    clock.advance()
    step(api.retry_handoff("A"), expected_a, ("failed", "pending", "api", 3, "retry for discord"))
    step(api.claim_handoff("A"), expected_a, ("pending", "running", "api", 4, None))
    step(api.complete_handoff("A"), expected_a, ("running", "completed", "api", 4, None))

    # Refused transitions: nothing recorded.
    before = database_digest(backend_url)
    assert api.claim_handoff("A") is False
    assert api.complete_handoff("A") is False
    assert api.retry_handoff("A") is False
    assert api.fail_handoff("A", WAITER_ERROR, only_states=("pending",)) is False
    assert gw1.reclaim_stale_running_handoffs(RECLAIM_ERROR) == []
    assert api.request_handoff("B", "slack") is False  # B is in flight
    assert api.request_handoff("nobody", "slack") is False
    assert database_digest(backend_url) == before

    # A waiter giving up on B, still pending: recorded with its error.
    step(
        api.fail_handoff("B", WAITER_ERROR, only_states=("pending",)),
        expected_b,
        ("pending", "failed", "api", 0, WAITER_ERROR),
    )

    assert trail(api, "A") == expected_a
    assert trail(api, "B") == expected_b
    history = api.handoff_history("A")
    assert [event["session_id"] for event in history] == ["A"] * len(expected_a)
    ids = [event["id"] for event in history]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert event_count(backend_url) == len(expected_a) + len(expected_b)
    assert api.handoff_history("nobody") == []
    assert api.get_handoff_state("A") == {
        "state": "completed",
        "platform": "discord",
        "error": None,
    }


def test_a_cli_store_records_its_actor(open_store: Callable[..., SessionDB]) -> None:
    db = open_store(actor="cli")
    db.create_session("s", "cli")
    assert db.request_handoff("s", "telegram")
    assert [event["actor"] for event in db.handoff_history("s")] == ["cli"]


def test_a_failure_records_the_truncated_error(open_store: Callable[..., SessionDB]) -> None:
    db = open_store()
    db.create_session("s", "cli")
    assert db.request_handoff("s", "telegram")
    assert db.fail_handoff("s", "x" * 2000)
    (_request, failure) = db.handoff_history("s")
    assert failure["detail"] == "x" * 500
    assert db.get_handoff_state("s")["error"] == failure["detail"]


def test_a_reclaim_records_one_event_per_row(
    open_store: Callable[..., SessionDB], clock: HandClock
) -> None:
    db = open_store()
    for session_id in ("r1", "r2", "p1"):
        db.create_session(session_id, "cli")
        assert db.request_handoff(session_id, "telegram")
    assert db.claim_handoff("r1")
    assert db.claim_handoff("r2")
    clock.advance(5)
    assert db.reclaim_running_handoffs(RECLAIM_ERROR) == ["r1", "r2"]
    for session_id in ("r1", "r2"):
        last = db.handoff_history(session_id)[-1]
        assert (last["from_state"], last["to_state"], last["detail"], last["at"]) == (
            "running",
            "failed",
            RECLAIM_ERROR,
            clock.now,
        )
    assert [event["to_state"] for event in db.handoff_history("p1")] == ["pending"]


# -- a transition rolled back after its event was inserted ------------------------------------


def _trigger_statements(dialect: str, state: str) -> tuple[list[str], list[str]]:
    """(create, drop) statements for a trigger that makes any UPDATE of a session into
    ``state`` fail: the audit row is inserted first, so it must be rolled back with it."""
    if dialect == "sqlite":
        create = [
            "CREATE TRIGGER hs_test_boom BEFORE UPDATE OF handoff_state ON sessions "
            f"WHEN NEW.handoff_state = '{state}' BEGIN SELECT RAISE(ABORT, 'boom'); END"
        ]
        return create, ["DROP TRIGGER IF EXISTS hs_test_boom"]
    if dialect == "postgresql":
        create = [
            "CREATE FUNCTION hs_test_boom() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'boom'; END $$",
            "CREATE TRIGGER hs_test_boom BEFORE UPDATE OF handoff_state ON sessions "
            f"FOR EACH ROW WHEN (NEW.handoff_state = '{state}') EXECUTE FUNCTION hs_test_boom()",
        ]
        drop = [
            "DROP TRIGGER IF EXISTS hs_test_boom ON sessions",
            "DROP FUNCTION IF EXISTS hs_test_boom()",
        ]
        return create, drop
    create = [
        "CREATE TRIGGER hs_test_boom BEFORE UPDATE ON sessions FOR EACH ROW BEGIN "
        f"IF NEW.handoff_state = '{state}' THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'; END IF; END"
    ]
    return create, ["DROP TRIGGER IF EXISTS hs_test_boom"]


@contextlib.contextmanager
def failing_updates_into(url: URL, state: str) -> Iterator[None]:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    create, drop = _trigger_statements(engine.dialect.name, state)
    try:
        with engine.begin() as connection:
            for statement in drop + create:
                connection.exec_driver_sql(statement)
        yield
    finally:
        with engine.begin() as connection:
            for statement in drop:
                connection.exec_driver_sql(statement)
        engine.dispose()


ROLLBACK_CASES = {
    "complete": ("completed", lambda db: db.complete_handoff("s1")),
    "fail": ("failed", lambda db: db.fail_handoff("s1", DELIVERY_ERROR)),
    "reclaim two rows": ("failed", lambda db: db.reclaim_running_handoffs(RECLAIM_ERROR)),
}


@pytest.mark.parametrize("case", list(ROLLBACK_CASES))
def test_a_rolled_back_transition_leaves_no_event(
    open_store: Callable[..., SessionDB], backend_url: URL, case: str
) -> None:
    state, transition = ROLLBACK_CASES[case]
    db = open_store()
    for session_id in ("s1", "s2"):
        db.create_session(session_id, "cli")
        assert db.request_handoff(session_id, "telegram")
        assert db.claim_handoff(session_id)
    before = database_digest(backend_url)
    events_before = event_count(backend_url)

    with failing_updates_into(backend_url, state):
        with pytest.raises(HermesStateError, match="boom"):
            transition(db)
        # Only the trigger is new: no event, no state change, nothing else written.
        assert event_count(backend_url) == events_before
        for session_id in ("s1", "s2"):
            assert db.get_handoff_state(session_id)["state"] == "running"
            assert [e["to_state"] for e in db.handoff_history(session_id)] == [
                "pending",
                "running",
            ]
    assert database_digest(backend_url) == before

    # The store is still usable, and the same transition now records its event.
    assert transition(db)
    assert db.get_handoff_state("s1")["state"] == state
    assert db.handoff_history("s1")[-1]["to_state"] == state
    assert event_count(backend_url) == events_before + (2 if case == "reclaim two rows" else 1)


# -- pruning ----------------------------------------------------------------------------------


def test_prune_deletes_only_events_older_than_the_cutoff(
    open_store: Callable[..., SessionDB], clock: HandClock, backend_url: URL
) -> None:
    db = open_store()
    db.create_session("s", "cli")
    assert db.request_handoff("s", "telegram")  # at T0
    clock.now = T0 + 1000
    assert db.claim_handoff("s")  # at T0 + 1000
    clock.now = T0 + 2000
    assert db.complete_handoff("s")  # at T0 + 2000
    state = db.get_handoff_state("s")

    clock.now = T0 + 3000
    assert db.prune_handoff_events(5000) == 0  # cutoff before every event
    assert [e["at"] for e in db.handoff_history("s")] == [T0, T0 + 1000, T0 + 2000]

    # The cutoff is T0 + 1000: strictly older events go, the one at the cutoff stays.
    assert db.prune_handoff_events(2000) == 1
    assert [e["at"] for e in db.handoff_history("s")] == [T0 + 1000, T0 + 2000]
    assert db.prune_handoff_events(2000) == 0

    assert db.prune_handoff_events(500) == 2
    assert db.handoff_history("s") == []
    assert event_count(backend_url) == 0
    # Only the trail goes: the session keeps its state.
    assert db.get_handoff_state("s") == state


@pytest.mark.parametrize(
    ("age", "error"),
    [
        (-1, InvalidInputError),
        (float("nan"), InvalidInputError),
        (float("inf"), InvalidInputError),
        ("10", InvalidInputTypeError),
        (None, InvalidInputTypeError),
    ],
)
def test_prune_refuses_bad_ages(
    open_store: Callable[..., SessionDB], backend_url: URL, age: Any, error: type[Exception]
) -> None:
    db = open_store()
    db.create_session("s", "cli")
    assert db.request_handoff("s", "telegram")
    before = database_digest(backend_url)
    with pytest.raises(error):
        db.prune_handoff_events(age)
    assert database_digest(backend_url) == before


# -- retry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [None, "pending", "running", "completed"])
def test_retry_only_from_failed(
    open_store: Callable[..., SessionDB], backend_url: URL, state: str | None
) -> None:
    db = open_store()
    put(db, "s", state, error=DELIVERY_ERROR)
    before = database_digest(backend_url)
    assert db.retry_handoff("s") is False
    assert db.retry_handoff("s", "discord") is False
    assert db.retry_handoff("nobody") is False
    assert database_digest(backend_url) == before


def test_retry_keeps_the_platform_unless_given(
    open_store: Callable[..., SessionDB], clock: HandClock
) -> None:
    db = open_store()
    put(db, "s", "failed", error=DELIVERY_ERROR)
    clock.advance(10)
    assert db.retry_handoff("s") is True
    assert db.get_handoff_state("s") == {"state": "pending", "platform": "telegram", "error": None}
    pending = db.list_pending_handoffs()
    assert [row["id"] for row in pending] == ["s"]
    # A retry is a new request: new request time, the last attempt's traces cleared.
    assert pending[0]["handoff_requested_at"] == clock.now
    assert pending[0]["handoff_claimed_at"] is None
    assert pending[0]["handoff_finished_at"] is None
    assert pending[0]["handoff_owner"] is None
    assert pending[0]["handoff_lease_expires_at"] is None

    assert db.claim_handoff("s")
    assert db.fail_handoff("s", DELIVERY_ERROR)
    assert db.retry_handoff("s", "discord") is True
    assert db.get_handoff_state("s") == {"state": "pending", "platform": "discord", "error": None}
    details = [e["detail"] for e in db.handoff_history("s") if e["from_state"] == "failed"]
    assert details == ["retry for telegram", "retry for discord"]


@pytest.mark.parametrize(
    ("platform", "error"),
    [
        ("", InvalidInputError),
        ("   ", InvalidInputError),
        ("tele\ngram", InvalidInputError),
        ("p" * 65, InvalidInputError),
        (42, InvalidInputTypeError),
    ],
)
def test_retry_validates_a_given_platform(
    open_store: Callable[..., SessionDB], backend_url: URL, platform: Any, error: type[Exception]
) -> None:
    db = open_store()
    put(db, "s", "failed", error=DELIVERY_ERROR)
    before = database_digest(backend_url)
    with pytest.raises(error):
        db.retry_handoff("s", platform)
    assert database_digest(backend_url) == before
    assert db.get_handoff_state("s")["state"] == "failed"


def test_a_longest_platform_is_accepted_on_retry(open_store: Callable[..., SessionDB]) -> None:
    db = open_store()
    put(db, "s", "failed", error=DELIVERY_ERROR)
    assert db.retry_handoff("s", "p" * 64) is True
    assert db.get_handoff_state("s")["platform"] == "p" * 64
    assert db.handoff_history("s")[-1]["detail"] == "retry for " + "p" * 64


def test_a_retry_announces_like_a_request(backend_url: URL, clock: HandClock) -> None:
    """A retried handoff is visible to the probe a watcher polls."""
    with SessionDB(url=backend_url, clock=clock) as db:
        put(db, "s", "failed", error=DELIVERY_ERROR)
        assert db.has_pending_handoffs() is False
        assert db.retry_handoff("s") is True
        assert db.has_pending_handoffs() is True
