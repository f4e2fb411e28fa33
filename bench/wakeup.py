"""Request-to-claim latency across processes: PostgreSQL NOTIFY against polling, SQLite polling.

Requirement (issue 4): with a 10 s poll interval, the median time from ``request_handoff``
returning to the row being ``running`` is under 100 ms on PostgreSQL (LISTEN/NOTIFY wakes the
watcher); polling stays the fallback.

A watcher runs in its own process (``python -m bench.wakeup``, below): a
:class:`gateway.run.GatewayRunner` on a ``SessionDB`` with an owner and a lease, default
``max_concurrency``, whose handler prints the row's id and ``time.time()``: the handler runs
once the claim has committed, so this is the moment the row is known ``running`` (an upper
bound by the task switch). This process requests handoffs at random moments (exponential
gaps) and notes ``time.time()`` when each ``request_handoff`` returns; latency = handler time
minus that. Contenders:

* ``PostgreSQL, polling every 10 s`` (the baseline): wake-ups switched off in the watcher
  process (its runner's ``_start_wakeups`` replaced by a no-op: no LISTEN), so only polling
  (and the re-tick after each delivery) finds requests; latencies spread over the interval.
* ``PostgreSQL, NOTIFY (poll every 10 s)``: the watcher as shipped; measured once its LISTEN
  connection is up.
* ``SQLite, polling every 1 s`` (context): cross-process on SQLite nothing wakes the watcher;
  its idle ticks are the cheap change probe (``PRAGMA data_version``) at a shorter interval.

Without PostgreSQL the SQLite contender is its own baseline. Every request must be claimed
and delivered exactly once (checked). The note gives p99, max and the number of requests; the
NOTIFY row says whether the 100 ms median target is met. Quick mode polls PostgreSQL every
2 s (the NOTIFY contender keeps the 10 s interval) and SQLite every 0.5 s, with fewer requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from sqlalchemy import text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import make_engine, resolve_url

from . import fixtures
from .common import BenchmarkError, Result, format_seconds, percentile, summarize

__all__ = ["run"]

NAME: Final = "wakeup"
TARGET_S: Final = 0.100
WARMUP_ID: Final = "bench_wakeup_warmup"
SESSIONS: Final = 10_000
READY_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class Mode:
    """One contender: where, how often the watcher polls, whether it may be woken."""

    label: str
    backend: str
    interval: float
    wakeups: bool
    requests: int
    #: Mean gap between two requests (exponential gaps: random moments).
    mean_gap: float


def _modes(quick: bool) -> list[Mode]:
    pg_poll = 2.0 if quick else 10.0
    sqlite_poll = 0.5 if quick else 1.0
    return [
        Mode(
            f"PostgreSQL, polling every {pg_poll:g} s",
            "postgresql",
            pg_poll,
            wakeups=False,
            requests=8 if quick else 20,
            mean_gap=2 * pg_poll / (8 if quick else 20),
        ),
        Mode(
            "PostgreSQL, NOTIFY (poll every 10 s)",
            "postgresql",
            10.0,
            wakeups=True,
            requests=15 if quick else 60,
            mean_gap=0.1,
        ),
        Mode(
            f"SQLite, polling every {sqlite_poll:g} s",
            "sqlite",
            sqlite_poll,
            wakeups=True,  # nothing wakes it across processes anyway
            requests=10 if quick else 30,
            mean_gap=10 * sqlite_poll / (10 if quick else 30),
        ),
    ]


def run(quick: bool) -> list[Result]:
    modes = _modes(quick)
    server = fixtures.pg_server()
    if server is None:
        fixtures.skipping("wakeup on PostgreSQL")
        modes = [mode for mode in modes if mode.backend == "sqlite"]
    latencies: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        urls = {"sqlite": _sqlite_database()}
        if server is not None:
            urls["postgresql"] = stack.enter_context(fixtures.server_database(server))
            fixtures.pg_load_sessions(urls["postgresql"], SESSIONS)
        first = 0
        for mode in modes:
            latencies[mode.label] = _measure(mode, urls[mode.backend], first)
            first += mode.requests
    baseline = modes[0].label
    notes = {label: _note(values) for label, values in latencies.items()}
    for mode in modes:
        if mode.backend == "postgresql" and mode.wakeups:
            median = statistics.median(latencies[mode.label])
            verdict = "met" if median < TARGET_S else "MISSED"
            notes[mode.label] += f"; target median < {TARGET_S * 1000:g} ms: {verdict}"
    return summarize(
        NAME,
        "request -> claim, requested from another process",
        latencies,
        baseline=baseline,
        ops_per_round=1,
        notes=notes,
    )


def _note(values: Sequence[float]) -> str:
    return (
        f"p99 {format_seconds(percentile(values, 99))}, max {format_seconds(max(values))}, "
        f"{len(values)} requests"
    )


def _sqlite_database() -> URL:
    path = fixtures.copy_sqlite(
        fixtures.sqlite_sessions(SESSIONS), fixtures.scratch() / NAME / "wakeup.db"
    )
    return resolve_url(path)


# -- one contender -----------------------------------------------------------------------------


def _prepare(url: URL, ids: Sequence[str]) -> None:
    """The requested rows as fresh sessions, and one pending row the watcher's start claims."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO sessions (id, source, started_at, handoff_attempt) "
                    "VALUES (:id, 'bench-wakeup', :at, 0)"
                ),
                [{"id": session_id, "at": 1.8e9 + n} for n, session_id in enumerate(ids)],
            )
            connection.execute(text("DELETE FROM sessions WHERE id = :id"), {"id": WARMUP_ID})
            connection.execute(
                text(
                    "INSERT INTO sessions (id, source, started_at, handoff_state, "
                    "handoff_platform, handoff_requested_at, handoff_attempt) "
                    "VALUES (:id, 'bench-wakeup', 0, 'pending', 'telegram', 0, 0)"
                ),
                {"id": WARMUP_ID},
            )
    finally:
        engine.dispose()


class _Watcher:
    """The watcher process; its output lines arrive on a queue as (line, arrival time)."""

    def __init__(self, url: URL, mode: Mode) -> None:
        command = [
            sys.executable,
            "-m",
            "bench.wakeup",
            url.render_as_string(hide_password=False),
            "--interval",
            str(mode.interval),
        ]
        if not mode.wakeups:
            command.append("--no-wakeup")
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            text=True,
            cwd=fixtures.PROJECT_ROOT,
            env=fixtures.child_environment(),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, wanted: set[str], timeout: float) -> None:
        """Wait until the watcher has printed a line starting with each of ``wanted``."""
        missing = set(wanted)
        deadline = time.monotonic() + timeout
        while missing:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchmarkError(f"the watcher did not print {missing} in time") from None
            if line is None:
                raise BenchmarkError(f"the watcher exited before printing {missing}")
            missing = {prefix for prefix in missing if not line.startswith(prefix)}

    def claims(self, count: int, timeout: float) -> list[tuple[str, float]]:
        found: list[tuple[str, float]] = []
        deadline = time.monotonic() + timeout
        while len(found) < count:
            remaining = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(0.01, remaining))
            except queue.Empty:
                raise BenchmarkError(
                    f"only {len(found)} of {count} requests were claimed within {timeout:g} s"
                ) from None
            if line is None:
                raise BenchmarkError("the watcher exited early")
            word, session_id, at = line.split()
            if word == "claimed":
                found.append((session_id, float(at)))
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(5)


@contextlib.contextmanager
def _watching(url: URL, mode: Mode) -> Iterator[_Watcher]:
    watcher = _Watcher(url, mode)
    try:
        wanted = {f"claimed {WARMUP_ID}"}
        if mode.backend == "postgresql" and mode.wakeups:
            wanted.add("listening")
        watcher.expect(wanted, READY_TIMEOUT)
        yield watcher
    finally:
        watcher.stop()


def _measure(mode: Mode, url: URL, first: int) -> list[float]:
    ids = [f"bench_wakeup_{index:06d}" for index in range(first, first + mode.requests)]
    _prepare(url, ids)
    random.seed(f"{NAME}:{mode.label}")
    requested: dict[str, float] = {}
    with SessionDB(url=url) as store, _watching(url, mode) as watcher:
        time.sleep(0.2)
        for session_id in ids:
            time.sleep(random.expovariate(1 / mode.mean_gap))
            if not store.request_handoff(session_id, fixtures.PLATFORM):
                raise BenchmarkError(f"the request of {session_id} was refused")
            requested[session_id] = time.time()
        claims = watcher.claims(len(ids), timeout=mode.interval + 30)
        time.sleep(0.2)  # a second claim of any row would show up here
        claims.extend(_late_claims(watcher))
        _check(store, ids, claims)
    return [at - requested[session_id] for session_id, at in claims]


def _late_claims(watcher: _Watcher) -> list[tuple[str, float]]:
    extra = []
    with contextlib.suppress(queue.Empty):
        while (line := watcher.lines.get_nowait()) is not None:
            word, session_id, at = line.split()
            if word == "claimed":
                extra.append((session_id, float(at)))
    return extra


def _check(store: SessionDB, ids: Sequence[str], claims: Sequence[tuple[str, float]]) -> None:
    counts = Counter(session_id for session_id, _at in claims)
    if counts != Counter(ids):
        twice = sorted(session_id for session_id, count in counts.items() if count > 1)
        raise BenchmarkError(f"claims differ from requests; claimed more than once: {twice}")
    for session_id in ids:
        state = (store.get_handoff_state(session_id) or {}).get("state")
        if state not in ("running", "completed"):
            raise BenchmarkError(f"{session_id} is {state!r} after its claim")


# -- the watcher process -----------------------------------------------------------------------


def _watch(url: str, interval: float, wakeups: bool) -> None:
    """Run a watcher on URL until SIGTERM; print "claimed ID TIME" per delivery."""
    from gateway.run import GatewayRunner
    from hermes_state import notify

    logging.basicConfig(level=logging.WARNING)

    class ReportingListener(notify.PostgresListener):
        """Says on stdout when the LISTEN connection is up."""

        async def run(self) -> None:
            listening = asyncio.ensure_future(super().run())
            try:
                await self.listening.wait()
                print("listening", flush=True)
                await listening
            finally:
                listening.cancel()

    notify.PostgresListener = ReportingListener  # type: ignore[misc]

    def handler(row: Mapping[str, Any], _profile: str | None) -> None:
        print(f"claimed {row['id']} {time.time():.6f}", flush=True)

    store = SessionDB(url, owner=f"bench-watcher-{os.getpid()}", lease_seconds=60.0)
    runner = GatewayRunner(store, handler, interval=interval)
    if not wakeups:

        def no_wakeups(_loop: asyncio.AbstractEventLoop) -> Callable[[], Awaitable[None]]:
            async def stop() -> None:
                return None

            return stop

        runner._start_wakeups = no_wakeups  # type: ignore[method-assign,assignment]

    asyncio.run(runner.serve())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wakeup", description=_watch.__doc__)
    parser.add_argument("url")
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--no-wakeup", action="store_true")
    args = parser.parse_args(argv)
    _watch(args.url, args.interval, not args.no_wakeup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
