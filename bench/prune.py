"""Pruning a large SQLite file in bounded memory, in short batches, while a watcher delivers.

Requirement (issue 24, item 2): pruning 1,000,000 sessions runs in bounded memory, in batches
that never hold the write lock for more than about 100 ms, while a watcher keeps delivering.

A file at head is filled by bulk insert with N ended sessions, all older than the retention
(default N = 1,000,000, each with 2 messages indexed for full-text search by the store's
triggers). Then, each in a process of its own on that file:

* **the prune**: ``SessionDB(path)`` drives ``prune_sessions``' sweep (``older_than_days=90``,
  the default batch) and records each batch's time (from the request of its plan to its commit,
  lock waits and retries included) and how long each transaction held the write lock (from its
  ``BEGIN IMMEDIATE`` to its ``COMMIT``, timed on the runner's connection). Peak RSS
  (``ru_maxrss``) is read once the store is open and has read the file (the baseline) and again
  after the prune.
* **a watcher-like loop**: a second store creates a recent session, requests its handoff,
  claims it and completes it, over and over (about 50 a second), timing each delivery from
  the request to the completion. It runs alone for a few seconds first (the baseline), then
  during the whole prune.

Checked at the end: every old session is gone, no message is left, and every session the loop
created is there with its handoff completed exactly once (none was pruned, none delivered
twice). Command: ``python -m bench.prune [--sessions N]`` (``python -m bench --only prune``
runs N = 1,000,000; ``--quick``: 20,000).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from .common import Result, format_table, percentile, summarize
from .fixtures import child_environment, scratch

DAY: Final = 86400.0
#: The old sessions' start, far beyond the 90 days' retention.
OLD: Final = time.time() - 400 * DAY
#: How long the loop delivers alone before the prune starts (its baseline), in seconds.
BASELINE_SECONDS: Final = 4.0
#: The loop's pause between two deliveries.
WATCH_PAUSE: Final = 0.02
_CHUNK: Final = 50_000


def build(path: Path, size: int, per_session: int = 2) -> None:
    """A file at head holding ``size`` ended old sessions of ``per_session`` messages each."""
    from hermes_state import SessionDB

    SessionDB(path).close()
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = OFF")
        for start in range(0, size, _CHUNK):
            stop = min(size, start + _CHUNK)
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, "
                "message_count) VALUES (?, 'bench', ?, ?, 'done', ?)",
                (
                    (f"old_{index:09d}", OLD + index * 1e-3, OLD + index * 1e-3 + 1, per_session)
                    for index in range(start, stop)
                ),
            )
            connection.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                (
                    (
                        f"old_{index:09d}",
                        role,
                        f"{role} text of session {index}",
                        OLD + index * 1e-3,
                    )
                    for index in range(start, stop)
                    for role in ("user", "assistant")[:per_session]
                ),
            )
            connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def _peak_rss() -> int:
    """This process's peak resident set so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _TimedConnection:
    """The runner's SQLite connection, timing each write transaction from its ``BEGIN
    IMMEDIATE`` (the write lock taken) to its ``COMMIT`` (released): the lock's hold."""

    def __init__(self, connection: sqlite3.Connection, holds: list[float]) -> None:
        self._connection = connection
        self._holds = holds
        self._began: float | None = None

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            cursor = self._connection.execute(sql, *args)
            if self._began is not None:
                self._holds.append(time.perf_counter() - self._began)
                self._began = None
            return cursor
        cursor = self._connection.execute(sql, *args)
        if sql == "BEGIN IMMEDIATE":
            self._began = time.perf_counter()
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def child_prune(path: str, batch_size: int | None) -> dict[str, Any]:
    from hermes_state import SessionDB

    db = SessionDB(path)
    holds: list[float] = []
    runner: Any = db._runner
    plain = runner._connection
    runner._connection = lambda: _TimedConnection(plain(), holds)
    db.storage_report()
    db.list_prune_candidates(older_than_days=90, source="nobody")  # the statements warmed up
    baseline = _peak_rss()
    batches: list[float] = []
    options: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    sweep = db._plans.prune_sweep(90, on_batch=lambda _batch, took: batches.append(took), **options)
    totals = db._sweep(sweep)
    peak = _peak_rss()
    db.close()
    return {
        "baseline_rss": baseline,
        "peak_rss": peak,
        "batches": batches,
        "holds": holds,
        "batch_size": sweep.batch_size,
        "sessions": totals.sessions,
        "messages": totals.messages,
        "seconds": totals.seconds,
    }


def child_watch(path: str, stop_file: str, seconds: float) -> dict[str, Any]:
    from hermes_state import SessionDB

    requester = SessionDB(path)
    gateway = SessionDB(path)
    latencies: list[float] = []
    delivered: list[str] = []
    deadline = time.monotonic() + seconds
    index = 0
    tag = f"{os.getpid()}"
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        session_id = f"live_{tag}_{index:06d}"
        index += 1
        requester.create_session(session_id, "cli")
        started = time.perf_counter()
        assert requester.request_handoff(session_id, "telegram")
        assert gateway.claim_handoff(session_id)
        assert gateway.complete_handoff(session_id)
        latencies.append(time.perf_counter() - started)
        delivered.append(session_id)
        time.sleep(WATCH_PAUSE)
    requester.close()
    gateway.close()
    return {"latencies": latencies, "delivered": delivered}


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.prune", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=child_environment(),
        cwd=Path(__file__).resolve().parent.parent,
    )


def _answer(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=3600)
    if process.returncode != 0:
        raise RuntimeError(f"child failed with {process.returncode}")
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


def _check(path: Path, delivered: list[str]) -> None:
    connection = sqlite3.connect(path)
    try:
        left = connection.execute("SELECT COUNT(*) FROM sessions WHERE id LIKE 'old!_%' ESCAPE '!'")
        assert left.fetchone()[0] == 0, "old sessions were left"
        orphans = connection.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id LIKE 'old!_%' ESCAPE '!'"
        )
        assert orphans.fetchone()[0] == 0, "messages of pruned sessions were left"
        rows = dict(
            connection.execute(
                "SELECT id, handoff_state FROM sessions WHERE id LIKE 'live!_%' ESCAPE '!'"
            ).fetchall()
        )
        assert set(rows) == set(delivered), "a delivered session is missing"
        assert set(rows.values()) == {"completed"}, "a handoff was not completed"
        events = connection.execute(
            "SELECT session_id, COUNT(*) FROM handoff_events WHERE to_state = 'completed' "
            "GROUP BY session_id HAVING COUNT(*) > 1"
        ).fetchall()
        assert not events, f"delivered twice: {events[:3]}"
    finally:
        connection.close()


def measure(size: int, batch_size: int | None = None) -> tuple[list[Result], dict[str, Any]]:
    folder = scratch()
    path = folder / f"prune-{size}.db"
    began = time.perf_counter()
    build(path, size)
    built = time.perf_counter() - began
    stop = folder / "stop-watching"
    stop.unlink(missing_ok=True)
    alone = _answer(_spawn("--child", "watch", str(path), str(stop), str(BASELINE_SECONDS)))
    watcher = _spawn("--child", "watch", str(path), str(stop), "7200")
    time.sleep(0.5)  # the loop is delivering before the prune starts
    pruner = _spawn("--child", "prune", str(path), str(batch_size or 0))
    pruned = _answer(pruner)
    stop.touch()
    during = _answer(watcher)
    _check(path, alone["delivered"] + during["delivered"])
    assert pruned["sessions"] == size, pruned["sessions"]
    assert pruned["messages"] == 2 * size, pruned["messages"]
    batches: list[float] = pruned["batches"]
    holds: list[float] = pruned["holds"]
    label = f"{size:,} sessions"
    results = summarize(
        "prune",
        f"peak RSS, prune {label}",
        {"store open, before prune": [pruned["baseline_rss"]], "after prune": [pruned["peak_rss"]]},
        baseline="store open, before prune",
        ops_per_round=1,
        unit="B",
        notes={
            "after prune": f"{pruned['sessions']:,} sessions and {pruned['messages']:,} messages "
            f"in {pruned['seconds']:.1f} s (file built in {built:.0f} s)"
        },
    )
    results += summarize(
        "prune",
        f"batch transaction, {pruned['batch_size']} sessions a batch",
        {"batch": batches},
        baseline="batch",
        ops_per_round=1,
        notes={
            "batch": f"{len(batches):,} batches; p99 {percentile(batches, 99) * 1e3:.1f} ms, "
            f"max {max(batches) * 1e3:.1f} ms (bound ~100 ms)"
        },
    )
    results += summarize(
        "prune",
        f"write lock held per batch, {pruned['batch_size']} sessions a batch",
        {"BEGIN IMMEDIATE to COMMIT": holds},
        baseline="BEGIN IMMEDIATE to COMMIT",
        ops_per_round=1,
        notes={
            "BEGIN IMMEDIATE to COMMIT": f"{len(holds):,} transactions; p99 "
            f"{percentile(holds, 99) * 1e3:.1f} ms, max {max(holds) * 1e3:.1f} ms "
            "(bound ~100 ms)"
        },
    )
    results += summarize(
        "prune",
        f"watcher delivery (request, claim, complete), {label}",
        {"no prune": alone["latencies"], "during prune": during["latencies"]},
        baseline="no prune",
        ops_per_round=1,
        notes={
            name: f"{len(values):,} deliveries; p99 {percentile(values, 99) * 1e3:.1f} ms, "
            f"max {max(values) * 1e3:.1f} ms"
            for name, values in (
                ("no prune", alone["latencies"]),
                ("during prune", during["latencies"]),
            )
        },
    )
    figures = {
        "sessions": size,
        "built_seconds": built,
        "prune": {key: value for key, value in pruned.items() if key not in ("batches", "holds")},
        "hold_p50_ms": statistics.median(holds) * 1e3,
        "hold_p99_ms": percentile(holds, 99) * 1e3,
        "hold_max_ms": max(holds) * 1e3,
        "batch_p50_ms": statistics.median(batches) * 1e3,
        "batch_p99_ms": percentile(batches, 99) * 1e3,
        "batch_max_ms": max(batches) * 1e3,
        "deliveries_during": len(during["latencies"]),
    }
    path.unlink(missing_ok=True)
    return results, figures


def run(quick: bool) -> list[Result]:
    results, _figures = measure(20_000 if quick else 1_000_000)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prune", description=__doc__)
    parser.add_argument("--sessions", type=int, default=1_000_000, help="old sessions to prune")
    parser.add_argument("--batch-size", type=int, default=None, help="the prune's batch size")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "prune":
            answer = child_prune(rest[0], int(rest[1]) or None)
        else:
            answer = child_watch(rest[0], rest[1], float(rest[2]))
        print(json.dumps(answer))
        return 0
    if not 1 <= args.sessions <= 10_000_000:
        parser.error("--sessions must be between 1 and 10,000,000")
    results, figures = measure(args.sessions, args.batch_size)
    print(format_table(results))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
