"""Sessions and their transcript: creating a session, appending messages, reading transcripts."""

from __future__ import annotations

import enum
import functools
from typing import Any

from sqlalchemy import (
    Insert,
    Integer,
    Select,
    Update,
    any_,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
)

from ..models import messages, sessions
from .core import (
    MESSAGE_FIELDS,
    _c,
    _pg_array,
    closed_by_compression,
    open_for_appends,
)


@functools.cache
def append_message(returning: bool) -> Insert:
    """Append a live transcript entry with every message field (NULL when not given), inserting
    nothing when the session does not exist or compression closed it."""
    m = messages.c
    # Typed parameters: in a SELECT list nothing else tells the driver (asyncpg asks) their types.
    fields = [bindparam(name, type_=m[name].type) for name in MESSAGE_FIELDS]
    row = select(
        bindparam("session_id", type_=m.session_id.type),
        bindparam("role", type_=m.role.type),
        bindparam("content", type_=m.content.type),
        bindparam("now", type_=m.timestamp.type),
        *fields,
        literal_column("1"),
    ).where(exists().where(_c.id == bindparam("session_id"), open_for_appends()))
    names = ["session_id", "role", "content", "timestamp", *MESSAGE_FIELDS, "active"]
    stmt = messages.insert().from_select(names, row)
    return stmt.returning(m.id) if returning else stmt


@functools.cache
def count_appended_message() -> Update:
    """Upstream's counters after one append, in the append's transaction: one more message and
    ``:tool_calls_added`` more tool calls (a NULL counter stays NULL, as upstream leaves it)."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"))
        .values(
            message_count=_c.message_count + 1,
            tool_call_count=_c.tool_call_count + bindparam("tool_calls_added", type_=Integer()),
        )
    )


@functools.cache
def append_message_counted() -> Select[Any]:
    """PostgreSQL, one statement: the append and its counters (see :func:`append_message` and
    :func:`count_appended_message`). Its one row holds the new ``id`` (NULL when nothing was
    appended) and whether compression ``closed`` the session, which tells why not."""
    inserted = append_message(True).cte("inserted")
    counted = count_appended_message().where(exists(select(inserted.c.id))).cte("counted")
    closed = exists().where(_c.id == bindparam("session_id"), closed_by_compression())
    new_id = select(inserted.c.id).scalar_subquery().label("id")
    return select(new_id, closed.label("closed")).add_cte(counted)


class Visibility(enum.Enum):
    """Which of a session's messages a read sees (upstream's ``include_*`` switches)."""

    #: The live transcript: rewound and compacted turns (``active = 0``) left out.
    LIVE = "live"
    #: What a display shows: the live rows and those compaction archived (``compacted = 1``),
    #: never the turns a user rewound.
    DISPLAY = "display"
    #: Every row, rewound ones too.
    ALL = "all"


def visible(visibility: Visibility) -> Any:
    """The condition on ``messages`` of ``visibility`` (None for every row)."""
    m = messages.c
    one: Any = literal_column("1")
    if visibility is Visibility.LIVE:
        return m.active == one
    if visibility is Visibility.DISPLAY:
        return or_(m.active == one, m.compacted == one)
    return None


@functools.cache
def get_messages(
    visibility: Visibility = Visibility.LIVE,
    *,
    newest_first: bool = False,
    after: bool = False,
    limited: bool = False,
    skipped: bool = False,
) -> Select[Any]:
    """The messages of ``:session_id`` that ``visibility`` sees (by default the live
    transcript), oldest first, with every column the table has: ``*`` also reads the columns
    of an adopted file the models do not know, with no reflection and one compiled statement.

    ``newest_first`` orders them the other way; ``after`` keeps those after ``:after_id``;
    ``limited`` returns at most ``:limit``, ``skipped`` leaves out the first ``:offset``. The
    index on ``session_id, id`` serves each form, so a page costs what it returns."""
    m = messages.c
    condition = visible(visibility)
    stmt: Select[Any] = (
        select(literal_column("*"))
        .select_from(messages)
        .where(m.session_id == bindparam("session_id"))
    )
    if condition is not None:
        stmt = stmt.where(condition)
    if after:
        stmt = stmt.where(m.id > bindparam("after_id", type_=Integer()))
    stmt = stmt.order_by(m.id.desc() if newest_first else m.id)
    if limited:
        stmt = stmt.limit(bindparam("limit", type_=Integer()))
    if skipped:
        stmt = stmt.offset(bindparam("offset", type_=Integer()))
    return stmt


@functools.cache
def count_messages() -> Select[Any]:
    """How many messages :func:`get_messages` returns for ``:session_id``, counted in the
    database (the index on ``session_id, id`` covers the lookup)."""
    m = messages.c
    return (
        select(func.count().label("count"))
        .select_from(messages)
        .where(m.session_id == bindparam("session_id"), m.active == literal_column("1"))
    )


@functools.cache
def get_transcripts(array: bool) -> Select[Any]:
    """The live transcripts of many sessions at once, as :func:`get_messages` reads one: every
    column (``session_id`` among them), in session then message order. The sessions are
    ``:ids``, a PostgreSQL array where ``array``, else an expanding list."""
    m = messages.c
    ids = any_(_pg_array("ids")) if array else None
    wanted = m.session_id == ids if array else m.session_id.in_(bindparam("ids", expanding=True))
    return (
        select(literal_column("*"))
        .select_from(messages)
        .where(wanted, m.active == literal_column("1"))
        .order_by(m.session_id, m.id)
    )


@functools.cache
def count_message_rows(by_session: bool) -> Select[Any]:
    """Upstream's ``message_count``: every message row (rewound and compacted ones too), of
    ``:session_id`` when ``by_session``, else of every session."""
    stmt = select(func.count().label("count")).select_from(messages)
    return stmt.where(messages.c.session_id == bindparam("session_id")) if by_session else stmt
