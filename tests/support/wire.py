"""What stores send to a database, seen at the driver: each statement, and the round trips counted.

:func:`sqlite_wire` collects every SQL text new SQLite connections send while it is active
(``sqlite3``'s trace callback: parameters expanded, BEGIN and COMMIT included).

:func:`driver_wire` wraps the cursors of psycopg and PyMySQL for as long as it is active, so it
sees every statement whichever path sent it (SQLAlchemy's connections or a runner's own). Round
trips are counted below the statements:

* PostgreSQL: libpq traces every connection from the first statement it sends inside the
  wire; each ``ReadyForQuery`` the server sends ends one round trip (a BEGIN or COMMIT that
  psycopg sends by itself counts too, though it is no cursor statement).
* MariaDB/MySQL: every command PyMySQL writes (a query, a ping, ...) waits for its answer, so
  each one is a round trip.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import psycopg
import pymysql
import pytest
from psycopg.pq import Trace
from sqlalchemy import event
from sqlalchemy.pool import Pool

__all__ = ["Sent", "Wire", "driver_wire", "sqlite_wire"]


@dataclass(frozen=True, slots=True)
class Sent:
    """One statement: its SQL and parameters as handed to the driver, and whether the
    connection was in autocommit (no transaction around it)."""

    sql: str
    params: Any
    autocommit: bool


@dataclass
class Wire:
    statements: list[Sent] = field(default_factory=list)
    #: Round trips per backend name, filled in when the wire is taken off.
    round_trips: dict[str, int] = field(default_factory=dict)
    #: Every command PyMySQL wrote: (command byte, its text), e.g. (3, "COMMIT") or (14, "").
    commands: list[tuple[int, str]] = field(default_factory=list)
    _traces: dict[int, tuple[Any, IO[bytes]]] = field(default_factory=dict)

    def saw_pg(self, connection: Any, sql: Any, params: Any) -> None:
        if id(connection) not in self._traces and not connection.closed:
            trace = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish)
            connection.pgconn.trace(trace.fileno())
            connection.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
            self._traces[id(connection)] = (connection, trace)
        text = sql if isinstance(sql, str) else bytes(sql).decode()
        self.statements.append(Sent(text, params, bool(connection.autocommit)))

    def saw_mysql(self, connection: Any, sql: str, params: Any) -> None:
        self.statements.append(Sent(sql, params, bool(connection.get_autocommit())))

    def command(self, command: int, sql: Any) -> None:
        text = sql if isinstance(sql, str) else bytes(sql).decode(errors="replace")
        self.commands.append((command, text))
        self.round_trips["mysql"] = self.round_trips.get("mysql", 0) + 1

    def finish(self) -> None:
        total = 0
        for connection, trace in self._traces.values():
            if not connection.closed:
                connection.pgconn.untrace()
            trace.seek(0)
            total += trace.read().decode(errors="replace").count("\tReadyForQuery\t")
            trace.close()
        if self._traces:
            self.round_trips["postgresql"] = total
        self._traces.clear()

    def sql(self) -> list[str]:
        return [sent.sql for sent in self.statements]


@contextlib.contextmanager
def driver_wire() -> Iterator[Wire]:
    """Record every statement psycopg and PyMySQL cursors execute, and count round trips."""
    wire = Wire()
    pg_execute = psycopg.Cursor.execute
    mysql_execute = pymysql.cursors.Cursor.execute
    mysql_command = pymysql.connections.Connection._execute_command

    def on_pg(cursor: Any, query: Any, params: Any = None, **options: Any) -> Any:
        wire.saw_pg(cursor.connection, query, params)
        return pg_execute(cursor, query, params, **options)

    def on_mysql(cursor: Any, query: str, args: Any = None) -> Any:
        wire.saw_mysql(cursor.connection, query, args)
        return mysql_execute(cursor, query, args)

    def on_command(connection: Any, command: int, sql: Any) -> Any:
        wire.command(command, sql)
        return mysql_command(connection, command, sql)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", on_pg)
        patch.setattr(pymysql.cursors.Cursor, "execute", on_mysql)
        patch.setattr(pymysql.connections.Connection, "_execute_command", on_command)
        try:
            yield wire
        finally:
            wire.finish()


@contextlib.contextmanager
def sqlite_wire() -> Iterator[list[str]]:
    """Every SQL text any new SQLite connection sends while active, parameters expanded."""
    sent: list[str] = []

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.set_trace_callback(sent.append)

    event.listen(Pool, "connect", on_connect)
    try:
        yield sent
    finally:
        event.remove(Pool, "connect", on_connect)
