"""Session portability on every backend and every kind of store: ``export_session``,
``export_session_lineage``, ``export_all``, the export guard (``assert_export_safe``) and
``import_sessions`` (its checks, caps, idempotence, parents, titles), and one round trip of the
same export through SQLite, PostgreSQL, MariaDB and SQLite again."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.engine import URL

import hermes_state
from hermes_state import SessionDB, SessionExportTooLargeError
from hermes_state.errors import HermesStateError, InvalidInputError
from hermes_state.models import sessions
from hermes_state.plans import portability
from tests.conftest import database_at_head, require_server
from tests.support.digest import database_digest
from tests.support.stores import HandClock

IMAGE = [
    {"type": "text", "text": "what is in this picture?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
]
CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}},
    {"id": "call_2", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
]

#: What an import keeps of a session row (the rest is live state it resets, or derived).
KEPT = (
    "id",
    "source",
    "user_id",
    "model",
    "model_config",
    "system_prompt",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
    "api_call_count",
    "archived",
)


@pytest.fixture
def db(new_any_store: Callable[..., SessionDB]) -> SessionDB:
    return new_any_store(clock=HandClock(5_000.0))


def set_columns(db: SessionDB, session_id: str, **values: Any) -> None:
    statement = update(sessions).where(sessions.c.id == session_id).values(**values)
    db._execute_write(lambda conn: conn.execute(statement))


def conversation(db: SessionDB) -> None:
    """A compressed conversation (root -> tip), a branch of the root, a plain session."""
    db.create_session(
        "root", "cli", model="m-1", system_prompt="be brief", started_at=1_000.0, cwd="/w"
    )
    db.append_message("root", "user", IMAGE, timestamp=1_001.0)
    db.append_message(
        "root", "assistant", "reading", tool_calls=CALLS, reasoning="think", timestamp=1_002.0
    )
    db.append_message("root", "tool", "file text", tool_call_id="call_1", timestamp=1_003.0)
    db.append_message("root", "tool", "no match", tool_call_id="call_2", timestamp=1_004.0)
    db.update_token_counts("root", input_tokens=120, output_tokens=30, model="m-1")
    db.set_session_title("root", "Picture question")
    db.end_session("root", "compression")
    set_columns(db, "root", ended_at=1_005.0)
    db.create_session("tip", "cli", parent_session_id="root", started_at=1_006.0)
    db.append_message("tip", "user", "and now?", timestamp=1_007.0)
    db.append_message("tip", "assistant", "done", timestamp=1_008.0)
    db.create_session(
        "branch",
        "cli",
        parent_session_id="root",
        started_at=1_009.0,
        model_config={"_branched_from": "root"},
    )
    db.append_message("branch", "user", "other way", timestamp=1_010.0)
    db.create_session("plain", "telegram", started_at=900.0)
    db.append_message("plain", "user", "héllo 世界 😀", timestamp=901.0)


def comparable(exported: dict[str, Any]) -> dict[str, Any]:
    """What an import must keep of an export: the kept columns and every message but its row
    id (an import numbers messages anew)."""
    kept = {name: exported.get(name) for name in KEPT}
    kept["messages"] = [
        {key: value for key, value in message.items() if key not in ("id", "session_id")}
        for message in exported["messages"]
    ]
    return kept


# -- export -----------------------------------------------------------------------------------


def test_an_export_is_the_session_row_and_its_live_transcript(db: SessionDB) -> None:
    conversation(db)
    db.rewind_to_message("tip", db.get_messages("tip")[0]["id"])  # the tip's turns rewound
    exported = db.export_session("root")
    assert exported is not None
    messages = exported.pop("messages")
    assert exported == db.get_session("root")
    assert messages == db.get_messages("root")
    assert messages[0]["content"] == IMAGE  # multimodal content comes back as given
    assert messages[1]["tool_calls"] == CALLS
    assert messages[1]["reasoning"] == "think"
    assert exported["system_prompt"] == "be brief"
    assert db.export_session("tip") == {**db.get_session("tip"), "messages": []}  # type: ignore[dict-item]
    assert db.export_session("nobody") is None


def test_a_lineage_export_joins_the_compressed_segments_and_leaves_branches_out(
    db: SessionDB,
) -> None:
    conversation(db)
    whole = db.export_session_lineage("tip")
    assert whole is not None
    assert whole["lineage_session_ids"] == ["root", "tip"]
    assert [segment["id"] for segment in whole["segments"]] == ["root", "tip"]
    assert whole["id"] == "tip"  # the newest segment's row
    assert whole["message_count"] == 6 == len(whole["messages"])
    assert [m["session_id"] for m in whole["messages"]] == ["root"] * 4 + ["tip"] * 2
    assert db.export_session_lineage("root") == whole | {"id": "tip"}
    branch = db.export_session_lineage("branch")
    assert branch is not None
    assert branch["lineage_session_ids"] == ["branch"]
    assert db.export_session_lineage("nobody") is None
    assert db.export_session_lineage(None) is None


def test_export_all_holds_every_session_archived_too_and_filters_by_source(
    db: SessionDB,
) -> None:
    conversation(db)
    db.set_session_archived("plain", True)
    everything = db.export_all()
    assert sorted(row["id"] for row in everything) == ["branch", "plain", "root", "tip"]
    assert [row["id"] for row in everything] == [row["id"] for row in db.search_sessions(limit=10)]
    assert all(row["messages"] == db.get_messages(row["id"]) for row in everything)
    assert [row["id"] for row in db.export_all(source="telegram")] == ["plain"]
    assert db.export_all(source="nothing") == []


def test_the_export_guard_counts_live_messages_up_to_its_limit(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation(db)
    assert db.assert_export_safe("root") == 4
    assert db.assert_export_safe("root", max_messages=4) == 4
    with pytest.raises(SessionExportTooLargeError) as raised:
        db.assert_export_safe("root", max_messages=3)
    error = raised.value
    assert isinstance(error, ValueError)
    assert isinstance(error, HermesStateError)
    assert (error.session_id, error.message_count, error.limit) == ("root", 4, 3)
    assert db.assert_export_safe("root", max_messages=0) == 0  # no guard, nothing counted
    with pytest.raises(InvalidInputError):
        db.assert_export_safe("root", max_messages=-1)
    monkeypatch.setenv(portability.EXPORT_LIMIT_ENV, "2")
    assert hermes_state.resolved_max_export_messages() == 2
    with pytest.raises(SessionExportTooLargeError):
        db.assert_export_safe("root")
    monkeypatch.setenv(portability.EXPORT_LIMIT_ENV, "many")
    assert hermes_state.resolved_max_export_messages() == hermes_state.MAX_SAFE_EXPORT_MESSAGES


def test_the_guard_reads_the_limit_where_upstreams_callers_replace_it(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation(db)
    monkeypatch.setattr(hermes_state, "resolved_max_export_messages", lambda: 0)
    assert db.assert_export_safe("root") == 0  # guard off: nothing counted
    monkeypatch.setattr(hermes_state, "resolved_max_export_messages", lambda: 3)
    with pytest.raises(SessionExportTooLargeError):
        db.assert_export_safe("root")
    assert SessionDB._IMPORT_MAX_SESSIONS == 500  # upstream's names for its caps
    assert SessionDB._IMPORT_MAX_SESSION_BYTES == 5 * 1024 * 1024


# -- import -----------------------------------------------------------------------------------


def test_an_import_restores_what_was_exported(db: SessionDB) -> None:
    conversation(db)
    before = {row["id"]: comparable(row) for row in db.export_all()}
    exported = db.export_all()
    db.delete_sessions(list(before))
    assert db.export_all() == []
    result = db.import_sessions(exported)
    assert result["ok"] is True
    assert result["errors"] == []
    assert (result["imported"], result["skipped"], result["detached"]) == (4, 0, 0)
    assert sorted(result["imported_ids"]) == sorted(before)
    after = {row["id"]: comparable(row) for row in db.export_all()}
    assert after == before
    assert db.get_compression_lineage("tip") == ["root", "tip"]
    assert db.get_messages_as_conversation("root")[1]["tool_calls"] == CALLS


def test_importing_the_same_export_twice_changes_nothing_the_second_time(
    db: SessionDB, backend_url: URL
) -> None:
    conversation(db)
    exported = db.export_all()
    db.delete_sessions([row["id"] for row in exported])
    assert db.import_sessions(exported)["imported"] == 4
    digest = database_digest(backend_url)
    again = db.import_sessions(exported)
    assert (again["ok"], again["imported"], again["skipped"]) == (True, 0, 4)
    assert sorted(again["skipped_ids"]) == ["branch", "plain", "root", "tip"]
    assert database_digest(backend_url) == digest


def test_an_id_that_exists_is_skipped_and_left_as_it_is(db: SessionDB) -> None:
    db.create_session("s1", "cli", model="mine")
    db.append_message("s1", "user", "kept")
    theirs = {"id": "s1", "source": "web", "model": "theirs", "messages": [{"role": "user"}]}
    result = db.import_sessions([theirs, {"id": "s2", "messages": []}])
    assert (result["imported_ids"], result["skipped_ids"]) == (["s2"], ["s1"])
    assert db.get_session("s1")["model"] == "mine"  # type: ignore[index]
    assert [m["content"] for m in db.get_messages("s1")] == ["kept"]
    new = db.get_session("s2")
    assert new is not None
    assert new["source"] == "import"


def test_live_state_is_not_imported(db: SessionDB) -> None:
    record = {
        "id": "s1",
        "source": "telegram",
        "handoff_state": "pending",
        "session_key": "agent:main:telegram:dm:1",
        "chat_id": "1",
        "last_activity_description": "working",
        "message_count": 99,
        "messages": [{"role": "user", "content": "hi", "timestamp": 10.0}],
    }
    assert db.import_sessions([record])["imported"] == 1
    row = db.get_session("s1")
    assert row is not None
    assert row["handoff_state"] is None
    assert row["session_key"] is None
    assert row["chat_id"] is None
    assert row["last_activity_description"] is None
    assert row["message_count"] == 1  # counted from the messages, not taken from the row
    assert db.get_messages("s1")[0]["timestamp"] == 10.0


def test_parents_are_linked_in_any_order_and_dropped_when_missing_or_cyclic(
    db: SessionDB,
) -> None:
    db.create_session("stored", "cli")
    payload = [
        {"id": "child", "parent_session_id": "later", "messages": []},
        {"id": "later", "parent_session_id": "stored", "messages": []},
        {"id": "orphan", "parent_session_id": "gone", "messages": []},
        {"id": "a", "parent_session_id": "b", "messages": []},
        {"id": "b", "parent_session_id": "a", "messages": []},
    ]
    result = db.import_sessions(payload)
    assert result["ok"] is True
    assert result["detached"] == 2
    parents = {sid: db.get_session(sid)["parent_session_id"] for sid in ("child", "later")}  # type: ignore[index]
    assert parents == {"child": "later", "later": "stored"}
    assert db.get_session("orphan")["parent_session_id"] is None  # type: ignore[index]
    cycle = [db.get_session(sid)["parent_session_id"] for sid in ("a", "b")]  # type: ignore[index]
    assert cycle == [None, "a"]  # only the first edge found closing the cycle is dropped


BAD_RECORDS = [
    ("not a dict", "session must be an object"),
    ({"messages": []}, "session id is required"),
    ({"id": "ok", "messages": {"role": "user"}}, "messages must be a list"),
    ({"id": "ok", "messages": ["text"]}, "messages must contain only objects"),
    ({"id": "ok", "messages": [{"content": "no role"}]}, "messages[0].role must be"),
    ({"id": "ok", "title": 5, "messages": []}, "title must be a string"),
    ({"id": "ok", "model_config": "[1]", "messages": []}, "model_config must be a JSON object"),
    ({"id": "ok", "model_config": "{", "messages": []}, "model_config must be valid JSON"),
    ({"id": "ok", "messages": [{"role": "user", "token_count": "x"}]}, "token_count must be"),
    ({"id": "ok", "messages": [{"role": "user", "tool_name": 3}]}, "tool_name must be a string"),
    ({"id": "ok", "title": "nul \x00", "messages": []}, "NUL"),
    ({"id": "x" * 300, "messages": []}, "session id is 300 characters"),
    ({"id": "ok", "source": "s" * 65, "messages": []}, "source is 65 characters"),
    ({"id": "ok", "started_at": object(), "messages": []}, "JSON serializable"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_RECORDS, ids=[e for _, e in BAD_RECORDS])
def test_a_bad_record_is_reported_and_nothing_is_written(
    db: SessionDB, backend_url: URL, bad: object, error: str
) -> None:
    db.create_session("there", "cli")
    digest = database_digest(backend_url)
    good = {"id": "good", "messages": [{"role": "user", "content": "fine"}]}
    result = db.import_sessions([good, bad])
    assert result["ok"] is False
    assert (result["imported"], result["skipped"], result["detached"]) == (0, 0, 0)
    [reported] = result["errors"]
    assert reported["index"] == 1
    assert error in reported["error"]
    assert database_digest(backend_url) == digest


def test_a_duplicate_id_or_a_taken_title_refuses_the_whole_import(
    db: SessionDB, backend_url: URL
) -> None:
    db.create_session("there", "cli")
    db.set_session_title("there", "Taken")
    digest = database_digest(backend_url)
    twice = db.import_sessions([{"id": "x"}, {"id": "x"}])
    assert twice["errors"] == [{"index": 1, "session_id": "x", "error": "duplicate session id"}]
    clash = db.import_sessions([{"id": "y"}, {"id": "z", "title": "Taken"}])
    assert clash["ok"] is False
    assert clash["errors"][0]["session_id"] == "z"
    assert "already the title of session 'there'" in clash["errors"][0]["error"]
    same = db.import_sessions([{"id": "p", "title": "New"}, {"id": "q", "title": "New"}])
    assert same["ok"] is False
    assert same["errors"][0]["index"] == 1
    assert database_digest(backend_url) == digest


def test_the_import_caps_are_upstreams(db: SessionDB, backend_url: URL) -> None:
    digest = database_digest(backend_url)
    with pytest.raises(InvalidInputError, match="must be a list") as raised:
        db.import_sessions({"id": "s"})  # type: ignore[arg-type]
    assert isinstance(raised.value, ValueError)
    with pytest.raises(ValueError, match="at most 500"):
        db.import_sessions([{"id": f"s{n}"} for n in range(501)])
    many = [{"role": "user", "content": "x"}] * (portability.IMPORT_MAX_MESSAGES_PER_SESSION + 1)
    result = db.import_sessions([{"id": "big", "messages": many}])
    assert result["errors"][0]["error"] == "messages exceeds the per-session import limit"
    heavy = {"id": "heavy", "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}
    assert db.import_sessions([heavy])["errors"][0]["error"] == (
        "session exceeds the import size limit"
    )
    six = [
        {"id": f"s{n}", "messages": [{"role": "user", "content": "x"}] * 9_000} for n in range(6)
    ]
    assert db.import_sessions(six)["errors"] == [
        {"index": 5, "session_id": "s5", "error": "messages exceeds the total import limit"}
    ]
    assert database_digest(backend_url) == digest
    assert db.import_sessions([]) == {
        "ok": True,
        "imported": 0,
        "skipped": 0,
        "detached": 0,
        "imported_ids": [],
        "skipped_ids": [],
        "errors": [],
    }


# -- one export through every backend ------------------------------------------------------------


@pytest.fixture
def four_databases(tmp_path: Path) -> Iterator[list[URL]]:
    """SQLite, PostgreSQL, MariaDB and another SQLite database, each at head and empty."""
    require_server("postgresql")
    require_server("mysql")
    import contextlib

    with contextlib.ExitStack() as stack:
        first = tmp_path / "first"
        last = tmp_path / "last"
        first.mkdir()
        last.mkdir()
        yield [
            stack.enter_context(database_at_head("sqlite", first)),
            stack.enter_context(database_at_head("postgresql", tmp_path)),
            stack.enter_context(database_at_head("mysql", tmp_path)),
            stack.enter_context(database_at_head("sqlite", last)),
        ]


def test_an_export_goes_round_sqlite_postgresql_mariadb_and_back(
    four_databases: list[URL],
) -> None:
    origin = SessionDB(url=four_databases[0])
    try:
        conversation(origin)
        origin.set_session_archived("plain", True)
        exported = json.loads(json.dumps(origin.export_all()))  # through JSON, as a file
        lineage = origin.export_session_lineage("tip")
    finally:
        origin.close()
    expected = sorted((comparable(row) for row in exported), key=lambda row: row["id"])
    for url in four_databases[1:]:
        db = SessionDB(url=url)
        try:
            result = db.import_sessions(exported)
            assert (result["ok"], result["imported"], result["detached"]) == (True, 4, 0)
            again = json.loads(json.dumps(db.export_all()))
            assert sorted((comparable(r) for r in again), key=lambda r: r["id"]) == expected
            got = db.export_session_lineage("tip")
            assert got is not None
            assert lineage is not None
            assert got["lineage_session_ids"] == lineage["lineage_session_ids"]
            assert comparable(got) == comparable(lineage)
            assert db.import_sessions(again)["skipped"] == 4
            exported = again  # the next backend imports this backend's export
        finally:
            db.close()
