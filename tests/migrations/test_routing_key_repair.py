"""An older upstream's gateway_routing, keyed by session_key alone: repaired on open as
upstream repairs it (every row kept), given back by the downgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.schema import HEAD_REVISION, downgrade, revision_of
from tests.conftest import sqlite_url

LEGACY = (
    "CREATE TABLE gateway_routing (session_key TEXT PRIMARY KEY, entry_json TEXT NOT NULL,"
    " updated_at REAL NOT NULL{scope})"
)


def _key(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        info = connection.execute("PRAGMA table_info(gateway_routing)").fetchall()
    return [row[1] for row in sorted(info, key=lambda row: row[5]) if row[5]]


def _rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as connection:
        query = "SELECT scope, session_key, entry_json, updated_at FROM gateway_routing"
        return sorted(connection.execute(query + " ORDER BY session_key").fetchall())


def _legacy_file(path: Path, *, with_scope: bool) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(LEGACY.format(scope=", scope TEXT DEFAULT ''" if with_scope else ""))
        if with_scope:
            connection.executemany(
                "INSERT INTO gateway_routing VALUES (?, ?, ?, ?)",
                [
                    ("agent:main:telegram:dm:1", "{}", 1.0, "/home/u/.hermes/sessions"),
                    ("agent:main:discord:dm:2", '{"a": 1}', 2.0, None),
                ],
            )
        else:
            connection.execute(
                "INSERT INTO gateway_routing VALUES ('agent:main:telegram:dm:1', '{}', 1.0)"
            )
    connection.close()


def test_a_file_of_only_a_legacy_routing_table_is_adopted_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _legacy_file(path, with_scope=True)
    with SessionDB(path) as db:
        db.create_session("s", "cli")  # a usable store, not a foreign file
    assert _key(path) == ["scope", "session_key"]
    assert _rows(path) == [
        ("", "agent:main:discord:dm:2", '{"a": 1}', 2.0),
        ("/home/u/.hermes/sessions", "agent:main:telegram:dm:1", "{}", 1.0),
    ]
    # The same key in another scope is a row of its own now.
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO gateway_routing VALUES ('other', 'agent:main:telegram:dm:1', '{}', 3.0)"
        )
    connection.close()
    assert len(_rows(path)) == 3


@pytest.mark.parametrize("with_scope", [True, False])
def test_the_downgrade_gives_the_legacy_key_back(tmp_path: Path, with_scope: bool) -> None:
    path = tmp_path / "state.db"
    _legacy_file(path, with_scope=with_scope)
    url = sqlite_url(tmp_path)
    SessionDB(path).close()
    assert revision_of(url) == HEAD_REVISION
    downgrade(url, "0006_upstream_schema30")
    assert _key(path) == ["session_key"]
    with sqlite3.connect(path) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(gateway_routing)")]
    connection.close()
    assert ("scope" in columns) is with_scope
    SessionDB(path).close()  # and up again
    assert _key(path) == ["scope", "session_key"]


def test_a_table_already_keyed_as_upstreams_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    with sqlite3.connect(path) as connection:
        before = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'gateway_routing'"
        ).fetchone()
        recorded = connection.execute(
            "SELECT COUNT(*) FROM hermes_state_adoption WHERE kind = 'r7_routing_key'"
        ).fetchone()
    connection.close()
    downgrade(sqlite_url(tmp_path), "0006_upstream_schema30")
    SessionDB(path).close()
    with sqlite3.connect(path) as connection:
        after = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'gateway_routing'"
        ).fetchone()
    connection.close()
    assert (before, recorded) == (after, (0,))
