"""What hermes-state does to an SQLite file it writes, beyond its rows: the rules upstream
hermes' own store keeps for ``state.db``.

* The journal mode is the file's owner's: WAL for a file hermes-state creates (absent, empty
  or without a table) or when asked for, and an existing file in a rollback-journal mode stays
  in it, through stores and CLI commands alike.
* A file hermes-state writes is its owner's only (0600): created so whatever the umask, and an
  existing one (with its -wal and -shm) tightened by ``chmod`` when a writable store opens it.
  What only reads never changes a permission.
* A writable store checkpoints the WAL (passive) when it closes, and every writable connection
  bounds what a journal keeps (``journal_size_limit``).
* Nothing leaves an empty -wal or -shm beside the database once it is done with it.

The journal mode is read from the file header (bytes 18 and 19: 1 for a rollback journal, 2
for WAL) wherever opening the file would itself create or remove the -wal and -shm files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import InvalidInputError, NativeAsyncSessionDB, SessionDB, resolve_url
from hermes_state.engine import (
    DB_FILE_MODE,
    JOURNAL_SIZE_LIMIT,
    READ_ONLY,
    make_engine,
    secure_sqlite_files,
)
from tests.support.processes import in_process
from tests.support.stores import make_pending
from tests.support.vintages import REAL_SCHEMA30

SIDE_FILES = ("-wal", "-shm")
ROLLBACK_MODES = ("delete", "truncate", "persist")
MIB = 1024 * 1024


def header_journal(path: Path) -> str:
    """``wal`` or ``rollback``, from the file header alone: nothing is opened through SQLite."""
    with path.open("rb") as handle:
        header = handle.read(20)
    assert header[:16] == b"SQLite format 3\x00"
    return "wal" if (header[18], header[19]) == (2, 2) else "rollback"


def side_files(path: Path) -> list[str]:
    """The -wal and -shm files beside ``path`` (whatever they are)."""
    return [suffix for suffix in SIDE_FILES if os.path.lexists(f"{path}{suffix}")]


def mode_of(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def handoff_state(db: SessionDB, session_id: str) -> str:
    state = db.get_handoff_state(session_id)
    assert state is not None, session_id
    return str(state["state"])


def with_side_files(path: Path) -> list[str]:
    return [str(path), *(f"{path}{suffix}" for suffix in SIDE_FILES)]


def pragma(connection: Any, name: str) -> Any:
    return connection.execute(f"PRAGMA {name}").fetchone()[0]


def switch_journal(path: Path, mode: str) -> None:
    """What an owner does who wants no WAL: set another journal mode on the file, and close."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert pragma(connection, f"journal_mode = {mode}") == mode
    assert header_journal(path) == "rollback"


def store_at_head(path: Path, *, journal: str | None = None) -> Path:
    """A file hermes-state made, one pending handoff in it; in ``journal`` mode if given."""
    with SessionDB(path) as db:
        make_pending(db, "s1")
    if journal is not None:
        switch_journal(path, journal)
    return path


def upstream_copy(path: Path, *, journal: str | None = None, mode: int = 0o644) -> Path:
    """A copy of the real upstream schema-30 file (WAL, like upstream leaves it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REAL_SCHEMA30, path)
    path.chmod(mode)
    assert header_journal(path) == "wal"
    if journal is not None:
        switch_journal(path, journal)
    return path


def hermes(path: Path, *argv: str) -> str:
    """``hermes-state --url PATH ARGV...`` through ``main()``; its output, once it succeeded."""
    done = in_process("--url", str(path), *argv)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


@contextlib.contextmanager
def holder(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection that keeps the database open (as a gateway does), idle: no store that
    closes meanwhile is the last one, so SQLite's own close-time checkpoint never runs."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        assert pragma(connection, "journal_mode") == "wal"
        connection.execute("SELECT count(*) FROM sessions").fetchone()
        yield connection
    finally:
        connection.close()


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


# -- the journal mode is the file's owner's --------------------------------------------------


@pytest.mark.parametrize("journal", ROLLBACK_MODES)
def test_a_rollback_journal_file_keeps_it_through_a_store(tmp_path: Path, journal: str) -> None:
    path = store_at_head(tmp_path / "state.db", journal=journal)

    with SessionDB(path) as db:
        db.create_session("s2", "cli")
        db.append_message("s2", "user", "hello")
        assert db.claim_handoff("s1") is True
        assert pragma(db._conn, "journal_mode") == "delete"  # a new connection's rollback mode
        assert pragma(db._conn, "synchronous") == 2  # FULL: NORMAL is not safe without WAL
        written = db._execute_write(lambda conn: conn.execute("PRAGMA journal_mode").scalar())
        assert written == "delete"
        assert side_files(path) == []
    assert header_journal(path) == "rollback"
    assert side_files(path) == []

    with SessionDB(path, read_only=True) as reader:
        assert [m["content"] for m in reader.get_messages("s2")] == ["hello"]
        assert handoff_state(reader, "s1") == "running"
    assert header_journal(path) == "rollback"


def test_a_delete_mode_file_keeps_it_through_cli_commands(tmp_path: Path) -> None:
    path = upstream_copy(tmp_path / "a.db", journal="delete")

    assert "upgraded" in hermes(path, "db", "upgrade")
    assert header_journal(path) == "rollback"
    hermes(path, "session", "create", "s-cli")
    hermes(path, "handoff", "request", "s-cli", "telegram")
    for argv in (("handoff", "list"), ("session", "list"), ("db", "current"), ("db", "check")):
        hermes(path, *argv)
        assert header_journal(path) == "rollback", argv
        assert side_files(path) == [], argv
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert pragma(connection, "journal_mode") == "delete"


def test_a_delete_mode_file_keeps_it_through_in_process_commands(cli: Any, tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db", journal="delete")
    for argv in (
        ("session", "create", "s2"),
        ("handoff", "request", "s2", "discord"),
        ("handoff", "fail", "s2", "no such platform"),
        ("handoff", "list"),
        ("db", "upgrade"),
        ("db", "check"),
    ):
        assert cli("--url", str(path), *argv).code == 0, argv
        assert header_journal(path) == "rollback", argv
        assert side_files(path) == [], argv


@pytest.mark.parametrize("kind", ["absent", "zero bytes", "no tables"])
def test_a_file_hermes_state_creates_is_wal(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state.db"
    if kind == "zero bytes":
        path.touch()
    elif kind == "no tables":
        with contextlib.closing(sqlite3.connect(path)) as connection:
            connection.execute("PRAGMA user_version = 7")  # a page, in rollback mode, no table
        assert header_journal(path) == "rollback"

    with SessionDB(path) as db:
        db.create_session("s", "cli")
        assert pragma(db._conn, "journal_mode") == "wal"
        assert pragma(db._conn, "synchronous") == 1  # NORMAL
    assert header_journal(path) == "wal"
    assert side_files(path) == []


def test_an_existing_wal_file_stays_wal(tmp_path: Path) -> None:
    path = upstream_copy(tmp_path / "state.db")
    hermes(path, "db", "upgrade")
    with SessionDB(path) as db:
        assert pragma(db._conn, "journal_mode") == "wal"
    assert header_journal(path) == "wal"


def test_wal_is_switched_on_when_asked(tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db", journal="delete")
    url = resolve_url(path)

    kept = make_engine(url)
    try:
        with kept.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    finally:
        kept.dispose()
    assert header_journal(path) == "rollback"

    asked = make_engine(url, journal_mode="wal")
    try:
        with asked.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    finally:
        asked.dispose()
    assert header_journal(path) == "wal"

    with pytest.raises(InvalidInputError, match="journal_mode"):
        make_engine(url, journal_mode="memory")
    with pytest.raises(InvalidInputError, match="read-only"):
        make_engine(url, read_only=True, journal_mode="wal")


# -- permissions -------------------------------------------------------------------------------


@pytest.mark.usefixtures("umask_022")
def test_a_created_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "new" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        assert side_files(path) == list(SIDE_FILES)  # the store holds them open
        for name in with_side_files(path):
            assert mode_of(name) == DB_FILE_MODE, name
    assert mode_of(path) == DB_FILE_MODE

    by_cli = tmp_path / "cli" / "state.db"
    hermes(by_cli, "db", "upgrade")
    assert mode_of(by_cli) == DB_FILE_MODE


@pytest.mark.usefixtures("umask_022")
@pytest.mark.asyncio
async def test_a_file_the_native_store_creates_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with NativeAsyncSessionDB(path) as db:
        await db.create_session("s", "cli")
        assert mode_of(path) == DB_FILE_MODE
    assert mode_of(path) == DB_FILE_MODE
    assert side_files(path) == []


def test_a_writable_open_tightens_the_file_and_its_side_files(tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db")
    path.chmod(0o644)
    assert mode_of(path) == 0o644

    with SessionDB(path):  # opened, nothing written yet
        assert mode_of(path) == DB_FILE_MODE

    path.chmod(0o644)
    # Another program keeps the database open: its -wal and -shm are there, readable by all.
    with holder(path):
        for suffix in SIDE_FILES:
            os.chmod(f"{path}{suffix}", 0o644)
        with SessionDB(path) as db:
            db.create_session("s2", "cli")
            for name in with_side_files(path):
                assert mode_of(name) == DB_FILE_MODE, name
    assert mode_of(path) == DB_FILE_MODE


def test_the_cli_tightens_what_it_writes(tmp_path: Path) -> None:
    path = upstream_copy(tmp_path / "a.db")
    hermes(path, "db", "upgrade")
    assert mode_of(path) == DB_FILE_MODE


def test_what_only_reads_changes_no_permission(cli: Any, tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db")
    path.chmod(0o644)

    with SessionDB(path, read_only=True) as reader:
        assert handoff_state(reader, "s1") == "pending"
        assert mode_of(path) == 0o644
    for argv in (("handoff", "list"), ("session", "list"), ("db", "current"), ("db", "check")):
        assert cli("--url", str(path), *argv).code == 0, argv
        assert mode_of(path) == 0o644, argv
    hermes(path, "handoff", "list")
    assert mode_of(path) == 0o644

    engine = make_engine(resolve_url(path), read_only=True)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT count(*) FROM sessions").scalar() == 1
    finally:
        engine.dispose()
    assert mode_of(path) == 0o644


def test_symlinks_and_other_files_keep_their_modes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.touch()
    elsewhere.chmod(0o644)
    Path(f"{path}-wal").symlink_to(elsewhere)
    Path(f"{path}-shm").mkdir(mode=0o755)

    secure_sqlite_files(resolve_url(path))

    assert mode_of(path) == DB_FILE_MODE
    assert mode_of(elsewhere) == 0o644  # a symlink is never followed
    assert mode_of(f"{path}-shm") == 0o755  # nor anything that is not a regular file


# -- checkpoint on close, journal size --------------------------------------------------------


#: Sessions written by a store that closes while another connection holds the file: enough to
#: grow the main file once checkpointed, too few frames for SQLite's own automatic checkpoint
#: (at 1000 pages of WAL) to run first.
BULK = 40


def _fill(db: SessionDB, count: int = BULK) -> None:
    for number in range(count):
        db.create_session(f"bulk-{number:04d}", "cli", title="t" * 2000 + str(number))


def test_closing_a_store_checkpoints_the_wal(tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db")
    before = path.stat().st_size
    with holder(path) as other:
        with SessionDB(path) as db:
            _fill(db)
            assert path.stat().st_size == before  # committed to the WAL only, so far
        # The store was not the last connection, so SQLite did not checkpoint at close: the
        # store did. Its pages are in the main file; the WAL holds nothing it lacks.
        page_size = pragma(other, "page_size")
        assert path.stat().st_size == pragma(other, "page_count") * page_size > before
        busy, logged, copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, logged) == (0, copied)
    assert side_files(path) == []
    with SessionDB(path, read_only=True) as reader:
        assert reader.get_session(f"bulk-{BULK - 1:04d}") is not None


@pytest.mark.asyncio
async def test_closing_a_native_store_checkpoints_the_wal(tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db")
    before = path.stat().st_size
    with holder(path) as other:
        async with NativeAsyncSessionDB(path) as db:
            for number in range(BULK):
                await db.create_session(f"bulk-{number:04d}", "cli", title="t" * 2000 + str(number))
            assert path.stat().st_size == before
        assert path.stat().st_size == pragma(other, "page_count") * pragma(other, "page_size")
        assert path.stat().st_size > before
    assert side_files(path) == []


def test_closing_a_rollback_journal_store_makes_no_wal(tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db", journal="delete")
    with SessionDB(path) as db:
        _fill(db, 5)
    assert side_files(path) == []
    assert header_journal(path) == "rollback"


def test_writable_connections_bound_the_journal(tmp_path: Path) -> None:
    assert JOURNAL_SIZE_LIMIT == 64 * MIB  # upstream hermes' value
    path = store_at_head(tmp_path / "state.db")
    with SessionDB(path) as db:
        assert pragma(db._conn, "journal_size_limit") == JOURNAL_SIZE_LIMIT
        limit = db._execute_write(lambda conn: conn.execute("PRAGMA journal_size_limit").scalar())
        assert limit == JOURNAL_SIZE_LIMIT

    engine = make_engine(resolve_url(path))
    try:
        with engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            limit = connection.exec_driver_sql("PRAGMA journal_size_limit").scalar()
            assert limit == JOURNAL_SIZE_LIMIT
    finally:
        engine.dispose()

    reader = make_engine(resolve_url(path), read_only=True)
    try:
        with reader.connect() as connection:  # changes nothing, not even a connection setting
            assert connection.exec_driver_sql("PRAGMA journal_size_limit").scalar() == -1
    finally:
        reader.dispose()


# -- no -wal or -shm left behind ----------------------------------------------------------------


def test_no_side_files_after_a_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        make_pending(db, "s1")
        assert side_files(path) == list(SIDE_FILES)
    assert side_files(path) == []

    with SessionDB(path, read_only=True) as reader:
        assert reader.has_pending_handoffs()
    assert side_files(path) == []

    opened_only = SessionDB(path)
    opened_only.close()
    assert side_files(path) == []


@pytest.mark.asyncio
async def test_no_side_files_after_a_native_store_closes(tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db")
    async with NativeAsyncSessionDB(path) as db:
        await db.create_session("s2", "cli")
    assert side_files(path) == []


@pytest.mark.parametrize(
    "argv",
    [("db", "upgrade"), ("handoff", "list"), ("session", "list")],
    ids=" ".join,
)
def test_no_side_files_after_a_command(tmp_path: Path, argv: tuple[str, ...]) -> None:
    path = upstream_copy(tmp_path / "a.db")
    if argv != ("db", "upgrade"):
        hermes(path, "db", "upgrade")
    assert side_files(path) == []
    hermes(path, *argv)
    assert side_files(path) == [], argv
    assert header_journal(path) == "wal"


READ_COMMANDS = [
    ("handoff", "list"),
    ("handoff", "show", "s1"),
    ("handoff", "stats"),
    ("session", "list"),
    ("db", "current"),
    ("db", "check"),
    ("db", "history"),
    ("db", "upgrade", "--dry-run"),
]


def test_no_side_files_after_any_read_command(cli: Callable[..., Any], tmp_path: Path) -> None:
    path = store_at_head(tmp_path / "state.db")
    for argv in READ_COMMANDS:
        assert cli("--url", str(path), *argv).code == 0, argv
        assert side_files(path) == [], argv
    assert header_journal(path) == "wal"


def test_a_read_while_a_writer_holds_the_file_leaves_its_side_files(tmp_path: Path) -> None:
    """Not last, a reader leaves the -wal and -shm to the connection that still uses them."""
    path = store_at_head(tmp_path / "state.db")
    with SessionDB(path) as writer:
        writer.create_session("s2", "cli")
        with SessionDB(path, read_only=True) as reader:
            assert handoff_state(reader, "s1") == "pending"
        assert side_files(path) == list(SIDE_FILES)
        writer.create_session("s3", "cli")
    assert side_files(path) == []
