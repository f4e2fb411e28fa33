"""hermes-state: SQLAlchemy persistence for agent sessions and their handoff state machine.

Importing the package is cheap: SQLAlchemy, the stores and Alembic load on first use of the
names that need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CompressionSessionClosedError,
    DatabaseBusyError,
    DatabaseCorruptError,
    DatabaseError,
    DatabaseUnavailableError,
    DiskFullError,
    ForeignDatabaseError,
    HermesStateError,
    InvalidInputError,
    InvalidInputTypeError,
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    SessionExportTooLargeError,
    SessionInUseError,
    SessionTurnLeaseLostError,
    TranscriptChangedError,
    UnknownSessionError,
)

if TYPE_CHECKING:
    from .aio import NativeAsyncSessionDB
    from .engine import default_db_path, resolve_url
    from .models import HandoffState
    from .plans.portability import MAX_SAFE_EXPORT_MESSAGES, resolved_max_export_messages
    from .store import SessionDB
    from .threaded import AsyncSessionDB

__all__ = [
    "MAX_SAFE_EXPORT_MESSAGES",
    "AsyncSessionDB",
    "CompressionSessionClosedError",
    "DatabaseBusyError",
    "DatabaseCorruptError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "DiskFullError",
    "ForeignDatabaseError",
    "HandoffState",
    "HermesStateError",
    "InvalidInputError",
    "InvalidInputTypeError",
    "NativeAsyncSessionDB",
    "NotADatabaseError",
    "ReadOnlyDatabaseError",
    "SchemaOutOfDateError",
    "SchemaTooNewError",
    "SessionDB",
    "SessionExportTooLargeError",
    "SessionInUseError",
    "SessionTurnLeaseLostError",
    "TranscriptChangedError",
    "UnknownSessionError",
    "default_db_path",
    "resolve_url",
    "resolved_max_export_messages",
]

_LAZY = {
    "AsyncSessionDB": ".threaded",
    "SessionDB": ".store",
    "NativeAsyncSessionDB": ".aio",
    "HandoffState": ".models",
    "default_db_path": ".engine",
    "resolve_url": ".engine",
    "MAX_SAFE_EXPORT_MESSAGES": ".plans.portability",
    "resolved_max_export_messages": ".plans.portability",
}


def __getattr__(name: str) -> Any:
    if name == "asyncio":
        # AsyncSessionDB offloads through ``asyncio.to_thread``, looked up at call time, and
        # callers (tests) reach it as ``hermes_state.asyncio``; imported on first use only.
        return importlib.import_module("asyncio")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_state' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
