"""What travels: the source's tables, their shape on the target, and the pre-flight."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import (
    Column,
    Connection,
    Double,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    case,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import SchemaItem
from sqlalchemy.types import TypeEngine

from .. import content, search_index
from ..drift import sqlite_affinity
from ..errors import CopyRefusedError, InvalidInputError
from ..models import handoff_events, messages, metadata, sessions, table_options
from ..schema import ADOPTION_TABLE, VERSION_TABLE
from .portable import _KIND_OF_AFFINITY, _kind_of_type, _portable_default, portable_type
from .reports import Fill, SkippedTable

#: Copied first, in this order (messages reference sessions), then the other modelled tables
#: (in the models' dependency order); every other table follows.
MODELLED_TABLES: Final = (sessions.name, messages.name, handoff_events.name)
#: The modelled tables beyond those: every table of the models is carried.
OTHER_MODELLED_TABLES: Final = tuple(
    table.name for table in metadata.sorted_tables if table.name not in MODELLED_TABLES
)
#: messages columns that may hold upstream's NUL-prefixed content (see hermes_state.content).
ENCODED_CONTENT: Final = {messages.name: ("content", "api_content")}
DEFAULT_BATCH: Final = 2000


#: The shadow tables SQLite's FTS5 keeps beside each virtual table.
FTS5_SHADOW_SUFFIXES: Final = ("_data", "_idx", "_content", "_docsize", "_config")
#: ... and those of FTS3/FTS4 (upstream's oldest files may have such an index).
FTS4_SHADOW_SUFFIXES: Final = ("_content", "_segments", "_segdir", "_docsize", "_stat")
#: The virtual tables of the full-text index (derived from messages, rebuilt on SQLite).
SEARCH_TABLES: Final = frozenset(name for kind, name in search_index.OBJECTS if kind == "table")


@dataclass(frozen=True, slots=True)
class _SourceColumn:
    name: str
    kind: str
    length: int | None
    nullable: bool
    default: str | None
    key: bool


@dataclass
class _Carried:
    """One table that travels: how it reads on the source, how it looks on the target."""

    source: Table
    columns: list[_SourceColumn]
    target: Table | None = None  # reflected after the target has been shaped
    planned: Table | None = None  # what the target table is or will be, for the pre-flight
    create: bool = False
    add: list[Column[Any]] = field(default_factory=list)
    #: column name -> what a source value becomes on the target (content's NUL encoding)
    convert: dict[str, Callable[[Any], Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def keys(self) -> list[str]:
        return [column.name for column in self.columns if column.key]


#: Upstream's idx_sessions_effective_activity is on an expression, which SQLAlchemy's
#: reflection skips (indexes are not carried) with a warning each time it reflects sessions.
_EXPRESSION_INDEX_WARNING: Final = "Skipped unsupported reflection of expression"


def _reflected(name: str, metadata: MetaData, connection: Connection) -> Table:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_EXPRESSION_INDEX_WARNING)
        return _reals_as_floats(Table(name, metadata, autoload_with=connection, resolve_fks=False))


def _plan(reading: Connection) -> tuple[list[_Carried], list[SkippedTable]]:
    """The source's tables: those that travel (modelled ones first) and those left behind."""
    names = inspect(reading).get_table_names()
    skipped: list[SkippedTable] = []
    derived: set[str] = set()
    if reading.dialect.name == "sqlite":
        query = (
            "SELECT name, sql FROM sqlite_master "
            "WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        )
        for virtual, sql in reading.exec_driver_sql(query):
            derived.add(virtual)  # never carried: a virtual table's rows live in its module
            found = re.search(r"USING\s+(\w+)", sql or "", re.IGNORECASE)
            module = found.group(1).upper() if found else "VIRTUAL"
            # The full-text index of messages (ours, or an older upstream layout of it).
            ours = virtual in SEARCH_TABLES or (
                virtual.startswith("messages_fts") and module.startswith("FTS")
            )
            if ours:
                reason = (
                    f"{module} index derived from messages: a server has none; on a SQLite "
                    "file hermes recreates it and its triggers on open, and its FTS rebuild "
                    "refills it from messages"
                )
            else:
                reason = (
                    f"{module} virtual table the models do not know: its rows cannot be read "
                    "as a table's; recreate it on the target if it is needed"
                )
            skipped.append(SkippedTable(virtual, reason, derived=ours))
            suffixes: tuple[str, ...] = ()
            if module.startswith("FTS"):
                suffixes = FTS5_SHADOW_SUFFIXES if module == "FTS5" else FTS4_SHADOW_SUFFIXES
            for suffix in suffixes:
                if virtual + suffix in names:
                    derived.add(virtual + suffix)
                    skipped.append(
                        SkippedTable(
                            virtual + suffix, f"{module} shadow table of {virtual}", derived=ours
                        )
                    )
        counters = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'"
        if reading.exec_driver_sql(counters).first() is not None:
            skipped.append(
                SkippedTable(
                    "sqlite_sequence",
                    "SQLite's AUTOINCREMENT counters; each target keeps its own",
                    derived=True,
                )
            )
    for bookkeeping in (VERSION_TABLE, ADOPTION_TABLE):
        if bookkeeping in names:
            derived.add(bookkeeping)
            skipped.append(
                SkippedTable(
                    bookkeeping, "hermes-state bookkeeping; the target keeps its own", derived=True
                )
            )
    carried_names = [name for name in names if name not in derived]
    metadata = MetaData()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_EXPRESSION_INDEX_WARNING)
        metadata.reflect(bind=reading, only=carried_names, resolve_fks=False)
    order = {
        name: position for position, name in enumerate(MODELLED_TABLES + OTHER_MODELLED_TABLES)
    }
    dependency_order = {table.name: n for n, table in enumerate(metadata.sorted_tables)}
    carried_names.sort(key=lambda name: (order.get(name, len(order)), dependency_order[name]))
    carried = [_carried(reading, metadata.tables[name]) for name in carried_names]
    return carried, skipped


def _carried(reading: Connection, table: Table) -> _Carried:
    key_names = {column.name for column in table.primary_key.columns}
    columns: list[_SourceColumn] = []
    if reading.dialect.name == "sqlite":
        # The declared types as written; SQLite's affinity rules say what the column holds.
        quoted = table.name.replace('"', '""')
        info = reading.exec_driver_sql(f'PRAGMA table_info("{quoted}")').all()
        for _, name, declared, notnull, default, _ in info:
            kind = _KIND_OF_AFFINITY[sqlite_affinity(declared or "")]
            length = re.search(r"\(\s*(\d+)\s*\)", declared or "")
            columns.append(
                _SourceColumn(
                    name,
                    kind,
                    int(length.group(1)) if length and kind == "text" else None,
                    not notnull,
                    default,
                    name in key_names,
                )
            )
            # Read values as stored: reflected types such as DATETIME would parse them.
            table.c[name].type = {
                "integer": Integer(),
                "real": Double(),
                "text": Text(),
                "blob": LargeBinary(),
            }[kind]
    else:
        _reals_as_floats(table)
        for column in table.columns:
            kind = _kind_of_type(column.type)
            length = getattr(column.type, "length", None) if kind == "text" else None
            default = column.server_default
            columns.append(
                _SourceColumn(
                    column.name,
                    "text" if kind == "any" else kind,
                    None if isinstance(column.type, Text) else length,
                    bool(column.nullable),
                    str(default.arg) if default is not None and hasattr(default, "arg") else None,
                    column.name in key_names,
                )
            )
    return _Carried(table, columns)


def _planned(
    reading: Connection, target: Connection, fills: Sequence[Fill]
) -> tuple[list[_Carried], list[SkippedTable], dict[str, dict[str, Any]]]:
    """What a copy (or its dry run) carries: the source's tables with each one's target shape,
    what is left behind, and the ``--fill`` values resolved; both connections are left with
    no transaction open."""
    plan, skipped = _plan(reading)
    reading.rollback()
    for carried in plan:
        _shape(target, carried)
        carried.convert = _conversions(carried, reading.dialect, target.dialect)
    target.rollback()
    return plan, skipped, _resolve_fills(fills, plan, target.dialect)


def _conversions(
    carried: _Carried, source: Dialect, target: Dialect
) -> dict[str, Callable[[Any], Any]]:
    """What the source values of a table's columns become on the target: upstream's
    NUL-prefixed content is encoded on the way to a server and decoded on the way back (a
    copy between two SQLite files, or two servers, carries it as it is)."""
    names = [name for name in ENCODED_CONTENT.get(carried.name, ()) if name in carried.source.c]
    if source.name == "sqlite" and target.name != "sqlite":
        return dict.fromkeys(names, content.to_server)
    if source.name != "sqlite" and target.name == "sqlite":
        return dict.fromkeys(names, content.from_server)
    return {}


def _shape(writing: Connection, carried: _Carried) -> None:
    """Plan the target table: the existing one plus missing columns, or a new one."""
    dialect = writing.dialect
    metadata = MetaData()
    if inspect(writing).has_table(carried.name):
        existing = _reflected(carried.name, metadata, writing)
        for column in carried.columns:
            if column.name in existing.c:
                continue
            default = _portable_default(column.default, column.kind, dialect)

            def added(column: _SourceColumn = column, default: str | None = default) -> Column[Any]:
                return Column(
                    column.name,
                    portable_type(column.kind, length=column.length),
                    # A NOT NULL column can be added only with a default for the present rows.
                    nullable=column.nullable or default is None,
                    server_default=text(default) if default is not None else None,
                )

            carried.add.append(added())
            existing.append_column(added())
        carried.planned = existing
        return
    new_columns = [
        Column(
            column.name,
            portable_type(column.kind, length=column.length, key=column.key),
            nullable=column.nullable and not column.key,
            server_default=text(default)
            if (default := _portable_default(column.default, column.kind, dialect)) is not None
            else None,
            autoincrement=False,
        )
        for column in carried.columns
    ]
    items: list[SchemaItem] = list(new_columns)
    if carried.keys:
        items.append(PrimaryKeyConstraint(*carried.keys, name=f"pk_{carried.name}"))
    options: dict[str, Any] = table_options(dialect)
    carried.planned = Table(carried.name, metadata, *items, **options)
    carried.create = True


def _apply_shape(writing: Connection, carried: _Carried) -> None:
    """Create the table or add the missing columns (after the pre-flight passed)."""
    if carried.create:
        assert carried.planned is not None
        carried.planned.create(writing)
    elif carried.add:
        from alembic.migration import MigrationContext
        from alembic.operations import Operations

        operations = Operations(MigrationContext.configure(writing))
        for column in carried.add:
            operations.add_column(carried.name, column)
    carried.target = _reflected(carried.name, MetaData(), writing)


def _reals_as_floats(table: Table) -> Table:
    """Read every real column as float: MySQL's reflected DOUBLE would give Decimals, which
    compare unequal to the same value read from SQLite or PostgreSQL."""
    for column in table.columns:
        if getattr(column.type, "asdecimal", False) and not isinstance(column.type, Integer):
            column.type.asdecimal = False  # type: ignore[attr-defined]
    return table


# -- the pre-flight -------------------------------------------------------------------------------


def _target_type(column: Column[Any], dialect: Dialect) -> TypeEngine[Any]:
    return column.type.dialect_impl(dialect)


_ALLOWED_STORAGE: Final = {
    "integer": ("integer", "null"),
    "real": ("integer", "real", "null"),
    "text": ("text", "null"),
    "blob": ("blob", "null"),
}


def _fill_value(fill: Fill, column: Column[Any], dialect: Dialect) -> Any:
    kind = _kind_of_type(_target_type(column, dialect))
    try:
        if kind == "integer":
            return int(fill.value)
        if kind == "real":
            return float(fill.value)
    except ValueError:
        raise InvalidInputError(
            f"--fill {fill}: {fill.table}.{fill.column} holds {kind} values on the target, "
            f"and {fill.value!r} is not one"
        ) from None
    if kind == "blob":
        return fill.value.encode()
    return fill.value


def _resolve_fills(
    fills: Sequence[Fill], plan: Sequence[_Carried], dialect: Dialect
) -> dict[str, dict[str, Any]]:
    by_table = {carried.name: carried for carried in plan}
    resolved: dict[str, dict[str, Any]] = {}
    for fill in fills:
        carried = by_table.get(fill.table)
        if carried is None or fill.column not in carried.source.c:
            raise InvalidInputError(
                f"--fill {fill}: the source has no column {fill.table}.{fill.column} to fill"
            )
        assert carried.planned is not None
        target_column = carried.planned.c[fill.column]
        resolved.setdefault(fill.table, {})[fill.column] = _fill_value(fill, target_column, dialect)
    return resolved


def _preflight(
    reading: Connection,
    plan: Sequence[_Carried],
    fills: dict[str, dict[str, Any]],
    target: Dialect,
) -> None:
    """Refuse, before anything is written, rows the target's constraints would reject."""
    problems = _problems(reading, plan, fills, target)
    if problems:
        raise CopyRefusedError(
            "the target cannot take every source row, so nothing was copied: " + "; ".join(problems)
        )


def _problems(
    reading: Connection,
    plan: Sequence[_Carried],
    fills: dict[str, dict[str, Any]],
    target: Dialect,
) -> list[str]:
    """What about the source rows the target's constraints would reject, in words."""
    problems: list[str] = []
    length = func.length if reading.dialect.name == "sqlite" else func.char_length
    for carried in plan:
        assert carried.planned is not None
        checks: list[tuple[str, Any]] = []
        carried_names = {column.name for column in carried.columns}
        for extra in carried.planned.columns:
            # A target column the source lacks gets its default; without one, no row can go.
            if (
                extra.name not in carried_names
                and not extra.nullable
                and extra.server_default is None
                and extra is not carried.planned.autoincrement_column
            ):
                problems.append(
                    f"{carried.name}.{extra.name}: the target requires a value (NOT NULL, no "
                    "default) and the source has no such column; give it a default on the target"
                )
        for column in carried.columns:
            source_column = carried.source.c[column.name]
            target_column = carried.planned.c[column.name]
            where = f"{carried.name}.{column.name}"
            if not target_column.nullable and column.name not in fills.get(carried.name, {}):
                checks.append(
                    (
                        f"{where}: {{}} row(s) are NULL and the target column is NOT NULL; "
                        f"supply a value with --fill {where}=VALUE",
                        source_column.is_(None),
                    )
                )
            if target.name == "sqlite":
                continue  # SQLite stores what it is given: no lengths, no types to check
            target_type = _target_type(target_column, target)
            limit = getattr(target_type, "length", None)
            if isinstance(target_type, String) and limit is not None:
                checks.append(
                    (
                        f"{where}: {{}} row(s) are longer than the target's {limit} characters; "
                        "shorten them in the source",
                        length(source_column) > limit,
                    )
                )
            kind = _kind_of_type(target_type)
            if reading.dialect.name == "sqlite" and kind in _ALLOWED_STORAGE:
                checks.append(
                    (
                        f"{where}: {{}} row(s) hold values that are not {kind}, which the "
                        "target column requires; correct them in the source",
                        func.typeof(source_column).not_in(_ALLOWED_STORAGE[kind]),
                    )
                )
        if not checks:
            continue
        counts = reading.execute(
            select(
                *(func.coalesce(func.sum(case((test, 1), else_=0)), 0) for _, test in checks)
            ).select_from(carried.source)
        ).one()
        reading.rollback()
        problems.extend(
            message.format(n) for (message, _), n in zip(checks, counts, strict=True) if n
        )
    return problems
