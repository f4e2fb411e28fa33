"""Reading sessions (``list_sessions``, ``get_session``, ``count_messages``) and counting
prunable events, on
every backend, through the sync store and the native asyncio store: the same plans, the same
answers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import update
from sqlalchemy.engine import URL

from hermes_state import NativeAsyncSessionDB, SessionDB
from hermes_state.errors import InvalidInputError, InvalidInputTypeError
from hermes_state.models import messages
from tests.support.stores import HandClock, put


@pytest.fixture
def clock() -> HandClock:
    return HandClock(1_000.0)


@pytest.fixture
def filled(new_store: Callable[..., SessionDB], clock: HandClock) -> SessionDB:
    db = new_store(clock=clock)
    db.create_session("a-old", "cli", started_at=100.0, title="old")
    db.create_session("b-tg", "telegram", started_at=200.0)
    db.create_session("c-new", "cli", started_at=300.0)
    db.create_session("d-tie", "cli", started_at=300.0)
    assert db.request_handoff("c-new", "discord")
    put(db, "e-failed", "failed")  # started at the clock: 1000
    return db


def ids(rows: list[dict[str, object]]) -> list[object]:
    return [row["id"] for row in rows]


def test_list_sessions_newest_first_with_filters(filled: SessionDB) -> None:
    assert ids(filled.list_sessions()) == ["e-failed", "d-tie", "c-new", "b-tg", "a-old"]
    assert ids(filled.list_sessions(source="telegram")) == ["b-tg"]
    assert ids(filled.list_sessions(handoff_state="pending")) == ["c-new"]
    assert ids(filled.list_sessions(handoff_state="failed")) == ["e-failed"]
    assert ids(filled.list_sessions(since=200.0)) == ["e-failed", "d-tie", "c-new", "b-tg"]
    assert ids(filled.list_sessions(source="cli", since=250.0, limit=2)) == ["e-failed", "d-tie"]
    assert filled.list_sessions(source="nobody") == []
    whole = filled.list_sessions(limit=1)[0]
    assert whole["handoff_state"] == "failed"
    assert {"title", "started_at", "handoff_owner", "handoff_attempt"} <= set(whole)


def test_get_session(filled: SessionDB) -> None:
    row = filled.get_session("a-old")
    assert row is not None
    assert row["title"] == "old"
    assert row["started_at"] == 100.0
    assert filled.get_session("ghost") is None


def test_count_messages_counts_the_live_transcript(filled: SessionDB) -> None:
    first = filled.append_message("a-old", "user", "hello")
    filled.append_message("a-old", "assistant", "hi")
    filled.append_message("b-tg", "user", "elsewhere")
    assert filled.count_messages("a-old") == 2 == len(filled.get_messages("a-old"))
    rewind = update(messages).where(messages.c.id == first).values(active=0)
    filled._execute_write(lambda connection: connection.execute(rewind))
    assert filled.count_messages("a-old") == 1 == len(filled.get_messages("a-old"))
    assert filled.count_messages("c-new") == 0
    assert filled.count_messages("ghost") == 0


def test_session_reads_refuse_bad_input(filled: SessionDB) -> None:
    with pytest.raises(InvalidInputError):
        filled.list_sessions(handoff_state="lost")
    with pytest.raises(InvalidInputError):
        filled.list_sessions(limit=0)
    with pytest.raises(InvalidInputTypeError):
        filled.list_sessions(since="yesterday")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        filled.get_session("")
    with pytest.raises(InvalidInputError):
        filled.count_messages("")


def test_prune_dry_run_counts_without_deleting(filled: SessionDB, clock: HandClock) -> None:
    events = sum(len(filled.handoff_history(sid)) for sid in ("c-new", "e-failed"))
    assert events == 4
    assert filled.prune_handoff_events(0.0, dry_run=True) == 0  # events are "now": none older
    clock.advance(10)
    assert filled.prune_handoff_events(5.0, dry_run=True) == 4
    assert sum(len(filled.handoff_history(sid)) for sid in ("c-new", "e-failed")) == 4
    assert filled.prune_handoff_events(5.0) == 4


@pytest.mark.asyncio
@pytest.mark.usefixtures("filled")
async def test_the_native_store_reads_the_same(backend_url: URL) -> None:
    with SessionDB(url=backend_url) as sync_store:
        async with NativeAsyncSessionDB(url=backend_url) as native:
            for options in ({}, {"source": "cli", "limit": 2}, {"handoff_state": "pending"}):
                assert await native.list_sessions(**options) == sync_store.list_sessions(**options)
            assert await native.get_session("b-tg") == sync_store.get_session("b-tg")
            assert await native.get_session("ghost") is None
            sync_store.append_message("b-tg", "user", "hello")
            assert await native.count_messages("b-tg") == 1 == sync_store.count_messages("b-tg")
            assert await native.prune_handoff_events(
                0.0, dry_run=True
            ) == sync_store.prune_handoff_events(0.0, dry_run=True)


def test_upstreams_counts_of_sessions_and_messages(any_store: SessionDB) -> None:
    assert any_store.session_count() == 0
    assert any_store.message_count() == 0
    for session_id, source in (("c1", "cli"), ("t1", "telegram"), ("c2", "cli")):
        any_store.create_session(session_id, source)
    any_store.append_message("c1", "user", "one")
    for text in ("two", "three"):
        any_store.append_message("t1", "user", text)
    assert any_store.session_count() == 3
    assert (any_store.session_count("cli"), any_store.session_count("telegram")) == (2, 1)
    assert any_store.session_count("discord") == 0
    assert any_store.message_count() == 3
    assert (any_store.message_count("c1"), any_store.message_count("t1")) == (1, 2)
    assert any_store.message_count("c2") == any_store.message_count("ghost") == 0
    assert any_store.message_count("t1") == any_store.count_messages("t1")
    # Upstream counts rewound rows too; count_messages counts the live transcript.
    any_store._execute_write(
        lambda conn: conn.execute("UPDATE messages SET active = 0 WHERE session_id = 't1'")
    )
    assert (any_store.message_count("t1"), any_store.count_messages("t1")) == (2, 0)
    assert any_store.message_count() == 3
    with pytest.raises(TypeError):
        any_store.session_count(7)  # type: ignore[arg-type]
