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
from tests.support.transcripts import MEMORY, mark

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
    with pytest.raises(InvalidInputError):
        store.append_messages_batch("s", turn, chunk_rows=0)
    with pytest.raises(InvalidInputTypeError):
        store.append_messages_batch("s", turn, turn_lease_ttl_seconds="long")  # type: ignore[arg-type]
    assert store.get_messages("s") == []
    # A compression lock holder changes nothing for an append; chunks stay one transaction.
    assert store.append_messages_batch("s", turn, compression_lock_holder="c", chunk_rows=1) == 4
    assert counters(store, "s") == (4, 1)


# -- get_messages: upstream's switches and pages -------------------------------------------------


def numbered(db: SessionDB, session_id: str, count: int) -> list[int]:
    db.create_session(session_id, "cli")
    roles = ("user", "assistant")
    return [db.append_message(session_id, roles[n % 2], f"m{n}") for n in range(count)]


def contents(rows: list[dict[str, Any]]) -> list[Any]:
    return [row["content"] for row in rows]


def test_pages_of_the_transcript_as_upstream_pages_it(any_store: SessionDB) -> None:
    ids = numbered(any_store, "s", 10)
    numbered(any_store, "other", 3)
    get = any_store.get_messages
    assert contents(get("s", limit=3)) == ["m0", "m1", "m2"]
    assert contents(get("s", limit=3, offset=8)) == ["m8", "m9"]
    assert contents(get("s", offset=7)) == ["m7", "m8", "m9"]
    assert contents(get("s", limit=3, latest=True)) == ["m7", "m8", "m9"]  # oldest first
    assert contents(get("s", limit=3, offset=2, latest=True)) == ["m5", "m6", "m7"]
    assert contents(get("s", latest=True)) == [f"m{n}" for n in range(10)]
    assert contents(get("s", after_id=ids[6])) == ["m7", "m8", "m9"]
    assert contents(get("s", after_id=ids[2], limit=2)) == ["m3", "m4"]
    assert get("s", limit=0) == []
    assert get("s", after_id=ids[-1]) == []
    assert get("nobody", limit=5, latest=True) == []
    assert get("s", limit=2) == get("s")[:2]  # the same rows, whole


def test_rewound_rows_are_read_with_include_inactive(any_store: SessionDB) -> None:
    ids = numbered(any_store, "s", 5)
    mark(any_store, ids[1:3], active=0)
    assert contents(any_store.get_messages("s")) == ["m0", "m3", "m4"]
    every = any_store.get_messages("s", include_inactive=True)
    assert contents(every) == [f"m{n}" for n in range(5)]
    assert [row["active"] for row in every] == [1, 0, 0, 1, 1]
    page = any_store.get_messages("s", include_inactive=True, limit=2, latest=True)
    assert contents(page) == ["m3", "m4"]


def compacted_session(db: SessionDB) -> list[int]:
    """Four turns compacted in place: archived (active 0, compacted 1), then a summary and
    verbatim copies of the last two as the new live rows; then a turn the user rewound."""
    db.create_session("c", "cli")
    turns = [("user", "q1", 1.0), ("assistant", "a1", 2.0), ("user", "q2", 3.0)]
    turns.append(("assistant", "a2", 4.0))
    ids = [db.append_message("c", role, text, timestamp=at) for role, text, at in turns]
    mark(db, ids, active=0, compacted=1)
    db.append_messages_batch(
        "c",
        [
            {"role": "assistant", "content": "summary of q1", "_compressed_summary": True},
            *({"role": r, "content": t, "timestamp": at} for r, t, at in turns[2:]),
        ],
    )
    rewound = db.append_message("c", "user", "taken back")
    mark(db, [rewound], active=0)
    return ids


def test_include_compacted_reads_the_display_each_message_once(any_store: SessionDB) -> None:
    compacted_session(any_store)
    live = any_store.get_messages("c")
    assert contents(live) == ["summary of q1", "q2", "a2"]
    display = any_store.get_messages("c", include_compacted=True)
    assert contents(display) == ["q1", "a1", "q2", "a2", "summary of q1"]
    # A message with a live copy is shown by the copy.
    assert [row["active"] for row in display] == [0, 0, 1, 1, 1]
    assert [row["id"] for row in display[2:4]] == [row["id"] for row in live[1:]]
    page = any_store.get_messages("c", include_compacted=True, limit=2, offset=1, latest=True)
    assert contents(page) == ["q2", "a2"]
    everything = any_store.get_messages("c", include_compacted=True, include_inactive=True)
    assert contents(everything) == ["q1", "a1", "q2", "a2", "summary of q1", "taken back"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        pytest.param({"after_id": 1, "latest": True}, InvalidInputError, id="after-latest"),
        pytest.param({"after_id": 1, "offset": 2}, InvalidInputError, id="after-offset"),
        pytest.param({"after_id": 1, "include_compacted": True}, InvalidInputError, id="after-cmp"),
        pytest.param({"limit": -1}, InvalidInputError, id="limit-negative"),
        pytest.param({"offset": -1}, InvalidInputError, id="offset-negative"),
        pytest.param({"limit": "5"}, InvalidInputTypeError, id="limit-str"),
        pytest.param({"limit": True}, InvalidInputTypeError, id="limit-bool"),
        pytest.param({"after_id": 2.5}, InvalidInputTypeError, id="after-float"),
        pytest.param({"latest": 1}, InvalidInputTypeError, id="latest-int"),
        pytest.param({"include_inactive": "yes"}, InvalidInputTypeError, id="inactive-str"),
    ],
)
def test_pages_upstream_refuses_are_refused(
    any_store: SessionDB, arguments: dict[str, Any], error: type[Exception]
) -> None:
    numbered(any_store, "s", 2)
    with pytest.raises(error):
        any_store.get_messages("s", **arguments)


def explained(db: SessionDB, statement: Any, params: dict[str, Any]) -> str:
    with cached_engine(db.url).connect() as connection:
        compiled = statement.compile(dialect=connection.dialect)
        values = compiled.construct_params(params)
        ordered = tuple(values[name] for name in compiled.positiontup)
        plan = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled.string}", ordered)
        return " | ".join(str(row[-1]) for row in plan)


def test_pages_and_windows_are_read_through_the_index(store: SessionDB) -> None:
    if store.url.get_backend_name() != "sqlite":
        pytest.skip("SQLite's plans are read here")
    from hermes_state import statements

    params = {"session_id": "s", "limit": 5, "offset": 1, "after_id": 3, "around_message_id": 9}
    built = [
        statements.get_messages(limited=True, skipped=True),
        statements.get_messages(newest_first=True, limited=True),
        statements.get_messages(statements.Visibility.ALL, after=True, limited=True),
    ]
    for statement in built:
        plan = explained(store, statement, params)
        assert "idx_messages_session_id" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort: the index gives the order


# -- get_messages_around -------------------------------------------------------------------------


def ids_of(view: dict[str, Any]) -> list[int]:
    return [row["id"] for row in view["window"]]


def test_a_window_around_a_message(any_store: SessionDB) -> None:
    ids = numbered(any_store, "s", 10)
    numbered(any_store, "other", 4)  # interleaved ids of another session never show
    view = any_store.get_messages_around("s", ids[5], window=2)
    assert ids_of(view) == ids[3:8]
    assert (view["messages_before"], view["messages_after"]) == (2, 2)
    assert contents(view["window"]) == ["m3", "m4", "m5", "m6", "m7"]
    anchor_row = dict(view["window"][2])
    assert anchor_row.pop("_compressed_summary") == 0  # kept as stored, unlike get_messages
    assert anchor_row == any_store.get_messages("s")[5]
    default = any_store.get_messages_around("s", ids[5])
    assert ids_of(default) == ids[0:10]
    assert (default["messages_before"], default["messages_after"]) == (5, 4)


@pytest.mark.parametrize(
    ("anchor", "window", "expected", "before", "after"),
    [
        pytest.param(0, 5, slice(0, 6), 0, 5, id="at-the-start"),
        pytest.param(9, 5, slice(4, 10), 5, 0, id="at-the-end"),
        pytest.param(4, 0, slice(4, 5), 0, 0, id="window-zero"),
        pytest.param(4, -3, slice(4, 5), 0, 0, id="negative-window"),
        pytest.param(4, 50, slice(0, 10), 4, 5, id="larger-than-the-session"),
    ],
)
def test_a_window_tells_where_the_session_ends(
    store: SessionDB, anchor: int, window: int, expected: slice, before: int, after: int
) -> None:
    ids = numbered(store, "s", 10)
    view = store.get_messages_around("s", ids[anchor], window=window)
    assert ids_of(view) == ids[expected]
    assert (view["messages_before"], view["messages_after"]) == (before, after)


def test_a_window_of_a_message_elsewhere_is_empty(any_store: SessionDB) -> None:
    ids = numbered(any_store, "s", 3)
    numbered(any_store, "other", 3)
    empty = {"window": [], "messages_before": 0, "messages_after": 0}
    assert any_store.get_messages_around("other", ids[1], window=2) == empty
    assert any_store.get_messages_around("s", 10**9, window=2) == empty
    assert any_store.get_messages_around("nobody", ids[1]) == empty
    with pytest.raises(InvalidInputTypeError):
        any_store.get_messages_around("s", str(ids[1]))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputTypeError):
        any_store.get_messages_around("s", ids[1], window=2.0)  # type: ignore[arg-type]


def test_a_window_shows_rewound_rows_and_decodes_them(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    calls = [{"id": "t1", "function": {"name": "x", "arguments": "{}"}}]
    first = any_store.append_message("s", "assistant", "", tool_calls=calls)
    rewound = any_store.append_message("s", "user", [{"type": "text", "text": "hi"}])
    last = any_store.append_message("s", "tool", "result", tool_name="x")
    mark(any_store, [rewound], active=0)
    view = any_store.get_messages_around("s", last, window=2)
    assert ids_of(view) == [first, rewound, last]
    assert view["window"][0]["tool_calls"] == calls
    assert view["window"][1]["content"] == [{"type": "text", "text": "hi"}]
    assert view["window"][1]["active"] == 0
    assert {row["_compressed_summary"] for row in view["window"]} == {0}  # as stored
    scroll = any_store.get_messages_around("s", rewound, window=1)
    assert ids_of(scroll) == [first, rewound, last]


def test_a_window_is_read_through_the_index(store: SessionDB) -> None:
    if store.url.get_backend_name() != "sqlite":
        pytest.skip("SQLite's plans are read here")
    from hermes_state import statements

    params = {"session_id": "s", "around_message_id": 9, "limit": 3}
    for before in (True, False):
        plan = explained(store, statements.messages_around(before), params)
        assert "idx_messages_session_id" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


# -- get_messages_as_conversation ----------------------------------------------------------------


def test_the_conversation_form_says_only_what_is_there(any_store: SessionDB) -> None:
    any_store.create_session("s", "telegram")
    calls = [{"id": "c1", "type": "function", "function": {"name": "cron", "arguments": "{}"}}]
    details = [{"type": "reasoning.summary", "summary": "schedule it"}]
    any_store.append_message("s", "user", "  schedule a job  ", platform_message_id="tg-7")
    any_store.append_message(
        "s",
        "assistant",
        None,
        tool_calls=calls,
        reasoning="call the cron tool",
        reasoning_content="",
        reasoning_details=details,
        codex_reasoning_items=[{"id": "rs_1"}],
        finish_reason="tool_calls",
    )
    any_store.append_message(
        "s", "tool", '{"job": 1}', tool_call_id="c1", tool_name="cron", finish_reason="length"
    )
    any_store.append_message(
        "s", "assistant", MEMORY + "Done.", observed=True, display_kind="reply", api_content="x"
    )
    assert any_store.get_messages_as_conversation("s") == [
        {"role": "user", "content": "schedule a job", "message_id": "tg-7"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": calls,
            "finish_reason": "tool_calls",
            "reasoning": "call the cron tool",
            "reasoning_content": "",
            "reasoning_details": details,
            "codex_reasoning_items": [{"id": "rs_1"}],
        },
        {
            "role": "tool",
            "content": '{"job": 1}',
            "tool_call_id": "c1",
            "tool_name": "cron",
            "finish_reason": "length",
        },
        {
            "role": "assistant",
            "content": "Done.",
            "observed": True,
            "display_kind": "reply",
            "api_content": "x",
        },
    ]


def test_reasoning_is_replayed_on_assistant_turns_only(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    any_store.append_message("s", "user", "hi", reasoning="users do not reason")
    any_store.append_message("s", "assistant", "hello", reasoning="")
    any_store.append_message("s", "assistant", "again", codex_message_items="not JSON at all")
    user, empty, broken = any_store.get_messages_as_conversation("s")
    assert "reasoning" not in user
    assert "reasoning" not in empty
    assert "reasoning_content" not in empty  # never given: NULL, not ""
    assert broken["codex_message_items"] is None  # text that is not JSON replays as None


def test_the_conversation_keeps_tool_text_and_multimodal_parts(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    any_store.append_message("s", "user", parts)
    any_store.append_message("s", "tool", MEMORY + "  raw tool output  ")
    multimodal, tool = any_store.get_messages_as_conversation("s")
    assert multimodal == {"role": "user", "content": parts}
    assert tool["content"] == MEMORY + "  raw tool output  "  # only user/assistant text cleaned


def test_the_conversation_of_a_lineage(any_store: SessionDB) -> None:
    any_store.create_session("root", "tui")
    any_store.append_message("root", "user", "first prompt")
    any_store.append_message("root", "user", "first prompt")  # sent twice, unanswered
    any_store.append_message("root", "assistant", "first answer")
    any_store.create_session("child", "tui", parent_session_id="root")
    any_store.append_message("child", "user", "first prompt")  # answered since: kept
    any_store.append_message("child", "assistant", "second answer")
    any_store.create_session("unrelated", "tui")
    any_store.append_message("unrelated", "user", "elsewhere")

    def said(session_id: str, **options: bool) -> list[Any]:
        conversation = any_store.get_messages_as_conversation(session_id, **options)
        return [message["content"] for message in conversation]

    assert said("child") == ["first prompt", "second answer"]
    assert said("child", include_ancestors=True) == [
        "first prompt",
        "first answer",
        "first prompt",
        "second answer",
    ]
    assert said("root", include_ancestors=True) == ["first prompt", "first answer"]


def test_a_turn_copied_into_the_next_segment_is_replayed_once(any_store: SessionDB) -> None:
    any_store.create_session("root", "cli")
    any_store.append_message("root", "user", "carried", timestamp=10.0)
    any_store.create_session("tip", "cli", parent_session_id="root")
    any_store.append_message("tip", "assistant", "an answer in between", timestamp=11.0)
    any_store.append_message("tip", "user", "carried", timestamp=10.0)  # the rotation's copy
    conversation = any_store.get_messages_as_conversation("tip", include_ancestors=True)
    assert [m["content"] for m in conversation] == ["an answer in between", "carried"]


def test_a_branch_copy_is_replayed_alone(any_store: SessionDB) -> None:
    any_store.create_session("main", "cli")
    any_store.append_message("main", "user", "before the branch")
    config = {"_branched_from": "main"}
    any_store.create_session("branch", "cli", parent_session_id="main", model_config=config)
    any_store.append_message("branch", "user", "the branch's own copy")
    conversation = any_store.get_messages_as_conversation("branch", include_ancestors=True)
    assert [m["content"] for m in conversation] == ["the branch's own copy"]


def test_a_cycle_of_parents_ends_the_walk(store: SessionDB) -> None:
    store.create_session("a", "cli")
    store.create_session("b", "cli", parent_session_id="a")
    with cached_engine(store.url).begin() as connection:
        connection.execute(
            models.sessions.update().where(_s.id == "a").values(parent_session_id="b")
        )
    store.append_message("a", "user", "in a")
    store.append_message("b", "user", "in b")
    conversation = store.get_messages_as_conversation("b", include_ancestors=True)
    assert [m["content"] for m in conversation] == ["in a", "in b"]


def test_the_switches_of_the_conversation(any_store: SessionDB) -> None:
    compacted_session(any_store)

    def said(**options: bool) -> list[Any]:
        return [m["content"] for m in any_store.get_messages_as_conversation("c", **options)]

    assert said() == ["summary of q1", "q2", "a2"]
    assert said(include_compacted=True) == ["q1", "a1", "q2", "a2", "summary of q1"]
    assert said(include_inactive=True)[-1] == "taken back"
    live = any_store.get_messages_as_conversation("c", include_row_ids=True)
    assert [m["_row_id"] for m in live] == [m["id"] for m in any_store.get_messages("c")]
    assert "_compressed_summary" not in live[0]
    marked = any_store.get_messages_as_conversation("c", repair_alternation=True)
    assert marked[0]["_compressed_summary"] is True
    with pytest.raises(InvalidInputTypeError):
        any_store.get_messages_as_conversation("c", include_ancestors="yes")  # type: ignore[arg-type]
    assert any_store.get_messages_as_conversation("nobody", include_ancestors=True) == []


# -- a session compression closed takes no more messages ----------------------------------------


def test_a_session_compression_closed_takes_no_messages(any_store: SessionDB) -> None:
    from hermes_state import CompressionSessionClosedError

    any_store.create_session("done", "cli", ended_at=5.0, end_reason="compression")
    any_store.create_session("ended", "cli", ended_at=5.0, end_reason="user_exit")
    any_store.create_session("reason-only", "cli", end_reason="compression")  # never ended
    with pytest.raises(CompressionSessionClosedError) as raised:
        any_store.append_message("done", "user", "too late")
    assert raised.value.session_id == "done"
    assert "closed by compression" in str(raised.value)
    with pytest.raises(CompressionSessionClosedError):
        any_store.append_messages_batch("done", a_turn())
    assert any_store.get_messages("done", include_inactive=True) == []
    assert counters(any_store, "done") == (0, 0)
    # Ended otherwise, or not ended at all: messages still land.
    assert any_store.append_message("ended", "user", "after exit") > 0
    assert any_store.append_messages_batch("reason-only", a_turn()[:1]) == 1
    with pytest.raises(UnknownSessionError):  # and an unknown session is still unknown
        any_store.append_message("ghost", "user", "x")
