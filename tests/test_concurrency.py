"""Exactly-once claims under real concurrency: OS processes and threads racing for the same rows.

Every racer tries to claim every row, each in its own shuffled order, after all of them have
been released together by a barrier. Whatever the interleaving, each row must have exactly one
winner and end up running.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hermes_state import SessionDB

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


def _claiming_process(
    url: str, ids: list[str], seed: int, start: Any, results: Any, worker: int
) -> None:
    """Runs in a spawned child: open a store of its own, wait for the others, claim everything."""
    try:
        with SessionDB(url=url) as store:
            store.has_pending_handoffs()  # connect and check the schema before the race
            start.wait(WAIT)
            won = claim_all(store, ids, seed)
        results.put((worker, "ok", won))
    except BaseException:
        results.put((worker, "error", traceback.format_exc()))


def race_processes(url: URL, ids: list[str], prepare: Callable[[], None]) -> dict[int, list[str]]:
    """Spawn the claimers, run ``prepare`` while they start up, then release them all at once.

    The parent is the barrier's last party, so no claimer starts before the rows exist.
    """
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES + 1)
    results = context.Queue()
    plain_url = url.render_as_string(hide_password=False)
    processes = [
        context.Process(
            target=_claiming_process,
            args=(plain_url, ids, 1000 + worker, start, results, worker),
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


def test_processes_claim_each_row_exactly_once(store: SessionDB, backend_url: URL) -> None:
    ids = row_ids()

    outcomes = race_processes(backend_url, ids, prepare=lambda: make_pending(store, ids))

    assert sorted(outcomes) == list(range(PROCESSES))
    winners = [session_id for won in outcomes.values() for session_id in won]
    assert_claimed_exactly_once(store, ids, winners)


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


# -- a waiter giving up while a gateway claims ----------------------------------------------------


def test_claim_and_waiter_timeout_never_both_win(store: SessionDB) -> None:
    """The CLI's fail_handoff(only_states=("pending",)) races the gateway's claim: for every row
    exactly one of them wins, and the row ends in the winner's state."""
    ids = row_ids(120)
    make_pending(store, ids)
    start = threading.Barrier(2)
    claimed: list[str] = []
    given_up: list[str] = []
    errors: list[str] = []

    def run(action: Callable[[str], bool], record: list[str], seed: int) -> None:
        try:
            order = list(ids)
            random.Random(seed).shuffle(order)
            start.wait(WAIT)
            record.extend(session_id for session_id in order if action(session_id))
        except BaseException:
            errors.append(traceback.format_exc())
            start.abort()

    gateway = threading.Thread(target=run, args=(store.claim_handoff, claimed, 1))
    waiter = threading.Thread(
        target=run,
        args=(
            lambda sid: store.fail_handoff(sid, "waiter gave up", only_states=("pending",)),
            given_up,
            2,
        ),
    )
    for thread in (gateway, waiter):
        thread.start()
    for thread in (gateway, waiter):
        thread.join(WAIT)
    assert not errors, "\n".join(errors)

    assert not set(claimed) & set(given_up), "a row was both claimed and failed"
    assert sorted(claimed + given_up) == sorted(ids)
    for session_id in claimed:
        assert store.get_handoff_state(session_id)["state"] == "running", session_id
    for session_id in given_up:
        assert store.get_handoff_state(session_id) == {
            "state": "failed",
            "platform": "telegram",
            "error": "waiter gave up",
        }


def test_reclaim_racing_complete_settles_every_row_once(store: SessionDB) -> None:
    """A restarted gateway's reclaim and a slow dispatch's complete on the same running rows:
    each row is either completed (complete won) or failed by the reclaim, never both."""
    ids = row_ids(120)
    make_pending(store, ids)
    for session_id in ids:
        assert store.claim_handoff(session_id) is True
    start = threading.Barrier(2)
    completed: list[str] = []
    reclaimed: list[str] = []
    errors: list[str] = []

    def completer() -> None:
        try:
            start.wait(WAIT)
            completed.extend(sid for sid in reversed(ids) if store.complete_handoff(sid))
        except BaseException:
            errors.append(traceback.format_exc())
            start.abort()

    def reclaimer() -> None:
        try:
            start.wait(WAIT)
            # Several reclaims, so that some land between the completer's transactions.
            for _ in range(5):
                reclaimed.extend(store.reclaim_stale_running_handoffs("gateway restarted"))
        except BaseException:
            errors.append(traceback.format_exc())
            start.abort()

    threads = [threading.Thread(target=completer), threading.Thread(target=reclaimer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, "\n".join(errors)

    assert len(reclaimed) == len(set(reclaimed)), "a row was reclaimed twice"
    assert not set(completed) & set(reclaimed)
    assert sorted(completed + reclaimed) == sorted(ids)
    for session_id in completed:
        assert store.get_handoff_state(session_id)["state"] == "completed"
    for session_id in reclaimed:
        assert store.get_handoff_state(session_id)["state"] == "failed"


@pytest.mark.parametrize("racers", [2, 6])
def test_only_one_request_wins_per_row(store: SessionDB, racers: int) -> None:
    """request_handoff is a compare-and-swap too: two CLIs asking at once make one request."""
    ids = row_ids(60)
    for session_id in ids:
        store.create_session(session_id, "cli")
    start = threading.Barrier(racers)
    wins: list[tuple[int, str]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def requester(worker: int) -> None:
        try:
            order = list(ids)
            random.Random(worker).shuffle(order)
            start.wait(WAIT)
            for session_id in order:
                if store.request_handoff(session_id, f"platform-{worker}"):
                    with lock:
                        wins.append((worker, session_id))
        except BaseException:
            errors.append(traceback.format_exc())
            start.abort()

    threads = [threading.Thread(target=requester, args=(n,)) for n in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, "\n".join(errors)

    assert sorted(session_id for _, session_id in wins) == sorted(ids)
    for worker, session_id in wins:
        assert store.get_handoff_state(session_id)["platform"] == f"platform-{worker}"
