"""Every SQL statement hermes-state runs, each built once here and shared by sync and async code.

Builders return SQLAlchemy Core statements whose variable parts are named bind parameters
(``:session_id``, ``:now``, ...). Builders are cached, so a statement is one object per
variant and each store compiles it once. State names are rendered as SQL literals, not bound
parameters: the partial indexes on ``handoff_state`` are only used by a query whose predicate
implies the index's ``WHERE``. SQLite re-plans with bound values, but PostgreSQL's generic
plan for a prepared statement (psycopg prepares after five executions) cannot know a
parameter's value; a literal keeps every backend on the index.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Dialect,
    Double,
    Insert,
    Select,
    String,
    Text,
    Update,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
)

from .models import REQUESTABLE_STATES, HandoffState, handoff_events, messages, sessions

__all__ = [
    "EVENT_COLUMNS",
    "HANDOFF_CHANNEL",
    "SESSION_FIELDS",
    "Capabilities",
    "Fence",
    "ReclaimScope",
    "Transition",
    "append_message",
    "claim_handoff",
    "claimed_attempt",
    "complete_handoff",
    "count_failures_since",
    "count_handoffs_by_state",
    "fail_handoff",
    "get_handoff_state",
    "get_messages",
    "handoff_history",
    "has_pending_handoffs",
    "insert_session",
    "list_handoffs",
    "notify_handoff_requested",
    "oldest_pending_requested_at",
    "prune_events",
    "recent_failures",
    "reclaim_handoffs",
    "reclaimable",
    "renew_lease",
    "request_handoff",
    "running_by_owner",
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
    # Each dialect's insert construct is imported only when that dialect is used.
    values: dict[str, Any] = {name: bindparam(name) for name in ("id", "source", *SESSION_FIELDS)}
    if dialect_name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(sessions).values(values).on_conflict_do_nothing(index_elements=["id"])
    if dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        stmt = postgresql.insert(sessions).values(values)
        return stmt.on_conflict_do_nothing(index_elements=["id"])
    if dialect_name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

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


@dataclass(frozen=True, slots=True)
class Transition:
    """One state-machine move as two statements sharing one condition.

    ``record`` appends the audit row, selecting the session rows the move applies to (their
    current state is the event's ``from_state``) and locking them (FOR UPDATE on servers;
    SQLite's BEGIN IMMEDIATE already serialises writers). ``apply`` then updates exactly those
    rows. Run in that order in one transaction, the move and its event commit or vanish
    together, and a lost race inserts no event and updates nothing.
    """

    record: Insert
    apply: Update


def _transition(
    to_state: HandoffState,
    condition: ColumnElement[bool],
    values: dict[str, Any],
    *,
    detail: ColumnElement[Any] | None = None,
    attempt: ColumnElement[Any] | None = None,
    skip_locked: bool = False,
) -> Transition:
    source = (
        select(
            _c.id,
            _c.handoff_state,
            _literal(to_state),
            bindparam("now", type_=Double()),
            bindparam("actor", type_=String()),
            attempt if attempt is not None else _c.handoff_attempt,
            detail if detail is not None else null(),
        )
        .where(condition)
        .with_for_update(skip_locked=skip_locked)
    )
    record = handoff_events.insert().from_select(EVENT_COLUMNS, source)
    return Transition(record, sessions.update().where(condition).values(**values))


def _one_session(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    return and_(_c.id == bindparam("session_id"), condition)


@functools.cache
def request_handoff(retry: bool = False) -> Transition:
    """NULL/completed/failed -> pending (a retry: failed -> pending), clearing the previous
    attempt's error, times, owner and lease. A retry keeps the platform unless given one."""
    condition = state_is(HandoffState.FAILED) if retry else _state_in(REQUESTABLE_STATES)
    platform = (
        func.coalesce(bindparam("platform", type_=String()), _c.handoff_platform)
        if retry
        else bindparam("platform", type_=String())
    )
    reason = "retry for " if retry else "requested for "
    return _transition(
        HandoffState.PENDING,
        _one_session(condition),
        {
            "handoff_state": _literal(HandoffState.PENDING),
            "handoff_platform": platform,
            "handoff_error": None,
            "handoff_requested_at": bindparam("now"),
            "handoff_claimed_at": None,
            "handoff_finished_at": None,
            "handoff_owner": None,
            "handoff_lease_expires_at": None,
        },
        detail=literal(reason) + platform,
    )


@functools.cache
def notify_handoff_requested() -> Select[tuple[object]]:
    """PostgreSQL: wake LISTENing watchers when the requesting transaction commits."""
    return select(func.pg_notify(HANDOFF_CHANNEL, bindparam("session_id", type_=String())))


@functools.cache
def claim_handoff(returning: bool) -> Transition:
    """pending -> running: a compare-and-swap, so exactly one concurrent claimer wins.

    Stamps the claimer's ``:owner`` and ``:lease_expires_at`` (both may be NULL) and counts the
    attempt, returned by ``apply`` where the dialect can (else read with :func:`claimed_attempt`).
    A row another transaction has locked is skipped (``SKIP LOCKED`` on servers): its claimer
    loses at once instead of queueing behind the winner, which is what lets several gateways
    claim in parallel.
    """
    transition = _transition(
        HandoffState.RUNNING,
        _one_session(state_is(HandoffState.PENDING)),
        {
            "handoff_state": _literal(HandoffState.RUNNING),
            "handoff_claimed_at": bindparam("now"),
            "handoff_owner": bindparam("owner", type_=String()),
            "handoff_lease_expires_at": bindparam("lease_expires_at", type_=Double()),
            "handoff_attempt": _c.handoff_attempt + 1,
        },
        attempt=_c.handoff_attempt + 1,
        skip_locked=True,
    )
    if not returning:
        return transition
    return Transition(transition.record, transition.apply.returning(_c.handoff_attempt))


@functools.cache
def claimed_attempt() -> Select[tuple[int]]:
    """The attempt just claimed (read in the claiming transaction, which holds the row lock)."""
    return select(_c.handoff_attempt).where(_c.id == bindparam("session_id"))


@functools.cache
def complete_handoff(fence: Fence) -> Transition:
    """running -> completed, clearing the error; ``fence`` says whose running row."""
    return _transition(
        HandoffState.COMPLETED,
        _one_session(_running_under(fence)),
        _finished(HandoffState.COMPLETED, None),
    )


@functools.cache
def fail_handoff(from_states: frozenset[HandoffState], fence: Fence) -> Transition:
    """``from_states`` -> failed with ``:error``; a running row only under ``fence``."""
    allowed = [
        _running_under(fence) if state is HandoffState.RUNNING else state_is(state)
        for state in sorted(from_states)
    ]
    error = bindparam("error", type_=Text())
    return _transition(
        HandoffState.FAILED,
        _one_session(or_(*allowed)),
        _finished(HandoffState.FAILED, error),
        detail=error,
    )


@functools.cache
def renew_lease() -> Update:
    """Extend the lease of a row this owner still holds (not a transition: no event)."""
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
    # With a NULL :owner the owner test is NULL, so only unleased and expired rows qualify.
    return and_(
        running,
        or_(lease.is_(None), lease < bindparam("now"), _c.handoff_owner == bindparam("owner")),
    )


@functools.cache
def reclaimable(scope: ReclaimScope, lock: bool) -> Select[tuple[Any, ...]]:
    """The running rows a reclaim in ``scope`` would fail (locked when ``lock``), with what
    tells why: owner, claim time and lease."""
    stmt = (
        select(
            _c.id,
            _c.handoff_owner.label("owner"),
            _c.handoff_claimed_at.label("claimed_at"),
            _c.handoff_lease_expires_at.label("lease_expires_at"),
            _c.handoff_attempt.label("attempt"),
        )
        .where(_reclaimable(scope))
        .order_by(_c.id)
    )
    return stmt.with_for_update() if lock else stmt


@functools.cache
def reclaim_handoffs(scope: ReclaimScope) -> Transition:
    """running -> failed with ``:error`` for the rows in ``scope``."""
    error = bindparam("error", type_=Text())
    return _transition(
        HandoffState.FAILED,
        _reclaimable(scope),
        _finished(HandoffState.FAILED, error),
        detail=error,
    )


# -- the audit trail ---------------------------------------------------------------------------

EVENT_COLUMNS = ["session_id", "from_state", "to_state", "at", "actor", "attempt", "detail"]
_e = handoff_events.c


@functools.cache
def handoff_history() -> Select[tuple[Any, ...]]:
    """A session's events, oldest first."""
    return (
        select(
            _e.id, _e.session_id, _e.from_state, _e.to_state, _e.at, _e.actor, _e.attempt, _e.detail
        )
        .where(_e.session_id == bindparam("session_id"))
        .order_by(_e.id)
    )


@functools.cache
def prune_events() -> Delete:
    """Delete the events older than ``:before``."""
    return handoff_events.delete().where(_e.at < bindparam("before"))


@functools.cache
def count_events_before() -> Select[Any]:
    """How many events :func:`prune_events` would delete."""
    return select(func.count().label("count")).where(_e.at < bindparam("before"))


@functools.cache
def recent_failures() -> Select[tuple[str | None, int]]:
    """The most common errors among failures since ``:since``, most frequent first."""
    return (
        select(_e.detail.label("error"), func.count().label("count"))
        .where(_e.to_state == _literal(HandoffState.FAILED), _e.at >= bindparam("since"))
        .group_by(_e.detail)
        .order_by(func.count().desc(), _e.detail)
        .limit(bindparam("limit"))
    )


@functools.cache
def count_failures_since() -> Select[Any]:
    return select(func.count().label("count")).where(
        _e.to_state == _literal(HandoffState.FAILED), _e.at >= bindparam("since")
    )


@functools.cache
def running_by_owner() -> Select[tuple[str | None, int, int, int]]:
    """Running rows per owner: how many, with a live lease, with an expired one."""
    lease = _c.handoff_lease_expires_at
    return (
        select(
            _c.handoff_owner.label("owner"),
            func.count().label("running"),
            func.count(case((lease >= bindparam("now"), 1))).label("live_leases"),
            func.count(case((lease < bindparam("now"), 1))).label("expired_leases"),
        )
        .where(state_is(HandoffState.RUNNING))
        .group_by(_c.handoff_owner)
        .order_by(_c.handoff_owner)
    )


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
def list_sessions(
    state: HandoffState | None, *, by_source: bool, since: bool, limited: bool
) -> Select[tuple[object, ...]]:
    """Whole session rows, newest ``started_at`` first; filtered on ``:source`` when
    ``by_source``, on ``state``, and on ``started_at >= :since`` when ``since``; at most
    ``:limit`` when ``limited``."""
    stmt = select(sessions)
    if state is not None:
        stmt = stmt.where(state_is(state))
    if by_source:
        stmt = stmt.where(_c.source == bindparam("source"))
    if since:
        stmt = stmt.where(_c.started_at >= bindparam("since"))
    stmt = stmt.order_by(_c.started_at.desc(), _c.id.desc())
    return stmt.limit(bindparam("limit")) if limited else stmt


@functools.cache
def get_session() -> Select[tuple[object, ...]]:
    """One whole session row."""
    return select(sessions).where(_c.id == bindparam("session_id"))


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
    # Older writers leave handoff_requested_at NULL: their session's start stands in.
    requested = func.coalesce(_c.handoff_requested_at, _c.started_at)
    return select(func.min(requested).label("requested_at")).where(state_is(HandoffState.PENDING))
