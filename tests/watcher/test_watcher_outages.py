"""The watcher in-process when things go wrong under it: a supervised loop, outcomes kept
through an outage, and outage logging that says each change once.

* An unexpected error out of a tick restarts the loop after a pause (counted in the metrics)
  instead of ending the watcher.
* An outcome the database could not take because it was away is tried again, and recorded
  once it is back: the row completes, its delivery reported completed.
* :class:`~hermes_state.outage.Outage` writes one line when trouble starts, one per
  ``report_every`` while it lasts and one when it ends, with pauses that grow to a ceiling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import gateway.run as run
from gateway.run import GatewayRunner
from hermes_state import SessionDB
from hermes_state.errors import DatabaseUnavailableError
from hermes_state.metrics import WatcherMetrics
from hermes_state.outage import Outage
from tests.support.processes import DEADLINE, eventually

AN_HOUR = 3600.0


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


def state_of(db: SessionDB, session_id: str) -> str | None:
    handoff = db.get_handoff_state(session_id)
    return None if handoff is None else handoff["state"]


class TickBreaks(WatcherMetrics):
    """Metrics whose tick report raises the first ``times`` times: an error out of a tick
    that no poll handler catches."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.left = times
        self.outcomes: list[str] = []

    def ticked(self, seconds: float) -> None:
        if self.left > 0:
            self.left -= 1
            raise RuntimeError("a bug in a tick")
        super().ticked(seconds)

    def delivered(self, outcome: str, seconds: float) -> None:
        self.outcomes.append(outcome)
        super().delivered(outcome, seconds)


def restarts(metrics: WatcherMetrics) -> float:
    value = metrics.registry.get_sample_value("hermes_state_watch_loop_restarts_total")
    return 0.0 if value is None else value


@pytest.mark.asyncio
async def test_an_error_out_of_a_tick_restarts_the_loop_and_is_counted(
    path: Path, reader: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.run")
    reader.create_session("served", "cli")
    assert reader.request_handoff("served", "telegram")
    metrics = TickBreaks(times=2)
    delivered: list[str] = []

    async def handler(row: Mapping[str, Any], _profile: str | None) -> None:
        delivered.append(row["id"])

    runner = GatewayRunner(SessionDB(path), handler, interval=0.05, metrics=metrics)
    task = asyncio.ensure_future(runner.run())
    try:
        await eventually(lambda: state_of(reader, "served") == "completed", "the delivery")
        await eventually(lambda: restarts(metrics) == 2 and metrics.left == 0, "two restarts")
        await eventually(
            lambda: any("the watch loop works again" in r.getMessage() for r in caplog.records),
            "a clean tick after the restarts",
        )
        assert not task.done(), "the watcher ended on an error in a tick"
    finally:
        runner.stop()
        try:
            await asyncio.wait_for(task, DEADLINE)
        finally:
            await runner.close()
    assert delivered == ["served"]
    assert restarts(metrics) == 2
    lines = [r.getMessage() for r in caplog.records if "the watch loop" in r.getMessage()]
    assert lines[0].startswith("the watch loop failed: a bug in a tick"), lines
    assert any("works again" in line for line in lines), lines
    # A bug (not the database's) deserves its traceback, once.
    tracebacks = [r for r in caplog.records if "the watch loop" in r.getMessage() and r.exc_info]
    assert len(tracebacks) == 1


class FlushAway(SessionDB):
    """A store whose first ``times`` batch finishes find the database away."""

    def __init__(self, *args: Any, times: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.left = times
        self.calls = 0

    def finish_handoffs(self, outcomes: Mapping[str, object], **options: Any) -> dict[str, bool]:
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise DatabaseUnavailableError(
                "cannot open postgresql://u@db/x: connection refused", backend="postgresql"
            )
        return super().finish_handoffs(outcomes, **options)


@pytest.mark.asyncio
async def test_an_outcome_the_database_could_not_take_is_recorded_once_it_is_back(
    path: Path, reader: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.run")
    reader.create_session("kept", "cli")
    assert reader.request_handoff("kept", "telegram")
    store = FlushAway(path, owner="gateway-one", lease_seconds=60.0, times=3)
    metrics = TickBreaks(times=0)
    runs: list[str] = []

    async def handler(row: Mapping[str, Any], _profile: str | None) -> None:
        runs.append(row["id"])

    runner = GatewayRunner(store, handler, interval=AN_HOUR, metrics=metrics)
    task = asyncio.ensure_future(runner.run())
    try:
        await eventually(lambda: state_of(reader, "kept") == "completed", "the retried record")
    finally:
        runner.stop()
        try:
            await asyncio.wait_for(task, DEADLINE)
        finally:
            await runner.close()
    assert runs == ["kept"]
    assert store.calls == 4
    assert metrics.outcomes == ["completed"]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("recording outcomes failed" in m for m in messages) == 1
    assert any("recording outcomes works again" in m for m in messages)
    assert not any("stay running until reclaimed" in m for m in messages)


def test_an_outage_says_each_change_once_with_growing_pauses(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("hermes_state.outage.time.monotonic", lambda: clock[0])
    logger = logging.getLogger("tests.outage")
    caplog.set_level(logging.INFO, logger="tests.outage")
    outage = Outage("the poll", logger, first_delay=0.1, ceiling=2.0, report_every=30.0)
    error = DatabaseUnavailableError("cannot open postgresql://u@db/x:\nrefused")
    pauses = []
    for _ in range(100):  # 100 failures over 100 s
        pauses.append(outage.failed(error))
        clock[0] += 1.0
    outage.succeeded()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 + 3 + 1, lines  # lost, still down at 30/60/90 s, back
    assert lines[0] == (
        "the poll failed: cannot open postgresql://u@db/x: refused; retrying with backoff "
        "(up to 2s apart)"
    )
    assert lines[1].startswith("the poll still failing after 30s (31 failed tries)")
    assert lines[-1] == "the poll works again after 100.0s (100 failed tries)"
    assert not any(r.exc_info for r in caplog.records)  # the database's error: no traceback
    assert 0.05 <= pauses[0] <= 0.1
    assert all(pause <= 2.0 for pause in pauses)
    assert min(pauses[10:]) >= 1.0  # grown to the ceiling, jittered within its upper half


@pytest.mark.asyncio
async def test_an_outcome_still_unrecorded_when_the_watcher_stops_is_left_for_the_reclaim(
    path: Path, reader: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.run")
    reader.create_session("left", "cli")
    assert reader.request_handoff("left", "telegram")
    store = FlushAway(path, owner="gateway-one", lease_seconds=60.0, times=10**6)
    metrics = TickBreaks(times=0)

    async def handler(row: Mapping[str, Any], _profile: str | None) -> None:
        pass

    runner = GatewayRunner(store, handler, interval=AN_HOUR, drain_timeout=0.5, metrics=metrics)
    task = asyncio.ensure_future(runner.run())
    try:
        await eventually(
            lambda: any("recording outcomes failed" in r.getMessage() for r in caplog.records),
            "the first failed record",
        )
        assert not metrics.outcomes  # still waiting for the database, not given up
    finally:
        runner.stop()
        try:
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(task, DEADLINE)
            stopped_after = asyncio.get_running_loop().time() - started
        finally:
            await runner.close()
    assert stopped_after < 10.0  # the drain's patience, plus a last backoff pause
    assert state_of(reader, "left") == "running"  # for the reclaim, as after a crash
    # The drain stopped waiting for it (as for any delivery still in flight); the flusher
    # kept trying through the drain's patience, then gave it up.
    assert metrics.outcomes == ["cancelled"]
    assert any(
        "could not record the outcome of left" in r.getMessage()
        and "stay running until reclaimed" in r.getMessage()
        for r in caplog.records
    )
