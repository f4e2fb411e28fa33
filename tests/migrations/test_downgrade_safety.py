"""Destructive administration asks first: downgrade previews, confirmation, and offline SQL.

A downgrade that drops tables or columns holding rows lists them with row counts and goes on
only with ``--yes`` (or its environment twin) or ``yes`` typed at a terminal; ``--dry-run``
lists the same and changes nothing (digest of every row before and after, on every backend).
Each revision script declares what its downgrade drops; a test holds every script to its
declaration by downgrading for real. ``--sql`` renders the DDL without a database: the SQL of
an upgrade, run by hand on an empty database, gives what the models describe.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pty
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import URL

from hermes_state import SessionDB, drift, schema
from hermes_state.engine import resolve_url, with_driver
from tests.conftest import throwaway_database, url_arg
from tests.support.digest import database_digest
from tests.support.legacy import build_legacy_db
from tests.support.processes import DEADLINE, cli_argv
from tests.support.stores import make_pending

HEAD = schema.HEAD_REVISION
BOOKKEEPING = {schema.VERSION_TABLE, schema.ADOPTION_TABLE}


def populate(url: URL) -> None:
    with SessionDB(url=url) as db:
        make_pending(db, "s1", "s2", "s3")
        for turn in range(4):
            db.append_message("s1", "user", f"turn {turn}")


def shape(url: URL) -> dict[str, set[str]]:
    """Table -> column names, bookkeeping left out."""
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        with engine.connect() as connection:
            inspector = inspect(connection)
            return {
                name: {column["name"] for column in inspector.get_columns(name)}
                for name in inspector.get_table_names()
                if name not in BOOKKEEPING and not name.startswith("sqlite_")
            }
    finally:
        engine.dispose()


class Terminal(io.StringIO):
    """Standard input that says it is a terminal, with what the person types."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def populated(empty_database: URL, cli: Any) -> URL:
    assert cli("--url", url_arg(empty_database), "db", "upgrade").code == 0
    populate(empty_database)
    return empty_database


def test_downgrade_lists_what_it_drops_and_refuses_without_consent(
    populated: URL, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    url = url_arg(populated)
    before = database_digest(populated)

    refused = cli("--url", url, "db", "downgrade", "base")

    assert refused.code == 1
    assert "table sessions (3 rows)" in refused.out
    assert "table messages (4 rows)" in refused.out
    assert "table handoff_events (" in refused.out
    assert "--yes" in refused.err
    assert database_digest(populated) == before
    assert schema.revision_of(populated) == HEAD

    dry = cli("--url", url, "db", "downgrade", "base", "--dry-run")
    assert dry.code == 0
    assert dry.out == refused.out
    preview = cli("--url", url, "db", "downgrade", "base", "--dry-run", "--json").json()
    drops = {(drop["table"], drop["column"]): drop["rows"] for drop in preview["drops"]}
    assert drops[("sessions", None)] == 3
    assert drops[("messages", None)] == 4
    assert preview["from"] == HEAD
    assert preview["done"] is False
    assert database_digest(populated) == before

    to_0002 = cli("--url", url, "db", "downgrade", "0002_handoff_leases", "--dry-run", "--json")
    upstream = importlib.import_module("hermes_state.migrations.versions.0004_upstream_columns")
    columns_0004 = [
        (table, column.name) for table, columns in upstream.TABLES for column in columns()
    ]
    schema30 = importlib.import_module("hermes_state.migrations.versions.0006_upstream_schema30")
    # 0006's upstream tables (schema_version aside: its one row is 0006's own) and columns,
    # 0005's lease table, the columns 0004 added, 0003's audit trail: each exactly once.
    tables_0006 = [(name, None) for name in schema30.TABLES if name != "schema_version"]
    columns_0006 = [
        (table, name) for table in ("sessions", "messages") for name in schema30.COLUMNS[table]
    ]
    drops = [(d["table"], d["column"]) for d in to_0002.json()["drops"]]
    expected = [
        *tables_0006,
        *columns_0006,
        ("session_turn_leases", None),
        *columns_0004,
        ("handoff_events", None),
    ]
    assert sorted(drops, key=str) == sorted(expected, key=str)

    done = cli("--url", url, "db", "downgrade", "base", "--yes")
    assert done.code == 0, done.err
    assert schema.revision_of(populated) is None
    assert not ({"sessions", "messages", "handoff_events"} & set(shape(populated)))


def test_a_column_downgrade_counts_the_values_it_drops(populated: URL, cli: Any) -> None:
    url = url_arg(populated)
    assert cli("--url", url, "db", "downgrade", "0002_handoff_leases", "--yes").code == 0
    preview = cli("--url", url, "db", "downgrade", "0001_baseline", "--dry-run", "--json")
    drops = {(d["table"], d["column"]): d["rows"] for d in preview.json()["drops"]}
    assert drops == {
        ("sessions", "handoff_attempt"): 3,
        ("sessions", "handoff_lease_expires_at"): 0,
        ("sessions", "handoff_owner"): 0,
    }


def test_the_environment_twin_of_yes(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = resolve_url(tmp_path / "state.db")
    populate(url)
    monkeypatch.setenv("HERMES_STATE_DOWNGRADE_YES", "1")
    assert cli("--url", str(url.database), "db", "downgrade", "base").code == 0
    assert schema.revision_of(url) is None


@pytest.mark.parametrize(("typed", "code"), [("yes\n", 0), ("y\n", 1), ("\n", 1)])
def test_a_person_at_a_terminal_confirms_by_typing_yes(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, typed: str, code: int
) -> None:
    url = resolve_url(tmp_path / "state.db")
    populate(url)
    before = database_digest(url)
    monkeypatch.setattr("sys.stdin", Terminal(typed))

    result = cli("--url", str(url.database), "db", "downgrade", "base")

    assert result.code == code, result
    assert "Type 'yes'" in result.err
    if code == 0:
        assert schema.revision_of(url) is None
    else:
        assert database_digest(url) == before


def test_typed_confirmation_through_a_real_terminal(tmp_path: Path) -> None:
    url = resolve_url(tmp_path / "state.db")
    populate(url)
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            cli_argv(url, "db", "downgrade", "base"),
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(controller, b"yes\n")
        out, err = process.communicate(timeout=DEADLINE)
    finally:
        os.close(controller)
        os.close(terminal)
    assert process.returncode == 0, err
    assert "table sessions (3 rows)" in out
    assert schema.revision_of(url) is None


def test_a_downgrade_that_drops_no_rows_does_not_ask(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "state.db"
    assert cli("--url", str(path), "db", "upgrade").code == 0
    assert cli("--url", str(path), "db", "downgrade", "base").code == 0


# -- every revision drops exactly what it declares ------------------------------------------------


def test_every_revision_declares_what_its_downgrade_drops() -> None:
    for script in schema._scripts().walk_revisions():
        assert callable(getattr(script.module, "downgrade_drops", None)), (
            f"{script.revision}: add downgrade_drops(bind), the tables and columns its "
            "downgrade() drops (db downgrade previews them)"
        )


def test_each_downgrade_drops_exactly_what_it_declares(populated: URL) -> None:
    revision = schema.revision_of(populated)
    while revision is not None:
        target = schema._scripts().get_revision(revision).down_revision or "base"
        _, losses = schema.downgrade_losses(populated, target)
        before = shape(populated)
        schema.downgrade(populated, target)
        after = shape(populated)
        # Not declared, on purpose: the full-text index is derived from messages, and 0006's
        # schema_version holds only the row 0006 wrote.
        dropped_tables = {
            name
            for name in set(before) - set(after)
            if not name.startswith("messages_fts") and name != "schema_version"
        }
        dropped_columns = {
            (name, column) for name in after for column in before[name] - after[name]
        }
        assert {(loss.table, loss.column) for loss in losses} == {
            *((name, None) for name in dropped_tables),
            *dropped_columns,
        }, revision
        revision = schema.revision_of(populated)


def test_an_adopted_file_previews_only_what_adoption_added(tmp_path: Path, cli: Any) -> None:
    legacy = build_legacy_db(tmp_path / "state.db", with_handoff=True, sessions=20)
    path = str(legacy.path)
    assert cli("--url", path, "db", "upgrade").code == 0
    preview = cli("--url", path, "db", "downgrade", "base", "--dry-run", "--json").json()
    drops = {(d["table"], d["column"]) for d in preview["drops"]}
    assert ("sessions", None) not in drops
    assert ("messages", None) not in drops
    assert ("handoff_events", None) in drops
    assert ("sessions", "handoff_attempt") in drops
    assert ("sessions", "handoff_state") not in drops  # the legacy file had it already


# -- --sql: the DDL without a database ----------------------------------------------------------


def run_script(url: URL, sql: str) -> None:
    """Run rendered SQL as a person would paste it into the database's shell."""
    if url.get_backend_name() == "sqlite":
        with contextlib.closing(sqlite3.connect(str(url.database))) as connection:
            connection.executescript(sql)
        return
    engine = create_engine(with_driver(url, asyncio=False), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            for statement in sql.split(";\n"):
                code = "\n".join(
                    line for line in statement.splitlines() if not line.startswith("--")
                )
                if code.strip():
                    connection.exec_driver_sql(code)
    finally:
        engine.dispose()


def test_sql_renders_without_a_database(cli: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "state.db"
    unreachable = "postgresql://nobody:s3cret@127.0.0.1:1/none"
    for url in (str(missing), unreachable, "mariadb://nobody@127.0.0.1:1/none"):
        up = cli("--url", url, "db", "upgrade", "--sql")
        assert up.code == 0, up.err
        assert "CREATE TABLE sessions" in up.out
        assert f"CREATE TABLE {schema.VERSION_TABLE}" in up.out
        down = cli("--url", url, "db", "downgrade", "--sql", f"{HEAD}:base")
        assert down.code == 0, down.err
        assert "DROP TABLE sessions" in down.out
        assert f"DROP TABLE {schema.VERSION_TABLE}" in down.out
    assert not missing.parent.exists()

    needs_range = cli("--url", str(missing), "db", "downgrade", "--sql", "base")
    assert needs_range.code == 2
    assert "FROM:TO" in needs_range.err
    step = cli("--url", unreachable, "db", "upgrade", "--sql", f"0002_handoff_leases:{HEAD}")
    assert "CREATE TABLE handoff_events" in step.out
    assert "CREATE TABLE sessions" not in step.out


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_rendered_sql_builds_what_the_models_describe(
    backend: str, cli: Any, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            url = resolve_url(tmp_path / "state.db")
        else:
            url = stack.enter_context(throwaway_database(backend))
        # MariaDB needs its own dialect to render (collations differ from MySQL's).
        render = url.set(drivername="mariadb") if backend == "mysql" else url
        rendered = cli("--url", url_arg(render), "db", "upgrade", "--sql")
        assert rendered.code == 0, rendered.err

        run_script(url, rendered.out)

        assert schema.revision_of(url) == HEAD
        assert drift.check(url) == []
        populate(url)
        down = cli("--url", url_arg(render), "db", "downgrade", "--sql", f"{HEAD}:base")
        run_script(url, down.out)
        assert schema.revision_of(url) is None
        assert shape(url) == {}
