"""The ORM classes, mapped onto the tables of :mod:`hermes_state.models.tables`.

Loaded only when a class is first asked for (``from hermes_state.models import Session``):
the stores, the watcher and the command line work on the tables alone, and loading
``sqlalchemy.orm`` would cost every process that opens a store a quarter of its start-up.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncAttrs
from sqlalchemy.orm import DeclarativeBase, Mapped, relationship

from . import tables

__all__ = ["Base", "HandoffEvent", "Message", "Session", "SessionTurnLease"]


class Base(AsyncAttrs, DeclarativeBase):
    """Declarative base on the tables' metadata; ``AsyncAttrs`` lets async code await a lazy
    attribute (``await session.awaitable_attrs.messages``)."""

    metadata = tables.metadata


class Session(Base):
    """One agent session; the ``handoff_*`` columns carry its handoff state machine.

    Times are epoch seconds as floats, the format existing ``state.db`` files use.
    """

    __table__ = tables.sessions

    id: Mapped[str]
    source: Mapped[str]
    user_id: Mapped[str | None]
    title: Mapped[str | None]
    model: Mapped[str | None]
    parent_session_id: Mapped[str | None]
    started_at: Mapped[float]
    ended_at: Mapped[float | None]
    end_reason: Mapped[str | None]

    handoff_state: Mapped[str | None]
    handoff_platform: Mapped[str | None]
    handoff_error: Mapped[str | None]
    handoff_requested_at: Mapped[float | None]
    handoff_claimed_at: Mapped[float | None]
    handoff_finished_at: Mapped[float | None]
    handoff_owner: Mapped[str | None]
    handoff_lease_expires_at: Mapped[float | None]
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
    last_activity_at: Mapped[float | None]

    #: The transcript, oldest first (rewound turns included: filter on ``Message.active``).
    messages: Mapped[list[Message]] = relationship(
        back_populates="session", order_by="Message.id", passive_deletes=True
    )


class Message(Base):
    """One transcript entry of a session, in insertion order."""

    __table__ = tables.messages

    id: Mapped[int]
    session_id: Mapped[str]
    role: Mapped[str]
    content: Mapped[str | None]
    timestamp: Mapped[float]
    tool_call_id: Mapped[str | None]
    tool_calls: Mapped[str | None]
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
    active: Mapped[int | None]
    api_content: Mapped[str | None]
    display_kind: Mapped[str | None]
    display_metadata: Mapped[str | None]

    session: Mapped[Session] = relationship(back_populates="messages")


class HandoffEvent(Base):
    """The audit trail: one row per handoff transition, written in the transition's
    transaction (no foreign key to sessions: see the table)."""

    __table__ = tables.handoff_events

    id: Mapped[int]
    session_id: Mapped[str]
    from_state: Mapped[str | None]
    to_state: Mapped[str]
    at: Mapped[float]
    #: The gateway's owner name, "cli" for the command line, or the store's actor.
    actor: Mapped[str | None]
    attempt: Mapped[int | None]
    #: The error of a failure, or the reason of a request ("requested for telegram").
    detail: Mapped[str | None]


class SessionTurnLease(Base):
    """The durable turn lease of one conversation: at most one holder (a local turn, or a
    gateway delivering a handoff) works on it at a time, across processes."""

    __table__ = tables.session_turn_leases

    conversation_id: Mapped[str]
    holder: Mapped[str]
    acquired_at: Mapped[float]
    expires_at: Mapped[float]
