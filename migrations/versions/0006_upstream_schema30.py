"""Upstream's schema 30: every table, column and index upstream hermes-agent's store has.

Adoption-aware like the revisions before it. On any upstream file (schema 2 to 30) or a
database hermes-state made, it adds only what is missing: upstream's tables, the sessions and
messages columns of upstream's later versions, and upstream's indexes under upstream's names.
Nothing upstream owns is renamed or rebuilt. It also:

* drops two indexes of ours that duplicate upstream's (``idx_sessions_handoff_pending`` beside
  ``idx_sessions_handoff_state``, ``ix_messages_session_id_id`` beside
  ``idx_messages_session_id``);
* sets ``messages.active`` to 1 where it is NULL, as upstream's own store does on every open
  (a NULL there hides a live turn), and makes the column NOT NULL where the table is ours;
* gives a file without upstream's ``schema_version`` row the row upstream would write (30). A
  row that is there is left alone: upstream counts in it the *data* migrations it has run
  (column additions it makes on every open, whatever the version), so its own code finishes
  those on the next open;
* on SQLite, creates upstream's full-text index (FTS5 tables, their source views and triggers)
  when the file has none, and fills it.

Everything it changes is recorded in the adoption table (kinds prefixed ``r6_``), so the
downgrade gives back exactly the file it found. Column and index definitions are the models';
the names this revision is responsible for are fixed here.

Revision ID: 0006_upstream_schema30
Revises: 0005_session_turn_leases
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from hermes_state import search_index
from hermes_state.models import UPSTREAM_SCHEMA_VERSION, metadata, table_options
from hermes_state.schema import ADOPTION_TABLE, target_dialect

revision: str = "0006_upstream_schema30"
down_revision: str | None = "0005_session_turn_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Upstream's tables this revision creates where missing, parents first.
TABLES: tuple[str, ...] = (
    "schema_version",
    "system_prompts",
    "state_meta",
    "session_model_usage",
    "gateway_routing",
    "gateway_hygiene_state",
    "conversation_generations",
    "gateway_heartbeats",
    "compression_locks",
    "async_delegations",
    "telegram_dm_topic_mode",
    "telegram_dm_topic_bindings",
    "delivery_obligations",
)

#: Columns of upstream's later versions, added where missing.
COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": (
        "created_source",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "display_name",
        "origin_json",
        "expiry_finalized",
        "system_prompt_hash",
        "cwd",
        "git_branch",
        "git_repo_root",
        "git_metadata_generation",
        "title_source",
        "last_activity_description",
        "last_activity_provenance",
        "compression_failure_cooldown_until",
        "compression_failure_error",
        "compression_fallback_streak",
        "compression_ineffective_count",
        "compression_recovery_deadline",
        "compression_overload_streak",
        "profile_name",
        "transport_profile",
        "rewind_count",
        "archived",
        "auto_archived",
        "pinned",
        "hidden",
        "last_read_at",
        "tool_names",
    ),
    "messages": (
        "_compressed_summary",
        "compacted",
        "display_identity",
        "display_order",
        "message_uid",
        "absorbed_message_uids",
        "tool_call_uids",
        "tool_call_uid",
    ),
    # An older upstream file may have a shorter version of these two.
    "session_model_usage": ("task", "first_seen", "last_seen"),
    "delivery_obligations": (
        "adapter_profile",
        "delivery_fence",
        "owner_installation_id",
        "owner_host",
        "owner_generation",
        "lease_expires_at",
    ),
}

#: Indexes of ours that duplicate upstream's, dropped: (name, table, columns, where).
DUPLICATES: tuple[tuple[str, str, tuple[str, ...], str | None], ...] = (
    (
        "idx_sessions_handoff_pending",
        "sessions",
        ("handoff_state", "started_at"),
        "handoff_state = 'pending'",
    ),
    ("ix_messages_session_id_id", "messages", ("session_id", "id"), None),
)

TABLE, COLUMN, INDEX, DROPPED, ACTIVE_NULL, NOT_NULL, VERSION_ROW, FTS = (
    "r6_table",
    "r6_column",
    "r6_index",
    "r6_dropped",
    "r6_active_null",
    "r6_not_null",
    "r6_version_row",
    "r6_fts",
)
_KINDS = (TABLE, COLUMN, INDEX, DROPPED, ACTIVE_NULL, NOT_NULL, VERSION_ROW, FTS)

_adoption = sa.table(
    ADOPTION_TABLE,
    sa.column("kind", sa.String()),
    sa.column("table_name", sa.String()),
    sa.column("name", sa.String()),
)


def _offline() -> bool:
    """``db upgrade --sql``: no database to look at, so the SQL is for one hermes-state made."""
    return bool(op.get_context().as_sql)


def _column_copy(column: sa.Column[Any]) -> sa.Column[Any]:
    """A model column for ADD COLUMN / CREATE TABLE, without foreign keys of its own.

    SQLite can drop a column again (the downgrade) only if no foreign key names it.
    """
    copy = column._copy()
    copy.foreign_keys.clear()
    copy.constraints = set()
    return copy


def _table_arguments(table: sa.Table, *, foreign_keys: bool = True) -> list[Any]:
    """Columns and constraints of a model table, for ``op.create_table``."""
    columns = [column._copy() for column in table.columns]
    constraints: list[Any] = [
        sa.PrimaryKeyConstraint(*table.primary_key.columns.keys(), name=f"pk_{table.name}")
    ]
    for fk in table.foreign_key_constraints if foreign_keys else ():
        constraints.append(
            sa.ForeignKeyConstraint(
                [element.parent.name for element in fk.elements],
                [element.target_fullname for element in fk.elements],
                name=fk.name,
                ondelete=fk.ondelete,
            )
        )
    for column in columns:
        column.foreign_keys.clear()
        column.constraints = set()
        column.primary_key = False
    return [*columns, *constraints]


def _applies(index: sa.Index, dialect_name: str) -> bool:
    return dialect_name in index.info.get("dialects", (dialect_name,))


def _create_index(index: sa.Index, inspector: Any) -> None:
    options = dict(index.dialect_kwargs)
    if inspector is not None and inspector.bind.dialect.name in ("mysql", "mariadb"):
        options.update(_mysql_prefixes(index, inspector))
    op.create_index(
        index.name,
        index.table.name,  # type: ignore[union-attr]
        list(index.expressions),
        unique=index.unique,
        **options,
    )


#: InnoDB's longest index key, and the characters of a utf8mb4 prefix that keep four columns
#: inside it.
_MYSQL_KEY_BYTES, _MYSQL_PREFIX = 3072, 191


def _mysql_prefixes(index: sa.Index, inspector: Any) -> dict[str, Any]:
    """Prefix lengths an index needs on the table as it is: an adopted table's text columns
    (or wider strings than ours) would not fit MySQL's key otherwise."""
    table_name = index.table.name  # type: ignore[union-attr]
    types = {c["name"]: c["type"] for c in inspector.get_columns(table_name)}
    names = [e.name for e in index.expressions if isinstance(e, sa.Column)]
    widths = {name: getattr(types.get(name), "length", None) for name in names}
    text = {name for name in names if isinstance(types.get(name), sa.Text)}
    total = sum(4 * (widths[name] or _MYSQL_PREFIX) for name in names if name not in text)
    prefixes = dict(index.dialect_options["mysql"]["length"] or {})
    for name in names:
        width = widths[name]
        if name in text or (
            total + 4 * _MYSQL_PREFIX * len(text) > _MYSQL_KEY_BYTES
            and width is not None
            and width > _MYSQL_PREFIX
        ):
            prefixes.setdefault(name, _MYSQL_PREFIX)
    return {f"{inspector.bind.dialect.name}_length": prefixes} if prefixes else {}


def _recorded(bind: sa.Connection, kinds: Iterable[str] = _KINDS) -> list[tuple[str, str, str]]:
    query = sa.select(_adoption.c.kind, _adoption.c.table_name, _adoption.c.name).where(
        _adoption.c.kind.in_(list(kinds))
    )
    return [(kind, table_name, name) for kind, table_name, name in bind.execute(query)]


def upgrade() -> None:
    bind = op.get_bind()
    dialect = target_dialect(bind)
    options: dict[str, Any] = table_options(bind.dialect)
    inspector = None if _offline() else sa.inspect(bind)
    added: list[dict[str, str]] = []

    def record(kind: str, table_name: str, name: str) -> None:
        added.append({"kind": kind, "table_name": table_name, "name": name})

    # MySQL/MariaDB refuse a foreign key to a sessions table of another charset or collation,
    # which one made by hand may have; upstream's keys are kept wherever they can be.
    keys = dialect not in ("mysql", "mariadb") or _sessions_is_ours(bind)
    created: set[str] = set()
    for name in TABLES:
        if inspector is not None and inspector.has_table(name):
            continue
        arguments = _table_arguments(metadata.tables[name], foreign_keys=keys)
        op.create_table(name, *arguments, **options)
        created.add(name)
        record(TABLE, name, name)

    for table_name, names in COLUMNS.items():
        if table_name in created:
            continue
        present = (
            {column["name"] for column in inspector.get_columns(table_name)}
            if inspector is not None
            else set()
        )
        for name in names:
            if name not in present:
                op.add_column(table_name, _column_copy(metadata.tables[table_name].c[name]))
                record(COLUMN, table_name, name)

    # Before the indexes: several of upstream's name messages.active.
    _heal_active(bind, inspector, record)
    for table_name in ("sessions", "messages", "session_turn_leases", *TABLES):
        existing = _index_names(inspector, table_name)
        for index in sorted(metadata.tables[table_name].indexes, key=lambda i: str(i.name)):
            if index.name in existing or not _applies(index, dialect):
                continue
            if index.info.get("revision"):
                continue  # a later revision's (the search indexes of 0008)
            _create_index(index, inspector)
            record(INDEX, table_name, str(index.name))

    for name, table_name, _, _ in DUPLICATES:
        if inspector is None or name in _index_names(inspector, table_name):
            op.drop_index(name, table_name=table_name)
            record(DROPPED, table_name, name)

    _stamp_upstream_version(bind, created, record)
    if dialect == "sqlite" and not _offline() and not search_index.present(bind):
        search_index.create(bind)
        record(FTS, "messages", "messages_fts")

    if added:
        op.bulk_insert(_adoption, added)


#: Offline, the indexes a database hermes-state made at 0005 has.
_INDEXES_AT_0005: dict[str, set[str]] = {
    "sessions": {"idx_sessions_handoff_pending", "ix_sessions_handoff_running"},
    "messages": {"ix_messages_session_id_id"},
}


def _index_names(inspector: Any, table_name: str) -> set[str]:
    """The names of the table's indexes, those on expressions included (SQLAlchemy's SQLite
    reflection leaves those out, so SQLite's catalogue is read there)."""
    if inspector is None:
        return _INDEXES_AT_0005.get(table_name, set())
    if inspector.bind.dialect.name == "sqlite":
        query = sa.text(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :table_name"
        )
        return set(inspector.bind.execute(query, {"table_name": table_name}).scalars())
    return {str(index["name"]) for index in inspector.get_indexes(table_name)}


def _heal_active(bind: sa.Connection, inspector: Any, record: Any) -> None:
    """``messages.active`` NULL reads as a hidden turn: set it to 1 (recording which rows), and
    make the column NOT NULL DEFAULT 1 where hermes-state made it (upstream's own is left as
    upstream declared it)."""
    messages = sa.table("messages", sa.column("id", sa.Integer()), sa.column("active"))
    if not _offline():
        # One INSERT ... SELECT records every healed row, however many there are.
        bind.execute(
            sa.insert(_adoption).from_select(
                ["kind", "table_name", "name"],
                sa.select(
                    sa.literal(ACTIVE_NULL),
                    sa.literal("messages"),
                    sa.cast(messages.c.id, sa.String(64)),
                ).where(messages.c.active.is_(None)),
            )
        )
        with _triggers_suspended(bind):
            bind.execute(sa.update(messages).where(messages.c.active.is_(None)).values(active=1))
    if inspector is not None:
        column = next(c for c in inspector.get_columns("messages") if c["name"] == "active")
        if not column["nullable"] or not _active_is_ours(bind):
            return
    _set_active_nullable(bind, nullable=False)
    record(NOT_NULL, "messages", "active")


@contextlib.contextmanager
def _triggers_suspended(bind: sa.Connection) -> Iterator[None]:
    """SQLite: run updates of ``messages.active`` without the file's triggers on messages.

    Older upstream files index the transcript with triggers that fire on any update of a row;
    the content does not change here, and re-indexing it would rewrite the FTS tables' pages
    (the downgrade would not give back the same file). Each trigger is put back from its
    exact stored SQL.
    """
    if bind.dialect.name != "sqlite" or _offline():
        yield
        return
    query = sa.text(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    )
    triggers = bind.execute(query).all()
    for name, _ in triggers:
        bind.exec_driver_sql(f'DROP TRIGGER "{name}"')
    yield
    for _, sql in triggers:
        bind.exec_driver_sql(sql)


def _sessions_is_ours(bind: sa.Connection) -> bool:
    """True where hermes-state's baseline created ``sessions`` (or offline: a new database)."""
    if _offline():
        return True
    query = sa.select(sa.func.count()).where(
        _adoption.c.kind == "table", _adoption.c.name == "sessions"
    )
    return bool(bind.execute(query).scalar())


def _active_is_ours(bind: sa.Connection) -> bool:
    """True where hermes-state made ``messages`` (its baseline) or added ``active`` (0004)."""
    query = sa.select(sa.func.count()).where(
        sa.or_(
            sa.and_(_adoption.c.kind == "table", _adoption.c.name == "messages"),
            sa.and_(
                _adoption.c.kind == "column:0004",
                _adoption.c.table_name == "messages",
                _adoption.c.name == "active",
            ),
        )
    )
    return bool(bind.execute(query).scalar())


def _set_active_nullable(bind: sa.Connection, *, nullable: bool) -> None:
    """Change the nullability of ``messages.active`` (no index may name it yet).

    SQLite cannot alter a column, and rebuilding ``messages`` would lose what other tools
    attached to it; a NOT NULL column with a default can be added, though, so a new column
    takes the values and the name.
    """
    if bind.dialect.name != "sqlite":
        op.alter_column(
            "messages",
            "active",
            existing_type=sa.Integer(),
            nullable=nullable,
            existing_server_default=sa.text("1"),
        )
        return
    op.add_column(
        "messages",
        sa.Column("active_swap", sa.Integer(), nullable=nullable, server_default=sa.text("1")),
    )
    with _triggers_suspended(bind):
        op.execute(sa.text("UPDATE messages SET active_swap = COALESCE(active, 1)"))
    op.drop_column("messages", "active")
    op.execute(sa.text("ALTER TABLE messages RENAME COLUMN active_swap TO active"))


def _stamp_upstream_version(bind: sa.Connection, created: set[str], record: Any) -> None:
    """Upstream's ``schema_version`` row where there is none (what upstream itself writes)."""
    versions = sa.table("schema_version", sa.column("version", sa.Integer()))
    if "schema_version" not in created and not _offline():
        if bind.execute(sa.select(sa.func.count()).select_from(versions)).scalar():
            return
        record(VERSION_ROW, "schema_version", str(UPSTREAM_SCHEMA_VERSION))
    op.execute(sa.insert(versions).values(version=UPSTREAM_SCHEMA_VERSION))


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The tables and columns holding data that ``downgrade()`` drops."""
    drops: list[tuple[str, str | None]] = []
    for kind, table_name, name in _recorded(bind, (TABLE, COLUMN)):
        if kind == TABLE and table_name == "schema_version":
            continue  # its one row is the one upgrade() wrote
        drops.append((table_name, None) if kind == TABLE else (table_name, name))
    return drops


def _everything_offline() -> list[tuple[str, str, str]]:
    """What upgrade() did offline, to a database hermes-state made at 0005."""
    records = [(TABLE, name, name) for name in TABLES]
    for table_name in ("sessions", "messages"):
        records += [(COLUMN, table_name, name) for name in COLUMNS[table_name]]
    for table_name in ("sessions", "messages", "session_turn_leases"):
        records += [
            (INDEX, table_name, str(index.name))
            for index in metadata.tables[table_name].indexes
            if _applies(index, target_dialect(op.get_bind())) and not index.info.get("revision")
        ]
    records += [(DROPPED, table_name, name) for name, table_name, _, _ in DUPLICATES]
    return [*records, (NOT_NULL, "messages", "active")]


def downgrade() -> None:
    bind = op.get_bind()
    records = _everything_offline() if _offline() else _recorded(bind)
    kinds: dict[str, list[tuple[str, str]]] = {kind: [] for kind in _KINDS}
    for kind, table_name, name in records:
        kinds[kind].append((table_name, name))
    created = {table_name for table_name, _ in kinds[TABLE]}

    if kinds[FTS]:
        search_index.drop(bind)
    for table_name, _ in kinds[VERSION_ROW]:
        op.execute(sa.text(f"DELETE FROM {table_name}"))  # noqa: S608 - a constant
    for name, table_name, columns, where in DUPLICATES:
        if (table_name, name) in kinds[DROPPED]:
            condition = None if where is None else sa.text(where)
            op.create_index(
                name,
                table_name,
                list(columns),
                sqlite_where=condition,
                postgresql_where=condition,
            )
    for table_name, name in kinds[INDEX]:
        if table_name not in created:
            op.drop_index(name, table_name=table_name)
    if kinds[NOT_NULL]:  # after the indexes on it are gone
        _set_active_nullable(bind, nullable=True)
    if kinds[ACTIVE_NULL] and not _offline():
        _restore_null_active(bind)
    for table_name, name in reversed(kinds[COLUMN]):
        # A plain DROP COLUMN (SQLite >= 3.35): the table keeps its triggers and constraints.
        op.drop_column(table_name, name)
    for name in reversed(TABLES):
        if name in created:
            op.drop_table(name)
    op.execute(sa.delete(_adoption).where(_adoption.c.kind.in_(_KINDS)))


def _restore_null_active(bind: sa.Connection) -> None:
    """Put back the NULLs upgrade() replaced, row by row as it recorded them."""
    messages = sa.table("messages", sa.column("id", sa.Integer()), sa.column("active"))
    healed = sa.select(sa.cast(_adoption.c.name, sa.Integer())).where(
        _adoption.c.kind == ACTIVE_NULL
    )
    with _triggers_suspended(bind):
        bind.execute(sa.update(messages).where(messages.c.id.in_(healed)).values(active=None))
