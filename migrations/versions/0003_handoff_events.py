"""The handoff audit trail: one row per transition, written in the transition's transaction.

Revision ID: 0003_handoff_events
Revises: 0002_handoff_leases
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from hermes_state.models import table_options

revision: str = "0003_handoff_events"
down_revision: str | None = "0002_handoff_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    options: dict[str, Any] = table_options(op.get_bind().dialect)
    op.create_table(
        "handoff_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=True,
        ),
        sa.Column("session_id", sa.String(255), nullable=False),
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(255)),
        sa.Column("attempt", sa.Integer()),
        sa.Column("detail", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_handoff_events"),
        **options,
    )
    op.create_index("ix_handoff_events_session_id_id", "handoff_events", ["session_id", "id"])
    op.create_index("ix_handoff_events_at", "handoff_events", ["at"])


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The table ``downgrade()`` drops."""
    return [("handoff_events", None)]


def downgrade() -> None:
    for table_name, _ in downgrade_drops(op.get_bind()):
        op.drop_table(table_name)
