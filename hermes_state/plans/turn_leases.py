"""Bodies of session turn leases: the lineage walk, take, refresh and release."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import statements
from ..statements import Capabilities
from .core import MAX_LINEAGE_DEPTH, Body, Step

#: A turn lease to give up or refresh: the session and the holder named when it was taken.
Turn = tuple[str, str]


def _conversation(session_id: str) -> Body[str]:
    """The lease key of ``session_id``: the root of its compression lineage (upstream's key)."""
    current, seen = session_id, {session_id}
    for _ in range(MAX_LINEAGE_DEPTH):
        parent = yield Step(statements.lineage_parent(), {"session_id": current})
        if not parent.rows or parent.rows[0]["id"] in seen:
            break
        current = parent.rows[0]["id"]
        seen.add(current)
    return current


def _acquire_turn(caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    conversation = yield from _conversation(params["session_id"])
    return (yield from _take_turn(caps, conversation, params))


def _take_turn(caps: Capabilities, conversation: str, params: Mapping[str, Any]) -> Body[bool]:
    """Take ``conversation``'s lease for ``:lease_holder`` unless someone else holds it live:
    True when the holder holds it now."""
    key = {"conversation": conversation}
    yield Step(statements.expire_turn_lease(), {**key, "now": params["now"]})
    yield Step(statements.insert_turn_lease(caps.name), {**params, **key})
    holder = yield Step(statements.turn_lease_holder(), key)
    return bool(holder.rows) and holder.rows[0]["holder"] == params["lease_holder"]


def _refresh_turn(_caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    key = {"conversation": (yield from _conversation(params["session_id"]))}
    refreshed = yield Step(statements.refresh_turn_lease(), {**params, **key})
    return refreshed.rowcount > 0


def _release_turn(_caps: Capabilities, params: Mapping[str, Any]) -> Body[None]:
    key = {"conversation": (yield from _conversation(params["session_id"]))}
    yield Step(statements.release_turn_lease(), {**params, **key})


def _refresh_turns(
    caps: Capabilities, turns: list[Turn], params: Mapping[str, Any]
) -> Body[list[str]]:
    if caps.single_statement:
        arrays = {
            **params,
            "ids": [session_id for session_id, _holder in turns],
            "holders": [holder for _session_id, holder in turns],
        }
        outcome = yield Step(statements.refresh_turn_leases(), arrays)
        return sorted(row["id"] for row in outcome.rows)
    kept = []
    for session_id, holder in turns:
        turn = {**params, "session_id": session_id, "lease_holder": holder}
        if (yield from _refresh_turn(caps, turn)):
            kept.append(session_id)
    return sorted(kept)


def _release_turns(caps: Capabilities, turns: list[Turn]) -> Body[None]:
    if caps.single_statement:
        arrays = {
            "release_ids": [session_id for session_id, _holder in turns],
            "release_holders": [holder for _session_id, holder in turns],
        }
        yield Step(statements.release_turn_leases(), arrays)
        return
    for session_id, holder in turns:
        yield from _release_turn(caps, {"session_id": session_id, "lease_holder": holder})
