"""The transcript beyond one append and one read: batches, windows, clearing and rewinding."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    Delete,
    Integer,
    Select,
    Update,
    and_,
    bindparam,
    case,
    func,
    literal_column,
    or_,
    select,
)

from ..models import messages, session_model_usage, sessions
from .core import _c, closed_by_compression, open_for_appends

_m = messages.c


@functools.cache
def count_appended_messages() -> Update:
    """Upstream's counters after a batch, in the batch's transaction: ``:messages_added`` more
    messages and ``:tool_calls_added`` more tool calls (a NULL counter stays NULL, as upstream
    leaves it). It matches no row when the session does not exist or compression closed it,
    and sent first it locks the session's row for the appends that follow."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), open_for_appends())
        .values(
            message_count=_c.message_count + bindparam("messages_added", type_=Integer()),
            tool_call_count=_c.tool_call_count + bindparam("tool_calls_added", type_=Integer()),
        )
    )


@functools.cache
def messages_around(before: bool) -> Select[Any]:
    """Every column of ``:session_id``'s messages (rewound ones too) nearest the id
    ``:around_message_id``, at most ``:limit``: with ``before``, that message itself and those
    before it, newest first; else those after it, oldest first. A range of the index on
    ``session_id, id`` either way."""
    anchor = bindparam("around_message_id", type_=Integer())
    nearest = _m.id <= anchor if before else _m.id > anchor
    return (
        select(literal_column("*"))
        .select_from(messages)
        .where(_m.session_id == bindparam("session_id"), nearest)
        .order_by(_m.id.desc() if before else _m.id)
        .limit(bindparam("limit", type_=Integer()))
    )


@functools.cache
def lineage_link() -> Select[Any]:
    """What a walk up ``:session_id``'s lineage reads of it: its parent, and its model
    configuration (a ``/branch`` copy says so there, and stands alone)."""
    return select(_c.parent_session_id, _c.model_config).where(_c.id == bindparam("session_id"))


# -- clearing and rewinding

_ONE: Any = literal_column("1")


def _live_of_session() -> Any:
    return and_(_m.session_id == bindparam("session_id"), _m.active == _ONE)


@functools.cache
def session_locked() -> Select[Any]:
    """``:session_id`` if the session exists, its row locked for the transaction (SQLite's
    write lock covers it there): appends wait until the transcript is rewritten."""
    return select(_c.id).where(_c.id == bindparam("session_id")).with_for_update()


@functools.cache
def nth_newest_message() -> Select[Any]:
    """The id of ``:session_id``'s message ``:skip`` places before its newest (rewound ones
    counted, as upstream counts them), if it has that many."""
    return (
        select(_m.id)
        .where(_m.session_id == bindparam("session_id"))
        .order_by(_m.id.desc())
        .limit(1)
        .offset(bindparam("skip", type_=Integer()))
    )


@functools.cache
def delete_messages(before_id: bool = False, before_timestamp: bool = False) -> Delete:
    """Delete ``:session_id``'s messages, every one of them, or those before the id
    ``:before_id``, or those written before ``:before`` (epoch seconds)."""
    stmt = messages.delete().where(_m.session_id == bindparam("session_id"))
    if before_id:
        stmt = stmt.where(_m.id < bindparam("before_id", type_=Integer()))
    if before_timestamp:
        stmt = stmt.where(_m.timestamp < bindparam("before", type_=_m.timestamp.type))
    return stmt


@functools.cache
def live_counts() -> Select[Any]:
    """How many live messages ``:session_id`` has, and how many of them upstream's clearing
    counts as tool activity: a tool's result, or a message with tool calls."""
    calls = and_(
        _m.tool_calls.is_not(None),
        _m.tool_calls != literal_column("''"),
        _m.tool_calls != literal_column("'[]'"),
    )
    tool = case((or_(_m.role == literal_column("'tool'"), calls), _ONE), else_=literal_column("0"))
    tools = func.coalesce(func.sum(tool), literal_column("0"))
    return select(func.count().label("messages"), tools.label("tools")).where(_live_of_session())


#: Upstream's per-session usage counters, zeroed when a session's transcript is emptied.
_USAGE_COUNTERS = (
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)


@functools.cache
def reset_session_counters() -> Update:
    """``:session_id`` with no messages left: every usage counter 0, last active ``:now``."""
    zeroed: dict[str, Any] = dict.fromkeys(_USAGE_COUNTERS, 0)
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"))
        .values(**zeroed, last_activity_at=bindparam("now", type_=_c.last_activity_at.type))
    )


@functools.cache
def set_message_counters(touched: bool) -> Update:
    """``:session_id``'s counters recounted: ``:message_count`` and ``:tool_call_count``
    (with ``touched``, last active ``:now`` as well)."""
    values: dict[str, Any] = {
        "message_count": bindparam("message_count", type_=Integer()),
        "tool_call_count": bindparam("tool_call_count", type_=Integer()),
    }
    if touched:
        values["last_activity_at"] = bindparam("now", type_=_c.last_activity_at.type)
    return sessions.update().where(_c.id == bindparam("session_id")).values(**values)


@functools.cache
def delete_model_usage() -> Delete:
    """Forget ``:session_id``'s usage per model (upstream's ``session_model_usage``)."""
    usage = session_model_usage.c
    return session_model_usage.delete().where(usage.session_id == bindparam("session_id"))


@functools.cache
def message_of_session() -> Select[Any]:
    """Every column of the message ``:message_id``, if it belongs to ``:session_id``."""
    return (
        select(literal_column("*"))
        .select_from(messages)
        .where(_m.id == bindparam("message_id", type_=Integer()))
        .where(_m.session_id == bindparam("session_id"))
    )


@functools.cache
def live_message_ids() -> Select[Any]:
    """The ids of ``:session_id``'s live messages, in order."""
    return select(_m.id).where(_live_of_session()).order_by(_m.id)


@functools.cache
def rewind_from() -> Update:
    """Upstream's rewind: the live messages of ``:rewound_session`` from ``:message_id`` on
    are marked taken back (``active = 0``), kept on disk. (Not ``:session_id``: in an UPDATE
    of ``messages`` that name would be read as a new value for the column.)"""
    return (
        messages.update()
        .where(
            _m.session_id == bindparam("rewound_session", type_=_m.session_id.type),
            _m.active == _ONE,
            _m.id >= bindparam("message_id", type_=Integer()),
        )
        .values(active=0)
    )


@functools.cache
def count_rewind() -> Update:
    """One more rewind of ``:session_id`` (``rewind_count``), unless compression closed it."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), open_for_appends())
        .values(rewind_count=func.coalesce(_c.rewind_count, 0) + 1)
    )


@functools.cache
def live_tool_calls() -> Select[Any]:
    """The stored ``tool_calls`` of ``:session_id``'s live messages that have any."""
    return select(_m.tool_calls).where(_live_of_session(), _m.tool_calls.is_not(None))


@functools.cache
def live_head() -> Select[Any]:
    """The id of ``:session_id``'s newest live message (NULL when it has none)."""
    return select(func.max(_m.id).label("head")).where(_live_of_session())


@functools.cache
def session_closed() -> Select[Any]:
    """Whether compression closed ``:session_id`` (no row: there is no such session): why a
    write that needed it open wrote nothing."""
    # 1 or 0 rather than a boolean: SQLite's runner takes no result processing.
    closed = case((closed_by_compression(), _ONE), else_=literal_column("0"))
    return select(closed.label("closed")).where(_c.id == bindparam("session_id"))
