"""Adopting a ``state.db`` made by hermes versions that predate Alembic.

Such a file is brought to head in place and only additively: every pre-existing row, column,
table, index and trigger survives unchanged, the old writers keep working on it, ``db check``
does not call the legacy extras drift, and a downgrade to base gives the legacy file back.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hermes_state import SessionDB, models, schema
from hermes_state.cli import main
from hermes_state.engine import resolve_url
from tests.support.legacy import (
    LegacyFile,
    build_legacy_db,
    insert_legacy_message,
    insert_legacy_session,
    row_digest,
    schema_entries,
    table_columns,
)

# What hermes-state models, read from the models themselves so new revisions are covered.
OUR_SESSION_COLUMNS = tuple(column.name for column in models.sessions.columns)
OUR_MESSAGE_COLUMNS = tuple(column.name for column in models.messages.columns)
#: The modelled indexes a file gets (the search indexes of the servers aside).
OUR_INDEXES = {
    str(index.name)
    for table in models.metadata.tables.values()
    for index in table.indexes
    if "sqlite" in index.info.get("dialects", ("sqlite",))
}


@pytest.fixture(params=[True, False], ids=["with-handoff-columns", "without-handoff-columns"])
def legacy(request: pytest.FixtureRequest, isolated_home: Path) -> LegacyFile:
    """A legacy file at the default location, ``$HERMES_HOME/state.db``."""
    return build_legacy_db(isolated_home / "state.db", with_handoff=request.param)


@pytest.fixture
def handoff_legacy(isolated_home: Path) -> LegacyFile:
    return build_legacy_db(isolated_home / "state.db", with_handoff=True)


def adopt_by_opening(path: Path) -> None:
    SessionDB().close()  # the default path: $HERMES_HOME/state.db, which is ``path``
    assert path.exists()


def adopt_by_cli(path: Path) -> None:
    assert main(["--url", str(path), "db", "upgrade"]) == 0


ADOPTERS = {"open": adopt_by_opening, "cli": adopt_by_cli}


def revision(path: Path) -> str | None:
    return schema.revision_of(resolve_url(path))


def fts_hits(path: Path, word: str) -> list[int]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid", (word,)
        ).fetchall()
        return [rowid for (rowid,) in rows]
    finally:
        connection.close()


def fts_is_consistent(path: Path) -> None:
    """FTS5's own integrity check of an external-content index against its table."""
    connection = sqlite3.connect(path)
    try:
        connection.execute(
            "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"
        )
    finally:
        connection.close()


# -- adoption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(ADOPTERS))
def test_adoption_in_place_keeps_everything(legacy: LegacyFile, how: str) -> None:
    path = legacy.path
    entries, columns, digest = schema_entries(path), table_columns(path), row_digest(path)
    inode = path.stat().st_ino
    assert revision(path) is None

    ADOPTERS[how](path)

    assert revision(path) == schema.HEAD_REVISION
    assert path.stat().st_ino == inode, "the file was replaced, not migrated in place"

    # Every pre-existing row of every pre-existing table, all its columns, unchanged.
    assert row_digest(path, columns) == digest

    # Every table, index and trigger is still there with its definition; only the sessions and
    # messages tables' definitions grew (columns appended by ALTER TABLE ... ADD COLUMN).
    after = schema_entries(path)
    changed = entries - after
    grown = {("table", "sessions"), ("table", "messages")}
    assert {(kind, name) for kind, name, _table, _sql in changed} <= grown
    assert {name for _kind, name, _t, _s in entries} <= {name for _kind, name, _t, _s in after}
    new_names = {name for _kind, name, _t, _s in after} - {name for _k, name, _t, _s in entries}
    # Every modelled index is there: ours new, upstream's under the names the file gave them.
    assert {name for _kind, name, _t, _s in after} >= OUR_INDEXES
    assert {schema.VERSION_TABLE, schema.ADOPTION_TABLE} <= new_names

    # Unknown columns kept, in their order; ours appended after them.
    now = table_columns(path)
    for table, names in columns.items():
        assert now[table][: len(names)] == names, table
    added = {table: set(now[table]) - set(columns[table]) for table in ("sessions", "messages")}
    assert added["sessions"] == {c for c in OUR_SESSION_COLUMNS if c not in columns["sessions"]}
    assert added["messages"] == {c for c in OUR_MESSAGE_COLUMNS if c not in columns["messages"]}

    # What was added holds nothing for the old rows: NULL, or the column's server default.
    connection = sqlite3.connect(path)
    try:
        for table in ("sessions", "messages"):
            defaults = {
                name: default
                for _cid, name, _type, _nn, default, _pk in connection.execute(
                    f"PRAGMA table_info({table})"
                )
            }
            for column in sorted(added[table]):
                filled = connection.execute(
                    f"SELECT count(*) FROM {table} "
                    f"WHERE {column} IS NOT {defaults[column] or 'NULL'}"
                ).fetchone()
                assert filled == (0,), (table, column)
        assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        connection.close()
    fts_is_consistent(path)


def test_adoption_added_columns_accept_legacy_inserts(legacy: LegacyFile) -> None:
    """The columns adoption adds are nullable (or defaulted): no NOT NULL without a default."""
    before = set(table_columns(legacy.path)["sessions"])
    adopt_by_cli(legacy.path)
    connection = sqlite3.connect(legacy.path)
    try:
        info = connection.execute("PRAGMA table_info(sessions)").fetchall()
    finally:
        connection.close()
    added = [row for row in info if row[1] not in before]
    assert added
    for _cid, name, _type, notnull, default, _pk in added:
        assert not notnull or default is not None, name


def test_legacy_writers_still_work_after_adoption(legacy: LegacyFile) -> None:
    path = legacy.path
    adopt_by_opening(path)

    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA foreign_keys = ON")
        row: dict[str, object] = {
            "id": "written-by-hermes-0.9",
            "source": "telegram",
            "user_id": "u1",
            "model": "hermes-3",
            "model_config": "{}",
            "system_prompt": "You are Hermes.",
            "started_at": 1_800_000_000.5,
            "message_count": 1,
            "session_key": "agent:main:new",
        }
        if legacy.with_handoff:
            row["title"] = "old writer"
        insert_legacy_session(connection, row)
        message_id = insert_legacy_message(
            connection,
            (
                "written-by-hermes-0.9",
                "user",
                "quetzalcoatl arrives",
                None,
                None,
                None,
                1.8e9,
                3,
                None,
            ),
        )
        assert fts_hits(path, "quetzalcoatl") == [message_id]

        connection.execute(
            "UPDATE messages SET content = 'axolotl instead' WHERE id = ?", (message_id,)
        )
        assert fts_hits(path, "quetzalcoatl") == []
        assert fts_hits(path, "axolotl") == [message_id]

        # The probe word still finds exactly the legacy messages it was written into.
        legacy_hits = fts_hits(path, legacy.probe_word)
        assert legacy_hits

        connection.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        assert fts_hits(path, "axolotl") == []
        insert_legacy_message(
            connection,
            (
                "written-by-hermes-0.9",
                "assistant",
                "still here",
                None,
                None,
                None,
                1.8e9,
                2,
                "stop",
            ),
        )
    finally:
        connection.close()

    with SessionDB(path) as db:
        # hermes-state sees the old writer's session, and its own writes feed the FTS index.
        assert db.get_handoff_state("written-by-hermes-0.9") == {
            "state": None,
            "platform": None,
            "error": None,
        }
        assert [m["content"] for m in db.get_messages("written-by-hermes-0.9")] == ["still here"]
        new_id = db.append_message("written-by-hermes-0.9", "user", "pangolin sighted")
        assert db.request_handoff("written-by-hermes-0.9", "discord")
    assert fts_hits(path, "pangolin") == [new_id]
    fts_is_consistent(path)


# -- db check -----------------------------------------------------------------------------------


def test_check_reports_no_drift_on_an_adopted_file(
    legacy: LegacyFile, capsys: pytest.CaptureFixture[str]
) -> None:
    adopt_by_opening(legacy.path)
    capsys.readouterr()
    code = main(["--url", str(legacy.path), "db", "check", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["differences"] == []
    assert report["in_sync"] is True
    assert code == 0


def test_check_reports_a_dropped_index_on_an_adopted_file(
    legacy: LegacyFile, capsys: pytest.CaptureFixture[str]
) -> None:
    adopt_by_opening(legacy.path)
    connection = sqlite3.connect(legacy.path)
    try:
        connection.execute("DROP INDEX idx_sessions_handoff_state")
        connection.commit()
    finally:
        connection.close()
    capsys.readouterr()

    assert main(["--url", str(legacy.path), "db", "check"]) == 1
    out = capsys.readouterr().out
    assert "idx_sessions_handoff_state" in out

    assert main(["--url", str(legacy.path), "db", "check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["in_sync"] is False
    assert any(
        d["kind"] == "add index" and "idx_sessions_handoff_state" in d["detail"]
        for d in report["differences"]
    )
    # Legacy extras are never reported: no unknown column, table or index shows up.
    for difference in report["differences"]:
        assert difference["kind"] not in ("remove column", "remove table", "remove index")


# -- idempotence and downgrade ------------------------------------------------------------------


def test_second_upgrade_is_a_no_op(legacy: LegacyFile, capsys: pytest.CaptureFixture[str]) -> None:
    path = legacy.path
    adopt_by_cli(path)
    entries, digest = schema_entries(path), row_digest(path)

    capsys.readouterr()
    assert main(["--url", str(path), "db", "upgrade"]) == 0
    assert "already at" in capsys.readouterr().out
    SessionDB(path).close()
    schema.upgrade(resolve_url(path))

    assert schema_entries(path) == entries
    assert row_digest(path) == digest


def _downgrade_to_base(path: Path) -> None:
    assert main(["--url", str(path), "db", "downgrade", "base", "--yes"]) == 0
    assert revision(path) is None


def test_downgrade_to_base_restores_the_legacy_schema_exactly(legacy: LegacyFile) -> None:
    path = legacy.path
    entries, digest = schema_entries(path), row_digest(path)
    adopt_by_opening(path)
    _downgrade_to_base(path)
    assert schema_entries(path) == entries
    assert row_digest(path) == digest


def test_downgrade_to_base_restores_legacy_tables_and_rows(legacy: LegacyFile) -> None:
    """Everything but Alembic's (empty) version table is exactly as the old hermes left it."""
    path = legacy.path
    entries, columns, digest = schema_entries(path), table_columns(path), row_digest(path)
    adopt_by_opening(path)
    with SessionDB(path) as db:  # some use in between: hermes-state's own writes
        db.create_session("made-after-adoption", "cli")
        assert db.request_handoff(legacy.session_ids[1], "telegram")
    connection = sqlite3.connect(path)
    try:
        connection.execute("DELETE FROM sessions WHERE id = 'made-after-adoption'")
        connection.commit()
    finally:
        connection.close()
    touched = legacy.session_ids[1]

    _downgrade_to_base(path)

    left = {e for e in schema_entries(path) if e[2] != schema.VERSION_TABLE}
    assert left == entries
    assert table_columns(path).keys() - columns.keys() <= {schema.VERSION_TABLE}
    now = row_digest(path, columns)
    for table in columns:
        if table == "sessions":
            continue
        assert now[table] == digest[table], table
    # sessions: identical except the one row whose handoff hermes-state changed (when the
    # legacy file had the handoff columns, that change is real data and must stay).
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT count(*) FROM sessions WHERE id != ?", (touched,)
        ).fetchone()
        assert rows == (len(legacy.session_ids) - 1,)
    finally:
        connection.close()
    if not legacy.with_handoff:
        assert now["sessions"] == digest["sessions"]
    fts_is_consistent(path)

    # ... and it can be adopted again.
    adopt_by_cli(path)
    assert revision(path) == schema.HEAD_REVISION


def test_downgrade_without_use_gives_back_every_row(legacy: LegacyFile) -> None:
    path = legacy.path
    columns, digest = table_columns(path), row_digest(path)
    adopt_by_cli(path)
    _downgrade_to_base(path)
    assert row_digest(path, columns) == digest
    assert set(table_columns(path)) - set(columns) <= {schema.VERSION_TABLE}


# -- the handoff state machine on an adopted file ----------------------------------------------


def test_handoffs_on_rows_that_already_had_handoff_state(handoff_legacy: LegacyFile) -> None:
    legacy = handoff_legacy
    pending, running = legacy.ids_in("pending"), legacy.ids_in("running")
    completed, failed = legacy.ids_in("completed"), legacy.ids_in("failed")
    assert pending
    assert running
    assert completed
    assert failed
    in_start_order = [sid for sid in legacy.session_ids if sid in set(pending)]

    with SessionDB() as db:
        assert db.has_pending_handoffs()
        listed = db.list_pending_handoffs()
        assert [row["id"] for row in listed] == in_start_order
        assert all(row["handoff_state"] == "pending" for row in listed)

        sid = failed[0]
        assert db.get_handoff_state(sid) == {
            "state": "failed",
            "platform": legacy.handoffs[sid][1],
            "error": legacy.handoffs[sid][2],
        }

        # A legacy pending row is in flight: no new request; it can be claimed and completed.
        assert not db.request_handoff(pending[0], "slack")
        assert db.claim_handoff(pending[0])
        assert not db.claim_handoff(pending[0])
        assert db.complete_handoff(pending[0])
        assert db.get_handoff_state(pending[0])["state"] == "completed"

        # A waiter may fail a legacy pending row, never a legacy running one.
        assert db.fail_handoff(pending[1], "gave up", only_states=("pending",))
        assert not db.fail_handoff(running[0], "gave up", only_states=("pending",))

        # Rows a dead gateway left running before the upgrade are reclaimed, not re-queued.
        assert db.reclaim_stale_running_handoffs("gateway restarted; run /handoff again") == (
            sorted(running)
        )
        for sid in running:
            assert db.get_handoff_state(sid) == {
                "state": "failed",
                "platform": legacy.handoffs[sid][1],
                "error": "gateway restarted; run /handoff again",
            }
        assert db.reclaim_stale_running_handoffs("again") == []

        # Legacy completed and failed rows accept a new request, which clears the old error.
        for sid in (completed[0], failed[0], running[0]):
            assert db.request_handoff(sid, "discord")
            assert db.get_handoff_state(sid) == {
                "state": "pending",
                "platform": "discord",
                "error": None,
            }
        remaining = set(pending[2:]) | {completed[0], failed[0], running[0]}
        assert {row["id"] for row in db.list_pending_handoffs()} == remaining


def test_handoffs_on_a_file_that_had_no_handoff_columns(isolated_home: Path) -> None:
    legacy = build_legacy_db(isolated_home / "state.db", with_handoff=False)
    with SessionDB() as db:
        assert not db.has_pending_handoffs()
        assert db.list_pending_handoffs() == []
        first, second = legacy.session_ids[0], legacy.session_ids[-1]
        assert db.get_handoff_state(first) == {"state": None, "platform": None, "error": None}
        assert db.request_handoff(second, "telegram")
        assert db.request_handoff(first, "discord")
        assert [row["id"] for row in db.list_pending_handoffs()] == [first, second]
        assert db.claim_handoff(first)
        assert db.fail_handoff(first, "x" * 600)
        assert db.get_handoff_state(first)["error"] == "x" * 500
        assert db.request_handoff(first, "telegram")
        assert db.get_messages(first) == []  # session 0 has no legacy messages
        legacy_messages = db.get_messages(legacy.session_ids[3])
        assert [m["role"] for m in legacy_messages] == ["user", "assistant", "tool"]


def test_legacy_raw_sql_handoff_request_is_seen(handoff_legacy: LegacyFile) -> None:
    """An older hermes still running beside the new one requests a handoff with raw SQL."""
    adopt_by_opening(handoff_legacy.path)
    sid = next(s for s, (state, _p, _e) in handoff_legacy.handoffs.items() if state is None)
    connection = sqlite3.connect(handoff_legacy.path)
    try:
        connection.execute(
            "UPDATE sessions SET handoff_state = 'pending', handoff_platform = 'telegram', "
            "handoff_error = NULL WHERE id = ?",
            (sid,),
        )
        connection.commit()
    finally:
        connection.close()
    with SessionDB() as db:
        assert sid in {row["id"] for row in db.list_pending_handoffs()}
        assert db.claim_handoff(sid)
        assert db.complete_handoff(sid)


def test_a_file_in_use_by_a_legacy_reader_is_adopted(handoff_legacy: LegacyFile) -> None:
    """An old process holding the file open (reading, WAL mode) does not prevent adoption."""
    reader = sqlite3.connect(handoff_legacy.path)
    try:
        assert reader.execute("SELECT count(*) FROM sessions").fetchone() == (
            len(handoff_legacy.session_ids),
        )
        adopt_by_opening(handoff_legacy.path)
        assert revision(handoff_legacy.path) == schema.HEAD_REVISION
        assert reader.execute("SELECT count(*) FROM sessions").fetchone() == (
            len(handoff_legacy.session_ids),
        )
    finally:
        reader.close()
