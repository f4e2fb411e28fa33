"""Write path: request, claim and complete through SessionDB against the ``sqlite3`` module.

Requirement (issue 2, item 6): on the embedded SQLite default each of ``request_handoff``,
``claim_handoff`` and ``complete_handoff`` costs at most 1.5x the same one-statement
transaction sent directly through ``sqlite3`` with the same pragmas.

Contenders, each on its own copy of one template database (created by opening a ``SessionDB``
on it, so schema and indexes are the store's own):

* ``sqlite3`` (the baseline): one connection with ``isolation_level=None`` and the store's
  pragmas, sending ``BEGIN IMMEDIATE``, the statement's SQL exactly as SQLAlchemy compiles it
  for SQLite with the values the store binds, and ``COMMIT``. Parameters are prepared before
  timing, so the baseline is the cheapest way to send that transaction.
* ``SessionDB``: the store's public method (validation, clock and plan included).
* ``engine.begin()`` and ``Connection``, for context: plain SQLAlchemy Core on an engine
  configured like the store's, with a transaction per call on a fresh (pooled) or a kept
  connection.

Each round takes a fixed set of rows through request -> claim -> complete, so every operation
changes exactly one row; an operation that reports anything else stops the benchmark. Two
table sizes: 1,000 sessions, and 100,000 sessions (deeper B-trees, rows spread over the file).
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Connection, Engine, Update
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.sql.compiler import SQLCompiler

from hermes_state import SessionDB, statements
from hermes_state.engine import BUSY_TIMEOUT_MS, make_engine, resolve_url

from .common import Batch, BenchmarkError, Result, interleaved, summarize

__all__ = ["run"]

NAME: Final = "write_path"
LIMIT: Final = 1.5
PLATFORM: Final = "telegram"
BASELINE: Final = "sqlite3"
STORE: Final = "SessionDB"
ENGINE_BEGIN: Final = "engine.begin()"
CONNECTION: Final = "Connection"

#: The operations, in the order a round runs them (each needs the state the previous leaves).
OPERATIONS: Final[Mapping[str, Callable[[], Update]]] = {
    "request": statements.request_handoff,
    "claim": statements.claim_handoff,
    "complete": statements.complete_handoff,
}


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure. ``ops_per_round`` rows go through the cycle in every round."""

    table_sizes: tuple[int, ...]
    rounds: int
    warmup: int
    ops_per_round: int


FULL: Final = Settings(table_sizes=(1_000, 100_000), rounds=600, warmup=30, ops_per_round=25)
QUICK: Final = Settings(table_sizes=(1_000, 100_000), rounds=30, warmup=5, ops_per_round=10)


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as folder:
        for size in settings.table_sizes:
            results.extend(_run_size(Path(folder) / f"{size}", size, settings))
    return results


# -- setup -------------------------------------------------------------------------------------


def _session_ids(size: int) -> list[str]:
    """Timestamp-and-hex ids of a realistic length (22 characters), in sorting order.

    The length matters: the store validates every character of an id.
    """
    return [f"20260101_000000_{index:06x}" for index in range(size)]


def _cycled_ids(size: int, count: int) -> list[str]:
    """``count`` ids spread evenly over the table (not all on one page)."""
    ids = _session_ids(size)
    return [ids[index * size // count] for index in range(count)]


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


@dataclass(frozen=True, slots=True)
class _RawStatement:
    """A statement as SQLAlchemy compiles it for SQLite, and the order of its ``?`` values."""

    sql: str
    names: tuple[str, ...]
    constants: Mapping[str, Any]

    @classmethod
    def of(cls, statement: Update) -> _RawStatement:
        dialect = sqlite_dialect.dialect()
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        names = tuple(compiled.positiontup or ())
        constants = {
            name: compiled.binds[name].value for name in names if not compiled.binds[name].required
        }
        return cls(compiled.string, names, constants)

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(self.constants[n] if n in self.constants else values[n] for n in self.names)


def _values(session_id: str) -> dict[str, Any]:
    return {"session_id": session_id, "platform": PLATFORM, "now": time.time()}


# -- the contenders' batches ---------------------------------------------------------------------


def _changed(what: str, operation: str, session_id: str, changed: object) -> BenchmarkError:
    return BenchmarkError(f"{what} {operation}({session_id!r}) changed {changed!r} rows, not 1")


def _sqlite3_batch(
    connection: sqlite3.Connection, operation: str, statement: Update, ids: list[str]
) -> Batch:
    raw = _RawStatement.of(statement)
    calls = [(session_id, raw.parameters(_values(session_id))) for session_id in ids]

    def batch() -> None:
        for session_id, parameters in calls:
            connection.execute("BEGIN IMMEDIATE")
            changed = connection.execute(raw.sql, parameters).rowcount
            connection.execute("COMMIT")
            if changed != 1:
                raise _changed(BASELINE, operation, session_id, changed)

    return batch


def _store_batch(store: SessionDB, operation: str, ids: list[str]) -> Batch:
    methods: Mapping[str, Callable[[str], bool]] = {
        "request": lambda session_id: store.request_handoff(session_id, PLATFORM),
        "claim": store.claim_handoff,
        "complete": store.complete_handoff,
    }
    method = methods[operation]

    def batch() -> None:
        for session_id in ids:
            if method(session_id) is not True:
                raise _changed(STORE, operation, session_id, 0)

    return batch


def _engine_batch(engine: Engine, operation: str, statement: Update, ids: list[str]) -> Batch:
    def batch() -> None:
        for session_id in ids:
            with engine.begin() as connection:
                changed = connection.execute(statement, _values(session_id)).rowcount
            if changed != 1:
                raise _changed(ENGINE_BEGIN, operation, session_id, changed)

    return batch


def _connection_batch(
    connection: Connection, operation: str, statement: Update, ids: list[str]
) -> Batch:
    def batch() -> None:
        for session_id in ids:
            with connection.begin():
                changed = connection.execute(statement, _values(session_id)).rowcount
            if changed != 1:
                raise _changed(CONNECTION, operation, session_id, changed)

    return batch


# -- one table size ----------------------------------------------------------------------------


def _run_size(folder: Path, size: int, settings: Settings) -> list[Result]:
    folder.mkdir()
    template = folder / "template.db"
    _make_template(template, size)
    paths = {}
    for name in (BASELINE, STORE, ENGINE_BEGIN, CONNECTION):
        paths[name] = folder / f"{name.strip('.()').replace('.', '-')}.db"
        shutil.copyfile(template, paths[name])

    ids = _cycled_ids(size, settings.ops_per_round)
    raw = _connect_sqlite3(paths[BASELINE])
    store = SessionDB(paths[STORE])
    engine = make_engine(resolve_url(paths[ENGINE_BEGIN]))
    connection_engine = make_engine(resolve_url(paths[CONNECTION]))
    connection = connection_engine.connect()
    try:
        phases = {
            operation: {
                BASELINE: _sqlite3_batch(raw, operation, build(), ids),
                STORE: _store_batch(store, operation, ids),
                ENGINE_BEGIN: _engine_batch(engine, operation, build(), ids),
                CONNECTION: _connection_batch(connection, operation, build(), ids),
            }
            for operation, build in OPERATIONS.items()
        }
        samples = interleaved(
            phases,
            rounds=settings.rounds,
            warmup=settings.warmup,
            ops_per_round=settings.ops_per_round,
        )
    finally:
        connection.close()
        connection_engine.dispose()
        engine.dispose()
        store.close()
        raw.close()

    _check_final_states(paths.values(), ids)
    return [
        result
        for operation in OPERATIONS
        for result in summarize(
            NAME,
            f"{operation} @ {size:,} rows",
            samples[operation],
            baseline=BASELINE,
            ops_per_round=settings.ops_per_round,
            limits={STORE: LIMIT},
        )
    ]


def _check_final_states(paths: Any, ids: list[str]) -> None:
    """Every contender must have left its file in the same state: the cycled rows completed."""
    expected = [(session_id, "completed", PLATFORM) for session_id in sorted(ids)]
    for path in paths:
        connection = sqlite3.connect(path)
        try:
            rows = connection.execute(
                "SELECT id, handoff_state, handoff_platform FROM sessions "
                "WHERE handoff_state IS NOT NULL ORDER BY id"
            ).fetchall()
        finally:
            connection.close()
        if rows != expected:
            raise BenchmarkError(f"{path.name}: unexpected handoff states after the run: {rows}")
