"""Upstream's transcript operations on every backend and every kind of store: the batch
append, the paged and windowed reads, the conversation form, clearing and rewinding."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select, text

from hermes_state import (
    InvalidInputError,
    InvalidInputTypeError,
    SessionDB,
    UnknownSessionError,
    models,
)
from hermes_state.content import NUL_MARKER
from tests.support.digest import cached_engine, database_digest

_m = models.messages.c
_s = models.sessions.c


def raw(db: SessionDB, column: Any, session_id: str) -> list[Any]:
    """One column of a session's stored rows, in id order, as the database holds them."""
    query = select(column).where(_m.session_id == session_id).order_by(_m.id)
    with cached_engine(db.url).connect() as connection:
        return list(connection.execute(query).scalars())


def counters(db: SessionDB, session_id: str) -> tuple[int | None, int | None]:
    row = db.get_session(session_id)
    assert row is not None
    return row["message_count"], row["tool_call_count"]


def a_turn() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "what is in the folder?"},
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [{"id": "c1", "function": {"name": "ls", "arguments": "{}"}}],
            "reasoning": "a listing answers it",
            "reasoning_content": "scratch",
            "finish_reason": "tool_calls",
        },
        {
            "role": "tool",
            "content": "a.txt b.txt",
            "tool_name": "ls",
            "tool_call_id": "c1",
            "reasoning": "tools do not reason",
        },
        {"role": "assistant", "content": "two files", "finish_reason": "stop"},
    ]


# -- append_messages_batch -----------------------------------------------------------------------

_SAME = ("id", "session_id", "timestamp")


def test_a_batch_stores_what_one_append_at_a_time_stores(any_store: SessionDB) -> None:
    any_store.create_session("batch", "cli")
    any_store.create_session("single", "cli")
    turn = a_turn()
    assert any_store.append_messages_batch("batch", turn) == 4
    for message in turn:
        fields = {k: v for k, v in message.items() if k not in ("role", "content")}
        if message["role"] != "assistant":
            fields.pop("reasoning", None)
        any_store.append_message("single", message["role"], message["content"], **fields)

    def shown(session_id: str) -> list[dict[str, Any]]:
        rows = any_store.get_messages(session_id)
        return [{k: v for k, v in row.items() if k not in _SAME} for row in rows]

    assert shown("batch") == shown("single")
    assert counters(any_store, "batch") == counters(any_store, "single") == (4, 1)
    stamps = [row["timestamp"] for row in any_store.get_messages("batch")]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 4


def test_a_batch_keeps_reasoning_on_assistant_messages_only(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    any_store.append_messages_batch("s", a_turn())
    rows = any_store.get_messages("s")
    assert [row["reasoning"] for row in rows] == [None, "a listing answers it", None, None]
    assert [row["reasoning_content"] for row in rows] == [None, "scratch", None, None]
    assert rows[1]["tool_calls"] == a_turn()[1]["tool_calls"]
    assert (rows[2]["tool_name"], rows[2]["tool_call_id"]) == ("ls", "c1")


def test_a_batch_reads_upstreams_message_dicts(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    batch = [
        {"content": "no role"},
        {"role": "user", "content": "from telegram", "message_id": "tg-1", "_row_id": 99},
        {"role": "user", "content": "both", "platform_message_id": "p-2", "message_id": "m-2"},
        {"role": "assistant", "content": "then", "timestamp": 5.0, "observed": True},
        {"role": "assistant", "content": "summary", "_compressed_summary": True},
    ]
    assert any_store.append_messages_batch("s", batch) == 5
    rows = any_store.get_messages("s")
    assert rows[0]["role"] == "unknown"
    assert [row["platform_message_id"] for row in rows] == [None, "tg-1", "p-2", None, None]
    assert (rows[3]["timestamp"], rows[3]["observed"]) == (5.0, 1)
    assert rows[3]["timestamp"] < rows[4]["timestamp"]  # after the explicit one, not before
    assert rows[4].get("_compressed_summary") is True
    assert "_compressed_summary" not in rows[3]


@pytest.mark.parametrize(
    ("tool_calls", "stored", "counted"),
    [
        pytest.param({}, None, 0, id="empty-object"),
        pytest.param("{}", None, 0, id="empty-object-text"),
        pytest.param([], None, 0, id="empty-list"),
        pytest.param(0, None, 0, id="zero"),
        pytest.param(False, None, 0, id="false"),
        pytest.param("null", None, 0, id="null-text"),
        pytest.param("{not json", None, 0, id="not-json"),
        pytest.param([{"id": "a"}, {"id": "b"}], [{"id": "a"}, {"id": "b"}], 2, id="list"),
        pytest.param('[{"id": "a"}]', [{"id": "a"}], 1, id="list-text"),
        pytest.param({"id": "one"}, {"id": "one"}, 1, id="object"),
    ],
)
def test_tool_calls_are_stored_and_counted_as_upstream_does(
    store: SessionDB, tool_calls: object, stored: object, counted: int
) -> None:
    store.create_session("batch", "cli")
    store.create_session("single", "cli")
    store.append_messages_batch("batch", [{"role": "assistant", "tool_calls": tool_calls}])
    store.append_message("single", "assistant", None, tool_calls=tool_calls)
    for session_id in ("batch", "single"):
        (text_form,) = raw(store, _m.tool_calls, session_id)
        assert (None if text_form is None else json.loads(text_form)) == stored
        assert store.get_messages(session_id)[0]["tool_calls"] == stored
        assert counters(store, session_id) == (1, counted)


def test_multimodal_content_is_stored_with_upstreams_prefix(any_store: SessionDB) -> None:
    parts = [
        {"type": "text", "text": "what is this? ünï"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
    ]
    any_store.create_session("s", "cli")
    any_store.append_messages_batch("s", [{"role": "user", "content": parts}])
    any_store.append_message("s", "user", {"type": "input_audio", "data": "x"})
    rows = any_store.get_messages("s")
    assert [row["content"] for row in rows] == [parts, {"type": "input_audio", "data": "x"}]
    first = raw(any_store, _m.content, "s")[0]
    nul = "\x00" if any_store.url.get_backend_name() == "sqlite" else NUL_MARKER
    assert first == nul + "json:" + json.dumps(parts)


def test_text_that_looks_like_the_servers_marker_comes_back_as_given(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    texts = [NUL_MARKER + "json:[1]", "\ufffe starts with an escape", "plain"]
    any_store.append_messages_batch("s", [{"role": "user", "content": t} for t in texts])
    assert [row["content"] for row in any_store.get_messages("s")] == texts


def test_lone_surrogates_are_stored_as_replacement_characters(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    any_store.append_message("s", "tool", "half \ud83d a pair", tool_name="gr\udcffep")
    any_store.append_messages_batch(
        "s", [{"role": "assistant", "content": "\udc00", "reasoning": "think \ud800"}]
    )
    first, second = any_store.get_messages("s")
    assert (first["content"], first["tool_name"]) == ("half \ufffd a pair", "gr\ufffdep")
    assert (second["content"], second["reasoning"]) == ("\ufffd", "think \ufffd")


def test_an_empty_batch_touches_nothing(store: SessionDB) -> None:
    store.create_session("s", "cli")
    before = database_digest(store.url)
    assert store.append_messages_batch("s", []) == 0
    assert store.append_messages_batch("no such session", ()) == 0
    assert database_digest(store.url) == before


@pytest.mark.parametrize(
    ("batch", "error"),
    [
        pytest.param("not a list", InvalidInputTypeError, id="str"),
        pytest.param({"role": "user"}, InvalidInputTypeError, id="one-dict"),
        pytest.param(None, InvalidInputTypeError, id="none"),
        pytest.param([{"role": "user"}, "text"], InvalidInputTypeError, id="item-str"),
        pytest.param([{"role": "user"}, {"role": ""}], InvalidInputError, id="blank-role"),
        pytest.param([{"role": "user", "content": 3}], InvalidInputTypeError, id="content-int"),
        pytest.param([{"role": "user", "content": "a\x00b"}], InvalidInputError, id="nul"),
        pytest.param([{"role": "user", "token_count": "9"}], InvalidInputTypeError, id="count"),
        pytest.param([{"role": "user", "timestamp": float("inf")}], InvalidInputError, id="inf"),
        pytest.param([{"role": "user", "content": [object()]}], InvalidInputTypeError, id="part"),
    ],
)
def test_a_bad_message_anywhere_refuses_the_whole_batch(
    store: SessionDB, batch: object, error: type[Exception]
) -> None:
    store.create_session("s", "cli")
    store.append_message("s", "user", "already there")
    before = database_digest(store.url)
    with pytest.raises(error):
        store.append_messages_batch("s", batch)  # type: ignore[arg-type]
    assert database_digest(store.url) == before


def test_a_batch_for_an_unknown_session_writes_nothing(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    with pytest.raises(UnknownSessionError):
        any_store.append_messages_batch("ghost", a_turn())
    assert any_store.message_count() == 0
    assert counters(any_store, "s") == (0, 0)


def test_a_batch_failing_in_the_database_leaves_no_row(store: SessionDB) -> None:
    if store.url.get_backend_name() != "sqlite":
        pytest.skip("the failure is injected with an SQLite trigger")
    store.create_session("s", "cli")
    with cached_engine(store.url).begin() as connection:
        connection.execute(
            text(
                "CREATE TRIGGER refuse_boom BEFORE INSERT ON messages "
                "WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'no boom'); END"
            )
        )
    batch = [*a_turn()[:2], {"role": "user", "content": "boom"}, *a_turn()[2:]]
    with pytest.raises(Exception, match="no boom"):
        store.append_messages_batch("s", batch)
    assert store.get_messages("s") == []
    assert counters(store, "s") == (0, 0)


def test_a_batch_refuses_what_it_cannot_honour(store: SessionDB) -> None:
    store.create_session("s", "cli")
    turn = a_turn()
    with pytest.raises(InvalidInputError, match="turn_lease_holder"):
        store.append_messages_batch("s", turn, turn_lease_holder="pid=1:turn=x")
    with pytest.raises(InvalidInputError):
        store.append_messages_batch("s", turn, chunk_rows=0)
    with pytest.raises(InvalidInputTypeError):
        store.append_messages_batch("s", turn, turn_lease_ttl_seconds="long")  # type: ignore[arg-type]
    assert store.get_messages("s") == []
    # A compression lock holder changes nothing for an append; chunks stay one transaction.
    assert store.append_messages_batch("s", turn, compression_lock_holder="c", chunk_rows=1) == 4
    assert counters(store, "s") == (4, 1)
