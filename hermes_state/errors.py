"""The package's one exception hierarchy, and the single place database errors are translated."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Final

__all__ = [
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
    "SideTaskFailed",
    "UnknownSessionError",
    "corrupt_error",
    "is_retryable",
    "raise_translated",
    "translate",
    "translated",
]


class HermesStateError(Exception):
    """Root of every error hermes-state raises on purpose."""


class InvalidInputError(HermesStateError, ValueError):
    """An argument has the right type but an unusable value (empty, too long, control chars)."""


class InvalidInputTypeError(HermesStateError, TypeError):
    """An argument has the wrong type."""


class DatabaseError(HermesStateError):
    """A database operation failed for a reason not covered by a more precise subclass."""


class DatabaseUnavailableError(DatabaseError):
    """The database cannot be opened or reached."""


class NotADatabaseError(DatabaseUnavailableError):
    """The file exists but is not an SQLite database; it was left untouched."""


class DatabaseCorruptError(DatabaseError):
    """SQLite found the file damaged ("database disk image is malformed", or a failed
    ``PRAGMA quick_check`` before a migration); nothing more was written to it."""


class ForeignDatabaseError(DatabaseError):
    """An SQLite database that belongs to another application; it was left untouched."""


class ReadOnlyDatabaseError(DatabaseError):
    """A write was refused because the database (or its folder) is read-only."""


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


# SQLite's primary result codes (the low byte of ``sqlite3.Error.sqlite_errorcode``).
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26

_SQLITE_LOCKED_MARKERS: Final = (
    "database is locked",
    "database table is locked",
    "database is busy",
)
# PostgreSQL SQLSTATEs for deadlock and serialization failure: the whole transaction may be retried.
_PG_RETRYABLE_SQLSTATES: Final = frozenset({"40P01", "40001", "55P03"})
# MySQL/MariaDB: 1213 deadlock, 1205 lock wait timeout.
_MYSQL_RETRYABLE_ERRNOS: Final = frozenset({1213, 1205})
_UNREACHABLE_MARKERS: Final = (
    "connection refused",
    "could not connect",
    "can't connect",
    "unknown database",
    "does not exist",
    "name or service not known",
    "could not translate host name",
    "connection is closed",
    "server closed the connection",
    "lost connection",
    "connection reset",
    "unable to open database file",
    "access denied",
    "authentication failed",
)


def _driver_error(exc: BaseException) -> BaseException:
    """The DBAPI exception behind a SQLAlchemy wrapper, or ``exc`` itself."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def _sqlstate(exc: BaseException) -> str | None:
    for attribute in ("sqlstate", "pgcode"):
        value = getattr(exc, attribute, None)
        if isinstance(value, str):
            return value
    return None


def _sqlite_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def corrupt_error(where: str, damage: str) -> DatabaseCorruptError:
    """The one message for a damaged SQLite file: what SQLite said, and how to recover."""
    return DatabaseCorruptError(
        f"{where} is damaged ({damage}); nothing more was written to it. Recover what it holds "
        f"with `sqlite3 '{where}' \".recover\" | sqlite3 recovered.db` and use the recovered file"
    )


def _mysql_errno(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def is_retryable(exc: BaseException) -> bool:
    """True for lock contention: the whole transaction can safely be run again."""
    driver = _driver_error(exc)
    if isinstance(driver, ConcurrentChangeError):
        return True
    if isinstance(driver, DatabaseBusyError):
        return False
    message = str(driver).lower()
    if any(marker in message for marker in _SQLITE_LOCKED_MARKERS):
        return True
    if _sqlstate(driver) in _PG_RETRYABLE_SQLSTATES:
        return True
    return _mysql_errno(driver) in _MYSQL_RETRYABLE_ERRNOS


def translate(exc: BaseException, *, where: str) -> HermesStateError | None:
    """Map a driver or SQLAlchemy error to the package's hierarchy; None when it is not one.

    ``where`` names the database (URL with the password masked, or the file path) so that the
    message says which database failed and what to do about it.
    """
    if isinstance(exc, HermesStateError):
        return exc
    driver = _driver_error(exc)
    if not _looks_like_database_error(exc, driver):
        return None
    message = str(driver).strip()
    lowered = message.lower()
    code = _sqlite_code(driver)
    if code == _SQLITE_CORRUPT or "database disk image is malformed" in lowered:
        return corrupt_error(where, message)
    not_a_database = "file is not a database" in lowered or "file is encrypted" in lowered
    if code == _SQLITE_NOTADB or not_a_database:
        return NotADatabaseError(
            f"{where} is not an SQLite database; it was not modified. "
            "Point hermes-state at another file with --url or HERMES_STATE_URL."
        )
    if "readonly database" in lowered or "read-only" in lowered or "read only" in lowered:
        return ReadOnlyDatabaseError(
            f"{where} is read-only ({message}); check the permissions of the file and its folder."
        )
    if "disk is full" in lowered or "disk full" in lowered or _mysql_errno(driver) == 1114:
        return DiskFullError(f"{where} is full ({message}); free space and try again.")
    if any(marker in lowered for marker in _UNREACHABLE_MARKERS):
        hint = (
            "Check the URL and that the server is running and accepts this user."
            if "://" in where
            else "Check the path and the permissions of the file and its folder."
        )
        return DatabaseUnavailableError(f"cannot open {where}: {message.rstrip('.')}. {hint}")
    return DatabaseError(f"database error on {where}: {message}")


def _looks_like_database_error(exc: BaseException, driver: BaseException) -> bool:
    if isinstance(driver, sqlite3.Error):
        return True
    module = type(exc).__module__ + " " + type(driver).__module__
    return any(
        name in module for name in ("sqlalchemy", "psycopg", "asyncpg", "pymysql", "aiomysql")
    )


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
