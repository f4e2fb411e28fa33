"""Upstream's legacy ``gateway_routing``: its key rebuilt to ``(scope, session_key)``.

An older upstream made the table with ``session_key`` alone as its primary key (its column
reconciler then added ``scope``), so two scopes could not hold the same key. Upstream repairs
such a file on open; so does this revision, on SQLite (the only backend that older upstream
wrote): the table is rebuilt in upstream's current shape and every row copied, ``scope`` NULL
read as ``''``. A table already keyed that way (every file since, and every database
hermes-state made) is left as it is.

The rebuild is recorded in the adoption table (kind ``r7_routing_key``, naming whether the
legacy table had ``scope``), so the downgrade gives back the legacy shape with the rows (of
one session key in several scopes, the newest row: the legacy key holds one).

Revision ID: 0007_routing_key_repair
Revises: 0006_upstream_schema30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import SchemaItem

from hermes_state.models import gateway_routing
from hermes_state.schema import ADOPTION_TABLE, target_dialect

revision: str = "0007_routing_key_repair"
down_revision: str | None = "0006_upstream_schema30"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "gateway_routing"
KEY = ["scope", "session_key"]
REBUILT = "r7_routing_key"
#: The ``name`` of the adoption record: whether the legacy table had a ``scope`` column.
WITH_SCOPE, WITHOUT_SCOPE = "scope", "no_scope"
_SETTLING = f"{TABLE}_rebuilt"

_adoption = sa.table(
    ADOPTION_TABLE,
    sa.column("kind", sa.String()),
    sa.column("table_name", sa.String()),
    sa.column("name", sa.String()),
)


def _current_shape() -> list[SchemaItem]:
    columns: list[SchemaItem] = [column._copy() for column in gateway_routing.columns]
    for column in columns:
        assert isinstance(column, sa.Column)
        column.primary_key = False
    return [*columns, sa.PrimaryKeyConstraint(*KEY, name=f"pk_{TABLE}")]


def _legacy_shape(with_scope: bool) -> list[SchemaItem]:
    columns: list[SchemaItem] = [
        sa.Column("session_key", sa.Text(), primary_key=True),
        sa.Column("entry_json", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    ]
    if with_scope:
        columns.append(sa.Column("scope", sa.Text(), server_default=sa.text("''")))
    return columns


def _rebuild(shape: list[SchemaItem], copied: str, columns: str) -> None:
    """Rename the table aside, create it in ``shape``, copy its rows oldest first (so of rows
    that meet on the new key the newest stays), drop the old one."""
    op.rename_table(TABLE, _SETTLING)
    op.create_table(TABLE, *shape)
    op.execute(
        f"INSERT OR REPLACE INTO {TABLE} ({columns}) "  # noqa: S608 - constants only
        f"SELECT {copied} FROM {_SETTLING} ORDER BY updated_at"
    )
    op.drop_table(_SETTLING)


def _legacy_columns(bind: sa.Connection) -> set[str] | None:
    """The columns of a legacy-keyed routing table, or None when there is nothing to repair."""
    if target_dialect(bind) != "sqlite" or op.get_context().as_sql:
        return None  # offline SQL is for a database hermes-state made: keyed as upstream's now
    inspector = sa.inspect(bind)
    if not inspector.has_table(TABLE):
        return None
    if inspector.get_pk_constraint(TABLE)["constrained_columns"] == KEY:
        return None
    return {column["name"] for column in inspector.get_columns(TABLE)}


def upgrade() -> None:
    bind = op.get_bind()
    columns = _legacy_columns(bind)
    if columns is None:
        return
    scope = "COALESCE(scope, '')" if "scope" in columns else "''"
    _rebuild(
        _current_shape(),
        f"{scope}, session_key, entry_json, updated_at",
        "scope, session_key, entry_json, updated_at",
    )
    name = WITH_SCOPE if "scope" in columns else WITHOUT_SCOPE
    op.execute(sa.insert(_adoption).values(kind=REBUILT, table_name=TABLE, name=name))


def _record(bind: sa.Connection) -> str | None:
    """What the upgrade recorded of a rebuild (called outside a migration too, to preview)."""
    query = sa.select(_adoption.c.name).where(_adoption.c.kind == REBUILT)
    return bind.execute(query).scalar_one_or_none()


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The column ``downgrade()`` drops: ``scope``, when the legacy table had none."""
    return [(TABLE, "scope")] if _record(bind) == WITHOUT_SCOPE else []


def downgrade() -> None:
    if op.get_context().as_sql:
        return  # offline SQL is for a database hermes-state made: nothing was rebuilt
    bind = op.get_bind()
    record = _record(bind)
    if record is None:
        return
    with_scope = record == WITH_SCOPE
    columns = "session_key, entry_json, updated_at" + (", scope" if with_scope else "")
    _rebuild(_legacy_shape(with_scope), columns, columns)
    op.execute(sa.delete(_adoption).where(_adoption.c.kind == REBUILT))
