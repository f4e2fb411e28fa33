"""The watcher honours turns and sources, obeys the writer policy, and supervises its side tasks.

Most tests drive ``GatewayRunner._handoff_watcher`` on a minimal runner with stand-in stores
(the way the founding tests do), so each behaviour is pinned on the duck-typed contract; a few
use the real ``GatewayRunner`` on real SQLite files.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

import gateway.run as run
from gateway.run import GatewayRunner, SideTaskFailed
from hermes_state import SessionDB
from tests.support.processes import DEADLINE, eventually
from tests.support.stores import make_pending

pytestmark = pytest.mark.asyncio


def ticks(count: int) -> Any:
    """A ``_running`` flag true for ``count`` reads, then false."""
    states = iter([True] * count)

    class Running:
        def __bool__(self) -> bool:
            return next(states, False)

    return Running()


async def within(awaitable: Awaitable[Any], what: str = "the watcher") -> Any:
    try:
        return await asyncio.wait_for(awaitable, DEADLINE)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


@pytest.fixture(autouse=True)
def root_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "_handoff_watch_scopes", lambda _runner: [(None, None)])
    monkeypatch.delenv(run.LEGACY_HANDOFF_ENV, raising=False)


class LeaseStore:
    """One pending row; records every call; its turn lease answers as the test says."""

    def __init__(self, *, turn_answers: list[bool] | None = None, ids: tuple[str, ...] = ("s",)):
        self.turn_answers = list(turn_answers or [])
        self.ids = list(ids)
        self.calls: list[tuple[str, ...]] = []
        self.claimed: list[str] = []

    async def list_pending_handoffs(self) -> list[dict[str, Any]]:
        self.calls.append(("list",))
        return [{"id": sid} for sid in self.ids if sid not in self.claimed]

    async def try_acquire_session_turn_lease(
        self, sid: str, holder: str, *, ttl_seconds: float = 300.0, patience_s: Any = None
    ) -> bool:
        self.calls.append(("acquire", sid))
        return self.turn_answers.pop(0) if self.turn_answers else True

    async def release_session_turn_lease(self, sid: str, holder: str) -> None:
        self.calls.append(("release", sid))

    async def claim_handoff(self, sid: str) -> bool:
        self.calls.append(("claim", sid))
        if sid in self.claimed:
            return False
        self.claimed.append(sid)
        return True

    async def complete_handoff(self, sid: str) -> bool:
        self.calls.append(("complete", sid))
        return True

    async def fail_handoff(self, sid: str, error: str) -> bool:
        self.calls.append(("fail", sid, error))
        return True

    def names(self) -> list[str]:
        return [call[0] for call in self.calls if call[0] != "list"]


def minimal_runner(db: Any, process: Any, count: int, **extra: Any) -> Any:
    return types.SimpleNamespace(
        _session_db=db, _running=ticks(count), _process_handoff=process, **extra
    )


async def delivered(row: dict[str, Any], profile_name: str | None = None) -> None:
    return None


# -- the turn lease ------------------------------------------------------------------------------


async def test_a_held_turn_leaves_the_row_pending_for_a_later_tick() -> None:
    db = LeaseStore(turn_answers=[False, False, True])
    runner = minimal_runner(db, delivered, 4)

    await within(run.GatewayRunner._handoff_watcher(runner, interval=0.0, drain_timeout=5.0))

    # Not acquired: no claim, nothing to release; acquired: claim, deliver, release.
    assert db.names() == ["acquire", "acquire", "acquire", "claim", "complete", "release"]


async def test_the_turn_is_released_after_a_failed_delivery() -> None:
    db = LeaseStore()

    async def fails(row: dict[str, Any]) -> None:
        raise RuntimeError("the platform said no")

    await within(run.GatewayRunner._handoff_watcher(minimal_runner(db, fails, 1), interval=0.0))

    assert db.names() == ["acquire", "claim", "fail", "release"]


async def test_the_turn_is_released_when_the_delivery_is_cancelled() -> None:
    db = LeaseStore()
    started = asyncio.Event()

    async def hangs(row: dict[str, Any]) -> None:
        started.set()
        await asyncio.Event().wait()

    await within(
        run.GatewayRunner._handoff_watcher(
            minimal_runner(db, hangs, 1), interval=0.0, drain_timeout=0.01
        )
    )

    assert started.is_set()
    # Cancelled: the row stays running (no complete, no fail), but the turn is given back.
    assert db.names() == ["acquire", "claim", "release"]


async def test_a_lost_claim_gives_the_turn_back() -> None:
    db = LeaseStore()
    db.claimed.append("s")  # another gateway won it after the listing
    db.ids = ["s"]

    async def lists_it_anyway() -> list[dict[str, Any]]:
        return [{"id": "s"}]

    db.list_pending_handoffs = lists_it_anyway  # type: ignore[method-assign]
    await within(run.GatewayRunner._handoff_watcher(minimal_runner(db, delivered, 1), interval=0.0))

    assert db.names() == ["acquire", "claim", "release"]


async def test_the_turn_lease_is_refreshed_while_the_delivery_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run, "TURN_LEASE_SECONDS", 0.03)
    db = LeaseStore()
    refreshed: list[str] = []
    release = asyncio.Event()

    async def refresh(sid: str, holder: str, *, ttl_seconds: float = 300.0) -> bool:
        refreshed.append(sid)
        if len(refreshed) >= 3:
            release.set()
        return True

    db.refresh_session_turn_lease = refresh  # type: ignore[attr-defined]

    async def slow(row: dict[str, Any]) -> None:
        await release.wait()

    await within(
        run.GatewayRunner._handoff_watcher(
            minimal_runner(db, slow, 1), interval=0.0, drain_timeout=DEADLINE
        )
    )

    assert refreshed[:3] == ["s", "s", "s"]
    count = len(refreshed)
    await asyncio.sleep(0.1)
    assert len(refreshed) == count, "refreshed after the delivery ended"


async def test_a_real_local_turn_keeps_the_gateway_off_its_conversation(tmp_path: Path) -> None:
    """On a real store: a turn holding the conversation's lease defers the handoff; once the
    turn releases it the next tick delivers, and the gateway's own lease is gone afterwards."""
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("root", "cli", end_reason="compression")
        db.create_session("segment", "cli", parent_session_id="root")
        make_pending(db, "segment")
        assert db.try_acquire_session_turn_lease("root", "local-turn") is True
        delivered_rows: list[str] = []

        def on_tick(tick: int) -> None:
            if tick == 3:
                db.release_session_turn_lease("segment", "local-turn")

        async def handler(row: dict[str, Any], profile_name: str | None) -> None:
            delivered_rows.append(row["id"])

        runner = GatewayRunner(SessionDB(tmp_path / "state.db"), handler)
        states = iter(range(1, 7))

        class Running:
            def __bool__(self) -> bool:
                tick = next(states, None)
                if tick is None:
                    return False
                on_tick(tick)
                return True

        runner._running = Running()
        try:
            await within(runner._handoff_watcher(interval=0.01, drain_timeout=DEADLINE))
        finally:
            await runner.close()

        assert delivered_rows == ["segment"]
        assert db.get_handoff_state("segment") == {
            "state": "completed",
            "platform": "telegram",
            "error": None,
        }
        assert db.try_acquire_session_turn_lease("root", "next-local-turn") is True


@pytest.mark.parametrize(
    ("lease_seconds", "turn_seconds"), [(None, 60.0), (6.0, 6.0), (600.0, 60.0)]
)
async def test_a_deliverys_turn_lease_lasts_no_longer_than_its_claims_lease(
    tmp_path: Path, lease_seconds: float | None, turn_seconds: float
) -> None:
    """A gateway that dies holds its conversations' turn leases until they expire: no longer
    than its claims' lease, so a re-requested handoff is not kept waiting once the row is
    reclaimed. Read from the lease table while the delivery runs."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        make_pending(db, "s")
    seen: list[float] = []

    async def handler(row: dict[str, Any], profile_name: str | None) -> None:
        with SessionDB(path) as reader:
            (expires_at,) = reader._conn.execute(
                "SELECT expires_at FROM session_turn_leases WHERE conversation_id = 's'"
            ).fetchone()
        seen.append(expires_at - row["handoff_claimed_at"])

    owner = {} if lease_seconds is None else {"owner": "gw", "lease_seconds": lease_seconds}
    runner = GatewayRunner(SessionDB(path, **owner), handler)
    runner._running = ticks(2)
    try:
        await within(runner._handoff_watcher(interval=0.01, drain_timeout=DEADLINE))
    finally:
        await runner.close()
    assert len(seen) == 1
    assert seen[0] == pytest.approx(turn_seconds, abs=1.0)


# -- the source reservation ----------------------------------------------------------------------


async def test_the_source_is_reserved_before_the_claim_and_released_after_delivery() -> None:
    order: list[str] = []
    db = LeaseStore()
    real_claim = db.claim_handoff

    async def claim(sid: str) -> bool:
        order.append("claim")
        return await real_claim(sid)

    db.claim_handoff = claim  # type: ignore[method-assign]

    async def process(row: dict[str, Any], profile_name: str | None = None) -> None:
        order.append("deliver")

    def reserve(sid: str) -> tuple[str, int]:
        order.append("reserve")
        return ("source", 7)

    async def release(value: Any) -> None:  # async works as well as sync
        order.append(f"release {value}")

    runner = minimal_runner(
        db,
        process,
        1,
        _reserve_handoff_source=reserve,
        _release_handoff_source_reservation=release,
    )
    await within(run.GatewayRunner._handoff_watcher(runner, interval=0.0))

    assert order == ["reserve", "claim", "deliver", "release ('source', 7)"]


async def test_a_claim_error_releases_the_reservation_and_the_turn() -> None:
    db = LeaseStore()

    async def broken_claim(sid: str) -> bool:
        raise RuntimeError("database is locked")

    db.claim_handoff = broken_claim  # type: ignore[method-assign]
    released: list[Any] = []
    runner = minimal_runner(
        db,
        delivered,
        1,
        _reserve_handoff_source=lambda sid: ("source", 8),
        _release_handoff_source_reservation=released.append,
    )
    await within(run.GatewayRunner._handoff_watcher(runner, interval=0.0))

    assert released == [("source", 8)]
    assert db.names() == ["acquire", "release"]


async def test_a_delivery_that_cannot_start_fails_the_row_and_gives_everything_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = LeaseStore()
    released: list[Any] = []
    runner = minimal_runner(
        db,
        delivered,
        1,
        _reserve_handoff_source=lambda sid: ("source", 9),
        _release_handoff_source_reservation=released.append,
    )

    def no_tasks(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("cannot start tasks")

    monkeypatch.setattr(run.asyncio, "ensure_future", no_tasks)
    await within(run.GatewayRunner._handoff_watcher(runner, interval=0.0))

    assert released == [("source", 9)]
    assert db.names() == ["acquire", "claim", "fail", "release"]
    failure = next(call for call in db.calls if call[0] == "fail")
    assert "cannot start tasks" in failure[2]


async def test_a_session_whose_turn_runs_in_this_process_is_left_for_later() -> None:
    db = LeaseStore()
    busy = iter([True, True, False])
    runner = minimal_runner(
        db,
        delivered,
        4,
        session_store=types.SimpleNamespace(
            lookup_by_session_id=lambda sid: types.SimpleNamespace(session_key=f"key-{sid}")
        ),
        _is_session_running=lambda key: next(busy, False),
    )
    await within(run.GatewayRunner._handoff_watcher(runner, interval=0.0))

    assert db.claimed == ["s"]
    assert sum(1 for call in db.calls if call[0] == "list") >= 3


# -- the writer policy ---------------------------------------------------------------------------


async def test_the_writer_policy_makes_the_watcher_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(run.LEGACY_HANDOFF_ENV, "off")
    assert run._legacy_handoff_forbidden_by_writer_policy() is True
    db = LeaseStore()
    reclaims: list[str] = []

    async def reclaim(error: str) -> list[str]:
        reclaims.append(error)
        return []

    db.reclaim_stale_running_handoffs = reclaim  # type: ignore[attr-defined]
    await within(run.GatewayRunner._handoff_watcher(minimal_runner(db, delivered, 3), interval=0.0))

    assert db.calls == []
    assert reclaims == []


async def test_the_policy_is_read_at_call_time_and_can_be_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = iter([True, True, False])
    monkeypatch.setattr(
        run, "_legacy_handoff_forbidden_by_writer_policy", lambda: next(answers, False)
    )
    db = LeaseStore()

    await within(run.GatewayRunner._handoff_watcher(minimal_runner(db, delivered, 3), interval=0))

    assert db.claimed == ["s"]


async def test_process_handoff_refuses_under_the_writer_policy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    runner = GatewayRunner(tmp_path / "state.db", lambda row, profile: calls.append(row["id"]))
    try:
        monkeypatch.setenv(run.LEGACY_HANDOFF_ENV, "off")
        with pytest.raises(RuntimeError, match="legacy handoff is disabled"):
            await runner._process_handoff({"id": "s"})
        monkeypatch.setenv(run.LEGACY_HANDOFF_ENV, "on")
        await runner._process_handoff({"id": "s"})
    finally:
        await runner.close()
    assert calls == ["s"]


# -- the profile idle gate -----------------------------------------------------------------------


async def test_a_profile_that_cannot_be_probed_is_polled_inside_its_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.undo()  # the real scope resolver, over real profile homes
    entered: list[Path] = []
    original = run._async_profile_runtime_scope

    def counting(home: Path) -> Any:
        entered.append(Path(home))
        return original(home)

    monkeypatch.setattr(run, "_async_profile_runtime_scope", counting)
    absent = tmp_path / "absent"
    idle = tmp_path / "idle"
    broken = tmp_path / "broken"
    with SessionDB(idle / "state.db") as store:
        store.create_session("nothing-pending", "cli")
    broken.mkdir()
    (broken / "state.db").write_text("not a database at all, " * 100)

    runner = GatewayRunner(
        tmp_path / "root" / "state.db",
        delivered,
        profiles=[("absent", absent), ("idle", idle), ("broken", broken)],
    )
    runner._running = ticks(3)
    try:
        await within(runner._handoff_watcher(interval=0.0, drain_timeout=1.0))
    finally:
        await runner.close()

    counts = {home.name: entered.count(home) for home in (absent, idle, broken)}
    # Startup reclaim enters each once; then the unprobeable ones on every tick, the idle one
    # never.
    assert counts == {"absent": 4, "idle": 1, "broken": 4}
    assert not absent.exists(), "probing must not create a profile's database"


# -- the runner owns its profile stores ----------------------------------------------------------


async def test_close_closes_the_profile_stores_the_runner_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.undo()
    opened: list[Any] = []

    class Recording(SessionDB):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.closed = False
            opened.append(self)

        def close(self) -> None:
            self.closed = True
            super().close()

    monkeypatch.setattr(run, "SessionDB", Recording)
    home = tmp_path / "profile"
    with SessionDB(home / "state.db") as store:
        make_pending(store, "p-row")
    runner = GatewayRunner(tmp_path / "root.db", delivered, profiles=[("p", home)], interval=0.01)
    await within(runner.run(ticks=2))
    profile_stores = [db for db in opened if db.where.endswith(str(home / "state.db"))]
    assert len(profile_stores) == 1, "one store per profile, reused across ticks"
    assert not profile_stores[0].closed

    await runner.close()

    assert all(db.closed for db in opened)
    assert not hasattr(run, "_profile_stores"), "no module-level cache of stores"


# -- supervision ---------------------------------------------------------------------------------


async def test_a_crashed_side_task_is_restarted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(run, "RESTART_DELAY", 0.001)
    starts: list[int] = []
    steady = asyncio.Event()

    async def flaky() -> None:
        starts.append(len(starts) + 1)
        if len(starts) <= 2:
            raise ConnectionError(f"LISTEN connection lost (start {len(starts)})")
        steady.set()
        await asyncio.Event().wait()

    db = LeaseStore(ids=())

    class Running:
        def __bool__(self) -> bool:
            return not steady.is_set()

    runner = types.SimpleNamespace(
        _session_db=db,
        _running=Running(),
        _process_handoff=delivered,
        _handoff_side_tasks={"listen": flaky},
        _handoff_wakeup=asyncio.Event(),
    )
    with caplog.at_level(logging.ERROR, logger="gateway.run"):
        await within(run.GatewayRunner._handoff_watcher(runner, interval=0.01))

    assert starts == [1, 2, 3]
    restarts = [r for r in caplog.records if "side task listen crashed; restarting" in r.message]
    assert len(restarts) == 2


async def test_a_side_task_that_keeps_crashing_stops_the_watcher_loudly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(run, "RESTART_DELAY", 0.001)
    db = LeaseStore(ids=())
    finished = asyncio.Event()

    async def always_broken() -> None:
        raise ValueError("corrupt state")

    async def slow(row: dict[str, Any]) -> None:
        await asyncio.sleep(0.05)
        finished.set()

    db.ids = ["in-flight"]
    runner = types.SimpleNamespace(
        _session_db=db,
        _running=True,  # only the side task's failure can stop this watcher
        _process_handoff=slow,
        _handoff_side_tasks={"probe": always_broken},
        _handoff_wakeup=asyncio.Event(),
    )
    with (
        caplog.at_level(logging.ERROR, logger="gateway.run"),
        pytest.raises(SideTaskFailed, match="probe keeps crashing"),
    ):
        await within(run.GatewayRunner._handoff_watcher(runner, interval=3600.0))

    assert any(r.levelno == logging.CRITICAL for r in caplog.records)
    assert finished.is_set(), "the delivery in flight was drained before stopping"


async def test_the_heartbeat_says_what_the_watcher_watches(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = LeaseStore(ids=("a", "b"))
    release = asyncio.Event()

    async def slow(row: dict[str, Any]) -> None:
        await release.wait()

    runner = types.SimpleNamespace(
        _session_db=db,
        _running=True,
        _process_handoff=slow,
        _handoff_heartbeat=0.01,
        _handoff_wakeup=asyncio.Event(),
    )
    with caplog.at_level(logging.INFO, logger="gateway.run"):
        watcher = asyncio.create_task(
            run.GatewayRunner._handoff_watcher(runner, interval=3600.0, drain_timeout=DEADLINE)
        )

        def heartbeat_seen() -> bool:
            return any("2 in flight" in r.message for r in caplog.records)

        await eventually(heartbeat_seen, "a heartbeat")
        runner._running = False
        release.set()
        runner._handoff_wakeup.set()
        await within(watcher)

    beat = next(r.message for r in caplog.records if "2 in flight" in r.message)
    assert "watcher alive: 1 scope(s)" in beat
    assert "last tick" in beat


async def test_two_segments_of_one_conversation_are_delivered_one_after_the_other(
    tmp_path: Path,
) -> None:
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("root", "cli", started_at=1.0)
        db.create_session("segment", "cli", started_at=2.0, parent_session_id="root")
        make_pending(db, "root", "segment")
        db._execute_write(
            lambda conn: conn.execute(
                "UPDATE sessions SET end_reason = 'compression' WHERE id = 'root'"
            )
        )
        first_running = asyncio.Event()
        release_first = asyncio.Event()
        order: list[str] = []
        ticks_while_first_runs: list[int] = []

        async def handler(row: dict[str, Any], profile_name: str | None) -> None:
            order.append(f"start {row['id']}")
            if row["id"] == "root":
                first_running.set()
                await release_first.wait()
            order.append(f"end {row['id']}")

        runner = GatewayRunner(SessionDB(tmp_path / "state.db"), handler, interval=0.01)
        reads = 0

        class Running:
            def __bool__(self) -> bool:
                nonlocal reads
                reads += 1
                if first_running.is_set() and not release_first.is_set():
                    ticks_while_first_runs.append(reads)
                    if len(ticks_while_first_runs) >= 5:
                        release_first.set()
                return "end segment" not in order

        runner._running = Running()
        try:
            await within(runner._handoff_watcher(interval=0.01, drain_timeout=DEADLINE))
        finally:
            await runner.close()

        assert order == ["start root", "end root", "start segment", "end segment"]
        assert db.get_handoff_state("segment")["state"] == "completed"  # type: ignore[index]
