"""Turn leases as upstream's callers use them: the key stops at an explicit fork, the blocking
acquire with its callbacks (real threads, a real locked file), the live-lease probe, and the
error importable from upstream's module."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_state import InvalidInputError, InvalidInputTypeError, SessionDB
from hermes_state.plans import ATTEMPT, LeaseWait
from tests.support.stores import HandClock

WAIT = 60.0  # a safety net for a hung test, never a synchronisation tool


def _family(db: SessionDB) -> None:
    """A compressed root and its children: a continuation (which copied a marker naming
    another session), a delegate, a branch, a reset child and a tool session."""
    db.create_session("root", "cli", model_config={"_delegate_from": "grandparent"})
    db.end_session("root", "compression")
    db.create_session(
        "continuation", "cli", parent_session_id="root", model_config={"_delegate_from": "gp"}
    )
    for child, marker in (("delegate", "_delegate_from"), ("branch", "_branched_from")):
        db.create_session(child, "cli", parent_session_id="root", model_config={marker: "root"})
    db.create_session(
        "reset", "cli", parent_session_id="root", model_config={"_reset_from": "root"}
    )
    db.create_session("tool", "tool", parent_session_id="root")


FORKS = ("delegate", "branch", "reset", "tool")


def test_an_explicit_fork_keys_its_own_lease(any_store: SessionDB) -> None:
    _family(any_store)
    assert any_store.try_acquire_session_turn_lease("root", "owner") is True
    assert any_store.try_acquire_session_turn_lease("continuation", "other") is False
    assert any_store.refresh_session_turn_lease("continuation", "owner") is True
    for child in FORKS:
        assert any_store.try_acquire_session_turn_lease(child, "other") is True, child


def test_a_model_config_that_is_not_json_is_no_marker(any_store: SessionDB) -> None:
    any_store.create_session("root", "cli")
    any_store.end_session("root", "compression")
    any_store.create_session("odd", "cli", parent_session_id="root")
    broken = "UPDATE sessions SET model_config = '{\"_delegate_from\": ' WHERE id = 'odd'"
    any_store._execute_write(lambda conn: conn.execute(broken))
    assert any_store.try_acquire_session_turn_lease("root", "owner") is True
    assert any_store.try_acquire_session_turn_lease("odd", "other") is False  # a continuation


def test_many_leases_at_once_walk_the_same_way(store: SessionDB) -> None:
    """The batch forms (one statement on PostgreSQL) stop at a fork as the one-row walk."""
    _family(store)
    assert store.try_acquire_session_turn_lease("root", "owner") is True
    holders = {child: f"h-{child}" for child in (*FORKS, "continuation")}
    for child, holder in holders.items():
        store.try_acquire_session_turn_lease(child, holder)
    kept = store.refresh_session_turn_leases(holders, ttl_seconds=60.0)
    assert kept == sorted(FORKS)  # the continuation's lease is the root's, held by "owner"
    store.release_session_turn_leases(holders)
    assert store.try_acquire_session_turn_lease("delegate", "someone") is True


def test_has_live_session_turn_lease(new_any_store: Callable[..., SessionDB]) -> None:
    clock = HandClock(1000.0)
    db = new_any_store(clock=clock)
    _family(db)
    assert db.has_live_session_turn_lease("root") is False
    assert db.try_acquire_session_turn_lease("root", "owner", ttl_seconds=10.0) is True
    assert db.has_live_session_turn_lease("continuation") is True  # the same conversation
    assert db.has_live_session_turn_lease("delegate") is False
    clock.advance(10.0)
    assert db.has_live_session_turn_lease("root") is False  # expired, though not yet taken over
    assert db.has_live_session_turn_lease("") is False
    with pytest.raises(InvalidInputTypeError):
        db.has_live_session_turn_lease(7)  # type: ignore[arg-type]


def test_a_blocked_acquire_waits_for_the_release(new_any_store: Callable[..., SessionDB]) -> None:
    first, second = new_any_store(), new_any_store()
    assert first.try_acquire_session_turn_lease("s", "first") is True
    notices: list[float] = []
    waiting = threading.Event()
    outcome: list[bool] = []

    def notice(elapsed: float) -> None:
        notices.append(elapsed)
        waiting.set()

    def wait_for_it() -> None:
        outcome.append(
            second.acquire_session_turn_lease(
                "s", "second", wait_seconds=WAIT, poll_interval_seconds=0.01, on_wait=notice
            )
        )

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert waiting.wait(WAIT)  # it missed at least once: the lease was held
    first.release_session_turn_lease("s", "first")
    waiter.join(WAIT)
    assert outcome == [True]
    assert notices[0] == 0.0
    assert first.try_acquire_session_turn_lease("s", "first") is False  # the second holds it


def test_should_abort_ends_the_wait(any_store: SessionDB) -> None:
    assert any_store.try_acquire_session_turn_lease("s", "first") is True
    asked: list[int] = []

    def abort() -> bool:
        asked.append(1)
        return len(asked) > 2

    assert (
        any_store.acquire_session_turn_lease(
            "s", "second", should_abort=abort, poll_interval_seconds=0.01
        )
        is False
    )
    assert len(asked) == 3
    assert any_store.acquire_session_turn_lease("s", "third", should_abort=lambda: True) is False
    assert any_store.try_acquire_session_turn_lease("s", "first") is True  # never taken


def test_no_wait_means_one_attempt(any_store: SessionDB) -> None:
    notices: list[float] = []
    assert any_store.try_acquire_session_turn_lease("s", "first") is True
    taken = any_store.acquire_session_turn_lease(
        "s", "second", wait_seconds=0, on_wait=notices.append
    )
    assert (taken, notices) == (False, [])
    assert any_store.acquire_session_turn_lease("free", "second", wait_seconds=0) is True


def test_a_callback_that_raises_does_not_end_the_wait(any_store: SessionDB) -> None:
    def broken(*_args: Any) -> bool:
        raise RuntimeError("the caller's bug")

    assert any_store.acquire_session_turn_lease("s", "h", should_abort=broken, on_wait=broken)


def test_bad_arguments_are_refused_before_any_callback(any_store: SessionDB) -> None:
    called: list[int] = []
    with pytest.raises(InvalidInputError):
        any_store.acquire_session_turn_lease("s", "h", ttl_seconds=float("inf"))
    with pytest.raises(InvalidInputTypeError):
        any_store.acquire_session_turn_lease("s", "h", on_wait="print")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputTypeError):
        any_store.acquire_session_turn_lease(
            "s",
            7,
            should_abort=lambda: called.append(1),  # type: ignore[arg-type]
        )
    assert called == []


def test_a_locked_file_is_contention_not_a_holder(tmp_path: Path) -> None:
    """A real lock on the file: the attempt gives up on its busy patience, ``on_contended``
    is told (not ``on_wait``), and the next attempt takes the lease once the lock is gone."""
    path = tmp_path / "state.db"
    with SessionDB(db_path=path):
        pass
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    contended: list[int] = []
    notices: list[float] = []

    def unlock() -> None:
        contended.append(1)
        if locker.in_transaction:
            locker.execute("ROLLBACK")

    with SessionDB(db_path=path, busy_patience=0.05) as db:
        taken = db.acquire_session_turn_lease(
            "s", "h", wait_seconds=WAIT, on_contended=unlock, on_wait=notices.append
        )
    locker.close()
    assert (taken, len(contended), notices) == (True, 1, [])


# -- the schedule, without I/O ------------------------------------------------------------------


def _notices(wait: LeaseWait) -> list[float]:
    """When ``on_wait`` is told, on a clock that only the schedule's sleeps move, with the
    lease held by another for the whole wait."""
    now = [0.0]
    told: list[float] = []
    schedule = dataclasses.replace(wait, on_wait=told.append)
    steps = schedule.run(clock=lambda: now[0])

    def drive() -> None:
        request = next(steps)
        while True:
            if request is ATTEMPT:
                request = steps.send(False)
            else:
                assert request is not None
                now[0] += request
                request = steps.send(None)

    with pytest.raises(StopIteration) as finished:
        drive()
    assert finished.value.value is False
    return told


def _wait(wait_seconds: float, **overrides: float) -> LeaseWait:
    settings: dict[str, Any] = {
        "wait_seconds": wait_seconds,
        "poll_interval_seconds": 1.0,
        "wait_notice_interval_seconds": 15.0,
        "wait_notice_backoff": 2.0,
        "wait_notice_max_interval_seconds": 300.0,
        "on_wait": None,
        "should_abort": None,
        "on_contended": None,
        "acquire_patience_s": 0.5,
    }
    return LeaseWait.configure(**{**settings, **overrides})


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        (_wait(600), [0, 15, 45, 105, 225, 465]),
        (_wait(500, wait_notice_max_interval_seconds=120), [0, 15, 45, 105, 225, 345, 465]),
        (_wait(90, wait_notice_backoff=1), [0, 15, 30, 45, 60, 75]),
        (_wait(60, wait_notice_max_interval_seconds=10), [0, 10, 20, 30, 40, 50]),
        (_wait(1000, wait_notice_max_interval_seconds=0), [0, 15, 45, 105, 225, 465, 945]),
    ],
)
def test_notices_back_off_to_their_ceiling(wait: LeaseWait, expected: list[float]) -> None:
    assert [round(t) for t in _notices(wait)] == expected


def test_the_lost_lease_error_is_where_upstreams_callers_import_it() -> None:
    import hermes_state
    import hermes_state_errors

    assert hermes_state_errors.SessionTurnLeaseLostError is hermes_state.SessionTurnLeaseLostError
    assert issubclass(hermes_state.SessionTurnLeaseLostError, RuntimeError)
    assert issubclass(hermes_state.SessionTurnLeaseLostError, hermes_state.HermesStateError)
