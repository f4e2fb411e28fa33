"""The transcript beyond one append and one read: batches, windows, clearing and rewinding."""

from __future__ import annotations

import functools

from sqlalchemy import Integer, Update, bindparam

from ..models import sessions
from .core import _c


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
