"""Bodies of sessions and their transcript: create, append, read one or many."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import statements
from ..content import decoded_content, from_server, to_server
from ..errors import HermesStateError, UnknownSessionError
from ..statements import Capabilities
from .core import Body, Row, Step


def _create_session(caps: Capabilities, params: Mapping[str, Any]) -> Body[str]:
    yield Step(statements.insert_session(caps.name), params)
    return str(params["id"])


def _stored(caps: Capabilities, params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A message's parameters with its content as this dialect stores it: upstream's form on
    SQLite, the server form (:mod:`hermes_state.content`) elsewhere."""
    content = params["content"]
    if caps.name == "sqlite" or not content:
        return params
    return {**params, "content": to_server(content)}


def _append_message(caps: Capabilities, params: Mapping[str, Any]) -> Body[int]:
    params = _stored(caps, params)
    if caps.single_statement:
        appended = yield Step(statements.append_message_counted(), params)
        if not appended.rows:
            raise _unknown_session(params["session_id"])
        return int(appended.rows[0]["id"])
    returning = caps.insert_returning
    outcome = yield Step(
        statements.append_message(returning), params, wants_lastrowid=not returning
    )
    if outcome.rowcount == 0 and not outcome.rows:
        raise _unknown_session(params["session_id"])
    if outcome.rows:
        message_id = int(outcome.rows[0]["id"])
    elif outcome.lastrowid is None:
        raise HermesStateError("the database driver reported no id for the inserted message")
    else:
        message_id = outcome.lastrowid
    yield Step(statements.count_appended_message(), params)
    return message_id


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


def _transcript_entry(row: Row, server: bool = False) -> Row:
    """A message as upstream's ``get_messages`` returns it: every column, JSON decoded."""
    content = row.get("content")
    if server and isinstance(content, str):
        # Undone, the server form is upstream's: a leading U+FFFF left now was escaped text.
        content = from_server(content)
    row["content"] = decoded_content(content)
    for name in _INTERNAL_MESSAGE_COLUMNS:
        row.pop(name, None)
    if row.pop("_compressed_summary", None):
        row["_compressed_summary"] = True
    if row.get("tool_calls"):
        row["tool_calls"] = _decoded_json(row["tool_calls"], [])
    if row.get("display_metadata") is not None:
        metadata = _decoded_json(row["display_metadata"], None)
        row["display_metadata"] = metadata if isinstance(metadata, dict) else None
    return row


def _transcript(caps: Capabilities, params: Mapping[str, Any]) -> Body[list[Row]]:
    outcome = yield Step(statements.get_messages(), params)
    server = caps.name != "sqlite"
    return [_transcript_entry(row, server) for row in outcome.rows]


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
