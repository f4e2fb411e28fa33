"""SQLAlchemy models of the sessions table, its handoff state machine, and the transcript."""

from __future__ import annotations

import enum
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
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
from sqlalchemy.ext.asyncio import AsyncAttrs
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "ERROR_LIMIT",
    "ID_LENGTH",
    "REQUESTABLE_STATES",
    "Base",
    "HandoffEvent",
    "HandoffState",
    "Message",
    "Session",
    "SessionTurnLease",
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
# migrations pick the binary, no-pad collation per server (table_options, below).
_MYSQL_TABLE_OPTIONS: Final = {"mysql_charset": "utf8mb4"}
_LongText = Text().with_variant(LONGTEXT(), "mysql", "mariadb")


class HandoffState(enum.StrEnum):
    """The states of ``sessions.handoff_state``; NULL means no handoff was ever requested."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


#: A new request is accepted from these states (None is a session never handed off).
REQUESTABLE_STATES: Final = (None, HandoffState.COMPLETED, HandoffState.FAILED)


class Base(AsyncAttrs, DeclarativeBase):
    """Declarative base; ``AsyncAttrs`` lets async code await a lazy attribute
    (``await session.awaitable_attrs.messages``)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Session(Base):
    """One agent session; the ``handoff_*`` columns carry its handoff state machine.

    Times are epoch seconds as floats, the format existing ``state.db`` files use.
    """

    __tablename__ = "sessions"
    __table_args__ = (
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
        _MYSQL_TABLE_OPTIONS,
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    source: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    title: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    parent_session_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    started_at: Mapped[float] = mapped_column(Double)
    ended_at: Mapped[float | None] = mapped_column(Double)
    end_reason: Mapped[str | None] = mapped_column(Text)

    handoff_state: Mapped[str | None] = mapped_column(String(16))
    handoff_platform: Mapped[str | None] = mapped_column(String(64))
    handoff_error: Mapped[str | None] = mapped_column(Text)
    handoff_requested_at: Mapped[float | None] = mapped_column(Double)
    handoff_claimed_at: Mapped[float | None] = mapped_column(Double)
    handoff_finished_at: Mapped[float | None] = mapped_column(Double)
    # Several gateways: who holds a running row, until when, and which claim of the row it is.
    handoff_owner: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    handoff_lease_expires_at: Mapped[float | None] = mapped_column(Double)
    handoff_attempt: Mapped[int] = mapped_column(Integer, server_default=text("0"))

    # Upstream hermes-agent's columns (its create_session and per-message counters write them),
    # with its defaults. Nullable like upstream's, so its own writers and adopted files agree.
    model_config: Mapped[str | None] = mapped_column(_LongText)
    system_prompt: Mapped[str | None] = mapped_column(_LongText)
    message_count: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    tool_call_count: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    input_tokens: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    output_tokens: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    cache_read_tokens: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    cache_write_tokens: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    billing_provider: Mapped[str | None] = mapped_column(Text)
    billing_base_url: Mapped[str | None] = mapped_column(Text)
    billing_mode: Mapped[str | None] = mapped_column(Text)
    estimated_cost_usd: Mapped[float | None] = mapped_column(Double)
    actual_cost_usd: Mapped[float | None] = mapped_column(Double)
    cost_status: Mapped[str | None] = mapped_column(Text)
    cost_source: Mapped[str | None] = mapped_column(Text)
    pricing_version: Mapped[str | None] = mapped_column(Text)
    api_call_count: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    last_activity_at: Mapped[float | None] = mapped_column(Double)

    #: The transcript, oldest first (rewound turns included: filter on ``Message.active``).
    messages: Mapped[list[Message]] = relationship(
        back_populates="session", order_by="Message.id", passive_deletes=True
    )


class Message(Base):
    """One transcript entry of a session, in insertion order."""

    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_session_id_id", "session_id", "id"),
        _MYSQL_TABLE_OPTIONS,
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(ID_LENGTH), ForeignKey("sessions.id"))
    role: Mapped[str] = mapped_column(String(32))
    content: Mapped[str | None] = mapped_column(_LongText)
    timestamp: Mapped[float] = mapped_column(Double)

    # Upstream hermes-agent's message columns (what its append_message writes), with its
    # defaults. JSON payloads (tool_calls, reasoning_details, codex_*, display_metadata) are
    # stored as JSON text, as upstream stores them.
    tool_call_id: Mapped[str | None] = mapped_column(Text)
    tool_calls: Mapped[str | None] = mapped_column(_LongText)
    tool_name: Mapped[str | None] = mapped_column(Text)
    effect_disposition: Mapped[str | None] = mapped_column(Text)
    token_count: Mapped[int | None] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(Text)
    reasoning: Mapped[str | None] = mapped_column(_LongText)
    reasoning_content: Mapped[str | None] = mapped_column(_LongText)
    reasoning_details: Mapped[str | None] = mapped_column(_LongText)
    codex_reasoning_items: Mapped[str | None] = mapped_column(_LongText)
    codex_message_items: Mapped[str | None] = mapped_column(_LongText)
    platform_message_id: Mapped[str | None] = mapped_column(Text)
    observed: Mapped[int | None] = mapped_column(Integer, server_default=text("0"))
    #: 0 for a turn the user rewound (soft-deleted): the transcript leaves it out.
    active: Mapped[int | None] = mapped_column(Integer, server_default=text("1"))
    api_content: Mapped[str | None] = mapped_column(_LongText)
    display_kind: Mapped[str | None] = mapped_column(Text)
    display_metadata: Mapped[str | None] = mapped_column(_LongText)

    session: Mapped[Session] = relationship(back_populates="messages")


class HandoffEvent(Base):
    """The audit trail: one row per handoff transition, written in the transition's transaction.

    No foreign key to sessions: older hermes versions delete sessions, and the trail must
    neither block them nor vanish with them (``handoff prune-events`` trims it instead).
    """

    __tablename__ = "handoff_events"
    __table_args__ = (
        Index("ix_handoff_events_session_id_id", "session_id", "id"),
        Index("ix_handoff_events_at", "at"),
        _MYSQL_TABLE_OPTIONS,
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    session_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    at: Mapped[float] = mapped_column(Double)
    #: The gateway's owner name, "cli" for the command line, or the store's actor.
    actor: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    attempt: Mapped[int | None] = mapped_column(Integer)
    #: The error of a failure, or the reason of a request ("requested for telegram").
    detail: Mapped[str | None] = mapped_column(Text)


class SessionTurnLease(Base):
    """The durable turn lease of one conversation: at most one holder (a local turn, or a
    gateway delivering a handoff) works on it at a time, across processes.

    Shaped like upstream's table of the same name, so an adopted file keeps its rows. The key
    is the conversation: the lineage root of a session that compression split into segments.
    """

    __tablename__ = "session_turn_leases"
    __table_args__ = (_MYSQL_TABLE_OPTIONS,)

    conversation_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    holder: Mapped[str] = mapped_column(String(ID_LENGTH))
    acquired_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float] = mapped_column(Double)


metadata = Base.metadata
sessions: Table = metadata.tables["sessions"]
messages: Table = metadata.tables["messages"]
handoff_events: Table = metadata.tables["handoff_events"]
session_turn_leases: Table = metadata.tables["session_turn_leases"]


def table_options(dialect: Any) -> dict[str, str]:
    """Table options for tables the migrations create.

    On MySQL and MariaDB, ids must compare exactly: a binary collation, and one without
    PAD SPACE, or 'a' and 'a ' would be the same session (MariaDB's utf8mb4_bin pads).
    """
    if dialect.name not in ("mysql", "mariadb"):
        return {}
    collation = "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"
    return {f"{dialect.name}_charset": "utf8mb4", f"{dialect.name}_collate": collation}
