"""Event-loop lag while a watcher serves 1,000 handoffs on a 1,000,000-session SQLite store.

Requirement (design, watcher: "never blocks the event loop"; issue 6): a gateway's event loop
stays responsive while its watcher lists, claims, delivers and completes handoffs.

A ticker task sleeps :data:`PERIOD` seconds again and again and records how late each wake-up
is (``lag = elapsed - PERIOD``). Contenders, alternating round by round in one process:

* ``no watcher`` (the baseline): the ticker alone on the loop, for :attr:`Settings.idle_s`.
* ``GatewayRunner serving``: the ticker while a :class:`gateway.run.GatewayRunner` (the CLI's
  setup: a ``SessionDB`` with an owner and a lease, wrapped in ``AsyncSessionDB``, default
  interval and ``max_concurrency``) serves :attr:`Settings.handoffs` pending rows with an
  instant handler, from its start until the last row is completed. The rows are requested
  through the store before each round (completed rows can be requested again).

Each round yields the ticker's p50, p99 and max lag; the table shows, per statistic, the
median over rounds (and p90 and min) against the idle loop's. The note gives deliveries per
second. After each round every served row must be ``completed`` and have been delivered exactly
once. Quick mode: 100,000 sessions and 300 handoffs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.run import GatewayRunner
from hermes_state import SessionDB

from . import fixtures
from .common import BenchmarkError, Result, Samples, percentile, summarize

__all__ = ["run"]

NAME: Final = "loop_lag"
PERIOD: Final = 0.005
IDLE: Final = "no watcher"
SERVING: Final = "GatewayRunner serving"
STATISTICS: Final = {"p50": 50.0, "p99": 99.0, "max": 100.0}


@dataclass(frozen=True, slots=True)
class Settings:
    sessions: int
    handoffs: int
    rounds: int
    idle_s: float


FULL: Final = Settings(sessions=1_000_000, handoffs=1_000, rounds=5, idle_s=2.0)
QUICK: Final = Settings(sessions=100_000, handoffs=300, rounds=3, idle_s=1.0)


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    folder = fixtures.scratch() / NAME
    path = fixtures.copy_sqlite(fixtures.sqlite_sessions(settings.sessions), folder / "lag.db")
    ids = _served_ids(settings)
    lags: dict[str, list[list[float]]] = {IDLE: [], SERVING: []}
    rates: list[float] = []
    # The watcher logs every claim and completion at INFO; a gateway's handler would too,
    # but here the log lines would measure the terminal.
    logging.getLogger("gateway.run").setLevel(logging.WARNING)
    for index in range(settings.rounds):
        order = (IDLE, SERVING) if index % 2 == 0 else (SERVING, IDLE)
        for contender in order:
            if contender == IDLE:
                lags[IDLE].append(asyncio.run(_idle(settings.idle_s)))
            else:
                _request_all(path, ids)
                round_lags, rate = asyncio.run(_serving(path, ids))
                lags[SERVING].append(round_lags)
                rates.append(rate)
    return _results(settings, lags, rates)


def _served_ids(settings: Settings) -> list[str]:
    """Rows spread over the table, none with a handoff yet (one in 20 has a completed one)."""
    step = settings.sessions // settings.handoffs
    indexes = [index * step + 1 for index in range(settings.handoffs)]
    if any(index % fixtures.COMPLETED_EVERY == 0 for index in indexes):
        indexes = [index + 1 for index in indexes]
    return fixtures.session_ids(indexes)


def _request_all(path: Path, ids: list[str]) -> None:
    with SessionDB(path) as store:
        for session_id in ids:
            if not store.request_handoff(session_id, fixtures.PLATFORM):
                raise BenchmarkError(f"could not request a handoff of {session_id}")


class _Ticker:
    """Sleeps ``PERIOD`` again and again, recording how late each wake-up is."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    async def run(self) -> None:
        while not self._stopped:
            started = time.perf_counter()
            await asyncio.sleep(PERIOD)
            self.lags.append(time.perf_counter() - started - PERIOD)


async def _idle(seconds: float) -> list[float]:
    ticker = _Ticker()
    task = asyncio.ensure_future(ticker.run())
    await asyncio.sleep(seconds)
    ticker.stop()
    await task
    return ticker.lags


async def _serving(path: Path, ids: list[str]) -> tuple[list[float], float]:
    """Serve every pending row with an instant handler; the ticker's lags and deliveries/s."""
    delivered: Counter[str] = Counter()
    done = asyncio.Event()
    wanted = len(ids)

    async def handler(row: Mapping[str, Any], _profile: str | None) -> None:
        delivered[row["id"]] += 1
        if sum(delivered.values()) >= wanted:
            done.set()

    store = SessionDB(path, owner="bench-gateway", lease_seconds=60.0)
    runner = GatewayRunner(store, handler)
    ticker = _Ticker()
    ticking = asyncio.ensure_future(ticker.run())
    await asyncio.sleep(0.2)  # let the ticker settle; its first lags are the loop's own start
    ticker.lags.clear()
    started = time.perf_counter()
    serving = asyncio.ensure_future(runner.run())
    try:
        await asyncio.wait_for(done.wait(), timeout=600)
        runner.stop()
        await serving
    finally:
        elapsed = time.perf_counter() - started
        ticker.stop()
        await ticking
        if not serving.done():
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        await runner.close()
    _check_served(path, ids, delivered)
    return ticker.lags, wanted / elapsed


def _check_served(path: Path, ids: list[str], delivered: Counter[str]) -> None:
    twice = sorted(session_id for session_id, count in delivered.items() if count != 1)
    if twice or set(delivered) != set(ids):
        raise BenchmarkError(
            f"delivered {len(delivered)} of {len(ids)} rows; more than once: {twice[:10]}"
        )
    with SessionDB(path) as store:
        states = Counter(
            (store.get_handoff_state(session_id) or {}).get("state") for session_id in ids
        )
    if states != Counter({"completed": len(ids)}):
        raise BenchmarkError(f"after serving, the rows are {dict(states)}, not all completed")


def _results(
    settings: Settings, lags: Mapping[str, list[list[float]]], rates: list[float]
) -> list[Result]:
    case = (
        f"{PERIOD * 1000:g} ms ticker, {settings.handoffs:,} handoffs "
        f"@ {settings.sessions:,} sessions [sqlite]"
    )
    ticks = {name: sum(len(one) for one in rounds) for name, rounds in lags.items()}
    results = []
    for label, q in STATISTICS.items():
        samples: dict[str, Samples] = {
            name: [percentile(one, q) for one in rounds] for name, rounds in lags.items()
        }
        notes = {IDLE: f"{ticks[IDLE]:,} ticks", SERVING: f"{ticks[SERVING]:,} ticks"}
        if label == "p50":
            notes[SERVING] += f"; {statistics.median(rates):,.0f} deliveries/s (median of rounds)"
        results.extend(
            summarize(
                NAME,
                f"lag {label}, {case}",
                samples,
                baseline=IDLE,
                ops_per_round=1,
                notes=notes,
            )
        )
    return results
