"""Copies sessions, transcripts and the audit trail to another database: promotion to a server.

The copy streams each table in primary-key order, in batches (keyset pagination, so memory
stays bounded whatever the size), and commits batch by batch: an interrupted copy is resumed by
running it again. Rows already in the target are compared: identical ones are skipped, so a
second run copies nothing; differing ones stop the copy before anything is written unless
``force`` is given. Only the modelled columns travel; columns and tables that older hermes
versions left in an adopted ``state.db`` stay behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Column, Connection, Table, func, select, text

from .engine import READ_ONLY, describe, is_sqlite, make_engine
from .errors import HermesStateError, InvalidInputError, translated
from .models import handoff_events, messages, sessions
from .notify import database_key
from .schema import ensure_current

__all__ = ["COPIED_TABLES", "CopyConflictError", "CopyReport", "TableReport", "copy_database"]

#: In dependency order: messages reference sessions.
COPIED_TABLES: Final = (sessions, messages, handoff_events)
DEFAULT_BATCH: Final = 2000
CONFLICTS_SHOWN: Final = 10

Progress = Callable[[str, int, int], None]


class CopyConflictError(HermesStateError):
    """The target holds rows with the same keys and different values."""


@dataclass
class TableReport:
    """What happened to one table's rows."""

    table: str
    source_rows: int = 0
    copied: int = 0
    identical: int = 0
    overwritten: int = 0
    target_rows: int = 0
    conflicts: list[Any] = field(default_factory=list)


@dataclass
class CopyReport:
    source: str
    target: str
    tables: list[TableReport]

    @property
    def copied(self) -> int:
        return sum(table.copied + table.overwritten for table in self.tables)


def copy_database(
    source_url: Any,
    target_url: Any,
    *,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy every session, message and handoff event from ``source_url`` to ``target_url``.

    Both databases must be at the head revision (an embedded file is upgraded on the way, a
    server database that is behind is refused with the command to run).
    """
    if batch_size < 1:
        raise InvalidInputError(f"batch size must be at least 1, not {batch_size}")
    if database_key(source_url) == database_key(target_url):
        raise InvalidInputError(f"{describe(source_url)} is both the source and the target")
    source, target = make_engine(source_url), make_engine(target_url)
    where = f"the copy from {describe(source_url)} to {describe(target_url)}"
    try:
        for engine in (source, target):
            ensure_current(engine, auto_upgrade=is_sqlite(engine.url))
        with translated(where), source.connect() as reading, target.connect() as writing:
            reading.execution_options(**{READ_ONLY: True})
            for table in COPIED_TABLES:
                _analyze(writing, table)  # the key lookups below need fresh statistics
            if not force:
                _refuse_conflicts(reading, writing, batch_size)
            reports = []
            for table in COPIED_TABLES:
                with translated(f"{where} (table {table.name})"):
                    reports.append(
                        _copy_table(table, reading, writing, batch_size, force, progress)
                    )
            _advance_sequences(writing)
            for table_report, table in zip(reports, COPIED_TABLES, strict=True):
                table_report.target_rows = _count(writing, table)
            writing.commit()
    finally:
        source.dispose()
        target.dispose()
    copied = CopyReport(describe(source_url), describe(target_url), reports)
    _verify(copied)
    return copied


def _key(table: Table) -> Column[Any]:
    (column,) = table.primary_key.columns
    return column


def _batches(connection: Connection, table: Table, batch_size: int) -> Iterator[Sequence[Any]]:
    """The table's rows in key order, ``batch_size`` at a time, never more in memory."""
    key = _key(table)
    query = select(*table.columns).order_by(key).limit(batch_size)
    last = None
    while True:
        page = query if last is None else query.where(key > last)
        rows = connection.execute(page).all()
        connection.rollback()  # no snapshot held open between batches on the source
        if not rows:
            return
        yield rows
        last = rows[-1]._mapping[key.name]


def _existing(connection: Connection, table: Table, keys: Sequence[Any]) -> dict[Any, Any]:
    key = _key(table)
    rows = connection.execute(select(*table.columns).where(key.in_(keys))).all()
    return {row._mapping[key.name]: tuple(row) for row in rows}


def _refuse_conflicts(reading: Connection, writing: Connection, batch_size: int) -> None:
    """Before writing anything: stop if any target row differs from its source row."""
    conflicts: list[str] = []
    for table in COPIED_TABLES:
        if _count(writing, table) == 0:
            continue  # an empty target table cannot conflict
        key = _key(table)
        for rows in _batches(reading, table, batch_size):
            present = _existing(writing, table, [row._mapping[key.name] for row in rows])
            writing.rollback()
            for row in rows:
                stored = present.get(row._mapping[key.name])
                if stored is not None and stored != tuple(row):
                    conflicts.append(f"{table.name} {row._mapping[key.name]!r}")
    if conflicts:
        shown = ", ".join(conflicts[:CONFLICTS_SHOWN])
        hidden = len(conflicts) - CONFLICTS_SHOWN
        more = f" and {hidden} more" if hidden > 0 else ""
        raise CopyConflictError(
            f"{len(conflicts)} row(s) already in the target differ from the source "
            f"({shown}{more}); nothing was copied. Re-run with --force to overwrite them."
        )


def _copy_table(
    table: Table,
    reading: Connection,
    writing: Connection,
    batch_size: int,
    force: bool,
    progress: Progress | None,
) -> TableReport:
    report = TableReport(table.name)
    total = _count(reading, table)
    reading.rollback()
    key = _key(table)
    names = [column.name for column in table.columns]
    analyzed_at = _count(writing, table)
    writing.rollback()
    for rows in _batches(reading, table, batch_size):
        present = _existing(writing, table, [row._mapping[key.name] for row in rows])
        fresh, changed = [], []
        for row in rows:
            stored = present.get(row._mapping[key.name])
            if stored is None:
                fresh.append(dict(zip(names, row, strict=True)))
            elif stored == tuple(row):
                report.identical += 1
            else:
                changed.append(dict(zip(names, row, strict=True)))
        if changed and not force:  # appeared since the conflict check: still refuse
            raise CopyConflictError(
                f"{table.name} rows changed in the target during the copy; re-run to resume"
            )
        if fresh:
            writing.execute(table.insert(), fresh)
        for values in changed:
            writing.execute(table.update().where(key == values[key.name]).values(values))
        writing.commit()  # batch by batch: an interrupted copy resumes where it stopped
        report.source_rows += len(rows)
        report.copied += len(fresh)
        report.overwritten += len(changed)
        grown = analyzed_at + report.copied
        if grown >= 2 * max(analyzed_at, batch_size):  # doubled: O(log n) ANALYZEs in all
            _analyze(writing, table)
            analyzed_at = grown
        if progress is not None:
            progress(table.name, report.source_rows, total)
    return report


def _analyze(writing: Connection, table: Table) -> None:
    """Fresh planner statistics for a growing target table (PostgreSQL).

    Without them PostgreSQL plans the per-batch key lookup (``_existing``) for an empty table,
    a sequential scan; psycopg prepares the statement after five runs and the generic plan
    keeps scanning while the table grows: each batch then costs O(rows copied so far).
    """
    if writing.dialect.name == "postgresql":
        writing.execute(text(f"ANALYZE {table.name}"))
        writing.commit()


def _count(connection: Connection, table: Table) -> int:
    return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def _advance_sequences(writing: Connection) -> None:
    """Ids were copied explicitly; PostgreSQL's sequences must move past them."""
    if writing.dialect.name != "postgresql":
        return  # SQLite and MySQL/MariaDB advance their counters on explicit inserts
    for table in (messages, handoff_events):
        writing.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "  # noqa: S608
                f"GREATEST(COALESCE(MAX(id), 0), 1), MAX(id) IS NOT NULL) FROM {table.name}"
            )
        )


def _verify(report: CopyReport) -> None:
    for table in report.tables:
        accounted = table.copied + table.identical + table.overwritten
        if accounted != table.source_rows or table.target_rows < table.source_rows:
            raise HermesStateError(
                f"copy of {table.table} did not verify: {table.source_rows} source rows, "
                f"{accounted} accounted for, {table.target_rows} in the target"
            )
