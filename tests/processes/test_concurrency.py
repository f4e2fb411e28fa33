"""Exactly-once claims under real concurrency: OS processes and threads racing for the same rows.

Every racer tries to claim every row, each in its own shuffled order, after all of them have
been released together by a barrier. Whatever the interleaving, each row must have exactly one
winner and end up running.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import random
import sqlite3
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import SessionDB
from hermes_state.engine import with_driver
from hermes_state.execution import retry_logger
from hermes_state.models import handoff_events, messages, sessions
from tests.conftest import empty_tables
from tests.support.processes import FORKSERVER, wait_until
from tests.support.stores import handoff_row

ROWS = 400
PROCESSES = 4
THREADS = 8
WAIT = 120.0  # seconds; only a safety net against a hung racer, never a synchronisation tool


def row_ids(count: int = ROWS) -> list[str]:
    return [f"race-{index:04d}" for index in range(count)]


def make_pending(store: SessionDB, ids: list[str]) -> None:
    for index, session_id in enumerate(ids):
        store.create_session(session_id, "cli", started_at=float(index))
        assert store.request_handoff(session_id, "telegram") is True
    assert len(store.list_pending_handoffs()) == len(ids)


def claim_all(store: SessionDB, ids: list[str], seed: int) -> list[str]:
    order = list(ids)
    random.Random(seed).shuffle(order)
    return [session_id for session_id in order if store.claim_handoff(session_id)]


def assert_claimed_exactly_once(store: SessionDB, ids: list[str], winners: list[str]) -> None:
    counts = Counter(winners)
    doubles = sorted(session_id for session_id, n in counts.items() if n > 1)
    assert not doubles, f"claimed more than once: {doubles[:10]}"
    missing = sorted(set(ids) - set(counts))
    assert not missing, f"never claimed: {missing[:10]}"
    assert sorted(counts) == sorted(ids)
    assert store.list_pending_handoffs() == []
    assert store.has_pending_handoffs() is False
    running = [row["id"] for row in store.list_handoffs("running")]
    assert sorted(running) == sorted(ids)
    for session_id in ids[:: len(ids) // 10]:
        assert store.get_handoff_state(session_id)["state"] == "running"


# -- processes -----------------------------------------------------------------------------------


def owner_of(worker: int) -> str:
    return f"gw-{worker}"


def _claiming_process(
    url: str, ids: list[str], seed: int, start: Any, results: Any, worker: int, owned: bool
) -> None:
    """Runs in a spawned child: open a store of its own (a gateway with an owner and a lease
    when ``owned``), wait for the others, claim everything."""
    identity: dict[str, Any] = (
        {"owner": owner_of(worker), "lease_seconds": 3600.0} if owned else {"actor": f"w{worker}"}
    )
    try:
        with SessionDB(url=url, **identity) as store:
            store.has_pending_handoffs()  # connect and check the schema before the race
            start.wait(WAIT)
            won = claim_all(store, ids, seed)
        results.put((worker, "ok", won))
    except BaseException:
        results.put((worker, "error", traceback.format_exc()))


def race_processes(
    url: URL, ids: list[str], prepare: Callable[[], None], *, owned: bool = False
) -> dict[int, list[str]]:
    """Spawn the claimers, run ``prepare`` while they start up, then release them all at once.

    The parent is the barrier's last party, so no claimer starts before the rows exist.
    """
    context = FORKSERVER
    start = context.Barrier(PROCESSES + 1)
    results = context.Queue()
    plain_url = url.render_as_string(hide_password=False)
    processes = [
        context.Process(
            target=_claiming_process,
            args=(plain_url, ids, 1000 + worker, start, results, worker, owned),
            name=f"claimer-{worker}",
        )
        for worker in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    outcomes: dict[int, list[str]] = {}
    errors = []
    try:
        try:
            prepare()
            start.wait(WAIT)
        except BaseException:
            start.abort()
            raise
        while len(outcomes) + len(errors) < PROCESSES:
            try:
                worker, status, payload = results.get(timeout=1.0)
            except queue.Empty:
                # A child that died without reporting (e.g. it could not even import) would
                # otherwise keep us waiting for the full timeout.
                dead = [p.name for p in processes if p.exitcode not in (None, 0)]
                assert not dead, f"{dead} exited without reporting a result"
                continue
            if status == "ok":
                outcomes[worker] = payload
            else:
                errors.append(f"claimer-{worker} failed:\n{payload}")
    finally:
        for process in processes:
            process.join(timeout=WAIT)
            if process.is_alive():
                process.kill()
                process.join()
    assert not errors, "\n".join(errors)
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    return outcomes


@pytest.mark.parametrize("owned", [False, True], ids=["ownerless", "owned"])
def test_processes_claim_each_row_exactly_once(
    store: SessionDB, backend_url: URL, owned: bool
) -> None:
    """Exactly once by identity, not only by count: each row has one pending->running event,
    recorded by the process that won it, and (for gateways with owners) the row names that
    winner as its owner, under attempt 1, with a lease."""
    ids = row_ids()

    outcomes = race_processes(
        backend_url, ids, prepare=lambda: make_pending(store, ids), owned=owned
    )

    assert sorted(outcomes) == list(range(PROCESSES))
    winners = [session_id for won in outcomes.values() for session_id in won]
    assert_claimed_exactly_once(store, ids, winners)
    winner_of = {sid: worker for worker, won in outcomes.items() for sid in won}
    claims = claim_events(store)
    assert sorted(claims) == sorted(ids)
    for session_id, events in claims.items():
        assert len(events) == 1, (session_id, events)
        worker = winner_of[session_id]
        assert events[0]["actor"] == (owner_of(worker) if owned else f"w{worker}")
        assert events[0]["attempt"] == 1
    for session_id in ids:
        row = handoff_row(store, session_id)
        assert row["attempt"] == 1, (session_id, row)
        if owned:
            assert row["owner"] == owner_of(winner_of[session_id]), (session_id, row)
            assert row["lease"] is not None
        else:
            assert row["owner"] is None


def claim_events(store: SessionDB) -> dict[str, list[dict[str, Any]]]:
    """Every pending->running event in the audit trail, by session."""
    query = select(handoff_events).where(
        handoff_events.c.from_state == "pending", handoff_events.c.to_state == "running"
    )
    rows = store._execute_write(lambda conn: [dict(r) for r in conn.execute(query).mappings()])
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(row["session_id"], []).append(row)
    return found


# -- threads -------------------------------------------------------------------------------------


def race_threads(store: SessionDB, ids: list[str], count: int) -> list[list[str]]:
    start = threading.Barrier(count)
    results: list[list[str] | None] = [None] * count
    errors: list[str] = []

    def racer(worker: int) -> None:
        try:
            store.has_pending_handoffs()  # this thread's connection exists before the race
            start.wait(WAIT)
            results[worker] = claim_all(store, ids, 2000 + worker)
        except BaseException:
            errors.append(traceback.format_exc())
            start.abort()

    threads = [threading.Thread(target=racer, args=(n,), name=f"racer-{n}") for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a racer hung"
    assert not errors, "\n".join(errors)
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


def test_threads_sharing_one_store_claim_each_row_exactly_once(tmp_path: Any) -> None:
    ids = row_ids()
    with SessionDB(tmp_path / "threads.db") as store:
        make_pending(store, ids)
        outcomes = race_threads(store, ids, THREADS)
        winners = [session_id for won in outcomes for session_id in won]
        assert_claimed_exactly_once(store, ids, winners)


def test_threads_on_every_backend_claim_each_row_exactly_once(store: SessionDB) -> None:
    ids = row_ids(100)
    make_pending(store, ids)
    outcomes = race_threads(store, ids, 4)
    winners = [session_id for won in outcomes for session_id in won]
    assert_claimed_exactly_once(store, ids, winners)


# -- forced races ----------------------------------------------------------------------------------
#
# The races below do not hope for an interleaving. Each side wins a first row of its own and
# pauses there (or is given rows only it contests), so "every side won something" is a fact,
# not a likelihood; then, before any side goes on, a second connection takes a lock and holds
# it across the race, so that the contended path runs:
#
# * SQLite: a raw connection holds the write lock (BEGIN IMMEDIATE) until every racer has been
#   refused it ("database is locked") and logged the retry on ``hermes_state.retry``;
# * servers: a raw connection holds a row lock that one side must wait for and the other side
#   (a claim, SKIP LOCKED) must lose at once; the server-only retries (rows that changed under
#   a transition, deadlock victims) are forced by the reclaim and deadlock tests further down.


@pytest.fixture
def retries(caplog: pytest.LogCaptureFixture) -> Callable[[], list[logging.LogRecord]]:
    """The retry records logged so far (``hermes_state.retry``, DEBUG), from every thread."""
    caplog.set_level(logging.DEBUG, logger=retry_logger.name)
    return lambda: [r for r in list(caplog.records) if r.name == retry_logger.name]


def retried_in(records: list[logging.LogRecord], thread: str, fragment: str = "") -> bool:
    return any(r.threadName == thread and fragment in r.getMessage() for r in records)


@contextlib.contextmanager
def lock_held(url: URL, row: str) -> Iterator[None]:
    """A second connection holding a lock until the block ends: the whole SQLite file's write
    lock, or the ``sessions`` row ``row`` (SELECT ... FOR UPDATE) on a server."""
    if url.get_backend_name() == "sqlite":
        assert url.database is not None
        raw = sqlite3.connect(url.database, isolation_level=None)
        try:
            raw.execute("BEGIN IMMEDIATE")
            yield
            raw.execute("ROLLBACK")
        finally:
            raw.close()
        return
    engine = create_engine(with_driver(url, asyncio=False), poolclass=NullPool)
    try:
        with engine.connect() as connection, connection.begin() as transaction:
            connection.execute(
                select(sessions.c.id).where(sessions.c.id == row).with_for_update()
            ).one()
            yield
            transaction.rollback()
    finally:
        engine.dispose()


class Racer(threading.Thread):
    """One side of a forced race: ``action`` over ``order``, recording the ids it won and the
    ids it tried. It wins a first row on its own (or, with ``wins_first=False``, does nothing),
    then reports ``ready`` and waits for ``go``: the test's signal that its lock is in place."""

    def __init__(
        self,
        name: str,
        action: Callable[[str], bool],
        order: list[str],
        errors: list[str],
        *,
        wins_first: bool = True,
    ) -> None:
        super().__init__(name=name)
        self.action, self.order, self.errors = action, order, errors
        self.wins_first = wins_first
        self.ready = threading.Event()
        self.go = threading.Event()
        self.won: list[str] = []
        self.tried: list[str] = []

    def run(self) -> None:
        try:
            if not self.wins_first:
                self._wait_for_go()
            for session_id in self.order:
                if self.action(session_id):
                    self.won.append(session_id)
                    if len(self.won) == 1 and self.wins_first:
                        self._wait_for_go()
                self.tried.append(session_id)
        except BaseException:
            self.errors.append(f"{self.name}:\n{traceback.format_exc()}")
        finally:
            self.ready.set()

    def _wait_for_go(self) -> None:
        self.ready.set()
        assert self.go.wait(WAIT), "the test never let the race go on"


def run_forced_race(
    url: URL,
    racers: list[Racer],
    held_row: str,
    retries: Callable[[], list[logging.LogRecord]],
    *,
    until: Callable[[], bool] | None = None,
) -> None:
    """Start ``racers``; once every one is ready (each won a first row), hold a lock
    (``lock_held``) and let them go on. Release it once every racer was refused the SQLite
    write lock and retried, or on a server once ``until`` holds (default: at once). Then wait
    for them all to finish."""
    for racer in racers:
        racer.start()
    try:
        wait_until(lambda: all(r.ready.is_set() for r in racers), "every racer to be ready")
        with lock_held(url, held_row):
            for racer in racers:
                racer.go.set()
            if url.get_backend_name() == "sqlite":
                wait_until(
                    lambda: all(
                        retried_in(retries(), r.name, "database is locked") for r in racers
                    ),
                    "every racer to be refused the write lock and retry",
                )
            elif until is not None:
                wait_until(until, "the racers to reach the locked row")
    finally:
        for racer in racers:
            racer.go.set()
            racer.join(WAIT)
    assert not any(racer.is_alive() for racer in racers), "a racer hung"


def test_claim_and_waiter_timeout_never_both_win(
    store: SessionDB, backend_url: URL, retries: Callable[[], list[logging.LogRecord]]
) -> None:
    """The CLI's fail_handoff(only_states=("pending",)) races the gateway's claim: for every row
    exactly one of them wins, and the row ends in the winner's state. On a server the row the
    test locks is skipped by the claim (it loses at once) and waited for by the waiter, who
    then fails it."""
    ids = row_ids(120)
    make_pending(store, ids)
    contested = ids[len(ids) // 2]
    errors: list[str] = []
    gateway = Racer("gateway", store.claim_handoff, ids, errors)
    waiter = Racer(
        "waiter",
        lambda sid: store.fail_handoff(sid, "waiter gave up", only_states=("pending",)),
        list(reversed(ids)),
        errors,
    )

    run_forced_race(
        backend_url, [gateway, waiter], contested, retries, until=lambda: contested in gateway.tried
    )
    assert not errors, "\n".join(errors)

    claimed, given_up = gateway.won, waiter.won
    assert claimed, "the claim won nothing: the race was not a race"
    assert given_up, "the waiter won nothing: the race was not a race"
    assert not set(claimed) & set(given_up), "a row was both claimed and failed"
    assert sorted(claimed + given_up) == sorted(ids)
    if backend_url.get_backend_name() != "sqlite":
        assert contested in given_up, "the claim waited for a locked row instead of skipping it"
    for session_id in claimed:
        assert store.get_handoff_state(session_id)["state"] == "running", session_id
    for session_id in given_up:
        assert store.get_handoff_state(session_id) == {
            "state": "failed",
            "platform": "telegram",
            "error": "waiter gave up",
        }
    assert_one_event_each(store, claimed, "running")
    assert_one_event_each(store, given_up, "failed")


def assert_one_event_each(store: SessionDB, won: list[str], to_state: str) -> None:
    """The audit trail holds exactly one move to ``to_state`` for each row in ``won``."""
    for session_id in won:
        moves = [e for e in store.handoff_history(session_id) if e["to_state"] == to_state]
        assert len(moves) == 1, (session_id, moves)


def test_reclaim_racing_complete_settles_every_row_once(
    store: SessionDB,
    new_store: Callable[..., SessionDB],
    backend_url: URL,
    retries: Callable[[], list[logging.LogRecord]],
) -> None:
    """A restarted gateway's reclaim and a slow dispatch's complete on the same running rows:
    each row is either completed (complete won) or failed by the reclaim, never both.

    Where a reclaim is several statements (MariaDB), a third store claims one more row between
    the reclaim's locking read and its audit insert (held open by a hook in the reclaiming
    thread): the reclaim sees more rows than it locked, rolls back, and runs again
    (ConcurrentChangeError), taking that row too. On PostgreSQL the reclaim is one statement:
    there is no such window to hold open.
    """
    ids = row_ids(120)
    make_pending(store, ids)
    for session_id in ids:
        assert store.claim_handoff(session_id) is True
    late = "race-late"
    make_pending(store, [late])
    # Two statements with a window between them: MariaDB (SQLite serialises writers, and
    # PostgreSQL locks, moves and records in one statement).
    split = backend_url.get_backend_name() == "mysql"
    other_gateway = new_store()
    armed = [True]
    sneaked_in: list[bool] = []

    def claim_between_lock_and_record(
        _conn: Any, _cursor: Any, statement: str, *_rest: Any
    ) -> None:
        if (
            armed
            and threading.current_thread().name == "reclaimer"
            and statement.lstrip().upper().startswith("INSERT INTO HANDOFF_EVENTS")
        ):
            armed.clear()  # once, and not for the claim's own statements below
            sneaked_in.append(other_gateway.claim_handoff(late))

    def reclaim_until_none_left(_sid: str) -> bool:
        found = store.reclaim_stale_running_handoffs("gateway restarted")
        reclaimed.extend(found)
        return bool(found)

    reclaimed: list[str] = []
    errors: list[str] = []
    # The completer contests the newer half only, so the reclaim is sure to win the older half
    # whatever the interleaving; on a server the reclaim first waits for the locked ids[0]
    # (its locking read goes in id order) while the completer goes on.
    contested = list(reversed(ids[len(ids) // 2 :]))
    completer = Racer("completer", store.complete_handoff, contested, errors)
    reclaimer = Racer("reclaimer", reclaim_until_none_left, ["again"] * 5, errors, wins_first=False)
    if split:
        event.listen(Engine, "before_cursor_execute", claim_between_lock_and_record)
    try:
        run_forced_race(
            backend_url,
            [completer, reclaimer],
            ids[0],
            retries,
            until=lambda: len(completer.won) >= 5,
        )
    finally:
        if split:
            event.remove(Engine, "before_cursor_execute", claim_between_lock_and_record)
    assert not errors, "\n".join(errors)

    completed = completer.won
    assert completed, "the completer won nothing: the race was not a race"
    assert reclaimed, "the reclaim won nothing: the race was not a race"
    assert len(reclaimed) == len(set(reclaimed)), "a row was reclaimed twice"
    assert not set(completed) & set(reclaimed)
    everything = [*ids, late] if split else ids
    if split:
        assert sneaked_in == [True], "the hook never claimed a row mid-reclaim"
        assert late in reclaimed
        assert any(
            "rows changed during a handoff transition" in r.getMessage() for r in retries()
        ), "the reclaim was not run again"
    assert sorted(completed + reclaimed) == sorted(everything)
    for session_id in completed:
        assert store.get_handoff_state(session_id)["state"] == "completed"
    for session_id in reclaimed:
        assert store.get_handoff_state(session_id)["state"] == "failed"
    assert_one_event_each(store, completed, "completed")
    assert_one_event_each(store, reclaimed, "failed")


@pytest.mark.parametrize("racers", [2, 6])
def test_only_one_request_wins_per_row(
    store: SessionDB,
    backend_url: URL,
    retries: Callable[[], list[logging.LogRecord]],
    racers: int,
) -> None:
    """request_handoff is a compare-and-swap too: two CLIs asking at once make one request."""
    ids = row_ids(60)
    for session_id in ids:
        store.create_session(session_id, "cli")
    errors: list[str] = []
    requesters = []
    for worker in range(racers):
        order = list(ids)
        random.Random(worker).shuffle(order)
        platform = f"platform-{worker}"
        requesters.append(
            Racer(
                f"requester-{worker}",
                functools.partial(lambda sid, p: store.request_handoff(sid, p), p=platform),
                order,
                errors,
            )
        )

    run_forced_race(backend_url, requesters, ids[0], retries)
    assert not errors, "\n".join(errors)

    assert all(r.won for r in requesters), "a requester won nothing: the race was not a race"
    wins = [(n, sid) for n, r in enumerate(requesters) for sid in r.won]
    assert sorted(session_id for _, session_id in wins) == sorted(ids)
    for worker, session_id in wins:
        assert store.get_handoff_state(session_id)["platform"] == f"platform-{worker}"
    assert_one_event_each(store, ids, "pending")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_deadlock_victim_is_run_again(
    backend: str,
    migrated_servers: dict[str, URL],
    retries: Callable[[], list[logging.LogRecord]],
) -> None:
    """A reclaim locks its rows in id order; a second connection that holds the second row and
    then asks for the first makes a deadlock whose victim is the reclaim (PostgreSQL: the other
    side waits longer before checking for deadlocks; MariaDB: the other side has written more,
    and the lighter transaction is rolled back). The reclaim is run again, whole, and takes
    both rows once the other side has rolled back."""
    url = migrated_servers[backend]
    empty_tables(url)
    first, second = "race-0000", "race-0001"
    errors: list[str] = []
    reclaimed: list[str] = []
    with SessionDB(url=url) as store:
        make_pending(store, [first, second, "race-heavy"])
        assert store.claim_handoff(first) is True
        assert store.claim_handoff(second) is True

        def reclaim() -> None:
            try:
                reclaimed.extend(store.reclaim_running_handoffs("gateway restarted"))
            except BaseException:
                errors.append(traceback.format_exc())

        engine = create_engine(with_driver(url, asyncio=False), poolclass=NullPool)
        reclaimer = threading.Thread(target=reclaim, name="reclaimer")
        try:
            with engine.connect() as other, other.begin() as transaction:
                if backend == "postgresql":
                    other.execute(text("SET LOCAL deadlock_timeout = '60s'"))
                else:
                    other.execute(
                        messages.insert(),
                        [
                            {
                                "session_id": "race-heavy",
                                "role": "user",
                                "content": "",
                                "timestamp": n,
                            }
                            for n in range(50)
                        ],
                    )
                locking = select(sessions.c.id).with_for_update()
                other.execute(locking.where(sessions.c.id == second)).one()
                reclaimer.start()
                wait_until(lambda: lock_waits(engine, backend) > 0, "the reclaim to wait")
                other.execute(locking.where(sessions.c.id == first)).one()  # the deadlock
                wait_until(
                    lambda: any("eadlock" in r.getMessage() for r in retries()),
                    "the reclaim to be chosen as the victim and retried",
                )
                transaction.rollback()
        finally:
            if reclaimer.ident is not None:
                reclaimer.join(WAIT)
            engine.dispose()
        assert not reclaimer.is_alive(), "the reclaim hung"
        assert not errors, "\n".join(errors)
        assert reclaimed == [first, second]
        assert retried_in(retries(), "reclaimer", "eadlock")
        assert_one_event_each(store, reclaimed, "failed")


def lock_waits(engine: Engine, backend: str) -> int:
    """How many sessions on the engine's database wait for a lock right now (only this
    database's: other tests, on the other xdist worker or elsewhere, wait on theirs)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        if backend == "postgresql"
        else "SELECT count(*) FROM information_schema.innodb_trx AS t "
        "JOIN information_schema.processlist AS p ON p.id = t.trx_mysql_thread_id "
        "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
    )
    with engine.connect() as connection:
        return int(connection.execute(text(query)).scalar_one())
