"""What ``db upgrade`` would do, worked out on a shadow of the database and never on it.

The migrations decide what to add by looking at names only: which tables exist, which columns
and indexes they have (an adopted ``state.db`` keeps its own). So the shadow is an in-memory
SQLite database holding those names (tables with their columns, indexes on their columns) and
the rows of the two bookkeeping tables (the version and what adoption added). The real
migrations run on it, and after each step the shadow's structure is compared with the one
before: that difference is what the step would change. The database itself is only read
(an SQLite file through a read-only connection; a file that does not exist is not created),
on every backend the same way. A test holds the prediction to what a real upgrade does.
"""

from __future__ import annotations

import contextlib
import enum
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sqlalchemy import Connection, column, create_engine, exc, inspect, select, table
from sqlalchemy.engine import URL
from sqlalchemy.pool import StaticPool

from . import schema
from .engine import describe, make_engine
from .errors import translated

__all__ = [
    "Change",
    "Layout",
    "Start",
    "Step",
    "TableLayout",
    "UpgradePlan",
    "differences",
    "layout_of",
    "plan_upgrade",
]

#: Tables the shadow carries rows of: what the migrations read besides names.
_BOOKKEEPING: Final = (schema.VERSION_TABLE, schema.ADOPTION_TABLE)


@dataclass(frozen=True, slots=True)
class TableLayout:
    """A table's column names in order and its indexes (name -> column names)."""

    columns: tuple[str, ...]
    indexes: dict[str, tuple[str, ...]]


#: Every table of a database, by name (SQLite's own ``sqlite_*`` tables left out).
Layout = dict[str, TableLayout]


@dataclass(frozen=True, slots=True)
class Change:
    """One thing a migration step changes: ``action`` is create/drop table, add/drop column,
    create/drop index; ``columns`` are a new table's or an index's columns."""

    action: str
    table: str
    name: str
    columns: tuple[str, ...] = ()

    def __str__(self) -> str:
        listed = f" ({', '.join(self.columns)})" if self.columns else ""
        if self.action.endswith("column"):
            return f"{self.action} {self.table}.{self.name}"
        if self.action.endswith("index"):
            return f"{self.action} {self.name} on {self.table}{listed}"
        return f"{self.action} {self.name}{listed}"


@dataclass(frozen=True, slots=True)
class Step:
    """One migration, in the order it would run, and what it would change."""

    revision: str
    message: str
    changes: list[Change]


class Start(enum.Enum):
    """What the upgrade starts from."""

    CREATE = "create"  # an SQLite file that does not exist yet
    NEW = "new"  # an empty file or database: every table is created
    ADOPT = "adopt"  # a hermes state database without a revision (upstream's): adopted in place
    ADOPT_FOREIGN = "adopt foreign"  # another application's SQLite file, with --adopt-foreign
    MIGRATE = "migrate"  # a database at a revision


@dataclass
class UpgradePlan:
    database: str
    start: Start
    before: str | None
    after: str | None
    steps: list[Step] = field(default_factory=list)

    @property
    def changes(self) -> list[Change]:
        return [change for step in self.steps for change in step.changes]


def layout_of(connection: Connection) -> Layout:
    """The names the migrations look at: every table's columns and indexes."""
    inspector = inspect(connection)
    found: Layout = {}
    with warnings.catch_warnings():
        # Column types are not needed, and reflecting an unusual one only warns.
        warnings.simplefilter("ignore", exc.SAWarning)
        for name in inspector.get_table_names():
            if name.startswith("sqlite_"):
                continue
            columns = tuple(column["name"] for column in inspector.get_columns(name))
            indexes = {
                str(index["name"]): tuple(str(c) for c in index["column_names"] if c is not None)
                for index in inspector.get_indexes(name)
                if index["name"]
            }
            if connection.dialect.name == "sqlite":
                indexes.update(_expression_indexes(connection, name, indexes))
            found[name] = TableLayout(columns, indexes)
    return found


def _expression_indexes(
    connection: Connection, table_name: str, known: dict[str, tuple[str, ...]]
) -> dict[str, tuple[str, ...]]:
    """SQLite: the indexes on expressions SQLAlchemy's reflection leaves out, with the plain
    columns among their terms (what reflection gives for them on PostgreSQL)."""
    found: dict[str, tuple[str, ...]] = {}
    names = connection.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
        (table_name,),
    ).scalars()
    for name in names:
        if name in known:
            continue
        terms = connection.exec_driver_sql(f'PRAGMA index_info("{name}")').all()
        found[str(name)] = tuple(str(term[2]) for term in terms if term[2] is not None)
    return found


def differences(before: Layout, after: Layout) -> list[Change]:
    """What turns the layout ``before`` into ``after``."""
    changes: list[Change] = []
    for name, shape in after.items():
        if name not in before:
            changes.append(Change("create table", name, name, shape.columns))
            old_columns: Sequence[str] = shape.columns
            old_indexes: dict[str, tuple[str, ...]] = {}
        else:
            old_columns, old_indexes = before[name].columns, before[name].indexes
            changes += [
                Change("add column", name, c) for c in shape.columns if c not in old_columns
            ]
            changes += [
                Change("drop column", name, c) for c in old_columns if c not in shape.columns
            ]
        changes += [
            Change("drop index", name, index, columns)
            for index, columns in old_indexes.items()
            if index not in shape.indexes
        ]
        changes += [
            Change("create index", name, index, columns)
            for index, columns in shape.indexes.items()
            if index not in old_indexes
        ]
    changes += [Change("drop table", name, name) for name in before if name not in after]
    return changes


@dataclass
class _Original:
    layout: Layout
    rows: dict[str, list[dict[str, object]]]


def _read(connection: Connection) -> _Original:
    layout = layout_of(connection)
    rows: dict[str, list[dict[str, object]]] = {}
    for name in _BOOKKEEPING:
        if name in layout:
            source = table(name, *(column(c) for c in layout[name].columns))
            rows[name] = [dict(row) for row in connection.execute(select(source)).mappings()]
    connection.rollback()
    return _Original(layout, rows)


def _original(url: URL) -> _Original:
    engine = make_engine(url, read_only=True)
    try:
        with translated(describe(url)), engine.connect() as connection:
            return _read(connection)
    finally:
        engine.dispose()


def _first_of_each(names: Sequence[str]) -> list[str]:
    """``names`` without those SQLite would take for an earlier one (it ignores case)."""
    seen: set[str] = set()
    kept = []
    for name in names:
        if name.lower() not in seen:
            seen.add(name.lower())
            kept.append(name)
    return kept


def _build_shadow(connection: Connection, original: _Original) -> None:
    quote = connection.dialect.identifier_preparer.quote
    # sessions and messages first: index names are per table on MySQL, per database in SQLite
    # (and SQLite ignores case where servers may not), and theirs are what the migrations read.
    ordered = sorted(original.layout, key=lambda name: name not in ("sessions", "messages"))
    taken: list[str] = []
    for name in _first_of_each(ordered):
        shape = original.layout[name]
        columns = _first_of_each(shape.columns)
        connection.exec_driver_sql(
            f"CREATE TABLE {quote(name)} ({', '.join(quote(c) for c in columns)})"
        )
        for index, indexed in shape.indexes.items():
            if index.lower() in taken:
                continue
            taken.append(index.lower())
            on = [c for c in indexed if c in columns] or columns[:1]
            connection.exec_driver_sql(
                f"CREATE INDEX {quote(index)} ON {quote(name)} ({', '.join(map(quote, on))})"
            )
    for name, rows in original.rows.items():
        if rows:
            target = table(name, *(column(c) for c in original.layout[name].columns))
            connection.execute(target.insert(), rows)
    connection.commit()


@dataclass
class _Recorder:
    """Compares the shadow's layout after each step with the one before."""

    last: Layout
    steps: list[Step] = field(default_factory=list)

    def __call__(self, connection: Connection, revision: str, message: str) -> None:
        now = layout_of(connection)
        self.steps.append(Step(revision, message, differences(self.last, now)))
        self.last = now


@contextlib.contextmanager
def _shadow_connection() -> Iterator[Connection]:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def plan_upgrade(url: URL, revision: str = "head", *, adopt_foreign: bool = False) -> UpgradePlan:
    """What ``schema.upgrade(url, revision)`` would do, without writing to the database.

    Refuses what the upgrade refuses (another application's file unless ``adopt_foreign``,
    a damaged file, a revision this version does not know, a bad target revision).
    """
    where = describe(url)
    state = schema.check_upgradable(url, adopt_foreign=adopt_foreign)
    blank = state is not None and state.kind is schema.FileKind.NEW
    original = _Original({}, {}) if blank else _original(url)
    with _shadow_connection() as connection:
        _build_shadow(connection, original)
        # The migrations do per backend what that backend can (FTS5 only on SQLite, partial
        # indexes where there are some): on the shadow, they do what the real one would get.
        connection.info[schema.TARGET_DIALECT] = url.get_backend_name()
        # The shadow's own layout is the start: names it could not hold are not in it.
        recorder = _Recorder(layout_of(connection))
        before = schema.current_revision(connection)
        connection.rollback()
        schema.run_command(connection, where, "upgrade", revision, after_step=recorder)
        after = schema.current_revision(connection)
        connection.rollback()
    return UpgradePlan(where, _start(url, state, original, before), before, after, recorder.steps)


def _start(
    url: URL, state: schema.FileState | None, original: _Original, before: str | None
) -> Start:
    if before is not None:
        return Start.MIGRATE
    if state is None:  # a server database
        return Start.ADOPT if "sessions" in original.layout else Start.NEW
    if state.kind is schema.FileKind.FOREIGN:
        return Start.ADOPT_FOREIGN
    if state.kind is schema.FileKind.HERMES:
        return Start.ADOPT
    assert url.database is not None
    return Start.NEW if Path(url.database).exists() else Start.CREATE
