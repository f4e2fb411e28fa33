"""Schema drift: what counts as a difference between the models and a database (the Alembic
comparison rules migrations/env.py also uses), and ``db check``'s comparison itself."""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, overload

from sqlalchemy import Connection, inspect, text

from .engine import describe, is_sqlite
from .errors import corrupt_error
from .models import APPLICATION_TABLES, metadata
from .schema import (
    ADOPTION_TABLE,
    HEAD_REVISION,
    NO_REVISION,
    VERSION_TABLE,
    damage_of,
    migration_connection,
    revision_of,
)

if TYPE_CHECKING:
    from alembic.migration import MigrationContext
    from sqlalchemy import Column
    from sqlalchemy.engine import URL
    from sqlalchemy.types import TypeEngine

__all__ = [
    "DAMAGE",
    "Comparison",
    "Drift",
    "check",
    "compare",
    "context_options",
    "describe_diffs",
    "include_object",
    "modified_column",
    "sqlite_affinity",
]


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Ignore what exists only in the database.

    An adopted ``state.db`` keeps the tables, columns and indexes older hermes versions made;
    they are not ours to report, and the bookkeeping tables are not modelled.
    """
    if reflected and compare_to is None:
        return False
    if type_ == "index" and compare_to is not None:
        # Both sides have this index. One on expressions (upstream's DESC orderings, its
        # COALESCE of activity times) reflects differently on each backend, or not at all, so
        # it is compared by name, which is what makes it upstream's.
        model_side = compare_to if reflected else obj
        return not _has_expressions(model_side)
    return True


def _include_on(
    dialect_name: str, obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """:func:`include_object` on one backend: an index the models build only elsewhere (a
    partial or expression index where the backend has none) is not missing here."""
    if type_ == "index":
        # The models may hold one index per backend family under one name (upstream's
        # idx_sessions_gateway_peer): the other family's is not this database's to match.
        model_side = compare_to if reflected else obj
        dialects = None if model_side is None else model_side.info.get("dialects")
        if dialects is not None and dialect_name not in dialects:
            return False
        if not reflected and compare_to is None and obj.info.get("optional"):
            return False  # e.g. the pg_trgm index, without the extension
    return include_object(obj, name, type_, reflected, compare_to)


def _has_expressions(index: Any) -> bool:
    from sqlalchemy import Column

    return any(not isinstance(expression, Column) for expression in index.expressions)


def sqlite_affinity(declared: str) -> str:
    """SQLite's type affinity of a declared column type (section 3.1 of its datatype docs)."""
    upper = declared.upper()
    if "INT" in upper:
        return "INTEGER"
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not upper or "BLOB" in upper:
        return "BLOB"
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def compare_type(
    context: MigrationContext,
    inspected_column: Column[Any],
    metadata_column: Column[Any],
    inspected_type: TypeEngine[Any],
    metadata_type: TypeEngine[Any],
) -> bool | None:
    """On SQLite, compare affinities: a legacy ``TEXT`` id is the same as ``VARCHAR(255)``."""
    if context.dialect.name != "sqlite":
        return None  # Alembic's own comparison
    inspected = inspected_type.compile(dialect=context.dialect)
    declared = metadata_type.compile(dialect=context.dialect)
    return sqlite_affinity(inspected) != sqlite_affinity(declared)


def context_options(dialect_name: str) -> dict[str, Any]:
    """Options for ``MigrationContext.configure`` and ``EnvironmentContext.configure``.

    SQLite's DDL is transactional once the driver stops managing transactions (engine.py does),
    so the whole upgrade runs in one transaction there: a crash mid-migration leaves the
    previous schema, never half of the new one.
    """
    return {
        "compare_type": compare_type,
        "include_object": functools.partial(_include_on, dialect_name),
        "version_table": VERSION_TABLE,
        "render_as_batch": True,
        "transactional_ddl": dialect_name == "sqlite" or None,
    }


def _flatten(diffs: list[Any]) -> list[tuple[Any, ...]]:
    flat: list[tuple[Any, ...]] = []
    for diff in diffs:
        flat.extend(diff if isinstance(diff, list) else [diff])
    return flat


def describe_diff(diff: tuple[Any, ...]) -> tuple[str, str]:
    """(kind, detail) in words for one entry of ``compare_metadata``'s result."""
    action = diff[0]
    if action in ("add_table", "remove_table"):
        return action.replace("_", " "), diff[1].name
    if action in ("add_column", "remove_column"):
        return action.replace("_", " "), f"{diff[2]}.{diff[3].name}"
    if action in ("add_index", "remove_index"):
        index = diff[1]
        columns = ", ".join(
            str(expr.name) if hasattr(expr, "name") else str(expr) for expr in index.expressions
        )
        return action.replace("_", " "), f"{index.name} on {index.table.name} ({columns})"
    if action in ("add_fk", "remove_fk"):
        fk = diff[1]
        return action.replace("_", " ").replace(
            "fk", "foreign key"
        ), f"{fk.name or ''} on {fk.parent.name}"
    if action.startswith("modify_"):
        _, _, table, column, _, old, new = diff
        return (
            f"{action.replace('_', ' ')}",
            f"{table}.{column}: database has {old!r}, models say {new!r}",
        )
    return action, repr(diff[1:])


def _is_sqlite_primary_key_nullability(diff: tuple[Any, ...], dialect_name: str) -> bool:
    # SQLite reports a legacy "id TEXT PRIMARY KEY" as nullable (it is, by an old SQLite
    # quirk, for non-INTEGER keys): not something a migration could or should change.
    if dialect_name != "sqlite" or diff[0] != "modify_nullable":
        return False
    _, _, table_name, column_name, *_ = diff
    table = metadata.tables.get(table_name)
    return table is not None and column_name in table.c and table.c[column_name].primary_key


@overload
def describe_diffs(
    diffs: list[Any], dialect_name: str, *, with_diffs: Literal[False] = False
) -> list[tuple[str, str]]: ...


@overload
def describe_diffs(
    diffs: list[Any], dialect_name: str, *, with_diffs: Literal[True]
) -> list[tuple[tuple[Any, ...], tuple[str, str]]]: ...


def describe_diffs(diffs: list[Any], dialect_name: str, *, with_diffs: bool = False) -> Any:
    """Each difference in words, leaving out what is not drift (see above); ``with_diffs``
    pairs each with Alembic's own entry."""
    kept = [
        diff
        for diff in _flatten(diffs)
        if not _is_sqlite_primary_key_nullability(diff, dialect_name)
    ]
    if with_diffs:
        return [(diff, describe_diff(diff)) for diff in kept]
    return [describe_diff(diff) for diff in kept]


def modified_column(diff: tuple[Any, ...]) -> tuple[str, str] | None:
    """(table, column) of a changed column (type, nullability, default); None for the rest."""
    if str(diff[0]).startswith("modify_"):
        return str(diff[2]), str(diff[3])
    return None


@dataclass(frozen=True, slots=True)
class Drift:
    """One difference between the models and the database, in words."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


#: The Drift kind of a damaged SQLite file (``db check`` exits 2 on it).
DAMAGE: Final = "damage"


@dataclass(frozen=True, slots=True)
class Comparison:
    """``db check``'s finding: drift, and the differences an adopted file is allowed to keep."""

    drifts: list[Drift]
    #: Pre-existing legacy columns of an adopted file that differ from the models (nullability,
    #: types): the migrations left them as they were, on purpose; not drift.
    adopted: list[Drift]


def check(url: URL) -> list[Drift]:
    """Differences between the models and the database; legacy extras are not drift."""
    return compare(url).drifts


def compare(url: URL) -> Comparison:
    """The models against the database, adopted legacy differences set apart.

    Read-only. A damaged SQLite file is one difference of kind :data:`DAMAGE` (the models are
    not compared with it).
    """
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    revision = revision_of(url)
    if is_sqlite(url):
        damage = damage_of(url)
        if damage is not None:
            return Comparison([Drift(DAMAGE, str(corrupt_error(describe(url), damage)))], [])
    with migration_connection(url, read_only=True) as connection:
        drifts: list[Drift] = []
        adopted: list[Drift] = []
        if revision != HEAD_REVISION:
            drifts.append(
                Drift(
                    "revision",
                    f"database is at {revision or NO_REVISION}, head is {HEAD_REVISION}",
                )
            )
        added = _added_by_adoption(connection)
        context = MigrationContext.configure(
            connection, opts=context_options(connection.dialect.name)
        )
        with _expression_indexes_quiet():
            diffs = compare_metadata(context, metadata)
        unnamed = _foreign_keys_present(connection)
        for diff, words in describe_diffs(diffs, connection.dialect.name, with_diffs=True):
            if diff[0] == "add_fk" and _key_of(diff[1]) in unnamed:
                continue  # there, without our name (upstream names none of its keys)
            (adopted if _is_legacy(diff, added) else drifts).append(Drift(*words))
        connection.rollback()
        return Comparison(drifts, adopted)


@contextlib.contextmanager
def _expression_indexes_quiet() -> Iterator[None]:
    """SQLAlchemy and Alembic each warn that indexes on expressions cannot be reflected or
    compared; drift.include_object compares those by name, so the warnings say nothing."""
    impl_log = logging.getLogger("alembic.ddl.impl")
    level = impl_log.level
    impl_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*expression-based index")
            yield
    finally:
        impl_log.setLevel(level)


def _key_of(fk: Any) -> tuple[str, tuple[str, ...], str]:
    return (
        fk.parent.name,
        tuple(element.parent.name for element in fk.elements),
        fk.referred_table.name,
    )


def _foreign_keys_present(connection: Connection) -> set[tuple[str, tuple[str, ...], str]]:
    """(table, columns, referred table) of every foreign key the database has."""
    inspector = inspect(connection)
    present = set()
    for table_name in inspector.get_table_names():
        for fk in inspector.get_foreign_keys(table_name):
            present.add((table_name, tuple(fk["constrained_columns"]), fk["referred_table"]))
    return present


def _is_legacy(diff: tuple[Any, ...], added: _Added | None) -> bool:
    """A difference an adopted file may keep: a legacy column the migrations left as it was,
    or anything in an older shape of one of upstream's application tables, which upstream's
    own code brings up to date when it next uses that table."""
    if added is None:
        return False
    column = modified_column(diff)
    if column is not None:
        return column[0] not in added.tables and column not in added.columns
    if diff[0] == "add_fk" and "sessions" not in added.tables:
        # A key to an adopted sessions table, where the backend refused it (MySQL does, for
        # a table of another charset or collation): the migrations left it out on purpose.
        return True
    table_name = _table_of(diff)
    return table_name in APPLICATION_TABLES and table_name not in added.tables


def _table_of(diff: tuple[Any, ...]) -> str | None:
    action = diff[0]
    if action in ("add_column", "remove_column"):
        return str(diff[2])
    if action in ("add_index", "remove_index", "add_fk", "remove_fk"):
        return str(diff[1].table.name if "index" in action else diff[1].parent.name)
    return None


@dataclass(frozen=True, slots=True)
class _Added:
    tables: set[str]
    columns: set[tuple[str, str]]


def _added_by_adoption(connection: Connection) -> _Added | None:
    """What the baseline migration added to this database (None: no record, nothing adopted)."""
    if not inspect(connection).has_table(ADOPTION_TABLE):
        return None
    query = text(f"SELECT kind, table_name, name FROM {ADOPTION_TABLE}")  # noqa: S608
    added = _Added(set(), set())
    for kind, table_name, name in connection.execute(query):
        if kind in ("table", "r5_table", "r6_table"):
            added.tables.add(table_name)
        elif kind.startswith("column") or kind == "r6_column":  # also "column:<revision>"
            added.columns.add((table_name, name))
    return added
