"""Promotion: ``hermes-state db copy --to URL`` and ``promotion.copy_database``.

A SQLite source with sessions in every handoff state, owners and leases, transcripts and an
audit trail is copied to SQLite, PostgreSQL and MariaDB; the modelled tables are compared row
by row between source and target (the upstream files of ``tests/support/vintages.py`` check every
table and column in ``test_vintages.py``). A second run copies nothing; a copy killed half way
(a real process, SIGKILL) resumes when run again; a target row that differs stops the copy
before anything is written unless ``--force``; rows the target cannot take (NULL in NOT NULL,
too long, mistyped) refuse the copy up front, and ``--fill`` supplies NULLs' values. Memory
boundedness is measured in ``bench/``, not here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import SessionDB, schema
from hermes_state.cli import main
from hermes_state.errors import HermesStateError
from hermes_state.models import handoff_events, messages, metadata, sessions
from hermes_state.promotion import CopyConflictError, CopyRefusedError, Fill, copy_database
from tests.conftest import CliResult, database_at_head, sqlite_url, throwaway_database, url_arg
from tests.support.digest import database_digest, sync_url, table_rows
from tests.support.legacy import build_legacy_db

T0 = 1_700_000_000.0
PREVIOUS = "0002_handoff_leases"
# Every modelled table, which the copy carries first, parents before children.
MODELLED = tuple(metadata.sorted_tables)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        self.now += 0.25  # every call a distinct, exactly representable time
        return self.now


# -- databases -----------------------------------------------------------------------------------


@pytest.fixture
def source(tmp_path: Path) -> URL:
    """A SQLite file with something in every column and state worth copying."""
    folder = tmp_path / "source"
    folder.mkdir()
    url = sqlite_url(folder)
    populate(url)
    return url


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    with database_at_head(request.param, tmp_path / "target") as url:
        yield url


@pytest.fixture
def pg_target(tmp_path: Path) -> Iterator[URL]:
    with database_at_head("postgresql", tmp_path / "target") as url:
        yield url


def populate(url: URL, prefix: str = "") -> None:
    clock = Clock()
    with contextlib.ExitStack() as stack:
        api = stack.enter_context(SessionDB(url=url, clock=clock))
        gateway = stack.enter_context(
            SessionDB(url=url, clock=clock, owner="gw-1", lease_seconds=600)
        )
        unleased = stack.enter_context(SessionDB(url=url, clock=clock, owner="gw-2"))

        def session(session_id: str, **fields: Any) -> str:
            sid = prefix + session_id
            api.create_session(sid, "cli", **fields)
            api.append_message(sid, "user", f"hello from {sid}")
            api.append_message(sid, "assistant", f"hi, {sid} ✓")
            return sid

        session(
            "never",
            user_id="u-1",
            # Titles are unique (upstream's index): a second populate() gets its own.
            title=f"A title with 'quotes' and \"double quotes\" {prefix}".rstrip(),
            model="model-x",
            parent_session_id="parent-0",
            ended_at=T0 + 99.5,
            end_reason="user quit",
        )
        api.append_message(prefix + "never", "tool", None)
        api.append_message(prefix + "never", "assistant", "long " * 20_000 + "🚀 ünïcödé")

        pending = session("pending")
        assert api.request_handoff(pending, "telegram")

        leased = session("running-leased")
        assert api.request_handoff(leased, "discord")
        assert gateway.claim_handoff(leased)

        owned = session("running-owned")
        assert api.request_handoff(owned, "slack")
        assert unleased.claim_handoff(owned)

        anonymous = session("running-anonymous")
        assert api.request_handoff(anonymous, "telegram")
        assert api.claim_handoff(anonymous)

        completed = session("completed")
        assert api.request_handoff(completed, "telegram")
        assert gateway.claim_handoff(completed)
        assert gateway.complete_handoff(completed)

        failed = session("failed")
        assert api.request_handoff(failed, "telegram")
        assert gateway.claim_handoff(failed)
        assert gateway.fail_handoff(failed, "the platform said no")

        retried = session("retried")
        assert api.request_handoff(retried, "telegram")
        assert api.fail_handoff(retried, "nobody came", only_states=("pending",))
        assert api.retry_handoff(retried, "discord")

        # Ids that differ only in case are distinct sessions everywhere.
        session("Mixed-Case")
        session("mixed-case")
        session("sess-ü")


def add_bulk_sessions(url: URL, count: int) -> None:
    rows = [
        {"id": f"bulk-{n:06d}", "source": "bulk", "started_at": T0 + n, "handoff_attempt": 0}
        for n in range(count)
    ]
    with SessionDB(url=url) as db:
        db._execute_write(lambda conn: conn.execute(sessions.insert(), rows))


def _engine(url: URL) -> Any:
    return create_engine(sync_url(url), poolclass=NullPool)


def copied_rows(url: URL) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table's rows, modelled columns only, ordered by primary key."""
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            return {
                table.name: sorted(
                    (tuple(row) for row in connection.execute(select(*table.columns))),
                    key=lambda row: row[0],
                )
                for table in MODELLED
            }
    finally:
        engine.dispose()


def rows_digest(url: URL) -> str:
    return hashlib.sha256(repr(copied_rows(url)).encode()).hexdigest()


def count(url: URL, table: Any) -> int:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(table)).scalar_one())
    finally:
        engine.dispose()


def execute(url: URL, *statements: Any) -> None:
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(statement)
    finally:
        engine.dispose()


def table_reports(result: CliResult) -> dict[str, dict[str, int]]:
    return {table["table"]: table for table in result.json()["tables"]}


# -- round trip, idempotence, and using the target afterwards ------------------------------------


def test_round_trip_then_nothing_more(
    source: URL, target: URL, cli: Callable[..., CliResult]
) -> None:
    expected = copied_rows(source)
    counts = {name: len(rows) for name, rows in expected.items()}
    assert {name: n for name, n in counts.items() if n} == {
        "sessions": 11,
        "messages": 24,
        "handoff_events": 16,
        "schema_version": 1,  # upstream's version row, which a new database gets
    }
    assert set(counts) == {table.name for table in MODELLED}
    source_digest = database_digest(source)

    first = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target), "--json")
    assert first.code == 0, first.err
    reports = table_reports(first)
    assert set(reports) == set(expected)
    for name, rows in expected.items():
        # The target at head already has upstream's version row, the same as the source's.
        already = len(rows) if name == "schema_version" else 0
        assert reports[name]["source_rows"] == len(rows)
        assert reports[name]["copied"] == len(rows) - already
        assert reports[name]["identical"] == already
        assert reports[name]["overwritten"] == 0
        assert reports[name]["target_rows"] == len(rows)
    assert copied_rows(target) == expected
    assert rows_digest(target) == rows_digest(source)
    assert database_digest(source) == source_digest  # the source is only read

    target_digest = database_digest(target)
    second = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
    assert second.code == 0, second.err
    # Derived and bookkeeping tables are not listed on a rerun: nothing in them needs a word.
    assert "not copied" not in second.out
    header, *lines = second.out.splitlines()[1:]
    assert header.split()[:3] == ["TABLE", "SOURCE", "ROWS"]
    table_lines = {line.split()[0]: line.split() for line in lines if line.split()[0] in expected}
    assert set(table_lines) == set(expected)
    for name, rows in expected.items():
        # table, source rows, copied, already there, overwritten, target rows, schema change
        n = str(len(rows))
        assert table_lines[name] == [name, n, "0", n, "0", n, "-"]
    assert database_digest(target) == target_digest

    third = copy_database(source, target)
    assert third.copied == 0
    assert sorted((t.table, t.identical, t.target_rows) for t in third.tables) == sorted(
        (name, len(rows), len(rows)) for name, rows in expected.items()
    )
    assert database_digest(target) == target_digest

    # The target is a working database: new ids follow the copied ones.
    with SessionDB(url=target) as db:
        last_message = max(row[0] for row in expected["messages"])
        last_event = max(row[0] for row in expected["handoff_events"])
        assert db.append_message("completed", "user", "once more, please") > last_message
        assert db.request_handoff("completed", "discord") is True
        assert db.claim_handoff("pending") is True
        history = db.handoff_history("completed")
        assert [e["to_state"] for e in history] == ["pending", "running", "completed", "pending"]
        assert history[-1]["id"] > last_event
        assert history[-1]["actor"] == "api"
        assert db.get_messages("completed")[-1]["content"] == "once more, please"
        assert db.get_handoff_state("running-leased") == {
            "state": "running",
            "platform": "discord",
            "error": None,
        }
        db.create_session("born-on-the-target", "cli")
        assert db.append_message("born-on-the-target", "user", "hi") > last_message + 1


def test_copy_reports_progress_batch_by_batch(source: URL, tmp_path: Path) -> None:
    with database_at_head("sqlite", tmp_path / "target") as target:
        calls: list[tuple[str, int, int]] = []
        report = copy_database(
            source, target, batch_size=5, progress=lambda *args: calls.append(args)
        )
    expected = {"sessions": 11, "messages": 24, "handoff_events": 16}
    assert report.copied == sum(expected.values())
    for name, total in expected.items():
        done = [call[1] for call in calls if call[0] == name]
        assert done == [*range(5, total, 5), total]
        assert {call[2] for call in calls if call[0] == name} == {total}


def test_copy_carries_legacy_columns(source: URL, target: URL) -> None:
    """An adopted state.db keeps columns older hermes versions made; they travel too."""
    engine = _engine(source)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("ALTER TABLE sessions ADD COLUMN legacy_note TEXT")
            connection.exec_driver_sql("ALTER TABLE sessions ADD COLUMN legacy_count INTEGER")
            connection.exec_driver_sql(
                "UPDATE sessions SET legacy_note = 'old hermes ✓', legacy_count = length(id)"
            )
    finally:
        engine.dispose()
    report = copy_database(source, target)
    assert report.tables[0].added_columns == ["legacy_note", "legacy_count"]
    assert copied_rows(target) == copied_rows(source)
    notes = {
        row["id"]: (row["legacy_note"], row["legacy_count"])
        for row in table_rows(target, "sessions")
    }
    assert notes["mixed-case"] == ("old hermes ✓", len("mixed-case"))
    assert len(notes) == 11


def test_an_adopted_legacy_file_is_promoted(tmp_path: Path, pg_target: URL) -> None:
    """The real promotion: a state.db older hermes versions wrote, adopted, copied to a server."""
    legacy = build_legacy_db(tmp_path / "legacy" / "state.db", with_handoff=True)
    source = sqlite_url(legacy.path.parent)
    SessionDB(url=source).close()  # adopted in place on open
    report = copy_database(source, pg_target, batch_size=97)
    assert copied_rows(pg_target) == copied_rows(source)
    assert report.tables[0].copied == len(legacy.session_ids)
    with SessionDB(url=pg_target) as db:
        for state in ("running", "failed", "pending", "completed"):
            for session_id in legacy.ids_in(state):
                assert db.get_handoff_state(session_id)["state"] == state
        (running, *_) = legacy.ids_in("running")
        assert db.reclaim_stale_running_handoffs("stranded") == legacy.ids_in("running")
        assert db.request_handoff(running, "telegram") is True


def test_a_transcript_without_its_session_is_reported_cleanly(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    engine = _engine(source)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("PRAGMA foreign_keys = OFF")
            connection.execute(
                messages.insert().values(
                    session_id="deleted-long-ago", role="user", content="orphan", timestamp=T0
                )
            )
    finally:
        engine.dispose()
    target = tmp_path / "target.db"
    result = cli("--url", url_arg(source), "db", "copy", "--to", str(target))
    assert result.code == 1
    assert "unexpected" not in result.err
    assert "a bug" not in result.err
    assert "messages" in result.err


# -- interrupted half way, then resumed ---------------------------------------------------------

BULK = 3000


def test_a_killed_copy_resumes(source: URL, pg_target: URL, tmp_path: Path) -> None:
    add_bulk_sessions(source, BULK)
    total = BULK + 11
    log = tmp_path / "copy.log"
    env = {**os.environ, "HERMES_HOME": str(tmp_path / "home")}
    env.pop("HERMES_STATE_URL", None)
    command = [
        sys.executable,
        "-m",
        "hermes_state",
        "--url",
        url_arg(source),
        "db",
        "copy",
        "--to",
        url_arg(pg_target),
        "--batch-size",
        "1",
    ]
    with log.open("wb") as output:
        copying = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        seen = 0
        while time.monotonic() < deadline:
            seen = count(pg_target, sessions)
            if 0 < seen < total:
                break
            if copying.poll() is not None:
                break
            time.sleep(0.02)
        assert copying.poll() is None, (
            f"the copy ended (exit {copying.returncode}) before it could be interrupted; "
            f"target had {seen} sessions. Output: {log.read_text()}"
        )
        assert 0 < seen < total, f"no partial copy observed within the deadline ({seen})"
        copying.send_signal(signal.SIGKILL)
        assert copying.wait(timeout=60) == -signal.SIGKILL
    finally:
        if copying.poll() is None:
            copying.kill()
            copying.wait(timeout=60)

    # Half way: some sessions, not all, no transcript or events yet.
    interrupted = count(pg_target, sessions)
    assert seen <= interrupted < total
    assert count(pg_target, messages) == 0
    assert count(pg_target, handoff_events) == 0

    resumed = main(["--url", url_arg(source), "db", "copy", "--to", url_arg(pg_target), "--json"])
    assert resumed == 0
    assert copied_rows(pg_target) == copied_rows(source)
    assert rows_digest(pg_target) == rows_digest(source)
    assert count(pg_target, sessions) == total

    again = copy_database(source, pg_target)
    sessions_report = again.tables[0]
    assert again.copied == 0
    assert sessions_report.identical == total


def test_resume_reports_what_was_already_there(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """A partial target (as a killed copy leaves it): the rest is copied, the rest counted."""
    with database_at_head("sqlite", tmp_path / "target") as target:
        rows = copied_rows(source)["sessions"]
        names = [column.name for column in sessions.columns]
        execute(
            target, sessions.insert().values([dict(zip(names, r, strict=True)) for r in rows[:4]])
        )
        result = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target), "--json")
        assert result.code == 0, result.err
        report = table_reports(result)["sessions"]
        assert (report["copied"], report["identical"], report["target_rows"]) == (7, 4, 11)
        assert copied_rows(target) == copied_rows(source)


# -- conflicts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_a_differing_row_stops_the_copy_unless_forced(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult], backend: str
) -> None:
    with database_at_head(backend, tmp_path / "target") as target:
        assert cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target)).code == 0
        # The target drifts: one session edited there, one message lost; the source grows.
        execute(
            target,
            sessions.update().where(sessions.c.id == "never").values(title="edited on the target"),
            messages.delete().where(messages.c.id == 1),
        )
        populate(source, prefix="later-")
        before = database_digest(target)

        refused = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
        assert refused.code == 1
        assert "--force" in refused.err
        assert "sessions 'never'" in refused.err
        assert refused.out == ""
        assert database_digest(target) == before  # nothing written, not even the new rows
        with pytest.raises(CopyConflictError, match="--force"):
            copy_database(source, target)
        assert database_digest(target) == before

        forced = cli(
            "--url", url_arg(source), "db", "copy", "--to", url_arg(target), "--force", "--json"
        )
        assert forced.code == 0, forced.err
        reports = table_reports(forced)
        assert reports["sessions"]["overwritten"] == 1
        assert reports["sessions"]["copied"] == 11
        assert reports["messages"]["copied"] == 1 + 24
        assert reports["messages"]["overwritten"] == 0
        assert copied_rows(target) == copied_rows(source)


# -- refusals ----------------------------------------------------------------------------------


def test_a_server_target_behind_head_that_holds_tables_is_refused(
    source: URL, cli: Callable[..., CliResult]
) -> None:
    """Migrating a server database that holds rows is for `db upgrade`, run on purpose."""
    with throwaway_database("postgresql") as target:
        schema.upgrade(target, PREVIOUS)
        before = database_digest(target)
        result = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
        assert result.code == 1
        assert f"run `hermes-state db upgrade --url {url_arg(target)}` and try again" in result.err
        assert result.out == ""
        assert schema.revision_of(target) == PREVIOUS
        assert database_digest(target) == before


def test_a_server_target_without_tables_is_created_at_head_by_the_copy(
    source: URL, cli: Callable[..., CliResult]
) -> None:
    with throwaway_database("postgresql") as target:
        result = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
        assert result.code == 0, result.err
        assert schema.revision_of(target) == schema.HEAD_REVISION
        assert copied_rows(target) == copied_rows(source)


def test_same_source_and_target_is_bad_input(source: URL, cli: Callable[..., CliResult]) -> None:
    path = source.database
    assert path is not None
    before = database_digest(source)
    for spelling in (path, f"sqlite:///{path}", url_arg(source)):
        result = cli("--url", path, "db", "copy", "--to", spelling)
        assert result.code == 2, (spelling, result.err)
        assert "both the source and the target" in result.err
    assert database_digest(source) == before


def test_same_server_database_under_two_drivers_is_bad_input(cli: Callable[..., CliResult]) -> None:
    # Refused before connecting, so no server is needed; the password is never printed.
    result = cli(
        "--url",
        "postgresql://ops:s3cret@db.invalid/hermes",
        "db",
        "copy",
        "--to",
        "postgresql+psycopg://ops:s3cret@db.invalid/hermes",
    )
    assert result.code == 2
    assert "both the source and the target" in result.err
    assert "s3cret" not in result.err


def test_missing_to_is_bad_input(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERMES_STATE_COPY_TO", raising=False)
    result = cli("--url", url_arg(source), "db", "copy")
    assert result.code == 2
    assert "--to" in result.err

    # Its environment twin is a way to give it.
    elsewhere = tmp_path / "elsewhere" / "state.db"
    monkeypatch.setenv("HERMES_STATE_COPY_TO", str(elsewhere))
    given = cli("--url", url_arg(source), "db", "copy")
    assert given.code == 0, given.err
    assert copied_rows(sqlite_url(elsewhere.parent)) == copied_rows(source)


@pytest.mark.parametrize("size", ["0", "-5", "many"])
def test_bad_batch_size_is_bad_input(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult], size: str
) -> None:
    target = tmp_path / "target.db"
    result = cli("--url", url_arg(source), "db", "copy", "--to", str(target), "--batch-size", size)
    assert result.code == 2
    assert not target.exists()


def test_a_missing_source_is_refused_and_not_created(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    missing = tmp_path / "nowhere" / "state.db"
    result = cli("--url", str(missing), "db", "copy", "--to", str(tmp_path / "target.db"))
    assert result.code == 1
    assert "db upgrade" in result.err
    assert not missing.parent.exists()
    assert not (tmp_path / "target.db").exists()


# -- pre-flight: rows the target cannot take ----------------------------------------------------


def hand_made_legacy(folder: Path) -> URL:
    """A hand-made legacy ``sessions`` table whose ``source`` has NULLs, adopted in place."""
    folder.mkdir(parents=True)
    path = folder / "state.db"
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, "
            "ended_at REAL)"
        )
        connection.executemany(
            "INSERT INTO sessions VALUES (?, ?, ?, ?)",
            [
                ("a", "cli", T0, None),
                ("b", None, T0 + 1, T0 + 2),
                ("c", None, T0 + 3, None),
                ("d", "telegram", T0 + 4, None),
            ],
        )
    connection.close()
    url = sqlite_url(folder)
    schema.upgrade(url)
    return url


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_hand_made_legacy_file_is_checked_refused_then_filled(
    tmp_path: Path, cli: Callable[..., CliResult], backend: str
) -> None:
    source = hand_made_legacy(tmp_path / "legacy")
    checked = cli("--url", url_arg(source), "db", "check")
    assert checked.code == 0, checked.out
    assert "adopted" in checked.out
    assert "sessions.source" in checked.out
    checked_json = cli("--url", url_arg(source), "db", "check", "--json").json()
    assert checked_json["in_sync"] is True
    assert any("sessions.source" in entry["detail"] for entry in checked_json["adopted"])

    with database_at_head(backend, tmp_path / "target") as target:
        before = database_digest(target)
        refused = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
        assert refused.code == 1
        assert refused.out == ""
        (line,) = refused.err.strip().splitlines()
        assert "sessions.source: 2 row(s) are NULL" in line
        assert "--fill sessions.source=VALUE" in line
        assert "nothing was copied" in line
        assert database_digest(target) == before  # not even a table or column was added
        with pytest.raises(CopyRefusedError):
            copy_database(source, target)
        assert database_digest(target) == before
        # A new SQLite file as the target: refused the same way, and not left behind.
        new_file = tmp_path / "new" / "state.db"
        assert cli("--url", url_arg(source), "db", "copy", "--to", str(new_file)).code == 1
        assert list(new_file.parent.iterdir()) == []

        filled = cli(
            "--url",
            url_arg(source),
            "db",
            "copy",
            "--to",
            url_arg(target),
            "--fill",
            "sessions.source=unknown",
            "--json",
        )
        assert filled.code == 0, filled.err
        assert table_reports(filled)["sessions"]["copied"] == 4
        sources = {row["id"]: row["source"] for row in table_rows(target, "sessions")}
        assert sources == {"a": "cli", "b": "unknown", "c": "unknown", "d": "telegram"}
        # Re-run with the same fill: identical rows, nothing more.
        again = copy_database(source, target, fills=[Fill.parse("sessions.source=unknown")])
        assert again.copied == 0
        assert again.tables[0].identical == 4


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_too_long_and_mistyped_values_are_refused_up_front(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult], backend: str
) -> None:
    engine = _engine(source)
    try:
        with engine.begin() as connection:
            connection.execute(
                sessions.update().where(sessions.c.id == "never").values(user_id="u" * 300)
            )
            # SQLite keeps a text that does not look like a number in an INTEGER column.
            connection.exec_driver_sql(
                "UPDATE sessions SET handoff_attempt = 'twice' WHERE id IN ('pending', 'failed')"
            )
    finally:
        engine.dispose()
    with database_at_head(backend, tmp_path / "target") as target:
        before = database_digest(target)
        refused = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
        assert refused.code == 1
        assert "sessions.user_id: 1 row(s) are longer than the target's 255 characters" in (
            refused.err
        )
        assert "sessions.handoff_attempt: 2 row(s) hold values that are not integer" in (
            refused.err
        )
        assert database_digest(target) == before


def test_fill_is_checked_as_bad_input(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "target" / "state.db"
    for fill, says in (
        ("sessions.source", "TABLE.COLUMN=VALUE"),
        ("source=cli", "TABLE.COLUMN=VALUE"),
        ("sessions.nowhere=1", "no column sessions.nowhere"),
        ("nowhere.source=1", "no column nowhere.source"),
        ("sessions.handoff_attempt=many", "not one"),
    ):
        result = cli("--url", url_arg(source), "db", "copy", "--to", str(target), "--fill", fill)
        assert result.code == 2, (fill, result.err)
        assert says in result.err, result.err
        assert not target.exists()
    # Its environment twin takes a comma-separated list.
    monkeypatch.setenv("HERMES_STATE_COPY_FILL", "sessions.nowhere=1,sessions.source=x")
    result = cli("--url", url_arg(source), "db", "copy", "--to", str(target))
    assert result.code == 2
    assert "sessions.nowhere" in result.err
    help_text = cli("db", "copy", "--help").out
    assert "HERMES_STATE_COPY_FILL" in help_text


# -- the target moving under the copy, and the final check --------------------------------------


def test_a_target_row_changed_during_the_copy_stops_it(source: URL, tmp_path: Path) -> None:
    with database_at_head("sqlite", tmp_path / "target") as target:
        copy_database(source, target)
        edited: list[str] = []

        def edit_behind_the_copy(table: str, done: int, total: int) -> None:
            if table == "sessions" and not edited:  # first batch done; a later key changes
                execute(
                    target, sessions.update().where(sessions.c.id == "retried").values(title="x")
                )
                edited.append(table)

        with pytest.raises(CopyConflictError, match="changed in the target during the copy"):
            copy_database(source, target, batch_size=2, progress=edit_behind_the_copy)
        assert edited == ["sessions"]


def test_a_target_that_loses_rows_during_the_copy_fails_verification(
    source: URL, tmp_path: Path
) -> None:
    with database_at_head("sqlite", tmp_path / "target") as target:

        def delete_behind_the_copy(table: str, done: int, total: int) -> None:
            if table == "handoff_events" and done == total:
                execute(target, handoff_events.delete().where(handoff_events.c.id <= 3))

        with pytest.raises(HermesStateError, match="copy of handoff_events did not verify"):
            copy_database(source, target, progress=delete_behind_the_copy)


def test_no_revision_has_one_name(source: URL, cli: Callable[..., CliResult]) -> None:
    with throwaway_database("postgresql") as empty:
        current = cli("--url", url_arg(empty), "db", "current")
        assert current.out.startswith(f"{schema.NO_REVISION} ")
        checked = cli("--url", url_arg(empty), "db", "check")
        assert f"database is at {schema.NO_REVISION}," in checked.out


def test_a_target_column_the_source_cannot_fill_is_refused_up_front(
    source: URL, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    execute(source, text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"))
    execute(source, text("INSERT INTO notes (id, body) VALUES (1, 'x')"))
    with database_at_head("sqlite", tmp_path / "target") as target:
        execute(
            target,
            text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, owner TEXT NOT NULL)"),
        )
        before = database_digest(target)
        refused = cli("--url", url_arg(source), "db", "copy", "--to", url_arg(target))
        assert refused.code == 1
        assert "notes.owner: the target requires a value" in refused.err
        assert database_digest(target) == before
