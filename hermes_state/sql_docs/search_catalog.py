"""The catalog of message search: ``search_messages``'s routes on each backend and
``search_sessions_by_id``."""

from __future__ import annotations

from typing import Final

from .. import statements as S
from ..statements import Capabilities, SearchFilter
from .sent import Operation, Sent, sends

__all__ = ["SEARCH_OPERATIONS"]

_SEARCH = "Message search"
_FILTERED = SearchFilter(by_sources=True, excluding_sources=True, by_roles=True)
_CONTEXT = "each hit's neighbours, then their text (once for the whole page)"


def _context(caps: Capabilities) -> list[Sent]:
    return [
        sends(S.neighbour_ids, caps.name, note=_CONTEXT),
        sends(S.messages_by_ids, caps.name),
    ]


def _words(caps: Capabilities) -> list[Sent]:
    """A word query: the engine of the backend, then the substring retry of a miss."""
    chosen = SearchFilter()
    if caps.name == "sqlite":
        sent = [
            sends(S.search_indexes, note="which of upstream's FTS5 tables the file has"),
            sends(
                S.fts_candidates,
                "messages_fts",
                chosen,
                note="the newest matches, ranked here (found: the page's rows, as below)",
            ),
            sends(
                S.fts_candidates,
                "messages_fts_trigram",
                chosen,
                note="only when the words found nothing and every term has 3 characters",
            ),
            sends(S.fts_hits, "messages_fts_trigram", None, chosen, True, note="the page's rows"),
        ]
    elif caps.name == "postgresql":
        sent = [sends(S.tsvector_candidates, chosen, note="the first matches, ranked here")]
    else:
        sent = [sends(S.fulltext_hits, caps.name, None, chosen)]
    if caps.name != "sqlite":
        sent.append(
            sends(
                S.like_hits,
                caps.name,
                ((False,),),
                None,
                chosen,
                note="only when the words found nothing (MariaDB: also for words of 1, 2 "
                "or more than 84 characters, which its index does not hold)",
            )
        )
    return [*sent, *_context(caps)]


def _deep(caps: Capabilities) -> list[Sent]:
    """A page of a common word past the ranked candidates: they, then the matches after them,
    then the page's rows."""
    chosen = SearchFilter()
    if caps.name == "sqlite":
        sent = [
            sends(S.search_indexes),
            sends(S.fts_candidates, "messages_fts", chosen),
            sends(S.fts_rest, "messages_fts", chosen, note="the page's part past them"),
            sends(S.fts_hits, "messages_fts", None, chosen, True),
        ]
    elif caps.name == "postgresql":
        sent = [
            sends(S.tsvector_candidates, chosen),
            sends(S.tsvector_rest, chosen, note="the page's part past them"),
            sends(S.tsvector_hits, None, chosen, True),
        ]
    else:
        sent = [sends(S.fulltext_hits, caps.name, None, chosen)]
    return [*sent, *_context(caps)]


def _cjk(caps: Capabilities) -> list[Sent]:
    """A CJK query of long terms, filtered and by time: the trigram index on SQLite, LIKE
    (served by pg_trgm on PostgreSQL) elsewhere."""
    if caps.name == "sqlite":
        sent = [
            sends(S.search_indexes),
            sends(S.fts_hits, "messages_fts_trigram", "newest", _FILTERED),
        ]
    else:
        sent = [sends(S.like_hits, caps.name, ((False,),), "newest", _FILTERED)]
    return [*sent, *_context(caps)]


def _scan(caps: Capabilities) -> list[Sent]:
    """Two short CJK terms, tool results or reasoning: LIKE of each term, newest first."""
    sent = [sends(S.search_indexes)] if caps.name == "sqlite" else []
    sent.append(sends(S.like_hits, caps.name, ((False,), (False,)), "newest", SearchFilter()))
    return [*sent, *_context(caps)]


def _by_id(caps: Capabilities) -> list[Sent]:
    """The listing by activity with its id search (a compressed conversation found also
    sends the listing's walk to its tip)."""
    chosen = S.SessionFilter(listable_only=True, archived="any", visible_only=True)
    return [sends(S.rich_sessions_by_activity, caps.name, chosen, False, by_id=True)]


_O = Operation
SEARCH_OPERATIONS: Final[tuple[Operation, ...]] = (
    _O(_SEARCH, "search_messages", "", "search_messages('deployscript')", _words),
    _O(
        _SEARCH,
        "search_messages",
        "deep",
        "search_messages('common', limit=5, offset=1005)",
        _deep,
    ),
    _O(
        _SEARCH,
        "search_messages",
        "cjk",
        "search_messages('大别山项目', source_filter=[...], exclude_sources=[...], "
        "role_filter=[...], sort='newest')",
        _cjk,
    ),
    _O(_SEARCH, "search_messages", "scan", "search_messages('广西 OR 桂林')", _scan),
    _O(_SEARCH, "search_sessions_by_id", "", "search_sessions_by_id('pend')", _by_id),
)
