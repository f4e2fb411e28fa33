"""Upstream hermes-agent's own tables beside sessions and messages (its schema 30), as Core
``Table`` objects on the shared metadata.

The store reads ``system_prompts`` (a session's prompt, by hash), ``schema_version`` and
``state_meta`` (upstream's bookkeeping, kept consistent by the migrations). The rest belong
to upstream's application (gateway routing and hygiene, heartbeats, compression locks,
delegations, telegram topics, delivery obligations): they are modelled so that adoption,
``db copy`` and ORM users see them whole; the store offers no methods for them. Names, types,
defaults and nullability are upstream's; the FTS5 tables are SQLite-only and declared in
:mod:`hermes_state.search_index`, not here.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.mysql import LONGTEXT

from .tables import ID_LENGTH, metadata

__all__ = [
    "APPLICATION_TABLES",
    "UPSTREAM_SCHEMA_VERSION",
    "UPSTREAM_SIDE_TABLES",
    "async_delegations",
    "compression_locks",
    "conversation_generations",
    "delivery_obligations",
    "gateway_heartbeats",
    "gateway_hygiene_state",
    "gateway_routing",
    "schema_version",
    "session_model_usage",
    "state_meta",
    "system_prompts",
    "telegram_dm_topic_bindings",
    "telegram_dm_topic_mode",
]

#: The upstream schema version this package models (``schema_version.version``).
UPSTREAM_SCHEMA_VERSION: Final = 30

_LongText = Text().with_variant(LONGTEXT(), "mysql", "mariadb")
# Keys and other indexed text: MySQL/MariaDB index only bounded strings.
_Key = String(ID_LENGTH)


def _zero(name: str) -> Column[int]:
    """An upstream counter or flag: NOT NULL, 0 by default."""
    return Column(name, Integer, nullable=False, server_default=text("0"))


def _empty(name: str, type_: String | Text = _Key) -> Column[str]:
    """An upstream text column that is NOT NULL with '' by default."""
    return Column(name, type_, nullable=False, server_default=text("''"))


# Upstream's schema version: one row, the version its migrations brought the file to.
schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, nullable=False),
    mysql_charset="utf8mb4",
)

# System prompts by content hash (upstream schema 25 on): sessions point at them through
# sessions.system_prompt_hash, so one prompt shared by many sessions is stored once.
system_prompts = Table(
    "system_prompts",
    metadata,
    Column("hash", String(64), primary_key=True),
    Column("prompt", _LongText, nullable=False),
    mysql_charset="utf8mb4",
)

# Upstream's key/value bookkeeping (FTS rebuild progress, generations, user meta values).
state_meta = Table(
    "state_meta",
    metadata,
    Column("key", _Key, primary_key=True),
    Column("value", _LongText),
    mysql_charset="utf8mb4",
)

# Token and cost totals of a session per model, billing route and task.
session_model_usage = Table(
    "session_model_usage",
    metadata,
    Column(
        "session_id",
        String(ID_LENGTH),
        ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    # The key's widths keep its six columns within MySQL/MariaDB's 3072-byte key.
    Column("model", String(128), nullable=False),
    _empty("billing_provider", String(64)),
    _empty("billing_base_url", String(191)),
    _empty("billing_mode", String(32)),
    _empty("task", String(64)),
    _zero("api_call_count"),
    _zero("input_tokens"),
    _zero("output_tokens"),
    _zero("cache_read_tokens"),
    _zero("cache_write_tokens"),
    _zero("reasoning_tokens"),
    Column("estimated_cost_usd", Double, nullable=False, server_default=text("0")),
    Column("actual_cost_usd", Double, nullable=False, server_default=text("0")),
    Column("cost_status", Text),
    Column("cost_source", Text),
    Column("first_seen", Double),
    Column("last_seen", Double),
    PrimaryKeyConstraint(
        "session_id",
        "model",
        "billing_provider",
        "billing_base_url",
        "billing_mode",
        "task",
        name="pk_session_model_usage",
    ),
    Index("idx_session_model_usage_session", "session_id"),
    Index("idx_session_model_usage_model", "model"),
    mysql_charset="utf8mb4",
)

# -- upstream's application tables: kept and modelled, no store methods ------------------------

gateway_routing = Table(
    "gateway_routing",
    metadata,
    _empty("scope"),
    Column("session_key", _Key, nullable=False),
    Column("entry_json", _LongText, nullable=False),
    Column("updated_at", Double, nullable=False),
    PrimaryKeyConstraint("scope", "session_key", name="pk_gateway_routing"),
    mysql_charset="utf8mb4",
)

gateway_hygiene_state = Table(
    "gateway_hygiene_state",
    metadata,
    Column("session_key", _Key, primary_key=True),
    _zero("failure_streak"),
    mysql_charset="utf8mb4",
)

conversation_generations = Table(
    "conversation_generations",
    metadata,
    Column("source", String(64), nullable=False),
    Column("session_key", _Key, nullable=False),
    _zero("generation"),
    PrimaryKeyConstraint("source", "session_key", name="pk_conversation_generations"),
    mysql_charset="utf8mb4",
)

gateway_heartbeats = Table(
    "gateway_heartbeats",
    metadata,
    Column("backend_id", _Key, primary_key=True),
    Column("pid", Integer, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("last_heartbeat", Double, nullable=False),
    _empty("profile", Text()),
    _empty("host", Text()),
    mysql_charset="utf8mb4",
)

compression_locks = Table(
    "compression_locks",
    metadata,
    Column("session_id", String(ID_LENGTH), primary_key=True),
    Column("holder", Text, nullable=False),
    Column("acquired_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    Index("idx_compression_locks_expires", "expires_at"),
    mysql_charset="utf8mb4",
)

async_delegations = Table(
    "async_delegations",
    metadata,
    Column("delegation_id", _Key, primary_key=True),
    Column("origin_session", Text, nullable=False),
    _empty("origin_ui_session_id", Text()),
    Column("parent_session_id", Text),
    Column("state", Text, nullable=False),
    Column("dispatched_at", Double, nullable=False),
    Column("completed_at", Double),
    Column("updated_at", Double, nullable=False),
    Column("event_json", _LongText),
    Column("result_json", _LongText),
    Column("delivery_state", String(32), nullable=False, server_default=text("'pending'")),
    _zero("delivery_attempts"),
    Column("delivered_at", Double),
    Column("owner_pid", Integer),
    Column("owner_started_at", Integer),
    Column("task_json", _LongText),
    Column("delivery_claim", Text),
    Column("delivery_claimed_at", Double),
    _empty("origin_session_id", Text()),
    Index("idx_async_delegations_delivery", "delivery_state", "completed_at"),
    mysql_charset="utf8mb4",
)

# Created lazily by upstream's telegram adapter; a file without them is just as current.
telegram_dm_topic_mode = Table(
    "telegram_dm_topic_mode",
    metadata,
    Column("profile_name", _Key, nullable=False, server_default=text("'default'")),
    Column("chat_id", _Key, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("enabled", Integer, nullable=False, server_default=text("1")),
    Column("activated_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Column("has_topics_enabled", Integer),
    Column("allows_users_to_create_topics", Integer),
    Column("capability_checked_at", Double),
    Column("intro_message_id", Text),
    Column("pinned_message_id", Text),
    PrimaryKeyConstraint("profile_name", "chat_id", name="pk_telegram_dm_topic_mode"),
    mysql_charset="utf8mb4",
)

telegram_dm_topic_bindings = Table(
    "telegram_dm_topic_bindings",
    metadata,
    Column("profile_name", _Key, nullable=False, server_default=text("'default'")),
    Column("chat_id", _Key, nullable=False),
    Column("thread_id", _Key, nullable=False),
    Column("user_id", _Key, nullable=False),
    Column("session_key", Text, nullable=False),
    Column(
        "session_id",
        String(ID_LENGTH),
        ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("managed_mode", String(32), nullable=False, server_default=text("'auto'")),
    Column("linked_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    PrimaryKeyConstraint(
        "profile_name", "chat_id", "thread_id", name="pk_telegram_dm_topic_bindings"
    ),
    Index("idx_telegram_dm_topic_bindings_session", "session_id", unique=True),
    Index("idx_telegram_dm_topic_bindings_user", "profile_name", "user_id", "chat_id"),
    mysql_charset="utf8mb4",
)

# Upstream's gateway delivery ledger (created lazily by its gateway; older files have fewer
# of these columns, and adoption adds none: the gateway adds its own).
delivery_obligations = Table(
    "delivery_obligations",
    metadata,
    Column("obligation_id", String(64), primary_key=True),
    Column("session_key", _Key, nullable=False),
    Column("platform", String(64), nullable=False),
    Column("chat_id", _Key, nullable=False),
    Column("thread_id", Text),
    Column("content", _LongText, nullable=False),
    Column("state", String(32), nullable=False),
    _zero("attempts"),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Column("owner_pid", Integer),
    Column("owner_started_at", Integer),
    Column("last_error", Text),
    Column("adapter_profile", String(ID_LENGTH)),
    _zero("delivery_fence"),
    Column("owner_installation_id", Text),
    Column("owner_host", Text),
    Column("owner_generation", Text),
    Column("lease_expires_at", Double),
    Index("idx_delivery_obligations_claim", "state", "platform", "adapter_profile"),
    mysql_charset="utf8mb4",
)

#: Upstream application tables, which the store never writes (adoption and copies keep them).
#: Every table of upstream's own besides ``sessions`` and ``messages``: a file holding only
#: some of these (upstream's store started on it and stopped before its sessions table, or an
#: old upstream left a routing table behind) is upstream's, not another application's.
UPSTREAM_SIDE_TABLES: Final = (
    "schema_version",
    "system_prompts",
    "state_meta",
    "session_model_usage",
    "gateway_routing",
    "gateway_hygiene_state",
    "conversation_generations",
    "gateway_heartbeats",
    "compression_locks",
    "async_delegations",
    "telegram_dm_topic_mode",
    "telegram_dm_topic_bindings",
    "delivery_obligations",
)

APPLICATION_TABLES: Final = (
    "gateway_routing",
    "gateway_hygiene_state",
    "conversation_generations",
    "gateway_heartbeats",
    "compression_locks",
    "async_delegations",
    "telegram_dm_topic_mode",
    "telegram_dm_topic_bindings",
    "delivery_obligations",
)
