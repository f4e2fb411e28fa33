"""The audit trail: the events' columns, a session's history, pruning and failure counts."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Delete, Select, bindparam, case, func, select

from ..models import HandoffState, handoff_events
from .core import _c, _literal, state_is

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
