"""The Alembic migrations, checked the way pytest-alembic checks them, on every backend.

pytest-alembic itself cannot run under this pytest, so its four standard checks are written
out here with Alembic's own API: a single head, upgrade to head, models match the migrated
schema, and a full up/down round trip. The scripts are the ones the package ships
(``schema.script_location()``), driven through the project's ``env.py``.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from sqlalchemy import Connection, inspect, select, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB, drift, schema
from hermes_state.drift import context_options
from hermes_state.models import metadata
from tests.conftest import database_at_head

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOKKEEPING = {schema.VERSION_TABLE, schema.ADOPTION_TABLE}


def scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(schema.script_location()))
    return ScriptDirectory.from_config(config)


def oldest_first() -> list[Script]:
    return list(reversed(list(scripts().walk_revisions("base", "heads"))))


@contextlib.contextmanager
def migrating(url: URL) -> Iterator[Connection]:
    """A connection handed to env.py the way ``hermes-state db`` hands it, committed after."""
    with schema.migration_connection(url) as connection:
        yield connection
        connection.commit()


def alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(schema.script_location()))
    config.attributes["connection"] = connection
    return config


def alembic_upgrade(url: URL, revision: str) -> None:
    with migrating(url) as connection:
        command.upgrade(alembic_config(connection), revision)


def alembic_downgrade(url: URL, revision: str) -> None:
    with migrating(url) as connection:
        command.downgrade(alembic_config(connection), revision)


def current(url: URL) -> str | None:
    with schema.migration_connection(url, read_only=True) as connection:
        return MigrationContext.configure(
            connection, opts={"version_table": schema.VERSION_TABLE}
        ).get_current_revision()


def table_names(url: URL) -> set[str]:
    if url.get_backend_name() == "sqlite" and not Path(str(url.database)).exists():
        return set()  # a read-only connection does not create the file
    with schema.migration_connection(url, read_only=True) as connection:
        return set(inspect(connection).get_table_names())


def schema_snapshot(url: URL) -> dict[str, Any]:
    """Tables, their columns, indexes, keys and foreign keys, as the database reports them."""
    with schema.migration_connection(url, read_only=True) as connection:
        inspector = inspect(connection)
        snapshot: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            snapshot[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                    for c in inspector.get_columns(table)
                ],
                "pk": inspector.get_pk_constraint(table).get("constrained_columns"),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                ),
                "fks": sorted(
                    (tuple(fk["constrained_columns"]), fk["referred_table"])
                    for fk in inspector.get_foreign_keys(table)
                ),
            }
        return snapshot


def all_rows(url: URL) -> dict[str, list[tuple[Any, ...]]]:
    with schema.migration_connection(url, read_only=True) as connection:
        tables = sorted(inspect(connection).get_table_names())
        return {
            table: sorted(
                (tuple(row) for row in connection.execute(text(f"SELECT * FROM {table}"))),
                key=repr,
            )
            for table in tables
        }


def compare(url: URL, *, ignore_only_reflected: bool = True) -> list[Any]:
    """``compare_metadata`` with the project's options; optionally stricter about extras."""
    with schema.migration_connection(url, read_only=True) as connection:
        options = context_options(connection.dialect.name)
        if not ignore_only_reflected:
            # A fresh database holds nothing but our tables: anything reflected that the models
            # lack (an index, a column, a table) is drift too, bookkeeping tables aside.
            # The SQLite full-text index is derived data, made by the migrations, not modelled.
            usual = options["include_object"]

            def include_object(obj: Any, name: Any, type_: str, reflected: bool, to: Any) -> bool:
                if type_ == "table":
                    return not (name in BOOKKEEPING or str(name).startswith("messages_fts"))
                if reflected and to is None:
                    return True  # in the database, not in the models: drift here
                # As `db check` compares: indexes on expressions by name, and an index the
                # models build only on other backends is not missing.
                return bool(usual(obj, name, type_, reflected, to))

            options["include_object"] = include_object
        context = MigrationContext.configure(connection, opts=options)
        return compare_metadata(context, metadata)


# -- the scripts themselves ----------------------------------------------------------------------


def test_single_head_and_the_open_check_knows_it() -> None:
    heads = scripts().get_heads()
    assert len(heads) == 1, f"several heads, merge them: {heads}"
    # SessionDB compares the version table with this constant instead of loading the scripts.
    assert heads[0] == schema.HEAD_REVISION


def test_history_is_linear_from_base() -> None:
    revisions = oldest_first()
    assert revisions, "no migration scripts found"
    assert revisions[0].down_revision is None
    for older, newer in itertools.pairwise(revisions):
        assert newer.down_revision == older.revision


def _is_bare(body: list[ast.stmt]) -> bool:
    statements = [
        s
        for s in body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))  # docstrings, ...
    ]
    return all(isinstance(s, ast.Pass) for s in statements)


@pytest.mark.parametrize("script", oldest_first(), ids=lambda s: s.revision)
def test_every_revision_has_a_real_downgrade(script: Script) -> None:
    assert script.path is not None
    tree = ast.parse(Path(script.path).read_text(encoding="utf-8"))
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in ("upgrade", "downgrade")
    }
    assert set(functions) == {"upgrade", "downgrade"}
    assert not _is_bare(functions["upgrade"].body), f"{script.revision}: empty upgrade()"
    assert not _is_bare(functions["downgrade"].body), f"{script.revision}: downgrade() is a stub"


def test_bare_pass_detection_can_fail() -> None:
    """The stub detector above really recognises the stubs Alembic's template produces."""
    for source in ("def downgrade():\n    pass\n", 'def downgrade():\n    """x"""\n    ...\n'):
        function = ast.parse(source).body[0]
        assert isinstance(function, ast.FunctionDef)
        assert _is_bare(function.body)
    real = ast.parse("def downgrade():\n    op.drop_table('t')\n").body[0]
    assert isinstance(real, ast.FunctionDef)
    assert not _is_bare(real.body)


# -- against real databases -------------------------------------------------------------------


def test_upgrade_to_head_and_models_match(empty_database: URL) -> None:
    alembic_upgrade(empty_database, "head")

    assert current(empty_database) == schema.HEAD_REVISION
    assert schema.revision_of(empty_database) == schema.HEAD_REVISION
    assert {"sessions", "messages"} <= table_names(empty_database)
    assert drift.check(empty_database) == []
    assert compare(empty_database) == []
    assert compare(empty_database, ignore_only_reflected=False) == []


def test_models_match_detects_drift(empty_database: URL) -> None:
    """The comparison is not vacuous: a missing index is reported, on every backend."""
    alembic_upgrade(empty_database, "head")
    with migrating(empty_database) as connection:
        if connection.dialect.name in ("mysql", "mariadb"):
            connection.execute(text("DROP INDEX idx_sessions_handoff_state ON sessions"))
        else:
            connection.execute(text("DROP INDEX idx_sessions_handoff_state"))

    diffs = compare(empty_database)
    assert [d[0] for d in diffs] == ["add_index"]
    assert diffs[0][1].name == "idx_sessions_handoff_state"
    assert [(d.kind, d.detail.split()[0]) for d in drift.check(empty_database)] == [
        ("add index", "idx_sessions_handoff_state")
    ]


def test_round_trip_step_by_step(empty_database: URL) -> None:
    url = empty_database
    before = table_names(url)
    revisions = oldest_first()

    for script in revisions:
        alembic_upgrade(url, script.revision)
        assert current(url) == script.revision
    assert current(url) == schema.HEAD_REVISION
    created = table_names(url) - before - {schema.VERSION_TABLE}
    assert {"sessions", "messages"} <= created

    for script in reversed(revisions):
        target = script.down_revision
        assert target is None or isinstance(target, str)
        alembic_downgrade(url, target or "base")
        assert current(url) == target

    left = table_names(url)
    assert not (created & left), f"downgrade left tables behind: {created & left}"
    assert left - before <= {schema.VERSION_TABLE}
    if schema.VERSION_TABLE in left:
        with schema.migration_connection(url, read_only=True) as connection:
            version_rows = connection.execute(text(f"SELECT * FROM {schema.VERSION_TABLE}"))
            assert version_rows.all() == []

    for script in revisions:
        alembic_upgrade(url, script.revision)
    assert current(url) == schema.HEAD_REVISION
    assert drift.check(url) == []
    assert compare(url, ignore_only_reflected=False) == []


def test_each_step_goes_down_and_up_again(empty_database: URL) -> None:
    """pytest-alembic's up/down consistency: every revision, right after its upgrade, can be
    downgraded to its predecessor and upgraded again, leaving the same schema."""
    url = empty_database
    for script in oldest_first():
        alembic_upgrade(url, script.revision)
        shape = schema_snapshot(url)
        target = script.down_revision
        assert target is None or isinstance(target, str)
        alembic_downgrade(url, target or "base")
        assert current(url) == target
        alembic_upgrade(url, script.revision)
        assert current(url) == script.revision
        assert schema_snapshot(url) == shape
    assert drift.check(url) == []


def test_round_trip_keeps_working_with_data(empty_database: URL) -> None:
    """Down and up again with rows in the tables: the downgrade drops them, nothing fails."""
    url = empty_database
    alembic_upgrade(url, "head")
    with SessionDB(url=url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
        assert db.request_handoff("s1", "telegram")
    alembic_downgrade(url, "base")
    alembic_upgrade(url, "head")
    with SessionDB(url=url) as db:
        assert db.get_handoff_state("s1") is None
        db.create_session("s1", "cli")
        assert db.request_handoff("s1", "telegram")
        assert db.list_pending_handoffs()[0]["id"] == "s1"


def test_second_upgrade_is_a_no_op(empty_database: URL) -> None:
    url = empty_database
    schema.upgrade(url)
    with SessionDB(url=url) as db:
        db.create_session("kept", "cli", title="ünïcode ✓")
        db.append_message("kept", "user", "hi")
        assert db.request_handoff("kept", "discord")
    shape, rows = schema_snapshot(url), all_rows(url)

    schema.upgrade(url)
    alembic_upgrade(url, "head")

    assert schema_snapshot(url) == shape
    assert all_rows(url) == rows
    assert current(url) == schema.HEAD_REVISION


def test_version_table_has_our_name(empty_database: URL) -> None:
    schema.upgrade(empty_database)
    names = table_names(empty_database)
    assert schema.VERSION_TABLE == "hermes_state_alembic_version"
    assert schema.VERSION_TABLE in names
    assert "alembic_version" not in names
    with schema.migration_connection(empty_database, read_only=True) as connection:
        version = connection.execute(
            select(text("version_num")).select_from(text(schema.VERSION_TABLE))
        ).scalars()
        assert list(version) == [schema.HEAD_REVISION]


def test_alembic_command_line_from_the_repository_root(empty_database: URL, tmp_path: Path) -> None:
    """`alembic upgrade head` in a checkout: alembic.ini at the root, the URL from the env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_STATE_", "PYTHON"))}
    env["HERMES_STATE_URL"] = empty_database.render_as_string(hide_password=False)
    env["HERMES_HOME"] = str(tmp_path / "elsewhere")  # must not be used: the URL wins

    upgraded = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert current(empty_database) == schema.HEAD_REVISION
    assert drift.check(empty_database) == []
    assert not (tmp_path / "elsewhere" / "state.db").exists()


# -- the test fixtures' copies of a migrated database ------------------------------------------


def definitions(url: URL) -> list[str]:
    """Every table's, index's and constraint's definition as the server itself writes it."""
    with schema.migration_connection(url, read_only=True) as connection:
        if url.get_backend_name() == "sqlite":
            return list(
                connection.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY 2"))
            )
        if url.get_backend_name() == "mysql":
            tables = sorted(inspect(connection).get_table_names())
            return [connection.execute(text(f"SHOW CREATE TABLE `{t}`")).one()[1] for t in tables]
        indexes = connection.execute(
            text("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexdef")
        ).scalars()
        constraints = connection.execute(
            text(
                "SELECT conrelid::regclass::text || ' ' || conname || ' ' || "
                "pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = 'public'::regnamespace ORDER BY 1"
            )
        ).scalars()
        return [*indexes, *constraints]


def test_a_fixture_copy_of_a_migrated_database_is_what_the_migrations_make(
    empty_database: URL, tmp_path: Path
) -> None:
    """``backend_url``, ``database_at_head`` and the shared server databases are copies of one
    database the migrations made (a file, a template, or its tables' DDL replayed): a copy
    has the same tables, columns, indexes, keys, constraints and bookkeeping rows as a
    database migrated now."""
    backend = empty_database.get_backend_name()
    migrated = empty_database
    schema.upgrade(migrated)
    with database_at_head(backend, tmp_path / "copy") as copy:
        assert copy != migrated
        assert schema.revision_of(copy) == schema.HEAD_REVISION
        assert drift.check(copy) == []
        assert schema_snapshot(copy) == schema_snapshot(migrated)
        assert all_rows(copy) == all_rows(migrated)
        assert definitions(copy) == definitions(migrated)
        assert definitions(copy)  # the comparison is not of two empty lists
