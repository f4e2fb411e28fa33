"""Sessions and transcript, created fresh or adopted in place from an older state.db.

An existing ``state.db`` made by older hermes versions has ``sessions`` and ``messages`` tables
that predate Alembic, often with more columns than we model and other tables beside them.
This revision only *adds*: the tables when missing, the columns each table lacks (always
nullable, so writers that do not know them keep working) and our indexes. Everything it adds
is recorded in ``hermes_state_adoption`` so that the downgrade removes exactly that and the file
returns to what it was.

Offline (``--sql``) there is no database to look at: the SQL is that of a new database, where
every table is created, and dropped again on the way down.

Revision ID: 0001_baseline
Revises:
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import LONGTEXT

from hermes_state.models import table_options

revision: str = "0001_baseline"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADOPTION_TABLE = "hermes_state_adoption"


def _session_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(255)),
        sa.Column("title", sa.Text()),
        sa.Column("model", sa.String(255)),
        sa.Column("parent_session_id", sa.String(255)),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double()),
        sa.Column("end_reason", sa.Text()),
        sa.Column("handoff_state", sa.String(16)),
        sa.Column("handoff_platform", sa.String(64)),
        sa.Column("handoff_error", sa.Text()),
        sa.Column("handoff_requested_at", sa.Double()),
        sa.Column("handoff_claimed_at", sa.Double()),
        sa.Column("handoff_finished_at", sa.Double()),
    ]


def _message_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column(
            "session_id",
            sa.String(255),
            sa.ForeignKey("sessions.id", name="fk_messages_session_id_sessions"),
            nullable=False,
        ),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("content", sa.Text().with_variant(LONGTEXT(), "mysql", "mariadb")),
        sa.Column("timestamp", sa.Double(), nullable=False),
    ]


def _partial(state: str) -> dict[str, Any]:
    where = sa.text(f"handoff_state = '{state}'")
    return {"sqlite_where": where, "postgresql_where": where}


# (name, table, columns, dialect options)
INDEXES: list[tuple[str, str, list[str], dict[str, Any]]] = [
    (
        "ix_sessions_handoff_pending",
        "sessions",
        ["handoff_state", "started_at"],
        _partial("pending"),
    ),
    (
        "ix_sessions_handoff_running",
        "sessions",
        ["handoff_state", "handoff_claimed_at"],
        _partial("running"),
    ),
    ("ix_messages_session_id_id", "messages", ["session_id", "id"], {}),
]

TABLES: list[tuple[str, Callable[[], list[sa.Column[Any]]], dict[str, Any]]] = [
    ("sessions", _session_columns, {"pk": "pk_sessions"}),
    ("messages", _message_columns, {"pk": "pk_messages", "sqlite_autoincrement": True}),
]


def _offline() -> bool:
    return bool(op.get_context().as_sql)


def upgrade() -> None:
    options: dict[str, Any] = table_options(op.get_bind().dialect)
    adoption = op.create_table(
        ADOPTION_TABLE,
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("table_name", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        **options,
    )
    inspector = None if _offline() else sa.inspect(op.get_bind())
    added: list[dict[str, str]] = []

    for table_name, columns, creation in TABLES:
        if inspector is None or not inspector.has_table(table_name):
            pk_name = creation["pk"]
            extra = {k: v for k, v in creation.items() if k != "pk"}
            op.create_table(
                table_name,
                *columns(),
                sa.PrimaryKeyConstraint("id", name=pk_name),
                **extra,
                **options,
            )
            added.append({"kind": "table", "table_name": table_name, "name": table_name})
            continue
        present = {column["name"] for column in inspector.get_columns(table_name)}
        for column in columns():
            if column.name in present:
                continue
            # Older writers do not know this column: it must accept their inserts.
            column.nullable = True
            op.add_column(table_name, column)
            added.append({"kind": "column", "table_name": table_name, "name": column.name})

    inspector = None if _offline() else sa.inspect(op.get_bind())
    for name, table_name, column_names, dialect_options in INDEXES:
        existing = (
            {index["name"] for index in inspector.get_indexes(table_name)} if inspector else set()
        )
        if name in existing:
            continue
        op.create_index(name, table_name, column_names, **dialect_options)
        added.append({"kind": "index", "table_name": table_name, "name": name})

    op.bulk_insert(adoption, added)


def _records(bind: sa.Connection, offline: bool) -> list[tuple[str, str, str]]:
    """What adoption added: (kind, table, name). Offline, what it adds to a new database."""
    if offline:
        return [("table", table_name, table_name) for table_name, _, _ in TABLES]
    query = f"SELECT kind, table_name, name FROM {ADOPTION_TABLE}"  # noqa: S608 - a constant
    return [(kind, table_name, name) for kind, table_name, name in bind.execute(sa.text(query))]


def _drops(records: list[tuple[str, str, str]]) -> list[tuple[str, str | None]]:
    created = [(table_name, None) for kind, table_name, _ in records if kind == "table"]
    columns = [(table_name, name) for kind, table_name, name in records if kind == "column"]
    # messages references sessions, so it goes first.
    return [*columns, *sorted(created, key=lambda drop: drop[0] != "messages")]


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The tables (column None) and columns holding data that ``downgrade()`` drops."""
    return _drops(_records(bind, offline=False))


def downgrade() -> None:
    records = _records(op.get_bind(), _offline())
    created_tables = {table_name for kind, table_name, _ in records if kind == "table"}
    for kind, table_name, name in records:
        if kind == "index" and table_name not in created_tables:
            # (a dropped table takes its indexes along)
            op.drop_index(name, table_name=table_name)
    for table_name, column_name in _drops(records):
        if column_name is None:
            op.drop_table(table_name)
        else:
            # A plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35), never a table rebuild: the
            # table keeps the triggers and constraints older hermes versions gave it.
            op.drop_column(table_name, column_name)
    op.drop_table(ADOPTION_TABLE)
