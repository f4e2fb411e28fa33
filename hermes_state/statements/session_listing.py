"""Session listings: the rich list and its filters, compression chains, counts, search_sessions."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    not_,
    or_,
    select,
)
from sqlalchemy.sql.selectable import NamedFromClause

from ..models import sessions
from .core import COMPRESSION, session_columns
from .session_terms import (
    LIKE_ESCAPE,
    _sql_string,
    _text,
    continuation,
    in_list,
    last_active,
    listable,
    preview_source,
)
from .turn_leases import MAX_LINEAGE_DEPTH

_c = sessions.c

#: Columns a compact row leaves out: payloads no list shows.
COMPACT_EXCLUDED: Final = frozenset(
    {"system_prompt", "system_prompt_hash", "git_metadata_generation"}
)

#: ``archived``: "live" rows only (``archived = 0``), "only" archived ones, or "any".
Archived = Literal["live", "only", "any"]


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which of the listing filters a statement applies, each with its bind parameters:
    ``listable_only`` (what a picker shows, see :func:`~.session_terms.listable`),
    ``by_sources`` (``:sources``, a list), ``by_session_key`` (``:session_key``),
    ``excluding_sources`` (``:exclude_sources``, a list), ``by_cwd`` (``:cwd``, ``:cwd_below``,
    ``:cwd_below_windows``: the directory and LIKE patterns of what lies under it),
    ``by_message_count`` (``:min_message_count``), ``archived``, ``visible_only``
    (``hidden = 0``) and ``own_dm`` (only the Telegram direct messages of
    ``:requester_user_id``, see :func:`own_dm`). The same filter gives a list and its count
    the same rows."""

    listable_only: bool = False
    by_sources: bool = False
    by_session_key: bool = False
    excluding_sources: bool = False
    by_cwd: bool = False
    by_message_count: bool = False
    archived: Archived = "live"
    visible_only: bool = False
    own_dm: bool = False


def _flag(column: ColumnElement[Any], value: int) -> ColumnElement[bool]:
    return column == literal_column(str(value))


def _under_cwd(row: NamedFromClause) -> ColumnElement[bool]:
    """``row.cwd`` is ``:cwd`` or lies below it (``/`` or ``\\`` separated)."""
    return or_(
        row.c.cwd == bindparam("cwd"),
        row.c.cwd.like(bindparam("cwd_below"), escape=LIKE_ESCAPE),
        row.c.cwd.like(bindparam("cwd_below_windows"), escape=LIKE_ESCAPE),
    )


def own_dm(row: NamedFromClause) -> ColumnElement[bool]:
    """``row`` is a Telegram direct message with ``:requester_user_id``: a DM's chat id is
    the other participant's user id. A row without a chat id proves nothing and is left out."""
    return and_(
        row.c.source == _sql_string("telegram"),
        row.c.chat_type == _sql_string("dm"),
        row.c.chat_id.is_not(None),
        row.c.chat_id != _text("empty"),
        row.c.chat_id == bindparam("requester_user_id"),
    )


def filter_terms(
    row: NamedFromClause, chosen: SessionFilter, dialect: str
) -> list[ColumnElement[bool]]:
    """The WHERE terms of ``chosen`` for ``row`` (``sessions`` or an alias of it)."""
    terms: list[ColumnElement[bool]] = []
    if chosen.listable_only:
        terms.append(listable(row, dialect))
    if chosen.by_sources:
        terms.append(in_list(row.c.source, "sources", dialect))
    if chosen.by_session_key:
        terms.append(row.c.session_key == bindparam("session_key"))
    if chosen.excluding_sources:
        terms.append(not_(in_list(row.c.source, "exclude_sources", dialect)))
    if chosen.by_cwd:
        terms.append(_under_cwd(row))
    if chosen.by_message_count:
        terms.append(row.c.message_count >= bindparam("min_message_count"))
    if chosen.archived != "any":
        terms.append(_flag(row.c.archived, 1 if chosen.archived == "only" else 0))
    if chosen.visible_only:
        terms.append(_flag(row.c.hidden, 0))
    if chosen.own_dm:
        terms.append(own_dm(row))
    return terms


def _row_columns(compact: bool) -> list[ColumnElement[Any]]:
    if compact:
        return [column for column in _c if column.name not in COMPACT_EXCLUDED]
    return list(session_columns())


def _rich_columns(dialect: str, compact: bool) -> list[ColumnElement[Any]]:
    """A listed row: the session's columns, its recency and the text of its preview."""
    return [
        *_row_columns(compact),
        last_active(sessions, dialect).label("last_active"),
        preview_source(sessions, dialect).label("_preview_raw"),
    ]


def _page(stmt: Select[Any]) -> Select[Any]:
    return stmt.limit(bindparam("limit")).offset(bindparam("offset"))


@functools.cache
def rich_sessions(dialect: str, chosen: SessionFilter, compact: bool) -> Select[Any]:
    """One page (``:limit``, ``:offset``) of the sessions ``chosen`` admits, newest
    ``started_at`` first, each with its recency and preview. The index on ``started_at``
    serves the order, so the page costs what it reads."""
    stmt = (
        select(*_rich_columns(dialect, compact))
        .where(*filter_terms(sessions, chosen, dialect))
        .order_by(_c.started_at.desc(), _c.id.desc())
    )
    return _page(stmt)


@functools.cache
def pinned_sessions(dialect: str, chosen: SessionFilter, compact: bool) -> Select[Any]:
    """Every pinned session ``chosen`` admits, as :func:`rich_sessions` lists them."""
    return (
        select(*_rich_columns(dialect, compact))
        .where(*filter_terms(sessions, chosen, dialect), _flag(_c.pinned, 1))
        .order_by(_c.started_at.desc(), _c.id.desc())
    )


@functools.cache
def rich_sessions_by_id(dialect: str, compact: bool) -> Select[Any]:
    """The sessions ``:ids`` (a list), as :func:`rich_sessions` lists them."""
    return select(*_rich_columns(dialect, compact)).where(in_list(_c.id, "ids", dialect))


def _compact_title(title: ColumnElement[Any]) -> ColumnElement[Any]:
    """``title`` without the separators a compact search ignores."""
    for separator in ("-", "_", ".", " "):
        title = func.replace(title, _sql_string(separator), _text("empty"))
    return title


@functools.cache
def rich_sessions_by_activity(
    dialect: str,
    chosen: SessionFilter,
    compact: bool,
    *,
    by_id: bool = False,
    by_text: bool = False,
    by_compact_text: bool = False,
) -> Select[Any]:
    """One page of the sessions ``chosen`` admits, the most recently active conversation
    first: a session's activity is the latest of it and the continuations its compression
    chain leads to (walked forward from each admitted row), and ties fall to ``started_at``.

    ``by_id``: only rows whose own id or a continuation's contains ``:id_pattern`` (a
    lowercase LIKE pattern); ``by_text``: only rows whose id or title, or a continuation's,
    contains ``:text_pattern``, or (``by_compact_text``) whose title without separators
    contains ``:compact_pattern``. Ordering by activity reads every admitted row."""
    chain = (
        select(_c.id.label("root_id"), _c.id.label("cur_id"))
        .where(*filter_terms(sessions, chosen, dialect))
        .cte("chain", recursive=True)
    )
    parent, child = sessions.alias("parent"), sessions.alias("child")
    step = select(chain.c.root_id, child.c.id).select_from(
        chain.join(parent, parent.c.id == chain.c.cur_id).join(
            child, continuation(parent, child, dialect)
        )
    )
    chain = chain.union(step)  # UNION, not UNION ALL: a cycle written by hand ends the walk
    segment = sessions.alias("segment")
    activity = (
        select(chain.c.root_id, last_active(segment, dialect).label("activity"))
        .select_from(chain.join(segment, segment.c.id == chain.c.cur_id))
        .subquery("chain_activity")
    )
    latest = (
        select(activity.c.root_id, func.max(activity.c.activity).label("activity"))
        .group_by(activity.c.root_id)
        .cte("chain_latest")
    )
    terms = filter_terms(sessions, chosen, dialect)
    if by_id:
        ids = chain.alias("id_chain")
        terms.append(
            exists().where(
                ids.c.root_id == _c.id,
                func.lower(ids.c.cur_id).like(bindparam("id_pattern"), escape=LIKE_ESCAPE),
            )
        )
    if by_text:
        texts, titled = chain.alias("text_chain"), sessions.alias("titled")
        title = func.lower(func.coalesce(titled.c.title, _text("empty")))
        pattern: Any = bindparam("text_pattern")
        matches = [
            title.like(pattern, escape=LIKE_ESCAPE),
            func.lower(texts.c.cur_id).like(pattern, escape=LIKE_ESCAPE),
        ]
        if by_compact_text:
            matches.append(
                _compact_title(title).like(bindparam("compact_pattern"), escape=LIKE_ESCAPE)
            )
        terms.append(
            exists()
            .select_from(texts.join(titled, titled.c.id == texts.c.cur_id))
            .where(texts.c.root_id == _c.id, or_(*matches))
        )
    effective = func.coalesce(latest.c.activity, _c.started_at).label("_effective_last_active")
    stmt = (
        select(*_rich_columns(dialect, compact), effective)
        .select_from(sessions.outerjoin(latest, latest.c.root_id == _c.id))
        .where(*terms)
        .order_by(effective.desc(), _c.started_at.desc(), _c.id.desc())
    )
    return _page(stmt)


@functools.cache
def compression_chains(dialect: str) -> Select[Any]:
    """The compression chain of each session of ``:ids`` (a list): ``(root_id, cur_id)``
    rows, the root first, then one continuation after another, as far as they go (at most
    :data:`MAX_LINEAGE_DEPTH` steps). Of several continuations of one segment the walk takes
    the one still compressing, else a live one, else the most recently active (then the
    latest started, then the highest id)."""
    walk = (
        select(
            _c.id.label("root_id"),
            _c.id.label("cur_id"),
            literal_column("0").label("depth"),
        )
        .where(in_list(_c.id, "ids", dialect))
        .cte("walk", recursive=True)
    )
    parent, child = sessions.alias("parent"), sessions.alias("child")
    preference = case(
        (child.c.end_reason == _sql_string(COMPRESSION), literal_column("0")),
        (child.c.ended_at.is_(None), literal_column("1")),
        else_=literal_column("2"),
    )
    following = (
        select(child.c.id)
        .select_from(parent.join(child, continuation(parent, child, dialect)))
        .where(parent.c.id == walk.c.cur_id)
        .order_by(
            preference,
            last_active(child, dialect).desc(),
            child.c.started_at.desc(),
            child.c.id.desc(),
        )
        .limit(1)
        .scalar_subquery()
    )
    step = select(walk.c.root_id, following, walk.c.depth + literal_column("1")).where(
        walk.c.cur_id.is_not(None),
        walk.c.depth < literal_column(str(MAX_LINEAGE_DEPTH)),
    )
    walk = walk.union_all(step)
    return (
        select(walk.c.root_id, walk.c.cur_id)
        .where(walk.c.cur_id.is_not(None))
        .order_by(walk.c.root_id, walk.c.depth)
    )


@functools.cache
def count_listed_sessions(dialect: str, chosen: SessionFilter) -> Select[Any]:
    """How many sessions ``chosen`` admits (a list's total, for its pages)."""
    return (
        select(func.count().label("count"))
        .select_from(sessions)
        .where(*filter_terms(sessions, chosen, dialect))
    )


@functools.cache
def some_sessions() -> Select[Any]:
    """Up to ``:limit`` rows of one constant: whether that many sessions exist, without
    counting them all."""
    return select(literal_column("1").label("one")).select_from(sessions).limit(bindparam("limit"))


@functools.cache
def count_sessions_by_source(dialect: str, chosen: SessionFilter) -> Select[Any, int]:
    """How many sessions ``chosen`` admits per source (an empty source counts as 'cli'),
    the largest first."""
    source = func.coalesce(func.nullif(_c.source, _text("empty")), _sql_string("cli"))
    count = func.count().label("count")
    return (
        select(source.label("source"), count)
        .where(*filter_terms(sessions, chosen, dialect))
        .group_by(source)
        .order_by(count.desc())
    )


@functools.cache
def search_sessions(dialect: str, *, by_sources: bool, by_workspace: bool) -> Select[Any]:
    """One page of whole session rows with their recency, the most recently active first;
    ``by_sources``: of ``:sources`` (a list); ``by_workspace``: of the workspace ``:cwd``
    (its git root, or for rows without one, a directory at or below it)."""
    recency = last_active(sessions, dialect).label("last_active")
    stmt = select(*session_columns(), recency)
    if by_sources:
        stmt = stmt.where(in_list(_c.source, "sources", dialect))
    if by_workspace:
        stmt = stmt.where(
            or_(
                _c.git_repo_root == bindparam("cwd"),
                and_(
                    func.coalesce(_c.git_repo_root, _text("empty")) == _text("empty"),
                    _under_cwd(sessions),
                ),
            )
        )
    return _page(stmt.order_by(recency.desc(), _c.started_at.desc(), _c.id.desc()))
