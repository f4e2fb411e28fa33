"""Durable session turn leases, and the pending-poll index under upstream's name.

``session_turn_leases`` has upstream's shape (conversation id, holder, acquired and expiry
times), so a file upstream already gave the table keeps it and its rows. The pending-poll
index becomes ``idx_sessions_handoff_pending``, upstream's name for the same columns: a file
that already has an index of that name keeps it, and ours is dropped, so there is one index.

What this revision adds or drops is recorded in the adoption table (kinds prefixed ``r5_``), so
the downgrade undoes exactly that and nothing upstream made.

Revision ID: 0005_session_turn_leases
Revises: 0004_upstream_columns
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from hermes_state.models import table_options

revision: str = "0005_session_turn_leases"
down_revision: str | None = "0004_upstream_columns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADOPTION_TABLE = "hermes_state_adoption"
LEASES = "session_turn_leases"
OLD_INDEX = "ix_sessions_handoff_pending"
NEW_INDEX = "idx_sessions_handoff_pending"
# Adoption records of this revision: a table it created, an index it created, one it dropped.
CREATED_TABLE, CREATED_INDEX, DROPPED_INDEX = "r5_table", "r5_index", "r5_dropped_index"

_adoption = sa.table(
    ADOPTION_TABLE,
    sa.column("kind", sa.String()),
    sa.column("table_name", sa.String()),
    sa.column("name", sa.String()),
)


def _pending_index(name: str) -> None:
    where = sa.text("handoff_state = 'pending'")
    op.create_index(
        name,
        "sessions",
        ["handoff_state", "started_at"],
        sqlite_where=where,
        postgresql_where=where,
    )


def _offline() -> bool:
    """``db upgrade --sql``: no database to look at, so the SQL is for one hermes-state made."""
    return bool(op.get_context().as_sql)


def upgrade() -> None:
    bind = op.get_bind()
    options: dict[str, Any] = table_options(bind.dialect)
    inspector = None if _offline() else sa.inspect(bind)
    added: list[dict[str, str]] = []
    if inspector is None or not inspector.has_table(LEASES):
        op.create_table(
            LEASES,
            sa.Column("conversation_id", sa.String(255), nullable=False),
            sa.Column("holder", sa.String(255), nullable=False),
            sa.Column("acquired_at", sa.Double(), nullable=False),
            sa.Column("expires_at", sa.Double(), nullable=False),
            sa.PrimaryKeyConstraint("conversation_id", name="pk_session_turn_leases"),
            **options,
        )
        added.append({"kind": CREATED_TABLE, "table_name": LEASES, "name": LEASES})

    indexes = (
        {index["name"] for index in inspector.get_indexes("sessions")}
        if inspector is not None
        else {OLD_INDEX}  # what 0001 made
    )
    if NEW_INDEX not in indexes:
        _pending_index(NEW_INDEX)
        added.append({"kind": CREATED_INDEX, "table_name": "sessions", "name": NEW_INDEX})
    if OLD_INDEX in indexes:
        op.drop_index(OLD_INDEX, table_name="sessions")
        added.append({"kind": DROPPED_INDEX, "table_name": "sessions", "name": OLD_INDEX})
    if added:
        op.bulk_insert(_adoption, added)


_KINDS = (CREATED_TABLE, CREATED_INDEX, DROPPED_INDEX)


def _recorded(bind: sa.Connection) -> set[tuple[Any, ...]]:
    """What this revision did to the database: (kind, name) pairs."""
    query = sa.select(_adoption.c.kind, _adoption.c.name).where(_adoption.c.kind.in_(_KINDS))
    return {tuple(row) for row in bind.execute(query)}


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The table ``downgrade()`` drops: the lease table, when this revision created it."""
    return [(LEASES, None)] if (CREATED_TABLE, LEASES) in _recorded(bind) else []


def downgrade() -> None:
    bind = op.get_bind()
    records = (
        # Offline, a database hermes-state made: everything, as upgrade() does offline.
        {(CREATED_TABLE, LEASES), (CREATED_INDEX, NEW_INDEX), (DROPPED_INDEX, OLD_INDEX)}
        if _offline()
        else _recorded(bind)
    )
    if (DROPPED_INDEX, OLD_INDEX) in records:
        _pending_index(OLD_INDEX)
    if (CREATED_INDEX, NEW_INDEX) in records:
        op.drop_index(NEW_INDEX, table_name="sessions")
    if (CREATED_TABLE, LEASES) in records:
        op.drop_table(LEASES)
    op.execute(sa.delete(_adoption).where(_adoption.c.kind.in_(_KINDS)))
