"""Polling costs O(pending rows), not O(sessions): the query plans of the watcher's queries.

Two ways of getting at the SQL, both explained by the database itself:

* the statement builders the store uses (``hermes_state.statements``), compiled for the
  engine's dialect exactly as the store compiles them;
* the SQL the store really sends while it polls and reclaims, recorded on the wire (SQLite's
  trace callback; SQLAlchemy's cursor events on the servers), so the check follows the store
  whatever its builders are called.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, Executable, text
from sqlalchemy.engine import URL
from sqlalchemy.sql.compiler import SQLCompiler

from hermes_state import SessionDB, statements
from hermes_state.engine import make_engine, resolve_url
from hermes_state.models import HandoffState
from tests.conftest import migrated_database
from tests.support.legacy import build_legacy_db
from tests.support.wire import driver_wire, sqlite_wire

# One worker fills the module's large server databases once for every test here.
pytestmark = pytest.mark.xdist_group("query-plans")

PENDING_INDEX = "idx_sessions_handoff_state"
RUNNING_INDEX = "ix_sessions_handoff_running"
HANDOFF_INDEXES = {PENDING_INDEX, RUNNING_INDEX}
# Running rows are found through either index that leads with the state (both O(running)):
# the planner picks one by its statistics.
RUNNING_LOOKUP = rf"(?:{RUNNING_INDEX}|{PENDING_INDEX})"

# (name, statement builder, the index it must use)
BUILDERS: list[tuple[str, Callable[[], Executable], str]] = [
    ("has_pending_handoffs", statements.has_pending_handoffs, PENDING_INDEX),
    (
        "list_pending_handoffs",
        lambda: statements.list_handoffs(HandoffState.PENDING),
        PENDING_INDEX,
    ),
    ("list_running", lambda: statements.list_handoffs(HandoffState.RUNNING), RUNNING_LOOKUP),
]
BUILDER_IDS = [name for name, _build, _index in BUILDERS]

# The store's polling operations and the index their statements must go through.
OPERATIONS: list[tuple[str, Callable[[SessionDB], object], str]] = [
    ("has_pending_handoffs", lambda db: db.has_pending_handoffs(), PENDING_INDEX),
    ("list_pending_handoffs", lambda db: db.list_pending_handoffs(), PENDING_INDEX),
    (
        "reclaim_stale_running_handoffs",
        lambda db: db.reclaim_stale_running_handoffs("gateway restarted; run /handoff again"),
        RUNNING_LOOKUP,
    ),
    ("claim_pending_handoffs", lambda db: db.claim_pending_handoffs(10), PENDING_INDEX),
]
OPERATION_IDS = [name for name, _run, _index in OPERATIONS]


def compiled(statement: Executable, connection: Connection) -> tuple[str, Any]:
    """The SQL string and driver parameters, positional or named as the dialect wants."""
    result = statement.compile(dialect=connection.dialect)  # type: ignore[attr-defined]
    assert isinstance(result, SQLCompiler)
    params = result.construct_params()
    if result.positiontup is not None:
        return result.string, tuple(params[name] for name in result.positiontup)
    return result.string, params


def touches_sessions(sql: str) -> bool:
    return bool(re.search(r"\b(FROM|UPDATE|JOIN)\s+sessions\b", sql, re.IGNORECASE))


# -- SQLite ---------------------------------------------------------------------------------


def sqlite_explain(connection: Any, sql: str, params: Any = ()) -> list[str]:
    if isinstance(connection, Connection):
        rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params).all()
    else:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    return [row[3] for row in rows]


def assert_no_sqlite_scan(plan: list[str]) -> None:
    # "SCAN sessions" alone is a full table scan; "SCAN sessions USING INDEX x" walks all of
    # index x, which is O(running) only for our partial index of running rows.
    bad = [
        step
        for step in plan
        if re.match(r"SCAN sessions\b", step)
        and not re.search(rf"USING (COVERING )?INDEX {RUNNING_INDEX}\b", step)
    ]
    assert not bad, plan


def sqlite_uses(plan: list[str], index: str) -> bool:
    return any(re.search(rf"\bUSING (COVERING )?INDEX {index}\b", step) for step in plan)


def fill_sqlite(path: Path, total: int, pending: int, running: int) -> None:
    """Many sessions, a few of them in flight, written directly for speed; then ANALYZE."""
    rows = []
    for number in range(total):
        if number < pending:
            state = "pending"
        elif number < pending + running:
            state = "running"
        else:
            state = ("completed", "failed", None, None)[number % 4]
        rows.append((f"s{number:06d}", "cli", float(number), state))
    connection = sqlite3.connect(path)
    try:
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at, handoff_state) VALUES (?, ?, ?, ?)", rows
        )
        connection.commit()
        connection.execute("ANALYZE")
    finally:
        connection.close()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    return path


@contextlib.contextmanager
def sqlite_engine(path: Path) -> Iterator[Engine]:
    engine = make_engine(resolve_url(path))
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.mark.parametrize("analysed", [False, True], ids=["empty", "analysed-5000"])
@pytest.mark.parametrize(("name", "build", "index"), BUILDERS, ids=BUILDER_IDS)
def test_sqlite_builders_use_the_partial_index(
    sqlite_path: Path, name: str, build: Callable[[], Executable], index: str, analysed: bool
) -> None:
    if analysed:  # statistics of a big table must not talk the planner out of the index
        fill_sqlite(sqlite_path, total=5000, pending=3, running=2)
    with sqlite_engine(sqlite_path) as engine, engine.connect() as connection:
        plan = sqlite_explain(connection, *compiled(build(), connection))
    assert sqlite_uses(plan, index), plan
    assert_no_sqlite_scan(plan)


@pytest.mark.parametrize(("name", "run", "index"), OPERATIONS, ids=OPERATION_IDS)
def test_sqlite_store_sends_indexed_polling_sql(
    sqlite_path: Path, name: str, run: Callable[[SessionDB], object], index: str
) -> None:
    fill_sqlite(sqlite_path, total=3000, pending=3, running=2)
    with sqlite_wire() as sent, SessionDB(sqlite_path) as db:
        del sent[:]  # opening's own reads are not polling
        run(db)
        polled = [sql for sql in sent if touches_sessions(sql)]
    assert polled, f"{name} sent nothing about sessions: {sent}"

    connection = sqlite3.connect(sqlite_path)
    try:
        plans = [sqlite_explain(connection, sql) for sql in polled]
    finally:
        connection.close()
    for plan in plans:
        assert_no_sqlite_scan(plan)
    assert any(sqlite_uses(plan, index) for plan in plans), list(zip(polled, plans, strict=True))


def forget_statistics(path: Path) -> None:
    """A store's own files have no statistics until someone runs ANALYZE."""
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("DELETE FROM sqlite_stat1")


def sent_plans(
    path: Path, run: Callable[[SessionDB], object], **store: Any
) -> tuple[object, list[list[str]]]:
    """What ``run`` returns through a store, and the query plan of every statement about
    sessions it sent."""
    with sqlite_wire() as sent, SessionDB(path, **store) as db:
        del sent[:]
        result = run(db)
        statements_sent = [sql for sql in sent if touches_sessions(sql)]
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return result, [sqlite_explain(connection, sql) for sql in statements_sent]


@pytest.mark.parametrize("analysed", [False, True], ids=["no-statistics", "analysed"])
def test_sqlite_batch_claim_finds_its_rows_by_key(sqlite_path: Path, analysed: bool) -> None:
    """The batch claim walks the pending index once, in its subquery, and reaches the rows it
    claims by rowid (which the index holds): never every pending row per claimed one, and no
    detour through the primary key's index."""
    fill_sqlite(sqlite_path, total=3000, pending=500, running=2)
    if not analysed:
        forget_statistics(sqlite_path)
    claimed, plans = sent_plans(sqlite_path, lambda db: db.claim_pending_handoffs(2))
    assert [row["id"] for row in claimed] == ["s000000", "s000001"]  # type: ignore[attr-defined]
    assert len(plans) == 2, plans  # the events, then the update
    for plan in plans:
        outer, *subquery = plan
        assert outer == "SEARCH sessions USING INTEGER PRIMARY KEY (rowid=?)", plan
        assert any(sqlite_uses([step], PENDING_INDEX) for step in subquery), plan
        assert_no_sqlite_scan(plan)


BY_PRIMARY_KEY = r"SEARCH sessions USING (COVERING )?INDEX sqlite_autoindex_sessions_1 \(id=\?\)"

# Finishing or renewing a few of many running rows: each statement walks the ids it was given
# (a JSON array) and looks each row up by key; the running index, which holds every running
# row, is not walked.
FINISHERS: list[tuple[str, Callable[[SessionDB], object], object]] = [
    (
        "complete_handoffs",
        lambda db: db.complete_handoffs(["s000010", "s000011", "nobody"]),
        {"s000010": True, "s000011": True, "nobody": False},
    ),
    (
        "fail_handoffs",
        lambda db: db.fail_handoffs({"s000010": "gone", "nobody": "x"}),
        {"s000010": True, "nobody": False},
    ),
    ("renew_handoff_leases", lambda db: db.renew_handoff_leases(["s000010", "nobody"]), None),
]


@pytest.mark.parametrize("analysed", [False, True], ids=["no-statistics", "analysed"])
@pytest.mark.parametrize("owner", [None, "gw-a"], ids=["ownerless", "fenced"])
@pytest.mark.parametrize(
    ("name", "run", "expected"), FINISHERS, ids=[name for name, _, _ in FINISHERS]
)
def test_sqlite_batch_finishes_reach_their_rows_by_key(
    sqlite_path: Path,
    analysed: bool,
    owner: str | None,
    name: str,
    run: Callable[..., object],
    expected: object,
) -> None:
    fill_sqlite(sqlite_path, total=3000, pending=2, running=2500)
    with contextlib.closing(sqlite3.connect(sqlite_path)) as connection, connection:
        connection.execute("UPDATE sessions SET handoff_owner = 'gw-a', handoff_attempt = 1")
    if not analysed:
        forget_statistics(sqlite_path)
    store = {"owner": owner, "lease_seconds": 60.0} if owner else {}
    result, plans = sent_plans(sqlite_path, run, **store)
    if name == "renew_handoff_leases":
        # Nothing is leased without an owner: nothing is renewed, nothing sent.
        assert result == (["s000010"] if owner else [])
        assert len(plans) == (1 if owner else 0), plans
    else:
        assert result == expected
        assert len(plans) == 2, plans  # the events, then the rows
    for plan in plans:
        assert any(re.match(r"SCAN (claims|ids) VIRTUAL TABLE", step) for step in plan), plan
        assert any(re.match(BY_PRIMARY_KEY, step) for step in plan), plan
        assert not sqlite_uses(plan, RUNNING_INDEX), plan
        assert_no_sqlite_scan(plan)


def test_sqlite_polling_results_match(sqlite_path: Path) -> None:
    """The indexed queries return the right rows (a partial index answers only what it holds)."""
    fill_sqlite(sqlite_path, total=500, pending=3, running=2)
    with SessionDB(sqlite_path) as db:
        assert db.has_pending_handoffs()
        assert [row["id"] for row in db.list_pending_handoffs()] == [
            "s000000",
            "s000001",
            "s000002",
        ]
        assert db.reclaim_stale_running_handoffs("stale") == ["s000003", "s000004"]


def test_sqlite_adopted_legacy_file_polls_through_our_index(tmp_path: Path) -> None:
    """A legacy file keeps its own ``IN ('pending','running')`` index, which SQLite cannot use
    for the probe; the index adoption adds is the one chosen."""
    legacy = build_legacy_db(tmp_path / "state.db", with_handoff=True, sessions=200)
    SessionDB(legacy.path).close()
    with sqlite_engine(legacy.path) as engine, engine.connect() as connection:
        for _name, build, index in BUILDERS:
            plan = sqlite_explain(connection, *compiled(build(), connection))
            assert sqlite_uses(plan, index), plan
            assert_no_sqlite_scan(plan)


def _probe_plan(index_where: str) -> list[str]:
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, handoff_state TEXT)")
        connection.execute(f"CREATE INDEX ix_probe ON sessions (handoff_state) WHERE {index_where}")
        return sqlite_explain(
            connection, "SELECT 1 FROM sessions WHERE handoff_state = 'pending' LIMIT 1"
        )
    finally:
        connection.close()


def test_sqlite_ignores_an_in_list_partial_index_for_equality() -> None:
    """Why the models use one equality-predicate partial index per state.

    SQLite uses a partial index only when it can prove that the query's WHERE implies the
    index's; it cannot for ``IN (...)`` against ``= 'pending'``, so such an index is never used
    by the probe and every poll scans the whole table.
    """
    in_list = _probe_plan("handoff_state IN ('pending','running')")
    assert not any("ix_probe" in step for step in in_list), in_list
    assert any(re.fullmatch(r"SCAN sessions", step) for step in in_list), in_list

    equality = _probe_plan("handoff_state = 'pending'")
    assert any("ix_probe" in step for step in equality), equality


def test_statements_render_states_as_literals(sqlite_path: Path) -> None:
    """A literal state is what lets every planner (PostgreSQL's generic plans included) prove
    the partial index's predicate."""
    with sqlite_engine(sqlite_path) as engine, engine.connect() as connection:
        for _name, build, _index in BUILDERS:
            sql, _params = compiled(build(), connection)
            assert re.search(r"handoff_state = '(pending|running)'", sql), sql


# -- PostgreSQL and MariaDB -----------------------------------------------------------------

TOTAL = 20_000


def _state(number: int) -> str | None:
    if number % 4000 == 0:
        return "pending"
    if number % 5000 == 1:
        return "running"
    return ("completed", "failed", None)[number % 3]


@pytest.fixture(scope="module")
def pg_many() -> Iterator[URL]:
    """~20,000 sessions of which a handful are pending or running, analysed (shared by the
    module: only the reclaim changes anything, and only running rows)."""
    with migrated_database("postgresql") as url:
        engine = make_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(
                    text(
                        "INSERT INTO sessions (id, source, started_at, handoff_state) "
                        "SELECT 's' || g, 'cli', g, CASE "
                        "  WHEN g % 4000 = 0 THEN 'pending' "
                        "  WHEN g % 5000 = 1 THEN 'running' "
                        "  WHEN g % 3 = 0 THEN 'completed' "
                        "  WHEN g % 3 = 1 THEN 'failed' END "
                        f"FROM generate_series(1, {TOTAL}) AS g"
                    )
                )
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(text("ANALYZE sessions"))
        finally:
            engine.dispose()
        yield url


@pytest.fixture(scope="module")
def mysql_many() -> Iterator[URL]:
    with migrated_database("mysql") as url:
        engine = make_engine(url)
        try:
            rows = [
                {"id": f"s{n}", "source": "cli", "at": float(n), "state": _state(n)}
                for n in range(1, TOTAL + 1)
            ]
            with engine.begin() as connection:
                connection.execute(
                    text(
                        "INSERT INTO sessions (id, source, started_at, handoff_state) "
                        "VALUES (:id, :source, :at, :state)"
                    ),
                    rows,
                )
            with engine.connect() as connection:
                connection.execute(text("ANALYZE TABLE sessions"))
        finally:
            engine.dispose()
        yield url


def pg_explain(url: URL, sql: str, params: Any) -> str:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql(f"EXPLAIN {sql}", params).all()
            connection.rollback()
    finally:
        engine.dispose()
    return "\n".join(str(row[0]) for row in rows)


def pg_uses(plan: str, index: str) -> bool:
    return (
        re.search(rf"(Index|Index Only|Bitmap Index) Scan (using|on) {index}\b", plan) is not None
    )


def mysql_explain(url: URL, sql: str, params: Any) -> list[dict[str, Any]]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql(f"EXPLAIN {sql}", params).mappings().all()
            connection.rollback()
    finally:
        engine.dispose()
    return [dict(row) for row in rows if row["table"] == "sessions"]


@pytest.mark.parametrize(("name", "build", "index"), BUILDERS, ids=BUILDER_IDS)
def test_postgresql_builders_use_the_partial_index(
    pg_many: URL, name: str, build: Callable[[], Executable], index: str
) -> None:
    engine = make_engine(pg_many)
    try:
        with engine.connect() as connection:
            sql, params = compiled(build(), connection)
    finally:
        engine.dispose()
    plan = pg_explain(pg_many, sql, params)
    assert pg_uses(plan, index), plan
    assert "Seq Scan on sessions" not in plan, plan


def record(url: URL, run: Callable[[SessionDB], object]) -> list[tuple[str, Any]]:
    """The (SQL, parameters) about sessions that ``run`` makes the store send, as the driver
    sees them (PostgreSQL's runner does not go through SQLAlchemy's cursor events)."""
    with SessionDB(url=url) as db, driver_wire() as wire:
        run(db)
    return [(sent.sql, sent.params) for sent in wire.statements if touches_sessions(sent.sql)]


def test_postgresql_store_polling_results(pg_many: URL) -> None:
    with SessionDB(url=pg_many) as db:
        assert db.has_pending_handoffs()
        assert [row["id"] for row in db.list_pending_handoffs()] == [
            f"s{n}" for n in range(4000, TOTAL + 1, 4000)
        ]


@pytest.mark.parametrize(("name", "run", "index"), OPERATIONS, ids=OPERATION_IDS)
def test_postgresql_store_sends_indexed_polling_sql(
    pg_many: URL, name: str, run: Callable[[SessionDB], object], index: str
) -> None:
    polled = record(pg_many, run)
    assert polled, f"{name} sent nothing about sessions"
    plans = [pg_explain(pg_many, sql, params) for sql, params in polled]
    for plan in plans:
        assert "Seq Scan on sessions" not in plan, plan
    assert any(pg_uses(plan, index) for plan in plans), plans


@pytest.mark.parametrize(("name", "build", "_index"), BUILDERS, ids=BUILDER_IDS)
def test_mariadb_builders_use_a_handoff_index(
    mysql_many: URL, name: str, build: Callable[[], Executable], _index: str
) -> None:
    """MariaDB/MySQL have no partial indexes: the composite (state, time) indexes still make
    the lookup a range over the rows in that state, never a full table scan. Either of the
    two serves (both lead with ``handoff_state``)."""
    engine = make_engine(mysql_many)
    try:
        with engine.connect() as connection:
            sql, params = compiled(build(), connection)
    finally:
        engine.dispose()
    steps = mysql_explain(mysql_many, sql, params)
    assert steps
    for step in steps:
        assert step["key"] in HANDOFF_INDEXES, steps
        assert step["type"] != "ALL", steps


@pytest.mark.parametrize(("name", "run", "_index"), OPERATIONS, ids=OPERATION_IDS)
def test_mariadb_store_sends_no_full_scans(
    mysql_many: URL, name: str, run: Callable[[SessionDB], object], _index: str
) -> None:
    polled = record(mysql_many, run)
    assert polled, f"{name} sent nothing about sessions"
    for sql, params in polled:
        steps = mysql_explain(mysql_many, sql, params)
        assert steps, sql
        for step in steps:
            assert step["type"] != "ALL", (sql, steps)
            assert step["key"] is not None, (sql, steps)


# The watcher's batch statements: each reaches the rows it names by key, its oldest-pending pick
# goes through the partial index, and nothing scans the sessions table.
_PENDING_IDS = [f"s{n}" for n in range(4000, TOTAL + 1, 4000)]
_BATCH_PARAMS: dict[str, Any] = {
    "now": 1.0,
    "actor": "gw",
    "owner": "gw",
    "lease_expires_at": 61.0,
    "turn_until": 21.0,
    "turn_gateway": "gw",
    "limit": 10,
    "exclude": ["s1"],
    "ids": _PENDING_IDS,
    "holders": [f"h-{session_id}" for session_id in _PENDING_IDS],
    "attempts": [1] * len(_PENDING_IDS),
    "errors": [None] * len(_PENDING_IDS),
    "release_ids": _PENDING_IDS,
    "release_holders": [f"h-{session_id}" for session_id in _PENDING_IDS],
    "lease_until": 21.0,
}
BATCH_BUILDERS: list[tuple[str, Callable[[], Executable]]] = [
    ("claim given rows with turns", lambda: statements.claim_given(True)),
    ("claim the next rows with turns", lambda: statements.claim_next(True)),
    ("finish many, giving turns back", lambda: statements.finish_claims(True, True)),
    ("refresh many turns", statements.refresh_turn_leases),
    ("release many turns", statements.release_turn_leases),
    ("many transcripts", lambda: statements.get_transcripts(True)),
]


@pytest.mark.parametrize(("name", "build"), BATCH_BUILDERS, ids=[n for n, _ in BATCH_BUILDERS])
def test_postgresql_batch_statements_never_scan_sessions(
    pg_many: URL, name: str, build: Callable[[], Executable]
) -> None:
    engine = make_engine(pg_many)
    try:
        with engine.connect() as connection:
            result = build().compile(dialect=connection.dialect)
            assert isinstance(result, SQLCompiler)
            params = result.construct_params(
                {key: value for key, value in _BATCH_PARAMS.items() if key in result.binds}
            )
    finally:
        engine.dispose()
    plan = pg_explain(pg_many, result.string, params)
    assert "Seq Scan on sessions" not in plan, plan
    if name == "claim the next rows with turns":
        assert pg_uses(plan, PENDING_INDEX), plan
