"""Real upstream files (schema 2, 11, 16, and the real schema-11 file): adopted, checked, promoted.

Each file is adopted in place (``db upgrade``) and ``db check`` passes on it. It is promoted to
PostgreSQL and MariaDB with ``db copy`` and copied back into a new SQLite file: every table of
primary data comes back with the same rows, every column (SQLite -> server -> SQLite is an
identity on data); FTS5 indexes and bookkeeping are named as skipped. ``db check`` passes on the
server too, extra tables and columns included.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hermes_state import models
from tests.conftest import CliResult, database_at_head, sqlite_url, url_arg
from tests.support.digest import database_digest
from tests.support.vintages import (
    VERSIONS,
    build_vintage,
    copy_real_schema11,
    primary_tables,
    table_rows,
)

VINTAGES = [*(str(version) for version in VERSIONS), "real-11"]
SERVERS = ["postgresql", "mysql"]


@pytest.fixture(params=VINTAGES)
def vintage(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """An upstream state.db as upstream left it (not adopted yet)."""
    path = tmp_path / f"upstream-{request.param}" / "state.db"
    if request.param == "real-11":
        copy_real_schema11(path)
    else:
        build_vintage(path, int(request.param))
    return path


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    with database_at_head(request.param, tmp_path / "server") as url:
        yield url


def every_row(path: Path, like: Path | None = None) -> dict[str, list[dict[str, object]]]:
    """Each primary table of ``path`` (or of ``like``, read from ``path``): every column, each
    value with its Python type (so 1 and 1.0, or 5 and '5', differ)."""
    rows = {}
    for table in primary_tables(like or path):
        names = list(table_rows(like or path, table)[0]) if table_rows(like or path, table) else []
        rows[table] = sorted(
            (
                {name: (type(row[name]).__name__, row[name]) for name in names}
                for row in table_rows(path, table)
            ),
            key=lambda row: repr(sorted(row.items())),
        )
    return rows


def test_every_vintage_adopts_and_checks(vintage: Path, cli: Callable[..., CliResult]) -> None:
    before = {table: table_rows(vintage, table) for table in primary_tables(vintage)}
    assert cli("--url", str(vintage), "db", "upgrade").code == 0
    checked = cli("--url", str(vintage), "db", "check", "--json")
    assert checked.code == 0, checked.out
    assert checked.json()["differences"] == []
    for table, rows in before.items():
        if table in ("sessions", "messages"):  # adoption added our columns: compare the old ones
            assert [{k: row[k] for k in rows[0]} for row in table_rows(vintage, table)] == rows
        else:
            assert table_rows(vintage, table) == rows


def test_promotion_and_back_is_an_identity(
    vintage: Path, server: URL, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    source = sqlite_url(vintage.parent)
    copy = ["--url", url_arg(source), "db", "copy", "--to", url_arg(server)]
    there = cli(*copy, "--batch-size", "2", "--json")
    assert there.code == 0, there.err
    report = there.json()
    copied = {table["table"]: table for table in report["tables"]}
    skipped = {skip["table"]: skip["reason"] for skip in report["skipped"]}
    original = every_row(vintage)  # the source is only read: db copy writes its target alone
    assert set(original) <= set(copied)
    for table in set(copied) - set(original):  # modelled tables the vintage does not have yet
        assert copied[table]["source_rows"] == copied[table]["copied"] == 0, table
    for table, rows in original.items():
        assert copied[table]["copied"] == len(rows), table
        assert copied[table]["target_rows"] == len(rows), table
    assert "FTS rebuild refills it from messages" in skipped.get("messages_fts", "")
    assert "messages_fts_data" in skipped
    assert {"sqlite_sequence", "hermes_state_adoption", "hermes_state_alembic_version"} <= set(
        skipped
    )
    assert not any(name.startswith("messages_fts") for name in copied)
    # Every modelled table (state_meta among them) is there at head: the copy creates none.
    for table in set(copied) & set(models.metadata.tables):
        assert copied[table]["created"] is False, table
    # A target made at head has the modelled columns; the copy adds exactly the others.
    unmodelled = set(original["messages"][0]) - set(models.messages.c.keys())
    assert set(copied["messages"]["added_columns"]) == unmodelled

    checked = cli("--url", url_arg(server), "db", "check", "--json")
    assert checked.code == 0, checked.out  # extra tables and columns are not drift

    again = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(server), "--json")
    assert again.code == 0, again.err
    assert all(table["copied"] == 0 for table in again.json()["tables"])

    back = tmp_path / "back" / "state.db"
    home = cli("--url", url_arg(server), "db", "copy", "--to", str(back), "--batch-size", "2")
    assert home.code == 0, home.err
    assert every_row(back, like=vintage) == original
    assert cli("--url", str(back), "db", "check").code == 0


def test_the_transcript_keeps_what_upstream_reads(server: URL, tmp_path: Path) -> None:
    """Tool calls, rewound turns and unicode arrive as written (schema 16)."""
    from hermes_state.promotion import copy_database
    from tests.support.digest import table_rows as server_rows

    built = build_vintage(tmp_path / "v16" / "state.db", 16)
    copy_database(sqlite_url(built.path.parent), server)
    rows = [row for row in server_rows(server, "messages") if row["session_id"] == "cli-20251009-1"]
    assert [row["id"] for row in rows if row["active"] == 1] == built.active_message_ids[
        "cli-20251009-1"
    ]
    assert len(rows) == len(built.message_ids["cli-20251009-1"])
    (call,) = json.loads(next(row["tool_calls"] for row in rows if row["tool_calls"]))
    assert call["function"]["name"] == "terminal"
    assert any("ünïcödé ✓" in (row["content"] or "") for row in rows)
    locks = server_rows(server, "compression_locks")
    assert [lock["holder"] for lock in locks] == ["pid=4242:host=laptop"]


def test_a_target_promoted_without_the_legacy_columns_is_completed_only_with_force(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """A server that got only the modelled columns earlier: its rows now lack data the source
    has; the copy says so before touching anything, and --force completes them."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.pool import NullPool

    from hermes_state.models import sessions
    from tests.support.digest import sync_url
    from tests.support.digest import table_rows as server_rows

    built = build_vintage(tmp_path / "v16" / "state.db", 16)
    source = sqlite_url(built.path.parent)
    assert cli("--url", str(built.path), "db", "upgrade").code == 0
    with database_at_head("postgresql", tmp_path / "server") as server:
        engines = [create_engine(sync_url(url), poolclass=NullPool) for url in (source, server)]
        try:
            with engines[0].connect() as reading, engines[1].begin() as writing:
                # Every column upstream's schema 16 had is modelled now: the server's rows
                # lack the working directory instead, as if written without it.
                rows = [
                    {**dict(row), "cwd": None}
                    for row in reading.execute(select(sessions)).mappings()
                ]
                writing.execute(sessions.insert(), rows)
        finally:
            for engine in engines:
                engine.dispose()
        before = database_digest(server)
        refused = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(server))
        assert refused.code == 1
        assert "4 row(s) already in the target differ" in refused.err
        assert database_digest(server) == before  # no column added, no table created

        forced = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(server), "--force")
        assert forced.code == 0, forced.err
        cwd = {row["id"]: row["cwd"] for row in server_rows(server, "sessions")}
        assert cwd["dc-plain"] == "/home/user/projets/dc-plain"
        again = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(server), "--json")
        assert all(table["copied"] == table["overwritten"] == 0 for table in again.json()["tables"])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_legacy_columns_that_differ_are_adopted_not_drift(
    backend: str, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """A hand-made legacy sessions table (loose types, NULLs allowed) on any backend: adopted,
    and ``db check`` passes while naming what it keeps; a column hermes added still counts."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from hermes_state import schema
    from tests.conftest import throwaway_database
    from tests.support.digest import sync_url

    real = {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION", "mysql": "DOUBLE"}[backend]
    # MariaDB: adoption's messages.session_id references this id, so the collations must match.
    options = " CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin" if backend == "mysql" else ""
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            url = sqlite_url(tmp_path)
        else:
            url = stack.enter_context(throwaway_database(backend))
        engine = create_engine(sync_url(url), poolclass=NullPool)
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql(
                    f"CREATE TABLE sessions (id VARCHAR(255) PRIMARY KEY, source TEXT, "
                    f"started_at {real}, ended_at {real}){options}"
                )
        finally:
            engine.dispose()
        schema.upgrade(url)
        checked = cli("--url", url_arg(url), "db", "check", "--json")
        assert checked.code == 0, checked.out
        adopted = [entry["detail"] for entry in checked.json()["adopted"]]
        assert any(detail.startswith("sessions.source") for detail in adopted)
        assert not any(detail.startswith("sessions.handoff_") for detail in adopted)


def test_a_table_without_a_key_is_compared_whole(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """Upstream's schema_version has no primary key: copied whole, compared as a whole."""
    import sqlite3

    built = build_vintage(tmp_path / "v11" / "state.db", 11)
    target = tmp_path / "target" / "state.db"
    argv = ["--url", str(built.path), "db", "copy", "--to", str(target)]
    assert cli(*argv).code == 0
    connection = sqlite3.connect(target)
    with connection:
        connection.execute("UPDATE schema_version SET version = 99")
    connection.close()
    refused = cli(*argv)
    assert refused.code == 1
    assert "schema_version (its rows as a whole)" in refused.err
    forced = cli(*argv, "--force", "--json")
    assert forced.code == 0, forced.err
    report = {table["table"]: table for table in forced.json()["tables"]}
    assert report["schema_version"]["overwritten"] == 1
    assert table_rows(target, "schema_version") == [{"version": 11}]
