"""The ORM classes, mapped onto copies of the tables of :mod:`hermes_state.models` that load
times as aware UTC datetimes and JSON decoded (what is stored is unchanged).

Loaded only when a class is first asked for (``from hermes_state.models import AgentSession``):
the stores, the watcher and the command line work on the tables alone, and loading
``sqlalchemy.orm`` would cost every process that opens a store a quarter of its start-up.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from sqlalchemy import Double, MetaData, Table
from sqlalchemy.ext.asyncio import AsyncAttrs
from sqlalchemy.orm import DeclarativeBase, Mapped, relationship

from . import tables
from .orm_types import EpochTime, JSONText, MessageContent

__all__ = [
    "AgentSession",
    "AsyncDelegation",
    "Base",
    "CompressionLock",
    "ConversationGeneration",
    "DeliveryObligation",
    "GatewayHeartbeat",
    "GatewayHygieneState",
    "GatewayRoute",
    "HandoffEvent",
    "Message",
    "SchemaVersion",
    "Session",
    "SessionModelUsage",
    "SessionTurnLease",
    "StateMeta",
    "SystemPrompt",
    "TelegramDmTopicBinding",
    "TelegramDmTopicMode",
    "orm_metadata",
]


#: The ORM's copies of the tables: the same names, columns, keys and stored types (the same
#: DDL), with Python types over them (:mod:`.orm_types`).
orm_metadata: Final = MetaData(naming_convention=tables.NAMING_CONVENTION)

#: Columns holding JSON text the store returns decoded, and the content column (all long
#: text).
_PYTHON_TYPES: Final = {
    ("messages", "tool_calls"): JSONText,
    ("messages", "display_metadata"): JSONText,
    ("messages", "content"): MessageContent,
}


def _with_python_types(table: Table) -> Table:
    copy = table.to_metadata(orm_metadata)
    for column in copy.columns:
        python_type = _PYTHON_TYPES.get((table.name, column.name))
        if python_type is not None:
            column.type = python_type()
        elif isinstance(column.type, Double) and not column.name.endswith("_usd"):
            column.type = EpochTime()
    return copy


_TABLES: Final = {table.name: _with_python_types(table) for table in tables.metadata.sorted_tables}


class Base(AsyncAttrs, DeclarativeBase):
    """Declarative base on the ORM's copies of the tables; ``AsyncAttrs`` lets async code
    await a lazy attribute (``await session.awaitable_attrs.messages``)."""

    metadata = orm_metadata


class AgentSession(Base):
    """One agent session; the ``handoff_*`` columns carry its handoff state machine.

    Times load as aware UTC datetimes (stored as epoch seconds, the format ``state.db``
    files use); costs in US dollars stay floats.
    """

    __table__ = _TABLES["sessions"]

    id: Mapped[str]
    source: Mapped[str]
    user_id: Mapped[str | None]
    title: Mapped[str | None]
    model: Mapped[str | None]
    parent_session_id: Mapped[str | None]
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    end_reason: Mapped[str | None]

    handoff_state: Mapped[str | None]
    handoff_platform: Mapped[str | None]
    handoff_error: Mapped[str | None]
    handoff_requested_at: Mapped[datetime | None]
    handoff_claimed_at: Mapped[datetime | None]
    handoff_finished_at: Mapped[datetime | None]
    handoff_owner: Mapped[str | None]
    handoff_lease_expires_at: Mapped[datetime | None]
    handoff_attempt: Mapped[int]

    model_config: Mapped[str | None]
    system_prompt: Mapped[str | None]
    message_count: Mapped[int | None]
    tool_call_count: Mapped[int | None]
    input_tokens: Mapped[int | None]
    output_tokens: Mapped[int | None]
    cache_read_tokens: Mapped[int | None]
    cache_write_tokens: Mapped[int | None]
    reasoning_tokens: Mapped[int | None]
    billing_provider: Mapped[str | None]
    billing_base_url: Mapped[str | None]
    billing_mode: Mapped[str | None]
    estimated_cost_usd: Mapped[float | None]
    actual_cost_usd: Mapped[float | None]
    cost_status: Mapped[str | None]
    cost_source: Mapped[str | None]
    pricing_version: Mapped[str | None]
    api_call_count: Mapped[int | None]
    last_activity_at: Mapped[datetime | None]
    auto_archived: Mapped[int]
    created_source: Mapped[str | None]
    session_key: Mapped[str | None]
    chat_id: Mapped[str | None]
    chat_type: Mapped[str | None]
    thread_id: Mapped[str | None]
    display_name: Mapped[str | None]
    origin_json: Mapped[str | None]
    expiry_finalized: Mapped[int | None]
    system_prompt_hash: Mapped[str | None]
    cwd: Mapped[str | None]
    git_branch: Mapped[str | None]
    git_repo_root: Mapped[str | None]
    git_metadata_generation: Mapped[int]
    title_source: Mapped[str | None]
    last_activity_description: Mapped[str | None]
    last_activity_provenance: Mapped[str | None]
    compression_failure_cooldown_until: Mapped[datetime | None]
    compression_failure_error: Mapped[str | None]
    compression_fallback_streak: Mapped[int]
    compression_ineffective_count: Mapped[int]
    compression_recovery_deadline: Mapped[datetime | None]
    compression_overload_streak: Mapped[int]
    profile_name: Mapped[str | None]
    transport_profile: Mapped[str | None]
    rewind_count: Mapped[int]
    archived: Mapped[int]
    pinned: Mapped[int]
    hidden: Mapped[int]
    last_read_at: Mapped[datetime | None]
    tool_names: Mapped[str | None]

    #: The transcript, oldest first (rewound turns included: filter on ``Message.active``).
    messages: Mapped[list[Message]] = relationship(
        back_populates="session", order_by="Message.id", passive_deletes=True
    )


#: The session class under its first name; ``AgentSession`` does not clash with SQLAlchemy's
#: ``sqlalchemy.orm.Session`` in a module that imports both.
Session = AgentSession


class Message(Base):
    """One transcript entry of a session, in insertion order."""

    __table__ = _TABLES["messages"]

    id: Mapped[int]
    session_id: Mapped[str]
    role: Mapped[str]
    #: Text, or multimodal content's parts (stored under upstream's ``\\x00json:`` prefix).
    content: Mapped[str | list[Any] | dict[str, Any] | None]
    timestamp: Mapped[datetime]
    tool_call_id: Mapped[str | None]
    #: The calls of an assistant turn, decoded (upstream stores JSON text).
    tool_calls: Mapped[list[Any] | None]
    tool_name: Mapped[str | None]
    effect_disposition: Mapped[str | None]
    token_count: Mapped[int | None]
    finish_reason: Mapped[str | None]
    reasoning: Mapped[str | None]
    reasoning_content: Mapped[str | None]
    reasoning_details: Mapped[str | None]
    codex_reasoning_items: Mapped[str | None]
    codex_message_items: Mapped[str | None]
    platform_message_id: Mapped[str | None]
    observed: Mapped[int | None]
    #: 0 for a turn the user rewound (soft-deleted): the transcript leaves it out.
    active: Mapped[int]
    api_content: Mapped[str | None]
    display_kind: Mapped[str | None]
    display_metadata: Mapped[dict[str, Any] | None]
    _compressed_summary: Mapped[int]
    compacted: Mapped[int]
    display_identity: Mapped[bytes | None]
    display_order: Mapped[int | None]
    message_uid: Mapped[str | None]
    absorbed_message_uids: Mapped[str | None]
    tool_call_uids: Mapped[str | None]
    tool_call_uid: Mapped[str | None]

    session: Mapped[AgentSession] = relationship(back_populates="messages")


class HandoffEvent(Base):
    """The audit trail: one row per handoff transition, written in the transition's
    transaction (no foreign key to sessions: see the table)."""

    __table__ = _TABLES["handoff_events"]

    id: Mapped[int]
    session_id: Mapped[str]
    from_state: Mapped[str | None]
    to_state: Mapped[str]
    at: Mapped[datetime]
    #: The gateway's owner name, "cli" for the command line, or the store's actor.
    actor: Mapped[str | None]
    attempt: Mapped[int | None]
    #: The error of a failure, or the reason of a request ("requested for telegram").
    detail: Mapped[str | None]


class SessionTurnLease(Base):
    """The durable turn lease of one conversation: at most one holder (a local turn, or a
    gateway delivering a handoff) works on it at a time, across processes."""

    __table__ = _TABLES["session_turn_leases"]

    conversation_id: Mapped[str]
    holder: Mapped[str]
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class SchemaVersion(Base):
    """Upstream's schema version: the data migrations its store has run on this file."""

    __table__ = _TABLES["schema_version"]
    # Upstream gives the table no key; its one column serves as the ORM's identity.
    __mapper_args__ = {"primary_key": [_TABLES["schema_version"].c.version]}  # noqa: RUF012

    version: Mapped[int]


class SystemPrompt(Base):
    """A system prompt, stored once and named by the SHA-256 of its text."""

    __table__ = _TABLES["system_prompts"]

    hash: Mapped[str]
    prompt: Mapped[str]


class StateMeta(Base):
    """One of upstream's key/value bookkeeping entries."""

    __table__ = _TABLES["state_meta"]

    key: Mapped[str]
    value: Mapped[str | None]


class SessionModelUsage(Base):
    """Token and cost totals of one session per model, billing route and task."""

    __table__ = _TABLES["session_model_usage"]

    session_id: Mapped[str]
    model: Mapped[str]
    billing_provider: Mapped[str]
    billing_base_url: Mapped[str]
    billing_mode: Mapped[str]
    task: Mapped[str]
    api_call_count: Mapped[int]
    input_tokens: Mapped[int]
    output_tokens: Mapped[int]
    cache_read_tokens: Mapped[int]
    cache_write_tokens: Mapped[int]
    reasoning_tokens: Mapped[int]
    estimated_cost_usd: Mapped[float]
    actual_cost_usd: Mapped[float]
    cost_status: Mapped[str | None]
    cost_source: Mapped[str | None]
    first_seen: Mapped[datetime | None]
    last_seen: Mapped[datetime | None]


class GatewayRoute(Base):
    """Upstream's gateway routing entry of one conversation key (application table)."""

    __table__ = _TABLES["gateway_routing"]

    scope: Mapped[str]
    session_key: Mapped[str]
    entry_json: Mapped[str]
    updated_at: Mapped[datetime]


class GatewayHygieneState(Base):
    """Upstream's gateway failure streak of one conversation key (application table)."""

    __table__ = _TABLES["gateway_hygiene_state"]

    session_key: Mapped[str]
    failure_streak: Mapped[int]


class ConversationGeneration(Base):
    """Upstream's generation counter of one conversation key (application table)."""

    __table__ = _TABLES["conversation_generations"]

    source: Mapped[str]
    session_key: Mapped[str]
    generation: Mapped[int]


class GatewayHeartbeat(Base):
    """Upstream's liveness record of one gateway process (application table)."""

    __table__ = _TABLES["gateway_heartbeats"]

    backend_id: Mapped[str]
    pid: Mapped[int]
    started_at: Mapped[datetime]
    last_heartbeat: Mapped[datetime]
    profile: Mapped[str]
    host: Mapped[str]


class CompressionLock(Base):
    """Upstream's lock on a session being compressed (application table)."""

    __table__ = _TABLES["compression_locks"]

    session_id: Mapped[str]
    holder: Mapped[str]
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class AsyncDelegation(Base):
    """Upstream's record of a delegated background task (application table)."""

    __table__ = _TABLES["async_delegations"]

    delegation_id: Mapped[str]
    origin_session: Mapped[str]
    origin_ui_session_id: Mapped[str]
    parent_session_id: Mapped[str | None]
    state: Mapped[str]
    dispatched_at: Mapped[datetime]
    completed_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]
    event_json: Mapped[str | None]
    result_json: Mapped[str | None]
    delivery_state: Mapped[str]
    delivery_attempts: Mapped[int]
    delivered_at: Mapped[datetime | None]
    owner_pid: Mapped[int | None]
    owner_started_at: Mapped[int | None]
    task_json: Mapped[str | None]
    delivery_claim: Mapped[str | None]
    delivery_claimed_at: Mapped[datetime | None]
    origin_session_id: Mapped[str]


class TelegramDmTopicMode(Base):
    """Upstream's telegram topic mode of one chat (application table)."""

    __table__ = _TABLES["telegram_dm_topic_mode"]

    profile_name: Mapped[str]
    chat_id: Mapped[str]
    user_id: Mapped[str]
    enabled: Mapped[int]
    activated_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    has_topics_enabled: Mapped[int | None]
    allows_users_to_create_topics: Mapped[int | None]
    capability_checked_at: Mapped[datetime | None]
    intro_message_id: Mapped[str | None]
    pinned_message_id: Mapped[str | None]


class TelegramDmTopicBinding(Base):
    """Upstream's binding of a telegram topic to a session (application table)."""

    __table__ = _TABLES["telegram_dm_topic_bindings"]

    profile_name: Mapped[str]
    chat_id: Mapped[str]
    thread_id: Mapped[str]
    user_id: Mapped[str]
    session_key: Mapped[str]
    session_id: Mapped[str]
    managed_mode: Mapped[str]
    linked_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class DeliveryObligation(Base):
    """Upstream's gateway delivery ledger entry (application table)."""

    __table__ = _TABLES["delivery_obligations"]

    obligation_id: Mapped[str]
    session_key: Mapped[str]
    platform: Mapped[str]
    chat_id: Mapped[str]
    thread_id: Mapped[str | None]
    content: Mapped[str]
    state: Mapped[str]
    attempts: Mapped[int]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    owner_pid: Mapped[int | None]
    owner_started_at: Mapped[int | None]
    last_error: Mapped[str | None]
    adapter_profile: Mapped[str | None]
    delivery_fence: Mapped[int]
    owner_installation_id: Mapped[str | None]
    owner_host: Mapped[str | None]
    owner_generation: Mapped[str | None]
    lease_expires_at: Mapped[datetime | None]
