"""Runs plans in transactions on synchronous connections: retries, errors, the fast paths.

Three runners share one contract (``run(plan)``, ``run_callable(fn)``, ``close()``):

* :class:`PooledRunner` is plain SQLAlchemy: ``engine.connect()`` and ``begin()`` per
  transaction. MariaDB/MySQL use it for everything, the others for ``run_callable``.
* :class:`PostgresRunner` keeps psycopg connections in autocommit and sends each plan's
  statements, compiled once, itself: a transition is one ``execute``, one round trip.
* :class:`SqliteThreadRunner` keeps one DBAPI connection per thread, compiles each statement
  once and issues ``BEGIN IMMEDIATE`` / ``COMMIT`` itself. A one-statement transition then
  costs little more than the same statement sent through the ``sqlite3`` module (see
  ``bench/write_path.py``); a ``with engine.begin()`` per call costs several times as much.
  Parameters go through SQLAlchemy's own bind processors; statements that need per-call
  rendering (expanding IN lists) or result processing are refused (the plans use none on
  SQLite, and the test suite runs every plan here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from sqlalchemy import Connection, CursorResult, Engine, Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.types import NullType

from .engine import BUSY_TIMEOUT_MS, READ_ONLY, Patience, dispose, server_closed
from .errors import (
    DatabaseBusyError,
    DatabaseError,
    is_retryable,
    keep_step_params,
    raise_translated,
    with_code_of,
)
from .plans import Body, Outcome, Plan, Step
from .statements import Capabilities

__all__ = [
    "PooledRunner",
    "PostgresRunner",
    "Runner",
    "SqliteThreadRunner",
    "WriteConnection",
    "drive",
    "next_retry_delay",
    "outcome_of",
    "refuse_second_statement",
]

T = TypeVar("T")

#: Every transaction run again (lock contention, a deadlock or serialization victim, rows that
#: changed under a transition) leaves a DEBUG record here, naming why: the one place tests and
#: operators can see that a retry happened. The synchronous runners say each reason once per
#: call: an SQLite writer polling a busy lock tries many times.
retry_logger = logging.getLogger("hermes_state.retry")


class Runner(Protocol):
    def run(self, plan: Plan[T]) -> T: ...

    def run_callable(self, fn: Callable[[WriteConnection], T]) -> T: ...

    def close(self) -> None: ...

    def change_token(self) -> int | None: ...

    def maintain(self, sql: Sequence[str]) -> None: ...


def drive(body: Body[Any], execute: Callable[[Step], Outcome]) -> Any:
    """Feed each step a plan yields to ``execute`` and return what the plan returns."""
    try:
        step = next(body)
        while True:
            try:
                outcome = execute(step)
            except Exception as exc:
                keep_step_params(exc, step.params)
                raise
            step = body.send(outcome)
    except StopIteration as stop:
        return stop.value


def refuse_second_statement(step: Step) -> None:
    """Called when a plan run in autocommit yields another step after its first: a bug, since
    the second statement would not share the first one's transaction (a plan that needs two
    says ``single_statement=False``)."""
    raise RuntimeError(f"a single-statement plan sent a second statement: {step.statement}")


C = TypeVar("C")


def _only_one(connection: C, execute: Callable[[C, Step], Outcome]) -> Callable[[Step], Outcome]:
    """``execute`` for a plan run in autocommit: runs its first step, refuses any other."""
    sent = False

    def execute_one(step: Step) -> Outcome:
        nonlocal sent
        if sent:
            refuse_second_statement(step)
        sent = True
        return execute(connection, step)

    return execute_one


def outcome_of(result: CursorResult[Any], step: Step) -> Outcome:
    """Everything the plan may look at, fetched now so the cursor can go.

    The row count is read first: some drivers (psycopg) forget it once the rows are fetched.
    """
    rowcount = result.rowcount
    rows = [dict(row) for row in result.mappings()] if result.returns_rows else []
    lastrowid = result.lastrowid if step.wants_lastrowid else None
    return Outcome(rowcount=rowcount, rows=rows, lastrowid=lastrowid)


def next_retry_delay(
    exc: Exception, delays: Iterator[float], where: str, told: set[str] | None = None
) -> float:
    """How long to wait before running a failed transaction again; raises when it must not be.

    Lock contention is retried until the store's patience runs out. Any other database error
    is raised as the package's own exception; anything else (a bug, a caller's exception inside
    ``_execute_write``) propagates unchanged. The retry is logged unless its reason is in
    ``told`` (to which it is added).
    """
    if not is_retryable(exc):
        raise_translated(exc, where)
        raise exc
    try:
        delay = next(delays)
    except DatabaseBusyError as busy:
        raise with_code_of(busy, exc) from exc
    reason = _first_line(exc)
    if told is None or reason not in told:
        retry_logger.debug("running a transaction on %s again: %s", where, reason)
        if told is not None:
            told.add(reason)
    return delay


def _first_line(exc: Exception) -> str:
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0] if lines else ''}"


def retrying(attempt: Callable[[], T], schedule: Callable[[str], Iterator[float]], where: str) -> T:
    """Run ``attempt`` until it succeeds, retrying lock contention with the pauses of
    ``schedule`` (a :class:`Patience` method), each reason logged once."""
    delays: Iterator[float] | None = None
    told: set[str] = set()
    while True:
        try:
            return attempt()
        except Exception as exc:
            delays = delays or schedule(where)
            time.sleep(next_retry_delay(exc, delays, where, told))


class WriteConnection:
    """What ``SessionDB._execute_write`` hands its callable.

    ``execute`` takes a SQLAlchemy statement, or raw SQL in the driver's paramstyle (``?`` on
    SQLite, ``%s`` on psycopg and PyMySQL) with a tuple or dict of parameters.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def execute(self, statement: str | Executable, parameters: Any = None) -> CursorResult[Any]:
        if isinstance(statement, str):
            return self.connection.exec_driver_sql(statement, parameters or ())
        return self.connection.execute(statement, parameters)


def _in_forked_children(method: Callable[[], None]) -> None:
    """Call the bound ``method`` in every child forked from now on, while its object lives
    (held weakly: registering does not keep a closed runner alive)."""
    forget = weakref.WeakMethod(method)

    def after_fork_in_child() -> None:
        alive = forget()
        if alive is not None:
            alive()

    os.register_at_fork(after_in_child=after_fork_in_child)


class PooledRunner:
    """Plain SQLAlchemy: a pooled connection and a transaction per unit of work."""

    def __init__(self, engine: Engine, patience: Patience, where: str) -> None:
        self._engine = engine
        self._patience = patience
        self._where = where
        # Read after the schema check connected, so server-version-dependent flags are known.
        self._caps = Capabilities.of(engine.dialect)

    def _execute(self, connection: Connection, step: Step) -> Outcome:
        return outcome_of(connection.execute(step.statement, step.params), step)

    def run(self, plan: Plan[T]) -> T:
        autocommit = plan.single_statement and self._caps.single_statement

        def attempt() -> Any:
            with self._engine.connect() as connection:
                if autocommit:
                    # The one statement is its own transaction: no BEGIN, no COMMIT.
                    connection.execution_options(isolation_level="AUTOCOMMIT")
                    return drive(plan.start(self._caps), _only_one(connection, self._execute))
                connection.execution_options(**{READ_ONLY: not plan.writes})
                with connection.begin():
                    return drive(
                        plan.start(self._caps), lambda step: self._execute(connection, step)
                    )

        return plan.finish(retrying(attempt, self._patience.delays, self._where))

    def run_callable(self, fn: Callable[[WriteConnection], T]) -> T:
        def attempt() -> T:
            with self._engine.begin() as connection:
                return fn(WriteConnection(connection))

        return retrying(attempt, self._patience.delays, self._where)

    def change_token(self) -> int | None:
        """Servers have no cheap change counter: None means "look"."""
        return None

    def maintain(self, sql: Sequence[str]) -> None:
        """Send ``sql`` (maintenance such as VACUUM, which no transaction may hold) on a
        connection of its own in autocommit, each statement's result read and dropped."""

        def attempt() -> None:
            with self._engine.connect() as connection:
                connection = connection.execution_options(isolation_level="AUTOCOMMIT")
                for statement in sql:
                    result = connection.exec_driver_sql(statement)
                    if result.returns_rows:
                        result.fetchall()
                    result.close()

        retrying(attempt, self._patience.delays, self._where)

    def close(self) -> None:
        # A writable SQLite store checkpoints its WAL first (see engine.dispose).
        dispose(self._engine)


_CALLER = object()  # marks a parameter slot the caller fills
Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement compiled once: its SQL and, per ``?``, where the value comes from.

    Each slot is (the caller's parameter name, a constant or ``_CALLER``, SQLAlchemy's bind
    processor for the type or None), so values are converted exactly as SQLAlchemy would.
    """

    sql: str
    slots: tuple[tuple[str, object, Processor | None], ...]

    def parameters(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        values = []
        for name, constant, processor in self.slots:
            value = params[name] if constant is _CALLER else constant
            values.append(value if processor is None or value is None else processor(value))
        return tuple(values)


class _ThreadConnection:
    """The DBAPI connection one thread keeps, checked out of the engine's pool.

    ``polled``: SQLite's busy wait is off on it while the runner holds it, since the runner
    polls for the write lock itself (:meth:`Patience.polls`); it goes back to the pool with the
    engine's setting.
    """

    __slots__ = ("__weakref__", "closed", "dbapi", "polled", "pooled")

    def __init__(self, engine: Engine, *, polled: bool = False) -> None:
        self.pooled = engine.raw_connection()
        self.dbapi: sqlite3.Connection = self.pooled.driver_connection  # type: ignore[assignment]
        self.polled = polled
        self.closed = False
        if polled:
            try:
                self.dbapi.execute("PRAGMA busy_timeout = 0")
            except BaseException:
                self.pooled.invalidate()
                raise

    def close(self) -> None:
        # Runs at thread exit too (maybe after the store closed it), where an exception would
        # only be printed.
        if self.closed:
            return
        self.closed = True
        try:
            self.dbapi.row_factory = None
            if self.polled:
                self.dbapi.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except Exception:
            with contextlib.suppress(Exception):
                self.pooled.invalidate()  # never back into the pool without its busy wait
            return
        with contextlib.suppress(Exception):
            self.pooled.close()

    def discard(self) -> None:
        """Close it for good, never to be pooled again (it failed)."""
        self.closed = True
        self.pooled.invalidate()


class SqliteThreadRunner(PooledRunner):
    """SQLite: a connection per thread, statements compiled once, BEGIN IMMEDIATE sent directly."""

    def __init__(self, engine: Engine, patience: Patience, where: str) -> None:
        super().__init__(engine, patience, where)
        self._dialect = engine.dialect
        self._local = threading.local()
        # Hits are looked up in a plain dict of this store's own; misses in the process's.
        self._compiled: dict[Executable, _Compiled] = {}
        self._compiled_in_process = _compiled_for(engine.dialect)
        self._open: weakref.WeakSet[_ThreadConnection] = weakref.WeakSet()
        self._closed = False
        self._probe: _ThreadConnection | None = None
        self._probe_lock = threading.Lock()
        _in_forked_children(self._forget_connections_after_fork)

    def _forget_connections_after_fork(self) -> None:
        # A forked child must never use its parent's SQLite connections; it opens its own.
        # That covers the thread's, the probe's and those idle in the pool, which SQLAlchemy
        # replaces without closing (closing them would disturb the parent).
        self._local = threading.local()
        self._open = weakref.WeakSet()
        self._probe = None
        self._engine.dispose(close=False)

    def _connection(self) -> sqlite3.Connection:
        holder: _ThreadConnection | None = getattr(self._local, "holder", None)
        if holder is None:
            holder = self._local.holder = self._open_for_thread(polled=True)
        return holder.dbapi

    def _open_for_thread(self, *, polled: bool) -> _ThreadConnection:
        if self._closed:
            raise DatabaseError(f"the store for {self._where} is closed")
        holder = _ThreadConnection(self._engine, polled=polled)
        self._open.add(holder)
        weakref.finalize(threading.current_thread(), holder.close)
        return holder

    def thread_connection(self) -> sqlite3.Connection:
        """The calling thread's DBAPI connection for SQL sent outside the store's plans, opened
        on first use. Not the one the plans run on: that one polls for the write lock with
        SQLite's busy wait off, and raw SQL on it would then fail at the first contention;
        this one waits for a lock as every engine connection does (``BUSY_TIMEOUT_MS``)."""
        holder: _ThreadConnection | None = getattr(self._local, "outside", None)
        if holder is None:
            holder = self._local.outside = self._open_for_thread(polled=False)
            # Rows by name as well as by index, as upstream's own connection gives them (its
            # callers read ``row["id"]``); reset before the connection goes back to the pool.
            holder.dbapi.row_factory = sqlite3.Row
        return holder.dbapi

    def _drop_connection(self) -> None:
        holder: _ThreadConnection | None = getattr(self._local, "holder", None)
        if holder is not None:
            self._local.holder = None
            holder.discard()

    def _compile(self, statement: Executable) -> _Compiled:
        try:
            return self._compiled[statement]
        except KeyError:
            pass
        compiled_once = self._compiled_in_process.get(statement)
        if compiled_once is not None:
            self._compiled[statement] = compiled_once
            return compiled_once
        assert isinstance(statement, ClauseElement)
        compiled = statement.compile(dialect=self._dialect)
        assert isinstance(compiled, SQLCompiler)
        _require_plain(compiled, self._dialect)
        slots = []
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            constant = _CALLER if bind.required else bind.value
            slots.append((name, constant, bind.type.bind_processor(self._dialect)))
        fast = _Compiled(compiled.string, tuple(slots))
        self._compiled[statement] = self._compiled_in_process[statement] = fast
        return fast

    def _execute_step(self, connection: sqlite3.Connection, step: Step) -> Outcome:
        compiled = self._compile(step.statement)
        cursor = connection.execute(compiled.sql, compiled.parameters(step.params))
        if cursor.description is None:
            return Outcome(rowcount=cursor.rowcount, rows=[], lastrowid=cursor.lastrowid)
        names = [column[0] for column in cursor.description]
        # strict=False: a cursor's rows have its description's length; checking costs ~30%.
        rows = [dict(zip(names, row, strict=False)) for row in cursor.fetchall()]
        return Outcome(rowcount=cursor.rowcount, rows=rows)

    def run(self, plan: Plan[T]) -> T:
        begin = "BEGIN IMMEDIATE" if plan.writes else "BEGIN"

        def attempt() -> Any:
            connection = self._connection()
            try:
                connection.execute(begin)
                body = plan.start(self._caps)
                result = drive(body, lambda step: self._execute_step(connection, step))
                connection.execute("COMMIT")
            except BaseException:
                self._abort(connection)
                raise
            return result

        return plan.finish(retrying(attempt, self._patience.polls, self._where))

    def maintain(self, sql: Sequence[str]) -> None:
        """SQLite: ``sql`` on a pooled DBAPI connection, in autocommit (an engine connection
        would begin a transaction, which VACUUM refuses); it waits for a busy lock as every
        engine connection does."""

        def attempt() -> None:
            pooled = self._engine.raw_connection()
            try:
                for statement in sql:
                    cursor = pooled.cursor()
                    try:
                        cursor.execute(statement)
                        cursor.fetchall()
                    finally:
                        cursor.close()
            finally:
                pooled.close()

        retrying(attempt, self._patience.delays, self._where)

    def change_token(self) -> int | None:
        """SQLite's ``PRAGMA data_version`` on a connection that never writes: it changes
        whenever any other connection, in any process, commits to the database."""
        with self._probe_lock:
            try:
                if self._probe is None:
                    self._probe = _ThreadConnection(self._engine)
                row = self._probe.dbapi.execute("PRAGMA data_version").fetchone()
            except Exception as exc:
                raise_translated(exc, self._where)
                raise
        return int(row[0])

    def _abort(self, connection: sqlite3.Connection) -> None:
        try:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except sqlite3.Error:
            self._drop_connection()  # unusable: the next call opens a fresh one

    def close(self) -> None:
        self._closed = True
        for holder in [*self._open, *([self._probe] if self._probe else [])]:
            holder.close()
        self._local = threading.local()
        super().close()


#: What the runners compiled, per dialect flavour, for the whole process: stores opened one
#: after another (a gateway's profile stores, one per home; a CLI command's; a test's) compile
#: each statement once, not once per store. Keyed weakly: a statement nothing builds any more
#: (the builders cache theirs for good) takes its compiled form with it.
_COMPILED: dict[Hashable, weakref.WeakKeyDictionary[Executable, _Compiled]] = {}
_COMPILED_LOCK = threading.Lock()


def _compiled_for(dialect: Any) -> weakref.WeakKeyDictionary[Executable, _Compiled]:
    # Everything compilation reads from the dialect: its class, paramstyle and the version of
    # the library it talks to (which decides e.g. RETURNING); the same for every engine of one
    # process, so in practice there is one entry.
    flavour = (type(dialect), dialect.paramstyle, dialect.server_version_info)
    with _COMPILED_LOCK:
        return _COMPILED.setdefault(flavour, weakref.WeakKeyDictionary())


def _require_plain(compiled: SQLCompiler, dialect: Any) -> None:
    """Refuse what this runner cannot send as compiled: expanding parameters, result types."""
    if compiled.positiontup is None or "POSTCOMPILE" in compiled.string:
        raise TypeError(
            f"statement needs per-call rendering, not supported here: {compiled.string}"
        )
    for column in getattr(compiled.statement, "exported_columns", ()):
        if column.type.result_processor(dialect, None) is not None:
            raise TypeError(f"column {column} needs result processing, not supported here")


# -- PostgreSQL ---------------------------------------------------------------------------------

#: What a plan of several statements runs in: the engine's isolation level, as SQLAlchemy's
#: psycopg dialect would begin it.
_PG_BEGIN: Final = "BEGIN ISOLATION LEVEL READ COMMITTED"
#: The statement builders are cached, so their statements are few; this bounds the cache if a
#: caller builds a statement per call.
_MAX_COMPILED: Final = 500


@dataclass(slots=True)
class _NamedCompiled:
    """A statement compiled once for a driver with named parameters (psycopg's
    ``%(name)s``): its SQL and, per parameter, where the value comes from (see
    :class:`_Compiled`). ``columns`` are the statement's result columns; ``names`` and
    ``processors`` (SQLAlchemy's result processors, which depend on the type the server
    sends) are learnt from the first result: the SQL is fixed, so they are too."""

    sql: str
    slots: tuple[tuple[str, str, object, Processor | None], ...]
    columns: tuple[Any, ...]
    names: list[str] | None = None
    processors: list[Processor | None] | None = None

    def parameters(self, params: Mapping[str, Any]) -> dict[str, Any]:
        values = {}
        for name, key, constant, processor in self.slots:
            value = params[key] if constant is _CALLER or key in params else constant
            values[name] = value if processor is None or value is None else processor(value)
        return values


class _PgConnection:
    """A psycopg connection the runner keeps checked out of the engine's pool, in autocommit."""

    __slots__ = ("cursor", "dbapi", "pooled")

    def __init__(self, engine: Engine) -> None:
        self.pooled = engine.raw_connection()
        dbapi: Any = self.pooled.driver_connection
        self.dbapi = dbapi
        try:
            dbapi.autocommit = True
            self.cursor: Any = dbapi.cursor()
        except BaseException:
            self.pooled.invalidate()
            raise

    def usable(self) -> bool:
        """Still good to send on after a failure: open, and not inside a transaction."""
        from psycopg.pq import TransactionStatus

        dbapi = self.dbapi
        if dbapi.closed or dbapi.broken:
            return False
        status = dbapi.info.transaction_status
        if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            try:
                dbapi.rollback()
            except Exception:
                return False
            status = dbapi.info.transaction_status
        return bool(status == TransactionStatus.IDLE)

    def give_back(self) -> None:
        """Return it to the engine's pool as the pool lent it (not in autocommit)."""
        try:
            self.dbapi.autocommit = False
        except Exception:
            self.discard()
            return
        with contextlib.suppress(Exception):
            self.pooled.close()

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.pooled.invalidate()


class PostgresRunner(PooledRunner):
    """PostgreSQL: psycopg connections kept in autocommit, statements compiled once.

    A one-statement plan (every transition) is sent as it is: one round trip, no BEGIN and
    no COMMIT, on a connection taken from the runner's own free list (no pool checkout, no
    isolation-level switch, no reset), its parameters converted by SQLAlchemy's bind
    processors and its rows built straight from the cursor. A plan of several statements runs
    between ``BEGIN`` and ``COMMIT`` on the same kind of connection. ``_execute_write`` stays
    on SQLAlchemy's connections. Result values go through SQLAlchemy's result processors where
    a type has one. Statements that would need per-call rendering (expanding IN lists) are
    refused with TypeError (the plans use none on PostgreSQL; the test suite runs every plan
    here).

    Connections come from the engine's pool, so its limits hold; at most the pool's size stay
    idle here, and an idle one the server closed is replaced without a round trip (the same
    check as the pool's checkout). A forked child forgets its parent's connections.
    """

    def __init__(self, engine: Engine, patience: Patience, where: str) -> None:
        super().__init__(engine, patience, where)
        self._dialect = engine.dialect
        self._compiled: dict[Executable, _NamedCompiled] = {}
        self._idle: list[_PgConnection] = []
        size = getattr(engine.pool, "size", None)
        self._keep = size() if callable(size) else 5
        self._lock = threading.Lock()
        self._closed = False
        _in_forked_children(self._forget_connections_after_fork)

    def _forget_connections_after_fork(self) -> None:
        # A child must not talk on its parent's sockets; psycopg does not close a connection
        # garbage-collected in another process than the one that opened it.
        self._idle = []
        self._lock = threading.Lock()
        self._engine.dispose(close=False)

    def _checkout(self) -> _PgConnection:
        while True:
            with self._lock:
                if self._closed:
                    raise DatabaseError(f"the store for {self._where} is closed")
                held = self._idle.pop() if self._idle else None
            if held is None:
                return _PgConnection(self._engine)
            if not server_closed(held.dbapi):
                return held
            held.discard()

    def _checkin(self, held: _PgConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._keep:
                self._idle.append(held)
                return
            closed = self._closed
        if closed:
            held.discard()
        else:
            held.give_back()

    def _compile(self, statement: Executable) -> _NamedCompiled:
        try:
            return self._compiled[statement]
        except KeyError:
            pass
        assert isinstance(statement, ClauseElement)
        dialect = self._dialect
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise TypeError(
                f"statement needs per-call rendering, not supported here: {compiled.string}"
            )
        slots = []
        for bind, name in compiled.bind_names.items():
            if bind.callable is not None:
                raise TypeError(f"parameter {bind.key!r} takes a callable, not supported here")
            constant = _CALLER if bind.required else bind.value
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            out = compiled.escaped_bind_names.get(name, name)
            slots.append((out, bind.key, constant, processor))
        columns = tuple(getattr(compiled.statement, "exported_columns", ()))
        fast = _NamedCompiled(compiled.string, tuple(slots), columns)
        if len(self._compiled) >= _MAX_COMPILED:  # statements built per call: do not grow
            self._compiled.clear()
        self._compiled[statement] = fast
        return fast

    def _learn_result(self, compiled: _NamedCompiled, description: Any) -> None:
        """The result's names, and the result processors SQLAlchemy would apply to them."""
        dialect = self._dialect
        names = [column.name for column in description]
        if len(compiled.columns) == len(names):
            processors = [
                column.type.dialect_impl(dialect).result_processor(dialect, sent.type_code)
                for column, sent in zip(compiled.columns, description, strict=True)
            ]
        elif all(isinstance(column.type, NullType) for column in compiled.columns):
            processors = [None] * len(names)  # ``*``: untyped, delivered as the driver reads it
        else:
            raise TypeError(f"cannot match the result columns of {compiled.sql!r} to its types")
        compiled.processors = processors if any(processors) else None
        compiled.names = names

    def _execute_step(self, held: _PgConnection, step: Step) -> Outcome:
        compiled = self._compile(step.statement)
        cursor = held.cursor
        # Results in binary: numbers then cross the wire as they are stored, which spares the
        # server formatting them as text and the client parsing them back.
        cursor.execute(compiled.sql, compiled.parameters(step.params), binary=True)
        rowcount = cursor.rowcount
        if cursor.pgresult is None or not cursor.pgresult.nfields:
            return Outcome(rowcount=rowcount, rows=[])
        if compiled.names is None:
            self._learn_result(compiled, cursor.description)
        names = compiled.names
        assert names is not None
        processors = compiled.processors
        if processors is None:
            # strict=False: a row has the description's length; checking costs ~30%.
            rows = [dict(zip(names, row, strict=False)) for row in cursor.fetchall()]
        else:
            rows = [
                {
                    name: value if processor is None or value is None else processor(value)
                    for name, processor, value in zip(names, processors, row, strict=True)
                }
                for row in cursor.fetchall()
            ]
        return Outcome(rowcount=rowcount, rows=rows)

    def run(self, plan: Plan[T]) -> T:
        autocommit = plan.single_statement and self._caps.single_statement

        def attempt() -> Any:
            held = self._checkout()
            try:
                body = plan.start(self._caps)
                if autocommit:
                    result = drive(body, _only_one(held, self._execute_step))
                else:
                    held.cursor.execute(_PG_BEGIN)
                    result = drive(body, lambda step: self._execute_step(held, step))
                    held.cursor.execute("COMMIT")
            except BaseException:
                if held.usable():
                    self._checkin(held)
                else:
                    held.discard()
                raise
            self._checkin(held)
            return result

        return plan.finish(retrying(attempt, self._patience.delays, self._where))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for held in idle:
            held.discard()
        super().close()
