"""Database errors are classified by the driver's code first, and the code stays on the error.

Real errors on the real backends: a read-only SQLite file, a full one, a damaged one, one that
is not a database, a lock held by another connection; unknown databases, refused connections,
refused logins, a PostgreSQL deadlock, a read-only PostgreSQL database and a MariaDB lock wait
timeout. Each is checked for the package's class and for the ``backend`` and ``code`` kept on
it. Then errors whose message says one thing and whose code another: the code wins. Errors
that carry no code (the driver's own, such as libpq's connection failures) are still judged
by their message.
"""

from __future__ import annotations

import contextlib
import shlex
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg.errors
import pymysql.err
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hermes_state import (
    DatabaseBusyError,
    DatabaseCorruptError,
    DatabaseError,
    DatabaseUnavailableError,
    DiskFullError,
    NativeAsyncSessionDB,
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SessionDB,
)
from hermes_state.errors import is_retryable, translate
from tests.backends.test_faults import ConnectionHook, page_count, unshare_works
from tests.backends.test_file_ownership import damage_table, hermes_file_at_head
from tests.conftest import empty_tables, migrated_database, require_server
from tests.support.digest import sync_url
from tests.support.processes import wait_until

DEADLINE = 30.0


def kept(error: BaseException) -> tuple[str | None, str | int | None]:
    assert isinstance(error, DatabaseError), repr(error)
    return error.backend, error.code


# -- SQLite -------------------------------------------------------------------------------------


def test_a_write_sqlite_refuses_as_read_only_keeps_sqlite_readonly(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db") as db:
        hook = ConnectionHook(db)  # before the store's first connection is checked out
        db.create_session("s", "cli")
        hook.run("PRAGMA query_only = ON")
        with pytest.raises(ReadOnlyDatabaseError) as refused:
            db.request_handoff("s", "telegram")
    assert kept(refused.value) == ("sqlite", "SQLITE_READONLY")
    assert "is read-only" in str(refused.value)


CHILD = """
import sys
from hermes_state import SessionDB
db = SessionDB(sys.argv[1])
try:
    db.request_handoff("s", "telegram")
except Exception as exc:
    print(type(exc).__name__, exc.backend, exc.code)
"""


def test_a_read_only_file_system_keeps_sqlite_readonly(tmp_path: Path) -> None:
    """A real read-only mount (a private mount namespace): SQLite itself refuses the write."""
    if not unshare_works():
        pytest.skip("needs unshare --mount (a private mount namespace) to mount read-only")
    folder = tmp_path / "ro"
    path = folder / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
    holder = SessionDB(path)  # keeps the -wal and -shm files, so the file opens read-only
    try:
        holder.get_handoff_state("s")
        place = shlex.quote(str(folder))
        child = shlex.join([sys.executable, "-c", CHILD, str(path)])
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", f"mount --bind -o ro {place} {place} && {child}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=DEADLINE,
        )
    finally:
        holder.close()
    assert done.stdout.split()[:2] == ["ReadOnlyDatabaseError", "sqlite"], done
    assert done.stdout.split()[2].startswith("SQLITE_READONLY"), done


def test_a_full_sqlite_file_keeps_sqlite_full(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        hook = ConnectionHook(db)
        db.create_session("s", "cli")
        hook.run(f"PRAGMA max_page_count = {page_count(path)}")
        with pytest.raises(DiskFullError) as full:
            db.append_message("s", "user", "x" * 100_000)  # needs pages the file may not grow
    assert kept(full.value) == ("sqlite", "SQLITE_FULL")


def test_a_lock_held_by_another_connection_keeps_sqlite_busy(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path, busy_patience=0.0) as db:
        db.create_session("s", "cli")
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # the write lock, held until the end
            with pytest.raises(DatabaseBusyError) as busy:
                db.request_handoff("s", "telegram")
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert db.request_handoff("s", "telegram") is True  # released: the write goes through
    assert kept(busy.value) == ("sqlite", "SQLITE_BUSY")


def test_a_damaged_file_keeps_sqlite_corrupt(tmp_path: Path) -> None:
    path = hermes_file_at_head(tmp_path / "state.db", sessions=300)
    damage_table(path, "sessions")
    with SessionDB(path) as db, pytest.raises(DatabaseCorruptError) as damaged:
        db.list_handoffs(limit=None)
    assert kept(damaged.value) == ("sqlite", "SQLITE_CORRUPT")
    assert ".recover" in str(damaged.value)


def test_a_file_that_is_not_a_database_keeps_sqlite_notadb(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"not a database, a shopping list\n" * 200)
    with pytest.raises(NotADatabaseError) as refused:
        SessionDB(path)
    assert kept(refused.value) == ("sqlite", "SQLITE_NOTADB")


def test_a_file_sqlite_cannot_open_keeps_sqlite_cantopen(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "state.db"
    with pytest.raises(sqlite3.OperationalError) as raised:
        sqlite3.connect(missing)
    error = translate(raised.value, where=str(missing))
    assert isinstance(error, DatabaseUnavailableError)
    assert kept(error) == ("sqlite", "SQLITE_CANTOPEN")


# -- servers: reaching them -------------------------------------------------------------------


def missing_database(server: URL) -> URL:
    return server.set(database=f"hs_missing_{uuid.uuid4().hex[:8]}")


# (backend, how the URL is spoiled, driver of the native store, what each store keeps)
UNREACHABLE = [
    pytest.param(
        "postgresql", missing_database, "asyncpg", (None, "3D000"), id="pg-unknown-database"
    ),
    pytest.param(
        "postgresql", lambda u: u.set(port=1), "asyncpg", (None, "ECONNREFUSED"), id="pg-refused"
    ),
    pytest.param(
        "postgresql",
        lambda u: u.set(username=f"nobody_{uuid.uuid4().hex[:6]}"),
        "asyncpg",
        (None, "28000"),
        id="pg-unknown-user",
    ),
    pytest.param("mysql", missing_database, "aiomysql", (1049, 1049), id="mysql-unknown-database"),
    pytest.param("mysql", lambda u: u.set(port=1), "aiomysql", (2003, 2003), id="mysql-refused"),
    pytest.param(
        "mysql",
        lambda u: u.set(password="certainly-not-the-password"),
        "aiomysql",
        (1045, 1045),
        id="mysql-wrong-password",
    ),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("backend", "spoil", "driver", "codes"), UNREACHABLE)
async def test_an_unreachable_server_keeps_the_drivers_code(
    backend: str, spoil: Any, driver: str, codes: tuple[Any, Any]
) -> None:
    """libpq reports connection failures without a SQLSTATE (psycopg's code is None and the
    message decides); asyncpg gives the server's SQLSTATE, or the socket's error; PyMySQL and
    aiomysql give MySQL's error number."""
    url = spoil(require_server(backend))
    with pytest.raises(DatabaseUnavailableError) as sync:
        SessionDB(url=url)
    assert kept(sync.value) == (backend, codes[0])
    assert "***" in str(sync.value) or url.password is None
    native = NativeAsyncSessionDB(url=url.set(drivername=f"{backend}+{driver}"))
    try:
        with pytest.raises(DatabaseUnavailableError) as aio:
            await native.has_pending_handoffs()
    finally:
        await native.close()
    assert kept(aio.value) == (backend, codes[1])
    assert "\n" not in str(aio.value)
    assert "Check the URL" in str(aio.value)


# -- servers: contention and refusals ----------------------------------------------------------


@pytest.fixture
def pg_url(migrated_servers: dict[str, URL]) -> URL:
    url = migrated_servers["postgresql"]
    empty_tables(url)
    return url


@pytest.fixture
def mysql_url(migrated_servers: dict[str, URL]) -> URL:
    url = migrated_servers["mysql"]
    empty_tables(url)
    return url


@contextlib.contextmanager
def connection_of(url: URL) -> Iterator[Any]:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def waiting_on_a_lock(url: URL, pid: int) -> bool:
    with connection_of(url) as admin:
        return bool(
            admin.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE pid = :pid AND wait_event_type = 'Lock'"
                ),
                {"pid": pid},
            ).scalar_one()
        )


def test_a_postgresql_deadlock_victim_keeps_40p01(pg_url: URL) -> None:
    """The store's transaction locks b then waits for a; another holds a and asks for b. The
    store is the victim (the other's deadlock_timeout is longer); with no patience left it
    gives up at once, saying which contention it gave up on."""
    with SessionDB(url=pg_url, busy_patience=0.0) as db:
        db.create_session("a", "cli")
        db.create_session("b", "cli")
        pids: list[int] = []
        outcome: dict[str, BaseException] = {}

        def both(conn: Any) -> None:
            conn.execute("SELECT id FROM sessions WHERE id = 'b' FOR UPDATE")
            pids.append(conn.execute("SELECT pg_backend_pid()").scalar_one())
            conn.execute("SELECT id FROM sessions WHERE id = 'a' FOR UPDATE")

        def write() -> None:
            try:
                db._execute_write(both)
            except BaseException as exc:
                outcome["error"] = exc

        with connection_of(pg_url) as other:
            other.execute(text("SET deadlock_timeout = '60s'"))
            other.execute(text("SELECT id FROM sessions WHERE id = 'a' FOR UPDATE"))
            worker = threading.Thread(target=write)
            worker.start()
            wait_until(lambda: bool(pids) and waiting_on_a_lock(pg_url, pids[0]), "the lock wait")
            # Closes the cycle; returns once the store's transaction was rolled back.
            other.execute(text("SELECT id FROM sessions WHERE id = 'b' FOR UPDATE"))
            other.rollback()
            worker.join(DEADLINE)
        assert not worker.is_alive()
    error = outcome.get("error")
    assert isinstance(error, DatabaseBusyError), repr(error)
    assert kept(error) == ("postgresql", "40P01")
    assert is_retryable(error.__cause__ or error)


def test_a_read_only_postgresql_database_is_unavailable_and_keeps_25006(tmp_path: Path) -> None:
    """A server that takes no writes is a standby (or set so): the database is unavailable
    for writing, with advice about servers, never a read-only file's."""
    with migrated_database("postgresql") as url:
        with connection_of(url) as admin:
            admin.execute(
                text(f"ALTER DATABASE {url.database} SET default_transaction_read_only = on")
            )
            admin.commit()
        with SessionDB(url=url) as db:
            with pytest.raises(DatabaseUnavailableError) as refused:
                db.create_session("s", "cli")
            assert db.get_session("s") is None  # reads still work
    assert not isinstance(refused.value, ReadOnlyDatabaseError)
    assert kept(refused.value) == ("postgresql", "25006")
    message = str(refused.value)
    assert "standby" in message
    assert "target_session_attrs=read-write" in message
    assert "permissions" not in message
    assert "file" not in message


def test_a_mariadb_lock_wait_timeout_keeps_1205(mysql_url: URL) -> None:
    with SessionDB(url=mysql_url, busy_patience=0.0) as db:
        db.create_session("a", "cli")

        def lock_a(conn: Any) -> None:
            conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
            conn.execute("SELECT id FROM sessions WHERE id = 'a' FOR UPDATE")

        with connection_of(mysql_url) as other:
            other.execute(text("SELECT id FROM sessions WHERE id = 'a' FOR UPDATE"))
            with pytest.raises(DatabaseBusyError) as busy:
                db._execute_write(lock_a)
            other.rollback()
    assert kept(busy.value) == ("mysql", 1205)


# -- codes win over messages --------------------------------------------------------------------


def test_an_sqlite_error_whose_message_misleads_is_classified_by_its_code(tmp_path: Path) -> None:
    """A trigger aborts with the text of a lock error: SQLite reports a constraint
    (SQLITE_CONSTRAINT_TRIGGER), so the store neither retries it nor calls it busy."""
    attempts: list[int] = []

    def insert(conn: Any) -> None:
        attempts.append(1)
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS scratch (x)")
        conn.execute(
            "CREATE TEMP TRIGGER IF NOT EXISTS refuse BEFORE INSERT ON scratch "
            "BEGIN SELECT RAISE(ABORT, 'database is locked'); END"
        )
        conn.execute("INSERT INTO scratch VALUES (1)")

    with SessionDB(tmp_path / "state.db") as db, pytest.raises(DatabaseError) as refused:
        db._execute_write(insert)
    assert type(refused.value) is DatabaseError
    assert kept(refused.value) == ("sqlite", "SQLITE_CONSTRAINT_TRIGGER")
    assert attempts == [1]  # not retried as contention
    cause = refused.value.__cause__
    assert cause is not None
    assert "database is locked" in str(cause)
    assert not is_retryable(cause)


def test_a_postgresql_error_whose_message_misleads_is_classified_by_its_sqlstate(
    pg_url: URL,
) -> None:
    """The server raises an error in SQLSTATE 22023 whose text reads like an unknown
    database: it is a plain database error, not 'cannot open'."""

    def raise_it(conn: Any) -> None:
        conn.execute(
            "DO $$ BEGIN RAISE EXCEPTION 'database \"elsewhere\" does not exist' "
            "USING ERRCODE = '22023'; END $$"
        )

    with SessionDB(url=pg_url) as db, pytest.raises(DatabaseError) as refused:
        db._execute_write(raise_it)
    assert type(refused.value) is DatabaseError
    assert kept(refused.value) == ("postgresql", "22023")
    assert str(refused.value).startswith("database error on ")


def test_a_mariadb_error_whose_message_misleads_is_classified_by_its_number(
    mysql_url: URL,
) -> None:
    """SIGNAL with MySQL's deadlock number and the text of a refused login: contention, so the
    store runs it again until its patience is gone, and says which number it gave up on."""
    attempts: list[int] = []

    def signal(conn: Any) -> None:
        attempts.append(1)
        conn.execute(
            "BEGIN NOT ATOMIC SIGNAL SQLSTATE '40001' "
            "SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Access denied for user'; END"
        )

    with (
        SessionDB(url=mysql_url, busy_patience=0.0) as db,
        pytest.raises(DatabaseBusyError) as busy,
    ):
        db._execute_write(signal)
    assert kept(busy.value) == ("mysql", 1213)
    assert attempts == [1]


@pytest.mark.parametrize(
    ("error", "cls", "retryable", "code"),
    [
        # Several messages would mislead the text rules ("does not exist", "lost connection",
        # "access denied" read as cannot-open; "No space left" is not one of their phrases).
        (
            psycopg.errors.lookup("42P01")('relation "sessions" does not exist'),
            DatabaseError,
            False,
            "42P01",
        ),
        (
            psycopg.errors.lookup("40P01")("lost connection while locked"),
            DatabaseError,
            True,
            "40P01",
        ),
        (
            psycopg.errors.lookup("57P01")("terminating connection due to administrator command"),
            DatabaseUnavailableError,
            False,
            "57P01",
        ),
        (
            psycopg.errors.lookup("53100")("could not extend file: No space left on device"),
            DiskFullError,
            False,
            "53100",
        ),
        (
            # A standby (or a database set read-only): the server, not a file, takes no writes.
            psycopg.errors.lookup("25006")("cannot execute INSERT in a read-only transaction"),
            DatabaseUnavailableError,
            False,
            "25006",
        ),
        (
            psycopg.errors.lookup("08006")("server went away"),
            DatabaseUnavailableError,
            False,
            "08006",
        ),
        (
            psycopg.errors.lookup("55P03")("could not obtain lock; access denied"),
            DatabaseError,
            True,
            "55P03",
        ),
    ],
    ids=[
        "undefined-table",
        "deadlock",
        "admin-shutdown",
        "disk-full",
        "read-only",
        "connection",
        "lock-not-available",
    ],
)
def test_psycopg_errors_are_classified_by_sqlstate(
    error: Exception, cls: type[DatabaseError], retryable: bool, code: str
) -> None:
    translated = translate(error, where="postgresql://u:***@db/x")
    assert type(translated) is cls
    assert kept(translated) == ("postgresql", code)
    assert is_retryable(error) is retryable


def mysql_packet_error(number: int, sqlstate: str, message: str) -> Exception:
    """The exception PyMySQL raises for a server's error packet (its own lookup by number)."""
    packet = b"\xff" + number.to_bytes(2, "little") + b"#" + sqlstate.encode() + message.encode()
    with pytest.raises(pymysql.err.MySQLError) as raised:
        pymysql.err.raise_mysql_exception(packet)
    return raised.value


@pytest.mark.parametrize(
    ("number", "sqlstate", "message", "cls", "retryable"),
    [
        (1146, "42S02", "Table 'x.sessions' does not exist", DatabaseError, False),
        (1213, "40001", "Deadlock found; lost connection", DatabaseError, True),
        (1205, "HY000", "Lock wait timeout exceeded; connection refused", DatabaseError, True),
        (1467, "HY000", "Failed to read auto-increment value", DatabaseError, True),
        (
            1290,
            "HY000",
            "The server is running with the --read-only option",
            DatabaseUnavailableError,
            False,
        ),
        (1114, "HY000", "The table 'sessions' is full", DiskFullError, False),
        (1049, "42000", "Unknown database 'x'", DatabaseUnavailableError, False),
    ],
)
def test_pymysql_errors_are_classified_by_number(
    number: int, sqlstate: str, message: str, cls: type[DatabaseError], retryable: bool
) -> None:
    error = mysql_packet_error(number, sqlstate, message)
    translated = translate(error, where="mysql://u:***@db/x")
    assert type(translated) is cls
    assert kept(translated) == ("mysql", number)
    assert is_retryable(error) is retryable


# -- without a code, the message decides --------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "cls", "backend"),
    [
        (
            psycopg.OperationalError('connection failed: database "x" does not exist'),
            DatabaseUnavailableError,
            "postgresql",
        ),
        (
            psycopg.OperationalError("the connection is lost"),
            DatabaseUnavailableError,
            "postgresql",
        ),
        (
            psycopg.OperationalError(
                'connection failed: connection to server at "127.0.0.1", port 5433 failed: '
                "server is in hot standby mode"
            ),
            DatabaseUnavailableError,
            "postgresql",
        ),
        (
            psycopg.OperationalError(
                'connection failed: connection to server at "127.0.0.1", port 5433 failed: '
                "session is read-only"
            ),
            DatabaseUnavailableError,
            "postgresql",
        ),
        (psycopg.OperationalError("something else went wrong"), DatabaseError, "postgresql"),
        (sqlite3.OperationalError("database or disk is full"), DiskFullError, "sqlite"),
        (
            sqlite3.OperationalError("attempt to write a readonly database"),
            ReadOnlyDatabaseError,
            "sqlite",
        ),
        (pymysql.err.InterfaceError(0, ""), DatabaseError, "mysql"),
    ],
)
def test_errors_without_a_code_are_judged_by_their_message(
    error: Exception, cls: type[DatabaseError], backend: str
) -> None:
    translated = translate(error, where="the database")
    assert type(translated) is cls
    assert kept(translated) == (backend, None)


def test_contention_without_a_code_is_recognised_by_its_message() -> None:
    assert is_retryable(sqlite3.OperationalError("database is locked"))
    assert not is_retryable(sqlite3.OperationalError("disk I/O error"))


def test_an_os_error_outside_a_driver_is_not_a_database_error() -> None:
    assert translate(ConnectionRefusedError(111, "refused"), where="x") is None
