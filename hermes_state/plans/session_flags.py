"""The plans of session flags, ids and meta: lineage-wide archive/pin/hide/read flags."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .. import statements
from ..errors import InvalidInputTypeError
from ..statements import Capabilities
from ..statements.titles import LIKE_ESCAPE
from ..validation import require_identifier, require_str
from .core import Body, Plan, Step

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
