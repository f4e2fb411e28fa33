"""SQLAlchemy models of the sessions table, its handoff state machine, and the transcript.

The tables (:mod:`.tables`) are what the stores, the watcher, the migrations and the command
line use; the ORM classes (:mod:`.orm`: ``Base``, ``Session``, ``Message``, ``HandoffEvent``,
``SessionTurnLease``) are mapped onto them and load on first use, so that opening a store does
not import ``sqlalchemy.orm``.
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

if TYPE_CHECKING:
    from .orm import Base, HandoffEvent, Message, Session, SessionTurnLease

__all__ = [
    "ERROR_LIMIT",
    "ID_LENGTH",
    "NAMING_CONVENTION",
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

_ORM_CLASSES = frozenset({"Base", "HandoffEvent", "Message", "Session", "SessionTurnLease"})


def __getattr__(name: str) -> Any:
    if name in _ORM_CLASSES:
        from . import orm

        return getattr(orm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
