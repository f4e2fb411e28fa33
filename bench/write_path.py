"""Write path: request, claim and complete through SessionDB against the ``sqlite3`` module.

Requirement (issue 2, item 6): on the embedded SQLite default each of ``request_handoff``,
``claim_handoff`` and ``complete_handoff`` costs at most 1.5x the same transaction sent
directly through ``sqlite3`` with the same pragmas.

The baseline sends exactly what the store sends. A store whose plans are recorded instead of
run (:class:`_PlanRecorder`) gives each call's plan; :func:`_record` runs it once on a scratch
copy, compiling every step's statement (built by :mod:`hermes_state.statements`) with the
SQLite dialect and binding the plan's own values. So the baseline follows the store when a
transition's SQL changes, including the number of statements (one ``UPDATE`` at first; the
audit trail added an ``INSERT``). The case names say how many statements a transaction holds.

Contenders, each on its own copy of one template database (created by opening a ``SessionDB``
on it, so schema and indexes are the store's own):

* ``sqlite3`` (the baseline): one connection with ``isolation_level=None`` and the store's
  pragmas, sending ``BEGIN IMMEDIATE``, the compiled statements with their values (prepared
  before timing, so this is the cheapest way to send that transaction) and ``COMMIT``.
* ``SessionDB``: the store's public method (validation, clock, plan and runner included).
* ``engine.begin()`` and ``Connection``, for context: plain SQLAlchemy Core on an engine
  configured like the store's, a transaction per call on a pooled or on a kept connection.
* ``sqlite3 UPDATE only``, for context and only when a transition holds more than its
  ``UPDATE sessions``: the baseline cut down to that one statement.

Each round takes a fixed set of rows through request -> claim -> complete, so every operation
succeeds; any statement or method that reports something else stops the benchmark, and at
the end every contender's file must hold what the baseline's holds. Two table sizes: 1,000
sessions, and 100,000 sessions (deeper B-trees, rows spread over the file).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import Connection, Dialect, Engine, Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from hermes_state import SessionDB
from hermes_state.engine import BUSY_TIMEOUT_MS, make_engine, resolve_url
from hermes_state.plans import Outcome, Plan
from hermes_state.statements import Capabilities

from .common import Batch, BenchmarkError, Result, interleaved, summarize

__all__ = ["run"]

T = TypeVar("T")

NAME: Final = "write_path"
LIMIT: Final = 1.5
PLATFORM: Final = "telegram"
BASELINE: Final = "sqlite3"
STORE: Final = "SessionDB"
ENGINE_BEGIN: Final = "engine.begin()"
CONNECTION: Final = "Connection"
UPDATE_ONLY: Final = "sqlite3 UPDATE only"
#: Each contender works on its own copy of the template database.
FILE_STEMS: Final = {
    BASELINE: "sqlite3",
    STORE: "store",
    ENGINE_BEGIN: "engine-begin",
    CONNECTION: "connection",
    UPDATE_ONLY: "update-only",
}

#: The operations in the order a round runs them (each needs the state the previous one left).
OPERATIONS: Final[Mapping[str, Callable[[SessionDB, str], object]]] = {
    "request": lambda store, session_id: store.request_handoff(session_id, PLATFORM),
    "claim": lambda store, session_id: store.claim_handoff(session_id),
    "complete": lambda store, session_id: store.complete_handoff(session_id),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure. ``ops_per_round`` rows go through the cycle in every round."""

    table_sizes: tuple[int, ...]
    rounds: int
    warmup: int
    ops_per_round: int


FULL: Final = Settings(table_sizes=(1_000, 100_000), rounds=250, warmup=20, ops_per_round=25)
QUICK: Final = Settings(table_sizes=(1_000, 100_000), rounds=30, warmup=5, ops_per_round=10)


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as folder:
        for size in settings.table_sizes:
            results.extend(_run_size(Path(folder) / f"{size}", size, settings))
    return results


# -- the rows and the statements ---------------------------------------------------------------


def _session_ids(size: int) -> list[str]:
    """Timestamp-and-hex ids of a realistic length (22 characters), in sorting order.

    The length matters: the store validates every character of an id.
    """
    return [f"20260101_000000_{index:06x}" for index in range(size)]


def _cycled_ids(size: int, count: int) -> list[str]:
    """``count`` ids spread evenly over the table (not all on one page)."""
    ids = _session_ids(size)
    return [ids[index * size // count] for index in range(count)]


class _PlanRecorder(SessionDB):
    """A store that keeps the plan of every call instead of running it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.plans: list[Plan[Any]] = []

    def _run(self, plan: Plan[T]) -> T:
        self.plans.append(plan)
        return None  # type: ignore[return-value]  # the recorded calls' results are unused


@dataclass(frozen=True, slots=True)
class _Statement:
    """One statement of a plan: for SQLAlchemy, compiled for sqlite3, and the rows it changed."""

    statement: Executable
    params: Mapping[str, Any]
    sql: str
    values: tuple[Any, ...]
    changed: int


@dataclass(frozen=True, slots=True)
class _Transaction:
    """One operation on one row: the statements the store sends between BEGIN and COMMIT."""

    session_id: str
    statements: tuple[_Statement, ...]


def _compile(statement: Executable, params: Mapping[str, Any], dialect: Dialect) -> _Statement:
    assert isinstance(statement, ClauseElement)
    compiled = statement.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    if compiled.positiontup is None or "POSTCOMPILE" in compiled.string:
        raise BenchmarkError(f"not a plain positional statement: {compiled.string}")
    values = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        if name not in params and bind.required:
            raise BenchmarkError(f"no value for parameter {name!r} of {compiled.string}")
        value = params.get(name, bind.value)
        processor = bind.type.bind_processor(dialect)
        values.append(value if processor is None or value is None else processor(value))
    return _Statement(statement, params, compiled.string, tuple(values), changed=-1)


def _execute_raw(connection: sqlite3.Connection, statement: _Statement) -> Outcome:
    """Run a compiled statement and report it to the plan as the store's runner would."""
    cursor = connection.execute(statement.sql, statement.values)
    if cursor.description is None:
        return Outcome(rowcount=cursor.rowcount, rows=[], lastrowid=cursor.lastrowid)
    names = [column[0] for column in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return Outcome(rowcount=cursor.rowcount, rows=rows)


def _replay(
    connection: sqlite3.Connection, plan: Plan[Any], caps: Capabilities, dialect: Dialect
) -> tuple[tuple[_Statement, ...], object]:
    """Run ``plan`` on a raw connection in one transaction; its statements and its result."""
    body = plan.start(caps)
    statements: list[_Statement] = []
    connection.execute("BEGIN IMMEDIATE")
    try:
        step = next(body)
        while True:
            statement = _compile(step.statement, step.params, dialect)
            outcome = _execute_raw(connection, statement)
            changed = len(outcome.rows) if outcome.rows else outcome.rowcount
            statements.append(dataclasses.replace(statement, changed=changed))
            step = body.send(outcome)
    except StopIteration as stop:
        result = stop.value
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")
    return tuple(statements), plan.finish(result)


def _sqlite_dialect(path: Path) -> Dialect:
    """The dialect of an engine configured like the store's, after it met the database."""
    engine = make_engine(resolve_url(path))
    try:
        with engine.connect():
            pass  # the dialect learns the SQLite version (RETURNING support) on first connect
        return engine.dialect
    finally:
        engine.dispose()


def _record(scratch: Path, ids: list[str]) -> dict[str, list[_Transaction]]:
    """``{operation: [transaction per id]}``: the statements of the store's own plans.

    Each plan is run once on ``scratch`` (a copy of the template), in the order of a round,
    so every statement sees the state it will see in the benchmark and must succeed there.
    """
    dialect = _sqlite_dialect(scratch)
    caps = Capabilities.of(dialect)
    recorder = _PlanRecorder(scratch)
    connection = _connect_sqlite3(scratch)
    try:
        transactions: dict[str, list[_Transaction]] = {}
        for operation, call in OPERATIONS.items():
            transactions[operation] = []
            for session_id in ids:
                call(recorder, session_id)
                statements, result = _replay(connection, recorder.plans.pop(), caps, dialect)
                if result is not True:
                    raise BenchmarkError(f"{operation} of {session_id!r} returned {result!r}")
                transactions[operation].append(_Transaction(session_id, statements))
        return transactions
    finally:
        connection.close()
        recorder.close()


# -- setup -------------------------------------------------------------------------------------


def _make_template(path: Path, size: int) -> None:
    """The store creates the schema; the rows are bulk-inserted (their values do not matter)."""
    SessionDB(path).close()
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, 'bench', ?)",
            ((session_id, 1_700_000_000.0 + n) for n, session_id in enumerate(_session_ids(size))),
        )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def _connect_sqlite3(path: Path) -> sqlite3.Connection:
    """A raw connection set up like the store's (see hermes_state.engine)."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.execute("PRAGMA foreign_keys = ON")
    return connection


# -- the contenders' batches -------------------------------------------------------------------


def _unexpected(contender: str, operation: str, session_id: str, got: object) -> BenchmarkError:
    return BenchmarkError(f"{contender}: {operation} of {session_id!r} did not succeed ({got!r})")


def _sqlite3_batch(
    connection: sqlite3.Connection, operation: str, transactions: list[_Transaction]
) -> Batch:
    def batch() -> None:
        for transaction in transactions:
            connection.execute("BEGIN IMMEDIATE")
            for statement in transaction.statements:
                cursor = connection.execute(statement.sql, statement.values)
                changed = len(cursor.fetchall()) if cursor.description else cursor.rowcount
                if changed != statement.changed:
                    raise _unexpected(BASELINE, operation, transaction.session_id, changed)
            connection.execute("COMMIT")

    return batch


def _store_batch(store: SessionDB, operation: str, ids: list[str]) -> Batch:
    method = OPERATIONS[operation]

    def batch() -> None:
        for session_id in ids:
            result = method(store, session_id)
            if result is not True:
                raise _unexpected(STORE, operation, session_id, result)

    return batch


def _execute(connection: Connection, contender: str, operation: str, call: _Transaction) -> None:
    for statement in call.statements:
        result = connection.execute(statement.statement, statement.params)
        changed = len(result.all()) if result.returns_rows else result.rowcount
        if changed != statement.changed:
            raise _unexpected(contender, operation, call.session_id, changed)


def _engine_batch(engine: Engine, operation: str, transactions: list[_Transaction]) -> Batch:
    def batch() -> None:
        for transaction in transactions:
            with engine.begin() as connection:
                _execute(connection, ENGINE_BEGIN, operation, transaction)

    return batch


def _connection_batch(
    connection: Connection, operation: str, transactions: list[_Transaction]
) -> Batch:
    def batch() -> None:
        for transaction in transactions:
            with connection.begin():
                _execute(connection, CONNECTION, operation, transaction)

    return batch


# -- one table size ----------------------------------------------------------------------------


def _update_only(transactions: list[_Transaction]) -> list[_Transaction] | None:
    """The transactions cut down to their ``UPDATE sessions`` statement, when they hold more.

    For context when a transition is more than one statement (the audit trail adds an
    ``INSERT``): what the state change alone costs through ``sqlite3``.
    """
    cut = []
    for transaction in transactions:
        updates = [s for s in transaction.statements if s.sql.startswith("UPDATE sessions ")]
        if len(transaction.statements) == 1 or len(updates) != 1:
            return None
        cut.append(_Transaction(transaction.session_id, tuple(updates)))
    return cut


def _run_size(folder: Path, size: int, settings: Settings) -> list[Result]:
    folder.mkdir()
    template = folder / "template.db"
    _make_template(template, size)
    paths = {name: folder / f"{stem}.db" for name, stem in FILE_STEMS.items()}
    scratch = folder / "recorded.db"
    for path in (*paths.values(), scratch):
        shutil.copyfile(template, path)
    ids = _cycled_ids(size, settings.ops_per_round)
    transactions = _record(scratch, ids)
    update_only = {operation: _update_only(transactions[operation]) for operation in OPERATIONS}

    with contextlib.ExitStack() as stack:
        raw = _connect_sqlite3(paths[BASELINE])
        stack.callback(raw.close)
        raw_update = _connect_sqlite3(paths[UPDATE_ONLY])
        stack.callback(raw_update.close)
        store = stack.enter_context(SessionDB(paths[STORE]))
        engine = make_engine(resolve_url(paths[ENGINE_BEGIN]))
        stack.callback(engine.dispose)
        connection_engine = make_engine(resolve_url(paths[CONNECTION]))
        stack.callback(connection_engine.dispose)
        connection = stack.enter_context(connection_engine.connect())
        phases: dict[str, dict[str, Batch]] = {}
        for operation in OPERATIONS:
            phases[operation] = {
                BASELINE: _sqlite3_batch(raw, operation, transactions[operation]),
                STORE: _store_batch(store, operation, ids),
                ENGINE_BEGIN: _engine_batch(engine, operation, transactions[operation]),
                CONNECTION: _connection_batch(connection, operation, transactions[operation]),
            }
            cut = update_only[operation]
            if cut is not None:
                phases[operation][UPDATE_ONLY] = _sqlite3_batch(raw_update, operation, cut)
        samples = interleaved(
            phases,
            rounds=settings.rounds,
            warmup=settings.warmup,
            ops_per_round=settings.ops_per_round,
        )

    same = [paths[name] for name in (STORE, ENGINE_BEGIN, CONNECTION)]
    partial = [paths[UPDATE_ONLY]] if any(update_only.values()) else []
    _check_same_effects(paths[BASELINE], same, partial, ids)
    return [
        result
        for operation in OPERATIONS
        for result in summarize(
            NAME,
            f"{operation} [{_count(transactions[operation])}] @ {size:,} rows",
            samples[operation],
            baseline=BASELINE,
            ops_per_round=settings.ops_per_round,
            limits={STORE: LIMIT},
        )
    ]


def _count(transactions: list[_Transaction]) -> str:
    """How many statements the operation's transaction holds, e.g. ``1 stmt``."""
    counts = sorted({len(transaction.statements) for transaction in transactions})
    number = "/".join(str(count) for count in counts)
    return f"{number} stmt" if counts == [1] else f"{number} stmts"


@dataclass(frozen=True, slots=True)
class _Effects:
    """What a run left in a file: handoff columns but the times, and every table's row count."""

    handoff_rows: list[tuple[Any, ...]]
    table_rows: dict[str, int]


def _effects(path: Path) -> _Effects:
    connection = sqlite3.connect(path)
    try:
        cursor = connection.execute(
            "SELECT * FROM sessions WHERE handoff_state IS NOT NULL ORDER BY id"
        )
        names = [column[0] for column in cursor.description]
        kept = [index for index, name in enumerate(names) if not name.endswith("_at")]
        rows = [tuple(row[index] for index in kept) for row in cursor.fetchall()]
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        counts = {
            table: connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in tables
        }
        return _Effects(rows, counts)
    finally:
        connection.close()


def _check_same_effects(
    baseline: Path, same: Iterable[Path], partial: Iterable[Path], ids: list[str]
) -> None:
    """The baseline completed exactly the cycled rows; ``same`` did all the baseline did,
    ``partial`` (the UPDATE-only run) left the same handoff columns."""
    expected = _effects(baseline)
    connection = sqlite3.connect(baseline)
    try:
        states = connection.execute(
            "SELECT id, handoff_state FROM sessions WHERE handoff_state IS NOT NULL ORDER BY id"
        ).fetchall()
    finally:
        connection.close()
    if states != [(session_id, "completed") for session_id in sorted(ids)]:
        raise BenchmarkError(f"{baseline.name}: unexpected handoff states after the run: {states}")
    for path in same:
        if _effects(path) != expected:
            raise BenchmarkError(f"{path.name} differs from {baseline.name} after the run")
    for path in partial:
        if _effects(path).handoff_rows != expected.handoff_rows:
            raise BenchmarkError(f"{path.name} differs from {baseline.name} after the run")
