"""The plans of upstream's transcript operations: batches, windows, conversations, clearing and
rewinding."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from .. import statements
from ..errors import (
    CompressionSessionClosedError,
    InvalidInputError,
    InvalidInputTypeError,
    TranscriptChangedError,
)
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
from .conversation import Replay, as_conversation, without_memory_context
from .core import Body, Plan, Row, Step
from .reads import _constant
from .transcript import (
    _decoded_json,
    _refuse_append,
    _stored,
    _transcript_entry,
    displayed_once,
)
from .turn_leases import _hold_turn, turn_fence

#: How far apart upstream keeps the timestamps of a batch's messages that carry none (or the
#: same one): each is at least this much after the one before, so they sort as they came.
BATCH_TIMESTAMP_STEP = 1e-6
#: How far up a lineage ``include_ancestors`` walks (upstream's bound).
MAX_ANCESTORS: Final = 100


def _append_batch(
    caps: Capabilities,
    rows: list[dict[str, Any]],
    totals: Mapping[str, Any],
    turn: Mapping[str, Any] | None,
) -> Body[int]:
    if turn is not None:
        yield from _hold_turn(turn)
    counted = yield Step(statements.count_appended_messages(), totals)
    if counted.rowcount == 0:
        yield from _refuse_append(totals["session_id"])
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


def _clear(caps: Capabilities, params: Mapping[str, Any], keep_last: int | None) -> Body[bool]:
    found = yield Step(statements.session_locked(), params)
    if not found.rows:
        return False
    if keep_last is not None:
        oldest_kept = yield Step(statements.nth_newest_message(), {**params, "skip": keep_last - 1})
        if oldest_kept.rows:
            before_id = {**params, "before_id": oldest_kept.rows[0]["id"]}
            yield Step(statements.delete_messages(before_id=True), before_id)
    elif params["before"] is not None:
        yield Step(statements.delete_messages(before_timestamp=True), params)
    else:
        yield Step(statements.delete_messages(), params)
    counted = yield Step(statements.live_counts(), params)
    left, tools = (int(counted.rows[0][name] or 0) for name in ("messages", "tools"))
    if left == 0:
        yield Step(statements.reset_session_counters(), params)
        yield Step(statements.delete_model_usage(), params)
    else:
        counters = {**params, "message_count": left, "tool_call_count": tools}
        yield Step(statements.set_message_counters(True), counters)
    yield Step(statements.delete_unreferenced_prompts())
    return True


def remove_transcript_files(sessions_dir: Path | None, session_id: str) -> None:
    """Delete the files upstream's gateway and CLI keep beside the database for a session
    (``<id>.json``, ``<id>.jsonl``, ``request_dump_<id>_*.json``); a file that is missing or
    cannot be removed is left, as upstream leaves it."""
    if sessions_dir is None:
        return
    doomed = [sessions_dir / f"{session_id}{suffix}" for suffix in (".json", ".jsonl")]
    with contextlib.suppress(OSError):
        doomed += sessions_dir.glob(f"request_dump_{session_id}_*.json")
    for path in doomed:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _tool_call_count(stored: Any) -> int:
    """How many tool calls upstream's rewind counts in a stored ``tool_calls``: a list's
    length, one for any other value but an empty one (text that is not JSON: none)."""
    value = _decoded_json(stored, []) if isinstance(stored, str) else stored
    return len(value) if isinstance(value, list) else (1 if value else 0)


def _live_text(content: Any) -> Any:
    """What the user said in a stored user turn, as a rewind compares it."""
    return without_memory_context(content) if isinstance(content, str) else content


def _rewind(
    caps: Capabilities,
    params: Mapping[str, Any],
    expected_ids: list[int] | None,
    pinned: bool,
    expected_content: Any,
) -> Body[Row]:
    session_id, message_id = params["session_id"], params["message_id"]
    missing = InvalidInputError(f"message {message_id} not found in session {session_id}")
    counted = yield Step(statements.count_rewind(), params)  # locks the session's row first
    if counted.rowcount == 0:
        closed = yield Step(statements.session_closed(), params)
        if closed.rows and closed.rows[0]["closed"]:
            raise CompressionSessionClosedError(session_id)
        raise missing
    if expected_ids is not None:
        live = yield Step(statements.live_message_ids(), params)
        if [row["id"] for row in live.rows] != expected_ids:
            raise TranscriptChangedError(
                "the live transcript changed before the rewind could be written; nothing was"
            )
    found = yield Step(statements.message_of_session(), params)
    if not found.rows:
        raise missing
    target = found.rows[0]
    if target["role"] != "user":
        raise InvalidInputError(
            f"a rewind goes back to a 'user' message, not role={target['role']!r} (id={message_id})"
        )
    # The row as get_messages shapes it: what the caller offers again as the next prompt.
    target = _transcript_entry(dict(target), caps.name != "sqlite")
    content = target["content"]
    if pinned and not target["active"]:
        raise InvalidInputError(f"the rewind's target {message_id} is not a live message")
    if pinned and _live_text(content) != expected_content:
        raise TranscriptChangedError("the rewind's target changed before it could be written")
    taken_back = {"rewound_session": session_id, "message_id": message_id}
    rewound = yield Step(statements.rewind_from(), taken_back)
    left = yield Step(statements.live_counts(), params)
    calls = yield Step(statements.live_tool_calls(), params)
    counters = {
        **params,
        "message_count": int(left.rows[0]["messages"]),
        "tool_call_count": sum(_tool_call_count(row["tool_calls"]) for row in calls.rows),
    }
    yield Step(statements.set_message_counters(False), counters)
    head = yield Step(statements.live_head(), params)
    return {
        "rewound_count": rewound.rowcount,
        "target_message": target,
        "new_head_id": head.rows[0]["head"],
    }


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
        if chunk_rows is not None:
            require_count("chunk_rows", chunk_rows)
        turn = turn_fence(session, turn_lease_holder, turn_lease_ttl_seconds, self.clock())
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
        return Plan(_append_batch, rows, totals, turn, writes=True, single_statement=False)

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

    def clear_session_messages(
        self,
        session_id: object,
        keep_last_n: object = None,
        before_timestamp: object = None,
        sessions_dir: object = None,
    ) -> Plan[bool]:
        """Delete the session's messages (all, all but the newest ``keep_last_n``, or those
        before ``before_timestamp``), keeping the session; counters recounted, or zeroed
        with the usage when nothing is left. False for an unknown session."""
        params: dict[str, Any] = {
            "session_id": require_identifier("session_id", session_id),
            "now": self.clock(),
            "before": None,
        }
        keep_last = None
        if keep_last_n is not None:
            if isinstance(keep_last_n, bool) or not isinstance(keep_last_n, int):
                kind = type(keep_last_n).__name__
                raise InvalidInputTypeError(f"keep_last_n must be an int or None, not {kind}")
            keep_last = keep_last_n if keep_last_n > 0 else None  # upstream: 0 keeps nothing
        if before_timestamp is not None:
            params["before"] = require_seconds("before_timestamp", before_timestamp)
        folder = None
        if sessions_dir is not None:
            if not isinstance(sessions_dir, str | os.PathLike):
                kind = type(sessions_dir).__name__
                raise InvalidInputTypeError(f"sessions_dir must be a path or None, not {kind}")
            folder = Path(sessions_dir)
        whole = keep_last_n is None and before_timestamp is None

        def after(cleared: bool) -> bool:
            if cleared and whole:
                remove_transcript_files(folder, params["session_id"])
            return cleared

        return Plan(_clear, params, keep_last, writes=True, after=after, single_statement=False)

    def rewind_to_message(
        self,
        session_id: object,
        target_message_id: object,
        preserve_compaction_handoff: object = False,
        expected_active_ids: object = None,
        expected_target_content: object = None,
    ) -> Plan[Row]:
        """Take back the session's live messages from the user message ``target_message_id``
        on (marked ``active = 0``, kept on disk), one more ``rewind_count``, the counters
        recounted."""
        params = {
            "session_id": require_identifier("session_id", session_id),
            "message_id": require_row_id("target_message_id", target_message_id),
        }
        if require_flag("preserve_compaction_handoff", preserve_compaction_handoff):
            raise InvalidInputError(
                "preserve_compaction_handoff is not supported: this store keeps no compaction "
                "handoff carriers"
            )
        expected = None
        if expected_active_ids is not None:
            if isinstance(expected_active_ids, str | bytes) or not isinstance(
                expected_active_ids, Iterable
            ):
                kind = type(expected_active_ids).__name__
                raise InvalidInputTypeError(
                    f"expected_active_ids must be a list of ids, not {kind}"
                )
            expected = [require_row_id("expected_active_ids", one) for one in expected_active_ids]
        pinned = expected_target_content is not None
        return Plan(
            _rewind,
            params,
            expected,
            pinned,
            expected_target_content,
            writes=True,
            single_statement=False,
        )
