"""The plans of the session listings: the rich list, its counts and search_sessions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .. import statements
from ..errors import InvalidInputError, InvalidInputTypeError
from ..statements import Capabilities, SessionFilter
from ..validation import require_text
from .core import Body, Plan, Row, Step
from .reads import _constant

#: A preview shows at most this many characters of the first user message, then "...".
PREVIEW_MAX_CHARS: Final = 60

#: What a projected row takes from the tip of its compression chain (the root keeps its own
#: ``started_at``, so a conversation keeps its place in the list as it is compressed).
TIP_FIELDS: Final = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "last_active",
    "preview",
    "model",
    "system_prompt",
    "cwd",
    "git_branch",
    "git_repo_root",
)


def escape_like(text: str) -> str:
    """``text`` matched literally in a LIKE pattern escaped with ``statements.LIKE_ESCAPE``."""
    escape = statements.LIKE_ESCAPE
    return (
        text.replace(escape, escape + escape).replace("%", escape + "%").replace("_", escape + "_")
    )


def shape_preview(raw: object) -> str:
    """The preview a listing shows: the text on one line, at most :data:`PREVIEW_MAX_CHARS`
    characters and "..." when cut."""
    text = str(raw or "").strip()
    if not text:
        return ""
    text = text.replace("\n", " ").replace("\r", " ")
    return text[:PREVIEW_MAX_CHARS] + "..." if len(text) > PREVIEW_MAX_CHARS else text


def session_unread(row: Mapping[str, Any]) -> bool:
    """Whether the session was active after it was last read (never read: not unread)."""
    last_read = row.get("last_read_at")
    if last_read is None:
        return False
    last_active = row.get("last_active") or row.get("started_at")
    return float(last_active or 0) > float(last_read)


# -- checks -----------------------------------------------------------------------------------


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputTypeError(f"{name} must be True or False, not {type(value).__name__}")
    return value


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise InvalidInputError(f"{name} must be 0 or more, not {value}")
    return value


def _text(name: str, value: object) -> str:
    """A filter's text: '' and None both mean "no filter" (as upstream's truthiness tests)."""
    if value is None:
        return ""
    return require_text(name, value, nullable=False) or ""


def _names(name: str, value: object) -> list[str]:
    """A list of source names (None or empty: no filter); one name alone is refused."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInputTypeError(f"{name} must be a list of names, not {type(value).__name__}")
    return list(dict.fromkeys(_text(name, item) for item in value))


#: ``scope`` of a listing or count: "own" (only the requester's Telegram DMs) or "admin" (no
#: restriction, as None).
SCOPES: Final = ("own", "admin")


def _requester(scope: object, requester_user_id: object) -> str | None:
    """The user whose own direct messages a scoped call may see, or None: no restriction."""
    if scope is None or scope == "admin":
        return None
    if scope != "own":
        raise InvalidInputError(f"scope must be one of {', '.join(SCOPES)} or None, not {scope!r}")
    if isinstance(requester_user_id, bool) or not isinstance(requester_user_id, str | int):
        raise InvalidInputError("scope='own' needs requester_user_id, the user it lists for")
    requester = _text("requester_user_id", str(requester_user_id))
    if not requester:
        raise InvalidInputError("scope='own' needs requester_user_id, the user it lists for")
    return requester


def session_row_is_own_dm(session: Mapping[str, Any], requester_user_id: object) -> bool:
    """Whether an already-read session row is a Telegram direct message with
    ``requester_user_id``: the row-by-row form of what ``scope='own'`` lists."""
    if not requester_user_id:
        return False
    if session.get("source") != "telegram" or session.get("chat_type") != "dm":
        return False
    chat_id = session.get("chat_id")
    return bool(chat_id) and str(chat_id) == str(requester_user_id)


def _below(directory: str) -> dict[str, str]:
    """The parameters of a directory filter: the directory (trailing separators dropped) and
    the patterns of what lies below it."""
    prefix = directory.rstrip("/\\") or directory
    escaped = escape_like(prefix)
    return {"cwd": prefix, "cwd_below": f"{escaped}/%", "cwd_below_windows": f"{escaped}\\%"}


@dataclass(frozen=True, slots=True)
class _Filtered:
    """A :class:`SessionFilter` and the values of its parameters."""

    chosen: SessionFilter
    values: dict[str, Any] = field(default_factory=dict)

    def params(self, dialect: str, **more: Any) -> dict[str, Any]:
        """The bind parameters on ``dialect`` (lists as it binds them), with ``more``."""
        params = dict(self.values)
        for name in ("sources", "exclude_sources"):
            if name in params:
                params[name] = statements.list_parameter(params[name], dialect)
        params.update(more)
        return params


def _filtered(
    *,
    source: object = None,
    sources: object = None,
    exclude_sources: object = None,
    cwd_prefix: object = None,
    min_message_count: object = 0,
    include_archived: object = False,
    archived_only: object = False,
    exclude_children: object = False,
    session_key: object = None,
    visible_only: bool = False,
    requester: str | None = None,
) -> _Filtered:
    one = _text("source", source)
    included = [one] if one else _names("sources", sources)
    excluded = _names("exclude_sources", exclude_sources)
    directory = _text("cwd_prefix", cwd_prefix)
    key = _text("session_key", session_key)
    least = _whole("min_message_count", min_message_count)
    only = _flag("archived_only", archived_only)
    with_archived = _flag("include_archived", include_archived)
    values: dict[str, Any] = {}
    if included:
        values["sources"] = included
    if key:
        values["session_key"] = key
    if excluded:
        values["exclude_sources"] = excluded
    if directory:
        values.update(_below(directory))
    if least > 0:
        values["min_message_count"] = least
    if requester is not None:
        values["requester_user_id"] = requester
    chosen = SessionFilter(
        listable_only=_flag("exclude_children", exclude_children),
        by_sources=bool(included),
        by_session_key=bool(key),
        excluding_sources=bool(excluded),
        by_cwd=bool(directory),
        by_message_count=least > 0,
        archived="only" if only else "any" if with_archived else "live",
        visible_only=visible_only,
        own_dm=requester is not None,
    )
    return _Filtered(chosen, values)


# -- bodies -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Listing:
    """What ``list_sessions_rich`` was asked for, checked."""

    filtered: _Filtered
    page: dict[str, int]
    compact: bool
    by_activity: bool
    search: dict[str, str]
    pinned: bool
    project: bool


def _listed(row: Row) -> Row:
    """A listed row as callers get it: the preview shaped, the sort key dropped."""
    row["preview"] = shape_preview(row.pop("_preview_raw", ""))
    row.pop("_effective_last_active", None)
    return row


def _chains(rows: list[Row]) -> dict[str, list[str]]:
    """``{root: [root, ..., tip]}`` from the walk's rows, each chain cut before a segment it
    already holds (a cycle written by hand)."""
    chains: dict[str, list[str]] = {}
    cut: set[str] = set()
    for row in rows:
        root, segment = str(row["root_id"]), str(row["cur_id"])
        chain = chains.setdefault(root, [])
        if root in cut or segment in chain:
            cut.add(root)
            continue
        chain.append(segment)
    return chains


def _project_tips(caps: Capabilities, rows: list[Row], compact: bool) -> Body[list[Row]]:
    """Each compressed conversation of ``rows`` shown as its live tip (see :data:`TIP_FIELDS`),
    with ``_lineage_root_id`` and ``_lineage_ids`` (every segment, root first)."""
    dialect = caps.name
    roots = [str(row["id"]) for row in rows if row.get("end_reason") == statements.COMPRESSION]
    if not roots:
        return rows
    walked = yield Step(
        statements.compression_chains(dialect),
        {"ids": statements.list_parameter(roots, dialect)},
    )
    chains = {root: chain for root, chain in _chains(walked.rows).items() if len(chain) > 1}
    if not chains:
        return rows
    tip_ids = sorted({chain[-1] for chain in chains.values()})
    fetched = yield Step(
        statements.rich_sessions_by_id(dialect, compact),
        {"ids": statements.list_parameter(tip_ids, dialect)},
    )
    tips = {str(row["id"]): _listed(row) for row in fetched.rows}
    projected = []
    for row in rows:
        chain = chains.get(str(row["id"]))
        tip = tips.get(chain[-1]) if chain else None
        if chain is None or tip is None:
            projected.append(row)
            continue
        merged = dict(row)
        merged.update({key: tip[key] for key in TIP_FIELDS if key in tip})
        if merged.get("title") is None:
            merged["title"] = row.get("title")  # a rotation may not have carried it yet
        merged["_lineage_root_id"] = row["id"]
        merged["_lineage_ids"] = chain
        projected.append(merged)
    return projected


def _list_rich(caps: Capabilities, listing: _Listing) -> Body[list[Row]]:
    dialect = caps.name
    filtered = listing.filtered
    if listing.by_activity:
        page_statement = statements.rich_sessions_by_activity(
            dialect,
            filtered.chosen,
            listing.compact,
            by_id="id_pattern" in listing.search,
            by_text="text_pattern" in listing.search,
            by_compact_text="compact_pattern" in listing.search,
        )
    else:
        page_statement = statements.rich_sessions(dialect, filtered.chosen, listing.compact)
    page = yield Step(page_statement, filtered.params(dialect, **listing.page, **listing.search))
    rows = [_listed(row) for row in page.rows]
    if listing.pinned:
        # Pins the page missed, under the same filters (the search aside), after it.
        pinned = yield Step(
            statements.pinned_sessions(dialect, filtered.chosen, listing.compact),
            filtered.params(dialect),
        )
        seen = {row["id"] for row in rows}
        for row in pinned.rows:
            if row["id"] not in seen:
                seen.add(row["id"])
                rows.append(_listed(row))
    if listing.project:
        rows = yield from _project_tips(caps, rows, listing.compact)
    for row in rows:
        row["unread"] = session_unread(row)
    return rows


def _count_listed(caps: Capabilities, filtered: _Filtered) -> Body[int]:
    statement = statements.count_listed_sessions(caps.name, filtered.chosen)
    outcome = yield Step(statement, filtered.params(caps.name))
    return int(outcome.rows[0]["count"]) if outcome.rows else 0


def _count_by_source(caps: Capabilities, filtered: _Filtered) -> Body[dict[str, int]]:
    statement = statements.count_sessions_by_source(caps.name, filtered.chosen)
    outcome = yield Step(statement, filtered.params(caps.name))
    return {str(row["source"]): int(row["count"] or 0) for row in outcome.rows}


def _at_least(_caps: Capabilities, n: int) -> Body[bool]:
    outcome = yield Step(statements.some_sessions(), {"limit": n})
    return len(outcome.rows) >= n


@dataclass(frozen=True, slots=True)
class _Search:
    sources: list[str]
    workspace: dict[str, str]
    page: dict[str, int]


def _search_sessions(caps: Capabilities, search: _Search) -> Body[list[Row]]:
    dialect = caps.name
    statement = statements.search_sessions(
        dialect, by_sources=bool(search.sources), by_workspace=bool(search.workspace)
    )
    params: dict[str, Any] = {**search.workspace, **search.page}
    if search.sources:
        params["sources"] = statements.list_parameter(search.sources, dialect)
    outcome = yield Step(statement, params)
    return outcome.rows


def _search_patterns(id_query: object, search_query: object) -> dict[str, str]:
    """The LIKE patterns of ``list_sessions_rich``'s id and text searches (lowercase)."""
    patterns: dict[str, str] = {}
    id_needle = _text("id_query", id_query).strip().lower()
    if id_needle:
        patterns["id_pattern"] = f"%{escape_like(id_needle)}%"
    needle = _text("search_query", search_query).strip().lower()
    if needle:
        patterns["text_pattern"] = f"%{escape_like(needle)}%"
        # "an94" finds "AN-94": the title is also compared without its separators.
        compact = re.sub(r"[\W_]+", "", needle)
        if compact:
            patterns["compact_pattern"] = f"%{escape_like(compact)}%"
    return patterns


class SessionListingPlans:
    """The session listing operations of :class:`~hermes_state.plans.PlanBook`."""

    def list_sessions_rich(
        self,
        source: object = None,
        sources: object = None,
        exclude_sources: object = None,
        cwd_prefix: object = None,
        limit: object = 20,
        offset: object = 0,
        include_children: object = False,
        min_message_count: object = 0,
        project_compression_tips: object = True,
        order_by_last_active: object = False,
        include_archived: object = False,
        archived_only: object = False,
        id_query: object = None,
        search_query: object = None,
        compact_rows: object = False,
        include_pinned: object = False,
        session_key: object = None,
        include_hidden: object = False,
        scope: object = None,
        requester_user_id: object = None,
    ) -> Plan[list[Row]]:
        children = _flag("include_children", include_children)
        only_archived = _flag("archived_only", archived_only)
        # The archived view is where rows hidden from every other list are found again.
        hidden_too = _flag("include_hidden", include_hidden) or only_archived
        by_activity = _flag("order_by_last_active", order_by_last_active)
        search = _search_patterns(id_query, search_query)
        listing = _Listing(
            filtered=_filtered(
                source=source,
                sources=sources,
                exclude_sources=exclude_sources,
                cwd_prefix=cwd_prefix,
                min_message_count=min_message_count,
                include_archived=include_archived,
                archived_only=only_archived,
                exclude_children=not children,
                session_key=session_key,
                visible_only=not hidden_too,
                requester=_requester(scope, requester_user_id),
            ),
            page={"limit": _whole("limit", limit), "offset": _whole("offset", offset)},
            compact=_flag("compact_rows", compact_rows),
            by_activity=by_activity,
            search=search if by_activity else {},  # only the activity order searches
            pinned=_flag("include_pinned", include_pinned),
            project=_flag("project_compression_tips", project_compression_tips) and not children,
        )
        return Plan(_list_rich, listing, writes=False, single_statement=False)

    def session_count(
        self,
        source: object = None,
        sources: object = None,
        cwd_prefix: object = None,
        min_message_count: object = 0,
        include_archived: object = False,
        archived_only: object = False,
        exclude_children: object = False,
        exclude_sources: object = None,
        scope: object = None,
        requester_user_id: object = None,
    ) -> Plan[int]:
        filtered = _filtered(
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=exclude_children,
            requester=_requester(scope, requester_user_id),
        )
        return Plan(_count_listed, filtered, writes=False)

    def session_count_ge(self, n: object = 1) -> Plan[bool]:
        if isinstance(n, bool) or not isinstance(n, int):
            raise InvalidInputTypeError(f"n must be an int, not {type(n).__name__}")
        if n <= 0:
            return Plan(_constant, True, writes=False)
        return Plan(_at_least, n, writes=False)

    def session_count_by_source(
        self,
        *,
        include_archived: object = False,
        archived_only: object = False,
        exclude_children: object = False,
    ) -> Plan[dict[str, int]]:
        filtered = _filtered(
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=exclude_children,
        )
        return Plan(_count_by_source, filtered, writes=False)

    def search_sessions(
        self,
        source: object = None,
        limit: object = 20,
        offset: object = 0,
        workspace_key: object = None,
    ) -> Plan[list[Row]]:
        if isinstance(source, str):
            sources = [source] if _text("source", source) else []
        else:
            sources = _names("source", source)
        workspace = _text("workspace_key", workspace_key)
        search = _Search(
            sources=sources,
            workspace=_below(workspace) if workspace else {},
            page={"limit": _whole("limit", limit), "offset": _whole("offset", offset)},
        )
        return Plan(_search_sessions, search, writes=False)
