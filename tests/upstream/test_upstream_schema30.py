"""Upstream's schema 30 on real files: adoption adds only what is missing, the downgrade gives
back the file it found, and a file hermes-state makes has upstream's whole shape."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, drift, schema
from hermes_state.engine import resolve_url
from hermes_state.models import APPLICATION_TABLES, UPSTREAM_SCHEMA_VERSION, metadata
from tests.support.vintages import REAL_SCHEMA11, REAL_SCHEMA30

REAL_FILES = {"schema11": REAL_SCHEMA11, "schema30": REAL_SCHEMA30}


def _copy(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / "state.db"
    shutil.copyfile(source, target)
    target.chmod(0o600)
    return target


def _catalogue(path: Path) -> set[tuple[str, str, str, str | None]]:
    with sqlite3.connect(path) as connection:
        return set(
            connection.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            )
        )


def _rows(path: Path) -> dict[str, str]:
    """A digest of every table's rows, order aside."""
    digests = {}
    with sqlite3.connect(path) as connection:
        names = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names:
            rows = sorted(map(repr, connection.execute(f'SELECT * FROM "{name}"')))
            digests[name] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return digests


def _journal_mode(path: Path) -> str:
    with sqlite3.connect(path) as connection:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])


def _columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as connection:
        return [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]


def _scalar(path: Path, sql: str) -> Any:
    with sqlite3.connect(path) as connection:
        return connection.execute(sql).fetchone()[0]


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_adoption_then_downgrade_gives_back_the_same_file(tmp_path: Path, name: str) -> None:
    path = _copy(tmp_path, REAL_FILES[name])
    catalogue, rows, mode = _catalogue(path), _rows(path), _journal_mode(path)
    url = resolve_url(path)

    schema.upgrade(url)
    assert schema.revision_of(url) == schema.HEAD_REVISION
    assert drift.check(url) == []
    # Only added: everything upstream made is still there, with its own definition; a table
    # adoption gave columns keeps its own, in their order, ahead of the added ones.
    adopted = {entry[1]: entry for entry in _catalogue(path)}
    for kind, object_name, _table, sql in catalogue:
        assert object_name in adopted, object_name
        if kind != "table" or adopted[object_name][3] == sql:
            assert adopted[object_name][3] == sql, object_name
            continue
        original = _columns(REAL_FILES[name], object_name)
        assert _columns(path, object_name)[: len(original)] == original, object_name

    schema.downgrade(url, "base")
    assert _catalogue(path) == catalogue
    assert _rows(path) == rows
    assert _journal_mode(path) == mode


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_an_adopted_file_has_every_modelled_table_and_column(tmp_path: Path, name: str) -> None:
    path = _copy(tmp_path, REAL_FILES[name])
    had = {entry[1] for entry in _catalogue(path) if entry[0] == "table"}
    SessionDB(path).close()
    for table in metadata.sorted_tables:
        if table.name in APPLICATION_TABLES and table.name in had:
            continue  # an older shape of upstream's own, which its code brings up to date
        assert set(table.columns.keys()) <= set(_columns(path, table.name)), table.name
    indexes = {entry[1] for entry in _catalogue(path) if entry[0] == "index"}
    # Our old duplicates of upstream's indexes are gone; upstream's names are there.
    assert "idx_sessions_handoff_pending" not in indexes
    assert "ix_messages_session_id_id" not in indexes
    assert {"idx_sessions_handoff_state", "idx_messages_session_id"} <= indexes


def test_schema_version_is_kept_where_upstream_wrote_one(tmp_path: Path) -> None:
    """Upstream counts its data migrations in it: a schema-11 file stays at 11, so upstream's
    own code still runs the ones after 11 when it next opens the file."""
    path = _copy(tmp_path, REAL_SCHEMA11)
    SessionDB(path).close()
    assert _scalar(path, "SELECT group_concat(version) FROM schema_version") == "11"


def test_a_file_without_a_version_row_gets_the_one_upstream_writes(tmp_path: Path) -> None:
    path = _copy(tmp_path, REAL_SCHEMA11)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM schema_version")
    url = resolve_url(path)
    schema.upgrade(url)
    assert _scalar(path, "SELECT group_concat(version) FROM schema_version") == str(
        UPSTREAM_SCHEMA_VERSION
    )
    schema.downgrade(url, "base")
    assert _scalar(path, "SELECT count(*) FROM schema_version") == 0


def test_null_active_turns_are_live_and_come_back_null(tmp_path: Path) -> None:
    """Rows an older upstream wrote with messages.active NULL (upstream's #51646) read as
    live after adoption, as upstream's own open makes them; the downgrade restores the NULLs."""
    path = _copy(tmp_path, REAL_SCHEMA11)
    url = resolve_url(path)
    schema.upgrade(url, "0005_session_turn_leases")
    with sqlite3.connect(path) as connection:
        nulled = [row[0] for row in connection.execute("SELECT id FROM messages LIMIT 3")]
        connection.execute(
            f"UPDATE messages SET active = NULL WHERE id IN ({','.join('?' * len(nulled))})",
            nulled,
        )
    schema.upgrade(url)
    assert _scalar(path, "SELECT count(*) FROM messages WHERE active IS NULL") == 0
    with sqlite3.connect(path) as connection:
        declared = {row[1]: row for row in connection.execute("PRAGMA table_info(messages)")}
    assert declared["active"][3] == 1  # NOT NULL: hermes-state added the column here
    assert declared["active"][4] == "1"

    schema.downgrade(url, "0005_session_turn_leases")
    with sqlite3.connect(path) as connection:
        back = sorted(
            row[0] for row in connection.execute("SELECT id FROM messages WHERE active IS NULL")
        )
    assert back == sorted(nulled)


def test_a_new_file_has_upstreams_shape_and_a_working_full_text_index(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli", title="Kyoto trip")
        db.append_message("s1", "user", "東京から京都までの新幹線を予約して")
        db.append_message("s1", "assistant", "Booked the zanzibar shinkansen")
    assert _scalar(path, "SELECT version FROM schema_version") == UPSTREAM_SCHEMA_VERSION
    assert _journal_mode(path) == "wal"
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        words = connection.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zanzibar'"
        ).fetchall()
        trigrams = connection.execute(
            "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH '京都まで'"
        ).fetchall()
    assert len(words) == 1
    assert len(trigrams) == 1
