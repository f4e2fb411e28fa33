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
    LargeBinary,
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


def _flag(name: str) -> Column[int]:
    """One of upstream's later counters and 0/1 flags: NOT NULL, 0 by default."""
    return Column(name, Integer, nullable=False, server_default=text("0"))


#: The backends that get an index only SQLite and PostgreSQL can build (partial or on an
#: expression); the migrations and ``db check`` read it from the index's ``info``.
PARTIAL_INDEX_DIALECTS: Final = ("sqlite", "postgresql")


def _embedded_and_postgresql(index: Index) -> Index:
    index.info["dialects"] = PARTIAL_INDEX_DIALECTS
    # (SQLAlchemy documents a tuple of dialect names here; its annotation says one name.)
    return index.ddl_if(dialect=PARTIAL_INDEX_DIALECTS)  # type: ignore[arg-type]


#: Who a gateway session is with: upstream's lookup of a peer's latest session.
_GATEWAY_PEER: Final = ("source", "user_id", "chat_id", "chat_type", "thread_id")


def _prefixes(**lengths: int) -> dict[str, Any]:
    """Index prefix lengths for MySQL and MariaDB (SQLAlchemy reads each under its own name)."""
    return {"mysql_length": lengths, "mariadb_length": lengths}


def _on_mysql(index: Index) -> Index:
    index.info["dialects"] = ("mysql", "mariadb")
    return index.ddl_if(dialect=("mysql", "mariadb"))  # type: ignore[arg-type]


def _on_postgresql(index: Index) -> Index:
    index.info["dialects"] = ("postgresql",)
    return index.ddl_if(dialect="postgresql")


#: The revision that creates the search indexes (the revisions before it skip them).
SEARCH_REVISION: Final = "0008_search_indexes"


def _searching(index: Index) -> Index:
    index.info["revision"] = SEARCH_REVISION
    return index


def _optional(index: Index) -> Index:
    """An index a database may lack without drifting (``db check`` does not ask for it)."""
    index.info["optional"] = True
    return index


#: The message columns search reads.
_SEARCHED: Final = ("content", "tool_name", "tool_calls")
#: PostgreSQL: what a message's words are read from (content, tool name and tool calls, at
#: most 100,000 characters, which keeps every ``tsvector`` under PostgreSQL's 1 MB bound).
#: ``idx_messages_search_tsv`` indexes exactly this expression and the search repeats it.
SEARCH_DOCUMENT_PG: Final = (
    "to_tsvector('simple'::regconfig, left(coalesce(content, '') || ' ' || "
    "coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''), 100000))"
)

_DISPLAYED = text("active = 1 OR compacted = 1")
_DISPLAY_BACKFILL = text(
    "(display_order IS NULL OR display_identity IS NULL) AND (active = 1 OR compacted = 1)"
)
_DISPLAYED_IDENTITY = text("display_identity IS NOT NULL AND (active = 1 OR compacted = 1)")


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
    # The rest of upstream's schema-30 columns, with its declarations. Upstream's application
    # writes them (gateway peers, git context, compression bookkeeping, flags); the store
    # carries them whole. Indexed text is bounded for MySQL/MariaDB.
    Column("created_source", String(64)),
    Column("session_key", String(ID_LENGTH)),
    # chat and thread ids are bounded so idx_sessions_gateway_peer fits MySQL's 3072-byte key.
    Column("chat_id", String(128)),
    Column("chat_type", String(64)),
    Column("thread_id", String(128)),
    Column("display_name", Text),
    Column("origin_json", _LongText),
    _counter("expiry_finalized"),
    # Since upstream's schema 25 the prompt itself lives in system_prompts, by this hash.
    # No foreign key: upstream's own column reconciler adds it without one, and SQLite can drop
    # a column again (a downgrade) only if no foreign key names it.
    Column("system_prompt_hash", String(64)),
    Column("cwd", Text),
    Column("git_branch", Text),
    Column("git_repo_root", Text),
    _flag("git_metadata_generation"),
    Column("title_source", String(32)),
    Column("last_activity_description", Text),
    Column("last_activity_provenance", Text),
    Column("compression_failure_cooldown_until", Double),
    Column("compression_failure_error", Text),
    _flag("compression_fallback_streak"),
    _flag("compression_ineffective_count"),
    Column("compression_recovery_deadline", Double),
    _flag("compression_overload_streak"),
    Column("profile_name", String(ID_LENGTH)),
    Column("transport_profile", Text),
    _flag("rewind_count"),
    _flag("archived"),
    # Written by upstream's newest code (still schema 30): archived by its idle sweep.
    _flag("auto_archived"),
    _flag("pinned"),
    _flag("hidden"),
    Column("last_read_at", Double),
    Column("tool_names", _LongText),
    # Upstream's indexes, under upstream's names, so an adopted file keeps one of each.
    # Polling costs O(pending): idx_sessions_handoff_state leads with the state, so "= 'pending'
    # ORDER BY started_at" is a range of it on every backend.
    Index("idx_sessions_handoff_state", "handoff_state", "started_at"),
    # Ours: the running rows a reclaim or the dashboard looks at, oldest claim first.
    Index(
        "ix_sessions_handoff_running",
        "handoff_state",
        "handoff_claimed_at",
        sqlite_where=text("handoff_state = 'running'"),
        postgresql_where=text("handoff_state = 'running'"),
    ),
    Index("idx_sessions_source", "source"),
    Index("idx_sessions_source_id", "source", "id"),
    Index("idx_sessions_parent", "parent_session_id"),
    Index("idx_sessions_started", text("started_at DESC")),
    Index("idx_sessions_session_key", "session_key", text("started_at DESC")),
    _embedded_and_postgresql(
        Index("idx_sessions_gateway_peer", *_GATEWAY_PEER, text("started_at DESC"))
    ),
    # The same index on MySQL/MariaDB, within its 3072-byte key whatever widths an adopted
    # table gave these columns (its prefix lengths rule out DESC terms, which it would not
    # use for this index anyway).
    _on_mysql(
        Index(
            "idx_sessions_gateway_peer",
            *_GATEWAY_PEER,
            "started_at",
            **_prefixes(source=64, user_id=128, chat_id=128, chat_type=64, thread_id=128),
        )
    ),
    Index("idx_sessions_system_prompt_hash", "system_prompt_hash"),
    Index("idx_sessions_tool_names", "tool_names", **_prefixes(tool_names=255)),
    # NULLs never collide in a UNIQUE index on any backend; the WHERE only keeps it small.
    Index(
        "idx_sessions_title_unique",
        "title",
        unique=True,
        sqlite_where=text("title IS NOT NULL"),
        postgresql_where=text("title IS NOT NULL"),
        **_prefixes(title=255),
    ),
    _embedded_and_postgresql(
        Index(
            "idx_sessions_effective_activity",
            text("COALESCE(last_activity_at, started_at) DESC"),
            text("started_at DESC"),
        )
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
    Column("active", Integer, nullable=False, server_default=text("1")),
    Column("api_content", _LongText),
    Column("display_kind", Text),
    Column("display_metadata", _LongText),
    # Upstream's later message columns: summaries written by compression, compacted turns kept
    # for display, and the display order its triggers maintain.
    _flag("_compressed_summary"),
    _flag("compacted"),
    Column("display_identity", LargeBinary),
    Column("display_order", Integer),
    # Written by upstream's newest code (still schema 30): a message's stable identity, the
    # identities a merged message absorbed (a JSON list), its tool calls' identities (a JSON
    # object) and, on a tool result, the identity of the call it answers.
    Column("message_uid", String(64)),
    Column("absorbed_message_uids", _LongText),
    Column("tool_call_uids", _LongText),
    Column("tool_call_uid", String(64)),
    Index("idx_messages_session_id", "session_id", "id"),
    Index("idx_messages_session", "session_id", "timestamp"),
    Index("idx_messages_session_active", "session_id", "active", "timestamp"),
    Index(
        "idx_messages_platform_msg_id",
        "session_id",
        "platform_message_id",
        sqlite_where=text("platform_message_id IS NOT NULL"),
        postgresql_where=text("platform_message_id IS NOT NULL"),
        **_prefixes(platform_message_id=255),
    ),
    # Partial indexes of upstream's read paths: where a backend has no partial indexes they
    # would be whole-table indexes nobody reads, so only SQLite and PostgreSQL get them.
    _embedded_and_postgresql(
        Index(
            "idx_messages_active_null",
            "active",
            sqlite_where=text("active IS NULL"),
            postgresql_where=text("active IS NULL"),
        )
    ),
    _embedded_and_postgresql(
        Index(
            "idx_messages_assistant_calls_by_session",
            "session_id",
            sqlite_where=text("role = 'assistant' AND tool_calls IS NOT NULL"),
            postgresql_where=text("role = 'assistant' AND tool_calls IS NOT NULL"),
        )
    ),
    _embedded_and_postgresql(
        Index(
            "idx_messages_display_backfill",
            "session_id",
            sqlite_where=_DISPLAY_BACKFILL,
            postgresql_where=_DISPLAY_BACKFILL,
        )
    ),
    _embedded_and_postgresql(
        Index(
            "idx_messages_display_identity",
            "session_id",
            "display_identity",
            "display_order",
            sqlite_where=_DISPLAYED_IDENTITY,
            postgresql_where=_DISPLAYED_IDENTITY,
        )
    ),
    _embedded_and_postgresql(
        Index(
            "idx_messages_display_page",
            "session_id",
            "display_order",
            text("active DESC"),
            text("id DESC"),
            sqlite_where=_DISPLAYED,
            postgresql_where=_DISPLAYED,
        )
    ),
    # Message search on the servers (revision 0008; SQLite has upstream's FTS5 tables).
    _searching(
        _on_postgresql(
            Index("idx_messages_search_tsv", text(SEARCH_DOCUMENT_PG), postgresql_using="gin")
        )
    ),
    _searching(
        _optional(
            _on_postgresql(
                Index(
                    "idx_messages_search_trgm",
                    *_SEARCHED,
                    postgresql_using="gin",
                    postgresql_ops={name: "gin_trgm_ops" for name in _SEARCHED},
                )
            )
        )
    ),
    _searching(
        _on_mysql(
            Index(
                "idx_messages_search_ft",
                *_SEARCHED,
                mysql_prefix="FULLTEXT",
                mariadb_prefix="FULLTEXT",
            )
        )
    ),
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
    Index("idx_session_turn_leases_expires", "expires_at"),
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
