"""SQLite's batch path: few statements whatever the batch size, and writers that poll the lock.

* Statement counts, read on the wire (SQLite's trace callback): a batch claim is two
  statements, a batch completion or failure two, a lease renewal one, for one row as for fifty.
* Per-row data through the JSON object the completions send: each row's own error (quotes,
  backslashes, JSON syntax, non-ASCII) stored and audited as given.
* The write lock is waited for by the store itself (SQLite's busy wait is off on the store's
  connections, on for ``_conn`` and for connections handed back to the pool), on the schedule of
  :meth:`Patience.polls`, checked here against a clock the test moves.
* Real processes, forced to contend: a raw connection holds the write lock until every gateway
  process has been refused it; then they drain one backlog in batches. Every row is claimed
  exactly once, and the batches come oldest ``started_at`` first across processes.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import groupby, pairwise
from pathlib import Path
from typing import Any

import pytest

from hermes_state import DatabaseBusyError, SessionDB, engine, execution
from hermes_state.engine import BUSY_TIMEOUT_MS, Patience
from hermes_state.execution import retry_logger
from tests.support.processes import FORKSERVER
from tests.support.stores import handoff_row, make_pending
from tests.support.wire import sqlite_wire

LEASE = 120.0
WAIT = 120.0  # seconds; a safety net against a hung process, never a synchronisation tool
PROCESSES = 3
ROWS = 240
BATCH = 11  # not a divisor of ROWS: the last batches come back short


def statements_of(sent: list[str]) -> list[str]:
    """What a call sent besides its transaction's BEGIN and COMMIT."""
    return [sql for sql in sent if sql.split()[0] not in ("BEGIN", "COMMIT")]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.mark.parametrize("size", [1, 50])
def test_batches_cost_the_same_statements_whatever_their_size(path: Path, size: int) -> None:
    ids = [f"s{index:03d}" for index in range(size)]
    with sqlite_wire() as sent, SessionDB(path, owner="gw-a", lease_seconds=LEASE) as db:
        make_pending(db, *ids, started_at=1.0)
        half = ids[: max(1, size // 2)]
        rest = ids[len(half) :]
        counts = {}
        for name, call in [
            ("claim", lambda: db.claim_pending_handoffs(size)),
            ("renew", lambda: db.renew_handoff_leases(ids)),
            ("complete", lambda: db.complete_handoffs(half)),
            ("fail", lambda: db.fail_handoffs(dict.fromkeys(rest, "gone")) if rest else None),
        ]:
            del sent[:]
            result = call()
            counts[name] = len(statements_of(sent))
            if name == "claim":
                assert [row["id"] for row in result] == ids  # type: ignore[union-attr]
            elif name == "renew":
                assert result == ids
        assert {i: db.get_handoff_state(i)["state"] for i in ids} == {
            **dict.fromkeys(half, "completed"),
            **dict.fromkeys(rest, "failed"),
        }
    # The events then the rows (claim, complete, fail); one UPDATE (renew).
    assert counts == {"claim": 2, "renew": 1, "complete": 2, "fail": 2 if size > 1 else 0}


def test_each_rows_error_goes_through_the_json_as_given(path: Path) -> None:
    errors = {
        "quotes": "he said \"no\" and 'never'",
        "json": '{"status": 403, "detail": ["a", "b"]}, [1, 2]',
        "backslash": "C:\\temp\\new \\u0041 \\n",
        "unicode": "délai dépassé \u2014 \U0001f680 日本",
        "nul": "before\x00after",
        'id "quoted" \\ é': "the id is a JSON key too",
    }
    with SessionDB(path, owner="gw-a", lease_seconds=LEASE) as db:
        make_pending(db, *errors, started_at=1.0)
        assert len(db.claim_pending_handoffs(len(errors))) == len(errors)
        assert db.fail_handoffs(errors) == dict.fromkeys(errors, True)
        stored = {i: db.get_handoff_state(i)["error"] for i in errors}
        audited = {i: db.handoff_history(i)[-1]["detail"] for i in errors}
    expected = {**errors, "nul": "before\ufffdafter"}  # as a single fail_handoff stores it
    assert stored == expected
    assert audited == expected


def test_a_batch_finish_is_fenced_per_row_by_the_attempt_claimed(path: Path) -> None:
    """In one batch, a row whose claim was rescued and claimed again (a newer attempt under the
    same owner name) is refused, its neighbours finished; the refused row gets no event."""
    with (
        SessionDB(path, owner="gw-a", lease_seconds=LEASE) as mine,
        SessionDB(path, owner="gw-a", lease_seconds=LEASE) as again,
    ):
        make_pending(mine, "a", "b", "c", started_at=1.0)
        assert len(mine.claim_pending_handoffs(3)) == 3
        assert again.reclaim_stale_running_handoffs("restarted") == ["a", "b", "c"]
        assert again.retry_handoff("b") is True
        assert again.claim_handoff("b") is True  # attempt 2, by the same owner name
        events_of_b = len(mine.handoff_history("b"))
        assert mine.retry_handoff("a") is True
        assert mine.retry_handoff("c") is True
        assert [row["id"] for row in mine.claim_pending_handoffs(5)] == ["a", "c"]

        assert mine.fail_handoffs({"a": "x", "b": "stale claim", "c": "y"}) == {
            "a": True,
            "b": False,
            "c": True,
        }
        assert (handoff_row(mine, "b")["state"], handoff_row(mine, "b")["attempt"]) == (
            "running",
            2,
        )
        assert len(mine.handoff_history("b")) == events_of_b
        assert [mine.handoff_history(i)[-1]["attempt"] for i in ("a", "c")] == [2, 2]


# -- waiting for the write lock ---------------------------------------------------------------


def busy_timeout(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA busy_timeout").fetchone()[0])


def test_the_stores_writers_poll_and_conn_keeps_sqlites_busy_wait(path: Path) -> None:
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        runner = db._runner
        assert isinstance(runner, execution.SqliteThreadRunner)
        assert busy_timeout(runner._connection()) == 0  # the plans' connection: we poll
        assert busy_timeout(db._conn) == BUSY_TIMEOUT_MS  # raw SQL waits as SQLite does
        assert db._conn is not runner._connection()


def test_a_polled_connection_goes_back_to_the_pool_with_sqlites_busy_wait(path: Path) -> None:
    SessionDB(path).close()
    sqlite_engine = engine.make_engine(engine.resolve_url(path))
    try:
        holder = execution._ThreadConnection(sqlite_engine, polled=True)
        assert busy_timeout(holder.dbapi) == 0
        holder.close()
        holder.close()  # again, as the thread's exit does after the store closed it
        again = sqlite_engine.raw_connection()
        try:
            assert again.driver_connection is holder.dbapi  # the same one, from the pool
            assert busy_timeout(holder.dbapi) == BUSY_TIMEOUT_MS
        finally:
            again.close()
    finally:
        sqlite_engine.dispose()


class MovedClock:
    """``time.monotonic`` for engine.py, moved only by the pauses the schedule hands out."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_polls_never_oversleep_a_share_of_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = MovedClock()
    monkeypatch.setattr(engine.time, "monotonic", clock)
    patience = Patience(seconds=30.0)
    started = clock.now
    pauses = 0
    schedule = patience.polls("state.db")
    while (waited := clock.now - started) < 30.0:
        pause = next(schedule)
        ceiling = min(patience.max_poll, max(patience.min_poll, waited * patience.poll_share))
        assert ceiling / 2 <= pause <= ceiling or pause == pytest.approx(30.0 - waited)
        clock.now += pause
        pauses += 1
    with pytest.raises(DatabaseBusyError, match="more than 30 s"):
        next(schedule)
    assert clock.now - started == pytest.approx(30.0)
    # A millisecond at most at first, then at most 1/20 of the wait: 30 s cost about a
    # thousand tries, not the 40,000 that polls every millisecond would.
    assert 600 < pauses < 2000


def test_a_waiting_writer_retries_in_its_own_loop_and_logs_once(
    path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the lock held elsewhere, the store's write returns from SQLite at once, refused,
    and tries again on its own schedule: many tries, one log record. Once the lock is free
    the write goes through."""
    caplog.set_level(logging.DEBUG, logger=retry_logger.name)
    tries = 0
    rival = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    polls = Patience.polls

    def counted(self: Patience, where: str) -> Iterator[float]:
        nonlocal tries
        for pause in polls(self, where):
            tries += 1
            if tries == 5:
                rival.execute("ROLLBACK")  # free the lock after the fifth refusal
            yield pause

    monkeypatch.setattr(Patience, "polls", counted)
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        rival.execute("BEGIN IMMEDIATE")
        assert db.request_handoff("s", "telegram") is True
    rival.close()
    assert tries == 5
    refusals = [r for r in caplog.records if "database is locked" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]


# -- real processes, forced to contend --------------------------------------------------------


def _drain_once_refused(url: str, owner: str, start: Any, refused: Any) -> list[str]:
    """Runs in a spawned child: claims batches until nothing is pending, and reports (sets
    ``refused``) once it has been refused the write lock."""

    class Refused(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "database is locked" in record.getMessage():
                refused.set()

    retry_logger.setLevel(logging.DEBUG)
    retry_logger.addHandler(Refused())
    won: list[str] = []
    with SessionDB(url=url, owner=owner, lease_seconds=LEASE) as db:
        db.has_pending_handoffs()  # connect and check the schema before the race
        start.wait(WAIT)
        while batch := db.claim_pending_handoffs(BATCH):
            assert all(row["handoff_owner"] == owner for row in batch)
            won.extend(row["id"] for row in batch)
    return won


def test_processes_refused_the_lock_claim_each_row_once_oldest_first(path: Path) -> None:
    ids = [f"race-{index:04d}" for index in range(ROWS)]
    with SessionDB(path) as db:
        make_pending(db, *reversed(ids), started_at=0.0)  # oldest last in id order
    by_age = list(reversed(ids))
    owners = [f"gw-{worker}" for worker in range(PROCESSES)]
    rival = sqlite3.connect(path, isolation_level=None)
    context = FORKSERVER
    with context.Manager() as manager, ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        start = manager.Barrier(PROCESSES + 1)
        refused = [manager.Event() for _ in owners]
        url = f"sqlite:///{path}"
        futures = [
            pool.submit(_drain_once_refused, url, owner, start, flag)
            for owner, flag in zip(owners, refused, strict=True)
        ]
        rival.execute("BEGIN IMMEDIATE")
        try:
            start.wait(WAIT)
            for flag in refused:
                assert flag.wait(WAIT), "a gateway process was never refused the lock"
        finally:
            rival.execute("ROLLBACK")
            rival.close()
        won = {
            owner: future.result(timeout=WAIT)
            for owner, future in zip(owners, futures, strict=True)
        }

    counts = Counter(session_id for claimed in won.values() for session_id in claimed)
    assert sorted(counts) == sorted(ids), "some rows were never claimed"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    winner = {session_id: owner for owner, claimed in won.items() for session_id in claimed}
    with SessionDB(path) as db:
        for session_id in ids:
            row = handoff_row(db, session_id)
            assert (row["state"], row["owner"], row["attempt"]) == (
                "running",
                winner[session_id],
                1,
            )
        events = db._execute_write(
            lambda conn: conn.execute(
                "SELECT session_id, from_state, to_state, actor, attempt, at FROM handoff_events"
                " WHERE to_state = 'running' ORDER BY id"
            ).fetchall()
        )
    assert [(e[1], e[2], e[3], e[4]) for e in events] == [
        ("pending", "running", winner[e[0]], 1) for e in events
    ]
    assert sorted(e[0] for e in events) == sorted(ids)
    # Transactions took turns: in commit order, each batch is older than every later one.
    age = {session_id: rank for rank, session_id in enumerate(by_age)}
    batches = [
        [age[e[0]] for e in batch] for _key, batch in groupby(events, key=lambda e: (e[3], e[5]))
    ]
    for earlier, later in pairwise(batches):
        assert max(earlier) < min(later), (earlier, later)


def test_a_second_store_of_the_process_compiles_nothing_again(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[str] = []
    check = execution._require_plain

    def counted(statement: Any, dialect: Any) -> None:
        compiled.append(statement.string)
        check(statement, dialect)

    monkeypatch.setattr(execution, "_require_plain", counted)
    monkeypatch.setattr(execution, "_COMPILED", {})  # as in a fresh process
    with SessionDB(path, owner="gw-a", lease_seconds=LEASE) as first:
        make_pending(first, "a", "b")
        first.claim_pending_handoffs(1)
        assert first.complete_handoffs(["a"]) == {"a": True}
    assert compiled, "the first store compiled nothing: the check is blind"
    del compiled[:]
    with SessionDB(path, owner="gw-b", lease_seconds=LEASE) as second:
        assert [row["id"] for row in second.claim_pending_handoffs(1)] == ["b"]
        assert second.complete_handoffs(["b"]) == {"b": True}
    assert compiled == []
