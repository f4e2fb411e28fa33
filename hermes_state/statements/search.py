"""The statements of message search (``search_messages``), one builder per statement, each
backend with its own engine.

* SQLite: upstream's FTS5 tables (``messages_fts`` words with BM25 rank and ``snippet()``,
  ``messages_fts_trigram`` for CJK and substrings; see :mod:`hermes_state.search_index`).
* PostgreSQL: ``to_tsvector('simple', ...)`` of a message's text, served by the GIN
  expression index ``idx_messages_search_tsv`` of revision 0008 (:data:`PG_DOCUMENT` is that
  expression, which the query repeats exactly), ranked by ``ts_rank``; substrings and CJK
  with ``ILIKE``, served by the ``pg_trgm`` index ``idx_messages_search_trgm`` when the
  extension could be created.
* MariaDB/MySQL: the InnoDB FULLTEXT index ``idx_messages_search_ft`` in boolean mode,
  ranked by its relevance; substrings and CJK with ``LIKE`` (MariaDB has no ngram parser).

Every route returns the same columns: the message's id, session, role, timestamp and tool
name, its session's source, model and start, and either ``snippet`` (SQLite's FTS routes) or
the ``content`` the plans cut a snippet from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    and_,
    any_,
    bindparam,
    column,
    func,
    literal_column,
    not_,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.sql.elements import TextClause

from ..models import messages, sessions
from ..models.tables import SEARCH_DOCUMENT_PG
from .session_terms import LIKE_ESCAPE, in_list

__all__ = [
    "PG_DOCUMENT",
    "PG_RANKED_CANDIDATES",
    "SEARCH_ORDERS",
    "SQLITE_RANKED_CANDIDATES",
    "SearchFilter",
    "fts_candidates",
    "fts_hits",
    "fts_rest",
    "fulltext_hits",
    "id_list",
    "like_hits",
    "messages_by_ids",
    "neighbour_ids",
    "search_indexes",
    "tsvector_candidates",
    "tsvector_hits",
    "tsvector_rest",
]

_m = messages.c
_s = sessions.c

#: ``sort`` values with an order of their own; anything else is relevance.
SEARCH_ORDERS: Final = ("newest", "oldest")

#: PostgreSQL: the ``tsvector`` of a message's text that ``idx_messages_search_tsv`` indexes
#: (declared with the models); :func:`tsvector_hits` repeats it exactly.
PG_DOCUMENT: Final = SEARCH_DOCUMENT_PG

_SNIPPET_ARGS: Final = "'>>>', '<<<', '...', 40"


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Which filters a search statement has: rewound rows too (``include_inactive``), by
    ``:sources``, without ``:exclude_sources``, by ``:roles`` (lists)."""

    include_inactive: bool = False
    by_sources: bool = False
    excluding_sources: bool = False
    by_roles: bool = False


def _filter_terms(chosen: SearchFilter, dialect: str) -> list[ColumnElement[bool]]:
    terms: list[ColumnElement[bool]] = []
    if not chosen.include_inactive:
        # A rewound turn (active 0, not compacted) was taken back; compacted rows stay findable.
        terms.append(or_(_m.active == literal_column("1"), _m.compacted == literal_column("1")))
    # Model-facing scaffolding the person never saw.
    terms.append(func.coalesce(_m.display_kind, literal_column("''")) != literal_column("'hidden'"))
    if chosen.by_sources:
        terms.append(in_list(_s.source, "sources", dialect))
    if chosen.excluding_sources:
        terms.append(not_(in_list(_s.source, "exclude_sources", dialect)))
    if chosen.by_roles:
        terms.append(in_list(_m.role, "roles", dialect))
    return terms


def _hit_columns(*snippet: ColumnElement[Any]) -> list[ColumnElement[Any]]:
    return [
        _m.id,
        _m.session_id,
        _m.role,
        *snippet,
        _m.timestamp,
        _m.tool_name,
        _s.source,
        _s.model,
        _s.started_at.label("session_started"),
    ]


def _ordered(stmt: Select[Any], order: str | None, relevance: ColumnElement[Any]) -> Select[Any]:
    if order == "newest":
        stmt = stmt.order_by(_m.timestamp.desc(), relevance)
    elif order == "oldest":
        stmt = stmt.order_by(_m.timestamp.asc(), relevance)
    else:
        stmt = stmt.order_by(relevance)
    return stmt.limit(bindparam("limit")).offset(bindparam("offset"))


@functools.cache
def search_indexes() -> TextClause:
    """SQLite: which of upstream's two FTS5 tables the file has (``name``)."""
    return text(
        "SELECT name FROM sqlite_master WHERE type = 'table' "
        "AND name IN ('messages_fts', 'messages_fts_trigram')"
    )


#: SQLite ranks by BM25 at most this many of a query's newest matches (see
#: :func:`fts_candidates`); the older matches follow, newest first.
SQLITE_RANKED_CANDIDATES: Final = 1_000


def _fts_table(index: str) -> Any:
    if index not in ("messages_fts", "messages_fts_trigram"):
        raise ValueError(f"not a search index: {index!r}")
    return table(index, column("rowid"), column("rank"))


def _fts_matching(
    index: str, chosen: SearchFilter, pick: Callable[[Any], tuple[Any, ...]]
) -> tuple[Select[Any], Any]:
    """The matches of ``index`` for ``:query`` the filters admit, selecting ``pick(fts)``."""
    fts = _fts_table(index)
    name: ColumnElement[Any] = literal_column(index)
    stmt = (
        select(*pick(fts))
        .select_from(fts)
        .join(messages, _m.id == fts.c.rowid)
        .join(sessions, _s.id == _m.session_id)
        .where(name.op("MATCH")(bindparam("query")), *_filter_terms(chosen, "sqlite"))
    )
    return stmt, fts


@functools.cache
def fts_candidates(index: str, chosen: SearchFilter) -> Select[Any]:
    """SQLite: the newest ``:candidates`` messages ``index`` matches for ``:query`` that the
    filters admit, with their BM25 rank (``id``, ``relevance``): what relevance orders (FTS5
    ranks every match it is asked to order, for a word in most messages most of the table)."""
    stmt, fts = _fts_matching(
        index, chosen, lambda t: (t.c.rowid.label("id"), t.c.rank.label("relevance"))
    )
    return stmt.order_by(fts.c.rowid.desc()).limit(bindparam("candidates"))


@functools.cache
def fts_rest(index: str, chosen: SearchFilter) -> Select[Any]:
    """SQLite: the ids of the matches past the candidates (not in ``:exclude``, a list),
    newest first, one page (``:limit``, ``:offset``)."""
    stmt, fts = _fts_matching(index, chosen, lambda t: (t.c.rowid.label("id"),))
    stmt = stmt.where(not_(_id_in(fts.c.rowid, "sqlite", "exclude")))
    return stmt.order_by(fts.c.rowid.desc()).limit(bindparam("limit")).offset(bindparam("offset"))


@functools.cache
def fts_hits(
    index: str, order: str | None, chosen: SearchFilter, by_ids: bool = False
) -> Select[Any]:
    """SQLite: one page of the messages ``index`` (``messages_fts`` or
    ``messages_fts_trigram``) matches for ``:query``, by time then rank, with upstream's
    ``snippet()``; ``by_ids``: the hits of ``:ids`` (a page the plan chose from
    :func:`fts_candidates` and :func:`fts_rest`, in no order), which FTS5 reaches by rowid."""
    fts = _fts_table(index)
    name: ColumnElement[Any] = literal_column(index)
    snippet: ColumnElement[Any] = literal_column(f"snippet({index}, -1, {_SNIPPET_ARGS})").label(
        "snippet"
    )
    stmt = (
        select(*_hit_columns(snippet))
        .select_from(fts)
        .join(messages, _m.id == fts.c.rowid)
        .join(sessions, _s.id == _m.session_id)
        .where(name.op("MATCH")(bindparam("query")), *_filter_terms(chosen, "sqlite"))
    )
    if by_ids:
        return stmt.where(_id_in(fts.c.rowid, "sqlite"))
    return _ordered(stmt, order, fts.c.rank)


def _document() -> ColumnElement[Any]:
    # Unqualified as the index has it: of the tables joined, only messages has these columns.
    return literal_column(PG_DOCUMENT)


#: PostgreSQL ranks at most this many matches of a query by relevance (see
#: :func:`tsvector_candidates`); the matches past them follow, newest first.
PG_RANKED_CANDIDATES: Final = 200


def _tsvector_matching(chosen: SearchFilter, *columns: Any) -> Select[Any]:
    query = func.websearch_to_tsquery(literal_column("'simple'::regconfig"), bindparam("query"))
    return (
        select(*columns)
        .select_from(messages)
        .join(sessions, _s.id == _m.session_id)
        .where(_document().op("@@")(query), *_filter_terms(chosen, "postgresql"))
    )


def _ts_rank() -> ColumnElement[Any]:
    query = func.websearch_to_tsquery(literal_column("'simple'::regconfig"), bindparam("query"))
    return func.ts_rank(_document(), query)


@functools.cache
def tsvector_hits(order: str | None, chosen: SearchFilter, by_ids: bool = False) -> Select[Any]:
    """PostgreSQL: one page of the messages whose words match ``:query`` (read by
    ``websearch_to_tsquery('simple', ...)``, which takes any text), by time then ``ts_rank``,
    with their ``content`` for the snippet; ``by_ids``: the rows of ``:ids`` (a page the plan
    chose from :func:`tsvector_candidates` and :func:`tsvector_rest`, in no order)."""
    if by_ids:
        # Known matches the filters admitted: read by key (no second pass of the GIN index).
        return (
            select(*_hit_columns(_m.content))
            .select_from(messages)
            .join(sessions, _s.id == _m.session_id)
            .where(_id_in(_m.id, "postgresql"))
        )
    stmt = _tsvector_matching(chosen, *_hit_columns(_m.content))
    return _ordered(stmt, order, _ts_rank().desc())


@functools.cache
def tsvector_candidates(chosen: SearchFilter) -> Select[Any]:
    """PostgreSQL: the first ``:candidates`` matches the index yields (``id``, ``ts_rank`` as
    ``relevance``): what relevance orders (``ts_rank`` reads each candidate's text)."""
    return _tsvector_matching(chosen, _m.id, _ts_rank().label("relevance")).limit(
        bindparam("candidates")
    )


@functools.cache
def tsvector_rest(chosen: SearchFilter) -> Select[Any]:
    """PostgreSQL: the ids of the matches past the candidates (not in ``:exclude``), newest
    id first, one page."""
    stmt = _tsvector_matching(chosen, _m.id).where(not_(_id_in(_m.id, "postgresql", "exclude")))
    return stmt.order_by(_m.id.desc()).limit(bindparam("limit")).offset(bindparam("offset"))


@functools.cache
def fulltext_hits(dialect: str, order: str | None, chosen: SearchFilter) -> Select[Any]:
    """MariaDB/MySQL: one page of the messages the FULLTEXT index matches for ``:query`` (a
    boolean-mode expression the plans write), by relevance or by time then relevance, with
    their ``content`` for the snippet."""
    from sqlalchemy.dialects.mysql import match  # only MariaDB/MySQL builds this

    relevance: ColumnElement[Any] = match(
        _m.content, _m.tool_name, _m.tool_calls, against=bindparam("query")
    ).in_boolean_mode()
    stmt = (
        select(*_hit_columns(_m.content))
        .select_from(messages)
        .join(sessions, _s.id == _m.session_id)
        .where(relevance > literal_column("0"), *_filter_terms(chosen, dialect))
    )
    return _ordered(stmt, order, relevance.desc())


def _like(column_: ColumnElement[Any], name: str, dialect: str, whole: bool) -> ColumnElement[bool]:
    """``column_`` holds the pattern ``:name``. A positive term tests the column itself (so
    PostgreSQL's trigram index serves it; NULL is no match); a negated one, ``whole``, tests
    the column with NULL read as '' (NOT of NULL would leave the row out)."""
    value = func.coalesce(column_, literal_column("''")) if whole else column_
    pattern: ColumnElement[Any] = bindparam(name)
    if dialect == "postgresql":
        return value.ilike(pattern, escape=LIKE_ESCAPE)
    return value.like(pattern, escape=LIKE_ESCAPE)


def _term_matches(
    name: str, dialect: str, reasoning: bool, negated: bool = False
) -> ColumnElement[bool]:
    """Whether ``:name`` (a LIKE pattern) is in a message's content, tool name or tool calls
    (and, with ``reasoning``, an assistant message's reasoning fields)."""
    found = [_like(c, name, dialect, negated) for c in (_m.content, _m.tool_name, _m.tool_calls)]
    if reasoning:
        thought = [
            _like(c, name, dialect, negated)
            for c in (_m.reasoning, _m.reasoning_content, _m.reasoning_details)
        ]
        found.append(and_(_m.role == literal_column("'assistant'"), or_(*thought)))
    matched = or_(*found)
    return not_(matched) if negated else matched


@functools.cache
def like_hits(
    dialect: str,
    shape: tuple[tuple[bool, ...], ...],
    order: str | None,
    chosen: SearchFilter,
    reasoning: bool = False,
) -> Select[Any]:
    """One page of the messages holding the terms, read row by row with LIKE (``ILIKE`` on
    PostgreSQL): ``shape`` holds OR-groups of ANDed terms, True for a negated one, bound as
    ``:t<group>_<term>`` patterns; newest first unless ``order`` is "oldest". Serves CJK
    terms too short for trigrams, tool results, and the substring retry of a word miss."""
    groups = [
        and_(
            *(
                _term_matches(f"t{g}_{t}", dialect, reasoning, negated)
                for t, negated in enumerate(group)
            )
        )
        for g, group in enumerate(shape)
    ]
    stmt = (
        select(*_hit_columns(_m.content), _m.tool_calls)
        .select_from(messages)
        .join(sessions, _s.id == _m.session_id)
        .where(or_(*groups), *_filter_terms(chosen, dialect))
    )
    if order == "oldest":
        stmt = stmt.order_by(_m.timestamp.asc(), _m.id.asc())
    else:
        stmt = stmt.order_by(_m.timestamp.desc(), _m.id.desc())
    return stmt.limit(bindparam("limit")).offset(bindparam("offset"))


@functools.cache
def neighbour_ids(dialect: str) -> Select[Any]:
    """For each message of ``:ids`` (a list), the message before it and the one after it in
    its session, by time then id (``before_id``, ``after_id``; None at an end)."""
    target = messages.alias("target")
    t = target.c

    def neighbour(earlier: bool) -> Any:
        other = messages.alias("before" if earlier else "after")
        o = other.c
        if earlier:
            side = or_(o.timestamp < t.timestamp, and_(o.timestamp == t.timestamp, o.id < t.id))
            order = (o.timestamp.desc(), o.id.desc())
        else:
            side = or_(o.timestamp > t.timestamp, and_(o.timestamp == t.timestamp, o.id > t.id))
            order = (o.timestamp.asc(), o.id.asc())
        return (
            select(o.id)
            .where(o.session_id == t.session_id, side)
            .order_by(*order)
            .limit(1)
            .scalar_subquery()
        )

    return select(
        t.id,
        neighbour(True).label("before_id"),
        neighbour(False).label("after_id"),
    ).where(_id_in(t.id, dialect))


@functools.cache
def messages_by_ids(dialect: str) -> Select[Any]:
    """The id, role and content of the messages of ``:ids`` (a list)."""
    return select(_m.id, _m.role, _m.content).where(_id_in(_m.id, dialect))


def _id_in(column_: ColumnElement[Any], dialect: str, name: str = "ids") -> ColumnElement[bool]:
    """``column_`` is one of the message ids bound as ``:name`` (as :func:`in_list`, for
    integers: the plans bind them with :func:`id_list`)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import ARRAY

        return column_ == any_(bindparam(name, type_=ARRAY(Integer())))
    return in_list(column_, name, dialect)


def id_list(ids: list[int], dialect: str) -> object:
    """The value :func:`neighbour_ids` and :func:`messages_by_ids` bind as ``:ids``."""
    if dialect == "sqlite":
        import json

        return json.dumps(ids)
    return ids
