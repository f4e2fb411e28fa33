"""The watcher's batch store methods, on every backend and every kind of store.

``claim_handoffs`` (given rows) and ``claim_next_handoffs`` (the oldest pending rows) claim
many rows in one call, each under its conversation's turn lease when asked, with the same
rules as the one-row calls: a lease is taken when free, expired or already its holder's, a
row whose turn is held elsewhere stays pending with nothing written for it, and of two rows of
one conversation only the older is tried. ``finish_handoffs`` completes and fails many rows,
each fenced on its own claim, and gives their turn leases back in the same call. One event per
row per transition, always. A hand clock makes every lease time exact.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hermes_state import SessionDB
from hermes_state.models import session_turn_leases
from hermes_state.plans import delivery_holder
from tests.support.stores import HandClock, handoff_row, make_pending, put
from tests.support.vintages import REAL_SCHEMA11

OWNER = "gw-1"
LEASE = 60.0
TURN = 20.0
FIXTURE = REAL_SCHEMA11


def leases(db: SessionDB) -> dict[str, tuple[str, float]]:
    """Every turn lease: conversation -> (holder, expires_at)."""
    t = session_turn_leases.c
    query = select(t.conversation_id, t.holder, t.expires_at)
    rows = db._execute_write(lambda conn: conn.execute(query).all())
    return {row[0]: (row[1], row[2]) for row in rows}


def history(db: SessionDB, session_id: str) -> list[tuple[Any, ...]]:
    return [
        (e["from_state"], e["to_state"], e["actor"], e["attempt"], e["detail"])
        for e in db.handoff_history(session_id)
    ]


REQUESTED = (None, "pending", OWNER, 0, "requested for telegram")
CLAIMED = ("pending", "running", OWNER, 1, None)


def a_conversation(db: SessionDB) -> None:
    """``root`` ended by compression and ``seg`` continues it: one conversation, one lease
    key (``root``), both pending; ``root`` is the older."""
    db.create_session("root", "cli", started_at=1.0, end_reason="compression")
    db.create_session("seg", "cli", started_at=2.0, parent_session_id="root")
    for session_id in ("root", "seg"):
        assert db.request_handoff(session_id, "telegram") is True


@pytest.fixture
def clock() -> HandClock:
    return HandClock(1_000_000.0)


@pytest.fixture
def gateway(new_any_store: Callable[..., SessionDB], clock: HandClock) -> SessionDB:
    return new_any_store(owner=OWNER, lease_seconds=LEASE, clock=clock)


def test_given_rows_are_claimed_with_their_turns(
    gateway: SessionDB, new_any_store: Callable[..., SessionDB], clock: HandClock
) -> None:
    local = new_any_store(clock=clock)  # a local turn, in another store
    a_conversation(gateway)
    make_pending(gateway, "a", "b", "held", started_at=10.0)
    put(gateway, "done", "completed")
    assert local.try_acquire_session_turn_lease("held", "local-turn", ttl_seconds=30.0)
    ids = ["seg", "root", "a", "b", "held", "done", "unknown"]
    holders = {session_id: f"h-{session_id}" for session_id in ids}

    batch = gateway.claim_handoffs(ids, turn_holders=holders, turn_seconds=TURN)

    assert [row["id"] for row in batch.rows] == ["root", "a", "b"]  # oldest first
    assert batch.turn_held == ["held", "seg"]
    for row in batch.rows:
        assert row == gateway.get_session(row["id"])  # the row as claimed, whole
        assert (row["handoff_state"], row["handoff_owner"], row["handoff_attempt"]) == (
            "running",
            OWNER,
            1,
        )
        assert row["handoff_lease_expires_at"] == clock.now + LEASE
    assert leases(gateway) == {
        "root": ("h-root", clock.now + TURN),  # seg's lease key too
        "a": ("h-a", clock.now + TURN),
        "b": ("h-b", clock.now + TURN),
        "held": ("local-turn", clock.now + 30.0),  # untouched
    }
    for session_id in ("root", "a", "b"):
        assert history(gateway, session_id)[1:] == [CLAIMED]
    for session_id in ("seg", "held"):  # left pending, nothing recorded for them
        assert handoff_row(gateway, session_id)["state"] == "pending"
        assert history(gateway, session_id) == [REQUESTED]
    assert handoff_row(gateway, "done")["state"] == "completed"


def test_a_lease_is_taken_when_expired_and_kept_as_it_is_when_already_the_holders(
    gateway: SessionDB, new_any_store: Callable[..., SessionDB], clock: HandClock
) -> None:
    other = new_any_store(clock=clock)
    make_pending(gateway, "expired", "mine", "free", started_at=10.0)
    assert other.try_acquire_session_turn_lease("expired", "local-turn", ttl_seconds=5.0)
    # A previous life of this gateway left its lease on "mine" (the same holder).
    assert other.try_acquire_session_turn_lease("mine", "h-mine", ttl_seconds=100.0)
    mine_until = clock.now + 100.0
    clock.advance(10.0)  # past the local turn's lease, within the previous life's

    holders = {"expired": "h-expired", "mine": "h-mine", "free": "h-free"}
    batch = gateway.claim_handoffs(list(holders), turn_holders=holders, turn_seconds=TURN)

    assert [row["id"] for row in batch.rows] == ["expired", "mine", "free"]
    assert batch.turn_held == []
    assert leases(gateway) == {
        "expired": ("h-expired", clock.now + TURN),  # taken over
        "mine": ("h-mine", mine_until),  # as the one-row acquire leaves it
        "free": ("h-free", clock.now + TURN),
    }


def test_the_next_rows_are_the_oldest_pending_but_those_left_out(gateway: SessionDB) -> None:
    rows = [f"r{n}" for n in range(6)]
    make_pending(gateway, *rows, started_at=100.0)

    first = gateway.claim_next_handoffs(3, exclude=["r0"], turn_gateway="gw", turn_seconds=TURN)
    second = gateway.claim_next_handoffs(10, turn_gateway="gw", turn_seconds=TURN)

    assert [row["id"] for row in first.rows] == ["r1", "r2", "r3"]
    assert [row["id"] for row in second.rows] == ["r0", "r4", "r5"]
    assert gateway.claim_next_handoffs(10, turn_gateway="gw").rows == []
    # Each lease names the delivery's holder, the same whichever side computed it.
    assert {key: holder for key, (holder, _until) in leases(gateway).items()} == {
        session_id: delivery_holder("gw", session_id) for session_id in rows
    }
    for session_id in rows:
        assert history(gateway, session_id)[1:] == [CLAIMED]


def test_two_segments_of_one_conversation_go_one_after_the_other(
    gateway: SessionDB, clock: HandClock
) -> None:
    a_conversation(gateway)

    first = gateway.claim_next_handoffs(10, turn_gateway="gw", turn_seconds=TURN)
    assert ([row["id"] for row in first.rows], first.turn_held) == (["root"], ["seg"])
    again = gateway.claim_next_handoffs(10, turn_gateway="gw", turn_seconds=TURN)
    assert (again.rows, again.turn_held) == ([], ["seg"])  # root's delivery holds the turn

    done = gateway.finish_handoffs(
        {"root": None}, release_turns={"root": delivery_holder("gw", "root")}
    )
    assert done == {"root": True}
    after = gateway.claim_next_handoffs(10, turn_gateway="gw", turn_seconds=TURN)
    assert ([row["id"] for row in after.rows], after.turn_held) == (["seg"], [])
    assert leases(gateway) == {"root": (delivery_holder("gw", "seg"), clock.now + TURN)}


def test_many_finish_at_once_each_fenced_on_its_own_claim(
    gateway: SessionDB, new_any_store: Callable[..., SessionDB], clock: HandClock
) -> None:
    operator = new_any_store(clock=clock)  # fails rows as an administrator would
    rival = new_any_store(owner="gw-2", lease_seconds=LEASE, clock=clock)
    make_pending(gateway, "ok", "bad", "rescued", started_at=10.0)
    holders = {session_id: f"h-{session_id}" for session_id in ("ok", "bad", "rescued")}
    claimed = gateway.claim_handoffs(list(holders), turn_holders=holders, turn_seconds=TURN)
    assert len(claimed.rows) == 3
    # "rescued" is failed under this gateway and claimed again elsewhere: a newer attempt.
    assert operator.fail_handoff("rescued", "the gateway looked dead") is True
    assert operator.request_handoff("rescued", "telegram") is True
    assert rival.claim_handoff("rescued") is True
    clock.advance(1.0)

    done = gateway.finish_handoffs(
        {"ok": None, "bad": "the platform said no", "rescued": None, "unknown": None},
        release_turns={**holders, "unleased": "h-unleased"},
    )

    assert done == {"ok": True, "bad": True, "rescued": False, "unknown": False}
    assert handoff_row(gateway, "ok")["state"] == "completed"
    assert handoff_row(gateway, "ok")["error"] is None
    assert (handoff_row(gateway, "bad")["state"], handoff_row(gateway, "bad")["error"]) == (
        "failed",
        "the platform said no",
    )
    rescued = handoff_row(gateway, "rescued")
    assert (rescued["state"], rescued["owner"], rescued["attempt"]) == ("running", "gw-2", 2)
    assert leases(gateway) == {}  # given back whatever became of the rows
    assert history(gateway, "ok")[1:] == [CLAIMED, ("running", "completed", OWNER, 1, None)]
    assert history(gateway, "bad")[1:] == [
        CLAIMED,
        ("running", "failed", OWNER, 1, "the platform said no"),
    ]
    assert [event[:2] for event in history(gateway, "rescued")][-1] == ("pending", "running")


def test_turn_leases_are_refreshed_and_released_many_at_once(
    gateway: SessionDB, clock: HandClock
) -> None:
    a_conversation(gateway)
    assert gateway.try_acquire_session_turn_lease("seg", "h-seg", ttl_seconds=10.0)  # key root
    assert gateway.try_acquire_session_turn_lease("other", "h-other", ttl_seconds=10.0)
    clock.advance(5.0)

    kept = gateway.refresh_session_turn_leases(
        {"seg": "h-seg", "other": "someone else", "free": "h-free"}, ttl_seconds=50.0
    )

    assert kept == ["seg"]
    assert leases(gateway) == {
        "root": ("h-seg", clock.now + 50.0),
        "other": ("h-other", clock.now + 5.0),  # not that holder's: unchanged
    }
    gateway.release_session_turn_leases({"root": "h-seg", "other": "someone else"})
    assert leases(gateway) == {"other": ("h-other", clock.now + 5.0)}


def test_many_transcripts_read_as_one_transcript_each(gateway: SessionDB) -> None:
    make_pending(gateway, "a", "b", "quiet", started_at=10.0)
    gateway.append_message("a", "user", "book the train")
    gateway.append_message("b", "user", "ünïcödé 🚀", tool_name="search")
    gateway.append_message(
        "a", "assistant", None, tool_calls=[{"id": "c1", "name": "book"}], finish_reason="stop"
    )
    gateway.append_message("b", "tool", "{}", tool_call_id="c1")

    found = gateway.get_transcripts(["b", "a", "quiet", "unknown"])

    assert found == {
        "b": gateway.get_messages("b"),
        "a": gateway.get_messages("a"),
        "quiet": [],
        "unknown": [],
    }
    assert [m["content"] for m in found["a"]] == ["book the train", None]
    assert found["a"][1]["tool_calls"] == [{"id": "c1", "name": "book"}]


def test_an_upstream_file_reads_the_same_transcripts(tmp_path: Path) -> None:
    copy = tmp_path / "state.db"
    shutil.copyfile(FIXTURE, copy)
    with SessionDB(copy) as db:
        ids = [row["id"] for row in db.list_sessions()]
        found = db.get_transcripts(ids)
        assert any(found.values()), "the fixture has transcripts"
        assert found == {session_id: db.get_messages(session_id) for session_id in ids}
