"""Upstream's transcript rewrites on every backend and every kind of store: clearing a
session's messages and rewinding to a user message."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from hermes_state import (
    InvalidInputError,
    InvalidInputTypeError,
    SessionDB,
    TranscriptChangedError,
    models,
)
from tests.support.digest import cached_engine, database_digest
from tests.support.transcripts import MEMORY, mark

_s = models.sessions.c


# -- clear_session_messages ----------------------------------------------------------------------


def usage(db: SessionDB, session_id: str) -> tuple[Any, ...]:
    row = db.get_session(session_id)
    assert row is not None
    names = ("message_count", "tool_call_count", "input_tokens", "output_tokens")
    return tuple(row[name] for name in (*names, "api_call_count"))


def spend_tokens(db: SessionDB, session_id: str) -> None:
    """Upstream's token accounting, as its writers leave it on the row."""
    values = {"input_tokens": 120, "output_tokens": 40, "api_call_count": 2}
    with cached_engine(db.url).begin() as connection:
        connection.execute(models.sessions.update().where(_s.id == session_id).values(**values))


def a_tool_session(db: SessionDB, session_id: str = "s") -> list[int]:
    db.create_session(session_id, "cli")
    calls = [{"id": "c1"}, {"id": "c2"}]
    ids = [db.append_message(session_id, "user", "run both", timestamp=10.0)]
    ids.append(db.append_message(session_id, "assistant", None, tool_calls=calls, timestamp=20.0))
    ids.append(db.append_message(session_id, "tool", "one", tool_call_id="c1", timestamp=30.0))
    ids.append(db.append_message(session_id, "tool", "two", tool_call_id="c2", timestamp=40.0))
    ids.append(db.append_message(session_id, "assistant", "both ran", timestamp=50.0))
    return ids


def test_clearing_every_message_keeps_the_session_and_zeroes_it(any_store: SessionDB) -> None:
    a_tool_session(any_store)
    a_tool_session(any_store, "other")
    spend_tokens(any_store, "s")
    assert usage(any_store, "s") == (5, 2, 120, 40, 2)
    assert any_store.clear_session_messages("s") is True
    assert any_store.get_messages("s", include_inactive=True) == []
    assert usage(any_store, "s") == (0, 0, 0, 0, 0)
    row = any_store.get_session("s")
    assert row is not None
    assert row["last_activity_at"] is not None
    assert len(any_store.get_messages("other")) == 5  # another session is untouched
    assert any_store.clear_session_messages("s") is True  # nothing left to clear: still True


def test_clearing_all_but_the_newest(any_store: SessionDB) -> None:
    ids = a_tool_session(any_store)
    assert any_store.clear_session_messages("s", keep_last_n=3) is True
    assert [row["id"] for row in any_store.get_messages("s")] == ids[2:]
    # upstream's clear counts tool results and messages with tool calls alike
    assert usage(any_store, "s")[:2] == (3, 2)
    assert any_store.clear_session_messages("s", keep_last_n=10) is True  # fewer: all stay
    assert len(any_store.get_messages("s")) == 3


def test_keep_last_n_counts_rewound_rows_but_the_counters_only_live_ones(
    any_store: SessionDB,
) -> None:
    ids = a_tool_session(any_store)
    mark(any_store, ids[-2:], active=0)
    assert any_store.clear_session_messages("s", keep_last_n=2) is True
    kept = any_store.get_messages("s", include_inactive=True)
    assert [row["id"] for row in kept] == ids[-2:]
    assert usage(any_store, "s")[:2] == (0, 0)  # nothing live is left: zeroed


def test_clearing_what_came_before_a_time(any_store: SessionDB) -> None:
    ids = a_tool_session(any_store)
    assert any_store.clear_session_messages("s", before_timestamp=30.0) is True
    assert [row["id"] for row in any_store.get_messages("s")] == ids[2:]
    assert usage(any_store, "s")[:2] == (3, 2)
    assert any_store.clear_session_messages("s", keep_last_n=0, before_timestamp=45.0)
    assert [row["id"] for row in any_store.get_messages("s")] == ids[4:]  # 0 keeps nothing


def test_clearing_an_unknown_session_answers_false(store: SessionDB) -> None:
    a_tool_session(store)
    before = database_digest(store.url)
    assert store.clear_session_messages("ghost") is False
    assert database_digest(store.url) == before
    for bad in ({"keep_last_n": "3"}, {"keep_last_n": 2.0}, {"before_timestamp": "yesterday"}):
        with pytest.raises(InvalidInputTypeError):
            store.clear_session_messages("s", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputTypeError):
        store.clear_session_messages("s", sessions_dir=3)  # type: ignore[arg-type]
    assert database_digest(store.url) == before


def test_clearing_forgets_usage_and_prompts_nobody_needs(store: SessionDB) -> None:
    a_tool_session(store)
    usage_rows = models.session_model_usage
    with cached_engine(store.url).begin() as connection:
        prompts = models.system_prompts
        connection.execute(prompts.insert().values(hash="orphan", prompt="nobody's"))
        connection.execute(prompts.insert().values(hash="used", prompt="You are Hermes."))
        connection.execute(models.sessions.update().values(system_prompt_hash="used"))
        columns = {column.name for column in usage_rows.columns}
        row = {"session_id": "s", "model": "m"}
        row.update({name: 0 for name in columns - {"session_id", "model"} if name != "id"})
        connection.execute(usage_rows.insert().values(**row))
    store.clear_session_messages("s")
    with cached_engine(store.url).connect() as connection:
        left = connection.execute(select(models.system_prompts.c.hash)).scalars().all()
        usage_left = connection.execute(select(usage_rows.c.session_id)).scalars().all()
    assert left == ["used"]
    assert usage_left == []


def test_clearing_everything_removes_the_sessions_files(store: SessionDB, tmp_path: Any) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    names = ["s.json", "s.jsonl", "request_dump_s_001.json", "other.jsonl", "s.txt"]
    for name in names:
        (folder / name).write_text("{}")
    a_tool_session(store)
    store.clear_session_messages("s", keep_last_n=2, sessions_dir=folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)  # a partial clear keeps them
    assert store.clear_session_messages("ghost", sessions_dir=folder) is False
    assert store.clear_session_messages("s", sessions_dir=str(folder)) is True
    assert sorted(p.name for p in folder.iterdir()) == ["other.jsonl", "s.txt"]


# -- rewind_to_message ---------------------------------------------------------------------------


def test_a_rewind_takes_back_the_turns_from_a_user_message(any_store: SessionDB) -> None:
    ids = a_tool_session(any_store)
    again = any_store.append_message("s", "user", MEMORY + "and now?")
    answer = any_store.append_message("s", "assistant", "now this", tool_calls=[{"id": "c3"}])
    result = any_store.rewind_to_message("s", again)
    assert result["rewound_count"] == 2
    assert result["new_head_id"] == ids[-1]
    target = result["target_message"]
    assert (target["id"], target["role"], target["content"]) == (again, "user", MEMORY + "and now?")
    assert [row["id"] for row in any_store.get_messages("s")] == ids
    every = any_store.get_messages("s", include_inactive=True)
    assert [row["active"] for row in every[-2:]] == [0, 0]
    assert every[-1]["id"] == answer
    row = any_store.get_session("s")
    assert row is not None
    assert (row["message_count"], row["tool_call_count"], row["rewind_count"]) == (5, 2, 1)


def test_a_rewind_to_the_first_message_leaves_nothing_live(any_store: SessionDB) -> None:
    ids = a_tool_session(any_store)
    result = any_store.rewind_to_message("s", ids[0])
    assert (result["rewound_count"], result["new_head_id"]) == (5, None)
    assert any_store.get_messages("s") == []
    assert usage(any_store, "s")[:2] == (0, 0)
    again = any_store.rewind_to_message("s", ids[0])  # nothing live from there: still counted
    assert again["rewound_count"] == 0
    row = any_store.get_session("s")
    assert row is not None
    assert row["rewind_count"] == 2


def test_a_rewind_refuses_what_is_not_a_user_message_of_the_session(store: SessionDB) -> None:
    ids = a_tool_session(store)
    a_tool_session(store, "other")
    before = database_digest(store.url)
    for session_id, target in (("s", ids[1]), ("s", 10**9), ("other", ids[0]), ("ghost", ids[0])):
        with pytest.raises(InvalidInputError):
            store.rewind_to_message(session_id, target)
    with pytest.raises(InvalidInputTypeError):
        store.rewind_to_message("s", str(ids[0]))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="preserve_compaction_handoff"):
        store.rewind_to_message("s", ids[0], preserve_compaction_handoff=True)
    assert database_digest(store.url) == before


def test_a_rewind_pinned_to_what_the_caller_saw(any_store: SessionDB) -> None:
    ids = a_tool_session(any_store)
    said = any_store.append_message("s", "user", MEMORY + "  take this back ")
    live = [*ids, said]
    with pytest.raises(TranscriptChangedError):
        any_store.rewind_to_message("s", said, expected_active_ids=live[:-1])
    with pytest.raises(TranscriptChangedError):
        any_store.rewind_to_message("s", said, expected_target_content="something else")
    assert len(any_store.get_messages("s")) == 6  # refused: nothing written
    row = any_store.get_session("s")
    assert row is not None
    assert row["rewind_count"] == 0
    result = any_store.rewind_to_message(
        "s", said, expected_active_ids=live, expected_target_content="take this back"
    )
    assert result["rewound_count"] == 1
    with pytest.raises(InvalidInputError, match="not a live message"):
        any_store.rewind_to_message("s", said, expected_target_content="take this back")


def test_a_session_compression_closed_is_not_rewound(any_store: SessionDB) -> None:
    from hermes_state import CompressionSessionClosedError

    ids = a_tool_session(any_store)
    with cached_engine(any_store.url).begin() as connection:
        closing = models.sessions.update().where(_s.id == "s")
        connection.execute(closing.values(ended_at=60.0, end_reason="compression"))
    with pytest.raises(CompressionSessionClosedError):
        any_store.rewind_to_message("s", ids[0])
    assert len(any_store.get_messages("s")) == 5
    assert any_store.clear_session_messages("s") is True  # upstream's clear has no such guard
