"""Rows compared with the target's before and after writing; the report checked."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Table,
    func,
    inspect,
    literal_column,
    null,
    select,
    text,
    tuple_,
)
from sqlalchemy.schema import DefaultClause
from sqlalchemy.sql.elements import TextClause

from ..errors import CopyConflictError, HermesStateError
from ..models import UPSTREAM_SCHEMA_VERSION
from ..schema import ADOPTION_TABLE
from .planning import _Carried
from .reports import CopyReport, _conflict_message


class _Rows:
    """One carried table's rows as they travel: source order, fills applied."""

    def __init__(self, carried: _Carried, fills: dict[str, Any]) -> None:
        self.carried = carried
        self.names = [column.name for column in carried.columns]
        if carried.target is not None:
            self.target_columns: list[Any] = [carried.target.c[name] for name in self.names]
        else:
            # Before the target is shaped: a column still to be added reads as what adding it
            # will give the present rows, its default or NULL.
            assert carried.planned is not None
            pending = {column.name: column for column in carried.add}
            self.target_columns = [
                _as_added(pending[name]) if name in pending else carried.planned.c[name]
                for name in self.names
            ]
        self.key_positions = [self.names.index(name) for name in carried.keys]
        self.fills = [(self.names.index(name), value) for name, value in fills.items()]
        self.converts = [
            (self.names.index(name), convert) for name, convert in carried.convert.items()
        ]

    def prepare(self, row: Sequence[Any]) -> tuple[Any, ...]:
        values = list(row)
        for position, convert in self.converts:
            values[position] = convert(values[position])
        for position, value in self.fills:
            if values[position] is None:
                values[position] = value
        return tuple(values)

    def key(self, row: Sequence[Any]) -> Any:
        if len(self.key_positions) == 1:
            return row[self.key_positions[0]]
        return tuple(row[position] for position in self.key_positions)

    def as_dict(self, row: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(self.names, row, strict=True))

    def batches(self, reading: Connection, batch_size: int) -> Iterator[list[tuple[Any, ...]]]:
        """The source rows in key order, ``batch_size`` at a time, never more in memory."""
        table = self.carried.source
        keys = [table.c[name] for name in self.carried.keys]
        columns = [table.c[name] for name in self.names]
        if not keys:  # no primary key (upstream's schema_version): a small table, read whole
            rows = [self.prepare(row) for row in reading.execute(select(*columns)).all()]
            reading.rollback()
            if rows:
                yield rows
            return
        query = select(*columns).order_by(*keys).limit(batch_size)
        last: Any = None
        while True:
            if last is None:
                page = query
            elif len(keys) == 1:
                page = query.where(keys[0] > last)
            else:
                page = query.where(tuple_(*keys) > tuple_(*last))
            found = reading.execute(page).all()
            reading.rollback()  # no snapshot held open between batches on the source
            if not found:
                return
            yield [self.prepare(row) for row in found]
            last = self.key(found[-1])

    def existing(self, writing: Connection, rows: Sequence[tuple[Any, ...]]) -> dict[Any, Any]:
        """The target's rows with the keys of ``rows`` (a keyless table: all of them, counted)."""
        query = select(*self.target_columns)
        if not self.key_positions:
            return dict(Counter(tuple(row) for row in writing.execute(query)))
        keys = [self.target_columns[position] for position in self.key_positions]
        wanted = [self.key(row) for row in rows]
        condition = keys[0].in_(wanted) if len(keys) == 1 else tuple_(*keys).in_(wanted)
        found = writing.execute(query.where(condition)).all()
        return {self.key(row): tuple(row) for row in found}


def _as_added(column: Column[Any]) -> Any:
    default = column.server_default
    if isinstance(default, DefaultClause) and isinstance(default.arg, TextClause):
        return literal_column(default.arg.text).label(column.name)
    return null().label(column.name)


@dataclass
class _Comparison:
    """A table's source rows against the target: not there yet, identical, or different."""

    new: int = 0
    identical: int = 0
    differing: int = 0
    #: the differing rows, named (table and key), for the refusal
    conflicts: list[str] = field(default_factory=list)


def _compare(
    reading: Connection,
    writing: Connection,
    carried: _Carried,
    fills: dict[str, Any],
    batch_size: int,
) -> _Comparison:
    """Every source row of one table looked up in the target, batch by batch."""
    assert carried.planned is not None
    found = _Comparison()
    if carried.create or _count(writing, carried.planned) == 0:
        found.new = _count(reading, carried.source)  # an empty target table cannot conflict
        reading.rollback()
        writing.rollback()
        return found
    rows = _Rows(carried, fills)
    replaceable = _only_our_stamp(writing, carried)
    for batch in rows.batches(reading, batch_size):
        present = rows.existing(writing, batch)
        writing.rollback()
        if not rows.key_positions:
            if present == Counter(batch):
                found.identical += len(batch)
            elif not present or replaceable:
                found.new += len(batch)
            else:
                found.differing += len(batch)
                found.conflicts.append(f"{carried.name} (its rows as a whole)")
            continue
        for row in batch:
            stored = present.get(rows.key(row))
            if stored is None:
                found.new += 1
            elif stored == row:
                found.identical += 1
            else:
                found.differing += 1
                found.conflicts.append(f"{carried.name} {rows.key(row)!r}")
    return found


def _only_our_stamp(writing: Connection, carried: _Carried) -> bool:
    """Whether the target's ``schema_version`` holds only the row hermes-state's migration
    wrote there (a new database's 30): the source's rows replace it. Upstream's version row
    counts the data migrations its store ran on *these* rows, so the source's row is the one
    that belongs with them."""
    if carried.name != "schema_version" or carried.create:
        return False
    if not inspect(writing).has_table(ADOPTION_TABLE):
        return False
    stamped = writing.execute(
        text(
            f"SELECT count(*) FROM {ADOPTION_TABLE} WHERE table_name = 'schema_version' "  # noqa: S608
            "AND kind IN ('r6_table', 'r6_version_row')"
        )
    ).scalar()
    versions = [row[0] for row in writing.execute(text("SELECT version FROM schema_version"))]
    writing.rollback()
    return bool(stamped) and versions == [UPSTREAM_SCHEMA_VERSION]


def _refuse_conflicts(
    reading: Connection,
    writing: Connection,
    plan: Sequence[_Carried],
    fills: dict[str, dict[str, Any]],
    batch_size: int,
) -> None:
    """Before writing rows: stop if any target row differs from its source row."""
    conflicts: list[str] = []
    for carried in plan:
        compared = _compare(reading, writing, carried, fills.get(carried.name, {}), batch_size)
        conflicts += compared.conflicts
    if conflicts:
        raise CopyConflictError(_conflict_message(conflicts, "nothing was copied"))


def _count(connection: Connection, table: Table) -> int:
    return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def _verify(report: CopyReport) -> None:
    for table in report.tables:
        accounted = table.copied + table.identical + table.overwritten
        if accounted != table.source_rows or table.target_rows < table.source_rows:
            raise HermesStateError(
                f"copy of {table.table} did not verify: {table.source_rows} source rows, "
                f"{accounted} accounted for, {table.target_rows} in the target"
            )
