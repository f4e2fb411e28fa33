"""A digest of every row of every table, to prove that an operation wrote nothing.

Usage::

    before = database_digest(url)
    ...  # something that must not write
    assert database_digest(url) == before

``database_snapshot`` returns the rows themselves, for comparisons whose failures should show
what differs. They read through plain engines of their own, not through hermes-state's.
"""

from __future__ import annotations

import atexit
import hashlib
from collections import OrderedDict
from typing import Any

from sqlalchemy import Engine, MetaData, Table, create_engine, inspect, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

__all__ = [
    "cached_engine",
    "database_digest",
    "database_snapshot",
    "forget",
    "sync_url",
    "table_rows",
]

Snapshot = dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]


def _sort_key(row: tuple[Any, ...]) -> str:
    # Rows may mix None with numbers and strings; their repr sorts them deterministically.
    return repr(row)


_SYNC_DRIVERS = {
    "sqlite": "pysqlite",
    "postgresql": "psycopg",
    "mysql": "pymysql",
    "mariadb": "pymysql",
}
_ASYNC_TWINS = {"aiosqlite", "asyncpg", "aiomysql", "asyncmy"}


def sync_url(url: URL | str) -> URL:
    """``url`` with a synchronous driver the test environment has installed: a URL without a
    driver (``mysql://``) would otherwise get SQLAlchemy's default (MySQLdb), and an asyncio
    one cannot serve a plain engine."""
    parsed = make_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if not driver or driver in _ASYNC_TWINS:
        return parsed.set(drivername=f"{backend}+{_SYNC_DRIVERS.get(backend, driver)}")
    return parsed


_ENGINES: OrderedDict[str, Engine] = OrderedDict()
_KEEP = 4


def cached_engine(url: URL | str) -> Engine:
    """An engine for ``url``. Server engines are reused: a digest is taken often, and a new
    engine would pay for a connection and the dialect's first-connect queries every time (the
    least recently used are disposed, so throwaway databases can be dropped). SQLite gets a
    fresh, unpooled engine each time: a file may be replaced under the same path."""
    parsed = sync_url(url)
    if parsed.get_backend_name() == "sqlite":
        return create_engine(parsed, poolclass=NullPool)
    key = parsed.render_as_string(hide_password=False)
    engine = _ENGINES.pop(key, None)
    if engine is None:
        engine = create_engine(parsed, pool_size=1, max_overflow=4, pool_pre_ping=True)
    _ENGINES[key] = engine
    while len(_ENGINES) > _KEEP:
        _ENGINES.popitem(last=False)[1].dispose()
    return engine


@atexit.register
def _dispose_all() -> None:
    while _ENGINES:
        _ENGINES.popitem()[1].dispose()


def forget(url: URL | str) -> None:
    """Close the cached connections to ``url`` (before dropping the database, for instance)."""
    key = sync_url(url).render_as_string(hide_password=False)
    engine = _ENGINES.pop(key, None)
    if engine is not None:
        engine.dispose()


def database_snapshot(url: URL | str) -> Snapshot:
    """``{table: (column names, rows sorted by their repr)}`` for every table in the database."""
    with cached_engine(url).connect() as connection:
        quote = connection.dialect.identifier_preparer.quote
        snapshot: Snapshot = {}
        for name in sorted(inspect(connection).get_table_names()):
            result = connection.exec_driver_sql(f"SELECT * FROM {quote(name)}")
            columns = tuple(result.keys())
            rows = [tuple(row) for row in result]
            snapshot[name] = (columns, sorted(rows, key=_sort_key))
        connection.rollback()
        return snapshot


def database_digest(url: URL | str) -> str:
    """A SHA-256 over every table's name, columns and rows."""
    return hashlib.sha256(repr(database_snapshot(url)).encode("utf-8")).hexdigest()


def table_rows(url: URL | str, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as a dict, ordered by its first column."""
    with cached_engine(url).connect() as connection:
        reflected = Table(table, MetaData(), autoload_with=connection)
        first = next(iter(reflected.columns))
        query = select(reflected).order_by(first)
        rows = [dict(row) for row in connection.execute(query).mappings()]
        connection.rollback()
        return rows
