"""Copies a hermes state database to another database: promotion to a server, and back.

The copy is lossless for primary data. It reflects the *source* (every table and column,
whether the models know them or not), creates on the target what is missing there (tables and
columns, with the portable type mapping of :func:`portable_type`), then streams each table in
primary-key order, in batches (keyset pagination, so memory stays bounded whatever the size),
committing batch by batch: an interrupted copy is resumed by running it again. Rows already in
the target are compared on every carried column: identical ones are skipped, so a second run
copies nothing; differing ones stop the copy before anything is written unless ``force``.

Before anything is written, the source rows are checked against the target's constraints (NOT
NULL, string lengths, types): a row the target cannot take refuses the whole copy, naming table,
column and row count; ``fills`` supply values for NULLs.

Every table of the models is carried, and so is any other table the source has (primary data
the models do not know). Not carried, because they are derived or bookkeeping
(:class:`SkippedTable` says why for each, with ``derived`` set): the full-text index of
:mod:`hermes_state.search_index` (its FTS virtual tables, their shadow tables and its views),
``sqlite_sequence``, and the version and adoption tables of hermes-state itself (the target
keeps its own). When the target is SQLite and has the full-text index, it is rebuilt from the
copied messages once the rows are in. A virtual table the models do not know (another FTS
index, an R-tree) is neither copied nor derived: it is the one kind of ``SkippedTable`` that
is not ``derived``, so the summary lists it.

Upstream's multimodal content (text starting with NUL) is written to a server in the
reversible form of :mod:`hermes_state.content` and read back from one into upstream's form.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
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
    and_,
    case,
    func,
    inspect,
    literal_column,
    null,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.mysql import LONGBLOB, LONGTEXT
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.schema import DefaultClause, SchemaItem
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.types import NullType, TypeEngine

from .. import content, search_index
from ..drift import sqlite_affinity
from ..engine import (
    READ_ONLY,
    connect_for_reading,
    describe,
    is_sqlite,
    make_engine,
    resolve_url,
)
from ..errors import (
    CopyConflictError,
    CopyRefusedError,
    HermesStateError,
    InvalidInputError,
    translated,
)
from ..models import (
    ID_LENGTH,
    UPSTREAM_SCHEMA_VERSION,
    handoff_events,
    messages,
    metadata,
    sessions,
    table_options,
)
from ..notify import database_key
from ..schema import (
    ADOPTION_TABLE,
    HEAD_REVISION,
    NO_REVISION,
    VERSION_TABLE,
    FileKind,
    check_upgradable,
    current_revision,
    ensure_current,
    is_known_revision,
    look_at_sqlite_file,
    out_of_date,
    too_new,
    upgrade,
)

__all__ = [
    "CopyConflictError",
    "CopyPlan",
    "CopyRefusedError",
    "CopyReport",
    "Fill",
    "FillPlan",
    "SideState",
    "SkippedTable",
    "TablePlan",
    "TableReport",
    "copy_database",
    "plan_copy",
    "portable_type",
]

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
CONFLICTS_SHOWN: Final = 10
#: The shadow tables SQLite's FTS5 keeps beside each virtual table.
FTS5_SHADOW_SUFFIXES: Final = ("_data", "_idx", "_content", "_docsize", "_config")
#: ... and those of FTS3/FTS4 (upstream's oldest files may have such an index).
FTS4_SHADOW_SUFFIXES: Final = ("_content", "_segments", "_segdir", "_docsize", "_stat")
#: The virtual tables of the full-text index (derived from messages, rebuilt on SQLite).
SEARCH_TABLES: Final = frozenset(name for kind, name in search_index.OBJECTS if kind == "table")
_MYSQL: Final = ("mysql", "mariadb")

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class Fill:
    """``TABLE.COLUMN=VALUE``: the value a NULL in that source column becomes on the target."""

    table: str
    column: str
    value: str

    @classmethod
    def parse(cls, given: str) -> Fill:
        name, equals, value = given.partition("=")
        table, dot, column = name.strip().partition(".")
        if not (equals and dot and table and column):
            raise InvalidInputError(
                f"--fill {given!r}: expected TABLE.COLUMN=VALUE, e.g. sessions.source=unknown"
            )
        return cls(table, column, value)

    def __str__(self) -> str:
        return f"{self.table}.{self.column}={self.value}"


@dataclass(frozen=True, slots=True)
class SkippedTable:
    """A source table that is not copied, and how the target gets it back (if it needs to).

    ``derived``: the target rebuilds or keeps its own (the full-text index, SQLite's counters,
    hermes-state's bookkeeping), so nothing is lost; the summary does not list those."""

    table: str
    reason: str
    derived: bool = False


@dataclass
class TableReport:
    """What happened to one table's rows, and to its shape on the target."""

    table: str
    source_rows: int = 0
    copied: int = 0
    identical: int = 0
    overwritten: int = 0
    target_rows: int = 0
    created: bool = False
    added_columns: list[str] = field(default_factory=list)


@dataclass
class CopyReport:
    source: str
    target: str
    tables: list[TableReport]
    skipped: list[SkippedTable] = field(default_factory=list)
    #: the target is SQLite with a full-text index, rebuilt from its messages after the copy
    fts_rebuilt: bool = False

    @property
    def copied(self) -> int:
        return sum(table.copied + table.overwritten for table in self.tables)


# -- the portable type mapping --------------------------------------------------------------------


#: SQLite affinity -> the kind of value a column holds on every backend.
_KIND_OF_AFFINITY: Final = {
    "INTEGER": "integer",
    "TEXT": "text",
    "BLOB": "blob",
    "REAL": "real",
    "NUMERIC": "real",
}


def _kind_of_type(type_: TypeEngine[Any]) -> str:
    """The kind of a column reflected from a server (or from a target), by its Python values."""
    if isinstance(type_, NullType):
        return "any"
    try:
        python = type_.python_type
    except NotImplementedError:
        return "text"
    if issubclass(python, int):  # bool too
        return "integer"
    if issubclass(python, float | Decimal):
        return "real"
    if issubclass(python, bytes):
        return "blob"
    return "text"


def portable_type(kind: str, *, length: int | None = None, key: bool = False) -> TypeEngine[Any]:
    """The SQLAlchemy type a carried column gets on a target that lacks it.

    ``kind`` is ``integer``, ``real``, ``text`` or ``blob`` (SQLite's affinities, NUMERIC read as
    real). Each type round-trips its values on SQLite, PostgreSQL and MySQL/MariaDB: integers as
    64-bit, reals as doubles, text unbounded (LONGTEXT on MySQL, whose TEXT stops at 64 KiB)
    unless the source declared a length, text keys as VARCHAR(255) on MySQL (which cannot index
    an unbounded column), binary data as BLOB/BYTEA/LONGBLOB.
    """
    if kind == "integer":
        # INTEGER on SQLite: a single integer key stays the rowid alias.
        return BigInteger().with_variant(Integer(), "sqlite")
    if kind == "real":
        return Double()
    if kind == "blob":
        return LargeBinary().with_variant(LONGBLOB(), *_MYSQL)
    if length is not None:
        return String(length)
    if key:
        return Text().with_variant(String(ID_LENGTH), *_MYSQL)
    return Text().with_variant(LONGTEXT(), *_MYSQL)


_PORTABLE_DEFAULT: Final = re.compile(r"-?\d+(\.\d+)?|'[^']*'")


def _portable_default(default: str | None, kind: str, target: Dialect) -> str | None:
    """A literal default (number or plain string) survives; expressions are left behind."""
    if default is None:
        return None
    literal = re.sub(r"::[\w ]+$", "", default.strip())  # PostgreSQL's "'auto'::text"
    if literal.startswith("(") and literal.endswith(")"):
        literal = literal[1:-1].strip()
    if not _PORTABLE_DEFAULT.fullmatch(literal):
        return None
    if kind in ("text", "blob") and target.name in _MYSQL:
        return None  # MySQL refuses defaults on TEXT and BLOB columns
    return literal


# -- what travels --------------------------------------------------------------------------------


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


# -- copying ----------------------------------------------------------------------------------


def copy_database(
    source_url: Any,
    target_url: Any,
    *,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    fills: Sequence[Fill] = (),
) -> CopyReport:
    """Copy every table and column of primary data from ``source_url`` to ``target_url``.

    The source is only read: an SQLite file that is not at head (an upstream file not adopted
    yet) is read through a temporary copy brought to head, and a server database behind head
    is refused. An SQLite target is created if absent and brought to head; a server target
    without the tables gets them, one behind head that holds tables is refused. Raises
    :class:`CopyRefusedError` when source rows do not fit the target, :class:`CopyConflictError`
    when target rows differ (unless ``force``); in both cases nothing has been written, and a
    copy that fails leaves no target file it created.
    """
    _check_pair(source_url, target_url, batch_size)
    new_file = _absent_sqlite_file(target_url)
    with _at_head(source_url) as (source_at_head, _state):
        try:
            return _copied(
                source_at_head, source_url, target_url, force, batch_size, progress, fills
            )
        except BaseException:
            if new_file is not None:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{new_file}{suffix}").unlink(missing_ok=True)
            raise


def _copied(
    source_at_head: URL,
    source_url: URL,
    target_url: URL,
    force: bool,
    batch_size: int,
    progress: Progress | None,
    fills: Sequence[Fill],
) -> CopyReport:
    source = make_engine(source_at_head, read_only=is_sqlite(source_at_head))
    target = make_engine(target_url)
    where = f"the copy from {describe(source_url)} to {describe(target_url)}"
    try:
        if not is_sqlite(target_url):
            revision, empty = _server_state(target_url)
            if revision != HEAD_REVISION and empty:
                upgrade(target_url)  # a server database without the tables: create them
        ensure_current(target, auto_upgrade=is_sqlite(target_url), url=target_url)
        with translated(where), source.connect() as reading, target.connect() as writing:
            reading.execution_options(**{READ_ONLY: True})
            plan, skipped, resolved = _planned(reading, writing, fills)
            _preflight(reading, plan, resolved, writing.dialect)
            if not force:
                _refuse_conflicts(reading, writing, plan, resolved, batch_size)
            # Only now is anything written: the shape first (MySQL commits DDL anyway).
            for carried in plan:
                _apply_shape(writing, carried)
            writing.commit()
            for carried in plan:
                _analyze(writing, carried)  # the key lookups below need fresh statistics
            reports = []
            for carried in plan:
                with translated(f"{where} (table {carried.name})"):
                    reports.append(
                        _copy_table(
                            carried,
                            resolved.get(carried.name, {}),
                            reading,
                            writing,
                            batch_size,
                            force,
                            progress,
                        )
                    )
            _advance_sequences(writing, plan)
            for table_report, carried in zip(reports, plan, strict=True):
                assert carried.target is not None
                table_report.target_rows = _count(writing, carried.target)
            writing.commit()
            fts_rebuilt = _rebuild_search(writing)
    finally:
        source.dispose()
        target.dispose()
    copied = CopyReport(
        describe(source_url), describe(target_url), reports, skipped, fts_rebuilt=fts_rebuilt
    )
    _verify(copied)
    return copied


def _rebuild_search(writing: Connection) -> bool:
    """On an SQLite target with the full-text index: refill it from the copied messages.

    The rows went in with the index's triggers active, so each new message was indexed once
    as it arrived; but rows a trigger skipped (upstream's backfill window, carried in
    ``state_meta``) or overwrote (``--force``) may leave it behind. FTS5's ``rebuild`` of an
    external-content table drops the whole index and reads every row again: the index ends
    exactly as its sources, whatever happened during the copy (and a rerun rebuilds again).
    """
    if writing.dialect.name != "sqlite" or not search_index.present(writing):
        writing.rollback()
        return False
    trigram = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts_trigram'"
    if writing.exec_driver_sql(trigram).first() is not None:
        search_index.rebuild(writing)
    else:  # an older upstream layout, words only
        writing.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    writing.commit()
    return True


def _check_pair(source_url: Any, target_url: Any, batch_size: int) -> None:
    if batch_size < 1:
        raise InvalidInputError(f"batch size must be at least 1, not {batch_size}")
    if database_key(source_url) == database_key(target_url):
        raise InvalidInputError(f"{describe(source_url)} is both the source and the target")


# -- the dry run ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SideState:
    """A database as the copy would find it: its revision now, and whether the copy would
    first create it, create its tables (``empty``: a server database without them) or bring
    it to head."""

    database: str
    revision: str | None
    exists: bool
    upgraded_first: bool
    empty: bool = False

    def __str__(self) -> str:
        if not self.exists:
            return f"{self.database} does not exist: the copy would create it at {HEAD_REVISION}"
        if self.empty:
            return (
                f"{self.database} holds none of the tables yet: the copy would first create "
                f"them at {HEAD_REVISION}"
            )
        if not self.upgraded_first:
            return f"{self.database} is at {HEAD_REVISION} (head)"
        how = (
            "adopt it in place and bring it"
            if self.revision is None
            else f"upgrade it from {self.revision}"
        )
        return (
            f"{self.database} is at {self.revision or NO_REVISION}: the copy would first {how} "
            f"to {HEAD_REVISION} (`hermes-state --url '{self.database}' db upgrade --dry-run` "
            "lists what that adds)"
        )


@dataclass
class TablePlan:
    """What a copy would do to one table."""

    table: str
    source_rows: int
    new: int
    identical: int
    differing: int
    target_rows: int
    created: bool
    added_columns: list[str]


@dataclass(frozen=True, slots=True)
class FillPlan:
    fill: Fill
    nulls: int


@dataclass
class CopyPlan:
    """What :func:`copy_database` would do, worked out without writing (``db copy --dry-run``).

    ``problems`` are source rows the target cannot take and ``conflicts`` target rows that
    differ from the source; either refuses the copy (conflicts only without ``force``).
    """

    source: SideState
    target: SideState
    force: bool
    tables: list[TablePlan]
    skipped: list[SkippedTable]
    fills: list[FillPlan]
    problems: list[str]
    conflicts: list[str]

    @property
    def refusal(self) -> str | None:
        """Why the copy would be refused, in the copy's words; None when it would go ahead."""
        if self.problems:
            return (
                "the target cannot take every source row, so nothing would be copied: "
                + "; ".join(self.problems)
            )
        if self.conflicts and not self.force:
            return _conflict_message(self.conflicts, "nothing would be copied")
        return None


def plan_copy(
    source_url: URL,
    target_url: URL,
    *,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    fills: Sequence[Fill] = (),
) -> CopyPlan:
    """The copy's pre-flight and comparison, and nothing after: neither database is written.

    An SQLite file the copy would first bring to head (or create) is planned on a temporary
    copy brought to head, so the plan sees the tables and columns the copy would; a server
    database behind head is refused as the copy refuses it.
    """
    _check_pair(source_url, target_url, batch_size)
    where = f"the copy from {describe(source_url)} to {describe(target_url)}"
    with (
        _at_head(source_url) as (source_at_head, source_state),
        _at_head(target_url, target=True) as (target_at_head, target_state),
    ):
        source = make_engine(source_at_head, read_only=is_sqlite(source_at_head))
        target = make_engine(target_at_head, read_only=is_sqlite(target_at_head))
        try:
            with translated(where), source.connect() as reading, target.connect() as looking:
                for connection in (reading, looking):
                    connection.execution_options(**{READ_ONLY: True})
                plan, skipped, resolved = _planned(reading, looking, fills)
                problems = _problems(reading, plan, resolved, looking.dialect)
                tables: list[TablePlan] = []
                conflicts: list[str] = []
                for carried in plan:
                    assert carried.planned is not None
                    compared = _compare(
                        reading, looking, carried, resolved.get(carried.name, {}), batch_size
                    )
                    conflicts += compared.conflicts
                    tables.append(
                        TablePlan(
                            carried.name,
                            compared.new + compared.identical + compared.differing,
                            compared.new,
                            compared.identical,
                            compared.differing,
                            0 if carried.create else _count(looking, carried.planned),
                            carried.create,
                            [column.name for column in carried.add],
                        )
                    )
                    looking.rollback()
                filled = _nulls_filled(reading, plan, fills)
        finally:
            source.dispose()
            target.dispose()
    return CopyPlan(source_state, target_state, force, tables, skipped, filled, problems, conflicts)


def _nulls_filled(
    reading: Connection, plan: Sequence[_Carried], fills: Sequence[Fill]
) -> list[FillPlan]:
    by_table = {carried.name: carried for carried in plan}
    counted: list[FillPlan] = []
    for fill in fills:
        source = by_table[fill.table].source
        query = select(func.count()).select_from(source).where(source.c[fill.column].is_(None))
        counted.append(FillPlan(fill, int(reading.execute(query).scalar_one())))
        reading.rollback()
    return counted


@contextlib.contextmanager
def _at_head(url: URL, *, target: bool = False) -> Iterator[tuple[URL, SideState]]:
    """The database as the copy would read or write it once at head, and its state now.

    A database at head is read as it is. An SQLite file that is not (or does not exist) is
    stood in for by a temporary copy brought to head (the file itself is only read); so is a
    ``target`` server database that holds none of the tables yet (planned as the empty
    database the copy would migrate). Any other server database behind head is refused.
    """
    where = describe(url)
    if not is_sqlite(url):
        revision, empty = _server_state(url)
        if revision == HEAD_REVISION:
            yield url, SideState(where, HEAD_REVISION, exists=True, upgraded_first=False)
            return
        if not (target and empty):
            raise out_of_date(where, revision)
        with tempfile.TemporaryDirectory(prefix="hermes-state-dry-run-") as folder:
            stand_in = resolve_url(Path(folder) / "at-head.db")
            upgrade(stand_in)
            yield stand_in, SideState(where, revision, exists=True, upgraded_first=True, empty=True)
        return
    assert url.database is not None
    state = look_at_sqlite_file(url)
    if state.revision == HEAD_REVISION:
        yield url, SideState(where, HEAD_REVISION, exists=True, upgraded_first=False)
        return
    check_upgradable(url)  # what the copy's upgrade would refuse, said of the file itself
    exists = Path(url.database).exists()
    with tempfile.TemporaryDirectory(prefix="hermes-state-dry-run-") as folder:
        stand_in = resolve_url(Path(folder) / "at-head.db")
        if exists and state.kind is not FileKind.NEW:
            assert stand_in.database is not None
            with (
                translated(where),
                contextlib.closing(connect_for_reading(url.database)) as original,
                contextlib.closing(sqlite3.connect(stand_in.database)) as copy,
            ):
                original.backup(copy)
        upgrade(stand_in)
        yield stand_in, SideState(where, state.revision, exists=exists, upgraded_first=True)


def _server_state(url: URL) -> tuple[str | None, bool]:
    """A server database's revision, and whether it holds none of the modelled tables."""
    engine = make_engine(url)
    try:
        with translated(describe(url)), engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            revision = current_revision(connection)
            present = set(inspect(connection).get_table_names()) & set(metadata.tables)
            connection.rollback()
    finally:
        engine.dispose()
    if revision is not None and revision != HEAD_REVISION and not is_known_revision(revision):
        raise too_new(describe(url), revision)
    return revision, not present


def _absent_sqlite_file(url: Any) -> Path | None:
    if isinstance(url, URL) and is_sqlite(url) and url.database:
        path = Path(url.database)
        return None if path.exists() else path
    return None


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


def _conflict_message(conflicts: Sequence[str], outcome: str) -> str:
    shown = ", ".join(conflicts[:CONFLICTS_SHOWN])
    hidden = len(conflicts) - CONFLICTS_SHOWN
    more = f" and {hidden} more" if hidden > 0 else ""
    return (
        f"{len(conflicts)} row(s) already in the target differ from the source "
        f"({shown}{more}); {outcome}. Re-run with --force to overwrite them."
    )


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


def _copy_table(
    carried: _Carried,
    fills: dict[str, Any],
    reading: Connection,
    writing: Connection,
    batch_size: int,
    force: bool,
    progress: Progress | None,
) -> TableReport:
    assert carried.target is not None
    target = carried.target
    report = TableReport(
        carried.name, created=carried.create, added_columns=[c.name for c in carried.add]
    )
    rows = _Rows(carried, fills)
    total = _count(reading, carried.source)
    reading.rollback()
    replaceable = _only_our_stamp(writing, carried)
    analyzed_at = _count(writing, target)
    writing.rollback()
    for batch in rows.batches(reading, batch_size):
        present = rows.existing(writing, batch)
        fresh: list[tuple[Any, ...]] = []
        changed: list[tuple[Any, ...]] = []
        if not rows.key_positions:
            if present == Counter(batch):
                report.identical += len(batch)
            elif present and not (force or replaceable):
                raise CopyConflictError(
                    f"{carried.name} changed in the target during the copy; re-run to resume"
                )
            else:
                if present:
                    writing.execute(target.delete())
                if present and not replaceable:
                    report.overwritten += len(batch)
                else:
                    report.copied += len(batch)
                writing.execute(target.insert(), [rows.as_dict(row) for row in batch])
        else:
            for row in batch:
                stored = present.get(rows.key(row))
                if stored is None:
                    fresh.append(row)
                elif stored == row:
                    report.identical += 1
                else:
                    changed.append(row)
            if changed and not force:  # appeared since the conflict check: still refuse
                raise CopyConflictError(
                    f"{carried.name} rows changed in the target during the copy; re-run to resume"
                )
            if fresh:
                writing.execute(target.insert(), [rows.as_dict(row) for row in fresh])
            for row in changed:
                key = and_(
                    *(
                        rows.target_columns[position] == row[position]
                        for position in rows.key_positions
                    )
                )
                writing.execute(target.update().where(key).values(rows.as_dict(row)))
            report.copied += len(fresh)
            report.overwritten += len(changed)
        writing.commit()  # batch by batch: an interrupted copy resumes where it stopped
        report.source_rows += len(batch)
        grown = analyzed_at + report.copied
        if grown >= 2 * max(analyzed_at, batch_size):  # doubled: O(log n) ANALYZEs in all
            _analyze(writing, carried)
            analyzed_at = grown
        if progress is not None:
            progress(carried.name, report.source_rows, total)
    return report


def _analyze(writing: Connection, carried: _Carried) -> None:
    """Fresh planner statistics for a growing target table (PostgreSQL).

    Without them PostgreSQL plans the per-batch key lookup (``_Rows.existing``) for an empty
    table, a sequential scan; psycopg prepares the statement after five runs and the generic
    plan keeps scanning while the table grows: each batch then costs O(rows copied so far).
    """
    if writing.dialect.name == "postgresql":
        writing.execute(text(f"ANALYZE {writing.dialect.identifier_preparer.quote(carried.name)}"))
        writing.commit()


def _count(connection: Connection, table: Table) -> int:
    return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def _advance_sequences(writing: Connection, plan: Sequence[_Carried]) -> None:
    """Ids were copied explicitly; PostgreSQL's sequences must move past them."""
    if writing.dialect.name != "postgresql":
        return  # SQLite and MySQL/MariaDB advance their counters on explicit inserts
    quote = writing.dialect.identifier_preparer.quote
    for carried in plan:
        assert carried.target is not None
        keys = list(carried.target.primary_key.columns)
        if len(keys) != 1 or not isinstance(keys[0].type, Integer):
            continue
        (key,) = keys
        sequence = func.pg_get_serial_sequence(quote(carried.name), key.name)
        highest = func.max(key)
        # setval on a NULL sequence (a key without one) is NULL: nothing happens.
        writing.execute(
            select(
                func.setval(
                    sequence,
                    func.greatest(func.coalesce(highest, 0), 1),
                    highest.is_not(None),
                )
            ).select_from(carried.target)
        )


def _verify(report: CopyReport) -> None:
    for table in report.tables:
        accounted = table.copied + table.identical + table.overwritten
        if accounted != table.source_rows or table.target_rows < table.source_rows:
            raise HermesStateError(
                f"copy of {table.table} did not verify: {table.source_rows} source rows, "
                f"{accounted} accounted for, {table.target_rows} in the target"
            )
