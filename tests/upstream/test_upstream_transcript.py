"""The transcript as upstream hermes-agent reads and writes it.

Upstream soft-deletes rewound turns (``messages.active = 0``) and its ``get_messages`` returns
the live rows only, in id order, every column of the row, ``tool_calls`` decoded from JSON. Its
``append_message`` takes keyword fields (tool calls, reasoning, platform ids...) and moves
``sessions.message_count`` / ``tool_call_count`` in the same transaction: one more message, and
as many tool calls as the list holds (a non-list value counts one). These tests hold our stores
to that on every backend, on new databases and on a real upstream file (schema 11), and check
that migration 0004 goes up and down on such a file leaving its schema exactly as it was.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.engine import URL

from hermes_state import (
    AsyncSessionDB,
    InvalidInputError,
    InvalidInputTypeError,
    NativeAsyncSessionDB,
    SessionDB,
    UnknownSessionError,
    models,
    schema,
)
from hermes_state.engine import resolve_url
from tests.support.legacy import row_digest, schema_entries, table_columns
from tests.support.stores import TRANSCRIPT_KEYS
from tests.support.vintages import REAL_SCHEMA11

UPSTREAM_SCHEMA11 = REAL_SCHEMA11
SID = "conversation"

_m = models.messages.c
_s = models.sessions.c


def counters(db: SessionDB, session_id: str = SID) -> tuple[int | None, int | None]:
    row = db._execute_write(
        lambda conn: conn.execute(
            select(_s.message_count, _s.tool_call_count).where(_s.id == session_id)
        ).one()
    )
    return row[0], row[1]


def rewind(db: SessionDB, *message_ids: int) -> None:
    """What upstream's rewind does to a turn: it stays on disk, marked inactive."""
    db._execute_write(
        lambda conn: conn.execute(
            update(models.messages).where(_m.id.in_(message_ids)).values(active=0)
        )
    )


def stored_tool_calls(db: SessionDB, message_id: int) -> str | None:
    return db._execute_write(
        lambda conn: conn.execute(select(_m.tool_calls).where(_m.id == message_id)).scalar_one()
    )


def upstream_tool_call_count(value: Any) -> int:
    """Upstream's rule, restated: JSON text is parsed first; None counts 0, a list its length,
    anything else one."""
    if isinstance(value, str):
        value = json.loads(value)
    if value is None:
        return 0
    return len(value) if isinstance(value, list) else 1


# -- new databases, every backend ---------------------------------------------------------------


def test_rewound_turns_are_left_out_and_the_rest_come_in_id_order(store: SessionDB) -> None:
    store.create_session(SID, "cli")
    # Timestamps deliberately out of order: upstream orders by id, never by clock.
    script = [("user", "one", 50.0), ("assistant", "two", 10.0), ("user", "three", 40.0)]
    script += [("assistant", "four", 20.0), ("user", "five", 30.0)]
    ids = [store.append_message(SID, role, text, timestamp=at) for role, text, at in script]

    rewind(store, ids[1], ids[3])

    transcript = store.get_messages(SID)
    assert [m["id"] for m in transcript] == [ids[0], ids[2], ids[4]]
    assert [m["content"] for m in transcript] == ["one", "three", "five"]
    assert [m["timestamp"] for m in transcript] == [50.0, 40.0, 30.0]
    assert {m["active"] for m in transcript} == {1}
    # Rewinding is not deleting: the counters still count what upstream counted on append.
    assert counters(store) == (5, 0)


TOOL_CALL_SHAPES: list[Any] = [
    [{"id": "call_1", "type": "function"}, {"id": "call_2", "type": "function"}],
    {"id": "call_3", "type": "function"},
    json.dumps([{"id": "call_4"}, {"id": "call_5"}, {"id": "call_6"}]),
    "[]",
    [],
    None,
]


def test_counters_move_exactly_as_upstream_moves_them(store: SessionDB) -> None:
    store.create_session(SID, "cli")
    store.create_session("neighbour", "cli")
    assert counters(store) == (0, 0)

    expected_tools = 0
    for number, tool_calls in enumerate(TOOL_CALL_SHAPES, start=1):
        message_id = store.append_message(SID, "assistant", None, tool_calls=tool_calls)
        expected_tools += upstream_tool_call_count(tool_calls)
        assert counters(store) == (number, expected_tools)

        # Stored as upstream stores it: JSON text of the parsed value, NULL when empty.
        parsed = json.loads(tool_calls) if isinstance(tool_calls, str) else tool_calls
        text = stored_tool_calls(store, message_id)
        assert (json.loads(text) if text is not None else None) == (parsed or None)

    assert expected_tools == 6
    assert counters(store, "neighbour") == (0, 0)
    # Positional appends (the original API) count too.
    store.append_message(SID, "user", "plain")
    assert counters(store) == (len(TOOL_CALL_SHAPES) + 1, 6)


def test_a_refused_append_writes_nothing(store: SessionDB) -> None:
    store.create_session(SID, "cli")
    bad: list[dict[str, Any]] = [
        {"tool_calls": [object()]},
        {"display_metadata": [1, 2]},
        {"display_metadata": "[1, 2]"},
        {"token_count": True},
        {"token_count": "12"},
        {"observed": "yes"},
        {"tool_name": 3},
        {"reasoning": "nul\x00inside"},
        {"timestamp": float("nan")},
        {"no_such_field": 1},
    ]
    for fields in bad:
        with pytest.raises((InvalidInputError, InvalidInputTypeError)):
            store.append_message(SID, "assistant", "x", **fields)
    with pytest.raises(UnknownSessionError):
        store.append_message("nobody", "assistant", "x", tool_calls=[{"id": "c"}])
    assert store.get_messages(SID) == []
    assert counters(store) == (0, 0)


EVERY_FIELD: dict[str, Any] = {
    "tool_call_id": "call_7",
    "tool_calls": [{"id": "call_7", "function": {"name": "terminal", "arguments": "{}"}}],
    "tool_name": "terminal",
    "effect_disposition": "applied",
    "token_count": 42,
    "finish_reason": "tool_calls",
    "reasoning": "I should list the files. ünïcödé 🚀",
    "reasoning_content": "thinking…",
    "reasoning_details": [{"type": "summary", "text": "list files"}],
    "codex_reasoning_items": [{"id": "rs_1"}],
    "codex_message_items": "already JSON text, stored as given",
    "platform_message_id": "tg-12345",
    "observed": True,
    "api_content": "exact bytes sent",
    "display_kind": "tool_progress",
    "display_metadata": {"task_count": 2},
    "timestamp": 1_700_000_123.25,
}


def expected_row(message_id: int, session_id: str = SID) -> dict[str, Any]:
    """What get_messages returns for a message appended with EVERY_FIELD."""
    row = {**EVERY_FIELD, "id": message_id, "session_id": session_id}
    row.update(role="assistant", content="calling a tool", observed=1, active=1, compacted=0)
    # Upstream's newest message identities, not given here.
    row.update(message_uid=None, absorbed_message_uids=None, tool_call_uids=None)
    row.update(tool_call_uid=None)
    # Structured reasoning comes back as the JSON text it is stored as (upstream's
    # get_messages decodes tool_calls and display_metadata only).
    for name in ("reasoning_details", "codex_reasoning_items"):
        row[name] = json.dumps(EVERY_FIELD[name])
    return row


def test_every_field_round_trips(store: SessionDB) -> None:
    store.create_session(SID, "cli")
    message_id = store.append_message(SID, "assistant", "calling a tool", **EVERY_FIELD)
    [message] = store.get_messages(SID)
    assert message == expected_row(message_id)
    assert set(message) == TRANSCRIPT_KEYS
    assert counters(store) == (1, 1)


@pytest.mark.asyncio
async def test_the_native_async_store_reads_and_writes_the_same(backend_url: URL) -> None:
    with SessionDB(url=backend_url) as sync_store:
        sync_store.create_session(SID, "cli")
        first = sync_store.append_message(SID, "user", "hello")
        async with NativeAsyncSessionDB(url=backend_url) as native:
            second = await native.append_message(SID, "assistant", "calling a tool", **EVERY_FIELD)
            third = await native.append_message(SID, "tool", "done")
            rewind(sync_store, third)
            transcript = await native.get_messages(SID)
            with pytest.raises(InvalidInputError):
                await native.append_message(SID, "assistant", "x", reasoning="nul\x00inside")
        assert transcript == sync_store.get_messages(SID)
        assert [m["id"] for m in transcript] == [first, second]
        assert transcript[1] == expected_row(second)
        assert counters(sync_store) == (3, 1)


def test_create_session_takes_upstreams_model_config_and_prompt(store: SessionDB) -> None:
    config = {"temperature": 0.7, "provider": "nous", "nested": {"ünï": [1, 2]}}
    store.create_session(SID, "cli", model_config=config, system_prompt="You are Hermes.")
    store.create_session("from-json", "cli", model_config=json.dumps(config))
    store.create_session("empty", "cli", model_config={})
    for bad in ([1], "not json", "[1]"):
        with pytest.raises((InvalidInputError, InvalidInputTypeError)):
            store.create_session("refused", "cli", model_config=bad)
    rows = store._execute_write(
        lambda conn: conn.execute(
            select(_s.id, _s.model_config, _s.system_prompt, _s.message_count).order_by(_s.id)
        ).all()
    )
    stored = {sid: (cfg and json.loads(cfg), prompt, count) for sid, cfg, prompt, count in rows}
    # The prompt is kept in system_prompts by its hash, as upstream keeps it since schema 25.
    assert stored == {
        SID: (config, None, 0),
        "empty": (None, None, 0),
        "from-json": (config, None, 0),
    }
    session = store.get_session(SID)
    assert session is not None
    assert session["system_prompt"] == "You are Hermes."


@pytest.mark.asyncio
async def test_the_threaded_proxy_passes_the_fields_through(tmp_path: Path) -> None:
    async with AsyncSessionDB(SessionDB(tmp_path / "state.db")) as db:
        await db.create_session(SID, "cli")
        kept = await db.append_message(SID, "assistant", "calling a tool", **EVERY_FIELD)
        undone = await db.append_message(SID, "user", "never mind")
        rewind(db.wrapped, undone)
        assert await db.get_messages(SID) == [expected_row(kept)]
        assert counters(db.wrapped) == (2, 1)


# -- a real upstream file (schema 11) ------------------------------------------------------------


@pytest.fixture
def upstream_file(tmp_path: Path) -> Path:
    """A private copy of the real upstream file (the fixture itself is never touched)."""
    path = tmp_path / "state.db"
    shutil.copyfile(UPSTREAM_SCHEMA11, path)
    return path


def raw_messages(path: Path) -> dict[int, dict[str, Any]]:
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        return {row["id"]: dict(row) for row in connection.execute("SELECT * FROM messages")}
    finally:
        connection.close()


def raw_counters(path: Path) -> dict[str, tuple[int, int]]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT id, message_count, tool_call_count FROM sessions")
        return {sid: (messages, tools) for sid, messages, tools in rows}
    finally:
        connection.close()


def test_an_upstream_file_reads_as_upstream_reads_it(upstream_file: Path) -> None:
    before = raw_messages(upstream_file)
    counted = raw_counters(upstream_file)
    with SessionDB(upstream_file) as db:
        for session_id, (message_count, tool_call_count) in counted.items():
            transcript = db.get_messages(session_id)
            # Upstream's own counters agree with its rows under the rule we follow.
            assert len(transcript) == message_count
            tools = sum(upstream_tool_call_count(before[m["id"]]["tool_calls"]) for m in transcript)
            assert tools == tool_call_count
            for message in transcript:
                raw = before[message["id"]]
                decoded = json.loads(raw["tool_calls"]) if raw["tool_calls"] else raw["tool_calls"]
                assert message == {
                    **raw,
                    "tool_calls": decoded,
                    # added by the migration, with upstream's defaults
                    "effect_disposition": None,
                    "platform_message_id": None,
                    "observed": 0,
                    "active": 1,
                    "api_content": None,
                    "display_kind": None,
                    "display_metadata": None,
                    "compacted": 0,
                    "message_uid": None,
                    "absorbed_message_uids": None,
                    "tool_call_uids": None,
                    "tool_call_uid": None,
                }
            assert [m["id"] for m in transcript] == sorted(m["id"] for m in transcript)


def test_appends_to_an_upstream_file_keep_its_counters_and_search(upstream_file: Path) -> None:
    session_id, (message_count, tool_call_count) = next(iter(raw_counters(upstream_file).items()))
    with SessionDB(upstream_file) as db:
        db.append_message(session_id, "user", "find the zanzibar report")
        db.append_message(
            session_id, "assistant", None, tool_calls=[{"id": "a"}, {"id": "b"}], tool_name="zq"
        )
        assert counters(db, session_id) == (message_count + 2, tool_call_count + 2)
        assert len(db.get_messages(session_id)) == message_count + 2
    # Upstream's FTS triggers still index what we write, tool names and calls included.
    connection = sqlite3.connect(upstream_file)
    try:
        hits = connection.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'zanzibar OR zq'"
        ).fetchone()
    finally:
        connection.close()
    assert hits == (2,)


def table_sql(path: Path, table: str) -> str:
    [sql] = [
        sql for kind, name, _t, sql in schema_entries(path) if (kind, name) == ("table", table)
    ]
    assert sql is not None
    return sql


def test_a_newer_upstream_file_keeps_its_own_columns(upstream_file: Path) -> None:
    """A file already carrying newer upstream columns (schema-16 shape, built inline): the
    migration keeps its ``active`` as it is, reads columns we do not model, and leaves out
    upstream's internal display columns as upstream does."""
    connection = sqlite3.connect(upstream_file)
    try:
        for ddl in (
            "platform_message_id TEXT",
            "observed INTEGER DEFAULT 0",
            "active INTEGER NOT NULL DEFAULT 1",
            "compacted INTEGER NOT NULL DEFAULT 0",
            "display_identity BLOB",
            "_compressed_summary INTEGER NOT NULL DEFAULT 0",
        ):
            connection.execute(f"ALTER TABLE messages ADD COLUMN {ddl}")
        session_id = connection.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
        ids = [
            row[0]
            for row in connection.execute(
                "SELECT id FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
            )
        ]
        connection.execute("UPDATE messages SET active = 0 WHERE id = ?", (ids[-1],))
        connection.execute(
            "UPDATE messages SET compacted = 1, _compressed_summary = 1, display_identity = x'00'"
            " WHERE id = ?",
            (ids[0],),
        )
        connection.commit()
    finally:
        connection.close()
    messages_sql = table_sql(upstream_file, "messages")

    with SessionDB(upstream_file) as db:
        transcript = db.get_messages(session_id)
    assert [m["id"] for m in transcript] == ids[:-1]
    assert transcript[0]["compacted"] == 1
    assert transcript[0]["_compressed_summary"] is True
    assert "_compressed_summary" not in transcript[1]
    assert all("display_identity" not in m for m in transcript)

    # Columns the file had were not added again: only the missing ones were appended.
    messages_sql_after = table_sql(upstream_file, "messages")
    assert messages_sql_after.startswith(messages_sql.removesuffix(")").rstrip())
    assert messages_sql_after.count("active INTEGER") == 1


def test_migration_0004_round_trip_leaves_an_upstream_file_as_it_was(upstream_file: Path) -> None:
    url = resolve_url(upstream_file)
    entries, digest = schema_entries(upstream_file), row_digest(upstream_file)
    columns = table_columns(upstream_file)

    schema.upgrade(url, "0003_handoff_events")
    at_0003 = schema_entries(upstream_file), row_digest(upstream_file)
    schema.upgrade(url, "0004_upstream_columns")
    assert schema.revision_of(url) == "0004_upstream_columns"
    added = set(table_columns(upstream_file)["messages"]) - set(columns["messages"])
    assert added == {
        "effect_disposition",
        "platform_message_id",
        "observed",
        "active",
        "api_content",
        "display_kind",
        "display_metadata",
    }
    # Every pre-existing row, all its columns, unchanged by the upgrade.
    assert row_digest(upstream_file, columns) == digest

    schema.downgrade(url, "0003_handoff_events")
    assert (schema_entries(upstream_file), row_digest(upstream_file)) == at_0003
    schema.upgrade(url)
    schema.downgrade(url, "base")
    assert schema_entries(upstream_file) == entries
    assert row_digest(upstream_file) == digest


# -- the library guide's model-layer example (docs/library.md) ----------------------------------

LIBRARY_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "library.md"


def test_the_library_guide_async_model_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = LIBRARY_GUIDE.read_text(encoding="utf-8")
    section = text.split("\n## The models, with an `AsyncSession`\n", 1)[1]
    program = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(program, "docs/library.md example", "exec"), {"__name__": "__main__"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "s1 3 1"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "1 user",
        "2 assistant",
        "3 tool",
    ]
