"""The transcript beyond one append and one read: batches, windows, clearing and rewinding."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Integer, Select, Update, bindparam, literal_column, select

from ..models import messages, sessions
from .core import _c

_m = messages.c


@functools.cache
def count_appended_messages() -> Update:
    """Upstream's counters after a batch, in the batch's transaction: ``:messages_added`` more
    messages and ``:tool_calls_added`` more tool calls (a NULL counter stays NULL, as upstream
    leaves it). It matches no row when the session does not exist, and sent first it locks
    the session's row for the appends that follow."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"))
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
