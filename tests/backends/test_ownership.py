"""Several gateways on one database: owners, leases, fencing and reclaim, at the store level.

The behaviour tests run on every configured backend (the configuration checks, which never
reach a database, on SQLite only). Each gateway is its own ``SessionDB`` on the same database,
with its own ``owner``; all of them share one hand-driven clock, so a lease expires because the
test moved the clock, never because the test waited. Columns the compatible surface does not
show (owner, lease, attempt) are read straight from the ``sessions`` table.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from gateway.run import RECLAIM_MESSAGE
from hermes_state import InvalidInputError, InvalidInputTypeError, SessionDB
from tests.support.digest import database_digest
from tests.support.stores import HandClock, handoff_row, make_pending

START = 1_700_000_000.0  # the shared clock's first reading
SHORT = 10.0  # a lease that the tests let expire
LONG = 1_000.0  # a lease that stays live for the whole test
LATER = 100.0  # how far the clock moves to expire SHORT leases but not LONG ones

StoreFactory = Callable[..., SessionDB]


@pytest.fixture
def clock() -> HandClock:
    return HandClock(START)


@pytest.fixture
def open_store(new_any_store: StoreFactory, clock: HandClock) -> StoreFactory:
    """Opens gateways (stores with an owner) and operators (without) on the test's database,
    of each kind: SessionDB, the native asyncio store and AsyncSessionDB."""

    def factory(
        owner: str | None = None, lease_seconds: float | None = None, **options: Any
    ) -> SessionDB:
        return new_any_store(owner=owner, lease_seconds=lease_seconds, clock=clock, **options)

    return factory


@pytest.fixture
def admin(open_store: StoreFactory) -> SessionDB:
    """An ownerless store for setting rows up (it acts as a single gateway would)."""
    return open_store()


def claimed_by(db: SessionDB, *session_ids: str, setup: SessionDB) -> None:
    make_pending(setup, *session_ids)
    for session_id in session_ids:
        assert db.claim_handoff(session_id) is True


def last_event(db: SessionDB, session_id: str) -> dict[str, Any]:
    history = db.handoff_history(session_id)
    assert history, f"no event recorded for {session_id}"
    return history[-1]


# -- claims ----------------------------------------------------------------------------------


def test_a_claim_stamps_owner_lease_and_a_new_attempt(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    make_pending(admin, "s1")
    assert handoff_row(admin, "s1")["attempt"] == 0
    gw_a = open_store("gw-a", 30)
    gw_b = open_store("gw-b", 45)

    assert gw_a.claim_handoff("s1") is True
    assert handoff_row(admin, "s1") == {
        "state": "running",
        "owner": "gw-a",
        "lease": START + 30,
        "attempt": 1,
        "error": None,
    }
    event = last_event(admin, "s1")
    assert (event["from_state"], event["to_state"]) == ("pending", "running")
    assert (event["actor"], event["attempt"]) == ("gw-a", 1)

    # A lost race changes nothing: not the owner, not the lease, not the attempt.
    assert gw_b.claim_handoff("s1") is False
    assert handoff_row(admin, "s1")["owner"] == "gw-a"
    assert handoff_row(admin, "s1")["attempt"] == 1

    assert gw_a.complete_handoff("s1") is True
    finished = handoff_row(admin, "s1")
    assert (finished["state"], finished["lease"], finished["attempt"]) == ("completed", None, 1)

    # A new request clears the previous claim; the next claim is the next attempt.
    clock.advance(5)
    assert admin.request_handoff("s1", "discord") is True
    pending = handoff_row(admin, "s1")
    assert (pending["state"], pending["owner"], pending["lease"]) == ("pending", None, None)
    assert gw_b.claim_handoff("s1") is True
    assert handoff_row(admin, "s1") == {
        "state": "running",
        "owner": "gw-b",
        "lease": START + 5 + 45,
        "attempt": 2,
        "error": None,
    }

    # An ownerless store claims without owner or lease, but still counts the attempt.
    assert gw_b.fail_handoff("s1", "no route") is True
    assert admin.request_handoff("s1", "slack") is True
    assert admin.claim_handoff("s1") is True
    row = handoff_row(admin, "s1")
    assert (row["owner"], row["lease"], row["attempt"]) == (None, None, 3)


def test_an_owner_without_lease_seconds_stamps_its_claims_without_a_lease(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    gw_a = open_store("gw-a")
    assert (gw_a.owner, gw_a.lease_seconds, gw_a.actor) == ("gw-a", None, "gw-a")
    claimed_by(gw_a, "s1", setup=admin)
    assert handoff_row(admin, "s1") == {
        "state": "running",
        "owner": "gw-a",
        "lease": None,
        "attempt": 1,
        "error": None,
    }

    assert gw_a.renew_handoff_leases(["s1"]) == []  # nothing to renew: there is no lease
    assert handoff_row(admin, "s1")["lease"] is None

    # Without a lease the row never expires ...
    clock.advance(10 * LONG)
    gw_b = open_store("gw-b", 30)
    assert gw_b.reclaim_expired_handoffs(RECLAIM_MESSAGE) == []
    assert handoff_row(admin, "s1")["state"] == "running"
    # ... and another owner cannot finish it ...
    assert gw_b.complete_handoff("s1") is False
    assert gw_b.fail_handoff("s1", "not mine") is False
    assert handoff_row(admin, "s1")["state"] == "running"
    # ... but a startup reclaim takes it: nothing proves its gateway is alive.
    assert gw_b.reclaim_stale_running_handoffs(RECLAIM_MESSAGE) == ["s1"]
    assert gw_a.complete_handoff("s1") is False
    assert handoff_row(admin, "s1")["state"] == "failed"


# -- lease renewal ---------------------------------------------------------------------------


def test_renewal_extends_only_the_leases_this_owner_still_holds(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    gw_a = open_store("gw-a", 30)
    gw_b = open_store("gw-b", 30)
    claimed_by(gw_a, "x", "y", setup=admin)
    claimed_by(gw_b, "z", setup=admin)
    make_pending(admin, "waiting")

    clock.advance(10)
    renewed = gw_a.renew_handoff_leases(["x", "y", "z", "waiting", "unknown", "x"])
    assert renewed == ["x", "y"]
    assert handoff_row(admin, "x")["lease"] == START + 40
    assert handoff_row(admin, "y")["lease"] == START + 40
    assert handoff_row(admin, "z")["lease"] == START + 30  # another owner's lease: untouched
    assert handoff_row(admin, "z")["owner"] == "gw-b"
    assert handoff_row(admin, "waiting")["state"] == "pending"
    assert handoff_row(admin, "waiting")["lease"] is None

    # Renewing to the same expiry still reports the rows held (no "0 rows changed" surprise).
    assert gw_a.renew_handoff_leases(["x", "y"]) == ["x", "y"]

    # A finished row is no longer held.
    assert gw_a.complete_handoff("y") is True
    clock.advance(10)
    assert gw_a.renew_handoff_leases(["x", "y"]) == ["x"]
    assert handoff_row(admin, "x")["lease"] == START + 50
    assert handoff_row(admin, "y") == {
        "state": "completed",
        "owner": "gw-a",
        "lease": None,
        "attempt": 1,
        "error": None,
    }

    # Once rescued by another gateway, a row is no longer held either.
    clock.advance(LATER)
    assert gw_b.reclaim_expired_handoffs(RECLAIM_MESSAGE) == ["x", "z"]
    assert gw_a.renew_handoff_leases(["x"]) == []
    assert handoff_row(admin, "x")["state"] == "failed"
    assert handoff_row(admin, "x")["lease"] is None

    assert gw_a.renew_handoff_leases([]) == []


def test_stores_without_a_lease_renew_nothing(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    claimed_by(admin, "s1", setup=admin)
    unleased = open_store("gw-a")
    claimed_by(unleased, "s2", setup=admin)
    clock.advance(10)
    assert admin.renew_handoff_leases(["s1", "s2"]) == []
    assert unleased.renew_handoff_leases(["s1", "s2"]) == []
    assert handoff_row(admin, "s1")["lease"] is None
    assert handoff_row(admin, "s2")["lease"] is None


# -- reclaim: which running rows each store may fail -------------------------------------------

RUNNING = ["expired-d", "live-b", "no-lease-c", "own-expired", "own-live", "unleased"]
NOT_RUNNING = {"pending": "pending", "completed": "completed", "failed": "failed", "never": None}


def populate(open_store: StoreFactory, admin: SessionDB, clock: HandClock) -> None:
    """Six running rows in every situation a reclaim must tell apart, and rows not running.

    Claims happen at START; the clock then moves LATER, so SHORT leases have expired and LONG
    ones are live. gw-a's claims come from an earlier store (its "previous life").
    """
    claimed_by(admin, "unleased", setup=admin)
    claimed_by(open_store("gw-c"), "no-lease-c", setup=admin)
    claimed_by(open_store("gw-d", SHORT), "expired-d", setup=admin)
    claimed_by(open_store("gw-b", LONG), "live-b", setup=admin)
    previous_life = open_store("gw-a", SHORT)
    claimed_by(previous_life, "own-expired", setup=admin)
    claimed_by(open_store("gw-a", LONG), "own-live", setup=admin)

    make_pending(admin, "pending", "completed", "failed")
    assert admin.claim_handoff("completed") is True
    assert admin.complete_handoff("completed") is True
    assert admin.fail_handoff("failed", "earlier failure") is True
    admin.create_session("never", "cli")
    clock.advance(LATER)


# (reclaimer's owner, scope) -> the rows that scope fails
CASES = {
    ("gw-a", "stale"): ["expired-d", "no-lease-c", "own-expired", "own-live", "unleased"],
    ("gw-b", "stale"): ["expired-d", "live-b", "no-lease-c", "own-expired", "unleased"],
    (None, "stale"): ["expired-d", "no-lease-c", "own-expired", "unleased"],
    ("gw-a", "expired"): ["expired-d", "own-expired"],
    (None, "expired"): ["expired-d", "own-expired"],
    ("gw-a", "all"): RUNNING,
    (None, "all"): RUNNING,
}

RECLAIMS = {
    "stale": SessionDB.reclaim_stale_running_handoffs,
    "expired": SessionDB.reclaim_expired_handoffs,
    "all": SessionDB.reclaim_running_handoffs,
}


def expected_reason(session_id: str, reclaimer: str | None) -> str:
    if session_id in ("unleased", "no-lease-c"):
        return "no lease"
    if session_id in ("expired-d", "own-expired"):
        return "lease expired"
    holder = {"own-live": "gw-a", "live-b": "gw-b"}[session_id]
    return "previous life" if holder == reclaimer else "--all"


@pytest.mark.parametrize(
    ("owner", "scope"), list(CASES), ids=[f"{o or 'ownerless'}-{s}" for o, s in CASES]
)
def test_a_reclaim_fails_exactly_what_its_preview_lists(
    open_store: StoreFactory,
    admin: SessionDB,
    clock: HandClock,
    backend_url: URL,
    owner: str | None,
    scope: str,
) -> None:
    populate(open_store, admin, clock)
    reclaimer = open_store(owner, 30 if owner else None)
    expected = CASES[(owner, scope)]
    everything = RUNNING + list(NOT_RUNNING)
    rows_before = {sid: handoff_row(admin, sid) for sid in everything}
    events_before = {sid: len(admin.handoff_history(sid)) for sid in everything}

    before = database_digest(backend_url)
    preview = reclaimer.preview_reclaim(scope)
    assert database_digest(backend_url) == before, "a preview wrote to the database"
    assert [row["id"] for row in preview] == expected
    for row in preview:
        assert expected_reason(row["id"], owner) in row["reason"], row
        assert row["owner"] == rows_before[row["id"]]["owner"]
        assert row["lease_expires_at"] == rows_before[row["id"]]["lease"]
        assert row["attempt"] == 1

    reclaim = RECLAIMS[scope]
    assert reclaim(reclaimer, RECLAIM_MESSAGE) == expected

    for session_id in everything:
        row = handoff_row(admin, session_id)
        history = admin.handoff_history(session_id)
        if session_id in expected:
            assert row["state"] == "failed"
            assert row["error"] == RECLAIM_MESSAGE
            assert "/handoff" in row["error"]
            assert row["lease"] is None
            assert len(history) == events_before[session_id] + 1
            event = history[-1]
            assert (event["from_state"], event["to_state"]) == ("running", "failed")
            assert event["actor"] == reclaimer.actor == (owner or "api")
            assert event["attempt"] == 1
            assert "/handoff" in event["detail"]
        else:
            assert row == rows_before[session_id], f"{session_id} was touched"
            assert len(history) == events_before[session_id], f"{session_id} got an event"

    # Nothing left in scope: a second reclaim and its preview find nothing.
    assert reclaimer.preview_reclaim(scope) == []
    assert reclaim(reclaimer, RECLAIM_MESSAGE) == []


def test_stats_count_states_leases_per_owner_and_recent_failures(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock, backend_url: URL
) -> None:
    populate(open_store, admin, clock)
    before = database_digest(backend_url)
    stats = admin.handoff_stats()
    assert database_digest(backend_url) == before, "stats wrote to the database"
    assert stats["counts"] == {"pending": 1, "running": 6, "completed": 1, "failed": 1}
    assert stats["oldest_pending_age_seconds"] == LATER
    by_owner = sorted(stats["running_by_owner"], key=lambda row: row["owner"] or "")
    assert by_owner == [
        {"owner": None, "running": 1, "live_leases": 0, "expired_leases": 0, "no_lease": 1},
        {"owner": "gw-a", "running": 2, "live_leases": 1, "expired_leases": 1, "no_lease": 0},
        {"owner": "gw-b", "running": 1, "live_leases": 1, "expired_leases": 0, "no_lease": 0},
        {"owner": "gw-c", "running": 1, "live_leases": 0, "expired_leases": 0, "no_lease": 1},
        {"owner": "gw-d", "running": 1, "live_leases": 0, "expired_leases": 1, "no_lease": 0},
    ]
    assert stats["failures_last_hour"] == {
        "count": 1,
        "top_errors": [{"error": "earlier failure", "count": 1}],
    }

    # A reclaim moves the expired rows to the failures; an hour later none is recent.
    assert admin.reclaim_expired_handoffs(RECLAIM_MESSAGE) == ["expired-d", "own-expired"]
    stats = admin.handoff_stats()
    assert stats["counts"] == {"pending": 1, "running": 4, "completed": 1, "failed": 3}
    assert stats["failures_last_hour"] == {
        "count": 3,
        "top_errors": [
            {"error": RECLAIM_MESSAGE, "count": 2},
            {"error": "earlier failure", "count": 1},
        ],
    }
    clock.advance(3 * 3600)
    assert admin.handoff_stats()["failures_last_hour"] == {"count": 0, "top_errors": []}


def test_a_lease_counts_as_live_until_the_clock_passes_it(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    claimed_by(open_store("gw-a", SHORT), "s1", setup=admin)
    gw_b = open_store("gw-b", SHORT)
    clock.advance(SHORT - 0.5)
    assert gw_b.preview_reclaim("expired") == []
    assert gw_b.reclaim_expired_handoffs(RECLAIM_MESSAGE) == []
    assert gw_b.reclaim_stale_running_handoffs(RECLAIM_MESSAGE) == []
    assert handoff_row(admin, "s1")["state"] == "running"
    clock.advance(1)
    assert gw_b.reclaim_stale_running_handoffs(RECLAIM_MESSAGE) == ["s1"]


def test_a_reclaim_records_the_stores_actor(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    claimed_by(open_store("gw-a", SHORT), "s1", setup=admin)
    clock.advance(LATER)
    operator = open_store("gw-b", 30, actor="ops-desk")
    assert operator.actor == "ops-desk"
    assert operator.reclaim_expired_handoffs("gateway gone; run /handoff again") == ["s1"]
    event = last_event(admin, "s1")
    assert (event["actor"], event["detail"]) == ("ops-desk", "gateway gone; run /handoff again")


# -- fencing: a gateway whose claim was rescued cannot overwrite the row -----------------------


def test_a_rescued_claim_cannot_finish_the_row_it_lost(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    gw_a = open_store("gw-a", SHORT)
    gw_b = open_store("gw-b", SHORT)
    claimed_by(gw_a, "s1", setup=admin)
    clock.advance(LATER)  # gw-a hung: its lease ran out
    assert gw_b.reclaim_expired_handoffs(RECLAIM_MESSAGE) == ["s1"]
    rescued = handoff_row(admin, "s1")
    events = len(admin.handoff_history("s1"))

    # The zombie wakes up and reports: refused, and the failed row keeps B's verdict.
    assert gw_a.complete_handoff("s1") is False
    assert gw_a.fail_handoff("s1", "late failure") is False
    assert handoff_row(admin, "s1") == rescued
    assert rescued["state"] == "failed"
    assert "/handoff" in rescued["error"]
    assert len(admin.handoff_history("s1")) == events


def test_a_rescued_claim_cannot_finish_another_gateways_new_attempt(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    gw_a = open_store("gw-a", SHORT)
    gw_b = open_store("gw-b", SHORT)
    claimed_by(gw_a, "s1", setup=admin)
    clock.advance(LATER)
    assert gw_b.reclaim_expired_handoffs(RECLAIM_MESSAGE) == ["s1"]
    assert admin.request_handoff("s1", "telegram") is True  # the user ran /handoff again
    assert gw_b.claim_handoff("s1") is True
    current = handoff_row(admin, "s1")
    assert (current["owner"], current["attempt"]) == ("gw-b", 2)

    assert gw_a.complete_handoff("s1") is False
    assert gw_a.fail_handoff("s1", "late failure") is False
    assert gw_a.renew_handoff_leases(["s1"]) == []
    assert handoff_row(admin, "s1") == current
    assert {event["actor"] for event in admin.handoff_history("s1")[-2:]} == {"api", "gw-b"}

    assert gw_b.complete_handoff("s1") is True
    assert gw_a.complete_handoff("s1") is False
    assert handoff_row(admin, "s1")["state"] == "completed"


def old_and_new_life(open_store: StoreFactory, admin: SessionDB) -> tuple[SessionDB, SessionDB]:
    """gw-a claims s1, is presumed dead, and its next life claims s1 again as attempt 2."""
    old_life = open_store("gw-a", LONG)
    claimed_by(old_life, "s1", setup=admin)
    # The operator knows gw-a died and fails its rows; the user requests again, and gw-a's
    # next life (same owner, a new store) claims the row as attempt 2.
    assert admin.reclaim_running_handoffs(RECLAIM_MESSAGE) == ["s1"]
    assert admin.request_handoff("s1", "telegram") is True
    new_life = open_store("gw-a", LONG)
    assert new_life.claim_handoff("s1") is True
    current = handoff_row(admin, "s1")
    assert (current["state"], current["owner"], current["attempt"]) == ("running", "gw-a", 2)
    return old_life, new_life


FINISHES: dict[str, Callable[[SessionDB], bool]] = {
    "complete": lambda db: db.complete_handoff("s1"),
    "fail": lambda db: db.fail_handoff("s1", "late failure"),
}


@pytest.mark.parametrize("finish", list(FINISHES))
def test_an_old_life_cannot_finish_its_owners_new_attempt(
    open_store: StoreFactory, admin: SessionDB, finish: str
) -> None:
    old_life, new_life = old_and_new_life(open_store, admin)
    current = handoff_row(admin, "s1")
    assert FINISHES[finish](old_life) is False
    assert handoff_row(admin, "s1") == current

    assert new_life.fail_handoff("s1", "no route") is True
    row = handoff_row(admin, "s1")
    assert (row["state"], row["error"]) == ("failed", "no route")


@pytest.mark.parametrize(("first", "second"), [("complete", "fail"), ("fail", "complete")])
def test_a_refused_finish_leaves_the_old_life_fenced(
    open_store: StoreFactory, admin: SessionDB, first: str, second: str
) -> None:
    old_life, _new_life = old_and_new_life(open_store, admin)
    current = handoff_row(admin, "s1")
    assert FINISHES[first](old_life) is False
    assert FINISHES[second](old_life) is False
    assert handoff_row(admin, "s1") == current


def test_a_store_that_claims_again_may_finish_its_new_attempt(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    gw_a = open_store("gw-a", SHORT)
    claimed_by(gw_a, "s1", setup=admin)
    clock.advance(LATER)
    assert admin.reclaim_expired_handoffs(RECLAIM_MESSAGE) == ["s1"]
    assert admin.request_handoff("s1", "telegram") is True
    assert gw_a.claim_handoff("s1") is True
    assert gw_a.complete_handoff("s1") is True
    row = handoff_row(admin, "s1")
    assert (row["state"], row["attempt"], row["error"]) == ("completed", 2, None)


def test_another_owner_cannot_finish_a_live_claim(
    open_store: StoreFactory, admin: SessionDB
) -> None:
    gw_a = open_store("gw-a", LONG)
    gw_b = open_store("gw-b", LONG)
    claimed_by(gw_a, "s1", setup=admin)
    held = handoff_row(admin, "s1")
    assert gw_b.complete_handoff("s1") is False
    assert gw_b.fail_handoff("s1", "not mine") is False
    assert gw_b.fail_handoff("s1", "not mine", only_states=("running",)) is False
    assert gw_b.reclaim_stale_running_handoffs(RECLAIM_MESSAGE) == []
    assert gw_b.reclaim_expired_handoffs(RECLAIM_MESSAGE) == []
    assert handoff_row(admin, "s1") == held
    assert gw_a.complete_handoff("s1") is True


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", [0, 0.0, -1, -0.001, math.inf, math.nan])
def test_a_lease_must_be_a_positive_finite_number(tmp_path: Path, lease: float) -> None:
    path = tmp_path / "state.db"
    with pytest.raises(InvalidInputError, match="lease_seconds"):
        SessionDB(path, owner="gw-a", lease_seconds=lease)
    assert not path.exists(), "a refused configuration still created the database"


@pytest.mark.parametrize("lease", ["30", True, [30]])
def test_a_lease_must_be_a_number(tmp_path: Path, lease: object) -> None:
    with pytest.raises(InvalidInputTypeError, match="lease_seconds"):
        SessionDB(tmp_path / "state.db", owner="gw-a", lease_seconds=lease)  # type: ignore[arg-type]


def test_a_lease_needs_an_owner(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with pytest.raises(InvalidInputError, match="owner"):
        SessionDB(path, lease_seconds=30)
    assert not path.exists()


@pytest.mark.parametrize("owner", ["", "   ", "gw\n1", "x" * 256])
def test_an_owner_must_be_a_printable_name(tmp_path: Path, owner: str) -> None:
    with pytest.raises(InvalidInputError, match="owner"):
        SessionDB(tmp_path / "state.db", owner=owner, lease_seconds=30)


def test_a_configured_store_reports_its_ownership(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db", owner="gw-a", lease_seconds=0.25) as db:
        assert (db.owner, db.lease_seconds, db.actor) == ("gw-a", 0.25, "gw-a")
        assert "gw-a" in repr(db)
    with SessionDB(tmp_path / "state.db") as db:
        assert (db.owner, db.lease_seconds, db.actor) == (None, None, "api")


# -- racing upkeep: several gateways reclaiming and renewing at once ----------------------------

RACE_ROWS = [f"race-{index:02d}" for index in range(24)]
RACE_WAIT = 60.0  # a safety net against a hung thread, never a synchronisation tool


def race(*calls: Callable[[], list[str]]) -> list[list[str]]:
    """Run the calls in threads released together; the list each returned, in order."""
    barrier = threading.Barrier(len(calls))
    results: list[list[str] | BaseException | None] = [None] * len(calls)

    def run(index: int, call: Callable[[], list[str]]) -> None:
        try:
            barrier.wait(RACE_WAIT)
            results[index] = call()
        except BaseException as exc:  # reported by the main thread
            results[index] = exc

    threads = [threading.Thread(target=run, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_WAIT)
    assert not any(thread.is_alive() for thread in threads), "a racer hung"
    finished: list[list[str]] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        finished.append(result)
    return finished


def test_concurrent_reclaims_fail_each_expired_row_exactly_once(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    claimed_by(open_store("gw-dead", SHORT), *RACE_ROWS, setup=admin)
    clock.advance(LATER)
    reclaimers = [open_store(f"gw-{index}", 30) for index in range(4)]
    results = race(
        *((lambda db=db: db.reclaim_expired_handoffs(RECLAIM_MESSAGE)) for db in reclaimers)
    )

    won = [session_id for result in results for session_id in result]
    assert sorted(won) == RACE_ROWS, "a row was reclaimed twice, or not at all"
    for session_id in RACE_ROWS:
        failures = [e for e in admin.handoff_history(session_id) if e["to_state"] == "failed"]
        assert len(failures) == 1, failures
        assert handoff_row(admin, session_id)["state"] == "failed"


def test_a_renewal_racing_a_reclaim_never_keeps_a_row_the_reclaim_failed(
    open_store: StoreFactory, admin: SessionDB, clock: HandClock
) -> None:
    holder = open_store("gw-a", SHORT)
    claimed_by(holder, *RACE_ROWS, setup=admin)
    clock.advance(SHORT + 1)  # expired, but its gateway is alive and about to renew
    rescuer = open_store("gw-b", SHORT)
    # The holder renews in the opposite order to the reclaim's, to provoke a lock-order race.
    renewed, reclaimed = race(
        lambda: holder.renew_handoff_leases(list(reversed(RACE_ROWS))),
        lambda: rescuer.reclaim_expired_handoffs(RECLAIM_MESSAGE),
    )

    assert not set(renewed) & set(reclaimed), "a row was both renewed and reclaimed"
    assert sorted(renewed + reclaimed) == RACE_ROWS
    for session_id in RACE_ROWS:
        row = handoff_row(admin, session_id)
        if session_id in renewed:
            assert (row["state"], row["owner"]) == ("running", "gw-a"), row
            assert row["lease"] == clock.now + SHORT
        else:
            assert (row["state"], row["lease"]) == ("failed", None), row
