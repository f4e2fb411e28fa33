"""Turns a URL or an SQLite path into a configured SQLAlchemy engine; owns lock-retry patience."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import re
import select
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState

if TYPE_CHECKING:
    import ssl

    from sqlalchemy.ext.asyncio import AsyncEngine

from . import multihost
from .errors import DatabaseBusyError, InvalidInputError, InvalidInputTypeError

__all__ = [
    "DB_FILE_MODE",
    "JOURNAL_SIZE_LIMIT",
    "READ_ONLY",
    "Patience",
    "connect_for_reading",
    "default_db_path",
    "describe",
    "dispose",
    "dispose_async",
    "hermes_home",
    "is_sqlite",
    "make_async_engine",
    "make_engine",
    "read_only_file_uri",
    "resolve_url",
    "secure_sqlite_files",
    "server_closed",
    "with_driver",
]

logger = logging.getLogger("hermes_state.engine")

ENV_URL: Final = "HERMES_STATE_URL"
ENV_HOME: Final = "HERMES_HOME"
# SQLite's own wait for a lock, per attempt; Patience retries attempts with jitter beyond it.
# The store's own write transactions switch it off and poll instead (Patience.polls): SQLite
# sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms between its tries, so a writer that has
# waited 50 ms learns of a free lock up to 25 ms late, and one that waits behind another
# process's back-to-back transactions never sees the short gaps between them.
BUSY_TIMEOUT_MS: Final = 250
# Transitions compare the rows an INSERT ... SELECT recorded with the rows the UPDATE changed;
# SQLAlchemy keeps an INSERT's row count only when asked to.
_EXECUTION_OPTIONS: Final = {"preserve_rowcount": True}
#: Execution option for SQLite connections whose transactions only read (plain deferred BEGIN).
READ_ONLY: Final = "hermes_state_read_only"
#: ``PRAGMA journal_size_limit`` on every writable SQLite connection, in bytes (upstream
#: hermes' value). SQLite's default keeps a checkpointed WAL (or a persisted rollback journal)
#: at the size of the largest transaction it ever held; with a limit it is cut back to this.
JOURNAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
#: The permissions of an SQLite file hermes-state writes, and of its ``-wal`` and ``-shm``
#: files: its owner's only. (SQLite gives the files it creates beside a database the
#: database's own mode.)
DB_FILE_MODE: Final = 0o600
_SIDE_FILES: Final = ("-wal", "-shm")
#: The journal modes ``make_engine(journal_mode=...)`` can ask for.
_JOURNAL_MODES: Final = frozenset({"wal"})
#: In a pooled SQLite connection's ``info``: it may write (its engine is not read-only).
_WRITABLE: Final = "hermes_state_writable"

# The drivers hermes-state installs, per backend: for the synchronous engine and for asyncio.
# A URL may name either; each engine takes its own twin, and a URL without a driver gets the
# defaults (psycopg / asyncpg for PostgreSQL, PyMySQL / aiomysql for MySQL and MariaDB).
_DRIVERS: Final = {
    "sqlite": ("pysqlite", "aiosqlite", {"pysqlite", "aiosqlite"}),
    "postgresql": ("psycopg", "asyncpg", {"psycopg", "asyncpg"}),
    "mysql": ("pymysql", "aiomysql", {"pymysql", "aiomysql"}),
    "mariadb": ("pymysql", "aiomysql", {"pymysql", "aiomysql"}),
}


def with_driver(url: URL, *, asyncio: bool) -> URL:
    """``url`` with the driver the synchronous (or asyncio) engine uses for it."""
    backend, _, driver = url.drivername.partition("+")
    sync_driver, async_driver, _known = _DRIVERS[backend]
    if not asyncio:
        return url.set(drivername=f"{backend}+{sync_driver}")
    # psycopg serves both worlds: a URL that names it keeps it for asyncio too.
    chosen = driver if backend == "postgresql" and driver == "psycopg" else async_driver
    return url.set(drivername=f"{backend}+{chosen}")


def hermes_home() -> Path:
    """``$HERMES_HOME``, defaulting to ``~/.hermes``."""
    return Path(os.environ.get(ENV_HOME) or "~/.hermes").expanduser()


def default_db_path() -> Path:
    """``$HERMES_HOME/state.db``."""
    return hermes_home() / "state.db"


def _is_engine(target: object) -> bool:
    """An SQLAlchemy ``Engine`` or ``AsyncEngine`` (told by shape: importing the asyncio
    extension to ask would cost every process that opens a store)."""
    return isinstance(getattr(target, "url", None), URL) and callable(
        getattr(target, "dispose", None)
    )


def resolve_url(target: str | os.PathLike[str] | URL | Engine | AsyncEngine | None = None) -> URL:
    """A URL from an explicit URL, path or engine, else ``HERMES_STATE_URL``, else the default
    file.

    Anything without ``://`` is a path to an SQLite file. A URL without a driver gets the one
    hermes-state depends on (``postgresql://`` becomes ``postgresql+psycopg://``), and
    ``postgres://``, the spelling many hosting providers hand out, means ``postgresql://``.
    A PostgreSQL URL may list several servers in any of libpq's spellings (see
    :mod:`hermes_state.multihost`); ``target_session_attrs`` and the other libpq parameters
    reach the driver as they are.
    """
    if target is None:
        target = os.environ.get(ENV_URL) or default_db_path()
    if _is_engine(target):
        # An Engine or AsyncEngine of the caller's: the database it points at. The store makes
        # its own engine for it (its pool, pragmas, listeners); the caller's is left alone.
        target = target.url  # type: ignore[union-attr]
    if isinstance(target, URL):
        url = target
    elif isinstance(target, str) and "://" in target:
        try:
            url = multihost.parse(target) or make_url(target)
        except InvalidInputError:
            raise
        except (ArgumentError, ValueError):
            raise InvalidInputError(
                f"malformed database URL {_mask_password(target)!r}. "
                "Expected e.g. sqlite:////path/state.db or postgresql://user@host/db"
            ) from None
    elif isinstance(target, str | os.PathLike):
        if str(target).strip() in ("", ":memory:"):
            raise InvalidInputError(
                "an SQLite database needs a file path (in-memory databases are not supported: "
                "every connection would see its own empty database)"
            )
        path = Path(target).expanduser()
        return URL.create("sqlite", database=str(path.resolve()))
    else:
        raise InvalidInputTypeError(f"expected a database URL or path, not {type(target).__name__}")
    backend, _, driver = url.drivername.partition("+")
    if backend == "postgres":  # what most hosting providers hand out
        backend = "postgresql"
        url = url.set(drivername=f"{backend}+{driver}" if driver else backend)
    if backend not in _DRIVERS:
        raise InvalidInputError(
            f"unsupported database {backend!r} in {describe(url)}; "
            "use sqlite, postgresql, mysql or mariadb"
        )
    if driver and driver not in _DRIVERS[backend][2]:
        known = ", ".join(f"{backend}+{name}" for name in sorted(_DRIVERS[backend][2]))
        raise InvalidInputError(
            f"hermes-state does not ship the {driver!r} driver; use {backend}:// or one of {known}"
        )
    if backend == "sqlite" and (
        not url.database or url.database == ":memory:" or url.database.startswith("file:")
    ):
        raise InvalidInputError(
            "in-memory SQLite is not supported (every connection would see its own empty "
            "database); use a file, e.g. sqlite:////tmp/state.db"
        )
    return multihost.normalize(url)


def _mask_password(text: str) -> str:
    """A URL string that may not parse, with anything between ``user:`` and ``@`` hidden."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", text)


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def describe(url: URL) -> str:
    """The file path for SQLite, else the URL with its password masked."""
    if is_sqlite(url) and url.database:
        return url.database
    return multihost.render(url)


def refuse_directory(path: Path) -> None:
    """A folder where a database file is expected is bad input, said before anything opens it."""
    if path.is_dir():
        raise InvalidInputError(
            f"{path} is a directory; give the path of a database file inside it"
        )


def _prepare_sqlite_path(url: URL) -> None:
    """Refuse a directory, and create the file's missing folders.

    The file itself is never opened from Python: closing any descriptor of a database file
    drops every POSIX lock this process holds on it, including those of live SQLite
    connections, after which another process may delete the WAL under them. SQLite reports a
    file that is not a database itself ("file is not a database", translated to
    NotADatabaseError), reading only its header, before writing anything.
    """
    assert url.database is not None
    path = Path(url.database)
    refuse_directory(path)
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot create the folder for {path}: {exc.strerror or exc}; "
                "give a path whose parents are folders you can write"
            ) from None


def _side_files(path: Path) -> tuple[Path, ...]:
    return tuple(path.with_name(path.name + suffix) for suffix in _SIDE_FILES)


def _create_private(path: Path) -> None:
    """Create the absent database file, empty and :data:`DB_FILE_MODE`, whatever the umask.

    ``mknod`` makes the file without opening it; where it is refused (macOS allows it to root
    only) an exclusive create opens it instead, a descriptor of a brand-new inode, on which no
    connection of this process can hold a lock yet. Anything else that fails is left to
    SQLite's own open to report.
    """
    try:
        os.mknod(path, stat.S_IFREG | DB_FILE_MODE)
    except FileExistsError:
        return
    except (OSError, AttributeError):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            os.close(os.open(path, flags, DB_FILE_MODE))
        except OSError:
            return
    with contextlib.suppress(OSError):
        os.chmod(path, DB_FILE_MODE)  # exactly, should the umask have taken the owner's bits


def _secure_sqlite_files(path: Path) -> None:
    """Before a writable connection opens ``path``: create it private when it is absent, and
    take every permission beyond :data:`DB_FILE_MODE` from it and its ``-wal``/``-shm``.

    Only ``chmod(2)`` on the path, never a descriptor (see :func:`_prepare_sqlite_path`: closing
    one would drop the POSIX locks of this process's live connections). A symlink, a folder or
    any other file that is not a regular one is left as it is, as is a file this process may
    not change (not its owner's).
    """
    if os.name == "nt":
        return
    if not os.path.lexists(path):
        _create_private(path)
    for candidate in (path, *_side_files(path)):
        try:
            status = os.lstat(candidate)
        except OSError:
            continue
        if not stat.S_ISREG(status.st_mode):
            continue
        current = stat.S_IMODE(status.st_mode)
        if current & ~DB_FILE_MODE:
            with contextlib.suppress(OSError):
                os.chmod(candidate, current & DB_FILE_MODE)


def secure_sqlite_files(url: URL) -> None:
    """Tighten an SQLite database hermes-state opens to write (and its -wal/-shm) to
    :data:`DB_FILE_MODE`, creating it so when it is absent; see :func:`_secure_sqlite_files`.
    A writable engine does it before each connection; a store calls it on open, once the
    file is known to be its own. Nothing on a server."""
    if is_sqlite(url) and url.database:
        _secure_sqlite_files(Path(url.database))


def _may_write(path: Path) -> bool:
    """Whether this process may write the file, its folder and the -wal/-shm beside it (a
    read-only mount refuses even root). A file without a single write permission bit counts
    as read-only too, whoever asks: root may write anything, but its owner said not to."""
    try:
        if not stat.S_IMODE(os.stat(path).st_mode) & 0o222:
            return False
    except OSError:
        return False
    present = [side for side in _side_files(path) if os.path.lexists(side)]
    return all(os.access(candidate, os.W_OK) for candidate in (path, path.parent, *present))


def _holds_wal_frames(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


def _reading_uri(path: str) -> str:
    """The SQLite URI a connection that only reads opens ``path`` with (it never creates it).

    A file this process may write is opened read-write, its connections made read-only with
    ``PRAGMA query_only``: SQLite removes the -wal and -shm of a WAL database when its last
    connection closes, unless that connection is a read-only one, which cannot, so every
    read-only open that came last left them behind. A file it may not write opens read-only,
    and so does one whose -wal holds frames no connection has open: the last connection to
    close would checkpoint them into the file, and a read must leave the file as it found it.
    """
    if _may_write(Path(path)) and not _holds_wal_frames(Path(path)):
        return f"file:{urllib.parse.quote(path)}?mode=rw"
    return read_only_file_uri(path)


def connect_for_reading(path: str) -> sqlite3.Connection:
    """A plain ``sqlite3`` connection to an existing file that cannot write to it (``PRAGMA
    query_only``, or SQLite's read-only mode where the file is not ours to write), never
    creates it and leaves its journal mode and permissions alone."""
    connection = sqlite3.connect(_reading_uri(path), uri=True)
    try:
        connection.execute("PRAGMA query_only = ON")
    except BaseException:
        connection.close()
        raise
    return connection


def read_only_file_uri(path: str) -> str:
    """The SQLite URI that opens ``path`` read-only: SQLite itself refuses any write, and
    never creates the file."""
    return f"file:{urllib.parse.quote(path)}?mode=ro"


def _read_only_url(url: URL) -> URL:
    assert url.database is not None
    uri = _reading_uri(url.database)
    database, _, query = uri.partition("?")
    return url.set(database=database, query={**dict(urllib.parse.parse_qsl(query)), "uri": "true"})


def _install_sqlite_listeners(
    engine: Engine,
    *,
    enforce_foreign_keys: bool,
    read_only: bool = False,
    journal_mode: str | None = None,
) -> None:
    """Pragmas on every new connection, and ``BEGIN IMMEDIATE`` for write transactions.

    Follows SQLAlchemy's pysqlite recipe: the driver's own transaction handling is switched off
    so the BEGIN we emit is the one that runs. Listeners attach to this engine only. A
    read-only engine's connections refuse writes (``query_only``) and change nothing: not the
    journal mode (switching it is a write), not the file's permissions. A writable one secures
    the files first (:func:`_secure_sqlite_files`) and keeps the journal mode the file has,
    unless it is new (:func:`_settle_journal_mode`).
    """
    database = engine.url.database
    assert database is not None
    path = Path(database)

    if not read_only:

        @event.listens_for(engine, "do_connect")
        def _before_connect(
            _dialect: Any, _record: ConnectionPoolEntry, _cargs: Any, _cparams: Any
        ) -> None:
            _secure_sqlite_files(path)  # returns None: the dialect connects as it always does

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if read_only:
                cursor.execute("PRAGMA query_only = ON")
            else:
                mode = _settle_journal_mode(cursor, journal_mode)
                # NORMAL is durable enough in WAL (a commit may be lost to a power cut, never
                # the file); a rollback journal needs FULL for that, SQLite's own default.
                cursor.execute(f"PRAGMA synchronous = {'NORMAL' if mode == 'wal' else 'FULL'}")
                cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
                record.info[_WRITABLE] = True
            cursor.execute(f"PRAGMA foreign_keys = {'ON' if enforce_foreign_keys else 'OFF'}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        reads_only = read_only or connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if reads_only else "BEGIN IMMEDIATE")


#: Any table of a database's own (SQLite's internal ones do not count): a file without one is
#: new, whoever made it (see ``schema.FileKind``).
_ANY_TABLE: Final = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' "
    "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' LIMIT 1"
)


def _settle_journal_mode(cursor: Any, wanted: str | None) -> str:
    """The journal mode a writable connection works in: WAL for a new file (empty, or without a
    table: one hermes-state creates, through whichever of its engines connects first) or when
    asked for; otherwise the one the file has, since its owner may have chosen it (a rollback
    journal on a file system where WAL is unsafe)."""
    mode = _one_value(cursor, "PRAGMA journal_mode")
    if mode == "wal":
        return mode
    cursor.execute(_ANY_TABLE)
    if wanted == "wal" or cursor.fetchone() is None:
        mode = _one_value(cursor, "PRAGMA journal_mode = WAL")
    return mode


def _one_value(cursor: Any, sql: str) -> str:
    """The first column of the one row ``sql`` returns, in lower case. (A DBAPI cursor: the
    sqlite3 module's, or SQLAlchemy's adapter of aiosqlite, whose ``execute`` returns None.)"""
    cursor.execute(sql)
    return str(cursor.fetchone()[0]).lower()


def make_engine(
    url: URL,
    *,
    enforce_foreign_keys: bool = True,
    read_only: bool = False,
    journal_mode: str | None = None,
) -> Engine:
    """A synchronous engine configured for hermes-state (see the module docstring).

    ``read_only`` opens an SQLite file (it must exist) with connections SQLite refuses any write
    on; on a server it changes nothing, the commands that ask for it only read.
    ``journal_mode="wal"`` switches an existing SQLite file to WAL; by default only a new one
    is, and an existing file keeps its journal mode. Servers ignore it.
    """
    if journal_mode is not None and journal_mode not in _JOURNAL_MODES:
        raise InvalidInputError(
            f"journal_mode must be one of {', '.join(sorted(_JOURNAL_MODES))} or None, "
            f"not {journal_mode!r}"
        )
    if read_only and journal_mode is not None:
        raise InvalidInputError("a read-only engine cannot change the journal mode")
    url = with_driver(url, asyncio=False)
    if is_sqlite(url):
        if sqlite3.sqlite_version_info < (3, 35):
            raise InvalidInputError(
                f"SQLite {sqlite3.sqlite_version} is too old; hermes-state needs 3.35 or newer"
            )
        if not read_only:
            _prepare_sqlite_path(url)
        # Threads keep their connection for good (see store.py), so the pool must never run dry.
        engine = create_engine(
            _read_only_url(url) if read_only else url,
            pool_size=5,
            max_overflow=-1,
            execution_options=_EXECUTION_OPTIONS,
        )
        _install_sqlite_listeners(
            engine,
            enforce_foreign_keys=enforce_foreign_keys,
            read_only=read_only,
            journal_mode=journal_mode,
        )
        return engine
    if url.get_backend_name() == "postgresql":
        # No pool_pre_ping here: its SELECT 1 would double the round trips of a transition
        # (one statement in autocommit). The checkout check below costs no round trip.
        with _driver_installed(url):
            engine = create_engine(
                url, isolation_level="READ COMMITTED", execution_options=_EXECUTION_OPTIONS
            )
        event.listen(engine, "checkout", _refuse_connections_the_server_closed)
        return engine
    # MariaDB/MySQL: no pre-ping either (the same checkout check), and no ROLLBACK sent on
    # every return to the pool, where PyMySQL would send one even after a COMMIT.
    with _driver_installed(url):
        engine = create_engine(
            url,
            isolation_level="READ COMMITTED",
            pool_reset_on_return=None,
            execution_options=_EXECUTION_OPTIONS,
        )
    if url.get_driver_name() == _PYMYSQL_MODULE:
        event.listen(engine, "do_connect", _connect_with_one_tls_context)
    event.listen(engine, "checkout", _refuse_connections_the_server_closed)
    _reset_only_what_is_open(engine)
    return engine


def _connect_with_one_tls_context(
    dialect: Any, _record: ConnectionPoolEntry, cargs: Any, cparams: dict[str, Any]
) -> Any:
    """Open a PyMySQL connection whose "preferred" TLS context is built once per process.

    Given no TLS options, PyMySQL (1.2) prefers TLS: it offers it and falls back to plain
    text where the server has none. For that it builds a default context on every
    connection, loading the system's CA bundle (about 25 ms of CPU here), although that
    context verifies nothing (no CA given: no certificate or host check). Every connection of
    a process can share one such context; explicit TLS options are PyMySQL's own as before.
    Other drivers (aiomysql's dialect derives from PyMySQL's) connect as they always do.
    """
    if dialect.driver != _PYMYSQL_MODULE:
        return None
    return _shared_tls_connection_class()(*cargs, **cparams)


@functools.cache
def _shared_tls_connection_class() -> type[Any]:
    from pymysql.connections import Connection  # type: ignore[import-untyped]

    class SharedTlsConnection(Connection):  # type: ignore[misc]
        preferred: ClassVar[ssl.SSLContext | None] = None

        def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
            if not (isinstance(sslp, dict) and not sslp):  # options given: PyMySQL's own
                return super()._create_ssl_ctx(sslp)  # type: ignore[no-any-return]
            # The "preferred" mode's context, configured once: safe to share between
            # connections and threads (two threads racing here build two; both are fine).
            if SharedTlsConnection.preferred is None:
                SharedTlsConnection.preferred = super()._create_ssl_ctx(sslp)
            return SharedTlsConnection.preferred

    return SharedTlsConnection


#: The extra that installs each server's drivers.
_EXTRAS: Final = {"postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}


@contextlib.contextmanager
def _driver_installed(url: URL) -> Iterator[None]:
    """Engine creation imports the driver: a missing one is named with the extra to install,
    not shown as a ModuleNotFoundError."""
    try:
        yield
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get(url.get_backend_name())
        if extra is None:
            raise
        raise InvalidInputError(
            f"{describe(url)} needs the {exc.name} driver, which is not installed: "
            f"run `pip install 'hermes-state[{extra}]'`"
        ) from None


def server_closed(dbapi_connection: Any) -> bool:
    """Whether the server closed this idle psycopg or PyMySQL connection, found without a
    round trip.

    An idle connection gets no data from the server unless it is going away: a terminated
    backend (``pg_terminate_backend``, ``KILL``), an idle timeout or a server shutting down
    sends its last message and closes the socket. So a socket with input waiting (or already
    closed) is a dead connection.
    """
    if any(kind.__module__.startswith(_PYMYSQL_MODULE) for kind in type(dbapi_connection).__mro__):
        sock = getattr(dbapi_connection, "_sock", None)  # PyMySQL keeps no public handle
        return sock is None or _has_input(sock.fileno())
    return bool(dbapi_connection.closed) or _has_input(dbapi_connection.fileno())


_PYMYSQL_MODULE: Final = "pymysql"
#: PyMySQL's SERVER_STATUS_IN_TRANS: the server's last answer said a transaction is open.
_MYSQL_IN_TRANSACTION: Final = 0x0001
#: In a pooled connection's ``info``: SQLAlchemy ended the connection's last transaction.
_TRANSACTION_ENDED: Final = "hermes_state_transaction_ended"


def _reset_only_what_is_open(engine: Engine) -> None:
    """On return to the pool, roll a MariaDB/MySQL connection back only when a transaction
    may be open on it; PyMySQL's ``rollback()`` is always a round trip, even after a COMMIT.

    A transaction SQLAlchemy committed or rolled back (its own events say so) is over, unless
    the server still says one is open (a COMMIT that failed); anything else (raw DBAPI use,
    statements after the end) is rolled back as the pool would. The server's status alone
    would not do: it does not report a transaction that has only read, which still holds its
    tables' metadata locks (a DROP or ALTER would wait for it).
    """

    def unknown(_dbapi: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        record.info[_TRANSACTION_ENDED] = False

    def began(connection: Connection) -> None:
        connection.connection.info[_TRANSACTION_ENDED] = False

    def ended(connection: Connection) -> None:
        connection.connection.info[_TRANSACTION_ENDED] = True

    def reset(dbapi_connection: Any, record: ConnectionPoolEntry, state: PoolResetState) -> None:
        if state.terminate_only or state.transaction_was_reset:
            return
        if not record.info.get(_TRANSACTION_ENDED) or (
            dbapi_connection.server_status & _MYSQL_IN_TRANSACTION
        ):
            dbapi_connection.rollback()

    event.listen(engine, "checkout", unknown)
    event.listen(engine, "begin", began)
    event.listen(engine, "commit", ended)
    event.listen(engine, "rollback", ended)
    event.listen(engine, "reset", reset)


def _refuse_connections_the_server_closed(
    dbapi_connection: Any, _record: ConnectionPoolEntry, _proxy: Any
) -> None:
    """Replace a pooled connection the server closed while it sat idle (see
    :func:`server_closed`): raising DisconnectionError makes the pool discard it and check out
    another."""
    if server_closed(dbapi_connection):
        raise DisconnectionError("the server closed this pooled connection while it was idle")


def _has_input(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def make_async_engine(url: URL) -> AsyncEngine:
    """An asyncio engine for the same database, on the matching async driver."""
    from sqlalchemy.ext.asyncio import create_async_engine  # only asyncio users pay for it

    async_url = with_driver(url, asyncio=True)
    if is_sqlite(url):
        _prepare_sqlite_path(url)
        engine = create_async_engine(async_url, execution_options=_EXECUTION_OPTIONS)
        _install_sqlite_listeners(engine.sync_engine, enforce_foreign_keys=True)
        return engine
    with _driver_installed(url):
        return create_async_engine(
            async_url,
            pool_pre_ping=True,
            isolation_level="READ COMMITTED",
            execution_options=_EXECUTION_OPTIONS,
        )


def _checkpoint(pooled: Any) -> None:
    """``PRAGMA wal_checkpoint(PASSIVE)`` on a pooled connection of a writable SQLite engine
    whose file is in WAL mode: the log's committed pages are copied into the database without
    waiting for anyone.

    Never raises: it runs while a store closes, often while an error is on its way out. A
    database that is busy or locked (another checkpoint, a writer) or read-only (a read-only
    mount) is skipped without a word, the next checkpoint (SQLite's own at the last close,
    another process's) does the work; anything else is logged.
    """
    if not pooled.info.get(_WRITABLE):
        return
    try:
        cursor = pooled.dbapi_connection.cursor()
        try:
            if _one_value(cursor, "PRAGMA journal_mode") == "wal":
                cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
                cursor.fetchall()
        finally:
            cursor.close()
    except sqlite3.Error as exc:
        if not _skippable(exc):
            logger.warning("the WAL checkpoint before closing failed: %s", exc)


def _skippable(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY)
    text = str(exc).lower()
    return any(word in text for word in ("locked", "busy", "readonly", "read-only"))


def dispose(engine: Engine) -> None:
    """Close the engine's pooled connections; on a writable SQLite engine, after a passive WAL
    checkpoint on one of those it holds idle (an engine that holds none opens none for it).

    Everything else is ``engine.dispose()``: SQLite itself, when the last connection to the
    file closes, checkpoints the rest and removes the ``-wal`` and ``-shm`` files.
    """
    try:
        if is_sqlite(engine.url) and _idle_connections(engine):
            pooled = engine.raw_connection()
            try:
                _checkpoint(pooled)
            finally:
                pooled.close()
    finally:
        engine.dispose()


async def dispose_async(engine: AsyncEngine) -> None:
    """:func:`dispose` for an asyncio engine."""
    try:
        if is_sqlite(engine.url) and _idle_connections(engine.sync_engine):
            async with engine.connect() as connection:
                pooled = await connection.get_raw_connection()
                await connection.run_sync(lambda _sync: _checkpoint(pooled))
    finally:
        await engine.dispose()


def _idle_connections(engine: Engine) -> int:
    checkedin = getattr(engine.pool, "checkedin", None)
    return int(checkedin()) if callable(checkedin) else 0


@dataclass(frozen=True, slots=True)
class Patience:
    """How long a transaction keeps retrying lock contention before giving up.

    ``delays()`` yields jittered, growing sleeps (full jitter, so contending processes do not
    retry in lockstep) until ``seconds`` have passed, then raises :class:`DatabaseBusyError`;
    ``polls()`` does the same for a lock the caller polls (see there).
    """

    seconds: float = 30.0
    first_delay: float = 0.002
    max_delay: float = 0.2
    #: :meth:`polls`: each pause is at most this share of the time waited so far, and within
    #: ``min_poll`` and ``max_poll`` seconds.
    poll_share: float = 0.05
    min_poll: float = 0.001
    max_poll: float = 0.05

    def delays(self, where: str) -> Iterator[float]:
        deadline = time.monotonic() + self.seconds
        ceiling = self.first_delay
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._busy(where)
            yield min(remaining, random.uniform(0, ceiling))
            ceiling = min(self.max_delay, ceiling * 2)

    def polls(self, where: str) -> Iterator[float]:
        """Pauses between tries at a lock that nothing wakes a waiter for (SQLite's write lock,
        with SQLite's own busy wait off). A waiter learns that the lock is free within a
        millisecond (``min_poll``, SQLite's own first pause) or a twentieth of the time it has
        waited so far (``poll_share``), whichever is longer, so a long wait costs few tries.
        Jittered, so waiters do not try in step; raises :class:`DatabaseBusyError` once
        ``seconds`` have passed."""
        started = time.monotonic()
        deadline = started + self.seconds
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise self._busy(where)
            ceiling = min(self.max_poll, max(self.min_poll, (now - started) * self.poll_share))
            yield min(deadline - now, random.uniform(ceiling / 2, ceiling))

    def _busy(self, where: str) -> DatabaseBusyError:
        return DatabaseBusyError(
            f"{where} stayed locked by another writer for more than {self.seconds:g} s; "
            "retry later, or find the process holding a long write transaction"
        )
