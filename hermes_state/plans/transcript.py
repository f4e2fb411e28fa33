"""Bodies of sessions and their transcript: create, append, read one or many."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from .. import statements
from ..content import decoded_content, from_server, to_server
from ..errors import CompressionSessionClosedError, HermesStateError, UnknownSessionError
from ..statements import Capabilities
from .core import Body, Row, Step
from .turn_leases import _hold_turn


def _stored(caps: Capabilities, params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A message's parameters with its content as this dialect stores it: upstream's form on
    SQLite, the server form (:mod:`hermes_state.content`) elsewhere."""
    content = params["content"]
    if caps.name == "sqlite" or not content:
        return params
    return {**params, "content": to_server(content)}


def _append_message(
    caps: Capabilities, params: Mapping[str, Any], turn: Mapping[str, Any] | None = None
) -> Body[int]:
    params = _stored(caps, params)
    if turn is not None:  # fenced on the turn lease: the lineage walk, the lease, then the write
        yield from _hold_turn(turn)
    elif caps.single_statement:
        appended = yield Step(statements.append_message_counted(), params)
        row = appended.rows[0]
        if row["id"] is None:
            raise _refusal(params["session_id"], closed=bool(row["closed"]))
        return int(row["id"])
    returning = caps.insert_returning
    outcome = yield Step(
        statements.append_message(returning), params, wants_lastrowid=not returning
    )
    if outcome.rowcount == 0 and not outcome.rows:
        yield from _refuse_append(params["session_id"])
    if outcome.rows:
        message_id = int(outcome.rows[0]["id"])
    elif outcome.lastrowid is None:
        raise HermesStateError("the database driver reported no id for the inserted message")
    else:
        message_id = outcome.lastrowid
    yield Step(statements.count_appended_message(), params)
    return message_id


def _refusal(session_id: str, *, closed: bool) -> HermesStateError:
    return CompressionSessionClosedError(session_id) if closed else _unknown_session(session_id)


def _refuse_append(session_id: str) -> Body[NoReturn]:
    """Raise why an append that needed the session open wrote nothing: there is no such
    session, or compression closed it."""
    found = yield Step(statements.session_closed(), {"session_id": session_id})
    raise _refusal(session_id, closed=bool(found.rows and found.rows[0]["closed"]))


def _unknown_session(session_id: str) -> UnknownSessionError:
    return UnknownSessionError(
        f"session {session_id!r} does not exist; create it with create_session first"
    )


#: Columns of upstream's newest files that are its own bookkeeping, not part of a message.
_INTERNAL_MESSAGE_COLUMNS = ("display_identity", "display_order")


def _decoded_json(text: Any, fallback: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return fallback


def _transcript_entry(row: Row, server: bool = False, summary_flag: bool = True) -> Row:
    """A message as upstream's ``get_messages`` returns it: every column, JSON decoded
    (``_compressed_summary`` only when set, as True; as stored without ``summary_flag``)."""
    content = row.get("content")
    if server and isinstance(content, str):
        # Undone, the server form is upstream's: a leading U+FFFF left now was escaped text.
        content = from_server(content)
    row["content"] = decoded_content(content)
    for name in _INTERNAL_MESSAGE_COLUMNS:
        row.pop(name, None)
    if summary_flag and row.pop("_compressed_summary", None):
        row["_compressed_summary"] = True
    if row.get("tool_calls"):
        row["tool_calls"] = _decoded_json(row["tool_calls"], [])
    if row.get("display_metadata") is not None:
        metadata = _decoded_json(row["display_metadata"], None)
        row["display_metadata"] = metadata if isinstance(metadata, dict) else None
    return row


#: What makes two rows one message to a reader: compaction copies the turns it keeps, whole,
#: into each new generation (upstream's key, on the stored values).
_DISPLAY_KEY = ("role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name")


def displayed_once(rows: list[Row]) -> list[Row]:
    """``rows`` (in id order) with each message of several compaction generations once: its
    live row if it has one, else its newest; placed where its first copy was written."""
    chosen: dict[tuple[Any, ...], Row] = {}
    first: dict[tuple[Any, ...], int] = {}
    for row in rows:
        key = tuple(row[name] for name in _DISPLAY_KEY)
        current = chosen.get(key)
        if current is None or (row["active"] or 0, row["id"]) >= (
            current["active"] or 0,
            current["id"],
        ):
            chosen[key] = row
        first.setdefault(key, row["id"])
    return [chosen[key] for key in sorted(chosen, key=first.__getitem__)]


@dataclass(frozen=True, slots=True)
class Page:
    """Which part of a transcript ``get_messages`` returns, as upstream pages it."""

    latest: bool = False
    limit: int | None = None
    offset: int = 0
    after_id: int | None = None


def _transcript(
    caps: Capabilities,
    params: Mapping[str, Any],
    visibility: statements.Visibility = statements.Visibility.LIVE,
    page: Page = Page(),
    once: bool = False,
) -> Body[list[Row]]:
    if once:
        # One message per compaction generation: deduplicated before paging, over the whole
        # display (upstream pages the deduplicated list too).
        outcome = yield Step(statements.get_messages(visibility), params)
        rows = displayed_once(outcome.rows)
        if page.latest:
            rows.reverse()
        rows = rows[page.offset :] if page.limit is None else rows[page.offset :][: page.limit]
        if page.latest:
            rows.reverse()
    else:
        statement = statements.get_messages(
            visibility,
            newest_first=page.latest,
            after=page.after_id is not None,
            limited=page.limit is not None,
            skipped=page.offset > 0,
        )
        outcome = yield Step(statement, params)
        rows = outcome.rows[::-1] if page.latest else outcome.rows
    server = caps.name != "sqlite"
    return [_transcript_entry(row, server) for row in rows]


def _transcripts(caps: Capabilities, ids: list[str]) -> Body[dict[str, list[Row]]]:
    found: dict[str, list[Row]] = {session_id: [] for session_id in ids}
    if caps.name == "sqlite":  # its runner sends no per-call lists: one cheap read per session
        for session_id in ids:
            outcome = yield Step(statements.get_messages(), {"session_id": session_id})
            found[session_id] = [_transcript_entry(row) for row in outcome.rows]
        return found
    outcome = yield Step(statements.get_transcripts(caps.name == "postgresql"), {"ids": ids})
    for row in outcome.rows:
        found[row["session_id"]].append(_transcript_entry(row, server=True))
    return found
