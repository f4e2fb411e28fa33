"""Claims against the bare driver: single claims on PostgreSQL, batch claims on every backend.

Two cases (the second on each backend), each at 1, 2 and 4 worker processes (spawned once per
case; each round opens its connections before a barrier releases every worker at once, and the
round's time runs from that release to the last worker's answer):

* ``single claims, PostgreSQL``: every worker claims its own share of the pending rows by id.
  Baseline: psycopg sending one autocommit conditional ``UPDATE`` per claim, with no audit row
  (the cheapest claim the server can do). Contender: ``SessionDB.claim_handoff`` (owner, lease,
  fencing and its audit row). Bar (issue 13): at least 0.8x the baseline's throughput, i.e. a
  time ratio of 1.25 or less.
* ``batch claims``: every worker drains the shared backlog until nothing is pending.
  Baseline on PostgreSQL: psycopg claiming the oldest pending row per autocommit statement
  (``FOR UPDATE SKIP LOCKED``, no audit row); on SQLite: the ``sqlite3`` module claiming one row
  per ``BEGIN IMMEDIATE`` transaction with its audit row; on MariaDB (when
  ``HERMES_STATE_TEST_MYSQL_URL`` or ``--mysql-url`` names a server): PyMySQL picking the oldest
  pending row (``FOR UPDATE SKIP LOCKED``), moving it and committing, no audit row (no bar).
  Contenders: ``SessionDB.claim_pending_handoffs(limit)`` at limits 1, 10 and 100. Bars
  (issue 13): with limit 100, at least 10x the baseline's rate on PostgreSQL (ratio 0.1 or
  less) and 5x on SQLite (0.2 or less).

Each case also runs the store's own statements sent by the bare driver (``psycopg, the store's
claim SQL``, ``psycopg/sqlite3, the store's batch(100) SQL``): the same SQL and parameters,
rows left as tuples. It has no bar; it splits the store's ratio into what its statements cost
the database and what the store adds around them.

After every round the benchmark checks that each row was claimed exactly once (running, with
attempt 1), then puts the rows back to pending for the next round. On SQLite a connection stays
open on the file for the whole case (see ``_sqlite_database``).

Wall-clock ratios on a shared machine are noisy, so the PostgreSQL cases also report the CPU
each claim cost, which scheduling does not change much: the workers' own (client) and, when
the server runs on this machine, that of the server processes serving them (read from
``/proc``; they are found by the ``application_name`` each worker's connections carry). Both
sides use psycopg's default ``prepare_threshold`` (5): from the sixth execution on a connection
a statement is sent as a server-side prepared statement, planned once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from hermes_state import SessionDB
from hermes_state.engine import with_driver

from . import fixtures
from .common import BenchmarkError, Result, Samples, summarize

__all__ = ["run"]

NAME: Final = "transitions"
PROCESSES: Final = (1, 2, 4)
ROWS: Final = 3000
QUICK_ROWS: Final = 600
ROUNDS: Final = 4
#: SQLite's rounds take milliseconds: more of them make its medians steadier for little time.
SQLITE_ROUNDS: Final = 8
QUICK_ROUNDS: Final = 1
LIMITS: Final = (1, 10, 100)
LEASE_SECONDS: Final = 300.0
WAIT: Final = 300.0  # seconds; a safety net against a hung worker

BARE_UPDATE: Final = "psycopg bare UPDATE"
STORE_CLAIM: Final = "SessionDB.claim_handoff"
BARE_NEXT_PG: Final = "psycopg 1 row/statement"
BARE_NEXT_SQLITE: Final = "sqlite3 1 row/transaction"
BARE_NEXT_MYSQL: Final = "PyMySQL 1 row/transaction"
#: The store's own statements sent by the bare driver: what the store would cost with nothing
#: of its own around them (the ceiling it is measured against, not a bar).
SAME_CLAIM: Final = "psycopg, the store's claim SQL"
SAME_BATCH_PG: Final = "psycopg, the store's batch(100) SQL"
SAME_BATCH_SQLITE: Final = "sqlite3, the store's batch(100) SQL"


def _batch(limit: int) -> str:
    return f"claim_pending_handoffs({limit})"


@dataclass(frozen=True, slots=True)
class Order:
    """What one worker does in one round: ``kind`` of claiming, on ``ids`` or the backlog."""

    kind: str
    url: str
    worker: int
    ids: tuple[str, ...] = ()
    limit: int = 1


@dataclass(frozen=True, slots=True)
class Spent:
    """What one worker's round cost: rows won, its CPU seconds, its server processes' CPU
    seconds (None when they cannot be read: a server elsewhere, or SQLite)."""

    won: int
    client_s: float
    server_s: float | None


class Meter:
    """The round's start barrier, and the CPU clocks read when it opens and when the worker
    calls :meth:`stop` (before it closes its connections, so its server processes still
    exist). The server processes are looked up before the barrier (the worker has opened its
    connections by then), so the measured round only pays for reading ``/proc``. A worker that
    never calls ``stop`` is stopped when it returns."""

    def __init__(self, order: Order, barrier: Any) -> None:
        self._order = order
        self._barrier = barrier
        self._pids: list[int] = []
        self._started: tuple[float, float | None] | None = None
        self.spent: tuple[float, float | None] | None = None

    def wait(self, timeout: float) -> None:
        self._pids = _server_pids(self._order)
        self._barrier.wait(timeout)
        self._started = (time.process_time(), _cpu_of(self._pids))

    def stop(self) -> None:
        if self.spent is not None or self._started is None:
            return
        client, server = time.process_time(), _cpu_of(self._pids)
        began_client, began_server = self._started
        used = None if server is None or began_server is None else server - began_server
        self.spent = (client - began_client, used)


def _application(order: Order) -> str:
    return f"hs-bench-{os.getpid()}-{order.worker}"


def _server_pids(order: Order) -> list[int]:
    """The server processes serving this worker (PostgreSQL): by application name."""
    if not order.url.startswith("postgresql"):
        return []
    import psycopg

    from hermes_state.engine import resolve_url

    with psycopg.connect(fixtures.pg_conninfo(resolve_url(order.url)), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (_application(order),),
        ).fetchall()
    return [int(row[0]) for row in rows]


def _cpu_of(pids: list[int]) -> float | None:
    """CPU seconds these processes used so far; None unless all run on this host. From
    ``schedstat`` (nanoseconds) where the kernel has it, else ``stat`` (clock ticks)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return total if pids else None


_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


def run(quick: bool) -> list[Result]:
    rows = QUICK_ROWS if quick else ROWS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    results: list[Result] = []
    server = fixtures.pg_server()
    if server is None:
        fixtures.skipping(f"{NAME} (PostgreSQL)")
    else:
        with fixtures.server_database(server) as url:
            _seed(url, rows)
            contenders = [BARE_UPDATE, STORE_CLAIM, SAME_CLAIM]
            results += _case(url, "single claims, PostgreSQL", contenders, rows, rounds)
            contenders = [BARE_NEXT_PG, *(_batch(limit) for limit in LIMITS), SAME_BATCH_PG]
            results += _case(url, "batch claims, PostgreSQL", contenders, rows, rounds)
    with _sqlite_database() as url:
        _seed(url, rows)
        contenders = [BARE_NEXT_SQLITE, *(_batch(limit) for limit in LIMITS), SAME_BATCH_SQLITE]
        sqlite_rounds = QUICK_ROUNDS if quick else SQLITE_ROUNDS
        results += _case(url, "batch claims, SQLite", contenders, rows, sqlite_rounds)
    mysql = fixtures.mysql_server()
    if mysql is None:
        fixtures.skipping(f"{NAME} (MariaDB)", fixtures.MYSQL_URL_ENVS)
    else:
        with fixtures.server_database(mysql) as url:
            _seed(url, rows)
            contenders = [BARE_NEXT_MYSQL, *(_batch(limit) for limit in LIMITS)]
            results += _case(url, "batch claims, MariaDB", contenders, rows, rounds)
    return results


_BARS: Final = {
    ("single claims, PostgreSQL", STORE_CLAIM): 1.25,
    ("batch claims, PostgreSQL", _batch(100)): 0.1,
    ("batch claims, SQLite", _batch(100)): 0.2,
}


def _case(url: URL, case: str, contenders: Sequence[str], rows: int, rounds: int) -> list[Result]:
    ids = [fixtures.session_id(index) for index in range(rows)]
    results: list[Result] = []
    context = multiprocessing.get_context("spawn")
    for processes in PROCESSES:
        samples: dict[str, Samples] = {name: [] for name in contenders}
        cpu: dict[str, list[tuple[float, float | None]]] = {name: [] for name in contenders}
        with (
            context.Manager() as manager,
            ProcessPoolExecutor(processes, mp_context=context) as pool,
        ):
            for round_index in range(rounds):
                shift = round_index % len(contenders)
                for name in [*contenders[shift:], *contenders[:shift]]:
                    seconds, client, server = _round(url, pool, manager, name, ids, processes)
                    samples[name].append(seconds / rows)
                    cpu[name].append((client / rows, None if server is None else server / rows))
        label = f"{case}, {processes} process{'es' if processes > 1 else ''}"
        notes = {
            name: f"{1 / min(values):,.0f} claims/s (best round){_cpu_note(cpu[name])}"
            for name, values in samples.items()
        }
        limits = {name: bar for (bar_case, name), bar in _BARS.items() if bar_case == case}
        results += summarize(
            NAME,
            label,
            samples,
            baseline=contenders[0],
            ops_per_round=rows,
            limits=limits,
            notes=notes,
        )
    return results


def _cpu_note(rounds: list[tuple[float, float | None]]) -> str:
    """The median round's CPU per claim: the workers', and their server processes'."""
    client = statistics.median(value for value, _ in rounds)
    note = f"; CPU/claim: client {client * 1e6:.0f} µs"
    servers = [value for _, value in rounds if value is not None]
    if len(servers) == len(rounds):
        note += f", server {statistics.median(servers) * 1e6:.0f} µs"
    return note


def _round(
    url: URL, pool: ProcessPoolExecutor, manager: Any, name: str, ids: list[str], processes: int
) -> tuple[float, float, float | None]:
    """One round of contender ``name``: rows pending, workers released together, checked.
    Returns its time, and the CPU seconds its workers and their server processes spent."""
    _reset(url)
    plain = url.render_as_string(hide_password=False)
    start = manager.Barrier(processes + 1)
    orders = [_order(name, plain, worker, ids[worker::processes]) for worker in range(processes)]
    futures = [pool.submit(_work, order, start) for order in orders]
    _await_workers(start, futures, processes)
    start.wait(WAIT)
    began = time.perf_counter()
    spent = [future.result(timeout=WAIT) for future in futures]
    elapsed = time.perf_counter() - began
    claimed = sum(one.won for one in spent)
    if claimed != len(ids):
        raise BenchmarkError(f"{name}: claimed {claimed} of {len(ids)} rows")
    _check(url, len(ids), name)
    servers = [one.server_s for one in spent]
    server = None if None in servers else sum(s for s in servers if s is not None)
    return elapsed, sum(one.client_s for one in spent), server


def _await_workers(start: Any, futures: list[Any], processes: int) -> None:
    """Wait until every worker waits at the barrier; a worker that failed before it is
    reported at once (with its exception) instead of when the barrier times out."""
    deadline = time.monotonic() + WAIT
    while start.n_waiting < processes:
        for future in futures:
            if future.done():
                future.result()  # raises what the worker raised
                raise BenchmarkError("a worker returned before the round started")
        if time.monotonic() > deadline:
            raise BenchmarkError(f"the workers did not all start within {WAIT:g} s")
        time.sleep(0.01)


def _order(name: str, url: str, worker: int, share: list[str]) -> Order:
    if name in (BARE_UPDATE, STORE_CLAIM, SAME_CLAIM):
        return Order(name, url, worker, ids=tuple(share))
    if name.startswith("claim_pending_handoffs("):
        return Order("batch", url, worker, limit=int(name.split("(")[1].rstrip(")")))
    return Order(name, url, worker)


# -- the database ------------------------------------------------------------------------------


@contextlib.contextmanager
def _sqlite_database() -> Iterator[URL]:
    """A file the store made, with a connection kept open on it meanwhile, as a running
    gateway's is: so no worker's close is the file's last, which checkpoints the whole WAL
    into the file and deletes it (7 ms on the 2-vCPU machine of bench/RESULTS.md, a quarter
    of a batch-claim round) and is no part of claiming."""
    path = fixtures.scratch() / f"{NAME}.db"
    SessionDB(path).close()
    keeper = sqlite3.connect(path)
    try:
        keeper.execute("SELECT count(*) FROM sessions").fetchone()  # opens the WAL
        yield URL.create("sqlite", database=str(path))
    finally:
        keeper.close()


def _engine(url: URL) -> Any:
    return create_engine(with_driver(url, asyncio=False))


def _seed(url: URL, rows: int) -> None:
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO sessions (id, source, started_at) VALUES (:id, 'bench', :at)"),
                [{"id": fixtures.session_id(index), "at": float(index)} for index in range(rows)],
            )
    finally:
        engine.dispose()


def _reset(url: URL) -> None:
    """Every row pending again, attempt 0, and an empty audit trail."""
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE sessions SET handoff_state = 'pending', handoff_platform = 'telegram',"
                    " handoff_requested_at = started_at, handoff_claimed_at = NULL,"
                    " handoff_owner = NULL, handoff_lease_expires_at = NULL, handoff_attempt = 0"
                )
            )
            connection.execute(text("DELETE FROM handoff_events"))
        if url.get_backend_name() == "postgresql":
            with engine.connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT")
                connection.execute(text("VACUUM ANALYZE sessions"))
                connection.execute(text("VACUUM ANALYZE handoff_events"))
    finally:
        engine.dispose()


def _check(url: URL, rows: int, name: str) -> None:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            running, once = connection.execute(
                text(
                    "SELECT count(*), count(CASE WHEN handoff_attempt = 1 THEN 1 END) "
                    "FROM sessions WHERE handoff_state = 'running'"
                )
            ).one()
    finally:
        engine.dispose()
    if running != rows or once != rows:
        raise BenchmarkError(f"{name}: {running} rows running, {once} claimed once, of {rows}")


# -- the workers (spawned processes) -----------------------------------------------------------


def _work(order: Order, barrier: Any) -> Spent:
    """Open connections, wait for the others, claim; returns how many rows this worker won
    and the CPU it took."""
    start = Meter(order, barrier)
    workers: dict[str, Callable[[Order, Any], int]] = {
        BARE_UPDATE: _bare_update,
        STORE_CLAIM: _store_claim,
        BARE_NEXT_PG: _bare_next_pg,
        BARE_NEXT_SQLITE: _bare_next_sqlite,
        BARE_NEXT_MYSQL: _bare_next_mysql,
        SAME_CLAIM: _same_claim,
        SAME_BATCH_PG: _same_batch_pg,
        SAME_BATCH_SQLITE: _same_batch_sqlite,
        "batch": _store_batch,
    }
    won = workers[order.kind](order, start)
    start.stop()
    assert start.spent is not None
    return Spent(won, *start.spent)


_BARE_CLAIM_BY_ID: Final = (
    "UPDATE sessions SET handoff_state = 'running', handoff_claimed_at = %(now)s, "
    "handoff_owner = %(owner)s, handoff_lease_expires_at = %(lease)s, "
    "handoff_attempt = handoff_attempt + 1 WHERE id = %(id)s AND handoff_state = 'pending'"
)
_BARE_CLAIM_NEXT: Final = (
    "UPDATE sessions SET handoff_state = 'running', handoff_claimed_at = %(now)s, "
    "handoff_owner = %(owner)s, handoff_lease_expires_at = %(lease)s, "
    "handoff_attempt = handoff_attempt + 1 WHERE id = (SELECT id FROM sessions "
    "WHERE handoff_state = 'pending' ORDER BY started_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "RETURNING id"
)


def _psycopg(order: Order) -> Any:
    import psycopg

    from hermes_state.engine import resolve_url

    return psycopg.connect(
        fixtures.pg_conninfo(resolve_url(order.url)),
        autocommit=True,
        application_name=_application(order),
    )


def _params(order: Order, **extra: Any) -> dict[str, Any]:
    now = time.time()
    return {"now": now, "owner": f"w{order.worker}", "lease": now + LEASE_SECONDS, **extra}


def _bare_update(order: Order, start: Any) -> int:
    with _psycopg(order) as connection:
        connection.execute("SELECT 1")
        start.wait(WAIT)
        won = 0
        for session_id in order.ids:
            won += connection.execute(_BARE_CLAIM_BY_ID, _params(order, id=session_id)).rowcount
        start.stop()
    return won


def _bare_next_pg(order: Order, start: Any) -> int:
    with _psycopg(order) as connection:
        connection.execute("SELECT 1")
        start.wait(WAIT)
        won = 0
        while connection.execute(_BARE_CLAIM_NEXT, _params(order)).fetchone() is not None:
            won += 1
        start.stop()
    return won


def _sqlite3_connection(order: Order) -> sqlite3.Connection:
    """The ``sqlite3`` module's own connection to the file, with the store's pragma for
    durability and SQLite's busy wait (up to 60 s) for the write lock."""
    from hermes_state.engine import resolve_url

    path = resolve_url(order.url).database
    assert path is not None
    connection = sqlite3.connect(path, isolation_level=None, timeout=60)
    connection.execute("PRAGMA synchronous = NORMAL")
    return connection


def _bare_next_sqlite(order: Order, start: Any) -> int:
    connection = _sqlite3_connection(order)
    pending = (
        "SELECT id FROM sessions WHERE handoff_state = 'pending' ORDER BY started_at, id LIMIT 1"
    )
    try:
        start.wait(WAIT)
        won = 0
        while True:
            connection.execute("BEGIN IMMEDIATE")
            now = time.time()
            recorded = connection.execute(
                "INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt)"
                f" SELECT id, handoff_state, 'running', ?, ?, handoff_attempt + 1 FROM sessions"
                f" WHERE id = ({pending})",
                (now, f"w{order.worker}"),
            ).rowcount
            if not recorded:
                connection.execute("COMMIT")
                return won
            connection.execute(
                "UPDATE sessions SET handoff_state = 'running', handoff_claimed_at = ?,"
                " handoff_owner = ?, handoff_lease_expires_at = ?,"
                f" handoff_attempt = handoff_attempt + 1 WHERE id = ({pending})",
                (now, f"w{order.worker}", now + LEASE_SECONDS),
            )
            connection.execute("COMMIT")
            won += 1
    finally:
        connection.close()


def _bare_next_mysql(order: Order, start: Any) -> int:
    """PyMySQL claiming the oldest pending row per transaction: pick it (``SKIP LOCKED``),
    move it, commit; no audit row, as the PostgreSQL baseline."""
    import pymysql

    from hermes_state.engine import resolve_url

    url = resolve_url(order.url)
    connection = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
        autocommit=False,
    )
    pick = (
        "SELECT id FROM sessions WHERE handoff_state = 'pending' ORDER BY started_at, id "
        "LIMIT 1 FOR UPDATE SKIP LOCKED"
    )
    move = (
        "UPDATE sessions SET handoff_state = 'running', handoff_claimed_at = %(now)s, "
        "handoff_owner = %(owner)s, handoff_lease_expires_at = %(lease)s, "
        "handoff_attempt = handoff_attempt + 1 WHERE id = %(id)s"
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            connection.commit()
            start.wait(WAIT)
            won = 0
            while True:
                cursor.execute(pick)
                row = cursor.fetchone()
                if row is None:
                    connection.commit()
                    start.stop()
                    return won
                cursor.execute(move, _params(order, id=row[0]))
                connection.commit()
                won += 1
    finally:
        connection.close()


def _store_sql(statement: Any, dialect: Any) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """One of the store's statements as the store sends it: its SQL, the values of its
    constant parameters, and (for ``?`` paramstyles) the order its parameters go in."""
    compiled = statement.compile(dialect=dialect)
    constants = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
    return compiled.string, constants, tuple(compiled.positiontup or ())


@contextlib.contextmanager
def _started_psycopg(order: Order, start: Any) -> Iterator[Any]:
    """A psycopg cursor, connected and warm, once every worker of the round is."""
    with _psycopg(order) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT 1")
        start.wait(WAIT)
        yield cursor
        start.stop()


def _pg_store_sql(statement: Any) -> tuple[str, dict[str, Any]]:
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    sql, constants, _ = _store_sql(statement, PGDialect_psycopg())  # type: ignore[no-untyped-call]
    return sql, constants


def _same_claim(order: Order, start: Any) -> int:
    """psycopg sending ``claim_handoff``'s one statement (results in binary, as the store
    asks), with the parameters the store would give it."""
    from hermes_state import statements

    sql, constants = _pg_store_sql(statements.claim_handoff(returning=True).single)
    owner = f"w{order.worker}"
    won = 0
    with _started_psycopg(order, start) as cursor:
        for session_id in order.ids:
            now = time.time()
            params = {**constants, "session_id": session_id, "now": now, "owner": owner}
            params.update(lease_expires_at=now + LEASE_SECONDS, actor=owner)
            cursor.execute(sql, params, binary=True)
            won += len(cursor.fetchall())
    return won


def _same_batch_pg(order: Order, start: Any) -> int:
    """psycopg sending ``claim_pending_handoffs(100)``'s one statement, rows as tuples."""
    from hermes_state import statements

    sql, constants = _pg_store_sql(statements.claim_pending_statement(by_platform=False))
    owner = f"w{order.worker}"
    won = 0
    with _started_psycopg(order, start) as cursor:
        while True:
            now = time.time()
            params = {**constants, "limit": 100, "now": now, "owner": owner, "actor": owner}
            params["lease_expires_at"] = now + LEASE_SECONDS
            cursor.execute(sql, params, binary=True)
            claimed = len(cursor.fetchall())
            if not claimed:
                break
            won += claimed
    return won


def _same_batch_sqlite(order: Order, start: Any) -> int:
    """sqlite3 sending ``claim_pending_handoffs(100)``'s two statements in one ``BEGIN
    IMMEDIATE`` transaction, rows as tuples, waiting for the lock with SQLite's busy wait."""
    from sqlalchemy.dialects.sqlite import pysqlite

    from hermes_state import statements

    transition = statements.claim_pending_transition(by_platform=False)
    dialect = pysqlite.dialect()
    record = _store_sql(transition.record, dialect)
    apply = _store_sql(transition.apply, dialect)
    connection = _sqlite3_connection(order)
    owner = f"w{order.worker}"

    def values(sent: tuple[str, dict[str, Any], tuple[str, ...]], **given: Any) -> list[Any]:
        _, constants, positions = sent
        merged = {**constants, **given}
        return [merged[name] for name in positions]

    try:
        start.wait(WAIT)
        won = 0
        while True:
            connection.execute("BEGIN IMMEDIATE")
            now = time.time()
            given = {"limit": 100, "now": now, "owner": owner, "actor": owner}
            given["lease_expires_at"] = now + LEASE_SECONDS
            connection.execute(record[0], values(record, **given))
            claimed = len(connection.execute(apply[0], values(apply, **given)).fetchall())
            connection.execute("COMMIT")
            if not claimed:
                return won
            won += claimed
    finally:
        connection.close()


def _store(order: Order) -> SessionDB:
    url = order.url
    if url.startswith("postgresql"):
        url = str(make_url(url).update_query_dict({"application_name": _application(order)}))
    return SessionDB(url=url, owner=f"w{order.worker}", lease_seconds=LEASE_SECONDS)


def _store_claim(order: Order, start: Any) -> int:
    with _store(order) as db:
        db.has_pending_handoffs()
        start.wait(WAIT)
        won = sum(db.claim_handoff(session_id) for session_id in order.ids)
        start.stop()
        return won


def _store_batch(order: Order, start: Any) -> int:
    with _store(order) as db:
        db.has_pending_handoffs()
        start.wait(WAIT)
        won = 0
        while batch := db.claim_pending_handoffs(order.limit):
            won += len(batch)
        start.stop()
        return won
