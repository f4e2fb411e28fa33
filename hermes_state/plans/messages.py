"""The plans of upstream's transcript operations: batches, windows, conversations, clearing and
rewinding."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from .. import statements
from ..errors import InvalidInputError, InvalidInputTypeError
from ..statements import Capabilities
from ..validation import (
    ROLE_LENGTH,
    require_content,
    require_count,
    require_flag,
    require_identifier,
    require_message,
    require_row_id,
    require_seconds,
)
from .conversation import Replay, as_conversation
from .core import Body, Plan, Row, Step
from .reads import _constant
from .transcript import _stored, _transcript_entry, _unknown_session, displayed_once

#: How far apart upstream keeps the timestamps of a batch's messages that carry none (or the
#: same one): each is at least this much after the one before, so they sort as they came.
BATCH_TIMESTAMP_STEP = 1e-6
#: How far up a lineage ``include_ancestors`` walks (upstream's bound).
MAX_ANCESTORS: Final = 100


def _append_batch(
    caps: Capabilities, rows: list[dict[str, Any]], totals: Mapping[str, Any]
) -> Body[int]:
    counted = yield Step(statements.count_appended_messages(), totals)
    if counted.rowcount == 0:
        raise _unknown_session(totals["session_id"])
    insert = statements.append_message(False)
    for row in rows:
        yield Step(insert, _stored(caps, row))
    return len(rows)


def _around(caps: Capabilities, params: Mapping[str, Any], window: int) -> Body[Row]:
    anchor = params["around_message_id"]
    before = yield Step(statements.messages_around(True), {**params, "limit": window + 1})
    if not before.rows or before.rows[0]["id"] != anchor:  # not a message of this session
        return {"window": [], "messages_before": 0, "messages_after": 0}
    after = yield Step(statements.messages_around(False), {**params, "limit": window})
    server = caps.name != "sqlite"
    rows = [*reversed(before.rows), *after.rows]
    return {
        "window": [_transcript_entry(row, server, summary_flag=False) for row in rows],
        "messages_before": len(before.rows) - 1,  # the anchor is the first of them
        "messages_after": len(after.rows),
    }


def _branched(model_config: Any) -> bool:
    """Whether a session is an explicit ``/branch`` copy (its configuration names its origin):
    it holds its own copy of the transcript, so its ancestors are not replayed."""
    try:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
    except ValueError:
        return False
    return isinstance(config, dict) and bool(config.get("_branched_from"))


def _lineage(session_id: str) -> Body[list[str]]:
    """The sessions a resume replays, root first: the session and each parent up its
    ``parent_session_id`` chain (cycles and depth bounded), or the session alone when it is a
    branch copy."""
    chain = [session_id]
    link = yield Step(statements.lineage_link(), {"session_id": session_id})
    if not link.rows or _branched(link.rows[0]["model_config"]):
        return chain
    parent = link.rows[0]["parent_session_id"]
    while parent and parent not in chain and len(chain) < MAX_ANCESTORS:
        chain.append(parent)
        link = yield Step(statements.lineage_link(), {"session_id": parent})
        if not link.rows:
            break
        parent = link.rows[0]["parent_session_id"]
    return chain[::-1]


def _conversation(
    caps: Capabilities,
    session_id: str,
    visibility: statements.Visibility,
    compacted: bool,
    replay: Replay,
) -> Body[list[Row]]:
    sessions = (yield from _lineage(session_id)) if replay.lineage else [session_id]
    rows: list[Row] = []
    read = statements.get_messages(visibility)
    for one in sessions:
        outcome = yield Step(read, {"session_id": one})
        rows.extend(outcome.rows)
    rows.sort(key=lambda row: row["id"])  # the lineage in the order it was written
    if compacted:
        rows = displayed_once(rows)
    server = caps.name != "sqlite"
    return as_conversation([_transcript_entry(row, server) for row in rows], replay)


def _no_turn_lease(turn_lease_holder: object) -> None:
    """Writes fenced on a turn lease are not offered yet: refused rather than run unfenced."""
    if turn_lease_holder is not None:
        raise InvalidInputError(
            "turn_lease_holder is not supported by this store yet; take the turn lease with "
            "try_acquire_session_turn_lease and write without it"
        )


class MessagePlans:
    """The transcript operations of :class:`~hermes_state.plans.PlanBook` beyond one append
    and one read."""

    clock: Callable[[], float]

    def append_messages_batch(
        self,
        session_id: object,
        messages: object,
        compression_lock_holder: object = None,
        turn_lease_holder: object = None,
        chunk_rows: object = None,
        turn_lease_ttl_seconds: object = 300.0,
    ) -> Plan[int]:
        """Append every message in one transaction, all or none, the counters moved once;
        the number appended. An appended message is stored as ``append_message`` stores it."""
        session = require_identifier("session_id", session_id)
        if compression_lock_holder is not None:  # upstream's appends never wait for it
            require_identifier("compression_lock_holder", compression_lock_holder)
        _no_turn_lease(turn_lease_holder)
        if chunk_rows is not None:
            require_count("chunk_rows", chunk_rows)
        require_seconds("turn_lease_ttl_seconds", turn_lease_ttl_seconds)
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
            kind = type(messages).__name__
            raise InvalidInputTypeError(f"messages must be a list of message dicts, not {kind}")
        now = self.clock()
        rows: list[dict[str, Any]] = []
        tool_calls_added = 0
        for message in messages:
            role, content, values, tool_calls, timestamp = require_message(message)
            at = now if timestamp is None else timestamp
            rows.append(
                {
                    **values,
                    "session_id": session,
                    "role": require_identifier("role", role, max_length=ROLE_LENGTH),
                    "content": require_content(content),
                    "now": at,
                }
            )
            now = max(now, at) + BATCH_TIMESTAMP_STEP
            tool_calls_added += tool_calls
        if not rows:
            return Plan(_constant, 0, writes=False)
        totals = {
            "session_id": session,
            "messages_added": len(rows),
            "tool_calls_added": tool_calls_added,
        }
        return Plan(_append_batch, rows, totals, writes=True, single_statement=False)

    def get_messages_around(
        self, session_id: object, around_message_id: object, window: object = 5
    ) -> Plan[Row]:
        """Up to ``window`` messages either side of a message of the session, and how many
        of each side there were (fewer than ``window``: the session's start or end)."""
        params = {
            "session_id": require_identifier("session_id", session_id),
            "around_message_id": require_row_id("around_message_id", around_message_id),
        }
        if isinstance(window, bool) or not isinstance(window, int):
            raise InvalidInputTypeError(f"window must be an int, not {type(window).__name__}")
        return Plan(_around, params, max(window, 0), writes=False, single_statement=False)

    def get_messages_as_conversation(
        self,
        session_id: object,
        include_ancestors: object = False,
        include_inactive: object = False,
        repair_alternation: object = False,
        include_row_ids: object = False,
        include_compacted: object = False,
    ) -> Plan[list[Row]]:
        """The transcript in the form upstream replays to a model (see
        :func:`~hermes_state.plans.conversation.as_message`), over the session's lineage with
        ``include_ancestors``."""
        session = require_identifier("session_id", session_id)
        inactive = require_flag("include_inactive", include_inactive)
        compacted = require_flag("include_compacted", include_compacted)
        replay = Replay(
            row_ids=require_flag("include_row_ids", include_row_ids),
            summary_markers=require_flag("repair_alternation", repair_alternation),
            lineage=require_flag("include_ancestors", include_ancestors),
        )
        shown = statements.Visibility
        visibility = shown.ALL if inactive else shown.DISPLAY if compacted else shown.LIVE
        return Plan(
            _conversation,
            session,
            visibility,
            compacted,
            replay,
            writes=False,
            single_statement=False,
        )
