"""Transcript writes fenced on the turn lease (``turn_lease_holder``), on every backend and kind
of store: a writer that no longer holds its conversation's lease writes nothing, at once; the
owner writes, and revives its own lease when it expired with nobody taking it over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import URL

from hermes_state import (
    InvalidInputError,
    InvalidInputTypeError,
    SessionDB,
    SessionTurnLeaseLostError,
)
from hermes_state.models import session_turn_leases
from hermes_state.plans import Plan
from tests.support.digest import cached_engine
from tests.support.stores import HandClock

#: How a test writes: one ``append_message``, or a one-message ``append_messages_batch``.
WAYS = ("single", "batch")
LOST = "turn lease lost"


def write(db: SessionDB, way: str, session_id: str, content: str, **fence: Any) -> int:
    """Append one user message the chosen way; the batch answers its count, the single
    append its id (both positive)."""
    if way == "single":
        return db.append_message(session_id, "user", content, **fence)
    return db.append_messages_batch(session_id, [{"role": "user", "content": content}], **fence)


def contents(db: SessionDB, session_id: str) -> list[str]:
    return [message["content"] for message in db.get_messages(session_id)]


def message_count(db: SessionDB, session_id: str) -> int:
    row = db.get_session(session_id)
    assert row is not None
    return int(row["message_count"])


def leases(url: URL) -> dict[str, tuple[str, float]]:
    """Every lease row: conversation -> (holder, expires_at)."""
    t = session_turn_leases.c
    with cached_engine(url).connect() as connection:
        rows = connection.execute(select(t.conversation_id, t.holder, t.expires_at)).all()
    return {conversation: (holder, float(until)) for conversation, holder, until in rows}


@pytest.fixture
def clocked(new_any_store: Callable[..., SessionDB]) -> tuple[SessionDB, HandClock]:
    clock = HandClock(10_000.0)
    return new_any_store(clock=clock), clock


@pytest.mark.parametrize("way", WAYS)
def test_a_holder_that_lost_the_lease_writes_nothing(
    clocked: tuple[SessionDB, HandClock], backend_url: URL, way: str
) -> None:
    db, _clock = clocked
    db.create_session("chat", "cli")
    assert db.try_acquire_session_turn_lease("chat", "turn-a", ttl_seconds=60)
    assert write(db, way, "chat", "while a held it", turn_lease_holder="turn-a") > 0
    db.release_session_turn_lease("chat", "turn-a")
    assert db.try_acquire_session_turn_lease("chat", "turn-b", ttl_seconds=60)
    taken = leases(backend_url)

    with pytest.raises(SessionTurnLeaseLostError, match=f"{LOST}.*'chat'"):
        write(db, way, "chat", "a's late flush", turn_lease_holder="turn-a")
    assert contents(db, "chat") == ["while a held it"]
    assert message_count(db, "chat") == 1
    assert leases(backend_url) == taken  # the refused write left b's lease as it was

    assert write(db, way, "chat", "b's reply", turn_lease_holder="turn-b") > 0
    assert contents(db, "chat") == ["while a held it", "b's reply"]
    assert message_count(db, "chat") == 2
    assert leases(backend_url) == taken  # a live lease is checked, never extended


@pytest.mark.parametrize("way", WAYS)
def test_a_write_is_refused_when_no_lease_row_exists(
    any_store: SessionDB, backend_url: URL, way: str
) -> None:
    any_store.create_session("chat", "cli")
    with pytest.raises(SessionTurnLeaseLostError, match=LOST):
        write(any_store, way, "chat", "never held", turn_lease_holder="turn-a")
    assert contents(any_store, "chat") == []
    assert message_count(any_store, "chat") == 0
    assert leases(backend_url) == {}  # the fence takes no lease


@pytest.mark.parametrize("way", WAYS)
def test_an_expired_lease_still_its_own_is_revived_and_the_write_lands(
    clocked: tuple[SessionDB, HandClock], backend_url: URL, way: str
) -> None:
    db, clock = clocked
    db.create_session("chat", "cli")
    assert db.try_acquire_session_turn_lease("chat", "turn-a", ttl_seconds=10)
    clock.advance(60)  # long expired, but nobody took it over

    fence = {"turn_lease_holder": "turn-a", "turn_lease_ttl_seconds": 30}
    assert write(db, way, "chat", "after a stall", **fence) > 0
    assert contents(db, "chat") == ["after a stall"]
    assert leases(backend_url) == {"chat": ("turn-a", 10_090.0)}  # now + the write's ttl
    assert not db.try_acquire_session_turn_lease("chat", "turn-b", ttl_seconds=60)

    clock.advance(60)
    fence["turn_lease_ttl_seconds"] = 0  # upstream's floor: a revived lease lasts >= 0.1 s
    assert write(db, way, "chat", "again", **fence) > 0
    assert leases(backend_url) == {"chat": ("turn-a", pytest.approx(10_120.1))}


@pytest.mark.parametrize("way", WAYS)
def test_an_expired_lease_another_took_over_refuses_its_old_holder(
    clocked: tuple[SessionDB, HandClock], way: str
) -> None:
    db, clock = clocked
    db.create_session("chat", "cli")
    assert db.try_acquire_session_turn_lease("chat", "turn-a", ttl_seconds=10)
    clock.advance(60)
    assert db.try_acquire_session_turn_lease("chat", "turn-b", ttl_seconds=60)
    with pytest.raises(SessionTurnLeaseLostError, match=LOST):
        write(db, way, "chat", "a woke up too late", turn_lease_holder="turn-a")
    assert contents(db, "chat") == []


def test_a_compression_continuation_is_fenced_on_its_roots_lease(any_store: SessionDB) -> None:
    any_store.create_session("root", "cli")
    any_store.end_session("root", "compression")
    any_store.create_session("tip", "cli", parent_session_id="root")
    assert any_store.try_acquire_session_turn_lease("root", "turn-a", ttl_seconds=60)

    assert write(any_store, "single", "tip", "on the tip", turn_lease_holder="turn-a") > 0
    assert write(any_store, "batch", "tip", "and again", turn_lease_holder="turn-a") == 1
    for way in WAYS:
        with pytest.raises(SessionTurnLeaseLostError, match=f"{LOST}.*'tip'"):
            write(any_store, way, "tip", "impostor", turn_lease_holder="turn-x")
    assert contents(any_store, "tip") == ["on the tip", "and again"]


def test_a_fork_child_is_fenced_on_a_lease_of_its_own(any_store: SessionDB) -> None:
    """A delegate child is its own conversation: its parent's holder does not hold it. A
    compression continuation of the delegate copies the delegate's marker (naming the
    original parent, not its own parent), and is fenced on the delegate's lease."""
    db = any_store
    db.create_session("parent", "cli")
    marker = {"_delegate_from": "parent"}
    db.create_session("delegate", "delegate", parent_session_id="parent", model_config=marker)
    assert db.try_acquire_session_turn_lease("parent", "turn-p", ttl_seconds=60)

    with pytest.raises(SessionTurnLeaseLostError, match=LOST):
        write(db, "batch", "delegate", "parent's holder", turn_lease_holder="turn-p")
    assert db.try_acquire_session_turn_lease("delegate", "turn-d", ttl_seconds=60)
    assert write(db, "single", "delegate", "delegate's own", turn_lease_holder="turn-d") > 0

    db.end_session("delegate", "compression")
    db.create_session("delegate-tip", "delegate", parent_session_id="delegate", model_config=marker)
    assert write(db, "batch", "delegate-tip", "on its tip", turn_lease_holder="turn-d") == 1
    for holder in ("turn-p", "turn-x"):
        with pytest.raises(SessionTurnLeaseLostError, match=LOST):
            write(db, "single", "delegate-tip", "not its holder", turn_lease_holder=holder)
    assert contents(db, "delegate") == ["delegate's own"]
    assert contents(db, "delegate-tip") == ["on its tip"]


@pytest.mark.parametrize("way", WAYS)
def test_a_lost_lease_fails_on_the_first_attempt(
    any_store: SessionDB, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """The refusal is final: the store's retry loop never runs the write again, even for a
    session id that reads like the contention the loop does retry."""
    session_id = "database is locked"
    any_store.create_session(session_id, "cli")
    assert any_store.try_acquire_session_turn_lease(session_id, "turn-b", ttl_seconds=60)
    bodies: list[str] = []
    contention = [RuntimeError("database is locked")]
    original = Plan.start

    def counted_start(self: Plan[Any], caps: Any) -> Any:
        bodies.append(self._body.__name__)
        if contention:  # the first start fails as lock contention does (judged by its text)
            raise contention.pop()
        return original(self, caps)

    monkeypatch.setattr(Plan, "start", counted_start)
    # The control: contention is retried, so the count sees a second attempt.
    assert write(any_store, way, session_id, "b's", turn_lease_holder="turn-b") > 0
    body = {"single": "_append_message", "batch": "_append_batch"}[way]
    assert bodies == [body, body]
    bodies.clear()

    with pytest.raises(SessionTurnLeaseLostError, match=LOST):
        write(any_store, way, session_id, "a's late flush", turn_lease_holder="turn-a")
    assert bodies == [body]
    monkeypatch.undo()
    assert contents(any_store, session_id) == ["b's"]


def test_the_fence_checks_its_inputs_and_an_empty_holder_is_no_fence(
    any_store: SessionDB,
) -> None:
    any_store.create_session("chat", "cli")
    for way in WAYS:
        with pytest.raises(InvalidInputTypeError, match="turn_lease_holder"):
            write(any_store, way, "chat", "x", turn_lease_holder=7)
        with pytest.raises(InvalidInputError, match="turn_lease_holder"):
            write(any_store, way, "chat", "x", turn_lease_holder="   ")
        with pytest.raises(InvalidInputTypeError, match="turn_lease_ttl_seconds"):
            write(
                any_store,
                way,
                "chat",
                "x",
                turn_lease_holder="turn-a",
                turn_lease_ttl_seconds="long",
            )
    assert contents(any_store, "chat") == []
    # Upstream fences only on a holder it can test as true: None or "" writes unfenced.
    assert write(any_store, "single", "chat", "unfenced", turn_lease_holder="") > 0
    assert write(any_store, "batch", "chat", "unfenced too", turn_lease_holder=None) == 1
    # An empty batch touches nothing, so it is not fenced either.
    assert any_store.append_messages_batch("chat", [], turn_lease_holder="turn-a") == 0
    assert contents(any_store, "chat") == ["unfenced", "unfenced too"]
