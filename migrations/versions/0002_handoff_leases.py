"""Owner, lease and attempt of a claim, for several gateways sharing one database.

Every column is nullable or has a server default, so writers that do not know them (older
hermes versions, raw SQL) keep working.

Revision ID: 0002_handoff_leases
Revises: 0001_baseline
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_handoff_leases"
down_revision: str | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("handoff_owner", "handoff_lease_expires_at", "handoff_attempt")


def upgrade() -> None:
    op.add_column("sessions", sa.Column("handoff_owner", sa.String(255)))
    op.add_column("sessions", sa.Column("handoff_lease_expires_at", sa.Double()))
    op.add_column(
        "sessions",
        sa.Column("handoff_attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The columns ``downgrade()`` drops."""
    return [("sessions", column) for column in reversed(COLUMNS)]


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35): no table rebuild, so an adopted
    # file keeps its triggers and constraints.
    for table_name, column_name in downgrade_drops(op.get_bind()):
        assert column_name is not None
        op.drop_column(table_name, column_name)
