"""The watcher's batch pipeline in-process, on real SQLite stores: what each call carries and
when a delivery counts as done.

* A tick claims as many rows as it has free slots, in one call; deliveries that end together
  are finished in one call.
* A delivery is reported done (its log line, its metrics, its slot freed) only once its flush
  committed: a flush held in the store holds all of that back.
* A flush that fails leaves its rows running (for the reclaim) and reports them discarded.
* A runner that reserves sources (or checks turns in-process) gets a listing first, then one
  claim of exactly the rows it reserved; rows not claimed get their reservations back.
* A store without the batch methods (an upstream-shaped stand-in) is served one row per call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import types
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import gateway.run as run
from gateway.run import GatewayRunner
from hermes_state import AsyncSessionDB, DatabaseError, SessionDB
from hermes_state.plans import ClaimBatch
from tests.support.processes import DEADLINE, eventually
from tests.support.stores import handoff_row, make_pending

pytestmark = pytest.mark.asyncio

AN_HOUR = 3600.0  # an interval that never elapses: only wake-ups start ticks


@pytest.fixture(autouse=True)
def root_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "_handoff_watch_scopes", lambda _runner: [(None, None)])
    monkeypatch.delenv(run.LEGACY_HANDOFF_ENV, raising=False)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def reader(path: Path) -> Iterator[SessionDB]:
    with SessionDB(path) as db:
        yield db


class Recorder:
    """A stand-in for the watcher's metrics: what was reported, in order."""

    def __init__(self) -> None:
        self.ticks = 0
        self.outcomes: list[str] = []

    def claimed(self, row: Mapping[str, Any]) -> None:
        pass

    def delivered(self, outcome: str, seconds: float) -> None:
        self.outcomes.append(outcome)

    def ticked(self, seconds: float) -> None:
        self.ticks += 1


@asynccontextmanager
async def serving(runner: GatewayRunner) -> AsyncIterator[None]:
    task = asyncio.ensure_future(runner.run())
    try:
        yield
    finally:
        runner.stop()
        try:
            await asyncio.wait_for(task, DEADLINE)
        finally:
            await runner.close()


async def nothing(row: Mapping[str, Any], profile_name: str | None) -> None:
    return None


def state_of(db: SessionDB, session_id: str) -> str | None:
    return handoff_row(db, session_id)["state"]


# -- what each call carries ---------------------------------------------------------------------


class Counting(SessionDB):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claims: list[tuple[int, int]] = []  # (limit, rows claimed)
        self.finishes: list[dict[str, Any]] = []

    def claim_next_handoffs(self, limit: int, **options: Any) -> ClaimBatch:
        batch = super().claim_next_handoffs(limit, **options)
        self.claims.append((limit, len(batch.rows)))
        return batch

    def finish_handoffs(self, outcomes: Mapping[str, object], **options: Any) -> dict[str, bool]:
        self.finishes.append(dict(outcomes))
        return super().finish_handoffs(outcomes, **options)


async def test_a_tick_claims_its_free_slots_at_once_and_one_flush_finishes_them(
    path: Path, reader: SessionDB
) -> None:
    rows = [f"r{n}" for n in range(10)]
    make_pending(reader, *rows, "eleventh", started_at=100.0)
    store = Counting(path)

    async def fails_one(row: Mapping[str, Any], profile_name: str | None) -> None:
        if row["id"] == "r3":
            raise RuntimeError("the platform said no")

    runner = GatewayRunner(store, fails_one, interval=AN_HOUR, max_concurrency=10)
    async with serving(runner):
        await eventually(
            lambda: state_of(reader, "eleventh") == "completed", "the whole backlog delivered"
        )

    assert store.claims[:2] == [(10, 10), (10, 1)]  # its free slots, oldest first
    assert store.finishes[0] == {**dict.fromkeys(rows), "r3": "the platform said no"}
    assert [list(done) for done in store.finishes[1:]] == [["eleventh"]]
    assert state_of(reader, "r3") == "failed"
    for session_id in (*rows, "eleventh"):
        assert len(reader.handoff_history(session_id)) == 3  # requested, claimed, finished


# -- reported done only once its flush committed ------------------------------------------------


class HeldFlush(SessionDB):
    """A store whose flushes wait until the test lets them through."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()

    def finish_handoffs(self, outcomes: Mapping[str, object], **options: Any) -> dict[str, bool]:
        self.entered.set()
        assert self.release.wait(DEADLINE), "the test never let the flush through"
        return super().finish_handoffs(outcomes, **options)


async def test_a_delivery_is_reported_done_only_once_its_flush_committed(
    path: Path, reader: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    make_pending(reader, "first", "second", started_at=100.0)
    store = HeldFlush(path)
    metrics = Recorder()
    delivered: list[str] = []

    async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    caplog.set_level(logging.INFO, logger="gateway.run")
    runner = GatewayRunner(store, handler, interval=0.01, max_concurrency=1, metrics=metrics)
    try:
        async with serving(runner):
            await eventually(store.entered.is_set, "the first flush to start")
            seen = metrics.ticks
            await eventually(lambda: metrics.ticks >= seen + 5, "five ticks with the flush held")
            # The handler has returned, but nothing counts it as done yet.
            assert delivered == ["first"]  # its slot is still taken
            assert metrics.outcomes == []
            assert not any("completed" in r.getMessage() for r in caplog.records)
            assert state_of(reader, "first") == "running"
            store.release.set()
            await eventually(lambda: state_of(reader, "second") == "completed", "both delivered")
    finally:
        store.release.set()

    assert delivered == ["first", "second"]
    assert metrics.outcomes == ["completed", "completed"]
    said = [r.getMessage() for r in caplog.records if "completed 1 handoff(s)" in r.getMessage()]
    assert said == ["completed 1 handoff(s): first", "completed 1 handoff(s): second"]


class BrokenFlush(SessionDB):
    def finish_handoffs(self, outcomes: Mapping[str, object], **options: Any) -> dict[str, bool]:
        raise DatabaseError("the disk is full")


async def test_a_flush_that_fails_leaves_its_rows_running_and_says_so(
    path: Path, reader: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    make_pending(reader, "x", "y", started_at=100.0)
    store = AsyncSessionDB(BrokenFlush(path))
    metrics = Recorder()
    runner = types.SimpleNamespace(
        _session_db=store,
        _running=True,
        _process_handoff=nothing,
        _handoff_metrics=metrics,
        _handoff_wakeup=asyncio.Event(),
    )
    watch = run.HandoffWatch(runner, interval=AN_HOUR, drain_timeout=DEADLINE)
    caplog.set_level(logging.INFO, logger="gateway.run")
    task = asyncio.ensure_future(watch.run())
    try:
        await eventually(lambda: len(metrics.outcomes) == 2, "both deliveries to end")
    finally:
        runner._running = False
        runner._handoff_wakeup.set()
        await asyncio.wait_for(task, DEADLINE)
        await asyncio.to_thread(store.wrapped.close)  # type: ignore[attr-defined]

    assert metrics.outcomes == ["discarded", "discarded"]
    assert [state_of(reader, sid) for sid in ("x", "y")] == ["running", "running"]
    assert watch.turns == {}  # no lease of theirs is kept alive
    assert any(
        "could not record the outcome of x, y" in r.getMessage() and r.exc_info
        for r in caplog.records
    )
    assert not any("completed" in r.getMessage() for r in caplog.records)


# -- the listing path: sources reserved before the claim ------------------------------------


async def test_reserved_sources_are_claimed_in_one_call_and_given_back_on_every_path(
    path: Path, reader: SessionDB
) -> None:
    make_pending(reader, "a", "b", started_at=100.0)
    assert reader.try_acquire_session_turn_lease("b", "local-turn", ttl_seconds=600.0)
    order: list[str] = []

    class Recording(SessionDB):
        def claim_handoffs(self, session_ids: Any, **options: Any) -> ClaimBatch:
            order.append(f"claim {sorted(session_ids)}")
            return super().claim_handoffs(session_ids, **options)

        def claim_next_handoffs(self, limit: int, **options: Any) -> ClaimBatch:
            order.append("claim next")  # must not happen: reservations need the ids first
            return super().claim_next_handoffs(limit, **options)

    async def deliver(row: Mapping[str, Any], profile_name: str | None = None) -> None:
        order.append(f"deliver {row['id']}")

    def reserve(session_id: str) -> str:
        order.append(f"reserve {session_id}")
        return f"source of {session_id}"

    async def release(reservation: str) -> None:
        order.append(f"release {reservation}")

    store = Recording(path)
    runner = types.SimpleNamespace(
        _session_db=AsyncSessionDB(store),
        _running=True,
        _process_handoff=deliver,
        _reserve_handoff_source=reserve,
        _release_handoff_source_reservation=release,
        _handoff_wakeup=asyncio.Event(),
    )
    task = asyncio.ensure_future(run.GatewayRunner._handoff_watcher(runner, interval=AN_HOUR))
    try:
        await eventually(lambda: state_of(reader, "a") == "completed", "a to be delivered")
        await eventually(lambda: "release source of a" in order, "a's reservation given back")
    finally:
        runner._running = False
        runner._handoff_wakeup.set()
        await asyncio.wait_for(task, DEADLINE)
        await asyncio.to_thread(store.close)

    assert order[:6] == [
        "reserve a",
        "reserve b",
        "claim ['a', 'b']",
        "release source of b",  # left pending for its turn: given back at once
        "deliver a",
        "release source of a",
    ]
    # The ticks after a's delivery freed its slot try b again, and give its source back.
    later = order[6:]
    assert later == ["reserve b", "claim ['b']", "release source of b"] * (len(later) // 3)
    assert state_of(reader, "b") == "pending"


# -- a store without the batch methods --------------------------------------------------------

UPSTREAM_METHODS = frozenset(
    {
        "reclaim_stale_running_handoffs",
        "list_pending_handoffs",
        "claim_handoff",
        "complete_handoff",
        "fail_handoff",
        "try_acquire_session_turn_lease",
        "release_session_turn_lease",
        "get_session",
        "get_messages",
    }
)


class UpstreamShaped:
    """The methods an upstream-era store has, over a real store, each awaited off the loop and
    recorded: nothing else (``getattr(store, "claim_handoffs", None)`` is None)."""

    def __init__(self, db: SessionDB) -> None:
        self._db = db
        self.calls: list[tuple[str, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        if name not in UPSTREAM_METHODS:
            raise AttributeError(name)
        method = getattr(self._db, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args and isinstance(args[0], str) else None
            self.calls.append((name, first))
            return await asyncio.to_thread(method, *args, **kwargs)

        return call


async def test_a_store_without_the_batch_methods_is_served_one_row_per_call(
    path: Path, reader: SessionDB
) -> None:
    make_pending(reader, "ok", "bad", started_at=100.0)
    store = UpstreamShaped(SessionDB(path))

    async def deliver(row: Mapping[str, Any]) -> None:
        if row["id"] == "bad":
            raise RuntimeError("the platform said no")

    states = iter([True, True, True])

    class Running:
        def __bool__(self) -> bool:
            return next(states, False)

    runner = types.SimpleNamespace(_session_db=store, _running=Running(), _process_handoff=deliver)
    await asyncio.wait_for(
        run.GatewayRunner._handoff_watcher(runner, interval=0.0, drain_timeout=DEADLINE), DEADLINE
    )
    await asyncio.to_thread(store._db.close)

    for session_id, finish in (("ok", "complete_handoff"), ("bad", "fail_handoff")):
        own = [name for name, first in store.calls if first == session_id]
        assert own == [
            "try_acquire_session_turn_lease",
            "claim_handoff",
            finish,
            "release_session_turn_lease",
        ], own
    assert state_of(reader, "ok") == "completed"
    assert (state_of(reader, "bad"), handoff_row(reader, "bad")["error"]) == (
        "failed",
        "the platform said no",
    )
    for session_id in ("ok", "bad"):
        assert len(reader.handoff_history(session_id)) == 3
    assert reader.try_acquire_session_turn_lease("ok", "next") is True  # given back
