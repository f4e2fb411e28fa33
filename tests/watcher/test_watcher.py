"""The handoff watcher (gateway/run.py) against real stores on real SQLite files.

Every test drives the real ``GatewayRunner`` (or its ``_handoff_watcher`` on a minimal runner)
and checks outcomes in the database itself. Tests synchronise with asyncio events and with
polls that have a deadline; none waits a fixed time hoping something happened, and none
asserts on how long anything took.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import statistics
import threading
import time
import types
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

import gateway.run as run
from gateway.run import GatewayRunner
from hermes_state import AsyncSessionDB, NativeAsyncSessionDB, SessionDB
from tests.support.processes import DEADLINE, eventually
from tests.support.stores import make_pending

STORE_KINDS = ["SessionDB", "AsyncSessionDB", "NativeAsyncSessionDB"]


# -- helpers ---------------------------------------------------------------------------------


def open_store(kind: str, where: Path | URL) -> Any:
    """A store of ``kind`` on ``where``, as a gateway would hand it to ``GatewayRunner``."""
    location: dict[str, Any] = {"url": where} if isinstance(where, URL) else {"db_path": where}
    if kind == "SessionDB":
        return SessionDB(**location)
    if kind == "AsyncSessionDB":
        return AsyncSessionDB(SessionDB(**location))
    assert kind == "NativeAsyncSessionDB"
    return NativeAsyncSessionDB(**location)


def state_of(db: SessionDB, session_id: str) -> str | None:
    handoff = db.get_handoff_state(session_id)
    assert handoff is not None, f"session {session_id!r} is unknown"
    return handoff["state"]


async def within(awaitable: Awaitable[Any], what: str) -> Any:
    try:
        return await asyncio.wait_for(awaitable, DEADLINE)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


class Ticks:
    """A ``_running`` flag: true for the first ``count`` reads (one read per tick), then false.

    ``on_tick(n)`` runs before tick ``n`` (1-based), on the event loop.
    """

    def __init__(self, count: int, on_tick: Callable[[int], None] | None = None) -> None:
        self.count = count
        self.reads = 0
        self.on_tick = on_tick

    def __bool__(self) -> bool:
        self.reads += 1
        if self.reads > self.count:
            return False
        if self.on_tick is not None:
            self.on_tick(self.reads)
        return True


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SessionDB]:
    """The root store's file, opened for setting rows up and reading outcomes."""
    with SessionDB(tmp_path / "root" / "state.db") as store:
        yield store


# -- one slow delivery delays no other ---------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_stuck_delivery_delays_no_other_row(kind: str, db: SessionDB) -> None:
    make_pending(db, "A")
    db.create_session("B", "cli")
    db.create_session("C", "cli")
    a_started = asyncio.Event()
    release_a = asyncio.Event()
    delivered: list[str] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        if row["id"] == "A":
            a_started.set()
            await release_a.wait()
        delivered.append(row["id"])

    runner = GatewayRunner(open_store(kind, db.url), handler, interval=0.01, drain_timeout=5.0)
    serving = asyncio.create_task(runner.run())
    try:
        await within(a_started.wait(), "A's delivery to start")
        # B and C are requested only now, while A's delivery hangs: later ticks must serve them.
        assert await asyncio.to_thread(db.request_handoff, "B", "discord") is True
        assert await asyncio.to_thread(db.request_handoff, "C", "slack") is True
        await eventually(
            lambda: state_of(db, "B") == state_of(db, "C") == "completed",
            "B and C to complete while A is stuck",
        )
        assert sorted(delivered) == ["B", "C"]
        assert state_of(db, "A") == "running"
        assert not serving.done()

        release_a.set()
        await eventually(lambda: state_of(db, "A") == "completed", "A to complete once released")
        assert sorted(delivered) == ["A", "B", "C"]
    finally:
        release_a.set()
        runner.stop()
        await within(serving, "the runner to stop")
        await runner.close()


@pytest.mark.asyncio
async def test_cancelling_the_runner_right_after_a_wake_up_stops_it(db: SessionDB) -> None:
    """A request made in this process wakes the runner from its pause; a cancellation that
    reaches the runner in the same turn of the event loop still ends it. (Python 3.11's
    ``asyncio.wait_for`` returned the wake-up and dropped the cancellation, so the runner went
    on polling.)"""
    make_pending(db, "first")
    db.create_session("second", "cli")

    async def deliver(row: dict[str, Any], profile_name: str | None) -> None:
        return None

    runner = GatewayRunner(open_store("SessionDB", db.url), deliver, interval=30.0)
    serving = asyncio.create_task(runner.run())
    try:
        # Delivered: the runner then sits in its 30 s pause.
        await eventually(lambda: state_of(db, "first") == "completed", "the first delivery")
        loop = asyncio.get_running_loop()
        assert db.request_handoff("second", "telegram") is True  # queues the wake-up
        loop.call_soon_threadsafe(serving.cancel)  # lands right behind it
        done, _ = await asyncio.wait({serving}, timeout=DEADLINE)
        assert done, "the cancelled runner went on running"
        assert serving.cancelled()
    finally:
        runner.stop()
        await asyncio.wait({serving}, timeout=DEADLINE)
        await runner.close()


def test_a_runner_serves_again_under_a_new_event_loop(db: SessionDB) -> None:
    """``asyncio.run(runner.run(ticks=2))`` twice, as the demo does: the second run's pause
    waits on a wake-up event of its own loop (an asyncio.Event belongs to the first loop that
    waits on it, and waiting on it from another raises)."""
    make_pending(db, "first")

    async def deliver(row: dict[str, Any], profile_name: str | None) -> None:
        return None

    runner = GatewayRunner(open_store("SessionDB", db.url), deliver, interval=0.01)
    asyncio.run(runner.run(ticks=2))
    assert state_of(db, "first") == "completed"
    make_pending(db, "second")
    asyncio.run(runner.run(ticks=2))
    asyncio.run(runner.close())
    assert state_of(db, "second") == "completed"


# -- outcomes of a delivery --------------------------------------------------------------------


class Refused(Exception):
    """An exception whose text is empty: the row's error must name the class instead."""


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_the_handler_outcome_decides_the_row(kind: str, db: SessionDB) -> None:
    make_pending(db, "ok", "boom", "silent", "wordy")

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        if row["id"] == "boom":
            raise RuntimeError("discord refused the message (HTTP 403)")
        if row["id"] == "silent":
            raise Refused()
        if row["id"] == "wordy":
            raise ValueError("x" * 2000)

    runner = GatewayRunner(
        open_store(kind, db.url), handler, interval=0.01, drain_timeout=5.0, max_concurrency=None
    )
    try:
        await within(runner.run(ticks=1), "one tick and its deliveries")
    finally:
        await runner.close()

    assert db.get_handoff_state("ok") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }
    assert db.get_handoff_state("boom") == {
        "state": "failed",
        "platform": "telegram",
        "error": "discord refused the message (HTTP 403)",
    }
    assert db.get_handoff_state("silent") == {
        "state": "failed",
        "platform": "telegram",
        "error": "Refused",
    }
    wordy = db.get_handoff_state("wordy")
    assert wordy is not None
    assert wordy["state"] == "failed"
    assert wordy["error"] == "x" * 500


@pytest.mark.asyncio
async def test_a_sync_handler_runs_and_its_exception_fails_the_row(db: SessionDB) -> None:
    make_pending(db, "ok", "bad")
    seen: list[tuple[str, str | None]] = []

    def handler(row: dict[str, Any], profile_name: str | None) -> None:
        seen.append((row["id"], profile_name))
        if row["id"] == "bad":
            raise KeyError("no such channel")

    runner = GatewayRunner(db, handler, interval=0.01)
    await within(runner.run(ticks=1), "one tick")

    assert sorted(seen) == [("bad", None), ("ok", None)]
    assert state_of(db, "ok") == "completed"
    bad = db.get_handoff_state("bad")
    assert bad is not None
    assert bad["state"] == "failed"
    assert bad["error"] == str(KeyError("no such channel"))


@pytest.mark.asyncio
async def test_serve_runs_the_watcher_then_closes_the_store_it_was_given(db: SessionDB) -> None:
    make_pending(db, "s1")
    store = SessionDB(db.url)
    delivered: list[str] = []

    runner = GatewayRunner(store, lambda row, profile_name: delivered.append(row["id"]))
    await within(runner.serve(ticks=1), "one tick, then closing")

    assert delivered == ["s1"]
    assert state_of(db, "s1") == "completed"
    assert store._closed  # a later call would open it again, with a warning


# -- no row is dispatched twice ----------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("max_concurrency", [None, 3])
async def test_no_row_is_dispatched_twice_across_many_ticks_and_two_gateways(
    max_concurrency: int | None, db: SessionDB
) -> None:
    """Two gateways on one database, tick after tick, while their deliveries are held open.

    The rows are requested once both gateways are past their startup: an ownerless gateway's
    startup reclaim fails every running row, the other gateway's fresh claims included.
    """
    session_ids = [f"s{i:02d}" for i in range(30)]
    for session_id in session_ids:
        db.create_session(session_id, "cli")
    dispatched: Counter[str] = Counter()
    gate = asyncio.Event()
    both_started = asyncio.Event()
    both_ticked_a_lot = asyncio.Event()
    requested_at: list[int] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        dispatched[row["id"]] += 1
        await gate.wait()

    # Gateways sharing a database have owners and leases: an ownerless store acts as its
    # database's only gateway, whose startup reclaim would fail the other's claims.
    runners = [
        GatewayRunner(
            SessionDB(db.url, owner=f"gw-{number}", lease_seconds=60.0),
            handler,
            drain_timeout=5.0,
            max_concurrency=max_concurrency,
        )
        for number in range(2)
    ]

    def note_tick(_n: int) -> None:
        ticks = [r._running.reads if isinstance(r._running, Ticks) else 0 for r in runners]
        if min(ticks) >= 1:
            both_started.set()
        if requested_at and all(t >= r + 25 for t, r in zip(ticks, requested_at, strict=True)):
            both_ticked_a_lot.set()

    for runner in runners:
        runner._running = Ticks(100_000, on_tick=note_tick)
    watchers = [
        asyncio.create_task(runner._handoff_watcher(interval=0.002, drain_timeout=5.0))
        for runner in runners
    ]
    try:
        await within(both_started.wait(), "both gateways to start")
        for session_id in session_ids:
            assert await asyncio.to_thread(db.request_handoff, session_id, "telegram") is True
        requested_at.extend(r._running.reads for r in runners)
        await within(both_ticked_a_lot.wait(), "both gateways to tick many times")
        # Every slot is taken by a held delivery; the rest stay pending for later.
        held = len(session_ids) if max_concurrency is None else 2 * max_concurrency
        assert sum(dispatched.values()) == held
        assert max(dispatched.values()) == 1
        gate.set()
        await eventually(
            lambda: all(state_of(db, sid) == "completed" for sid in session_ids),
            "every row to complete",
        )
        # Keep polling a while after the completions: nothing may come round again.
        more = [r._running.reads + 10 for r in runners]
        await eventually(
            lambda: all(r._running.reads >= m for r, m in zip(runners, more, strict=True)),
            "ten more ticks of each gateway",
        )
    finally:
        gate.set()
        for runner in runners:
            runner._running = False
        await within(asyncio.gather(*watchers), "both watchers to stop")
        for runner in runners:
            await runner.close()

    assert dispatched == Counter(dict.fromkeys(session_ids, 1))


@pytest.mark.asyncio
async def test_a_row_in_flight_is_not_dispatched_again_even_when_re_requested(
    db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator fails a running row and the user asks again while the first delivery is
    still going: the gateway holding it must not start a second delivery alongside."""
    make_pending(db, "A")
    first_started = asyncio.Event()
    release_first = asyncio.Event()
    active = dispatches = most_active = 0

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        nonlocal active, dispatches, most_active
        dispatches += 1
        active += 1
        most_active = max(most_active, active)
        try:
            if dispatches == 1:
                first_started.set()
                await release_first.wait()
        finally:
            active -= 1

    caplog.set_level(logging.INFO, logger="gateway.run")
    runner = GatewayRunner(SessionDB(db.url), handler, drain_timeout=5.0)
    ticks = runner._running = Ticks(100_000)
    watcher = asyncio.create_task(runner._handoff_watcher(interval=0.002, drain_timeout=5.0))
    try:
        await within(first_started.wait(), "the first delivery to start")
        assert db.fail_handoff("A", "the operator gave up on it") is True
        assert db.request_handoff("A", "discord") is True
        later = ticks.reads + 20
        await eventually(lambda: ticks.reads >= later, "twenty more ticks")
        assert dispatches == 1
        assert state_of(db, "A") == "pending"

        release_first.set()
        # Once the first delivery has ended (its outcome discarded: the row it held was failed
        # and requested again), the next tick or so must pick the row up. The count starts
        # then, not at the release: how long the discarded completion's round trip takes is
        # up to the machine's load, how many ticks a free slot waits is the watcher's.
        await eventually(
            lambda: any(
                "completion of A was discarded" in r.getMessage() for r in list(caplog.records)
            ),
            "the first delivery to end",
        )
        give_up_at = ticks.reads + 50
        await eventually(lambda: dispatches == 2 or ticks.reads >= give_up_at, "a second dispatch")
        assert dispatches == 2, "the re-requested row was left pending after the first ended"
        await eventually(
            lambda: state_of(db, "A") == "completed", "the second delivery to complete"
        )
    finally:
        release_first.set()
        runner._running = False
        await within(watcher, "the watcher to stop")
        await runner.close()
    assert most_active == 1
    assert db.get_handoff_state("A") == {"state": "completed", "platform": "discord", "error": None}


# -- a cancelled delivery strands its row until the next start ---------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_cancelled_delivery_is_reclaimed_by_the_next_start(
    kind: str, db: SessionDB
) -> None:
    make_pending(db, "hung")
    started = asyncio.Event()
    outcomes: list[str] = []

    async def hangs(row: dict[str, Any], profile_name: str | None) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the drain's cancel ends it
        except asyncio.CancelledError:
            outcomes.append("cancelled")
            raise

    first = GatewayRunner(open_store(kind, db.url), hangs, interval=0.01, drain_timeout=0.05)
    serving = asyncio.create_task(first.run())
    try:
        await within(started.wait(), "the delivery to start")
    finally:
        first.stop()
        await within(serving, "the drain to give up and cancel")
        await first.close()

    assert outcomes == ["cancelled"]
    assert db.get_handoff_state("hung") == {
        "state": "running",
        "platform": "telegram",
        "error": None,
    }
    assert db.request_handoff("hung", "telegram") is False  # still in flight as far as anyone knows

    delivered: list[str] = []

    async def delivers(row: dict[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    second = GatewayRunner(open_store(kind, db.url), delivers, interval=0.01, drain_timeout=5.0)
    try:
        await within(second.run(ticks=1), "the second gateway's first tick")
        reclaimed = db.get_handoff_state("hung")
        assert reclaimed is not None
        assert reclaimed["state"] == "failed"
        assert "/handoff" in reclaimed["error"]
        assert delivered == []  # reclaimed rows are failed, never re-delivered blindly

        assert db.request_handoff("hung", "discord") is True
        await within(second.run(ticks=1), "the retry's tick")
    finally:
        await second.close()
    assert delivered == ["hung"]
    assert db.get_handoff_state("hung") == {
        "state": "completed",
        "platform": "discord",
        "error": None,
    }


@pytest.mark.asyncio
async def test_startup_reclaim_fails_only_running_rows(db: SessionDB) -> None:
    make_pending(db, "stranded", "waiting", "done")
    assert db.claim_handoff("stranded") is True
    assert db.claim_handoff("done") is True
    assert db.complete_handoff("done") is True
    delivered: list[str] = []

    async def delivers(row: dict[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    runner = GatewayRunner(db, delivers, interval=0.01)
    await within(runner.run(ticks=1), "one tick")

    stranded = db.get_handoff_state("stranded")
    assert stranded is not None
    assert stranded["state"] == "failed"
    assert "/handoff" in stranded["error"]
    assert state_of(db, "waiting") == "completed"  # a pending row is delivered, not reclaimed
    assert state_of(db, "done") == "completed"
    assert delivered == ["waiting"]


# -- how _process_handoff is called ------------------------------------------------------------


class OneParameter:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def _process_handoff(self, row: dict[str, Any]) -> None:
        self.calls.append((row["id"],))


class TwoParameters:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def _process_handoff(self, row: dict[str, Any], profile_name: str | None) -> None:
        self.calls.append((row["id"], profile_name))


def recording(calls: list[tuple[Any, ...]]) -> dict[str, Callable[..., Awaitable[None]]]:
    async def one(row: dict[str, Any]) -> None:
        calls.append((row["id"],))

    async def two(row: dict[str, Any], profile_name: str | None) -> None:
        calls.append((row["id"], profile_name))

    async def defaulted(row: dict[str, Any], profile_name: str | None = "unset") -> None:
        calls.append((row["id"], profile_name))

    async def star(*args: Any) -> None:
        calls.append((args[0]["id"], *args[1:]))

    async def keyword_only(row: dict[str, Any], *, profile_name: str | None = "unset") -> None:
        calls.append((row["id"],))

    return {
        "one": one,
        "two": two,
        "defaulted": defaulted,
        "star": star,
        "keyword_only": keyword_only,
    }


ARITY_CASES = {
    "one": ("s1",),
    "two": ("s1", None),
    "defaulted": ("s1", None),
    "star": ("s1", None),
    "keyword_only": ("s1",),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(ARITY_CASES))
async def test_process_handoff_gets_the_profile_only_when_it_takes_two_parameters(
    name: str, db: SessionDB
) -> None:
    make_pending(db, "s1")
    calls: list[tuple[Any, ...]] = []
    minimal = types.SimpleNamespace(
        _session_db=AsyncSessionDB(db),
        _running=Ticks(1),
        _process_handoff=recording(calls)[name],
    )
    await within(
        GatewayRunner._handoff_watcher(minimal, interval=0.0, drain_timeout=5.0), "one tick"
    )
    assert calls == [ARITY_CASES[name]]
    assert state_of(db, "s1") == "completed"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("host", "expected"), [(OneParameter, ("s1",)), (TwoParameters, ("s1", None))]
)
async def test_bound_process_handoff_methods(
    host: type, expected: tuple[Any, ...], db: SessionDB
) -> None:
    make_pending(db, "s1")
    runner = host()
    runner._session_db = AsyncSessionDB(db)
    runner._running = Ticks(1)
    await within(GatewayRunner._handoff_watcher(runner, interval=0.0), "one tick")
    assert runner.calls == [expected]


# -- profiles ----------------------------------------------------------------------------------


def profile_home(tmp_path: Path, name: str, *pending: str, idle: Iterable[str] = ()) -> Path:
    """A profile's home with its own state.db holding ``pending`` rows and ``idle`` sessions."""
    home = tmp_path / "profiles" / name
    with SessionDB(home / "state.db") as store:
        make_pending(store, *pending)
        for session_id in idle:
            store.create_session(session_id, "cli")
    return home


@pytest.fixture
def scope_entries(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every home whose scope the watcher enters, via a wrapper it must look up at call time."""
    entered: list[Path] = []
    original = run._async_profile_runtime_scope

    def counting(home: Path) -> Any:
        entered.append(Path(home))
        return original(home)

    monkeypatch.setattr(run, "_async_profile_runtime_scope", counting)
    return entered


@pytest.mark.asyncio
async def test_each_profile_is_served_from_its_own_database(tmp_path: Path, db: SessionDB) -> None:
    make_pending(db, "root-only")
    home_a = profile_home(tmp_path, "a", "a-only", "shared")
    home_b = profile_home(tmp_path, "b", "b-only", "shared")
    seen: list[tuple[str, str | None]] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        seen.append((row["id"], profile_name))
        if (row["id"], profile_name) == ("shared", "a"):
            raise RuntimeError("telegram is down for profile a")

    runner = GatewayRunner(db, handler, profiles=[("a", home_a), ("b", home_b)], interval=0.01)
    await within(runner.run(ticks=2), "two ticks")

    assert sorted(seen, key=repr) == sorted(
        [("root-only", None), ("a-only", "a"), ("shared", "a"), ("b-only", "b"), ("shared", "b")],
        key=repr,
    )
    assert state_of(db, "root-only") == "completed"
    with SessionDB(home_a / "state.db") as store_a, SessionDB(home_b / "state.db") as store_b:
        assert state_of(store_a, "a-only") == "completed"
        assert store_a.get_handoff_state("shared") == {
            "state": "failed",
            "platform": "telegram",
            "error": "telegram is down for profile a",
        }
        assert state_of(store_b, "b-only") == "completed"
        assert state_of(store_b, "shared") == "completed"
        # Nothing leaked across databases.
        assert store_a.get_handoff_state("b-only") is None
        assert store_b.get_handoff_state("a-only") is None
        assert db.get_handoff_state("shared") is None


@pytest.mark.asyncio
async def test_the_profile_living_in_the_launch_home_is_skipped(
    tmp_path: Path, db: SessionDB, isolated_home: Path, scope_entries: list[Path]
) -> None:
    with SessionDB(isolated_home / "state.db") as launch_store:
        make_pending(launch_store, "launch-row")
    home_b = profile_home(tmp_path, "b", "b-row")
    seen: list[tuple[str, str | None]] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        seen.append((row["id"], profile_name))

    (isolated_home / "sub").mkdir()
    profiles = [
        ("home", isolated_home),
        ("home-again", isolated_home / "sub" / ".."),  # the same folder, spelled differently
        ("b", home_b),
    ]
    runner = GatewayRunner(db, handler, profiles=profiles, interval=0.01)
    assert run._handoff_watch_scopes(runner) == [(None, None), ("b", home_b)]

    await within(runner.run(ticks=2), "two ticks")

    assert seen == [("b-row", "b")]
    assert {home.resolve() for home in scope_entries} == {home_b.resolve()}
    with SessionDB(isolated_home / "state.db") as launch_store:
        assert state_of(launch_store, "launch-row") == "pending"


@pytest.mark.asyncio
async def test_a_profile_with_nothing_pending_is_not_entered_by_a_tick(
    tmp_path: Path, db: SessionDB, scope_entries: list[Path]
) -> None:
    home_a = profile_home(tmp_path, "a", "a-row")
    home_b = profile_home(tmp_path, "b", idle=["b-row"])
    seen: list[tuple[str, str | None]] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        seen.append((row["id"], profile_name))

    def on_tick(n: int) -> None:
        if n == 5:  # b gets work only now: the next tick must enter b, once
            with SessionDB(home_b / "state.db") as store_b:
                assert store_b.request_handoff("b-row", "discord") is True

    runner = GatewayRunner(db, handler, profiles=[("a", home_a), ("b", home_b)])
    runner._running = Ticks(8, on_tick=on_tick)
    await within(runner._handoff_watcher(interval=0.005, drain_timeout=5.0), "eight ticks")

    entries = Counter(home.resolve() for home in scope_entries)
    # Once each at startup (the reclaim), then once per tick that found something pending.
    assert entries == {home_a.resolve(): 2, home_b.resolve(): 2}
    assert sorted(seen) == [("a-row", "a"), ("b-row", "b")]
    with SessionDB(home_b / "state.db") as store_b:
        assert state_of(store_b, "b-row") == "completed"


@pytest.mark.asyncio
async def test_polling_creates_no_database_for_a_profile_without_one(
    tmp_path: Path, db: SessionDB
) -> None:
    empty_home = tmp_path / "profiles" / "empty"
    empty_home.mkdir(parents=True)
    missing_home = tmp_path / "profiles" / "missing"

    delivered: list[str] = []  # the watcher would swallow an assertion raised in the handler

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    runner = GatewayRunner(
        db, handler, profiles=[("empty", empty_home), ("missing", missing_home)], interval=0.005
    )
    await within(runner.run(ticks=3), "three ticks")

    assert delivered == []  # nothing is pending anywhere
    assert list(empty_home.iterdir()) == []
    assert not missing_home.exists()


@pytest.mark.asyncio
async def test_a_failing_scope_resolver_degrades_to_the_root_store(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_pending(db, "root-row")

    def broken(_config: Any) -> list[tuple[str, Path]]:
        raise OSError("profiles.yaml is unreadable")

    monkeypatch.setattr(run, "_multiplex_profile_homes", broken)
    seen: list[tuple[str, str | None]] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        seen.append((row["id"], profile_name))

    runner = GatewayRunner(db, handler, profiles=[("a", Path("/nonexistent/a"))], interval=0.01)
    await within(runner.run(ticks=1), "one tick")
    assert seen == [("root-row", None)]


# -- the event loop is never blocked by store work ---------------------------------------------

BIG = 200_000
BIG_PENDING = 200  # every 1000th session has a handoff pending


def build_big_store(path: Path) -> None:
    """200,000 sessions in one transaction through the store's own write path."""
    with SessionDB(path) as store:
        now = time.time()
        rows = [
            (
                f"big-{i:06d}",
                "cli",
                now - BIG + i,
                "pending" if i % 1000 == 0 else ("completed" if i % 7 == 0 else None),
                "telegram" if i % 1000 == 0 or i % 7 == 0 else None,
                now if i % 1000 == 0 else None,
            )
            for i in range(BIG)
        ]
        store._execute_write(
            lambda conn: conn.execute(
                "INSERT INTO sessions (id, source, started_at, handoff_state, handoff_platform,"
                " handoff_requested_at) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        )


class Ticker:
    """Ticks on the event loop every ``period`` s, recording how late each tick woke up.

    Worker threads can wait for the ticker to advance: if the loop were blocked, it could not.
    """

    def __init__(self, period: float = 0.001) -> None:
        self.period = period
        self.count = 0
        self.lags: list[float] = []
        self.changed = threading.Condition()
        self.stopped = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.period
        while not self.stopped:
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            self.lags.append(now - due)
            with self.changed:
                self.count += 1
                self.changed.notify_all()
            due = now + self.period

    def wait_for_ticks(self, since: int, ticks: int, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.count >= since + ticks, timeout)


def public_methods(cls: type) -> list[str]:
    return [
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    ]


# The calls a tick makes whatever is pending (polls, probes, the startup reclaim): each is held
# open until the ticker has ticked HELD_TICKS times, which it can only do if the event loop is
# free while the store works. Claims and completions run unheld, so their natural cost shows.
HELD_CALLS = frozenset(
    {
        "handoff_change_token",
        "list_pending_handoffs",
        "has_pending_handoffs",
        "reclaim_stale_running_handoffs",
    }
)
HELD_TICKS = 3


def recording_store_class(
    ticker: Ticker, calls: list[dict[str, Any]], loop_thread: int
) -> type[SessionDB]:
    """A SessionDB recording, for every method call, its thread and the ticker's count."""

    def record(name: str, started: float, ticks_before: int, held: bool | None) -> None:
        calls.append(
            {
                "name": name,
                "thread": threading.get_ident(),
                "started": started,
                "ended": time.perf_counter(),
                "ticks_before": ticks_before,
                "ticks_after": ticker.count,
                "held": held,
            }
        )

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def recorded(self: SessionDB, *args: Any, **kwargs: Any) -> Any:
            started, ticks_before, held = time.perf_counter(), ticker.count, None
            try:
                result = method(self, *args, **kwargs)
                if name in HELD_CALLS and threading.get_ident() != loop_thread:
                    held = ticker.wait_for_ticks(ticks_before, HELD_TICKS, timeout=10.0)
                return result
            finally:
                record(name, started, ticks_before, held)

        return recorded

    namespace: dict[str, Any] = {
        name: wrap(name, getattr(SessionDB, name)) for name in public_methods(SessionDB)
    }
    namespace["__init__"] = wrap("__init__", SessionDB.__init__)
    return type("RecordingSessionDB", (SessionDB,), namespace)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@pytest.mark.asyncio
async def test_store_work_never_runs_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big_path = tmp_path / "big" / "state.db"
    build_big_store(big_path)
    home_p = profile_home(tmp_path, "p", "p-row")

    ticker = Ticker()
    calls: list[dict[str, Any]] = []
    loop_thread = threading.get_ident()
    recording = recording_store_class(ticker, calls, loop_thread)
    root = await asyncio.to_thread(recording, big_path)
    calls.clear()  # from here on, only what the watcher does
    # Profile stores are opened by the watcher itself, through the module's SessionDB.
    monkeypatch.setattr(run, "SessionDB", recording)
    delivered: list[str] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    runner = GatewayRunner(
        root, handler, profiles=[("p", home_p)], interval=0.005, max_concurrency=None
    )
    ticking = asyncio.create_task(ticker.run())
    try:
        await within(runner.run(ticks=25), "25 ticks over the big store")
    finally:
        ticker.stopped = True
        await ticking
        await runner.close()

    with SessionDB(big_path) as check:
        assert check.handoff_stats()["counts"]["pending"] == 0
        assert len(check.list_handoffs("completed", limit=None)) >= BIG_PENDING
    assert len(delivered) == BIG_PENDING + 1

    names = Counter(call["name"] for call in calls)
    for expected in (
        "__init__",  # the profile's store, opened by the watcher
        "reclaim_stale_running_handoffs",
        "claim_next_handoffs",  # a tick's rows, with their turn leases, in one call
        "get_transcripts",
        "finish_handoffs",  # the deliveries that ended together, in one call
        "has_pending_handoffs",  # the profile's idle gate
    ):
        assert names[expected] > 0, f"the watcher never called {expected}: {dict(names)}"

    on_loop = [call["name"] for call in calls if call["thread"] == loop_thread]
    assert on_loop == [], f"store calls ran on the event-loop thread: {Counter(on_loop)}"

    held = [call for call in calls if call["held"] is not None]
    assert len(held) >= 25, f"expected a held poll per tick at least, got {len(held)}"
    stalled = [call["name"] for call in held if not call["held"]]
    assert stalled == [], f"the event loop stopped ticking during store calls: {stalled}"

    # For people: how the loop fared, and how the slowest unheld calls overlapped the ticker.
    lags_ms = [lag * 1000 for lag in ticker.lags]
    unheld = sorted(
        (call for call in calls if call["held"] is None),
        key=lambda call: call["ended"] - call["started"],
        reverse=True,
    )
    print(
        f"\nticker: {len(lags_ms)} ticks, lag p50 {statistics.median(lags_ms):.2f} ms, "
        f"p99 {percentile(lags_ms, 0.99):.2f} ms, max {max(lags_ms):.2f} ms; "
        f"{len(calls)} store calls ({len(held)} held)"
    )
    for call in unheld[:5]:
        print(
            f"  {call['name']:<32} {1000 * (call['ended'] - call['started']):7.2f} ms, "
            f"{call['ticks_after'] - call['ticks_before']} ticker ticks during it"
        )


# -- PostgreSQL ----------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("backend_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("kind", ["SessionDB", "NativeAsyncSessionDB"])
async def test_delivery_on_postgresql(kind: str, backend_url: URL) -> None:
    with SessionDB(url=backend_url) as setup:
        make_pending(setup, "ok", "bad")
        setup.create_session("stranded", "cli")
        assert setup.request_handoff("stranded", "slack") is True
        assert setup.claim_handoff("stranded") is True

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        if row["id"] == "bad":
            raise RuntimeError("refused")

    runner = GatewayRunner(open_store(kind, backend_url), handler, interval=0.01)
    try:
        await within(runner.run(ticks=1), "one tick on PostgreSQL")
    finally:
        await runner.close()

    with SessionDB(url=backend_url) as check:
        assert state_of(check, "ok") == "completed"
        assert check.get_handoff_state("bad") == {
            "state": "failed",
            "platform": "telegram",
            "error": "refused",
        }
        stranded = check.get_handoff_state("stranded")
        assert stranded is not None
        assert stranded["state"] == "failed"
        assert "/handoff" in stranded["error"]
