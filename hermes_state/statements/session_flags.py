"""Session flags (archived, pinned, hidden, read) set across a compression lineage, and the
reads and writes of session ids, ``state_meta``, compression chains and session deletion."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import (
    CompoundSelect,
    Delete,
    Insert,
    Select,
    String,
    Text,
    Update,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    update,
)

from ..models import (
    messages,
    session_turn_leases,
    sessions,
    state_meta,
    system_prompts,
)
from .core import COMPRESSION_END, _c, upsert
from .titles import LIKE_ESCAPE

#: The columns the lineage flag operations set (each gets its own cached statement).
LINEAGE_FLAGS: Final = ("archived", "pinned", "hidden", "last_read_at")


def _compression() -> Any:
    return COMPRESSION_END


@functools.cache
def lineage_ids() -> CompoundSelect[Any]:
    """The ids of ``:session_id``'s compression lineage: the session, every ancestor reached
    through parents that ended by compression, and every descendant reached through children
    of a session that ended by compression (upstream's lineage-wide flag rule). Empty for an
    unknown id. ``UNION`` (not ``UNION ALL``) ends the walk on a cycle written by hand."""
    up = select(_c.id).where(_c.id == bindparam("session_id")).cte("ancestors", recursive=True)
    child = sessions.alias("up_child")
    parent = sessions.alias("up_parent")
    up = up.union(
        select(parent.c.id)
        .select_from(
            up.join(child, child.c.id == up.c.id).join(
                parent, parent.c.id == child.c.parent_session_id
            )
        )
        .where(parent.c.end_reason == _compression())
    )
    down = select(_c.id).where(_c.id == bindparam("session_id")).cte("descendants", recursive=True)
    above = sessions.alias("down_parent")
    below = sessions.alias("down_child")
    down = down.union(
        select(below.c.id)
        .select_from(
            down.join(above, above.c.id == down.c.id).join(
                below, below.c.parent_session_id == above.c.id
            )
        )
        .where(above.c.end_reason == _compression())
    )
    return select(up.c.id).union(select(down.c.id))


@functools.cache
def set_lineage_flag(column: str) -> Update:
    """Set ``column`` (one of :data:`LINEAGE_FLAGS`) to ``:value`` on ``:session_id``: sent
    once per member of the lineage, so the text is the same for any lineage on every backend
    (the fast runners send no expanding ``IN`` lists)."""
    if column not in LINEAGE_FLAGS:
        raise ValueError(f"{column!r} is not a lineage flag")
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values({column: bindparam("value")})
    )


@functools.cache
def pin_guard() -> Select[tuple[Any, Any]]:
    """What pinning ``:session_id`` needs to know before it unhides the lineage: whether the
    session is hidden and its title."""
    return select(_c.hidden, _c.title).where(_c.id == bindparam("session_id"))


@functools.cache
def session_exists() -> Select[tuple[Any]]:
    """The id of the session ``:session_id``, when it exists."""
    return select(_c.id).where(_c.id == bindparam("session_id"))


@functools.cache
def ids_with_prefix(ranged: bool) -> Select[tuple[Any]]:
    """At most ``:limit`` ids matching ``:pattern`` (a LIKE prefix, escaped with
    ``LIKE_ESCAPE``), newest first. ``ranged`` (SQLite) also bounds the id to
    ``[:low, :high)``, every id the LIKE can match (see ``plans.session_flags.prefix_range``),
    so the primary key reaches them instead of a walk of every session."""
    stmt = select(_c.id).where(_c.id.like(bindparam("pattern"), escape=LIKE_ESCAPE))
    if ranged:
        stmt = stmt.where(_c.id >= bindparam("low"), _c.id < bindparam("high"))
    return stmt.order_by(_c.started_at.desc(), _c.id.desc()).limit(bindparam("limit"))


@functools.cache
def child_sessions() -> Select[tuple[Any, ...]]:
    """The children of ``:session_id`` with what telling a compression continuation from a
    fork needs (upstream marks forks in ``model_config``; the plans read the JSON), when each
    was last active (``last_message_at``: its newest message) and its parent's ``end_reason``
    and ``session_key``; served by the index on ``parent_session_id``."""
    child = sessions.alias("child")
    parent = sessions.alias("parent")
    newest_message = (
        select(func.max(messages.c.timestamp))
        .where(messages.c.session_id == child.c.id)
        .correlate(child)
        .scalar_subquery()
    )
    return (
        select(
            child.c.id,
            child.c.parent_session_id,
            child.c.source,
            child.c.model_config,
            child.c.session_key,
            child.c.started_at,
            child.c.ended_at,
            child.c.end_reason,
            child.c.last_activity_at,
            newest_message.label("last_message_at"),
            parent.c.end_reason.label("parent_end_reason"),
            parent.c.session_key.label("parent_session_key"),
        )
        .select_from(child.join(parent, parent.c.id == child.c.parent_session_id))
        .where(child.c.parent_session_id == bindparam("session_id"))
        .order_by(child.c.started_at, child.c.id)
    )


@functools.cache
def has_messages() -> Select[tuple[Any]]:
    """The id of ``:session_id``'s first message row (rewound ones too) as ``first``, NULL when
    it has none: one probe of the index on ``(session_id, id)``."""
    return select(func.min(messages.c.id).label("first")).where(
        messages.c.session_id == bindparam("session_id")
    )


@functools.cache
def get_meta() -> Select[tuple[Any]]:
    """The ``value`` upstream's key/value bookkeeping holds under ``:key``."""
    return select(state_meta.c.value).where(state_meta.c.key == bindparam("key"))


@functools.cache
def set_meta(dialect_name: str) -> Insert:
    """Store ``:value`` under ``:key``, replacing what the key held (an upsert on its primary
    key, in each dialect's words)."""
    values = {
        "key": bindparam("key", type_=String()),
        "value": bindparam("value", type_=Text()),
    }
    return upsert(dialect_name, state_meta, values, lambda new: {"value": new.value})


@functools.cache
def lineage_row() -> Select[tuple[Any, ...]]:
    """What walking ``:session_id``'s compression lineage up needs: its parent, its end and
    what tells a fork (source, ``model_config`` markers)."""
    return select(_c.id, _c.parent_session_id, _c.source, _c.model_config, _c.end_reason).where(
        _c.id == bindparam("session_id")
    )


# -- deleting sessions -------------------------------------------------------------------------

#: A LIKE pattern (escaped with ``LIKE_ESCAPE``) for a ``model_config`` that may hold upstream's
#: delegate marker: the rows a delete reads to find the delegate runs it takes along.
DELEGATE_MARKER_PATTERN: Final = f"%{LIKE_ESCAPE}_delegate{LIKE_ESCAPE}_from%"


@functools.cache
def session_in_flight() -> Select[tuple[Any, Any]]:
    """The id and handoff state of ``:session_id``, when it exists."""
    return select(_c.id, _c.handoff_state).where(_c.id == bindparam("session_id"))


@functools.cache
def delegate_candidates() -> Select[tuple[Any, Any, Any]]:
    """Every session whose ``model_config`` may carry a delegate marker, with its parent: the
    plans read the JSON and follow the markers (upstream stores no column for them, so this is
    a scan, as upstream's own JSON lookup is)."""
    marker: Any = literal_column(f"'{DELEGATE_MARKER_PATTERN}'")
    return select(_c.id, _c.parent_session_id, _c.model_config).where(
        _c.model_config.like(marker, escape=LIKE_ESCAPE)
    )


@functools.cache
def orphan_children() -> Update:
    """Detach the children of ``:session_id`` (their ``parent_session_id`` becomes NULL)."""
    return (
        update(sessions)
        .where(_c.parent_session_id == bindparam("session_id"))
        .values(parent_session_id=None)
    )


@functools.cache
def delete_session_turn_lease() -> Delete:
    """The (expired) turn lease keyed on ``:session_id``, the conversation it was the root of."""
    return delete(session_turn_leases).where(
        session_turn_leases.c.conversation_id == bindparam("session_id")
    )


@functools.cache
def delete_session_row() -> Delete:
    """The row of ``:session_id``."""
    return delete(sessions).where(_c.id == bindparam("session_id"))


@functools.cache
def delete_unreferenced_prompts() -> Delete:
    """System prompts no session refers to any more (by ``system_prompt_hash``, or by
    ``tool_names``, which upstream's newest files also address by hash)."""
    by_hash = select(_c.id).where(_c.system_prompt_hash == system_prompts.c.hash)
    by_tools = select(_c.id).where(_c.tool_names == system_prompts.c.hash)
    return delete(system_prompts).where(~by_hash.exists(), ~by_tools.exists())
