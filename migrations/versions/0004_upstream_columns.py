"""Upstream hermes-agent's session and transcript columns, with upstream's defaults.

A database made here then holds every field upstream's API writes (tool calls, reasoning,
counters, costs, rewound turns).

Adoption-aware like the baseline: an adopted ``state.db`` usually has many of these columns
already (with its own declarations and data); those are kept as they are. Only the missing
ones are added, each nullable with upstream's default, with a plain ``ALTER TABLE ... ADD
COLUMN`` (never a table rebuild), and each is recorded in the adoption table under this
revision's kind, so the downgrade drops exactly what this upgrade added.

Revision ID: 0004_upstream_columns
Revises: 0003_handoff_events
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import LONGTEXT

from hermes_state.schema import ADOPTION_TABLE

revision: str = "0004_upstream_columns"
down_revision: str | None = "0003_handoff_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The adoption table's ``kind`` for the columns this revision added (the baseline uses "column").
KIND = "column:0004"


def _long_text() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(LONGTEXT(), "mysql", "mariadb")


def _counter(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.Integer(), server_default=sa.text("0"))


def _session_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("model_config", _long_text()),
        sa.Column("system_prompt", _long_text()),
        _counter("message_count"),
        _counter("tool_call_count"),
        _counter("input_tokens"),
        _counter("output_tokens"),
        _counter("cache_read_tokens"),
        _counter("cache_write_tokens"),
        _counter("reasoning_tokens"),
        sa.Column("billing_provider", sa.Text()),
        sa.Column("billing_base_url", sa.Text()),
        sa.Column("billing_mode", sa.Text()),
        sa.Column("estimated_cost_usd", sa.Double()),
        sa.Column("actual_cost_usd", sa.Double()),
        sa.Column("cost_status", sa.Text()),
        sa.Column("cost_source", sa.Text()),
        sa.Column("pricing_version", sa.Text()),
        _counter("api_call_count"),
        sa.Column("last_activity_at", sa.Double()),
    ]


def _message_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("tool_call_id", sa.Text()),
        sa.Column("tool_calls", _long_text()),
        sa.Column("tool_name", sa.Text()),
        sa.Column("effect_disposition", sa.Text()),
        sa.Column("token_count", sa.Integer()),
        sa.Column("finish_reason", sa.Text()),
        sa.Column("reasoning", _long_text()),
        sa.Column("reasoning_content", _long_text()),
        sa.Column("reasoning_details", _long_text()),
        sa.Column("codex_reasoning_items", _long_text()),
        sa.Column("codex_message_items", _long_text()),
        sa.Column("platform_message_id", sa.Text()),
        sa.Column("observed", sa.Integer(), server_default=sa.text("0")),
        # Existing rows read as 1: every turn written before rewinds existed is live.
        sa.Column("active", sa.Integer(), server_default=sa.text("1")),
        sa.Column("api_content", _long_text()),
        sa.Column("display_kind", sa.Text()),
        sa.Column("display_metadata", _long_text()),
    ]


TABLES: list[tuple[str, Callable[[], list[sa.Column[Any]]]]] = [
    ("sessions", _session_columns),
    ("messages", _message_columns),
]


def _adoption_table() -> sa.TableClause:
    return sa.table(
        ADOPTION_TABLE,
        sa.column("kind", sa.String()),
        sa.column("table_name", sa.String()),
        sa.column("name", sa.String()),
    )


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    added: list[dict[str, str]] = []
    for table_name, columns in TABLES:
        present = {column["name"] for column in inspector.get_columns(table_name)}
        for column in columns():
            if column.name in present:
                continue  # an adopted file's own column: its declaration and data stay
            op.add_column(table_name, column)
            added.append({"kind": KIND, "table_name": table_name, "name": column.name})
    if added:
        op.bulk_insert(_adoption_table(), added)


def downgrade() -> None:
    adoption = _adoption_table()
    bind = op.get_bind()
    records = bind.execute(
        sa.select(adoption.c.table_name, adoption.c.name).where(adoption.c.kind == KIND)
    ).all()
    for table_name, name in records:
        # A plain DROP COLUMN (SQLite >= 3.35): the table keeps its triggers and constraints.
        op.drop_column(table_name, name)
    bind.execute(sa.delete(adoption).where(adoption.c.kind == KIND))
