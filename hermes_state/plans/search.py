"""The plans of message search: ``search_messages`` (upstream's routes over each backend's
engine, see :mod:`hermes_state.statements.search`) and ``search_sessions_by_id``.

The routes, as upstream takes them on SQLite:

* a word query: the ``messages_fts`` words index, by BM25 or by time; when it finds nothing
  and every term has 3 characters or more, the ``messages_fts_trigram`` substrings index
  (a Latin word glued to CJK text is no word of its own);
* a CJK query: the trigram index when each CJK term has 3 characters or more, else a LIKE
  scan of each term (any of them), newest first;
* a search of tool results (``role_filter`` with "tool", whose text the indexes cut or
  leave out), of reasoning (``include_reasoning``) or of a file without FTS5 tables: a LIKE
  scan of the query's terms with its AND/OR/NOT, newest (or oldest) first.

PostgreSQL and MariaDB take the same routes with their own word engine (``tsvector``,
FULLTEXT) and LIKE for the substring ones (served by ``pg_trgm`` on PostgreSQL).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .. import statements
from ..content import decoded_content, from_server
from ..errors import InvalidInputError, InvalidInputTypeError
from ..search_query import (
    Term,
    contains_cjk,
    operand_tokens,
    query_terms,
    quote_tokens,
    sanitize_fts5_query,
    trigram_route,
    trigram_tokens,
)
from ..statements import Capabilities
from ..statements.search import SearchFilter
from ..validation import require_flag, require_int, require_text
from .core import MAX_BATCH, Body, Plan, Row, Step
from .reads import _constant
from .session_listing import SessionListingPlans, escape_like

#: The keys of a hit, in upstream's order (``fields`` picks among them).
RESULT_FIELDS: Final = (
    "id",
    "session_id",
    "role",
    "snippet",
    "timestamp",
    "tool_name",
    "source",
    "model",
    "session_started",
    "context",
)
#: The most hits one call returns, and the furthest page it may skip to.
MAX_SEARCH_LIMIT: Final = MAX_BATCH
MAX_SEARCH_OFFSET: Final = 1_000_000
#: A context message shows at most this many characters (upstream's cut).
CONTEXT_CHARS: Final = 200
#: Sessions whose messages upstream's trigram index leaves out (with delegated children).
UNINDEXED_SOURCES: Final = ("cron", "subagent")
#: A server snippet: about this many characters either side of the first match.
_SNIPPET_REACH: Final = 120
_WORDS: Final = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class _Search:
    """What ``search_messages`` was asked for, checked."""

    expression: str
    chosen: SearchFilter
    lists: dict[str, list[str]]
    order: str | None
    page: dict[str, int]
    fields: tuple[str, ...]
    reasoning: bool
    tool_rows: bool
    unindexed: bool
    context: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", "context" in self.fields)

    def params(self, dialect: str, **more: Any) -> dict[str, Any]:
        params: dict[str, Any] = {
            name: statements.list_parameter(values, dialect) for name, values in self.lists.items()
        }
        params.update(self.page, **more)
        return params


def _names(name: str, value: object) -> list[str] | None:
    """A list of names (None: no filter). One name alone is refused: upstream would read its
    characters as names."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        kind = type(value).__name__
        raise InvalidInputTypeError(f"{name} must be a list of names (or None), not {kind}")
    return list(dict.fromkeys(require_text(name, item, nullable=False) or "" for item in value))


def _bounded(name: str, value: object, maximum: int) -> int:
    number = require_int(name, value)
    if not 0 <= number <= maximum:
        raise InvalidInputError(f"{name} must be between 0 and {maximum}, not {number}")
    return number


def _fields(fields: object) -> tuple[str, ...]:
    if fields is None:
        return RESULT_FIELDS
    if isinstance(fields, str | bytes) or not isinstance(fields, Iterable):
        raise InvalidInputTypeError(
            f"fields must be a collection of field names, not {type(fields).__name__}"
        )
    wanted = set(fields)
    unknown = sorted(str(name) for name in wanted.difference(RESULT_FIELDS))
    if unknown:
        raise InvalidInputError(
            f"unknown search result field(s): {', '.join(unknown)}; "
            f"choose among {', '.join(RESULT_FIELDS)}"
        )
    return tuple(name for name in RESULT_FIELDS if name in wanted)


def _order(sort: object) -> str | None:
    """``sort`` as an order: "newest", "oldest", or None (relevance) for anything else, as
    upstream passes a caller's text through."""
    if isinstance(sort, str) and sort.strip().lower() in statements.SEARCH_ORDERS:
        return sort.strip().lower()
    return None


# -- snippets and context ---------------------------------------------------------------------


def _text_of(content: Any, server: bool) -> str:
    """A message's content as text: multimodal parts' text joined (or a placeholder)."""
    value = decoded_content(from_server(content) if server else content)
    if isinstance(value, list):
        parts = [
            str(part.get("text") or "")
            for part in value
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        return " ".join(part for part in parts if part).strip() or "[multimodal content]"
    return value if isinstance(value, str) else ""


def _cut_around(texts: Sequence[Any], term: str) -> str:
    """Upstream's LIKE snippet: 120 characters of the first of ``texts`` (content, tool name,
    tool calls) holding the term, from 40 before its first occurrence (or of the content from
    its start)."""
    stored = [text for text in texts if isinstance(text, str)]
    needle = term.casefold()
    chosen = next((text for text in stored if needle and needle in text.casefold()), None)
    if chosen is None:
        chosen = texts[0] if texts and isinstance(texts[0], str) else ""
    start = max(1, chosen.find(term) + 1 - 40)
    return chosen[start - 1 : start - 1 + 120]


def _highlighted(text: str, words: Sequence[str]) -> str:
    """A server snippet: the text around the first match, each matched word ``>>>``/``<<<``
    marked, ``...`` where it was cut."""
    if not words:
        return text[: 2 * _SNIPPET_REACH]
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.I)
    first = pattern.search(text)
    at = first.start() if first else 0
    start, end = max(0, at - _SNIPPET_REACH), min(len(text), at + _SNIPPET_REACH)
    marked = pattern.sub(lambda m: f">>>{m.group(0)}<<<", text[start:end])
    return ("..." if start else "") + marked + ("..." if end < len(text) else "")


def _positive(groups: list[list[Term]]) -> list[str]:
    return [term.text for group in groups for term in group if not term.negated]


def _snippets(caps: Capabilities, rows: list[Row], groups: list[list[Term]]) -> list[Row]:
    """Every hit with its ``snippet`` (rows from SQLite's FTS routes have one already)."""
    server = caps.name != "sqlite"
    terms = _positive(groups)
    words = [word for term in terms for word in _WORDS.findall(term)] or terms
    for row in rows:
        if "snippet" in row:
            continue
        content = row.pop("content", None)
        calls = row.pop("tool_calls", None)
        if server:
            text = _text_of(content, server) or str(row.get("tool_name") or calls or "")
            row["snippet"] = _highlighted(text, words)
        else:
            texts = [content, row.get("tool_name"), calls]
            row["snippet"] = _cut_around(texts, terms[0] if terms else "")
    return rows


def _with_context(caps: Capabilities, rows: list[Row]) -> Body[list[Row]]:
    """Each hit's ``context``: the message before it in its session, itself, the one after."""
    dialect = caps.name
    ids = [int(row["id"]) for row in rows]
    around = yield Step(
        statements.neighbour_ids(dialect), {"ids": statements.search_id_list(ids, dialect)}
    )
    sides = {int(r["id"]): (r["before_id"], r["after_id"]) for r in around.rows}
    wanted = set(ids) | {i for pair in sides.values() for i in pair if i is not None}
    fetched = yield Step(
        statements.messages_by_ids(dialect),
        {"ids": statements.search_id_list(sorted(wanted), dialect)},
    )
    server = dialect != "sqlite"
    shown = {
        int(r["id"]): {"role": r["role"], "content": _text_of(r["content"], server)[:CONTEXT_CHARS]}
        for r in fetched.rows
    }
    for row in rows:
        before, after = sides.get(int(row["id"]), (None, None))
        chain = [before, int(row["id"]), after]
        row["context"] = [dict(shown[i]) for i in chain if i is not None and i in shown]
    return rows


def _finished(caps: Capabilities, search: _Search, rows: list[Row]) -> Body[list[Row]]:
    if rows and search.context:
        rows = yield from _with_context(caps, rows)
    return [{name: row[name] for name in search.fields if name in row} for row in rows]


# -- routes -----------------------------------------------------------------------------------


def _pattern(term: Term, by_words: bool) -> str:
    """A term's LIKE pattern: its text anywhere, or (``by_words``, as a word engine reads a
    term) its words in order with anything between them."""
    words = _WORDS.findall(term.text) if by_words else []
    if not words:
        return f"%{escape_like(term.text)}%"
    return "%" + "%".join(escape_like(word) for word in words) + "%"


def _like(
    caps: Capabilities,
    search: _Search,
    groups: list[list[Term]],
    order: str | None,
    *,
    by_words: bool = False,
) -> Body[list[Row]]:
    """The LIKE route over the terms' OR-groups."""
    if not groups:
        return []
    dialect = caps.name
    shape = tuple(tuple(term.negated for term in group) for group in groups)
    patterns = {
        f"t{g}_{t}": _pattern(term, by_words)
        for g, group in enumerate(groups)
        for t, term in enumerate(group)
    }
    statement = statements.like_hits(dialect, shape, order, search.chosen, search.reasoning)
    found = yield Step(statement, search.params(dialect, **patterns))
    return _snippets(caps, found.rows, groups)


def _any_token(expression: str) -> list[list[Term]]:
    """A CJK query's LIKE terms: each operand token on its own, any of them (upstream's)."""
    raw = expression.strip('"').strip()
    tokens = [token.strip('"*') for token in operand_tokens(raw)] or [raw]
    return [[Term(token)] for token in tokens if token]


def _ranked_page(
    search: _Search,
    dialect: str,
    candidates: Any,
    rest: Any,
    best_first: bool,
    match: dict[str, Any],
) -> Body[list[int]]:
    """The ids of one page by relevance: the candidates (a bounded set of the matches, the
    same for every page) ranked, then the matches past them, newest first. ``best_first``:
    a higher relevance is better (PostgreSQL's ``ts_rank``; FTS5's rank is lower-better)."""
    cap = (
        statements.SQLITE_RANKED_CANDIDATES
        if dialect == "sqlite"
        else (statements.PG_RANKED_CANDIDATES)
    )
    lists = {name: statements.list_parameter(v, dialect) for name, v in search.lists.items()}
    pool = yield Step(candidates, {**lists, **match, "candidates": cap})
    sign = -1.0 if best_first else 1.0
    ranked = [
        int(row["id"])
        for row in sorted(pool.rows, key=lambda r: (sign * float(r["relevance"]), -int(r["id"])))
    ]
    limit, offset = search.page["limit"], search.page["offset"]
    page = ranked[offset : offset + limit]
    if len(pool.rows) < cap or offset + limit <= cap:
        return page  # every match was a candidate, or the page ends among them
    past = yield Step(
        rest,
        {
            **lists,
            **match,
            "exclude": statements.search_id_list(ranked, dialect),
            "limit": offset + limit - max(cap, offset),
            "offset": max(0, offset - cap),
        },
    )
    return page + [int(row["id"]) for row in past.rows]


def _in_page_order(rows: list[Row], ids: list[int]) -> list[Row]:
    place = {hit: number for number, hit in enumerate(ids)}
    return sorted(rows, key=lambda row: place[int(row["id"])])


def _fts(search: _Search, index: str, query: str) -> Body[list[Row]]:
    """One FTS5 index's page: by time in one statement; by relevance, the page's ids first
    (:func:`_ranked_page`), then their rows and snippets, reached by rowid."""
    if search.order is not None:
        statement = statements.fts_hits(index, search.order, search.chosen)
        hits = yield Step(statement, search.params("sqlite", query=query))
        return hits.rows
    ids = yield from _ranked_page(
        search,
        "sqlite",
        statements.fts_candidates(index, search.chosen),
        statements.fts_rest(index, search.chosen),
        False,
        {"query": query},
    )
    if not ids:
        return []
    lists = {name: statements.list_parameter(v, "sqlite") for name, v in search.lists.items()}
    found = yield Step(
        statements.fts_hits(index, None, search.chosen, True),
        {**lists, "query": query, "ids": statements.search_id_list(ids, "sqlite")},
    )
    return _in_page_order(found.rows, ids)


def _tsvector(search: _Search, query: str) -> Body[list[Row]]:
    """PostgreSQL's word page, as :func:`_fts`."""
    if search.order is not None:
        statement = statements.tsvector_hits(search.order, search.chosen)
        hits = yield Step(statement, search.params("postgresql", query=query))
        return hits.rows
    ids = yield from _ranked_page(
        search,
        "postgresql",
        statements.tsvector_candidates(search.chosen),
        statements.tsvector_rest(search.chosen),
        True,
        {"query": query},
    )
    if not ids:
        return []
    found = yield Step(statements.tsvector_hits(None, search.chosen, True), {"ids": ids})
    return _in_page_order(found.rows, ids)


def _sqlite(caps: Capabilities, search: _Search) -> Body[list[Row]]:
    found = yield Step(statements.search_indexes(), {})
    indexes = {str(row["name"]) for row in found.rows}
    expression = search.expression
    if "messages_fts" not in indexes:  # a file without upstream's FTS5 tables
        return (yield from _like(caps, search, query_terms(expression), search.order))
    trigram = "messages_fts_trigram" in indexes
    raw = expression.strip('"').strip()
    if contains_cjk(expression):
        if trigram and trigram_route(expression) and not search.unindexed:
            return (yield from _fts(search, "messages_fts_trigram", quote_tokens(raw)))
        return (yield from _like(caps, search, _any_token(expression), "newest"))
    hits = yield from _fts(search, "messages_fts", expression)
    if hits or not trigram or not trigram_tokens(expression):
        return hits
    return (yield from _fts(search, "messages_fts_trigram", quote_tokens(raw)))


def _websearch(groups: list[list[Term]]) -> str:
    """PostgreSQL: the terms as ``websearch_to_tsquery`` text, every term quoted (so a word
    such as "or" is never read as its operator)."""
    alternatives = []
    for group in groups:
        parts = []
        for term in group:
            words = _WORDS.findall(term.text)
            if words:
                parts.append(("-" if term.negated else "") + '"' + " ".join(words) + '"')
        if parts:
            alternatives.append(" ".join(parts))
    return " or ".join(alternatives)


#: MariaDB/MySQL: InnoDB's FULLTEXT index holds no word shorter or longer than these (its
#: ``innodb_ft_min_token_size`` and ``innodb_ft_max_token_size`` defaults); a query with one
#: takes the LIKE route.
FULLTEXT_WORD_SIZES: Final = (3, 84)


def _boolean_mode(groups: list[list[Term]]) -> str:
    """MariaDB/MySQL: the terms as a boolean-mode expression of words only (``+word``,
    ``+word*``, ``+"a phrase"``, ``-word``), each OR-group in parentheses."""
    alternatives = []
    for group in groups:
        parts = []
        for term in group:
            words = _WORDS.findall(term.text)
            if not words:
                continue
            if len(words) > 1 or term.phrase:
                body = '"' + " ".join(words) + '"'
            else:
                body = words[0] + ("*" if term.prefix else "")
            parts.append(("-" if term.negated else "+") + body)
        if parts:
            alternatives.append(" ".join(parts))
    if len(alternatives) == 1:
        return alternatives[0]
    return " ".join(f"({alternative})" for alternative in alternatives)


def _server(caps: Capabilities, search: _Search) -> Body[list[Row]]:
    dialect = caps.name
    expression = search.expression
    if contains_cjk(expression):
        return (yield from _like(caps, search, _any_token(expression), "newest"))
    groups = query_terms(expression)
    words = [w for term in (t for g in groups for t in g) for w in _WORDS.findall(term.text)]
    if not words:
        return []
    if dialect == "postgresql":
        rows = yield from _tsvector(search, _websearch(groups))
        retry = not rows and trigram_tokens(expression)
    elif not all(low <= len(word) <= high for word in words for low, high in [FULLTEXT_WORD_SIZES]):
        return (yield from _like(caps, search, groups, search.order, by_words=True))
    else:
        statement = statements.fulltext_hits(dialect, search.order, search.chosen)
        hits = yield Step(statement, search.params(dialect, query=_boolean_mode(groups)))
        rows = hits.rows
        retry = not rows  # a stopword the index left out, or a substring
    if retry:
        return (yield from _like(caps, search, groups, search.order, by_words=True))
    return _snippets(caps, rows, groups)


def _search(caps: Capabilities, search: _Search) -> Body[list[Row]]:
    if search.reasoning or search.tool_rows:
        rows = yield from _like(caps, search, query_terms(search.expression), search.order)
    elif caps.name == "sqlite":
        rows = yield from _sqlite(caps, search)
    else:
        rows = yield from _server(caps, search)
    return (yield from _finished(caps, search, rows))


def _ranked_by_id(
    caps: Capabilities, listing: Plan[list[Row]], needle: str, limit: int
) -> Body[list[Row]]:
    rows: list[Row] = yield from listing.start(caps)

    def score(row: Row) -> int:
        ids = [str(row.get(k) or "").lower() for k in ("id", "_lineage_root_id")]
        ids = [value for value in ids if value]
        if needle in ids:
            return 0
        return 1 if any(value.startswith(needle) for value in ids) else 2

    ranked = sorted(enumerate(rows), key=lambda pair: (score(pair[1]), pair[0]))
    return [row for _, row in ranked[:limit]]


class SearchPlans(SessionListingPlans):
    """The search operations of :class:`~hermes_state.plans.PlanBook` (the search of
    sessions by id reads the session listing)."""

    def search_messages(
        self,
        query: object,
        source_filter: object = None,
        exclude_sources: object = None,
        role_filter: object = None,
        limit: object = 20,
        offset: object = 0,
        sort: object = None,
        include_inactive: object = False,
        fields: object = None,
        include_reasoning: object = False,
    ) -> Plan[list[Row]]:
        if not isinstance(query, str):
            kind = type(query).__name__
            raise InvalidInputTypeError(f"query must be a str, not {kind}")
        text = query
        sources = _names("source_filter", source_filter)
        excluded = _names("exclude_sources", exclude_sources)
        roles = _names("role_filter", role_filter) or []
        page = {
            "limit": _bounded("limit", limit, MAX_SEARCH_LIMIT),
            "offset": _bounded("offset", offset, MAX_SEARCH_OFFSET),
        }
        inactive = require_flag("include_inactive", include_inactive)
        reasoning = require_flag("include_reasoning", include_reasoning)
        chosen_fields = _fields(fields)
        expression = sanitize_fts5_query(text) if text.strip() else ""
        if not expression or page["limit"] == 0 or sources == []:
            return Plan(_constant, [], writes=False)
        lists: dict[str, list[str]] = {}
        if sources:
            lists["sources"] = sources
        if excluded:
            lists["exclude_sources"] = excluded
        if roles:
            lists["roles"] = roles
        search = _Search(
            expression=expression,
            chosen=SearchFilter(
                include_inactive=inactive,
                by_sources=bool(sources),
                excluding_sources=bool(excluded),
                by_roles=bool(roles),
            ),
            lists=lists,
            order=_order(sort),
            page=page,
            fields=chosen_fields,
            reasoning=reasoning,
            tool_rows="tool" in roles,
            unindexed="tool" in roles or any(s in UNINDEXED_SOURCES for s in sources or []),
        )
        return Plan(_search, search, writes=False, single_statement=False)

    def search_sessions_by_id(
        self,
        query: object,
        limit: object = 20,
        include_archived: object = True,
        source: object = None,
        sources: object = None,
        exclude_sources: object = None,
    ) -> Plan[list[Row]]:
        needle = (require_text("query", query) or "").strip().lower()
        count = require_int("limit", limit)
        if not needle or count <= 0:
            return Plan(_constant, [], writes=False)
        count = min(count, MAX_SEARCH_LIMIT)
        listing = self.list_sessions_rich(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            limit=count * 4,
            offset=0,
            include_archived=include_archived,
            order_by_last_active=True,
            id_query=needle,
        )
        return Plan(_ranked_by_id, listing, needle, count, writes=False, single_statement=False)
