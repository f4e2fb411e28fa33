"""Only our files are written: what hermes-state does with SQLite files that are not its own,
with damaged ones, and what the commands that only read leave behind.

A file is ours when it is new (absent, zero bytes, no tables) or a hermes state database (our
version table, or a ``sessions`` table of any upstream vintage). Anything else is refused
before a single byte changes; the checks compare SHA-256 digests of the file. A damaged file
is built on purpose: a valid file header, and the header of one b-tree page overwritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_state import (
    DatabaseCorruptError,
    DatabaseUnavailableError,
    ForeignDatabaseError,
    HermesStateError,
    NativeAsyncSessionDB,
    ReadOnlyDatabaseError,
    SessionDB,
    drift,
    schema,
)
from hermes_state.engine import resolve_url
from tests.support.legacy import build_legacy_db
from tests.support.processes import run_cli
from tests.support.stores import make_pending
from tests.support.vintages import REAL_SCHEMA11

FIXTURE = REAL_SCHEMA11
HEAD = schema.HEAD_REVISION


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def foreign_file(path: Path, *, wal: bool = False) -> Path:
    """Another application's database: a todo list, in rollback-journal mode unless ``wal``."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        if wal:
            connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("CREATE TABLE todo (id INTEGER PRIMARY KEY, what TEXT NOT NULL)")
        connection.executemany(
            "INSERT INTO todo (what) VALUES (?)", [(f"task {n}",) for n in range(50)]
        )
        connection.commit()
    return path


def web_sessions_file(path: Path) -> Path:
    """A web framework's session store: a ``sessions`` table, but not hermes' one."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, data BLOB, expiry REAL)")
        connection.execute("INSERT INTO sessions VALUES ('abc', x'00', 1.5)")
        connection.commit()
    return path


def upstream_copy(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "state.db"
    shutil.copyfile(FIXTURE, target)
    target.chmod(0o644)
    return target


def damage_table(path: Path, table: str) -> None:
    """Overwrite the header and cell pointers of the right-most leaf page of ``table``'s
    b-tree: the file header stays valid, reading that page fails."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        # Every page in the main file, none left in the WAL (where it would shadow the damage).
        busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        page = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()[0]
    data = bytearray(path.read_bytes())

    def start(number: int) -> int:
        return (number - 1) * page_size + (100 if number == 1 else 0)

    while data[start(page)] == 0x05:  # an interior table page: follow its right-most child
        page = int.from_bytes(data[start(page) + 8 : start(page) + 12], "big")
    assert data[start(page)] == 0x0D, "expected a table leaf page"
    assert int.from_bytes(data[start(page) + 3 : start(page) + 5], "big") > 0
    # An impossible page type: SQLite refuses the page whenever it reads it. (Garbage cell
    # pointers alone are not always noticed: SQLite masks them into the page.)
    data[start(page) : start(page) + 208] = b"\xff" * 208
    path.write_bytes(bytes(data))


def hermes_file_at_head(path: Path, sessions: int = 1500) -> Path:
    """A file made by hermes-state, many sessions pending (so the table spans many pages)."""
    with SessionDB(path) as db:
        make_pending(db, *(f"session-{number:05d}-" + "x" * 40 for number in range(sessions)))
    return path


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# -- another application's file -------------------------------------------------------------

FOREIGN_COMMANDS = [
    ["handoff", "list"],
    ["handoff", "show", "s1"],
    ["handoff", "stats"],
    ["handoff", "history", "s1"],
    ["handoff", "reclaim", "--dry-run"],
    ["handoff", "request", "s1", "telegram"],
    ["session", "create", "s1"],
    ["db", "current"],
    ["db", "check"],
    ["db", "history"],
    ["db", "upgrade"],
    ["db", "downgrade", "base"],
    ["db", "downgrade", "base", "--dry-run"],
]


@pytest.mark.parametrize("argv", FOREIGN_COMMANDS, ids=" ".join)
def test_cli_refuses_another_applications_file_untouched(
    cli: Any, tmp_path: Path, argv: list[str]
) -> None:
    path = foreign_file(tmp_path / "todo.db")
    digest = sha256(path)

    result = cli("--url", str(path), *argv)

    assert result.code == 2, result
    line = one_line(result.err)
    assert str(path) in line
    assert f"db upgrade --url {path} --adopt-foreign" in line  # the CLI adds how to fix it
    assert sha256(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["todo.db"], "side files were created"


@pytest.mark.parametrize(
    "build", [foreign_file, web_sessions_file, lambda p: foreign_file(p, wal=True)]
)
def test_library_refuses_another_applications_file_untouched(
    tmp_path: Path, build: Callable[[Path], Path]
) -> None:
    path = build(tmp_path / "app.db")
    digest = sha256(path)

    with pytest.raises(ForeignDatabaseError) as raised:
        SessionDB(path)
    assert "another application's SQLite database" in str(raised.value)
    # The library says what is wrong; only the command line speaks of its own options.
    assert "--" not in str(raised.value)
    assert "hermes-state " not in str(raised.value)
    with pytest.raises(ForeignDatabaseError):
        schema.upgrade(resolve_url(path))

    async def use_native() -> None:
        async with NativeAsyncSessionDB(path) as native:
            await native.has_pending_handoffs()

    with pytest.raises(ForeignDatabaseError):
        asyncio.run(use_native())
    assert sha256(path) == digest


def test_real_cli_refuses_another_applications_file(tmp_path: Path) -> None:
    path = foreign_file(tmp_path / "todo.db")
    digest = sha256(path)
    for argv in (["handoff", "list"], ["session", "create", "s1"]):
        done = run_cli(path, *argv)
        assert done.returncode == 2, done
        assert "Traceback" not in done.stderr
        assert "--adopt-foreign" in one_line(done.stderr)
    assert sha256(path) == digest


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_adopt_foreign_adds_our_tables_and_keeps_the_application_rows(
    cli: Any, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = foreign_file(tmp_path / "todo.db")
    if how == "flag":
        result = cli("--url", str(path), "db", "upgrade", "--adopt-foreign")
    else:
        monkeypatch.setenv("HERMES_STATE_ADOPT_FOREIGN", "1")
        result = cli("--url", str(path), "db", "upgrade")
    assert result.code == 0, result.err
    assert schema.revision_of(resolve_url(path)) == HEAD

    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        assert db.request_handoff("s1", "telegram")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("SELECT count(*) FROM todo").fetchone() == (50,)

    # Down again: ours goes (with confirmation: it holds a session), theirs stays.
    assert cli("--url", str(path), "db", "downgrade", "base", "--yes").code == 0
    with contextlib.closing(sqlite3.connect(path)) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        assert connection.execute("SELECT count(*) FROM todo").fetchone() == (50,)
    assert tables - {"sqlite_sequence"} == {"todo"}  # SQLite keeps that one for good


# -- files that are ours: new ones, and hermes files of any vintage ---------------------------


@pytest.mark.parametrize("kind", ["absent", "zero bytes", "no tables"])
def test_new_files_are_created_and_migrated(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state.db"
    if kind == "zero bytes":
        path.write_bytes(b"")
    elif kind == "no tables":
        with contextlib.closing(sqlite3.connect(path)) as connection:
            connection.execute("PRAGMA user_version = 3")
        assert path.stat().st_size > 0
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    assert schema.revision_of(resolve_url(path)) == HEAD


def test_hermes_files_of_every_vintage_are_adopted(tmp_path: Path) -> None:
    upstream = upstream_copy(tmp_path / "upstream")
    legacy = build_legacy_db(tmp_path / "legacy" / "state.db", with_handoff=False, sessions=5).path
    minimal = tmp_path / "minimal.db"
    with contextlib.closing(sqlite3.connect(minimal)) as connection:
        connection.execute(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, "
            "ended_at REAL)"
        )
        connection.commit()
    for path in (upstream, legacy, minimal):
        assert schema.look_at_sqlite_file(resolve_url(path)).kind is schema.FileKind.HERMES
        with SessionDB(path) as db:
            db.create_session("new-one", "cli")
        assert schema.revision_of(resolve_url(path)) == HEAD


# -- commands that only read ----------------------------------------------------------------

READ_COMMANDS = [
    ["handoff", "list"],
    ["handoff", "show", "s1"],
    ["handoff", "stats"],
    ["handoff", "history", "s1"],
    ["handoff", "reclaim", "--dry-run"],
]


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=" ".join)
def test_reads_on_a_file_not_at_head_show_it_and_change_nothing(
    cli: Any, tmp_path: Path, argv: list[str]
) -> None:
    """An upstream file not adopted yet, and one of ours at an older revision, are read as
    they are (through the lens): nothing migrated, not a byte written."""
    upstream = upstream_copy(tmp_path / "upstream")
    downgraded = tmp_path / "downgraded" / "state.db"
    with SessionDB(downgraded) as db:
        make_pending(db, "s1")
    downgrade = ("db", "downgrade", "0002_handoff_leases", "--yes")
    assert cli("--url", str(downgraded), *downgrade).code == 0

    for path, revision in ((upstream, None), (downgraded, "0002_handoff_leases")):
        digest = sha256(path)
        result = cli("--url", str(path), *argv)
        about_s1 = argv[1] in ("show", "history")
        if about_s1 and revision is None:  # upstream's file has no session s1
            assert result.code == 1, result
            assert one_line(result.err) == "hermes-state: no session 's1'"
        else:
            assert result.code == 0, result
            assert "s1" in result.out or not about_s1
        assert sha256(path) == digest, "a read command wrote to the file"
        assert sorted(p.name for p in path.parent.iterdir()) == ["state.db"]
        assert schema.revision_of(resolve_url(path)) == revision


def test_db_reads_on_a_file_not_at_head_change_nothing(cli: Any, tmp_path: Path) -> None:
    path = upstream_copy(tmp_path / "upstream")
    digest = sha256(path)

    current = cli("--url", str(path), "db", "current", "--json")
    assert current.code == 0
    assert current.json()["revision"] is None
    assert current.json()["adopted"] is False
    assert current.json()["upstream_schema"] == 11
    plain = cli("--url", str(path), "db", "current")
    assert plain.code == 0
    assert plain.out.startswith("not adopted (upstream schema 11)")
    assert f"hermes-state db upgrade --url {path}" in one_line(plain.err)
    checked = cli("--url", str(path), "db", "check")
    assert checked.code == 1
    assert "db upgrade" in checked.out
    assert cli("--url", str(path), "db", "history").code == 0
    dry = cli("--url", str(path), "db", "downgrade", "base", "--dry-run")
    assert dry.code == 0
    assert sha256(path) == digest
    assert schema.revision_of(resolve_url(path)) is None


def test_reads_at_head_work_without_writing(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        make_pending(db, "s1")
    digest = sha256(path)
    for argv in READ_COMMANDS:
        assert cli("--url", str(path), *argv).code == 0, argv
    listed = cli("--url", str(path), "handoff", "list", "--json")
    assert [row["id"] for row in listed.json()] == ["s1"]
    assert sha256(path) == digest


def test_a_read_only_store_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        make_pending(db, "s1")
    digest = sha256(path)
    with SessionDB(path, read_only=True) as reader:
        assert reader.has_pending_handoffs()
        assert reader.get_handoff_state("s1") == {
            "state": "pending",
            "platform": "telegram",
            "error": None,
        }
        with pytest.raises(ReadOnlyDatabaseError):
            reader.claim_handoff("s1")
        with pytest.raises(ReadOnlyDatabaseError):
            reader._execute_write(lambda conn: conn.execute("DELETE FROM sessions"))
    assert sha256(path) == digest

    missing = tmp_path / "nowhere" / "state.db"
    with pytest.raises(DatabaseUnavailableError):
        SessionDB(missing, read_only=True)
    assert not missing.parent.exists()

    behind = upstream_copy(tmp_path / "upstream")
    digest = sha256(behind)
    with SessionDB(behind, read_only=True) as reader:  # read through the lens, as it is
        assert reader.list_sessions()
        with pytest.raises(ReadOnlyDatabaseError):
            reader.create_session("s9", "cli")
    assert sha256(behind) == digest
    assert schema.revision_of(resolve_url(behind)) is None


# -- damaged files ------------------------------------------------------------------------------


def test_upgrade_refuses_a_damaged_file_untouched(cli: Any, tmp_path: Path) -> None:
    path = build_legacy_db(tmp_path / "legacy" / "state.db", with_handoff=True).path
    damage_table(path, "sessions")
    digest = sha256(path)

    result = cli("--url", str(path), "db", "upgrade")

    assert result.code == 2, result
    line = one_line(result.err)
    assert str(path) in line
    assert "quick_check" in line or "malformed" in line
    assert '".recover"' in line
    assert sha256(path) == digest
    with pytest.raises(DatabaseCorruptError):
        SessionDB(path)
    assert sha256(path) == digest
    assert schema.damage_of(resolve_url(path)) is not None


def test_a_damaged_file_at_head_raises_the_corruption_error(cli: Any, tmp_path: Path) -> None:
    path = hermes_file_at_head(tmp_path / "state.db")
    damage_table(path, "sessions")
    digest = sha256(path)

    checked = cli("--url", str(path), "db", "check", "--json")
    assert checked.code == 2
    assert [entry["kind"] for entry in checked.json()["differences"]] == [drift.DAMAGE]
    assert ".recover" in checked.json()["differences"][0]["detail"]

    listed = cli("--url", str(path), "handoff", "list", "--limit", "0")
    assert listed.code == 2
    assert "damaged" in one_line(listed.err)

    downgraded = cli("--url", str(path), "db", "downgrade", "base", "--yes")
    assert downgraded.code == 2

    with SessionDB(path) as db, pytest.raises(DatabaseCorruptError) as raised:
        db.list_handoffs(limit=None)
    assert isinstance(raised.value, HermesStateError)
    assert sha256(path) == digest
