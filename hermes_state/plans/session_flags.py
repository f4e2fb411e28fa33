"""The plans of session flags, ids and meta: lineage-wide archive/pin/hide/read flags."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Executable

from .. import statements
from ..errors import InvalidInputTypeError, SessionInUseError
from ..models import HandoffState
from ..statements import Capabilities
from ..statements.titles import LIKE_ESCAPE
from ..titles import CANONICAL_BOT_CHAT_TITLE
from ..validation import (
    require_bit,
    require_identifier,
    require_identifiers,
    require_str,
    require_text,
)
from .core import Body, Plan, Row, Step
from .reads import _constant
from .turn_leases import _conversation

#: How many prefix matches ``resolve_session_id`` reads: two tell a unique match from an
#: ambiguous one.
PREFIX_MATCHES: Final = 2


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


def prefix_range(prefix: str) -> tuple[str, str] | None:
    """SQLite: the ids its case-folding LIKE can match to ``prefix``, as ``[low, high)`` in its
    binary order. LIKE folds ASCII letters only, and an upper-case letter sorts before its
    lower-case one, so every match starts with a variant of the prefix between the variant in
    capitals and the one in small letters; ``high`` is the successor of every id starting with
    the latter. None when there is no such bound (an empty prefix)."""
    if not prefix:
        return None
    low = "".join(c.upper() if "a" <= c <= "z" else c for c in prefix)
    small = "".join(c.lower() if "A" <= c <= "Z" else c for c in prefix)
    if small[-1] == chr(sys.maxunicode):
        return None
    return low, small[:-1] + chr(ord(small[-1]) + 1)


def _resolve_id(caps: Capabilities, given: str) -> Body[str | None]:
    exact = yield Step(statements.session_exists(), {"session_id": given})
    if exact.rows:
        return str(exact.rows[0]["id"])
    params: dict[str, object] = {"pattern": prefix_pattern(given), "limit": PREFIX_MATCHES}
    bounds = prefix_range(given) if caps.name == "sqlite" else None
    if bounds is not None:
        params["low"], params["high"] = bounds
    matches = yield Step(statements.ids_with_prefix(bounds is not None), params)
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


# -- deleting sessions -----------------------------------------------------------------------

#: Handoff states in which a gateway may be delivering the session: it is not deleted then.
_IN_FLIGHT: Final = frozenset({HandoffState.PENDING.value, HandoffState.RUNNING.value})
_DELEGATE_MARKER = "_delegate_from"


def _delegate_runs(candidates: list[Row], seeds: list[str]) -> list[str]:
    """The delegate runs a delete of ``seeds`` takes along, upstream's rule: a session whose
    delegate marker names a doomed session, or a child of one carrying any delegate marker, and
    so on down. Never a seed itself (markers may loop back to one)."""
    doomed, frontier, found = set(seeds), set(seeds), []
    while frontier:
        reached = []
        for row in candidates:
            session_id = str(row["id"])
            if session_id in doomed:
                continue
            marker = _model_config(row).get(_DELEGATE_MARKER)
            if marker is None:
                continue
            if (isinstance(marker, str) and marker in frontier) or (
                row["parent_session_id"] in frontier
            ):
                doomed.add(session_id)
                reached.append(session_id)
        found.extend(reached)
        frontier = set(reached)
    return sorted(found)


def _deletion(_caps: Capabilities, params: Mapping[str, Any]) -> Body[tuple[int, list[str]]]:
    """Delete the sessions ``params["ids"]`` that exist with their delegate runs; how many of
    the ids were deleted, and every id deleted."""
    handoff: dict[str, Any] = {}
    present = []
    for session_id in params["ids"]:
        found = yield Step(statements.session_in_flight(), {"session_id": session_id})
        if found.rows:
            present.append(session_id)
            handoff[session_id] = found.rows[0]["handoff_state"]
    if not present:
        return 0, []
    candidates = yield Step(statements.delegate_candidates())
    delegates = _delegate_runs(candidates.rows, present)
    expected = params["expected"]
    if expected is not None and expected != {*present, *delegates}:
        return 0, []  # the caller exported another set of sessions than would go now
    for session_id in delegates:
        found = yield Step(statements.session_in_flight(), {"session_id": session_id})
        handoff[session_id] = found.rows[0]["handoff_state"] if found.rows else None
    doomed = [*present, *delegates]
    delivering = sorted(s for s in doomed if handoff[s] in _IN_FLIGHT)
    if delivering:
        raise SessionInUseError(
            f"session {delivering[0]!r} has a handoff in flight; wait for it to finish "
            "(or fail it) before deleting"
        )
    # A live turn lease on a doomed segment's conversation: a turn is running on it.
    conversations = dict.fromkeys(doomed)
    for session_id in present:
        conversations[(yield from _conversation(session_id))] = None
    for conversation in conversations:
        key = {"conversation": conversation, "now": params["now"]}
        held = yield Step(statements.live_turn_lease(), key)
        if held.rows:
            raise SessionInUseError(
                f"the conversation of {conversation!r} has a live turn lease held by "
                f"{held.rows[0]['holder']!r}; delete it once that turn is over"
            )
    yield from _delete_rows(doomed)
    return len(present), doomed


def _delete_rows(doomed: list[str]) -> Body[int]:
    """Delete the sessions ``doomed`` with their messages, model usage and (expired) turn
    lease, their children detached, then the system prompts no session uses any more: how
    many messages went. Shared by ``delete_session(s)`` and ``prune_sessions``."""
    removed = 0
    for session_id in doomed:
        one = {"session_id": session_id}
        # Children first: an adopted file's parent_session_id may be a foreign key.
        yield Step(statements.orphan_children(), one)
        removed += (yield Step(statements.delete_messages(), one)).rowcount
        yield Step(statements.delete_model_usage(), one)
        yield Step(statements.delete_session_turn_lease(), one)
        yield Step(statements.delete_session_row(), one)
    yield Step(statements.delete_unreferenced_prompts())
    return removed


def _remove_session_files(folder: Path, session_id: str) -> None:
    """Upstream's transcript files of a deleted session in ``folder``; a file that cannot be
    removed is left (the rows are gone; a file is no reason to fail)."""
    if Path(session_id).name != session_id or session_id in (".", ".."):
        return  # an id naming another folder: nothing of it to remove here
    targets = [folder / f"{session_id}.json", folder / f"{session_id}.jsonl"]
    with contextlib.suppress(OSError):
        targets.extend(folder.glob(f"request_dump_{glob.escape(session_id)}_*.json"))
    for target in targets:
        with contextlib.suppress(OSError):
            target.unlink(missing_ok=True)


def _require_folder(name: str, value: object) -> Path | None:
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        return Path(value)
    raise InvalidInputTypeError(f"{name} must be a path or None, not {type(value).__name__}")


def _swept(folder: Path | None) -> Callable[[tuple[int, list[str]]], int]:
    """After the commit: remove the deleted sessions' files from ``folder``; the count."""

    def after(result: tuple[int, list[str]]) -> int:
        deleted, removed = result
        if folder is not None:
            for session_id in removed:
                _remove_session_files(folder, session_id)
        return deleted

    return after


class SessionFlagPlans:
    """The session flag, id and meta operations of :class:`~hermes_state.plans.PlanBook`."""

    clock: Callable[[], float]

    def _flag_plan(self, column: str, session_id: object, value: Any) -> Plan[bool]:
        sid = require_identifier("session_id", session_id)
        return Plan(_set_flag, column, sid, value, writes=True, single_statement=False)

    def set_session_archived(self, session_id: object, archived: object) -> Plan[bool]:
        return self._flag_plan("archived", session_id, int(require_bit("archived", archived)))

    def set_session_pinned(self, session_id: object, pinned: object) -> Plan[bool]:
        sid = require_identifier("session_id", session_id)
        flag = require_bit("pinned", pinned)
        return Plan(_set_pinned, sid, flag, writes=True, single_statement=False)

    def set_session_hidden(self, session_id: object, hidden: object) -> Plan[bool]:
        return self._flag_plan("hidden", session_id, int(require_bit("hidden", hidden)))

    def set_session_read(self, session_id: object, read: object = True) -> Plan[bool]:
        # last_read_at is a watermark: read now, or 0.0 (older than any activity) for unread.
        watermark = self.clock() if require_bit("read", read) else 0.0
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

    def delete_session(
        self, session_id: object, sessions_dir: object = None, expected_delete_ids: object = None
    ) -> Plan[bool]:
        params = {
            "ids": [require_identifier("session_id", session_id)],
            "expected": None
            if expected_delete_ids is None
            else set(require_identifiers("expected_delete_ids", expected_delete_ids)),
            "now": self.clock(),
        }
        swept = _swept(_require_folder("sessions_dir", sessions_dir))
        return Plan(
            _deletion,
            params,
            writes=True,
            single_statement=False,
            after=lambda result: swept(result) > 0,
        )

    def delete_sessions(self, session_ids: object, sessions_dir: object = None) -> Plan[int]:
        if session_ids is None:
            return Plan(_constant, 0, writes=False)
        if isinstance(session_ids, str | bytes) or not isinstance(session_ids, Iterable):
            raise InvalidInputTypeError(
                f"session_ids must be a list of ids, not {type(session_ids).__name__}"
            )
        # As upstream: what is no id (not a str, or empty) is skipped, each id counted once.
        given = [item for item in session_ids if isinstance(item, str) and item]
        ids = [require_identifier("session_ids", item) for item in dict.fromkeys(given)]
        params = {"ids": ids, "expected": None, "now": self.clock()}
        swept = _swept(_require_folder("sessions_dir", sessions_dir))
        return Plan(_deletion, params, writes=True, single_statement=False, after=swept)

    def get_meta(self, key: object) -> Plan[str | None]:
        params = {"key": require_identifier("key", key)}
        return Plan(_first_value, statements.get_meta(), params, writes=False)

    def set_meta(self, key: object, value: object) -> Plan[None]:
        params = {"key": require_identifier("key", key), "value": require_text("value", value)}
        return Plan(_set_meta, params, writes=True)
