"""The read-only lens on an SQLite state file that is not at head: temporary views and tables,
made on each connection, through which the head schema's reads see what the file holds.

An upstream ``state.db`` that ``db upgrade`` has not adopted yet (or one of ours at an older
revision) lacks some of the head schema's columns and tables. Migrating it to read it would
write to it; instead each connection of a read-only store gets, in its own ``temp`` schema
(which SQLite consults before ``main``, and which lives outside the file):

- for a table the file lacks, an empty table with the head schema's column names;
- for a table that lacks columns, a view of the file's table with those columns added, each
  valued as the migration would fill it (its server default, else NULL); a NOT NULL column the
  file has is read through its default where the file holds NULL, as adoption heals it.

Nothing is written to the file: the temporary objects are created before the connection is
made read-only (``PRAGMA query_only`` refuses even temporary ones), and vanish with it.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from sqlalchemy import Column, Engine, Table, event
from sqlalchemy.sql.elements import TextClause

from .models import metadata

__all__ = ["install_lens", "lens_statements", "needs_lens"]

#: Tables read through their rowid (the claim's order key is a ``sessions`` row's rowid).
_ROWID_TABLES: Final = frozenset({"sessions"})


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _default_sql(column: Column[Any]) -> str | None:
    """The SQL of the value a migration gives an existing row in a new ``column``."""
    default = column.server_default
    arg = getattr(default, "arg", None)
    if isinstance(arg, TextClause):
        return arg.text
    if isinstance(arg, str):
        return "'" + arg.replace("'", "''") + "'"
    return None


def _file_columns(connection: sqlite3.Connection) -> dict[str, set[str]]:
    tables = [
        name
        for (name,) in connection.execute(
            "SELECT name FROM main.sqlite_master WHERE type IN ('table', 'view')"
        )
    ]
    return {
        name: {row[1] for row in connection.execute(f"PRAGMA main.table_info({_quoted(name)})")}
        for name in tables
    }


def _select_of(table: Table, present: set[str]) -> str | None:
    """The view that gives ``table`` its head columns, or None when it needs none."""
    shown: list[str] = []
    changed = False
    for column in table.columns:
        name = _quoted(column.name)
        default = _default_sql(column)
        if column.name not in present:
            shown.append(f"{default or 'NULL'} AS {name}")
            changed = True
        elif not column.nullable and default is not None:
            shown.append(f"COALESCE({name}, {default}) AS {name}")
        else:
            shown.append(name)
    if not changed:
        return None
    if table.name in _ROWID_TABLES:
        shown.insert(0, "rowid AS rowid")
    # Every name is quoted and comes from the models or the file's own catalogue.
    return f"SELECT {', '.join(shown)} FROM main.{_quoted(table.name)}"  # noqa: S608


def lens_statements(connection: sqlite3.Connection) -> list[str]:
    """The ``CREATE TEMP`` statements that give this connection the head schema to read."""
    file_columns = _file_columns(connection)
    created: list[str] = []
    for table in metadata.sorted_tables:
        present = file_columns.get(table.name)
        if present is None:
            columns = ", ".join(_quoted(column.name) for column in table.columns)
            created.append(f"CREATE TEMP TABLE {_quoted(table.name)} ({columns})")
            continue
        select = _select_of(table, present)
        if select is not None:
            created.append(f"CREATE TEMP VIEW {_quoted(table.name)} AS {select}")
    return created


def needs_lens(connection: sqlite3.Connection) -> bool:
    """Whether the file lacks any table or column of the head schema."""
    return bool(lens_statements(connection))


def install_lens(engine: Engine) -> None:
    """Give every new connection of ``engine`` (a read-only SQLite engine) the lens, before
    its other connect listeners make it read-only."""

    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        for statement in lens_statements(dbapi_connection):
            dbapi_connection.execute(statement)

    event.listen(engine, "connect", _on_connect, insert=True)
