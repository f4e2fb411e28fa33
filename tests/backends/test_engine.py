"""The engine factory: SQLite pragmas and locking, files and folders, URLs, busy patience.

Locking is proven with a second, raw ``sqlite3`` connection and threading.Event hand-offs:
nothing here waits for time to pass.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import (
    DatabaseBusyError,
    DatabaseError,
    DatabaseUnavailableError,
    HermesStateError,
    InvalidInputError,
    NativeAsyncSessionDB,
    NotADatabaseError,
    SessionDB,
    default_db_path,
    resolve_url,
)
from hermes_state.engine import (
    BUSY_TIMEOUT_MS,
    READ_ONLY,
    describe,
    make_async_engine,
    make_engine,
)
from tests.conftest import require_server
from tests.support.digest import sync_url

WAIT = 30.0  # a safety net for a hung thread, never a way to synchronise

# -- pragmas -------------------------------------------------------------------------------------


def _pragmas(run: Any) -> dict[str, Any]:
    return {name: run(f"PRAGMA {name}") for name in PRAGMAS}


PRAGMAS = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
EXPECTED_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": 1,  # NORMAL
    "foreign_keys": 1,
    "busy_timeout": BUSY_TIMEOUT_MS,
}


def test_engine_connections_get_the_pragmas(tmp_path: Path) -> None:
    engine = make_engine(resolve_url(tmp_path / "pragmas.db"))
    try:
        # Several connections held at once, so each is a new one from the pool. They only read:
        # a plain connect() would BEGIN IMMEDIATE and the second would wait for the first.
        connections = [engine.connect().execution_options(**{READ_ONLY: True}) for _ in range(3)]
        try:
            for connection in connections:
                pragmas = _pragmas(lambda sql, c=connection: c.exec_driver_sql(sql).scalar())
                assert pragmas == EXPECTED_PRAGMAS
        finally:
            for connection in connections:
                connection.close()
    finally:
        engine.dispose()
    assert BUSY_TIMEOUT_MS > 0


def test_store_write_connections_get_the_pragmas(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SessionDB(path) as store:
        pragmas = store._execute_write(
            lambda conn: _pragmas(lambda sql: conn.execute(sql).scalar())
        )
        assert pragmas == EXPECTED_PRAGMAS
        # Foreign keys really are enforced on that connection.
        with pytest.raises(DatabaseError, match=r"(?i)foreign key"):
            store._execute_write(
                lambda conn: conn.execute(
                    "INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES (?, ?, ?, ?)",
                    ("no-such-session", "user", "orphan", 1.0),
                )
            )
        assert store.get_messages("no-such-session") == []
    # WAL is a property of the file: another program opening it sees it too.
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def test_pragmas_are_not_installed_globally(tmp_path: Path) -> None:
    """A plain SQLAlchemy engine made after ours keeps SQLite's defaults."""
    ours = make_engine(resolve_url(tmp_path / "ours.db"))
    with ours.connect():
        pass
    plain = create_engine(f"sqlite:///{tmp_path / 'plain.db'}", poolclass=NullPool)
    try:
        with plain.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 0
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    finally:
        plain.dispose()
        ours.dispose()


# -- the write lock is taken at BEGIN ------------------------------------------------------------


@pytest.fixture
def database_file(tmp_path: Path) -> Path:
    path = tmp_path / "locks.db"
    SessionDB(path).close()  # created and migrated
    return path


@pytest.fixture
def rival(database_file: Path) -> Iterator[sqlite3.Connection]:
    """A raw connection that never waits for a lock and manages its own transactions."""
    connection = sqlite3.connect(database_file, timeout=0, isolation_level=None)
    try:
        yield connection
    finally:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        connection.close()


def _write_lock_is_free(rival: sqlite3.Connection) -> bool:
    """Whether ``BEGIN IMMEDIATE`` succeeds at once (rolled straight back if it does)."""
    try:
        rival.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "database is locked" not in str(exc):
            raise
        return False
    rival.execute("ROLLBACK")
    return True


def test_execute_write_holds_the_write_lock_from_begin(
    database_file: Path, rival: sqlite3.Connection
) -> None:
    """The callable runs no statement at all: only BEGIN IMMEDIATE can be holding the lock."""
    inside = threading.Event()
    release = threading.Event()
    outcome: dict[str, Any] = {}

    def hold(_conn: Any) -> str:
        inside.set()
        assert release.wait(WAIT)
        return "done"

    with SessionDB(database_file) as store:
        store.create_session("s", "cli")

        def writer() -> None:
            try:
                outcome["result"] = store._execute_write(hold)
            except BaseException as exc:
                outcome["error"] = exc
                inside.set()

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert inside.wait(WAIT)
            assert "error" not in outcome, outcome
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                rival.execute("BEGIN IMMEDIATE")
            # Readers are not blocked by the writer (WAL): this store's other thread reads on.
            assert store.get_handoff_state("s") == {"state": None, "platform": None, "error": None}
        finally:
            release.set()
            thread.join(WAIT)
        assert not thread.is_alive()
        assert outcome == {"result": "done"}
        assert _write_lock_is_free(rival)


def test_engine_write_transactions_begin_immediate(
    database_file: Path, rival: sqlite3.Connection
) -> None:
    engine = make_engine(resolve_url(database_file))
    try:
        with engine.begin():
            # Nothing executed yet, and still the write lock is held.
            assert not _write_lock_is_free(rival)
        assert _write_lock_is_free(rival)

        with engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            with connection.begin():
                connection.exec_driver_sql("SELECT count(*) FROM sessions").scalar()
                # A read-only transaction leaves writers alone.
                assert _write_lock_is_free(rival)
    finally:
        engine.dispose()


def test_store_transitions_release_the_lock(database_file: Path, rival: sqlite3.Connection) -> None:
    """After each call the store holds no transaction open (a leak would block every writer)."""
    with SessionDB(database_file) as store:
        store.create_session("s", "cli")
        assert _write_lock_is_free(rival)
        assert store.request_handoff("s", "telegram") is True
        assert _write_lock_is_free(rival)
        assert store.claim_handoff("s") is True
        assert store.claim_handoff("s") is False  # a refused write too
        assert _write_lock_is_free(rival)
        with pytest.raises(ValueError):
            store.request_handoff("s", "")
        with pytest.raises(LookupError):
            store.append_message("nobody", "user", "x")
        assert _write_lock_is_free(rival)
        store.list_pending_handoffs()
        store.get_handoff_state("s")
        assert _write_lock_is_free(rival)


# -- busy patience -------------------------------------------------------------------------------


def test_lock_held_longer_than_patience_raises_busy(
    database_file: Path, rival: sqlite3.Connection
) -> None:
    with SessionDB(database_file, busy_patience=0.3) as store:
        store.create_session("s", "cli")
        rival.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(DatabaseBusyError) as caught:
                store.request_handoff("s", "telegram")
            assert str(database_file) in str(caught.value)
            assert isinstance(caught.value, HermesStateError)
            with pytest.raises(DatabaseBusyError):
                store._execute_write(lambda conn: conn.execute("UPDATE sessions SET title = 'x'"))
            with pytest.raises(DatabaseBusyError):
                store.create_session("t", "cli")
            # Reads go on while another process writes.
            assert store.get_handoff_state("s") == {"state": None, "platform": None, "error": None}
        finally:
            rival.execute("ROLLBACK")

        # Nothing was half-written, and the store works again once the lock is gone.
        assert store.get_handoff_state("t") is None
        assert store.request_handoff("s", "telegram") is True
        assert store.claim_handoff("s") is True
        assert store.create_session("t", "cli") == "t"


@pytest.mark.asyncio
async def test_native_store_busy_patience(database_file: Path, rival: sqlite3.Connection) -> None:
    native = NativeAsyncSessionDB(database_file, busy_patience=0.3)
    try:
        await native.create_session("s", "cli")
        rival.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(DatabaseBusyError):
                await native.request_handoff("s", "telegram")
            assert await native.get_handoff_state("s") == {
                "state": None,
                "platform": None,
                "error": None,
            }
        finally:
            rival.execute("ROLLBACK")
        assert await native.request_handoff("s", "telegram") is True
    finally:
        await native.close()


# -- files and folders ---------------------------------------------------------------------------


def test_missing_folders_are_created(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "there" / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli")
    assert path.is_file()
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"


def test_the_default_file_lives_in_hermes_home(isolated_home: Path) -> None:
    assert default_db_path() == isolated_home / "state.db"
    with SessionDB() as store:
        store.create_session("s", "cli")
        assert store.where == str(isolated_home / "state.db")
    assert (isolated_home / "state.db").is_file()


def test_hermes_home_defaults_to_dot_hermes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_HOME")
    assert default_db_path() == Path("~/.hermes").expanduser() / "state.db"


def test_hermes_state_url_is_used_when_no_target_is_given(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere" / "state.db"
    monkeypatch.setenv("HERMES_STATE_URL", f"sqlite:///{elsewhere}")
    with SessionDB() as store:
        store.create_session("s", "cli")
    assert elsewhere.is_file()
    assert not (isolated_home / "state.db").exists()


def _file_state(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_size, stat.st_mtime_ns


NOT_DATABASES = {
    "text": b"just some notes\n" * 200,
    "zip": b"PK\x03\x04" + bytes(range(256)) * 16,
    "almost-header": b"SQLite format 2\x00" + b"\x00" * 4080,
    "header-then-garbage": b"SQLite format 3\x00" + bytes(range(256)) * 48,
}


@pytest.mark.parametrize("content", NOT_DATABASES.values(), ids=NOT_DATABASES.keys())
def test_a_file_that_is_not_sqlite_is_refused_and_untouched(tmp_path: Path, content: bytes) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "state.db"
    path.write_bytes(content)
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = _file_state(path)

    with pytest.raises(NotADatabaseError) as caught:
        SessionDB(path)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, DatabaseUnavailableError)

    assert _file_state(path) == before
    assert sorted(p.name for p in folder.iterdir()) == ["state.db"], "side files were created"


@pytest.mark.asyncio
async def test_native_store_refuses_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(NOT_DATABASES["text"])
    before = _file_state(path)

    async def open_and_use() -> None:
        native = NativeAsyncSessionDB(path)
        try:
            await native.has_pending_handoffs()
        finally:
            await native.close()

    with pytest.raises(NotADatabaseError):
        await open_and_use()
    assert _file_state(path) == before


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        SessionDB(tmp_path)


# -- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite+pysqlite:///:memory:",
        "sqlite:///file::memory:?cache=shared",
    ],
)
def test_in_memory_sqlite_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidInputError, match=r"(?i)memory"):
        SessionDB(url=url)


def test_in_memory_sqlite_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``":memory:"`` is how sqlite3 callers ask for an in-memory database: it must not quietly
    become a file named ':memory:' in the working directory."""
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(InvalidInputError, match=r"(?i)memory"):
            SessionDB(":memory:").close()
    finally:
        assert sorted(p.name for p in tmp_path.iterdir() if "memory" in p.name) == []


@pytest.mark.parametrize(
    "url",
    [
        "://nothing",
        "not a url://x",
        "postgresql://user@host:notaport/db",
        "oracle://user@host/db",
        "postgresql+nosuchdriver://user@host/db",
    ],
)
def test_malformed_or_unsupported_urls_raise_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        SessionDB(url=url)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("url", "drivername"),
    [
        ("postgres://user:pw@host/db", "postgresql"),
        ("postgres+asyncpg://user@host/db", "postgresql+asyncpg"),
        ("postgres+psycopg://user@host:5433/db", "postgresql+psycopg"),
    ],
)
def test_postgres_means_postgresql(url: str, drivername: str) -> None:
    resolved = resolve_url(url)
    assert resolved.drivername == drivername
    assert resolved.render_as_string(hide_password=False).split("://")[1] == url.split("://")[1]


def test_postgres_with_an_unknown_driver_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="postgresql"):
        resolve_url("postgres+nosuchdriver://user@host/db")


@pytest.mark.parametrize("target", [123, 4.5, b"state.db"])
def test_a_target_of_the_wrong_type_is_refused(target: object) -> None:
    with pytest.raises(HermesStateError) as caught:
        SessionDB(target)  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError | ValueError)


def test_db_path_and_url_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        SessionDB(tmp_path / "a.db", url=f"sqlite:///{tmp_path / 'b.db'}")
    assert not (tmp_path / "a.db").exists()
    assert not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("postgresql://alice:s3cret@db.example:5432/hermes", ["s3cret"]),
        ("mysql://bob:hunter2@db.example/hermes", ["hunter2"]),
        ("postgresql://carol:p%40ss%3Aw%2Frd@db.example/hermes", ["p%40ss%3Aw%2Frd", "p@ss:w/rd"]),
    ],
)
def test_describe_masks_passwords(url: str, secrets: list[str]) -> None:
    described = describe(resolve_url(url))
    assert "***" in described
    for secret in secrets:
        assert secret not in described
    assert "db.example" in described


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://alice:s3cret-pw@127.0.0.1:1/hermes",
        "mysql://alice:s3cret-pw@127.0.0.1:1/hermes",
    ],
)
def test_unreachable_server_error_hides_the_password(url: str) -> None:
    """Port 1 refuses connections at once: the error names the server, never the password."""
    with pytest.raises(DatabaseUnavailableError) as caught:
        SessionDB(url=url)
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert "127.0.0.1" in message


def test_sqlite_path_is_described_as_the_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    assert describe(resolve_url(path)) == str(path)
    with SessionDB(path) as store:
        assert store.where == str(path)
        assert str(path) in repr(store)


# -- servers: pooled connections that died are replaced --------------------------------------------


def _kill_other_connections(url: URL) -> int:
    admin = create_engine(sync_url(url), poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            if url.get_backend_name() == "postgresql":
                # With a timeout, pg_terminate_backend waits until each backend has gone.
                return len(
                    connection.execute(
                        text(
                            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        )
                    ).all()
                )
            ids = (
                connection.execute(
                    text(
                        "SELECT ID FROM information_schema.PROCESSLIST "
                        "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
                    )
                )
                .scalars()
                .all()
            )
            for thread_id in ids:
                connection.execute(text(f"KILL CONNECTION {int(thread_id)}"))
            # KILL only flags the thread; wait (bounded) until the server has really dropped it.
            deadline = time.monotonic() + WAIT
            alive = text("SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID IN :ids")
            alive = alive.bindparams(bindparam("ids", expanding=True))
            while connection.execute(alive, {"ids": list(ids)}).scalar_one():
                assert time.monotonic() < deadline, "killed connections never went away"
                threading.Event().wait(0.01)
            return len(ids)
    finally:
        admin.dispose()


def test_server_store_survives_its_connections_being_killed(
    store: SessionDB, backend_url: URL
) -> None:
    if backend_url.get_backend_name() == "sqlite":
        pytest.skip("server databases only")
    store.create_session("s", "cli")
    assert _kill_other_connections(backend_url) >= 1
    assert store.request_handoff("s", "telegram") is True
    assert store.get_handoff_state("s")["state"] == "pending"


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("postgresql://u@h/db", "psycopg", "postgres"),
        ("postgres://u@h/db", "psycopg", "postgres"),
        ("mysql://u@h/db", "pymysql", "mysql"),
        ("mariadb://u@h/db", "pymysql", "mysql"),
    ],
)
def test_a_missing_server_driver_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    with pytest.raises(InvalidInputError, match=rf"pip install 'hermes-state\[{extra}\]'"):
        make_engine(resolve_url(url))


def test_a_missing_async_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(InvalidInputError, match=r"asyncpg driver.*hermes-state\[postgres\]"):
        make_async_engine(resolve_url("postgresql://u@h/db"))


def test_the_cli_says_which_extra_a_missing_driver_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hermes_state.cli import main

    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert main(["--url", "postgres://u@h/db", "handoff", "stats"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "pip install 'hermes-state[postgres]'" in error


def test_pymysql_connections_share_one_preferred_tls_context() -> None:
    """PyMySQL builds a "preferred TLS" context (CA bundle loaded, nothing verified) for every
    connection; the store's engine builds it once per process, and URL options still win."""
    server = require_server("mysql")
    engine = make_engine(server)
    try:
        first, second = engine.raw_connection(), engine.raw_connection()
        try:
            contexts = [c.dbapi_connection.ctx for c in (first, second)]  # type: ignore[union-attr]
            assert contexts[0] is contexts[1]
            # What PyMySQL's preferred mode configures: no certificate or host check.
            assert contexts[0].verify_mode.name == "CERT_NONE"
            assert contexts[0].check_hostname is False
        finally:
            first.close()
            second.close()
    finally:
        engine.dispose()
    plain = make_engine(server.update_query_dict({"ssl_disabled": "true"}))
    try:
        connection = plain.raw_connection()
        assert connection.dbapi_connection.ssl is False  # type: ignore[union-attr]
        connection.close()
    finally:
        plain.dispose()
