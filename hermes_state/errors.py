"""The package's one exception hierarchy, and the single place database errors are translated."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import re
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = [
    "CompressionSessionClosedError",
    "ConcurrentChangeError",
    "CopyConflictError",
    "CopyRefusedError",
    "DatabaseBusyError",
    "DatabaseCorruptError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "DeliveryFailed",
    "DiskFullError",
    "ForeignDatabaseError",
    "HermesStateError",
    "InvalidInputError",
    "InvalidInputTypeError",
    "MissingExtraError",
    "NotADatabaseError",
    "ReadOnlyDatabaseError",
    "SchemaOutOfDateError",
    "SchemaTooNewError",
    "SessionExportTooLargeError",
    "SessionInUseError",
    "SideTaskFailed",
    "TranscriptChangedError",
    "UnknownSessionError",
    "corrupt_error",
    "is_retryable",
    "keep_step_params",
    "missing_database",
    "raise_translated",
    "translate",
    "translated",
    "with_code_of",
]


class HermesStateError(Exception):
    """Root of every error hermes-state raises on purpose."""


class InvalidInputError(HermesStateError, ValueError):
    """An argument has the right type but an unusable value (empty, too long, control chars)."""


class InvalidInputTypeError(HermesStateError, TypeError):
    """An argument has the wrong type."""


class DatabaseError(HermesStateError):
    """A database operation failed for a reason not covered by a more precise subclass.

    ``backend`` is the database that failed ("sqlite", "postgresql" or "mysql"; None when
    hermes-state cannot tell) and ``code`` what its driver reported, when it reported a code:
    SQLite's extended result code name ("SQLITE_READONLY_DBMOVED"), PostgreSQL's SQLSTATE
    ("40P01"), the MySQL/MariaDB error number (1213), or the operating system's error name when
    the server could not be reached at all ("ECONNREFUSED"). None when there was no code (the
    error was classified by its message) or when hermes-state raised the error itself.
    """

    def __init__(
        self, *args: object, backend: str | None = None, code: str | int | None = None
    ) -> None:
        super().__init__(*args)
        self.backend = backend
        self.code = code


class DatabaseUnavailableError(DatabaseError):
    """The database cannot be opened or reached, or (a server) takes no writes: down, out of
    reach, or a read-only standby while a failover is under way."""


class NotADatabaseError(DatabaseUnavailableError):
    """The file exists but is not an SQLite database; it was left untouched."""


class DatabaseCorruptError(DatabaseError):
    """SQLite found the file damaged ("database disk image is malformed", or a failed
    ``PRAGMA quick_check`` before a migration); nothing more was written to it."""


class ForeignDatabaseError(DatabaseError):
    """An SQLite database that belongs to another application; it was left untouched."""


class ReadOnlyDatabaseError(DatabaseError):
    """A write was refused because the SQLite file (or its folder) is read-only. (A server
    that refuses writes is a standby, or set read-only: :class:`DatabaseUnavailableError`.)"""


class DiskFullError(DatabaseError):
    """A write was refused because the disk, or the database's size limit, is full."""


class DatabaseBusyError(DatabaseError):
    """Another writer held the lock for longer than this store's patience."""


class ConcurrentChangeError(DatabaseError):
    """Rows changed between two statements of one transition; the transaction is run again."""


class SchemaOutOfDateError(HermesStateError):
    """The database schema is behind this version of hermes-state."""


class SchemaTooNewError(HermesStateError):
    """The database was migrated by a newer hermes-state than this one."""


class UnknownSessionError(HermesStateError, LookupError):
    """The operation needs an existing session and there is none with this id."""


class SessionTurnLeaseLostError(HermesStateError, RuntimeError):
    """A transcript write fenced on a turn lease found the lease held by someone else (or by
    nobody): the writer lost its turn, and nothing was written."""


class SessionInUseError(HermesStateError):
    """The session is in use (a handoff in flight, or a live turn on its conversation), so it
    was left as it was; try again once that is over."""


class SessionExportTooLargeError(HermesStateError, ValueError):
    """A session has more live messages than an in-memory export allows (upstream's error and
    attributes: ``session_id``, ``message_count`` counted so far, ``limit``)."""

    def __init__(self, session_id: str, message_count: int, limit: int) -> None:
        super().__init__(
            f"session {session_id!r} has at least {message_count} active messages; the limit "
            f"of an in-memory export is {limit} (set HERMES_STATE_MAX_EXPORT_MESSAGES=0 to "
            "lift it)"
        )
        self.session_id = session_id
        self.message_count = message_count
        self.limit = limit


class CompressionSessionClosedError(HermesStateError, RuntimeError):
    """The session was ended by compression: its conversation goes on in the continuation
    session, which new messages must go to (upstream's error, ``session_id`` naming the
    closed one); nothing was written."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"Session {session_id!r} is closed by compression; adopt its live continuation "
            "before appending messages"
        )
        self.session_id = session_id


class TranscriptChangedError(HermesStateError, RuntimeError):
    """A transcript write pinned to what the caller saw found the transcript changed since
    (``rewind_to_message(expected_active_ids=..., expected_target_content=...)``); nothing
    was written."""


class CopyConflictError(HermesStateError):
    """The target holds rows with the same keys and different values."""


class CopyRefusedError(HermesStateError):
    """Some source rows cannot go into the target as it is; nothing was copied."""


class DeliveryFailed(HermesStateError):
    """The delivery command exited with a non-zero status, or ran out of time."""


class MissingExtraError(HermesStateError):
    """A library of the ``dashboard`` extra is not installed."""


class SideTaskFailed(HermesStateError, RuntimeError):
    """A watcher side task (lease keeper, LISTEN, heartbeat) kept crashing: the watcher stopped."""


def _driver_error(exc: BaseException) -> BaseException:
    """The DBAPI exception behind a SQLAlchemy wrapper, or ``exc`` itself."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


class _Kind(enum.Enum):
    """What a driver error means for the caller, whichever backend raised it."""

    CONTENTION = "contention"  # lock contention: the whole transaction may be run again
    CORRUPT = "corrupt"
    NOT_A_DATABASE = "not a database"
    READ_ONLY = "read-only"
    FULL = "full"
    UNAVAILABLE = "unavailable"  # cannot connect, log in, or find the database
    OTHER = "other"


# SQLite's primary result codes (the low byte of an extended code such as
# SQLITE_READONLY_DBMOVED): https://sqlite.org/rescode.html
_SQLITE_KINDS: Final[Mapping[int, _Kind]] = {
    3: _Kind.UNAVAILABLE,  # SQLITE_PERM
    5: _Kind.CONTENTION,  # SQLITE_BUSY
    6: _Kind.CONTENTION,  # SQLITE_LOCKED
    8: _Kind.READ_ONLY,  # SQLITE_READONLY
    11: _Kind.CORRUPT,  # SQLITE_CORRUPT
    13: _Kind.FULL,  # SQLITE_FULL
    14: _Kind.UNAVAILABLE,  # SQLITE_CANTOPEN
    23: _Kind.UNAVAILABLE,  # SQLITE_AUTH
    26: _Kind.NOT_A_DATABASE,  # SQLITE_NOTADB
}
# PostgreSQL SQLSTATEs: https://www.postgresql.org/docs/current/errcodes-appendix.html
_PG_KINDS: Final[Mapping[str, _Kind]] = {
    "40001": _Kind.CONTENTION,  # serialization_failure
    "40P01": _Kind.CONTENTION,  # deadlock_detected
    "55P03": _Kind.CONTENTION,  # lock_not_available
    "25006": _Kind.READ_ONLY,  # read_only_sql_transaction
    "53100": _Kind.FULL,  # disk_full
    "53300": _Kind.UNAVAILABLE,  # too_many_connections
    "3D000": _Kind.UNAVAILABLE,  # invalid_catalog_name: no such database
    "57P01": _Kind.UNAVAILABLE,  # admin_shutdown (also pg_terminate_backend)
    "57P02": _Kind.UNAVAILABLE,  # crash_shutdown
    "57P03": _Kind.UNAVAILABLE,  # cannot_connect_now (starting up, shutting down)
}
_PG_CLASS_KINDS: Final[Mapping[str, _Kind]] = {
    "08": _Kind.UNAVAILABLE,  # connection exception
    "28": _Kind.UNAVAILABLE,  # invalid authorization specification
}
# MySQL/MariaDB server and client error numbers:
# https://mariadb.com/kb/en/mariadb-error-code-reference/
_MYSQL_KINDS: Final[Mapping[int, _Kind]] = {
    1205: _Kind.CONTENTION,  # ER_LOCK_WAIT_TIMEOUT
    1213: _Kind.CONTENTION,  # ER_LOCK_DEADLOCK
    # ER_AUTOINC_READ_FAILED: what InnoDB reports when the statement lost a deadlock (or timed
    # out) while taking a table's AUTO-INC lock, which INSERT ... SELECT holds to its end; the
    # transaction was rolled back, as for 1213. (Its other cause, a counter past the column's
    # maximum, cannot happen to the BIGINT audit ids.)
    1467: _Kind.CONTENTION,
    1021: _Kind.FULL,  # ER_DISK_FULL
    1114: _Kind.FULL,  # ER_RECORD_FILE_FULL (the table is full)
    1290: _Kind.READ_ONLY,  # ER_OPTION_PREVENTS_STATEMENT (--read-only)
    1792: _Kind.READ_ONLY,  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    1836: _Kind.READ_ONLY,  # ER_READ_ONLY_MODE
    1040: _Kind.UNAVAILABLE,  # ER_CON_COUNT_ERROR (too many connections)
    1044: _Kind.UNAVAILABLE,  # ER_DBACCESS_DENIED_ERROR
    1045: _Kind.UNAVAILABLE,  # ER_ACCESS_DENIED_ERROR
    1049: _Kind.UNAVAILABLE,  # ER_BAD_DB_ERROR (unknown database)
    1053: _Kind.UNAVAILABLE,  # ER_SERVER_SHUTDOWN
    1129: _Kind.UNAVAILABLE,  # ER_HOST_IS_BLOCKED
    1130: _Kind.UNAVAILABLE,  # ER_HOST_NOT_PRIVILEGED
    1152: _Kind.UNAVAILABLE,  # ER_ABORTING_CONNECTION
    1698: _Kind.UNAVAILABLE,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR
    1927: _Kind.UNAVAILABLE,  # ER_CONNECTION_KILLED (MariaDB)
    2002: _Kind.UNAVAILABLE,  # CR_CONNECTION_ERROR (socket)
    2003: _Kind.UNAVAILABLE,  # CR_CONN_HOST_ERROR (TCP: refused, unreachable)
    2005: _Kind.UNAVAILABLE,  # CR_UNKNOWN_HOST
    2006: _Kind.UNAVAILABLE,  # CR_SERVER_GONE_ERROR
    2013: _Kind.UNAVAILABLE,  # CR_SERVER_LOST
    2055: _Kind.UNAVAILABLE,  # CR_SERVER_LOST_EXTENDED
    4031: _Kind.UNAVAILABLE,  # ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
}

# The fallback, for errors that carry no code (raised by the driver itself, or by a driver
# that reports none): what their messages say.
_CONTENTION_MARKERS: Final = (
    "database is locked",
    "database table is locked",
    "database is busy",
)
_UNREACHABLE_MARKERS: Final = (
    "connection refused",
    "could not connect",
    "can't connect",
    "unknown database",
    "does not exist",
    "name or service not known",
    "could not translate host name",
    "connection is closed",
    "connection is lost",
    "hot standby mode",
    "in recovery",
    "server closed the connection",
    "lost connection",
    "connection reset",
    "unable to open database file",
    "access denied",
    "authentication failed",
    "none of the hosts match",  # asyncpg: no server of the list has target_session_attrs
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Said:
    """What a driver error carries besides its message: the backend, and the code with its
    meaning when it has one (see :class:`DatabaseError`)."""

    backend: str | None
    code: str | int | None = None
    kind: _Kind | None = None  # None: no code, the message decides

    def kept(self) -> dict[str, Any]:
        """The ``backend`` and ``code`` keywords of the package's exception."""
        return {"backend": self.backend, "code": self.code}


def _said(driver: BaseException) -> _Said | None:
    """The backend and code of a driver error; None when it is not a database error."""
    if isinstance(driver, sqlite3.Error):
        number = getattr(driver, "sqlite_errorcode", None)
        if not isinstance(number, int):
            return _Said("sqlite")  # raised by the sqlite3 module itself, not by SQLite
        name = getattr(driver, "sqlite_errorname", None)
        kind = _SQLITE_KINDS.get(number & 0xFF, _Kind.OTHER)
        return _Said("sqlite", name if isinstance(name, str) else number, kind)
    module = type(driver).__module__
    if module.startswith(("psycopg", "asyncpg", "sqlalchemy.dialects.postgresql")):
        state = _sqlstate(driver)
        if state is None:
            return _Said("postgresql")  # a client-side error: no SQLSTATE
        return _Said(
            "postgresql", state, _PG_KINDS.get(state) or _PG_CLASS_KINDS.get(state[:2], _Kind.OTHER)
        )
    if module.startswith(("pymysql", "aiomysql", "sqlalchemy.dialects.mysql")):
        args = getattr(driver, "args", ())
        if not args or type(args[0]) is not int or args[0] <= 0:
            return _Said("mysql")
        return _Said("mysql", args[0], _MYSQL_KINDS.get(args[0], _Kind.OTHER))
    if isinstance(driver, OSError) and _raised_in(driver, "asyncpg"):
        # asyncpg lets the socket's own error through when it cannot reach the server.
        name = errno.errorcode.get(driver.errno or 0, type(driver).__name__)
        return _Said("postgresql", name, _Kind.UNAVAILABLE)
    if module.startswith("sqlalchemy"):
        return _Said(None)
    return None


def _sqlstate(exc: BaseException) -> str | None:
    for attribute in ("sqlstate", "pgcode"):
        value = getattr(exc, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether ``exc`` came up through the code of ``package``."""
    frame = exc.__traceback__
    while frame is not None:
        name = frame.tb_frame.f_globals.get("__name__", "")
        if name == package or name.startswith(f"{package}."):
            return True
        frame = frame.tb_next
    return False


def _kind_from_message(lowered: str) -> _Kind:
    if "database disk image is malformed" in lowered:
        return _Kind.CORRUPT
    if "file is not a database" in lowered or "file is encrypted" in lowered:
        return _Kind.NOT_A_DATABASE
    if "readonly database" in lowered or "read-only" in lowered or "read only" in lowered:
        return _Kind.READ_ONLY
    if "disk is full" in lowered or "disk full" in lowered:
        return _Kind.FULL
    if any(marker in lowered for marker in _UNREACHABLE_MARKERS):
        return _Kind.UNAVAILABLE
    return _Kind.OTHER


def corrupt_error(
    where: str, damage: str, *, code: str | int | None = None
) -> DatabaseCorruptError:
    """The one message for a damaged SQLite file: what SQLite said, and how to recover."""
    return DatabaseCorruptError(
        f"{where} is damaged ({damage}); nothing more was written to it. Recover what it holds "
        f"with `sqlite3 '{where}' \".recover\" | sqlite3 recovered.db` and use the recovered file",
        backend="sqlite",
        code=code,
    )


def missing_database(where: str) -> DatabaseUnavailableError:
    """The one message for a database file that does not exist where one must."""
    return DatabaseUnavailableError(
        f"there is no database at {where}",
        backend="sqlite",
    )


def is_retryable(exc: BaseException) -> bool:
    """True for lock contention: the whole transaction can safely be run again.

    The driver's code decides (SQLITE_BUSY/LOCKED, SQLSTATE 40001/40P01/55P03, MySQL 1205/1213);
    an error without a code is judged by its message.
    """
    driver = _driver_error(exc)
    if isinstance(driver, ConcurrentChangeError):
        return True
    if isinstance(driver, HermesStateError):
        # The package's own verdict (a lost turn lease, a closed session, patience run out as
        # DatabaseBusyError): final, even when its text quotes an id that reads like contention.
        return False
    said = _said(driver)
    if said is not None and said.kind is not None:
        return said.kind is _Kind.CONTENTION
    message = str(driver).lower()
    return any(marker in message for marker in _CONTENTION_MARKERS)


#: Upstream's UNIQUE index on ``sessions.title`` (the models declare it under this name).
TITLE_INDEX: Final = "idx_sessions_title_unique"
#: SQLITE_CONSTRAINT_UNIQUE and SQLITE_CONSTRAINT_PRIMARYKEY's shared primary code.
_SQLITE_CONSTRAINT: Final = 19


def _duplicate_title(driver: BaseException, said: _Said, message: str) -> bool:
    """Whether the driver error is a second session with a title already taken: classified by
    the driver's code first, then by which index it names."""
    if said.backend == "sqlite":
        code = getattr(driver, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF != _SQLITE_CONSTRAINT:
            return False
        return "unique constraint failed: sessions.title" in message.lower()
    if said.backend == "postgresql":
        if said.code != "23505":  # unique_violation
            return False
        diag = getattr(driver, "diag", None)  # psycopg
        constraint = getattr(diag, "constraint_name", None) or getattr(
            driver,
            "constraint_name",
            None,  # asyncpg
        )
        return constraint == TITLE_INDEX if constraint else TITLE_INDEX in message
    if said.backend == "mysql":
        # ER_DUP_ENTRY: "Duplicate entry '...' for key '[sessions.]idx_sessions_title_unique'".
        return said.code == 1062 and f"{TITLE_INDEX}'" in message
    return False


def _title_of(exc: BaseException, driver: BaseException, message: str) -> str | None:
    """The title that clashed: from the parameters of the plan step that failed (see
    :func:`keep_step_params`), else from PostgreSQL's detail or MySQL's message (which the
    server may have re-encoded)."""
    params = getattr(exc, _STEP_PARAMS, None)
    if isinstance(params, Mapping) and isinstance(params.get("title"), str):
        return str(params["title"])
    detail = getattr(getattr(driver, "diag", None), "message_detail", None) or getattr(
        driver, "detail", None
    )
    found = re.search(r"Key \(title\)=\((.*)\) already exists", str(detail or message), re.S)
    if found:
        return found.group(1)
    found = re.search(r"Duplicate entry '(.*)' for key", message, re.S)
    return found.group(1) if found else None


#: The attribute :func:`keep_step_params` leaves on an error: the failed step's parameters.
_STEP_PARAMS: Final = "hermes_state_step_params"


def keep_step_params(exc: BaseException, params: Mapping[str, Any]) -> None:
    """Leave a failed plan step's parameters on its error, so the translation can quote the
    value at fault (the SQLite runner sends statements to the driver itself, whose errors
    carry none). Called from an ``except`` clause: nothing is paid when nothing fails."""
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, _STEP_PARAMS, params)


def _title_taken(exc: BaseException, driver: BaseException, message: str) -> InvalidInputError:
    title = _title_of(exc, driver, message)
    named = "this title" if title is None else f"the title {title!r}"
    return InvalidInputError(
        f"another session already has {named}: session titles are unique "
        f"(upstream's {TITLE_INDEX}); choose another title or leave it unset"
    )


def translate(exc: BaseException, *, where: str) -> HermesStateError | None:
    """Map a driver or SQLAlchemy error to the package's hierarchy; None when it is not one.

    ``where`` names the database (URL with the password masked, or the file path) so that the
    message says which database failed and what to do about it. The class comes from the
    driver's code when it gives one, else from the message; the backend and the code are kept
    on the result (:class:`DatabaseError`).
    """
    if isinstance(exc, HermesStateError):
        return exc
    driver = _driver_error(exc)
    said = _said(driver)
    if said is None and driver is not exc:
        said = _said(exc)
    if said is None:
        return None
    message = str(driver).strip()
    if _duplicate_title(driver, said, message):
        return _title_taken(exc, driver, message)
    kind = said.kind or _kind_from_message(message.lower())
    kept = said.kept()
    if kind is _Kind.CORRUPT:
        return corrupt_error(where, message, code=said.code)
    if kind is _Kind.NOT_A_DATABASE:
        return NotADatabaseError(
            f"{where} is not an SQLite database; it was not modified",
            **kept,
        )
    if kind is _Kind.READ_ONLY and said.backend in ("postgresql", "mysql"):
        return DatabaseUnavailableError(
            f"{where} takes no writes ({message.rstrip('.')}): the server is a standby or is "
            "set read-only, as during a failover. Retry once a primary is up; list every server "
            "of the cluster in the URL, with target_session_attrs=read-write on PostgreSQL, so "
            "that connections follow the primary.",
            **kept,
        )
    if kind is _Kind.READ_ONLY:
        return ReadOnlyDatabaseError(
            f"{where} is read-only ({message}); check the permissions of the file and its folder.",
            **kept,
        )
    if kind is _Kind.FULL:
        return DiskFullError(f"{where} is full ({message}); free space and try again.", **kept)
    if kind is _Kind.UNAVAILABLE:
        hint = (
            "Check the URL and that the server is running and accepts this user."
            if "://" in where
            else "Check the path and the permissions of the file and its folder."
        )
        return DatabaseUnavailableError(
            f"cannot open {where}: {message.rstrip('.')}. {hint}", **kept
        )
    return DatabaseError(f"database error on {where}: {message}", **kept)


def with_code_of(error: DatabaseError, exc: BaseException) -> DatabaseError:
    """``error`` (raised by hermes-state because of ``exc``) with the backend and code of
    ``exc`` when it has none of its own: a store that gave up on lock contention says which."""
    said = _said(_driver_error(exc))
    if error.code is None and said is not None:
        error.backend, error.code = said.backend, said.code
    return error


def raise_translated(exc: BaseException, where: str) -> None:
    """Re-raise a database error as the package's own exception; leave anything else alone."""
    error = translate(exc, where=where)
    if error is not None and error is not exc:
        raise error from exc


@contextlib.contextmanager
def translated(where: str) -> Iterator[None]:
    """Database errors raised inside become the package's own, naming ``where``."""
    try:
        yield
    except Exception as exc:
        raise_translated(exc, where)
        raise
