"""The plans of session flags, ids and meta: lineage-wide archive/pin/hide/read flags."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from sqlalchemy import Executable

from .. import statements
from ..errors import InvalidInputTypeError
from ..statements import Capabilities
from ..statements.titles import LIKE_ESCAPE
from ..validation import require_identifier, require_str, require_text
from .core import Body, Plan, Row, Step
from .reads import _constant

#: How many prefix matches ``resolve_session_id`` reads: two tell a unique match from an
#: ambiguous one.
PREFIX_MATCHES: Final = 2

#: The title of upstream's canonical Bot Chat: a hidden session with this title stays hidden
#: when it is pinned (its desktop reaches it only through the bot).
CANONICAL_BOT_CHAT_TITLE: Final = "Bot Chat"


def _require_bool(name: str, value: object) -> bool:
    """A flag: ``True``/``False`` (or the ints 1/0 upstream's callers also pass)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InvalidInputTypeError(f"{name} must be a bool, not {type(value).__name__}")


def _lineage(session_id: str) -> Body[list[str]]:
    found = yield Step(statements.lineage_ids(), {"session_id": session_id})
    return [str(row["id"]) for row in found.rows]


def _flag_lineage(column: str, ids: list[str], value: object) -> Body[int]:
    """Set ``column`` on every session of ``ids``: how many rows it matched."""
    matched = 0
    for session_id in ids:
        updated = yield Step(
            statements.set_lineage_flag(column), {"session_id": session_id, "value": value}
        )
        matched += updated.rowcount
    return matched


def _set_flag(_caps: Capabilities, column: str, session_id: str, value: object) -> Body[bool]:
    ids = yield from _lineage(session_id)
    return (yield from _flag_lineage(column, ids, value)) > 0


def _set_pinned(_caps: Capabilities, session_id: str, pinned: bool) -> Body[bool]:
    ids = yield from _lineage(session_id)
    matched = yield from _flag_lineage("pinned", ids, int(pinned))
    if pinned and matched:
        # A pin means "keep this in sight": a hidden pinned session would be in no listing.
        guard = yield Step(statements.pin_guard(), {"session_id": session_id})
        row = guard.rows[0] if guard.rows else None
        canonical = (
            row is not None and bool(row["hidden"]) and row["title"] == (CANONICAL_BOT_CHAT_TITLE)
        )
        if not canonical:
            yield from _flag_lineage("hidden", ids, 0)
    return matched > 0


def prefix_pattern(prefix: str) -> str:
    """A LIKE pattern (escaped with :data:`~hermes_state.statements.titles.LIKE_ESCAPE`) for the
    ids that start with ``prefix``: its ``%``, ``_`` and escape character match only themselves."""
    escape = LIKE_ESCAPE
    escaped = (
        prefix.replace(escape, escape * 2).replace("%", f"{escape}%").replace("_", f"{escape}_")
    )
    return f"{escaped}%"


def _resolve_id(_caps: Capabilities, given: str) -> Body[str | None]:
    exact = yield Step(statements.session_exists(), {"session_id": given})
    if exact.rows:
        return str(exact.rows[0]["id"])
    params = {"pattern": prefix_pattern(given), "limit": PREFIX_MATCHES}
    matches = yield Step(statements.ids_with_prefix(), params)
    return str(matches.rows[0]["id"]) if len(matches.rows) == 1 else None


# -- compression lineage -----------------------------------------------------------------------

#: How far a compression chain is followed (upstream's bound: 100 cut real lineages short).
MAX_CHAIN_LENGTH: Final = 1000
#: How many sessions ``resolve_resume_session_id`` looks at below the compression tip.
RESUME_WALK_STEPS: Final = 32
#: Upstream's end reasons of a reset (``/new``, idle and daily resets): a child of a session
#: ended so that shares its gateway key is the next conversation, not a continuation.
RESET_END_REASONS: Final = frozenset(
    {"session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired"}
)
_TOOL_SOURCE = "tool"
_FORK_MARKERS = ("_branched_from", "_delegate_from", "_reset_from")


def _model_config(row: Row) -> dict[str, Any]:
    """The session's ``model_config`` as a dict; text that is no JSON object reads as empty."""
    raw = row["model_config"]
    if isinstance(raw, str) and raw.strip():
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _legacy_reset_child(row: Row) -> bool:
    """A child written before reset markers existed: its parent ended by a reset and it rides
    the parent's gateway key."""
    key = row["session_key"]
    return (
        row["parent_end_reason"] in RESET_END_REASONS
        and bool(key)
        and key == row["parent_session_key"]
    )


def _forked(row: Row) -> bool:
    """A branch, delegate run, reset successor or tool session: a child of its parent that is
    a conversation of its own, whatever its parent's end."""
    config = _model_config(row)
    if any(config.get(marker) is not None for marker in _FORK_MARKERS):
        return True
    return _legacy_reset_child(row) or (row["source"] or "") == _TOOL_SOURCE


def _last_active(row: Row) -> float:
    """The newest of the session's activity stamp and its newest message, else its start."""
    seen = [v for v in (row["last_activity_at"], row["last_message_at"]) if v is not None]
    return float(max(seen)) if seen else float(row["started_at"])


def _next_segment(children: list[Row]) -> str | None:
    """The continuation compression published among ``children``, upstream's choice when there
    are several: a segment compressed again, then a live one, then any; the most recently
    active, then started, then the greatest id."""
    continuations = [
        row
        for row in children
        if row["parent_end_reason"] == statements.COMPRESSION and not _forked(row)
    ]
    if not continuations:
        return None

    def rank(row: Row) -> int:
        if row["end_reason"] == statements.COMPRESSION:
            return 0
        return 1 if row["ended_at"] is None else 2

    by_id = sorted(continuations, key=lambda row: str(row["id"]), reverse=True)
    best = min(by_id, key=lambda row: (rank(row), -_last_active(row), -float(row["started_at"])))
    return str(best["id"])


def _chain(session_id: str) -> Body[tuple[list[str], list[Row]]]:
    """The compression chain from ``session_id`` to its live tip, and the children of the tip."""
    chain, seen, current = [session_id], {session_id}, session_id
    children: list[Row] = []
    for _ in range(MAX_CHAIN_LENGTH):
        found = yield Step(statements.child_sessions(), {"session_id": current})
        children = found.rows
        following = _next_segment(children)
        if following is None or following in seen:
            break
        chain.append(following)
        seen.add(following)
        current = following
    else:
        children = (yield Step(statements.child_sessions(), {"session_id": current})).rows
    return chain, children


def _resume_target(_caps: Capabilities, session_id: str) -> Body[str]:
    chain, children = yield from _chain(session_id)
    tip = chain[-1]
    current, seen, deepest = tip, {tip}, None
    for step in range(RESUME_WALK_STEPS):
        if step:
            children = (yield Step(statements.child_sessions(), {"session_id": current})).rows
        found = yield Step(statements.has_messages(), {"session_id": current})
        if found.rows and found.rows[0]["first"] is not None:
            deepest = current
        # Below the tip any child but a fork: the newest started holds the newest messages.
        candidates = [row for row in children if not _forked(row)]
        if not candidates:
            break
        following = str(max(candidates, key=lambda row: (row["started_at"], row["id"]))["id"])
        if following in seen:
            break
        seen.add(following)
        current = following
    return deepest if deepest is not None else tip


def _compression_chain(_caps: Capabilities, session_id: str) -> Body[list[str]]:
    chain, _tip_children = yield from _chain(session_id)
    return chain


def _compression_tip(_caps: Capabilities, session_id: str) -> Body[str]:
    chain, _tip_children = yield from _chain(session_id)
    return chain[-1]


def _explicit_fork(row: Row, *, reset: bool) -> bool:
    """A tool session, or a child whose branch or delegate marker (and reset marker when
    ``reset``) names its own parent: continuations copy their parent's ``model_config``, so a
    marker naming another session was inherited, not set for this one."""
    if (row["source"] or "") == _TOOL_SOURCE:
        return True
    config = _model_config(row)
    names = _FORK_MARKERS if reset else _FORK_MARKERS[:2]
    markers = [config.get(name) for name in names]
    parent = row["parent_session_id"]
    return parent in markers if parent else any(marker is not None for marker in markers)


def _compression_lineage(_caps: Capabilities, session_id: str) -> Body[list[str]]:
    found = yield Step(statements.lineage_row(), {"session_id": session_id})
    if not found.rows:
        return []
    root = found.rows[0]
    if _explicit_fork(root, reset=False):
        return [session_id]
    ancestors = {session_id}
    for _ in range(MAX_CHAIN_LENGTH):
        parent_id = root["parent_session_id"]
        if not parent_id or _explicit_fork(root, reset=True):
            break
        above = yield Step(statements.lineage_row(), {"session_id": parent_id})
        parent = above.rows[0] if above.rows else None
        if parent is None or parent["end_reason"] != statements.COMPRESSION:
            break
        if parent["id"] in ancestors:
            break
        root = parent
        ancestors.add(str(parent["id"]))
    lineage, current = [str(root["id"])], root
    for _ in range(MAX_CHAIN_LENGTH):
        if current["end_reason"] != statements.COMPRESSION:
            break
        below = yield Step(statements.child_sessions(), {"session_id": current["id"]})
        # The earliest started continuation (the rows come in start order).
        following = next((row for row in below.rows if not _explicit_fork(row, reset=True)), None)
        if following is None or following["id"] in lineage:
            break
        lineage.append(str(following["id"]))
        current = following
    # Later segments count only for a session that is itself part of the lineage.
    return lineage if session_id in lineage else [session_id]


def _first_value(
    _caps: Capabilities, statement: Executable, params: Mapping[str, Any]
) -> Body[Any]:
    """The first column of the first row, None when there is none."""
    outcome = yield Step(statement, params)
    return next(iter(outcome.rows[0].values())) if outcome.rows else None


def _passthrough(name: str, value: object) -> str | None:
    """Upstream's lineage reads answer an empty id (None or "") with itself: None here."""
    if value is None or value == "":
        return None
    return require_identifier(name, value)


# -- upstream's key/value bookkeeping ---------------------------------------------------------


def _set_meta(caps: Capabilities, params: Mapping[str, Any]) -> Body[None]:
    yield Step(statements.set_meta(caps.name), params)


class SessionFlagPlans:
    """The session flag, id and meta operations of :class:`~hermes_state.plans.PlanBook`."""

    clock: Callable[[], float]

    def _flag_plan(self, column: str, session_id: object, value: Any) -> Plan[bool]:
        sid = require_identifier("session_id", session_id)
        return Plan(_set_flag, column, sid, value, writes=True, single_statement=False)

    def set_session_archived(self, session_id: object, archived: object) -> Plan[bool]:
        return self._flag_plan("archived", session_id, int(_require_bool("archived", archived)))

    def set_session_pinned(self, session_id: object, pinned: object) -> Plan[bool]:
        sid = require_identifier("session_id", session_id)
        flag = _require_bool("pinned", pinned)
        return Plan(_set_pinned, sid, flag, writes=True, single_statement=False)

    def set_session_hidden(self, session_id: object, hidden: object) -> Plan[bool]:
        return self._flag_plan("hidden", session_id, int(_require_bool("hidden", hidden)))

    def set_session_read(self, session_id: object, read: object = True) -> Plan[bool]:
        # last_read_at is a watermark: read now, or 0.0 (older than any activity) for unread.
        watermark = self.clock() if _require_bool("read", read) else 0.0
        return self._flag_plan("last_read_at", session_id, watermark)

    def resolve_session_id(self, session_id_or_prefix: object) -> Plan[str | None]:
        # Any str, as upstream: "" is a prefix of every id (unique only in a one-session store).
        given = require_str("session_id_or_prefix", session_id_or_prefix)
        if not given.isprintable():  # control characters or lone surrogates: refused, named
            require_identifier("session_id_or_prefix", given)
        return Plan(_resolve_id, given, writes=False, single_statement=False)

    def resolve_resume_session_id(self, session_id: object) -> Plan[str | None]:
        sid = _passthrough("session_id", session_id)
        if sid is None:
            return Plan(_constant, session_id, writes=False)
        return Plan(_resume_target, sid, writes=False, single_statement=False)

    def get_compression_chain(self, session_id: object) -> Plan[list[str]]:
        sid = _passthrough("session_id", session_id)
        if sid is None:
            return Plan(_constant, [], writes=False)
        return Plan(_compression_chain, sid, writes=False, single_statement=False)

    def get_compression_tip(self, session_id: object) -> Plan[str | None]:
        sid = _passthrough("session_id", session_id)
        if sid is None:
            return Plan(_constant, session_id, writes=False)
        return Plan(_compression_tip, sid, writes=False, single_statement=False)

    def get_compression_lineage(self, session_id: object) -> Plan[list[str]]:
        sid = _passthrough("session_id", session_id)
        if sid is None:
            return Plan(_constant, [], writes=False)
        return Plan(_compression_lineage, sid, writes=False, single_statement=False)

    def get_meta(self, key: object) -> Plan[str | None]:
        params = {"key": require_identifier("key", key)}
        return Plan(_first_value, statements.get_meta(), params, writes=False)

    def set_meta(self, key: object, value: object) -> Plan[None]:
        params = {"key": require_identifier("key", key), "value": require_text("value", value)}
        return Plan(_set_meta, params, writes=True)
