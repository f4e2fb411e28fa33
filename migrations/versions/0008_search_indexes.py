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

import sqlalchemy as sa
from alembic import op

from hermes_state.schema import target_dialect
from hermes_state.statements import PG_DOCUMENT

revision: str = "0008_search_indexes"
down_revision: str | None = "0007_routing_key_repair"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WORDS_PG = "idx_messages_search_tsv"
TRIGRAMS_PG = "idx_messages_search_trgm"
FULLTEXT = "idx_messages_search_ft"

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


def upgrade() -> None:
    bind = op.get_bind()
    dialect = target_dialect(bind)
    if dialect == "sqlite":
        return  # upstream's FTS5 tables and triggers (revision 0006)
    if dialect == "postgresql":
        op.execute(f"CREATE INDEX IF NOT EXISTS {WORDS_PG} ON messages USING gin (({PG_DOCUMENT}))")
        if _pg_trgm_ready(bind):
            op.execute(
                f"CREATE INDEX IF NOT EXISTS {TRIGRAMS_PG} ON messages USING gin "
                "(content gin_trgm_ops, tool_name gin_trgm_ops, tool_calls gin_trgm_ops)"
            )
        return
    op.execute(f"CREATE FULLTEXT INDEX {FULLTEXT} ON messages (content, tool_name, tool_calls)")


def downgrade() -> None:
    dialect = target_dialect(op.get_bind())
    if dialect == "sqlite":
        return
    if dialect == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {TRIGRAMS_PG}")
        op.execute(f"DROP INDEX IF EXISTS {WORDS_PG}")
        return
    op.execute(f"DROP INDEX {FULLTEXT} ON messages")
