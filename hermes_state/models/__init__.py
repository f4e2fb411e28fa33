"""SQLAlchemy models of a state database: sessions with their handoff state machine, the
transcript, and every other table of upstream's schema 30.

The tables (:mod:`.tables`, and upstream's own beside them in :mod:`.upstream`) are what the
stores, the watcher, the migrations and the command line use; the ORM classes (:mod:`.orm`:
``Base``, ``AgentSession`` (also ``Session``), ``Message``, ``HandoffEvent``,
``SessionTurnLease``, ``SystemPrompt`` and one class per upstream table) are mapped onto
copies of them with the same DDL whose times load as aware UTC datetimes and whose JSON
(``Message.tool_calls``, ``display_metadata``, multimodal ``content``) loads decoded, as the
store returns it; they load on first use, so that opening a store does not import
``sqlalchemy.orm``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .tables import (
    ERROR_LIMIT,
    ID_LENGTH,
    NAMING_CONVENTION,
    REQUESTABLE_STATES,
    HandoffState,
    handoff_events,
    messages,
    metadata,
    session_turn_leases,
    sessions,
    table_options,
)
from .upstream import (
    APPLICATION_TABLES,
    UPSTREAM_SCHEMA_VERSION,
    UPSTREAM_SIDE_TABLES,
    async_delegations,
    compression_locks,
    conversation_generations,
    delivery_obligations,
    gateway_heartbeats,
    gateway_hygiene_state,
    gateway_routing,
    schema_version,
    session_model_usage,
    state_meta,
    system_prompts,
    telegram_dm_topic_bindings,
    telegram_dm_topic_mode,
)

if TYPE_CHECKING:
    from .orm import (
        AgentSession,
        AsyncDelegation,
        Base,
        CompressionLock,
        ConversationGeneration,
        DeliveryObligation,
        GatewayHeartbeat,
        GatewayHygieneState,
        GatewayRoute,
        HandoffEvent,
        Message,
        SchemaVersion,
        Session,
        SessionModelUsage,
        SessionTurnLease,
        StateMeta,
        SystemPrompt,
        TelegramDmTopicBinding,
        TelegramDmTopicMode,
    )

__all__ = [
    "APPLICATION_TABLES",
    "ERROR_LIMIT",
    "ID_LENGTH",
    "NAMING_CONVENTION",
    "REQUESTABLE_STATES",
    "UPSTREAM_SCHEMA_VERSION",
    "UPSTREAM_SIDE_TABLES",
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
    "HandoffState",
    "Message",
    "SchemaVersion",
    "Session",
    "SessionModelUsage",
    "SessionTurnLease",
    "StateMeta",
    "SystemPrompt",
    "TelegramDmTopicBinding",
    "TelegramDmTopicMode",
    "async_delegations",
    "compression_locks",
    "conversation_generations",
    "delivery_obligations",
    "gateway_heartbeats",
    "gateway_hygiene_state",
    "gateway_routing",
    "handoff_events",
    "messages",
    "metadata",
    "schema_version",
    "session_model_usage",
    "session_turn_leases",
    "sessions",
    "state_meta",
    "system_prompts",
    "table_options",
    "telegram_dm_topic_bindings",
    "telegram_dm_topic_mode",
]

_ORM_CLASSES = frozenset(
    {
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
    }
)


def __getattr__(name: str) -> Any:
    if name in _ORM_CLASSES:
        from . import orm

        return getattr(orm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
