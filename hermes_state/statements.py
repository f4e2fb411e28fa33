"""Every SQL statement hermes-state runs, each built once here and shared by sync and async code.

Builders return SQLAlchemy Core statements whose variable parts are named bind parameters
(``:session_id``, ``:now``, ...). Builders are cached, so a statement is one object per
variant and each store compiles it once. State names are rendered as SQL literals, not bound
parameters: the partial indexes on ``handoff_state`` are only used by a query whose predicate
matches the index's ``WHERE`` text, and a parameter never does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Dialect,
    Insert,
    Select,
    Update,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite

from .models import REQUESTABLE_STATES, HandoffState, messages, sessions

__all__ = [
    "SESSION_FIELDS",
    "Capabilities",
    "append_message",
    "claim_handoff",
    "complete_handoff",
    "count_handoffs_by_state",
    "fail_handoff",
    "get_handoff_state",
    "get_messages",
    "has_pending_handoffs",
    "insert_session",
    "list_handoffs",
    "lock_running_handoffs",
    "oldest_pending_requested_at",
    "reclaim_running_handoffs",
    "request_handoff",
    "state_is",
]

#: Optional columns a caller may set through ``create_session(..., **fields)``.
SESSION_FIELDS = (
    "user_id",
    "title",
    "model",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
)

_c = sessions.c


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the connected dialect can do, for the builders that must choose per dialect."""

    name: str
    update_returning: bool
    insert_returning: bool

    @classmethod
    def of(cls, dialect: Dialect) -> Capabilities:
        return cls(
            name=dialect.name,
            update_returning=bool(dialect.update_returning),
            insert_returning=bool(dialect.insert_returning),
        )


def _literal(state: HandoffState) -> ColumnElement[str]:
    # The value comes from the enum, never from a caller.
    return literal_column(f"'{state.value}'")


def state_is(state: HandoffState) -> ColumnElement[bool]:
    """``handoff_state = '<state>'`` with the state as a literal (see the module docstring)."""
    return _c.handoff_state == _literal(state)


def _state_in(states: Iterable[HandoffState | None]) -> ColumnElement[bool]:
    terms = [_c.handoff_state.is_(None) if s is None else state_is(s) for s in states]
    return or_(*terms)


# -- sessions and transcript -------------------------------------------------------------------


@functools.cache
def insert_session(dialect_name: str) -> Insert:
    """Insert a session, leaving an existing row with the same id untouched."""
    values: dict[str, Any] = {name: bindparam(name) for name in ("id", "source", *SESSION_FIELDS)}
    if dialect_name == "sqlite":
        return sqlite.insert(sessions).values(values).on_conflict_do_nothing(index_elements=["id"])
    if dialect_name == "postgresql":
        stmt = postgresql.insert(sessions).values(values)
        return stmt.on_conflict_do_nothing(index_elements=["id"])
    if dialect_name in ("mysql", "mariadb"):
        stmt_my = mysql.insert(sessions).values(values)
        return stmt_my.on_duplicate_key_update(id=stmt_my.inserted.id)
    raise NotImplementedError(f"hermes-state does not support the {dialect_name!r} dialect")


@functools.cache
def append_message(returning: bool) -> Insert:
    """Append a transcript entry, inserting nothing when the session does not exist."""
    # Typed parameters: in a SELECT list nothing else tells the driver (asyncpg asks) their types.
    row = select(
        bindparam("session_id", type_=messages.c.session_id.type),
        bindparam("role", type_=messages.c.role.type),
        bindparam("content", type_=messages.c.content.type),
        bindparam("now", type_=messages.c.timestamp.type),
    ).where(exists().where(_c.id == bindparam("session_id")))
    stmt = messages.insert().from_select(["session_id", "role", "content", "timestamp"], row)
    return stmt.returning(messages.c.id) if returning else stmt


@functools.cache
def get_messages() -> Select[tuple[int, str, str, str | None, float]]:
    m = messages.c
    return (
        select(m.id, m.session_id, m.role, m.content, m.timestamp)
        .where(m.session_id == bindparam("session_id"))
        .order_by(m.id)
    )


# -- the handoff state machine -----------------------------------------------------------------


@functools.cache
def request_handoff() -> Update:
    """NULL/completed/failed -> pending, clearing the previous attempt's error and times."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), _state_in(REQUESTABLE_STATES))
        .values(
            handoff_state=_literal(HandoffState.PENDING),
            handoff_platform=bindparam("platform"),
            handoff_error=None,
            handoff_requested_at=bindparam("now"),
            handoff_claimed_at=None,
            handoff_finished_at=None,
        )
    )


@functools.cache
def claim_handoff() -> Update:
    """pending -> running: a compare-and-swap, so exactly one concurrent claimer wins."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), state_is(HandoffState.PENDING))
        .values(handoff_state=_literal(HandoffState.RUNNING), handoff_claimed_at=bindparam("now"))
    )


@functools.cache
def complete_handoff() -> Update:
    """running -> completed, clearing the error."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), state_is(HandoffState.RUNNING))
        .values(
            handoff_state=_literal(HandoffState.COMPLETED),
            handoff_error=None,
            handoff_finished_at=bindparam("now"),
        )
    )


@functools.cache
def fail_handoff(from_states: frozenset[HandoffState]) -> Update:
    """``from_states`` -> failed, recording the (already truncated) error."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), _state_in(sorted(from_states)))
        .values(
            handoff_state=_literal(HandoffState.FAILED),
            handoff_error=bindparam("error"),
            handoff_finished_at=bindparam("now"),
        )
    )


@functools.cache
def lock_running_handoffs() -> Select[tuple[str]]:
    """The ids of running rows, locked, for dialects that cannot UPDATE ... RETURNING."""
    return select(_c.id).where(state_is(HandoffState.RUNNING)).with_for_update()


@functools.cache
def reclaim_running_handoffs(returning: bool, by_id: bool) -> Update:
    """running -> failed for every running row (or for the ``:ids`` given), with ``:error``."""
    condition = state_is(HandoffState.RUNNING)
    if by_id:
        condition = and_(condition, _c.id.in_(bindparam("ids", expanding=True)))
    stmt = (
        sessions.update()
        .where(condition)
        .values(
            handoff_state=_literal(HandoffState.FAILED),
            handoff_error=bindparam("error"),
            handoff_finished_at=bindparam("now"),
        )
    )
    return stmt.returning(_c.id) if returning else stmt


# -- reads -------------------------------------------------------------------------------------


@functools.cache
def list_handoffs(state: HandoffState | None, limited: bool = False) -> Select[tuple[object, ...]]:
    """Whole rows in ``state`` (any handoff state for None), oldest session first, at most
    ``:limit`` when ``limited``. O(rows) for pending and running, which are indexed; a scan for
    the others, which only administrators list."""
    condition = _c.handoff_state.is_not(None) if state is None else state_is(state)
    stmt = select(sessions).where(condition).order_by(_c.started_at, _c.id)
    return stmt.limit(bindparam("limit")) if limited else stmt


@functools.cache
def has_pending_handoffs() -> Select[tuple[int]]:
    return select(literal_column("1")).where(state_is(HandoffState.PENDING)).limit(1)


@functools.cache
def get_handoff_state() -> Select[tuple[str | None, str | None, str | None]]:
    return select(
        _c.handoff_state.label("state"),
        _c.handoff_platform.label("platform"),
        _c.handoff_error.label("error"),
    ).where(_c.id == bindparam("session_id"))


@functools.cache
def count_handoffs_by_state() -> Select[tuple[str | None, int]]:
    return (
        select(_c.handoff_state.label("state"), func.count().label("count"))
        .where(_c.handoff_state.is_not(None))
        .group_by(_c.handoff_state)
    )


@functools.cache
def oldest_pending_requested_at() -> Select[tuple[float | None]]:
    return select(func.min(_c.handoff_requested_at).label("requested_at")).where(
        state_is(HandoffState.PENDING)
    )
