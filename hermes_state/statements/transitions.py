"""The handoff state machine: fences, transitions, and request, claim, finish and reclaim."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Double,
    Insert,
    Select,
    String,
    Text,
    Update,
    and_,
    bindparam,
    func,
    literal,
    null,
    or_,
    select,
)
from sqlalchemy.sql.util import ClauseAdapter

from ..models import REQUESTABLE_STATES, HandoffState, handoff_events, sessions
from .audit import EVENT_COLUMNS
from .core import HANDOFF_CHANNEL, _c, _literal, _state_in, state_is


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
    """One state-machine move, as two statements sharing one condition or as one statement.

    ``record`` appends the audit row, selecting the session rows the move applies to (their
    current state is the event's ``from_state``) and locking them (FOR UPDATE on servers;
    SQLite's BEGIN IMMEDIATE already serialises writers). ``apply`` then updates exactly those
    rows. Run in that order in one transaction, the move and its event commit or vanish
    together, and a lost race inserts no event and updates nothing.

    ``single`` is the same move as one PostgreSQL statement, safe in autocommit: a CTE locks
    the rows (``locked``, keeping their state as ``from_state``), moves them (``moved``) and
    records their events from what moved, then returns each moved row's ``id`` and
    ``handoff_attempt`` (and, for requests, wakes LISTENing watchers with ``pg_notify``).
    None for a move built for SQLite only.
    """

    record: Insert
    apply: Update
    single: Select[Any] | None


def _transition(
    to_state: HandoffState,
    condition: ColumnElement[bool],
    values: dict[str, Any],
    *,
    detail: ColumnElement[Any] | None = None,
    attempt: ColumnElement[Any] | None = None,
    skip_locked: bool = False,
    notify: bool = False,
    by_key: bool = False,
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
    apply = sessions.update().where(condition).values(**values)
    if by_key:
        source = source.with_hint(sessions, _MYSQL_BY_KEY, "mysql")
        apply = apply.with_hint(_MYSQL_BY_KEY, dialect_name="mysql")
    record = handoff_events.insert().from_select(EVENT_COLUMNS, source)
    single = _single_statement(to_state, condition, values, detail, skip_locked, notify)
    return Transition(record, apply, single)


def _single_statement(
    to_state: HandoffState,
    condition: ColumnElement[bool],
    values: dict[str, Any],
    detail: ColumnElement[Any] | None,
    skip_locked: bool,
    notify: bool,
) -> Select[Any]:
    # Rows are locked in id order, as every multi-row lock here is: no two statements can
    # then wait for each other's rows.
    locked = (
        select(_c.id, _c.handoff_state.label("from_state"))
        .where(condition)
        .order_by(_c.id)
        .with_for_update(skip_locked=skip_locked)
        .cte("locked")
    )
    moved = (
        sessions.update()
        .where(_c.id == locked.c.id)
        .values(**values)
        .returning(_c.id, _c.handoff_attempt, _c.handoff_platform, locked.c.from_state)
        .cte("moved")
    )
    # The event reads the moved row: its attempt is the new one for a claim and unchanged
    # otherwise, and a detail naming the platform names the one the row now has.
    from_moved = ClauseAdapter(moved)
    event = select(
        moved.c.id,
        moved.c.from_state,
        _literal(to_state),
        bindparam("now", type_=Double()),
        bindparam("actor", type_=String()),
        moved.c.handoff_attempt,
        null() if detail is None else from_moved.traverse(detail),
    )
    recorded = handoff_events.insert().from_select(EVENT_COLUMNS, event).cte("recorded")
    answer: list[ColumnElement[Any]] = [moved.c.id, moved.c.handoff_attempt]
    if notify:
        answer.append(func.pg_notify(HANDOFF_CHANNEL, moved.c.id).label("notified"))
    return select(*answer).add_cte(recorded)


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
        notify=True,
    )


@functools.cache
def notify_handoff_requested() -> Select[tuple[object]]:
    """PostgreSQL: wake LISTENing watchers when the requesting transaction commits."""
    return select(func.pg_notify(HANDOFF_CHANNEL, bindparam("session_id", type_=String())))


def _claimed_values() -> dict[str, Any]:
    return {
        "handoff_state": _literal(HandoffState.RUNNING),
        "handoff_claimed_at": bindparam("now"),
        "handoff_owner": bindparam("owner", type_=String()),
        "handoff_lease_expires_at": bindparam("lease_expires_at", type_=Double()),
        "handoff_attempt": _c.handoff_attempt + 1,
    }


def _recorded_claims(moved: Any) -> Any:
    """PostgreSQL: the audit rows (pending -> running) of the claims ``moved`` returns, as the
    CTE that inserts them."""
    event = select(
        moved.c.id,
        _literal(HandoffState.PENDING),
        _literal(HandoffState.RUNNING),
        bindparam("now", type_=Double()),
        bindparam("actor", type_=String()),
        moved.c.handoff_attempt,
        null(),
    )
    return handoff_events.insert().from_select(EVENT_COLUMNS, event).cte("recorded")


@functools.cache
def claim_handoff(returning: bool, audit_returning: bool = False) -> Transition:
    """pending -> running: a compare-and-swap, so exactly one concurrent claimer wins.

    Stamps the claimer's ``:owner`` and ``:lease_expires_at`` (both may be NULL) and counts the
    attempt, returned by ``apply`` where the dialect can (``returning``), else by ``record``
    where its INSERT can return rows (``audit_returning``, MariaDB: the event records the
    attempt the move makes, on the row it locked), else read with :func:`claimed_attempt`.
    A row another transaction has locked is skipped (``SKIP LOCKED`` on servers): its claimer
    loses at once instead of queueing behind the winner, which is what lets several gateways
    claim in parallel.
    """
    transition = _transition(
        HandoffState.RUNNING,
        _one_session(state_is(HandoffState.PENDING)),
        _claimed_values(),
        attempt=_c.handoff_attempt + 1,
        skip_locked=True,
    )
    if returning:
        apply = transition.apply.returning(_c.handoff_attempt)
        return Transition(transition.record, apply, transition.single)
    if audit_returning:
        record = transition.record.returning(handoff_events.c.attempt.label("handoff_attempt"))
        return Transition(record, transition.apply, transition.single)
    return transition


#: MySQL/MariaDB: reach the rows of an ``id IN (...)`` list through the primary key. On a
#: table of a few thousand rows the optimizer prefers scanning an index for a hundred ids,
#: and a locking read locks every row it scans: two claimers then wait for each other's rows
#: (a deadlock, which InnoDB reports as error 1467 when the victim was taking the audit
#: table's AUTO-INC lock).
_MYSQL_BY_KEY: Final = "FORCE INDEX (PRIMARY)"


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
