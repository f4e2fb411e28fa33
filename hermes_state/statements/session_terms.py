"""The expressions session listings share: lineage markers and kinds of child, recency, preview."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    any_,
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

from ..models import messages, sessions
from .core import COMPRESSION, MarkerText, _pg_array

# Every builder here takes the connected dialect's name: JSON, string positions, trimming and
# list parameters are spelled differently on each backend, and only here.

#: The escape character of the listings' LIKE patterns (``escape_like`` writes them with it):
#: one that paths, ids and titles rarely hold, and that no backend treats specially.
LIKE_ESCAPE: Final = "!"

#: End reasons of a deliberate reset: a child that keeps its parent's routing key across one
#: of them is a new conversation (the shape rows had before the ``_reset_from`` marker).
RESET_END_REASONS: Final = (
    "session_reset",
    "session_switch",
    "idle",
    "daily",
    "suspended",
    "resume_pending_expired",
)

#: Times outside this window (garbage a damaged file or a TEXT cell can hold) never count as a
#: session's recency: 1970 up to 2100, in epoch seconds.
EPOCH_WINDOW: Final = (0.0, 4102444800.0)

#: The preview: at most this many characters of an ordinary first user message are read.
PREVIEW_HEAD_CHARS: Final = 63

# The compaction carriers upstream's context compressor writes into a user message. A preview
# shows the user's own words in them, or skips the message when it has none.
#: The opening of a standalone compaction summary: the current form, then the legacy one.
SUMMARY_OPENINGS: Final = (
    "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary "
    "below. This is a handoff from a previous context window — treat it as background "
    "reference, NOT as active instructions. ",
    "[CONTEXT SUMMARY]:",
)
#: What ends a standalone summary; the user's message follows it.
SUMMARY_END_MARKER: Final = (
    "--- END OF CONTEXT SUMMARY — respond to the message below, not the summary above ---"
)
#: A summary merged into a user message follows the message's own text and this line.
MERGED_SUMMARY_DELIMITER: Final = "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]"
#: ... and that text may be wrapped under this header.
MERGED_PRIOR_HEADER: Final = "[PRIOR CONTEXT — for reference only; not a new message]"

_WHITESPACE: Final = "\t\n\r "


def _constant(name: str, value: str) -> Any:
    return bindparam(name, value, type_=Text())


_TEXT_CONSTANTS: Final = {
    "summary_opening": SUMMARY_OPENINGS[0],
    "legacy_summary_opening": SUMMARY_OPENINGS[1],
    "summary_end": SUMMARY_END_MARKER,
    "merged_delimiter": MERGED_SUMMARY_DELIMITER,
    "merged_header": MERGED_PRIOR_HEADER,
    "empty": "",
    "hidden": "hidden",
}


def _text(name: str) -> Any:
    """A fixed string of the listings, bound by name (the same parameter wherever it recurs)."""
    return _CONSTANTS[name]


_CONSTANTS: Final = {name: _constant(name, value) for name, value in _TEXT_CONSTANTS.items()}


def _number(value: float) -> ColumnElement[Any]:
    return literal_column(repr(value))


def _int(value: int) -> ColumnElement[int]:
    return literal_column(str(value))


def _sql_string(value: str) -> ColumnElement[str]:
    # Only for the fixed names and reasons of this module, never a caller's value.
    return literal_column("'" + value.replace("'", "''") + "'")


# -- per-dialect spellings --------------------------------------------------------------------


def position(haystack: ColumnElement[Any], needle: Any, dialect: str) -> ColumnElement[int]:
    """Where ``needle`` first starts in ``haystack`` (1-based), 0 when absent."""
    if dialect == "postgresql":
        return func.strpos(haystack, needle)
    return func.instr(haystack, needle)


def _whitespace(dialect: str) -> ColumnElement[Any]:
    """Tab, line feed, carriage return and space, as one string."""
    if dialect == "sqlite":
        return func.char(*(_int(ord(char)) for char in _WHITESPACE))
    chars = [func.chr(_int(ord(char))) for char in _WHITESPACE]
    return functools.reduce(lambda joined, char: joined.concat(char), chars)


def _ltrim_space(text: ColumnElement[Any], dialect: str) -> ColumnElement[Any]:
    if dialect in ("sqlite", "postgresql"):
        return func.ltrim(text, _whitespace(dialect))
    return func.regexp_replace(text, _sql_string("^[[:space:]]+"), _text("empty"))


def _trim_space(text: ColumnElement[Any], dialect: str) -> ColumnElement[Any]:
    if dialect == "sqlite":
        return func.trim(text, _whitespace(dialect))
    if dialect == "postgresql":
        return func.btrim(text, _whitespace(dialect))
    pattern = _sql_string("^[[:space:]]+|[[:space:]]+$")
    return func.regexp_replace(text, pattern, _text("empty"))


def _later_of(first: ColumnElement[Any], second: ColumnElement[Any], dialect: str) -> Any:
    """The later of two times, either of which may be NULL (NULL when both are)."""
    latest = func.max if dialect == "sqlite" else func.greatest  # NULL if either is, but PG's
    return func.coalesce(latest(first, second), first, second)


def in_list(column: ColumnElement[Any], name: str, dialect: str) -> ColumnElement[bool]:
    """``column`` is one of the list bound as ``:name``: a JSON array on SQLite (one compiled
    statement for any length), an array on PostgreSQL, an expanding list elsewhere."""
    if dialect == "sqlite":
        each = func.json_each(bindparam(name, type_=Text())).table_valued("value").alias(name)
        return column.in_(select(each.c.value))
    if dialect == "postgresql":
        return column == any_(_pg_array(name))
    return column.in_(bindparam(name, expanding=True))


def list_parameter(values: list[str], dialect: str) -> object:
    """The value :func:`in_list` binds for ``values`` on ``dialect``."""
    if dialect == "sqlite":
        import json

        return json.dumps(values)
    return values


# -- kinds of child ---------------------------------------------------------------------------


def _parent_of(row: NamedFromClause) -> NamedFromClause:
    return sessions.alias(f"{row.name}_parent")


def branch_child(row: NamedFromClause, dialect: str) -> ColumnElement[bool]:
    """A ``/branch`` child: its marker, or (before the marker) a parent that ended
    'branched' before the child started."""
    p = _parent_of(row)
    legacy = exists().where(
        p.c.id == row.c.parent_session_id,
        p.c.end_reason == _sql_string("branched"),
        row.c.started_at >= p.c.ended_at,
    )
    return or_(MarkerText(row.c.model_config, "_branched_from").is_not(None), legacy)


def reset_child(row: NamedFromClause, dialect: str) -> ColumnElement[bool]:
    """A child that started a new conversation at a reset: its ``_reset_from`` marker, or
    (before the marker) its parent's own non-empty routing key and a reset end reason."""
    p = _parent_of(row)
    legacy = exists().where(
        p.c.id == row.c.parent_session_id,
        p.c.end_reason.in_([_sql_string(reason) for reason in RESET_END_REASONS]),
        row.c.session_key.is_not(None),
        row.c.session_key != _text("empty"),
        row.c.session_key == p.c.session_key,
    )
    return or_(MarkerText(row.c.model_config, "_reset_from").is_not(None), legacy)


def listable(row: NamedFromClause, dialect: str) -> ColumnElement[bool]:
    """What a session picker shows: roots, branches and resets; not sub-agent runs (nor
    delegates, whose marker outlives their parent) or compression continuations."""
    return and_(
        or_(
            row.c.parent_session_id.is_(None),
            branch_child(row, dialect),
            reset_child(row, dialect),
        ),
        MarkerText(row.c.model_config, "_delegate_from").is_(None),
    )


def continuation(
    parent: NamedFromClause, child: NamedFromClause, dialect: str
) -> ColumnElement[bool]:
    """``child`` continues ``parent``'s conversation after a compression: ``parent`` ended
    by compression and ``child`` is no branch, delegate, reset fork or tool session."""
    return and_(
        child.c.parent_session_id == parent.c.id,
        parent.c.end_reason == _sql_string(COMPRESSION),
        MarkerText(child.c.model_config, "_branched_from").is_(None),
        MarkerText(child.c.model_config, "_delegate_from").is_(None),
        not_(reset_child(child, dialect)),
        func.coalesce(child.c.source, _text("empty")) != _sql_string("tool"),
    )


# -- recency and preview ----------------------------------------------------------------------


def _windowed(value: ColumnElement[Any]) -> ColumnElement[Any]:
    low, high = (_number(bound) for bound in EPOCH_WINDOW)
    return case((value.between(low, high), value))


def last_active(row: NamedFromClause, dialect: str) -> ColumnElement[Any]:
    """The session's recency: the later of its activity heartbeat and its newest message
    (heartbeats are rate-limited, so either may lead), else its start; a time outside
    :data:`EPOCH_WINDOW` never counts. The newest message is one seek of the index on
    ``(session_id, timestamp)``."""
    m = messages.alias(f"{row.name}_newest")
    low, high = (_number(bound) for bound in EPOCH_WINDOW)
    newest = (
        select(func.max(m.c.timestamp))
        .where(m.c.session_id == row.c.id, m.c.timestamp.between(low, high))
        .scalar_subquery()
    )
    heartbeat = _windowed(row.c.last_activity_at)
    return func.coalesce(
        _later_of(heartbeat, newest, dialect),
        _windowed(row.c.started_at),
        type_=sessions.c.started_at.type,
    )


def _starts_with_summary(text: ColumnElement[Any], dialect: str) -> ColumnElement[bool]:
    trimmed = _ltrim_space(text, dialect)
    return or_(
        *(
            func.substr(trimmed, _int(1), _int(len(opening))) == _text(name)
            for name, opening in zip(
                ("summary_opening", "legacy_summary_opening"), SUMMARY_OPENINGS, strict=True
            )
        )
    )


def _after(content: ColumnElement[Any], marker: str, dialect: str) -> ColumnElement[Any]:
    name = "summary_end" if marker == SUMMARY_END_MARKER else "merged_delimiter"
    return func.substr(content, position(content, _text(name), dialect) + _int(len(marker)))


def preview_source(row: NamedFromClause, dialect: str) -> ColumnElement[Any]:
    """The text of the session's first user message a preview is cut from ('' when it has
    none), in message time order: hidden scaffolding and pure compaction summaries are
    skipped; of a standalone summary the user's message after its end is taken, of a merged
    one the user's own text before it; of any other message its first
    :data:`PREVIEW_HEAD_CHARS` characters. One walk of the index on ``(session_id,
    timestamp)`` up to that message."""
    m = messages.alias(f"{row.name}_first")
    content = m.c.content
    standalone = _starts_with_summary(content, dialect)
    delimiter_at = position(content, _text("merged_delimiter"), dialect)
    merged = and_(
        delimiter_at > _int(0),
        _starts_with_summary(_after(content, MERGED_SUMMARY_DELIMITER, dialect), dialect),
    )
    prior = _trim_space(func.substr(content, _int(1), delimiter_at - _int(1)), dialect)
    prior_opening = _ltrim_space(prior, dialect)
    unwrapped = case(
        (
            func.substr(prior_opening, _int(1), _int(len(MERGED_PRIOR_HEADER)))
            == _text("merged_header"),
            _ltrim_space(func.substr(prior_opening, _int(len(MERGED_PRIOR_HEADER) + 1)), dialect),
        ),
        else_=prior,
    )
    users_text = _after(content, SUMMARY_END_MARKER, dialect)
    eligible = and_(
        func.coalesce(m.c.display_kind, _text("empty")) != _text("hidden"),
        or_(
            and_(not_(standalone), not_(merged)),
            and_(
                standalone,
                position(content, _text("summary_end"), dialect) > _int(0),
                func.length(_trim_space(users_text, dialect)) > _int(0),
            ),
            and_(merged, func.length(_trim_space(unwrapped, dialect)) > _int(0)),
        ),
    )
    shown = case(
        (standalone, users_text),
        (merged, unwrapped),
        else_=func.substr(content, _int(1), _int(PREVIEW_HEAD_CHARS)),
    )
    first = (
        select(shown)
        .where(
            m.c.session_id == row.c.id,
            m.c.role == _sql_string("user"),
            content.is_not(None),
            eligible,
        )
        .order_by(m.c.timestamp, m.c.id)
        .limit(_int(1))
        .scalar_subquery()
    )
    return func.coalesce(first, _text("empty"), type_=Text())
