"""``db copy`` of upstream's schema-30 file: every modelled table travels, the FTS5 index stays.

The real upstream file (``tests/vintages.REAL_SCHEMA30``, adopted on a copy) goes SQLite ->
PostgreSQL -> a new SQLite file, and SQLite -> MariaDB -> a new SQLite file: every row of every
modelled table comes back as it was (read with plain ``sqlite3``), upstream's NUL-prefixed
multimodal content included (a server holds it in :mod:`hermes_state.content`'s form), the
final file's full-text index is rebuilt and passes FTS5's integrity check, and ``db check``
finds it as the models describe. Reruns copy nothing and list no derived objects.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import content
from hermes_state.models import metadata
from hermes_state.promotion import copy_database
from tests.conftest import CliResult, database_at_head, sqlite_url, throwaway_database, url_arg
from tests.support.digest import sync_url
from tests.support.vintages import REAL_SCHEMA30

MODELLED = sorted(metadata.tables)
FTS_TABLES = ("messages_fts", "messages_fts_trigram")
#: message 379 of the real file: multimodal content, "\x00json:" and JSON
MULTIMODAL_ID = 379


@pytest.fixture
def adopted(tmp_path: Path, cli: Callable[..., CliResult]) -> Path:
    """A copy of the real schema-30 file, adopted by hermes-state (the original is only read)."""
    folder = tmp_path / "source"
    folder.mkdir()
    path = Path(str(sqlite_url(folder).database))
    shutil.copyfile(REAL_SCHEMA30.resolve(), path)
    upgraded = cli("--url", str(path), "db", "upgrade")
    assert upgraded.code == 0, upgraded.err
    return path


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    with database_at_head(request.param, tmp_path / "server") as url:
        yield url


def rows_of(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every modelled table, columns in name order, rows sorted."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        found: dict[str, list[tuple[Any, ...]]] = {}
        for table in MODELLED:
            columns = sorted(row[1] for row in connection.execute(f'PRAGMA table_info("{table}")'))
            listed = ", ".join(f'"{column}"' for column in columns)
            rows = connection.execute(f'SELECT {listed} FROM "{table}"').fetchall()
            found[table] = sorted(rows, key=repr)
        return found
    finally:
        connection.close()


def sqlite_scalar(path: Path, query: str) -> Any:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute(query).fetchone()[0]
    finally:
        connection.close()


def assert_search_rebuilt(path: Path, source: Path) -> None:
    """Both FTS5 indexes pass their integrity check and find what the source's find."""
    connection = sqlite3.connect(path)
    try:
        for table in FTS_TABLES:
            connection.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        connection.rollback()
    finally:
        connection.close()
    for query in (
        "SELECT count(*) FROM messages_fts",
        "SELECT count(*) FROM messages_fts_trigram",
        "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'the'",
        "SELECT group_concat(rowid) FROM messages_fts_trigram "
        "WHERE messages_fts_trigram MATCH 'ses'",
    ):
        assert sqlite_scalar(path, query) == sqlite_scalar(source, query), query
    assert sqlite_scalar(path, "SELECT count(*) FROM messages_fts") > 0


def server_scalar(url: URL, query: str) -> Any:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(text(query)).scalar()
    finally:
        engine.dispose()


def has_effective_activity_index(url: URL) -> bool:
    if url.get_backend_name() == "postgresql":
        query = (
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'idx_sessions_effective_activity'"
        )
    else:
        query = (
            "SELECT count(*) FROM information_schema.statistics WHERE table_schema = DATABASE() "
            "AND index_name = 'idx_sessions_effective_activity'"
        )
    return bool(server_scalar(url, query))


def copied(cli: Callable[..., CliResult], source: str, target: str) -> dict[str, Any]:
    result = cli("--url", source, "db", "copy", "--to", target, "--json")
    assert result.code == 0, result.err
    document: dict[str, Any] = result.json()
    return document


def assert_rerun_is_quiet(cli: Callable[..., CliResult], source: str, target: str) -> None:
    again = cli("--url", source, "db", "copy", "--to", target)
    assert again.code == 0, again.err
    assert "not copied" not in again.out
    assert "messages_fts" not in again.out
    assert "hermes_state_alembic_version" not in again.out
    document = copied(cli, source, target)
    assert all(table["copied"] == 0 for table in document["tables"]), document["tables"]
    assert all(table["overwritten"] == 0 for table in document["tables"])


# -- the content encoding ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "plain text",
        '\x00json:[{"type": "text", "text": "hi"}]',
        "\x00",
        "\x00\uffffx",
        "\uffff",
        "\ufffe",
        "\uffff\x00",
        "\ufffe\ufffe",
        "middle \x00 NUL stays",
    ],
)
def test_the_server_form_of_content_is_reversible(value: str | None) -> None:
    encoded = content.to_server(value)
    assert content.from_server(encoded) == value
    if value:
        assert not encoded or not encoded.startswith("\x00")


def test_distinct_contents_stay_distinct_on_a_server() -> None:
    values = ["\x00a", "\uffffa", "\ufffea", "a", "\x00\uffffa", "\ufffe\uffffa", "\x00\ufffea"]
    assert len({content.to_server(value) for value in values}) == len(values)


# -- SQLite -> SQLite ----------------------------------------------------------------------------


def test_a_sqlite_copy_carries_every_modelled_table_and_rebuilds_search(
    adopted: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    expected = rows_of(adopted)
    final = tmp_path / "final" / "state.db"
    first = cli("--url", str(adopted), "db", "copy", "--to", str(final))
    assert first.code == 0, first.err
    assert "full-text index rebuilt from the copied messages" in first.out
    assert "not copied" not in first.out
    document = copied(cli, str(adopted), str(final))
    assert set(MODELLED) <= {table["table"] for table in document["tables"]}
    assert not any(table["table"].startswith("messages_fts") for table in document["tables"])
    assert all(skip["derived"] for skip in document["skipped"])
    assert document["fts_rebuilt"] is True
    assert rows_of(final) == expected
    assert_search_rebuilt(final, adopted)
    nul = f"SELECT content FROM messages WHERE id = {MULTIMODAL_ID}"
    assert sqlite_scalar(final, nul).startswith("\x00json:")
    assert_rerun_is_quiet(cli, str(adopted), str(final))


def test_an_unknown_virtual_table_is_listed_as_not_copied(
    adopted: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    connection = sqlite3.connect(adopted)
    with connection:
        connection.execute("CREATE VIRTUAL TABLE notes USING fts5(body)")
        connection.execute("INSERT INTO notes (body) VALUES ('a note')")
    connection.close()
    final = tmp_path / "final" / "state.db"
    result = cli("--url", str(adopted), "db", "copy", "--to", str(final))
    assert result.code == 0, result.err
    listed = result.out.split("not copied", 1)[1]
    assert "notes " in listed
    assert "notes_data" in listed
    assert "messages_fts" not in listed
    assert "sqlite_sequence" not in listed


# -- SQLite -> server -> SQLite ------------------------------------------------------------------


def test_promotion_and_back_is_an_identity(
    adopted: Path, server: URL, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    expected = rows_of(adopted)
    multimodal = f"SELECT content FROM messages WHERE id = {MULTIMODAL_ID}"
    assert sqlite_scalar(adopted, multimodal).startswith("\x00json:")

    there = copied(cli, str(adopted), url_arg(server))
    carried = {table["table"]: table for table in there["tables"]}
    assert set(MODELLED) <= set(carried)
    assert not any(name.startswith("messages_fts") for name in carried)
    for table, rows in expected.items():
        assert carried[table]["target_rows"] == len(rows), table
    # The models give it to SQLite and PostgreSQL only (an expression index MariaDB lacks).
    assert has_effective_activity_index(server) is (server.get_backend_name() == "postgresql")
    stored = server_scalar(server, f"SELECT content FROM messages WHERE id = {MULTIMODAL_ID}")
    assert stored.startswith(content.NUL_MARKER + "json:")
    assert content.from_server(stored) == sqlite_scalar(
        adopted, f"SELECT content FROM messages WHERE id = {MULTIMODAL_ID}"
    )
    checked = cli("--url", url_arg(server), "db", "check", "--json")
    assert checked.code == 0, checked.out
    assert_rerun_is_quiet(cli, str(adopted), url_arg(server))

    final = tmp_path / "final" / "state.db"
    final.parent.mkdir()
    back = copy_database(server, sqlite_url(final.parent))
    assert back.fts_rebuilt is True
    assert rows_of(final) == expected
    assert_search_rebuilt(final, adopted)
    index = (
        "SELECT count(*) FROM sqlite_master WHERE type = 'index' "
        "AND name = 'idx_sessions_effective_activity'"
    )
    assert sqlite_scalar(final, index) == 1
    checked = cli("--url", str(final), "db", "check", "--json")
    assert checked.code == 0, checked.out
    assert checked.json()["differences"] == []
    assert_rerun_is_quiet(cli, url_arg(server), str(final))
    assert rows_of(final) == expected


# -- the copy writes its target only ---------------------------------------------------------------


def test_a_copy_from_a_file_not_adopted_yet_leaves_the_source_as_it_was(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """Only the copy's target is created or migrated: upstream's file is read through a
    temporary copy at head, its bytes and its folder untouched."""
    folder = tmp_path / "source"
    folder.mkdir()
    source = folder / "state.db"
    shutil.copyfile(REAL_SCHEMA30, source)
    before = source.read_bytes()
    final = tmp_path / "final" / "state.db"

    done = cli("--url", str(source), "db", "copy", "--to", str(final))

    assert done.code == 0, done.err
    assert source.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["state.db"]
    assert cli("--url", str(source), "db", "current", "--json").json()["revision"] is None
    assert cli("--url", str(final), "db", "current", "--json").json()["is_head"] is True
    assert sqlite_scalar(final, "SELECT count(*) FROM sessions") == sqlite_scalar(
        source, "SELECT count(*) FROM sessions"
    )


def test_a_copy_that_fails_leaves_no_target_file_behind(adopted: Path, tmp_path: Path) -> None:
    final = tmp_path / "final" / "state.db"
    final.parent.mkdir()

    def interrupted(table: str, done: int, total: int) -> None:
        if table == "messages" and done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_database(sqlite_url(adopted.parent), sqlite_url(final.parent), progress=interrupted)
    assert list(final.parent.iterdir()) == []


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_server_database_without_tables_is_planned_then_created_by_the_copy(
    adopted: Path, backend: str, cli: Callable[..., CliResult]
) -> None:
    with throwaway_database(backend) as empty:
        rehearsed = cli("--url", str(adopted), "db", "copy", "--to", url_arg(empty), "--dry-run")
        assert rehearsed.code == 0, rehearsed.err
        assert "holds none of the tables yet: the copy would first create them" in rehearsed.out
        plan = cli(
            "--url", str(adopted), "db", "copy", "--to", url_arg(empty), "--dry-run", "--json"
        ).json()
        sessions = next(table for table in plan["tables"] if table["table"] == "sessions")
        assert sessions["new"] == sqlite_scalar(adopted, "SELECT count(*) FROM sessions")
        assert cli("--url", url_arg(empty), "db", "current", "--json").json()["revision"] is None

        copied_once = cli("--url", str(adopted), "db", "copy", "--to", url_arg(empty))
        assert copied_once.code == 0, copied_once.err
        assert cli("--url", url_arg(empty), "db", "current", "--json").json()["is_head"] is True
