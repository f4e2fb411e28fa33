"""The indexes of message search on the servers (SQLite's FTS5 tables exist since 0006).

* PostgreSQL: ``idx_messages_search_tsv``, a GIN index of the ``tsvector`` the search reads
  (:data:`hermes_state.statements.PG_DOCUMENT`), and ``idx_messages_search_trgm``, a GIN
  ``pg_trgm`` index of content, tool name and tool calls for substring and CJK terms. The
  extension is created when missing (``CREATE EXTENSION IF NOT EXISTS pg_trgm``); a role
  that may not create it gets a warning and no trigram index: those searches then read
  every row (nothing else changes).
* MariaDB/MySQL: ``idx_messages_search_ft``, an InnoDB FULLTEXT index of content, tool name
  and tool calls, read in boolean mode.

The downgrade drops the indexes (not the extension, which other schemas may use).

Revision ID: 0008_search_indexes
Revises: 0007_routing_key_repair
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from hermes_state.models import messages
from hermes_state.schema import target_dialect

revision: str = "0008_search_indexes"
down_revision: str | None = "0007_routing_key_repair"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRIGRAMS_PG = "idx_messages_search_trgm"

_log = logging.getLogger("hermes_state.migrations")


def _pg_trgm_ready(bind: sa.Connection) -> bool:
    """Whether ``pg_trgm`` is there, creating it when this role may."""
    if op.get_context().as_sql:
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        return True
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except sa.exc.DBAPIError as exc:
        _log.warning(
            "pg_trgm could not be created (%s): substring and CJK searches will read every "
            "message; a superuser can run CREATE EXTENSION pg_trgm and then "
            "`hermes-state db upgrade` again after a downgrade to 0007",
            str(exc.orig).strip().splitlines()[0] if exc.orig else exc,
        )
        return False
    return True


def _indexes(dialect: str) -> list[sa.Index]:
    """This revision's indexes on ``dialect``, as the models declare them."""
    return [
        index
        for index in sorted(messages.indexes, key=lambda i: str(i.name))
        if index.info.get("revision") == revision
        and dialect in index.info.get("dialects", (dialect,))
    ]


def upgrade() -> None:
    bind = op.get_bind()
    dialect = target_dialect(bind)
    if dialect == "sqlite":
        return  # upstream's FTS5 tables and triggers (revision 0006)
    offline = op.get_context().as_sql
    existing = set() if offline else {i["name"] for i in sa.inspect(bind).get_indexes("messages")}
    # ``db upgrade --dry-run`` predicts a server's upgrade on an SQLite shadow of its names:
    # there an index only needs its name (SQLite reads no PostgreSQL expression).
    shadow = bind.dialect.name != dialect
    for index in _indexes(dialect):
        if index.name in existing:
            continue
        if shadow:
            named: list[Any] = [e.name for e in index.expressions if isinstance(e, sa.Column)]
            op.create_index(
                str(index.name), "messages", named or [sa.text("coalesce(content, '')")]
            )
            continue
        if index.name == TRIGRAMS_PG and not _pg_trgm_ready(bind):
            continue
        op.create_index(
            str(index.name), "messages", list(index.expressions), **dict(index.dialect_kwargs)
        )


def downgrade_drops(bind: sa.Connection) -> list[tuple[str, str | None]]:
    """The tables or columns ``downgrade()`` drops: none (indexes only)."""
    return []


def downgrade() -> None:
    bind = op.get_bind()
    dialect = target_dialect(bind)
    if dialect == "sqlite":
        return
    offline = op.get_context().as_sql
    existing = None if offline else {i["name"] for i in sa.inspect(bind).get_indexes("messages")}
    for index in reversed(_indexes(dialect)):
        if existing is None or index.name in existing:
            op.drop_index(str(index.name), table_name="messages")
