"""The ORM loads what the store returns: JSON decoded, multimodal content as its parts, times
as aware UTC datetimes; the DDL and the stored values are those of the tables the store uses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.exc import StatementError
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.schema import CreateTable

from hermes_state import InvalidInputError, SessionDB
from hermes_state.engine import with_driver
from hermes_state.models import AgentSession, Message, metadata
from hermes_state.models.orm import orm_metadata

CALLS = [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]


@pytest.mark.parametrize(
    "dialect", [sqlite.dialect(), postgresql.psycopg.dialect(), mysql.pymysql.dialect()]
)
def test_the_orm_tables_have_the_same_ddl_as_the_stores(dialect: object) -> None:
    assert orm_metadata.tables.keys() == metadata.tables.keys()
    for table in metadata.sorted_tables:
        ours = str(CreateTable(table).compile(dialect=dialect))  # type: ignore[arg-type]
        orm = str(CreateTable(orm_metadata.tables[table.name]).compile(dialect=dialect))  # type: ignore[arg-type]
        assert orm == ours, table.name


def test_what_the_store_wrote_loads_as_python_values(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    message_id = store.append_message("s1", "assistant", None, tool_calls=CALLS)
    engine = create_engine(with_driver(store.url, asyncio=False))
    try:
        with OrmSession(engine) as session:
            message = session.get_one(Message, message_id)
            assert message.tool_calls == CALLS
            assert message.tool_calls == store.get_messages("s1")[0]["tool_calls"]
            assert isinstance(message.timestamp, datetime)
            assert message.timestamp.tzinfo is UTC
            stored = store.get_messages("s1")[0]["timestamp"]
            assert message.timestamp.timestamp() == pytest.approx(stored)
            owner = session.get_one(AgentSession, "s1")
            assert owner.started_at.tzinfo is UTC
            assert owner.ended_at is None
    finally:
        engine.dispose()


def test_what_the_orm_writes_the_store_reads_as_upstream_stores_it(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    engine = create_engine(with_driver(store.url, asyncio=False))
    try:
        with OrmSession(engine) as session:
            session.add(Message(session_id="s1", role="user", content=parts, timestamp=when))
            session.add(
                Message(session_id="s1", role="assistant", tool_calls=CALLS, timestamp=when)
            )
            session.commit()
        with engine.connect() as connection:
            raw = connection.execute(
                text("SELECT tool_calls, timestamp FROM messages WHERE role = 'assistant'")
            ).one()
        assert json.loads(raw.tool_calls) == CALLS  # stored as text, as upstream stores it
        assert raw.tool_calls == json.dumps(CALLS)
        assert raw.timestamp == pytest.approx(when.timestamp())
    finally:
        engine.dispose()
    user, assistant = store.get_messages("s1")
    assert user["content"] == parts
    assert assistant["tool_calls"] == CALLS
    assert user["timestamp"] == pytest.approx(when.timestamp())


def test_text_that_is_not_json_loads_as_it_is(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    message_id = store.append_message("s1", "user", "[plain text, not JSON")
    engine = create_engine(with_driver(store.url, asyncio=False))
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE messages SET tool_calls = 'not json' WHERE id = :id"),
                {"id": message_id},
            )
        with OrmSession(engine) as session:
            message = session.get_one(Message, message_id)
            assert message.tool_calls == "not json"
            assert message.content == "[plain text, not JSON"
    finally:
        engine.dispose()


def test_a_naive_datetime_is_refused(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    engine = create_engine(with_driver(store.url, asyncio=False))
    try:
        with OrmSession(engine) as session:
            session.add(
                Message(session_id="s1", role="user", content="x", timestamp=datetime(2026, 1, 1))
            )
            with pytest.raises(StatementError) as caught:
                session.commit()
        assert isinstance(caught.value.orig, InvalidInputError)
        assert "no time zone" in str(caught.value.orig)
        assert store.get_messages("s1") == []
    finally:
        engine.dispose()
