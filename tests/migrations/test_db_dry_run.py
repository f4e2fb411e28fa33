"""``db upgrade --dry-run`` and ``db copy --dry-run``: they say what would happen, and what they
say is what then happens, on every backend, while the database stays as it was (an SQLite file
that does not exist is not created).

The upgrade's prediction is held to a real upgrade step by step: each migration's predicted
changes are exactly the difference the real migration makes. The copy's is held to a real
copy's report.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Double, Index, Integer, MetaData, String, Table, Text, insert
from sqlalchemy.engine import URL

from hermes_state import schema
from hermes_state.engine import make_engine, resolve_url
from hermes_state.errors import CopyConflictError, CopyRefusedError, SchemaOutOfDateError
from hermes_state.models import sessions
from hermes_state.promotion import CopyPlan, Fill, copy_database, plan_copy
from hermes_state.upgrade_plan import Layout, Start, differences, layout_of, plan_upgrade
from tests.cli.test_cli_db import HEAD, REVISIONS
from tests.conftest import BACKENDS, database_at_head, sqlite_url, throwaway_database, url_arg
from tests.migrations.test_promotion import execute, hand_made_legacy, populate
from tests.support.digest import database_digest
from tests.support.processes import in_process
from tests.support.vintages import copy_real_schema11

# -- databases to start from -------------------------------------------------------------------


def legacy_tables(url: URL) -> None:
    """A hermes ``sessions``/``messages`` pair that predates hermes-state, with a row each."""
    legacy = MetaData()
    sessions = Table(
        "sessions",
        legacy,
        Column("id", String(255), primary_key=True),
        Column("source", String(64), nullable=False),
        Column("started_at", Double(), nullable=False),
        Column("title", Text()),
        Column("message_count", Integer(), server_default="0"),
        Column("handoff_state", String(16)),
    )
    messages = Table(
        "messages",
        legacy,
        Column("id", Integer(), primary_key=True),
        Column("session_id", String(255), nullable=False),
        Column("role", String(32), nullable=False),
        Column("content", Text()),
        Column("timestamp", Double(), nullable=False),
        Column("tool_calls", Text()),
    )
    Index("idx_messages_session", messages.c.session_id)
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            legacy.create_all(connection)
            connection.execute(insert(sessions).values(id="old", source="cli", started_at=1.0))
            connection.execute(
                insert(messages).values(session_id="old", role="user", content="hi", timestamp=2.0)
            )
    finally:
        engine.dispose()


@contextlib.contextmanager
def database(backend: str, folder: Path) -> Iterator[URL]:
    if backend == "sqlite":
        yield sqlite_url(folder)
        return
    with throwaway_database(backend) as url:
        yield url


def start_from(url: URL, start: str) -> None:
    """Shape the (empty) database at ``url``: "new", "legacy", or a revision."""
    if start == "legacy":
        legacy_tables(url)
    elif start != "new":
        schema.upgrade(url, start)


def real_layout(url: URL) -> Layout:
    if url.get_backend_name() == "sqlite" and not Path(str(url.database)).exists():
        return {}
    engine = make_engine(url, read_only=True)
    try:
        with engine.connect() as connection:
            return layout_of(connection)
    finally:
        engine.dispose()


def digest_of(url: URL) -> str | None:
    if url.get_backend_name() == "sqlite" and not Path(str(url.database)).exists():
        return None
    return database_digest(url)


def assert_the_prediction_holds(
    url: URL, revision: str = "head", *, adopt_foreign: bool = False
) -> list[str]:
    """Plan, check nothing changed, then upgrade step by step and compare; returns what was
    predicted, in words."""
    before = digest_of(url)
    plan = plan_upgrade(url, revision, adopt_foreign=adopt_foreign)
    assert digest_of(url) == before
    assert plan.before == schema.revision_of(url, allow_foreign=True) if before else True
    current = real_layout(url)
    for step in plan.steps:
        schema.upgrade(url, step.revision, adopt_foreign=adopt_foreign)
        now = real_layout(url)
        assert sorted(map(str, step.changes)) == sorted(map(str, differences(current, now))), (
            step.revision
        )
        current = now
    assert schema.revision_of(url, allow_foreign=True) == plan.after
    return [str(change) for change in plan.changes]


# -- the upgrade's prediction is what the upgrade does --------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("start", ["new", "legacy", *REVISIONS])
def test_upgrade_prediction_is_what_the_upgrade_does(
    backend: str, start: str, tmp_path: Path
) -> None:
    with database(backend, tmp_path) as url:
        start_from(url, start)
        predicted = assert_the_prediction_holds(url)
        if start == HEAD:
            assert predicted == []
        if start == "new":
            assert "create table handoff_events (" in " ".join(predicted)
            assert "create index idx_sessions_handoff_state on sessions (" in " ".join(predicted)
            assert "add column sessions.handoff_attempt" in predicted
        if start == "legacy":
            assert "add column sessions.handoff_owner" in predicted
            assert not any(change.startswith("create table sessions") for change in predicted)


@pytest.mark.parametrize("backend", BACKENDS)
def test_upgrade_prediction_to_a_revision(backend: str, tmp_path: Path) -> None:
    with database(backend, tmp_path) as url:
        start_from(url, REVISIONS[0])
        assert_the_prediction_holds(url, REVISIONS[2])
        assert schema.revision_of(url) == REVISIONS[2]


def test_upgrade_prediction_on_the_real_upstream_file(tmp_path: Path) -> None:
    url = resolve_url(copy_real_schema11(tmp_path / "state.db"))
    plan = plan_upgrade(url)
    assert plan.start is Start.ADOPT
    predicted = assert_the_prediction_holds(url)
    assert not any("drop table" in change or "drop column" in change for change in predicted)


def test_upgrade_prediction_on_another_applications_file(tmp_path: Path) -> None:
    path = tmp_path / "todo.db"
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE todo (id INTEGER PRIMARY KEY, what TEXT)")
        connection.commit()
    plan = plan_upgrade(resolve_url(path), adopt_foreign=True)
    assert plan.start is Start.ADOPT_FOREIGN
    assert_the_prediction_holds(resolve_url(path), adopt_foreign=True)


def test_upgrade_prediction_on_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    assert plan_upgrade(resolve_url(path)).start is Start.NEW
    assert path.stat().st_size == 0
    assert_the_prediction_holds(resolve_url(path))


# -- the command line ----------------------------------------------------------------------------


#: ``hermes-state ARGV...`` through ``main()`` in this process.
run = in_process


def test_upgrade_dry_run_of_the_default_file_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HERMES_HOME": str(home)}
    said = run("db", "upgrade", "--dry-run", env=env)
    assert said.returncode == 0, said.stderr
    assert said.stdout.startswith(f"dry run: would create {home / 'state.db'} and migrate it ")
    assert f"from base to {HEAD} (head), in {len(REVISIONS)} migrations:" in said.stdout
    assert "    create table sessions (id, source, " in said.stdout
    assert not home.exists()
    document = json.loads(run("db", "upgrade", "--dry-run", "--json", env=env).stdout)
    assert document["dry_run"] is True
    assert document["start"] == "create"
    assert [step["revision"] for step in document["migrations"]] == REVISIONS
    assert not home.exists()
    upgraded = json.loads(run("db", "upgrade", "--json", env=env).stdout)
    assert upgraded["dry_run"] is False
    assert upgraded["to"] == HEAD
    again = run("db", "upgrade", "--dry-run", env=env)
    assert again.stdout == f"dry run: {home / 'state.db'} is already at {HEAD} (head); " + (
        "nothing would change\n"
    )


def test_upgrade_dry_run_of_the_upstream_file_says_adopt(tmp_path: Path) -> None:
    path = copy_real_schema11(tmp_path / "state.db")
    before = database_digest(resolve_url(path))
    said = run("db", "upgrade", "--dry-run", "--url", str(path))
    assert said.returncode == 0, said.stderr
    assert said.stdout.startswith(f"dry run: would adopt {path} in place")
    assert "adding only:" in said.stdout
    assert "    add column sessions.handoff_owner" in said.stdout
    assert database_digest(resolve_url(path)) == before
    assert run("db", "current", "--url", str(path)).stdout.startswith(
        "not adopted (upstream schema 11)"
    )


def test_upgrade_dry_run_refuses_what_the_upgrade_refuses(tmp_path: Path) -> None:
    path = tmp_path / "todo.db"
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE todo (id INTEGER PRIMARY KEY, what TEXT)")
        connection.commit()
    before = path.read_bytes()
    refused = run("db", "upgrade", "--dry-run", "--url", str(path))
    assert refused.returncode == 2
    assert "another application's SQLite database" in refused.stderr
    adopted = run("db", "upgrade", "--dry-run", "--adopt-foreign", "--url", str(path))
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.startswith(f"dry run: would add hermes tables to {path}")
    unknown = run("db", "upgrade", "no_such_revision", "--dry-run", "--url", str(tmp_path / "x"))
    assert unknown.returncode == 2
    assert "no_such_revision" in unknown.stderr
    folder = run("db", "upgrade", "--dry-run", "--url", str(tmp_path))
    assert folder.returncode == 2
    assert "is a directory" in folder.stderr
    assert path.read_bytes() == before
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "sqlite"])
def test_upgrade_dry_run_on_a_server_writes_nothing(backend: str) -> None:
    with throwaway_database(backend) as url:
        said = run("db", "upgrade", "--dry-run", "--url", url_arg(url), "--json")
        assert said.returncode == 0, said.stderr
        document = json.loads(said.stdout)
        assert document["start"] == "new"
        assert document["to"] == HEAD
        assert real_layout(url) == {}
        legacy_tables(url)
        before = database_digest(url)
        text = run("db", "upgrade", "--dry-run", "--url", url_arg(url)).stdout
        assert "would adopt" in text
        assert database_digest(url) == before
        assert schema.revision_of(url) is None


# -- the copy's pre-flight is what the copy then does --------------------------------------------


def assert_the_copy_plan_holds(source: URL, target: URL, **options: Any) -> CopyPlan:
    """Plan (nothing may change), then copy for real and compare the plan with the report."""
    before = (digest_of(source), digest_of(target))
    plan = plan_copy(source, target, **options)
    assert (digest_of(source), digest_of(target)) == before
    if plan.refusal is not None:
        with pytest.raises((CopyRefusedError, CopyConflictError)):
            copy_database(source, target, **options)
        return plan
    report = copy_database(source, target, **options)
    force = bool(options.get("force"))
    assert [
        (t.table, t.source_rows, t.new, t.identical, t.differing if force else 0)
        for t in plan.tables
    ] == [(t.table, t.source_rows, t.copied, t.identical, t.overwritten) for t in report.tables]
    assert [(t.created, t.added_columns) for t in plan.tables] == [
        (t.created, t.added_columns) for t in report.tables
    ]
    assert [s.table for s in plan.skipped] == [s.table for s in report.skipped]
    return plan


@pytest.fixture
def source(tmp_path: Path) -> URL:
    folder = tmp_path / "source"
    folder.mkdir()
    url = sqlite_url(folder)
    populate(url)
    return url


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_plan_is_what_the_copy_does(source: URL, backend: str, tmp_path: Path) -> None:
    with database_at_head(backend, tmp_path / "target") as target:
        first = assert_the_copy_plan_holds(source, target)
        assert first.refusal is None
        assert {t.table: t.new for t in first.tables}["sessions"] == 11
        again = assert_the_copy_plan_holds(source, target)
        assert all(t.new == 0 and t.identical == t.source_rows for t in again.tables)
        # The target drifts and the source grows: a conflict, overwritten only with force.
        execute(
            target,
            sessions.update().where(sessions.c.id == "never").values(title="edited on the target"),
        )
        populate(source, prefix="later-")
        refused = assert_the_copy_plan_holds(source, target)
        assert refused.conflicts == ["sessions 'never'"]
        assert refused.refusal is not None
        assert "nothing would be copied" in refused.refusal
        forced = assert_the_copy_plan_holds(source, target, force=True)
        assert forced.refusal is None
        assert {t.table: t.differing for t in forced.tables}["sessions"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_plan_names_refusals_and_fills(backend: str, tmp_path: Path) -> None:
    source = hand_made_legacy(tmp_path / "legacy")
    with database_at_head(backend, tmp_path / "target") as target:
        refused = assert_the_copy_plan_holds(source, target)
        assert refused.problems == [
            "sessions.source: 2 row(s) are NULL and the target column is NOT NULL; supply a "
            "value with --fill sessions.source=VALUE"
        ]
        fill = Fill.parse("sessions.source=unknown")
        filled = assert_the_copy_plan_holds(source, target, fills=[fill])
        assert filled.refusal is None
        assert [(f.fill, f.nulls) for f in filled.fills] == [(fill, 2)]


def test_copy_plan_of_the_upstream_file_to_a_new_file(tmp_path: Path) -> None:
    source = resolve_url(copy_real_schema11(tmp_path / "upstream" / "state.db"))
    target = resolve_url(tmp_path / "new" / "state.db")
    plan = plan_copy(source, target)
    assert plan.source.upgraded_first
    assert plan.source.revision is None
    assert "would first adopt it in place" in str(plan.source)
    assert not plan.target.exists
    assert not (tmp_path / "new").exists()
    assert schema.revision_of(source) is None  # not adopted by the dry run
    assert {t.table: t.new for t in plan.tables}["messages"] > 0
    report = copy_database(source, target)
    assert [(t.table, t.new) for t in plan.tables] == [(t.table, t.copied) for t in report.tables]


def test_copy_plan_refuses_a_server_target_behind_head(source: URL) -> None:
    with throwaway_database("postgresql") as target:
        schema.upgrade(target, REVISIONS[1])
        with pytest.raises(SchemaOutOfDateError, match=r"behind .*: it must be migrated first"):
            plan_copy(source, target)
        assert schema.revision_of(target) == REVISIONS[1]


def test_copy_dry_run_on_the_command_line(source: URL, tmp_path: Path) -> None:
    target = tmp_path / "new" / "state.db"
    said = run("db", "copy", "--dry-run", "--url", str(source.database), "--to", str(target))
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    assert lines[0] == f"dry run: would copy {source.database} -> {target}"
    assert lines[1] == f"source: {source.database} is at {HEAD} (head)"
    assert lines[2] == f"target: {target} does not exist: the copy would create it at {HEAD}"
    assert lines[3].split() == [
        "TABLE", "SOURCE", "ROWS", "NEW", "ALREADY", "THERE", "DIFFERENT", "TARGET", "ROWS",
        "SCHEMA", "CHANGE",
    ]  # fmt: skip
    assert lines[4].split()[:3] == ["sessions", "11", "11"]
    assert not target.parent.exists()
    document = json.loads(
        run(
            "db", "copy", "--dry-run", "--json", "--url", str(source.database), "--to", str(target)
        ).stdout
    )
    assert document["dry_run"] is True
    assert document["would_copy"] is True
    assert document["target"]["exists"] is False
    assert document["tables"][0] == {
        "table": "sessions",
        "source_rows": 11,
        "new": 11,
        "identical": 0,
        "differing": 0,
        "target_rows": 0,
        "created": False,
        "added_columns": [],
    }
    legacy = hand_made_legacy(tmp_path / "legacy")
    refused = run("db", "copy", "--dry-run", "--url", str(legacy.database), "--to", str(target))
    assert refused.returncode == 1
    assert "refused: sessions.source: 2 row(s) are NULL" in refused.stdout
    (line,) = refused.stderr.splitlines()
    assert line.startswith("hermes-state: the copy would be refused: the target cannot take")
    filled = run(
        "db", "copy", "--dry-run", "--fill", "sessions.source=x",
        "--url", str(legacy.database), "--to", str(target),
    )  # fmt: skip
    assert filled.returncode == 0, filled.stderr
    assert "--fill sessions.source=x would fill 2 NULL(s)" in filled.stdout
    assert not target.parent.exists()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "sqlite"])
def test_copy_dry_run_to_a_server_on_the_command_line(
    source: URL, backend: str, tmp_path: Path
) -> None:
    with database_at_head(backend, tmp_path / "target") as target:
        before = database_digest(target)
        argv = ("db", "copy", "--dry-run", "--url", str(source.database), "--to", url_arg(target))
        said = run(*argv)
        assert said.returncode == 0, said.stderr
        assert f"target: {target.render_as_string(hide_password=True)} is at {HEAD}" in said.stdout
        document = json.loads(run(*argv, "--json").stdout)
        assert {t["table"]: t["new"] for t in document["tables"]}["messages"] == 24
        assert database_digest(target) == before


def test_upgrade_prediction_on_names_sqlite_would_confuse() -> None:
    """PostgreSQL tells ``Notes`` from ``notes`` and ``A`` from ``a``; the shadow (SQLite) does
    not, and must still predict the upgrade."""
    with throwaway_database("postgresql") as url:
        engine = make_engine(url)
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql('CREATE TABLE "Notes" ("A" INTEGER, "a" INTEGER)')
                connection.exec_driver_sql("CREATE TABLE notes (id INTEGER)")
                connection.exec_driver_sql('CREATE INDEX "Ix" ON "Notes" ("A")')
                connection.exec_driver_sql("CREATE INDEX ix ON notes (id)")
        finally:
            engine.dispose()
        assert plan_upgrade(url).start is Start.NEW
        assert_the_prediction_holds(url)
