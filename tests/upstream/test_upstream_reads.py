"""Reads of what upstream hermes-agent wrote: system prompts stored by hash, multimodal content,
unique titles, and every upstream column of a session and a message, on the real upstream files
(copies adopted through ``SessionDB(path)``) and on every backend."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, update
from sqlalchemy.engine import URL

from hermes_state import InvalidInputError, SessionDB
from hermes_state.content import decoded_content
from hermes_state.models import sessions, system_prompts
from tests.support.digest import cached_engine
from tests.support.processes import DEADLINE
from tests.support.vintages import REAL_SCHEMA11, REAL_SCHEMA30


def _adopted(source: Path, tmp_path: Path) -> Path:
    path = tmp_path / source.name
    shutil.copyfile(source, path)
    return path


def _query(path: Path, sql: str, *args: object) -> list[sqlite3.Row]:
    with sqlite3.connect(path) as connection:
        connection.row_factory = sqlite3.Row
        return connection.execute(sql, args).fetchall()


@pytest.fixture
def schema30(tmp_path: Path) -> Path:
    return _adopted(REAL_SCHEMA30, tmp_path)


@pytest.fixture
def adopted30(schema30: Path) -> Iterator[SessionDB]:
    db = SessionDB(schema30)
    try:
        yield db
    finally:
        db.close()


def _hashed_session(path: Path) -> tuple[str, str]:
    """A session of the file whose prompt lives only in system_prompts, and that prompt."""
    row = _query(
        path,
        "SELECT s.id, p.prompt FROM sessions s JOIN system_prompts p ON p.hash = "
        "s.system_prompt_hash WHERE s.system_prompt IS NULL ORDER BY s.id LIMIT 1",
    )[0]
    return row["id"], row["prompt"]


def _multimodal_session(path: Path) -> str:
    rows = _query(path, "SELECT session_id, content FROM messages WHERE active = 1 ORDER BY id")
    return next(str(r["session_id"]) for r in rows if (r["content"] or "").startswith("\x00json:"))


# -- the real schema-30 file -------------------------------------------------------------------


def test_hashed_system_prompt_is_resolved(adopted30: SessionDB, schema30: Path) -> None:
    session_id, prompt = _hashed_session(schema30)
    row = adopted30.get_session(session_id)
    assert row is not None
    assert row["system_prompt"] == prompt
    listed = {r["id"]: r for r in adopted30.list_sessions()}
    assert listed[session_id]["system_prompt"] == prompt


def test_every_session_column_round_trips(adopted30: SessionDB, schema30: Path) -> None:
    hashed = {
        r["id"]: r["prompt"]
        for r in _query(
            schema30,
            "SELECT s.id, p.prompt FROM sessions s JOIN system_prompts p "
            "ON p.hash = s.system_prompt_hash",
        )
    }
    plain = _query(schema30, "SELECT * FROM sessions ORDER BY id")
    assert len(plain) == 53
    for expected in plain:
        row = adopted30.get_session(expected["id"])
        assert row is not None
        wanted = dict(expected)
        wanted["system_prompt"] = hashed.get(expected["id"], expected["system_prompt"])
        assert {name: row[name] for name in wanted} == wanted
        # The store's order: the table's, with system_prompt where the models put it.
        assert list(row) == [column.name for column in sessions.c]


def test_every_message_column_round_trips(adopted30: SessionDB, schema30: Path) -> None:
    internal = {"display_identity", "display_order", "_compressed_summary"}
    checked = 0
    for (session_id,) in _query(schema30, "SELECT id FROM sessions ORDER BY id"):
        plain = _query(
            schema30,
            "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
            session_id,
        )
        got = adopted30.get_messages(session_id)
        assert [m["id"] for m in got] == [m["id"] for m in plain]
        for expected, message in zip(plain, got, strict=True):
            for name, stored in dict(expected).items():
                if name in internal:
                    continue
                value = stored
                if name == "content":
                    value = decoded_content(value)
                elif name == "tool_calls" and value:
                    value = json.loads(value)
                elif name == "display_metadata" and value is not None:
                    loaded = json.loads(value)
                    value = loaded if isinstance(loaded, dict) else None
                assert message[name] == value, (session_id, expected["id"], name)
            checked += 1
    assert checked == _query(schema30, "SELECT count(*) FROM messages WHERE active = 1")[0][0]


def test_multimodal_content_comes_back_as_a_list(adopted30: SessionDB, schema30: Path) -> None:
    session_id = _multimodal_session(schema30)
    stored = {
        r["id"]: r["content"]
        for r in _query(
            schema30, "SELECT id, content FROM messages WHERE session_id = ?", session_id
        )
    }
    got = adopted30.get_messages(session_id)
    multimodal = [m for m in got if (stored[m["id"]] or "").startswith("\x00json:")]
    assert multimodal
    for message in multimodal:
        assert isinstance(message["content"], list)
        assert message["content"] == json.loads(stored[message["id"]][len("\x00json:") :])
    # The watcher's read of many transcripts decodes the same way.
    assert adopted30.get_transcripts([session_id])[session_id] == got


def test_list_pending_handoffs_carries_the_hashed_prompt(
    adopted30: SessionDB, schema30: Path
) -> None:
    session_id, prompt = _hashed_session(schema30)
    assert adopted30.request_handoff(session_id, "telegram")
    pending = {r["id"]: r for r in adopted30.list_pending_handoffs()}
    assert pending[session_id]["system_prompt"] == prompt
    assert {r["id"]: r for r in adopted30.list_handoffs("pending")}[session_id][
        "system_prompt"
    ] == prompt


def test_claims_return_the_hashed_prompt(adopted30: SessionDB, schema30: Path) -> None:
    session_id, prompt = _hashed_session(schema30)
    assert adopted30.request_handoff(session_id, "telegram")
    claimed = adopted30.claim_pending_handoffs(100)
    assert {r["id"]: r["system_prompt"] for r in claimed}.get(session_id) == prompt


def test_duplicate_title_on_the_real_file(adopted30: SessionDB, schema30: Path) -> None:
    title = _query(schema30, "SELECT title FROM sessions WHERE title IS NOT NULL LIMIT 1")[0][0]
    with pytest.raises(InvalidInputError, match="unique") as raised:
        adopted30.create_session("another-one", "cli", title=title)
    assert repr(title) in str(raised.value)
    assert adopted30.get_session("another-one") is None


def test_invalid_json_after_the_prefix_stays_as_stored() -> None:
    assert decoded_content("\x00json:[not json") == "\x00json:[not json"
    assert decoded_content('\x00json:{"a": 1}') == {"a": 1}
    assert decoded_content("plain") == "plain"
    assert decoded_content(None) is None


# -- the real schema-11 file -------------------------------------------------------------------


def test_inline_prompt_of_schema11_still_returned(tmp_path: Path) -> None:
    path = _adopted(REAL_SCHEMA11, tmp_path)
    row = _query(
        path, "SELECT id, system_prompt FROM sessions WHERE system_prompt IS NOT NULL LIMIT 1"
    )[0]
    db = SessionDB(path)
    try:
        got = db.get_session(row["id"])
        assert got is not None
        assert got["system_prompt"] == row["system_prompt"]
        assert got["system_prompt_hash"] is None
    finally:
        db.close()


# -- every backend -----------------------------------------------------------------------------


def test_duplicate_title_raises_invalid_input(new_any_store: Callable[..., Any]) -> None:
    db = new_any_store()
    title = f"Deploy notes {uuid.uuid4().hex[:8]} 🚀"
    db.create_session("first", "cli", title=title)
    with pytest.raises(InvalidInputError, match="titles are unique") as raised:
        db.create_session("second", "cli", title=title)
    assert isinstance(raised.value, ValueError)
    assert repr(title) in str(raised.value)
    assert db.get_session("second") is None
    # The same id again is still a no-op, and untitled sessions never clash.
    db.create_session("first", "cli", title=title)
    db.create_session("third", "cli")
    db.create_session("fourth", "cli")
    assert db.get_session("first")["title"] == title


def test_hashed_prompt_on_every_backend(
    backend_url: URL, new_any_store: Callable[..., Any]
) -> None:
    db = new_any_store()
    digest = uuid.uuid4().hex
    prompt = "You are Hermes. " * 20
    db.create_session("hashed", "cli", system_prompt=None)
    db.create_session("inline", "cli", system_prompt="inline prompt")
    with cached_engine(backend_url).begin() as connection:
        connection.execute(insert(system_prompts).values(hash=digest, prompt=prompt))
        connection.execute(
            update(sessions).where(sessions.c.id == "hashed").values(system_prompt_hash=digest)
        )
    assert db.get_session("hashed")["system_prompt"] == prompt
    assert db.get_session("inline")["system_prompt"] == "inline prompt"
    assert {r["id"]: r["system_prompt"] for r in db.list_sessions()} == {
        "hashed": prompt,
        "inline": "inline prompt",
    }
    assert db.request_handoff("hashed", "telegram")
    assert [r["system_prompt"] for r in db.list_pending_handoffs()] == [prompt]
    claimed = db.claim_pending_handoffs(10)
    assert [(r["id"], r["system_prompt"]) for r in claimed] == [("hashed", prompt)]
    assert list(claimed[0]) == [column.name for column in sessions.c]


# -- the store's lock, as upstream code uses it ----------------------------------------------


def test_every_call_holds_the_stores_lock(store: SessionDB) -> None:
    """Upstream code swaps in or takes ``db._lock`` around its calls: each call, reads as well
    as writes, enters whatever lock is there."""
    store.create_session("locked", "cli")
    entered: list[str] = []

    class CountingLock:
        def __enter__(self) -> None:
            entered.append("in")

        def __exit__(self, *exc_info: object) -> None:
            entered.append("out")

    store._lock = CountingLock()
    assert store.request_handoff("locked", "telegram")
    assert store.get_handoff_state("locked") == {
        "state": "pending",
        "platform": "telegram",
        "error": None,
    }
    assert [row["id"] for row in store.list_pending_handoffs()] == ["locked"]
    assert entered == ["in", "out"] * 3


def test_a_lock_put_in_place_keeps_other_threads_calls_waiting(store: SessionDB) -> None:
    """By default the lock excludes nothing (calls on other threads run side by side); a real
    lock put in its place does: while one thread holds it, another thread's call on the same
    store does not start, and it runs once the lock is let go."""
    store.create_session("held", "cli")
    with store._lock:
        assert store.get_session("held") is not None  # the default: no exclusion at all
    store._lock = threading.RLock()
    started = threading.Event()
    finished = threading.Event()

    def read() -> None:
        started.set()
        store.get_handoff_state("held")
        finished.set()

    with store._lock:
        store.get_session("held")  # re-entrant: the holder's own calls still run
        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(DEADLINE)
        assert not finished.wait(0.2)  # held back by the lock, not by the database
    reader.join(DEADLINE)
    assert finished.is_set()
