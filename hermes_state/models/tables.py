"""The tables: sessions with their handoff state machine, the transcript, the audit trail and
the conversations' turn leases, as SQLAlchemy Core ``Table`` objects on one ``MetaData``."""

from __future__ import annotations

import enum
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.mysql import LONGTEXT

__all__ = [
    "ERROR_LIMIT",
    "ID_LENGTH",
    "REQUESTABLE_STATES",
    "HandoffState",
    "handoff_events",
    "messages",
    "metadata",
    "session_turn_leases",
    "sessions",
    "table_options",
]

# Every constraint and index gets a stable, predictable name, so migrations can address them.
NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LENGTH: Final = 255
ERROR_LIMIT: Final = 500

# MySQL/MariaDB compare strings case-insensitively by default; session ids are exact. The
# migrations pick the binary, no-pad collation per server (table_options, below); every table
# says mysql_charset="utf8mb4".
_LongText = Text().with_variant(LONGTEXT(), "mysql", "mariadb")


class HandoffState(enum.StrEnum):
    """The states of ``sessions.handoff_state``; NULL means no handoff was ever requested."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


#: A new request is accepted from these states (None is a session never handed off).
REQUESTABLE_STATES: Final = (None, HandoffState.COMPLETED, HandoffState.FAILED)

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _counter(name: str) -> Column[int]:
    """One of upstream's per-session or per-message counters: nullable, 0 by default."""
    return Column(name, Integer, nullable=True, server_default=text("0"))


# Times are epoch seconds as floats, the format existing ``state.db`` files use.
sessions = Table(
    "sessions",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("source", String(64), nullable=False),
    Column("user_id", String(ID_LENGTH)),
    Column("title", Text),
    Column("model", String(ID_LENGTH)),
    Column("parent_session_id", String(ID_LENGTH)),
    Column("started_at", Double, nullable=False),
    Column("ended_at", Double),
    Column("end_reason", Text),
    Column("handoff_state", String(16)),
    Column("handoff_platform", String(64)),
    Column("handoff_error", Text),
    Column("handoff_requested_at", Double),
    Column("handoff_claimed_at", Double),
    Column("handoff_finished_at", Double),
    # Several gateways: who holds a running row, until when, and which claim of the row it is.
    Column("handoff_owner", String(ID_LENGTH)),
    Column("handoff_lease_expires_at", Double),
    Column("handoff_attempt", Integer, nullable=False, server_default=text("0")),
    # Upstream hermes-agent's columns (its create_session and per-message counters write them),
    # with its defaults. Nullable like upstream's, so its own writers and adopted files agree.
    Column("model_config", _LongText),
    Column("system_prompt", _LongText),
    _counter("message_count"),
    _counter("tool_call_count"),
    _counter("input_tokens"),
    _counter("output_tokens"),
    _counter("cache_read_tokens"),
    _counter("cache_write_tokens"),
    _counter("reasoning_tokens"),
    Column("billing_provider", Text),
    Column("billing_base_url", Text),
    Column("billing_mode", Text),
    Column("estimated_cost_usd", Double),
    Column("actual_cost_usd", Double),
    Column("cost_status", Text),
    Column("cost_source", Text),
    Column("pricing_version", Text),
    _counter("api_call_count"),
    Column("last_activity_at", Double),
    # Polling cost must follow the number of pending rows, not of sessions. SQLite and
    # PostgreSQL get partial indexes with an equality predicate (SQLite ignores a partial
    # index whose WHERE is an IN list when the query says "= 'pending'"); MySQL/MariaDB have
    # no partial indexes and use the same columns as a plain composite index. The name is
    # upstream's, so a file upstream already indexed keeps one index, not two.
    Index(
        "idx_sessions_handoff_pending",
        "handoff_state",
        "started_at",
        sqlite_where=text("handoff_state = 'pending'"),
        postgresql_where=text("handoff_state = 'pending'"),
    ),
    Index(
        "ix_sessions_handoff_running",
        "handoff_state",
        "handoff_claimed_at",
        sqlite_where=text("handoff_state = 'running'"),
        postgresql_where=text("handoff_state = 'running'"),
    ),
    mysql_charset="utf8mb4",
)

# One transcript entry of a session, in insertion order.
messages = Table(
    "messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(ID_LENGTH), ForeignKey("sessions.id"), nullable=False),
    Column("role", String(32), nullable=False),
    Column("content", _LongText),
    Column("timestamp", Double, nullable=False),
    # Upstream hermes-agent's message columns (what its append_message writes), with its
    # defaults. JSON payloads (tool_calls, reasoning_details, codex_*, display_metadata) are
    # stored as JSON text, as upstream stores them.
    Column("tool_call_id", Text),
    Column("tool_calls", _LongText),
    Column("tool_name", Text),
    Column("effect_disposition", Text),
    Column("token_count", Integer),
    Column("finish_reason", Text),
    Column("reasoning", _LongText),
    Column("reasoning_content", _LongText),
    Column("reasoning_details", _LongText),
    Column("codex_reasoning_items", _LongText),
    Column("codex_message_items", _LongText),
    Column("platform_message_id", Text),
    _counter("observed"),
    # 0 for a turn the user rewound (soft-deleted): the transcript leaves it out.
    Column("active", Integer, nullable=True, server_default=text("1")),
    Column("api_content", _LongText),
    Column("display_kind", Text),
    Column("display_metadata", _LongText),
    Index("ix_messages_session_id_id", "session_id", "id"),
    mysql_charset="utf8mb4",
)

# The audit trail: one row per handoff transition, written in the transition's transaction.
# No foreign key to sessions: older hermes versions delete sessions, and the trail must
# neither block them nor vanish with them (``handoff prune-events`` trims it instead).
handoff_events = Table(
    "handoff_events",
    metadata,
    Column(
        "id",
        BigInteger().with_variant(Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("session_id", String(ID_LENGTH), nullable=False),
    Column("from_state", String(16)),
    Column("to_state", String(16), nullable=False),
    Column("at", Double, nullable=False),
    # The gateway's owner name, "cli" for the command line, or the store's actor.
    Column("actor", String(ID_LENGTH)),
    Column("attempt", Integer),
    # The error of a failure, or the reason of a request ("requested for telegram").
    Column("detail", Text),
    Index("ix_handoff_events_session_id_id", "session_id", "id"),
    Index("ix_handoff_events_at", "at"),
    mysql_charset="utf8mb4",
)

# The durable turn lease of one conversation: at most one holder (a local turn, or a gateway
# delivering a handoff) works on it at a time, across processes. Shaped like upstream's table
# of the same name, so an adopted file keeps its rows. The key is the conversation: the
# lineage root of a session that compression split into segments.
session_turn_leases = Table(
    "session_turn_leases",
    metadata,
    Column("conversation_id", String(ID_LENGTH), primary_key=True),
    Column("holder", String(ID_LENGTH), nullable=False),
    Column("acquired_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    mysql_charset="utf8mb4",
)


def table_options(dialect: Any) -> dict[str, str]:
    """Table options for tables the migrations create.

    On MySQL and MariaDB, ids must compare exactly: a binary collation, and one without
    PAD SPACE, or 'a' and 'a ' would be the same session (MariaDB's utf8mb4_bin pads).
    """
    if dialect.name not in ("mysql", "mariadb"):
        return {}
    collation = "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"
    return {f"{dialect.name}_charset": "utf8mb4", f"{dialect.name}_collate": collation}
