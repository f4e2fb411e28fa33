"""The plans of upstream's transcript operations: batches, windows, conversations, clearing and
rewinding."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import statements
from ..errors import InvalidInputError, InvalidInputTypeError
from ..statements import Capabilities
from ..validation import (
    ROLE_LENGTH,
    require_content,
    require_count,
    require_identifier,
    require_message,
    require_row_id,
    require_seconds,
)
from .core import Body, Plan, Row, Step
from .reads import _constant
from .transcript import _stored, _transcript_entry, _unknown_session

#: How far apart upstream keeps the timestamps of a batch's messages that carry none (or the
#: same one): each is at least this much after the one before, so they sort as they came.
BATCH_TIMESTAMP_STEP = 1e-6


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
