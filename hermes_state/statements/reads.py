"""Reads of sessions, handoffs and events (lists, pages, counts, the change feed)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, and_, bindparam, func, literal_column, or_, select

from ..models import HandoffState, sessions
from .audit import _e
from .core import _c, _literal, session_columns, state_is


@functools.cache
def list_handoffs(
    state: HandoffState | None,
    limited: bool = False,
    *,
    after: bool = False,
    search: bool = False,
) -> Select[tuple[object, ...]]:
    """Whole rows in ``state`` (any handoff state for None), oldest session first, at most
    ``:limit`` when ``limited``. O(rows) for pending and running, which are indexed; a scan for
    the others, which only administrators list.

    ``after``: only rows that sort after the session ``:after`` (keyset paging on
    ``started_at, id``; an unknown ``:after`` yields nothing). ``search``: only ids containing
    ``:search`` (LIKE wildcards in it are escaped by the caller with ``/``)."""
    condition = _c.handoff_state.is_not(None) if state is None else state_is(state)
    stmt = select(*session_columns()).where(condition)
    if after:
        cursor = sessions.alias("cursor")
        start = (
            select(cursor.c.started_at).where(cursor.c.id == bindparam("after")).scalar_subquery()
        )
        stmt = stmt.where(
            or_(
                _c.started_at > start,
                and_(_c.started_at == start, _c.id > bindparam("after")),
            )
        )
    if search:
        stmt = stmt.where(_c.id.like(bindparam("search"), escape="/"))
    stmt = stmt.order_by(_c.started_at, _c.id)
    return stmt.limit(bindparam("limit")) if limited else stmt


@functools.cache
def list_sessions(
    state: HandoffState | None, *, by_source: bool, since: bool, limited: bool
) -> Select[tuple[object, ...]]:
    """Whole session rows, newest ``started_at`` first; filtered on ``:source`` when
    ``by_source``, on ``state``, and on ``started_at >= :since`` when ``since``; at most
    ``:limit`` when ``limited``."""
    stmt = select(*session_columns())
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
    """The whole row of ``:session_id``."""
    return select(*session_columns()).where(_c.id == bindparam("session_id"))


@functools.cache
def handoff_events_after() -> Select[tuple[Any, ...]]:
    """Events with an id above ``:after``, oldest first, at most ``:limit``: the change feed a
    dashboard follows (every transition writes one, whichever process made it)."""
    return (
        select(
            _e.id, _e.session_id, _e.from_state, _e.to_state, _e.at, _e.actor, _e.attempt, _e.detail
        )
        .where(_e.id > bindparam("after"))
        .order_by(_e.id)
        .limit(bindparam("limit"))
    )


@functools.cache
def recent_failed_events() -> Select[tuple[Any, ...]]:
    """The newest ``:limit`` failure events, newest first (their detail is the error)."""
    return (
        select(_e.id, _e.session_id, _e.from_state, _e.at, _e.actor, _e.attempt, _e.detail)
        .where(_e.to_state == _literal(HandoffState.FAILED))
        .order_by(_e.id.desc())
        .limit(bindparam("limit"))
    )


@functools.cache
def last_handoff_event_id() -> Select[tuple[int | None]]:
    return select(func.max(_e.id).label("last"))


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
