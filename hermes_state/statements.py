"""Every SQL statement hermes-state runs, each built once here and shared by sync and async code.

Builders return SQLAlchemy Core statements whose variable parts are named bind parameters
(``:session_id``, ``:now``, ...). Builders are cached, so a statement is one object per
variant and each store compiles it once. State names are rendered as SQL literals, not bound
parameters: the partial indexes on ``handoff_state`` are only used by a query whose predicate
matches the index's ``WHERE`` text, and a parameter never does.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Dialect,
    Double,
    Insert,
    Select,
    String,
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
    "HANDOFF_CHANNEL",
    "SESSION_FIELDS",
    "Capabilities",
    "Fence",
    "ReclaimScope",
    "append_message",
    "claim_handoff",
    "claimed_attempt",
    "complete_handoff",
    "count_handoffs_by_state",
    "fail_handoff",
    "get_handoff_state",
    "get_messages",
    "has_pending_handoffs",
    "insert_session",
    "list_handoffs",
    "lock_reclaimable",
    "notify_handoff_requested",
    "oldest_pending_requested_at",
    "reclaim_handoffs",
    "renew_lease",
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
#: The PostgreSQL NOTIFY channel on which ``request_handoff`` wakes watchers.
HANDOFF_CHANNEL = "hermes_state_handoffs"


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


class Fence(enum.Enum):
    """How a store proves a running row is still its own before finishing it.

    NONE: any running row (a single gateway, or an operator). OWNER: running under this owner.
    CLAIM: running under this owner *and* the attempt this store claimed, so a gateway whose
    claim was rescued (reclaimed, then claimed again elsewhere) cannot finish the new attempt.
    """

    NONE = "none"
    OWNER = "owner"
    CLAIM = "claim"


class ReclaimScope(enum.Enum):
    """Which running rows a reclaim fails.

    ALL: every running row (one gateway per database). STALE: rows without a lease, with an
    expired lease, or held by ``:owner`` itself (its previous life died). EXPIRED: rows whose
    lease ended before ``:now``, whoever holds them.
    """

    ALL = "all"
    STALE = "stale"
    EXPIRED = "expired"


def _running_under(fence: Fence) -> ColumnElement[bool]:
    condition = state_is(HandoffState.RUNNING)
    if fence is Fence.NONE:
        return condition
    condition = and_(condition, _c.handoff_owner == bindparam("owner"))
    if fence is Fence.CLAIM:
        condition = and_(condition, _c.handoff_attempt == bindparam("attempt"))
    return condition


def _finished(state: HandoffState, error: ColumnElement[Any] | None) -> dict[str, Any]:
    return {
        "handoff_state": _literal(state),
        "handoff_error": error,
        "handoff_finished_at": bindparam("now"),
        "handoff_lease_expires_at": None,
    }


@functools.cache
def request_handoff() -> Update:
    """NULL/completed/failed -> pending, clearing the previous attempt's error, times and owner."""
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
            handoff_owner=None,
            handoff_lease_expires_at=None,
        )
    )


@functools.cache
def notify_handoff_requested() -> Select[tuple[object]]:
    """PostgreSQL: wake LISTENing watchers when the requesting transaction commits."""
    return select(func.pg_notify(HANDOFF_CHANNEL, bindparam("session_id", type_=String())))


@functools.cache
def claim_handoff(returning: bool) -> Update:
    """pending -> running: a compare-and-swap, so exactly one concurrent claimer wins.

    Stamps the claimer's ``:owner`` and ``:lease_expires_at`` (both may be NULL) and counts the
    attempt, returned where the dialect can (else read with :func:`claimed_attempt`).
    """
    stmt = (
        sessions.update()
        .where(_c.id == bindparam("session_id"), state_is(HandoffState.PENDING))
        .values(
            handoff_state=_literal(HandoffState.RUNNING),
            handoff_claimed_at=bindparam("now"),
            handoff_owner=bindparam("owner", type_=String()),
            handoff_lease_expires_at=bindparam("lease_expires_at", type_=Double()),
            handoff_attempt=_c.handoff_attempt + 1,
        )
    )
    return stmt.returning(_c.handoff_attempt) if returning else stmt


@functools.cache
def claimed_attempt() -> Select[tuple[int]]:
    """The attempt just claimed (read in the claiming transaction, which holds the row lock)."""
    return select(_c.handoff_attempt).where(_c.id == bindparam("session_id"))


@functools.cache
def complete_handoff(fence: Fence) -> Update:
    """running -> completed, clearing the error; ``fence`` says whose running row."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), _running_under(fence))
        .values(**_finished(HandoffState.COMPLETED, None))
    )


@functools.cache
def fail_handoff(from_states: frozenset[HandoffState], fence: Fence) -> Update:
    """``from_states`` -> failed with ``:error``; a running row only under ``fence``."""
    allowed = [
        _running_under(fence) if state is HandoffState.RUNNING else state_is(state)
        for state in sorted(from_states)
    ]
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), or_(*allowed))
        .values(**_finished(HandoffState.FAILED, bindparam("error")))
    )


@functools.cache
def renew_lease() -> Update:
    """Extend the lease of a row this owner still holds."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), _running_under(Fence.OWNER))
        .values(handoff_lease_expires_at=bindparam("lease_expires_at"))
    )


def _reclaimable(scope: ReclaimScope) -> ColumnElement[bool]:
    running = state_is(HandoffState.RUNNING)
    lease = _c.handoff_lease_expires_at
    if scope is ReclaimScope.ALL:
        return running
    if scope is ReclaimScope.EXPIRED:
        return and_(running, lease < bindparam("now"))
    return and_(
        running,
        or_(lease.is_(None), lease < bindparam("now"), _c.handoff_owner == bindparam("owner")),
    )


@functools.cache
def lock_reclaimable(scope: ReclaimScope) -> Select[tuple[str]]:
    """The ids a reclaim would fail, locked, for dialects that cannot UPDATE ... RETURNING."""
    return select(_c.id).where(_reclaimable(scope)).with_for_update()


@functools.cache
def reclaim_handoffs(scope: ReclaimScope, returning: bool, by_id: bool) -> Update:
    """running -> failed with ``:error`` for the rows in ``scope`` (or the locked ``:ids``)."""
    condition = _reclaimable(scope)
    if by_id:
        condition = and_(condition, _c.id.in_(bindparam("ids", expanding=True)))
    stmt = (
        sessions.update()
        .where(condition)
        .values(**_finished(HandoffState.FAILED, bindparam("error")))
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
