"""Retention: which ended sessions a prune may delete, a batch of them at a time, the lineage
and lease guards it checks per session, and the maintenance SQL of ``vacuum`` per backend.

The deletion itself is ``delete_session``'s (``statements.session_flags``); only the choice of
what goes is written here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Double,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    not_,
    or_,
    select,
)
from sqlalchemy.sql.selectable import NamedFromClause

from ..models import messages, metadata, session_turn_leases, sessions
from .core import COMPRESSION_END, forked
from .session_terms import LIKE_ESCAPE, last_active

#: Upstream's prune filters, in its order: (name, kind). ``bound`` filters count when they are
#: not None (0 is a real bound); ``text`` filters when they are non-empty.
PRUNE_FILTERS: Final = (
    ("last_active_before", "bound"),
    ("last_active_after", "bound"),
    ("started_before", "bound"),
    ("started_after", "bound"),
    ("source", "text"),
    ("title_like", "text"),
    ("end_reason", "text"),
    ("cwd_prefix", "text"),
    ("min_messages", "bound"),
    ("max_messages", "bound"),
    ("model_like", "text"),
    ("provider", "text"),
    ("user_id", "text"),
    ("chat_id", "text"),
    ("chat_type", "text"),
    ("branch_like", "text"),
    ("min_tokens", "bound"),
    ("max_tokens", "bound"),
    ("min_cost", "bound"),
    ("max_cost", "bound"),
    ("min_tool_calls", "bound"),
    ("max_tool_calls", "bound"),
)

#: The end reason upstream's start-up sweep gives a session a dead gateway left open: such a
#: session ages from that close, not from its old activity, so it can still be recovered.
ORPHAN_REAP: Final = "startup_orphan_reap"

#: The columns ``list_prune_candidates`` returns (with ``last_active``): what upstream's
#: preview shows and every dimension its filters select on.
CANDIDATE_COLUMNS: Final = (
    "id",
    "source",
    "title",
    "model",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "archived",
    "pinned",
    "input_tokens",
    "output_tokens",
    "tool_call_count",
    "actual_cost_usd",
    "estimated_cost_usd",
    "billing_provider",
    "git_branch",
    "cwd",
    "user_id",
    "chat_id",
    "chat_type",
)


@dataclass(frozen=True, slots=True)
class PruneFilter:
    """Which of upstream's prune filters a call uses (their values are bind parameters named
    after them; ``cwd_prefix`` binds ``:cwd``, ``:cwd_below`` and ``:cwd_below_windows``).

    ``archived``: None for both, else only (un)archived sessions. ``include_pinned``: pinned
    sessions (and the continuations of a pinned one) may go too. ``lineage_tips_only``: never a
    segment that compression ended."""

    names: tuple[str, ...] = ()
    archived: bool | None = None
    include_pinned: bool = False
    lineage_tips_only: bool = False


def _zero() -> ColumnElement[Any]:
    return literal_column("0")


def _string(value: str) -> ColumnElement[Any]:
    return literal_column(f"'{value}'")


def _lowered(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.lower(func.coalesce(column, _string("")))


def _bound(name: str, type_: Any) -> Any:
    return bindparam(name, type_=type_)


def _filter_term(s: NamedFromClause, name: str, dialect: str) -> ColumnElement[bool]:
    c = s.c
    seconds: Any = Double()
    tokens = func.coalesce(c.input_tokens, _zero()) + func.coalesce(c.output_tokens, _zero())
    cost = func.coalesce(c.actual_cost_usd, c.estimated_cost_usd, _zero())
    calls = func.coalesce(c.tool_call_count, _zero())
    if name == "last_active_before":
        before = _bound(name, seconds)
        return and_(
            last_active(s, dialect) < before,
            or_(
                func.coalesce(c.end_reason, _string("")) != _string(ORPHAN_REAP),
                c.ended_at < before,
            ),
        )
    terms: dict[str, Any] = {
        "last_active_after": lambda: last_active(s, dialect) >= _bound(name, seconds),
        "started_before": lambda: c.started_at < _bound(name, seconds),
        "started_after": lambda: c.started_at >= _bound(name, seconds),
        "source": lambda: c.source == _bound(name, String()),
        "title_like": lambda: _lowered(c.title).like(_bound(name, String()), escape=LIKE_ESCAPE),
        "end_reason": lambda: c.end_reason == _bound(name, String()),
        "cwd_prefix": lambda: or_(
            c.cwd == bindparam("cwd"),
            c.cwd.like(bindparam("cwd_below"), escape=LIKE_ESCAPE),
            c.cwd.like(bindparam("cwd_below_windows"), escape=LIKE_ESCAPE),
        ),
        "min_messages": lambda: c.message_count >= _bound(name, Integer()),
        "max_messages": lambda: c.message_count <= _bound(name, Integer()),
        "model_like": lambda: _lowered(c.model).like(_bound(name, String()), escape=LIKE_ESCAPE),
        "provider": lambda: _lowered(c.billing_provider) == _bound(name, String()),
        "user_id": lambda: c.user_id == _bound(name, String()),
        "chat_id": lambda: c.chat_id == _bound(name, String()),
        "chat_type": lambda: c.chat_type == _bound(name, String()),
        "branch_like": lambda: _lowered(c.git_branch).like(
            _bound(name, String()), escape=LIKE_ESCAPE
        ),
        "min_tokens": lambda: tokens >= _bound(name, Integer()),
        "max_tokens": lambda: tokens <= _bound(name, Integer()),
        "min_cost": lambda: cost >= _bound(name, Double()),
        "max_cost": lambda: cost <= _bound(name, Double()),
        "min_tool_calls": lambda: calls >= _bound(name, Integer()),
        "max_tool_calls": lambda: calls <= _bound(name, Integer()),
    }
    term: ColumnElement[bool] = terms[name]()
    return term


def prunable(s: NamedFromClause, dialect: str, chosen: PruneFilter) -> ColumnElement[bool]:
    """What makes the session ``s`` one a prune may delete, judged on its own row: ended, every
    chosen filter, not pinned (unless ``include_pinned``), no handoff pending or running, no
    live turn lease keyed on it at ``:now``. What its lineage adds (a pinned or leased
    segment above it, a live continuation below it) the plans check per session."""
    c = s.c
    state = func.coalesce(c.handoff_state, _string(""))
    lease = session_turn_leases.c
    terms: list[ColumnElement[bool]] = [
        c.ended_at.is_not(None),
        state != _string("pending"),
        state != _string("running"),
        ~exists().where(
            lease.conversation_id == c.id, lease.expires_at > bindparam("now", type_=Double())
        ),
    ]
    terms += [_filter_term(s, name, dialect) for name in chosen.names]
    if chosen.lineage_tips_only:
        terms.append(func.coalesce(c.end_reason, _string("")) != COMPRESSION_END)
    if chosen.archived is not None:
        terms.append(c.archived == literal_column("1" if chosen.archived else "0"))
    if not chosen.include_pinned:
        terms.append(func.coalesce(c.pinned, _zero()) == _zero())
    return and_(*terms)


def _parent_end(s: NamedFromClause) -> Any:
    parent = sessions.alias("prune_parent")
    return (
        select(parent.c.end_reason)
        .where(parent.c.id == s.c.parent_session_id)
        .scalar_subquery()
        .label("parent_end_reason")
    )


@functools.cache
def prune_window() -> Select[int, Any]:
    """The next ``:scan`` sessions after the id ``:after`` (a range of the primary key): how
    many there are (``seen``) and the last id (``upto``). A batch of a prune looks at no more
    sessions than that, however few of them it may delete, so its transaction stays short."""
    window = (
        select(sessions.c.id)
        .where(sessions.c.id > bindparam("after", type_=String()))
        .order_by(sessions.c.id)
        .limit(bindparam("scan", type_=Integer()))
        .subquery("prune_window")
    )
    return select(func.count().label("seen"), func.max(window.c.id).label("upto")).select_from(
        window
    )


@functools.cache
def prune_batch(dialect: str, chosen: PruneFilter, counted: bool) -> Select[Any]:
    """The sessions of the window ``(:after, :upto]`` (ids, see :func:`prune_window`) a prune
    may delete, in id order, with their end reason and their parent's (what tells the plans a
    lineage check is due), and with ``counted`` their number of messages. A server locks the
    rows it returns, so a handoff requested meanwhile waits for the batch (and the row is then
    read again)."""
    s = sessions.alias("s")
    columns: list[Any] = [s.c.id, s.c.end_reason, _parent_end(s)]
    if counted:
        m = messages.alias("prune_counted")
        columns.append(
            select(func.count())
            .select_from(m)
            .where(m.c.session_id == s.c.id)
            .scalar_subquery()
            .label("messages")
        )
    stmt = (
        select(*columns)
        .where(
            prunable(s, dialect, chosen),
            s.c.id > bindparam("after", type_=String()),
            s.c.id <= bindparam("upto", type_=String()),
        )
        .order_by(s.c.id)
    )
    return stmt if dialect == "sqlite" else stmt.with_for_update()


@functools.cache
def prune_candidates(dialect: str, chosen: PruneFilter) -> Select[Any]:
    """Every session a prune may delete (judged on its own row), the longest inactive first,
    with :data:`CANDIDATE_COLUMNS`, ``last_active`` and ``parent_end_reason``."""
    s = sessions.alias("s")
    recency = last_active(s, dialect).label("last_active")
    columns = [s.c[name] for name in CANDIDATE_COLUMNS]
    return (
        select(*columns, recency, _parent_end(s))
        .where(prunable(s, dialect, chosen))
        .order_by(recency, s.c.started_at, s.c.id)
    )


@functools.cache
def lineage_guard() -> Select[Any]:
    """The segments above ``:session_id`` in its conversation (parents that compression ended,
    whose continuation it is, and so on up), each with ``pinned`` and ``leased`` (a turn lease
    keyed on it is live at ``:now``): a pin covers the continuations of the pinned segment,
    and a conversation's lease is keyed on its first segment. ``UNION`` ends a hand-made cycle."""
    up = (
        select(sessions.c.id)
        .where(sessions.c.id == bindparam("session_id"))
        .cte("prune_up", recursive=True)
    )
    child = sessions.alias("up_child")
    parent = sessions.alias("up_parent")
    up = up.union(
        select(parent.c.id)
        .select_from(
            up.join(child, child.c.id == up.c.id).join(
                parent, parent.c.id == child.c.parent_session_id
            )
        )
        .where(parent.c.end_reason == COMPRESSION_END, forked(child) == _zero())
    )
    segment = sessions.alias("up_segment")
    lease = session_turn_leases.c
    leased = exists().where(
        lease.conversation_id == up.c.id, lease.expires_at > bindparam("now", type_=Double())
    )
    return select(
        up.c.id,
        func.coalesce(segment.c.pinned, _zero()).label("pinned"),
        select(literal_column("1")).where(leased).scalar_subquery().label("leased"),
    ).select_from(up.outerjoin(segment, segment.c.id == up.c.id))


@functools.cache
def kept_continuation(dialect: str, chosen: PruneFilter) -> Select[Any]:
    """A later segment of ``:session_id``'s conversation (its compression continuation, theirs,
    and so on down) that a prune would keep, if there is one: while one stays, the earlier
    segments stay with it (deleting them would cut the start off a chat still in use)."""
    down = (
        select(sessions.c.id)
        .where(sessions.c.id == bindparam("session_id"))
        .cte("prune_down", recursive=True)
    )
    parent = sessions.alias("down_parent")
    child = sessions.alias("down_child")
    down = down.union(
        select(child.c.id)
        .select_from(
            down.join(parent, parent.c.id == down.c.id).join(
                child, child.c.parent_session_id == parent.c.id
            )
        )
        .where(parent.c.end_reason == COMPRESSION_END, forked(child) == _zero())
    )
    s = sessions.alias("s")
    return (
        select(s.c.id)
        .select_from(down.join(s, s.c.id == down.c.id))
        .where(s.c.id != bindparam("session_id"), not_(prunable(s, dialect, chosen)))
        .limit(literal_column("1"))
    )


# -- maintenance -------------------------------------------------------------------------------

#: SQLite's page counts, read by ``storage_report`` (each PRAGMA answers one row, one column).
SQLITE_PAGE_PRAGMAS: Final = ("page_count", "freelist_count", "page_size")


def maintenance_sql(dialect: str) -> list[str]:
    """What ``vacuum`` sends, outside any transaction: SQLite checkpoints its WAL (passively,
    so a live writer is not raced), rewrites the file, then truncates the WAL the rewrite went
    through; PostgreSQL vacuums and analyzes the project's tables; MariaDB/MySQL optimizes
    them (a rebuild that gives the space of deleted rows back)."""
    tables = ", ".join(table.name for table in metadata.sorted_tables)
    if dialect == "sqlite":
        return ["PRAGMA wal_checkpoint(PASSIVE)", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"]
    if dialect == "postgresql":
        return [f"VACUUM (ANALYZE) {tables}"]
    return [f"OPTIMIZE TABLE {tables}"]
