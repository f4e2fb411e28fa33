"""A digest of every row of every table, to prove that an operation wrote nothing.

Usage::

    before = database_digest(url)
    ...  # something that must not write
    assert database_digest(url) == before

``database_snapshot`` returns the rows themselves, for comparisons whose failures should show
what differs. Both read through a plain engine of their own, not through hermes-state's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import MetaData, Table, create_engine, inspect, select
from sqlalchemy.engine import URL

__all__ = ["database_digest", "database_snapshot", "table_rows"]

Snapshot = dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]


def _sort_key(row: tuple[Any, ...]) -> str:
    # Rows may mix None with numbers and strings; their repr sorts them deterministically.
    return repr(row)


def database_snapshot(url: URL | str) -> Snapshot:
    """``{table: (column names, rows sorted by their repr)}`` for every table in the database."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            snapshot: Snapshot = {}
            for name in sorted(inspect(connection).get_table_names()):
                table = Table(name, MetaData(), autoload_with=connection)
                rows = [tuple(row) for row in connection.execute(select(table))]
                columns = tuple(column.name for column in table.columns)
                snapshot[name] = (columns, sorted(rows, key=_sort_key))
            connection.rollback()
            return snapshot
    finally:
        engine.dispose()


def database_digest(url: URL | str) -> str:
    """A SHA-256 over every table's name, columns and rows."""
    return hashlib.sha256(repr(database_snapshot(url)).encode("utf-8")).hexdigest()


def table_rows(url: URL | str, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as a dict, ordered by its first column."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            reflected = Table(table, MetaData(), autoload_with=connection)
            first = next(iter(reflected.columns))
            query = select(reflected).order_by(first)
            rows = [dict(row) for row in connection.execute(query).mappings()]
            connection.rollback()
            return rows
    finally:
        engine.dispose()
