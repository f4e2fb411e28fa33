"""Bodies of handoff transitions: moves, one-row claims, finishes, renewals, reclaims."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import statements
from ..errors import ConcurrentChangeError
from ..models import HandoffState
from ..statements import Capabilities, ReclaimScope, Transition
from .core import Body, Outcome, Row, Step
from .turn_leases import Turn, _release_turn


def _move(
    caps: Capabilities,
    transition: Transition,
    params: Mapping[str, Any],
    expected: int | None = None,
) -> Body[Outcome | None]:
    """Record the audit row(s), then apply the move; None when it applied to no row.

    Where the dialect has single-statement transitions, that one statement does both. Else
    the apply step must touch exactly the rows the record step selected (and locked). If
    another transaction slipped a row in between (only possible on servers, for multi-row
    moves), the transaction is rolled back and run again.
    """
    if caps.single_statement:
        assert transition.single is not None, "a move built for SQLite only"
        moved = yield Step(transition.single, params)
        return moved if moved.rows else None
    recorded = yield Step(transition.record, params)
    if recorded.rowcount == 0 and not expected:
        return None
    applied = yield Step(transition.apply, params)
    selected = recorded.rowcount if expected is None else expected
    if not selected == recorded.rowcount == applied.rowcount:
        raise ConcurrentChangeError(
            f"rows changed during a handoff transition (selected {expected}, recorded "
            f"{recorded.rowcount}, updated {applied.rowcount}); running it again"
        )
    if recorded.rows and not applied.rows:
        # The move returns nothing here (no UPDATE ... RETURNING); its audit rows say the same.
        return Outcome(rowcount=applied.rowcount, rows=recorded.rows)
    return applied


def _moved(caps: Capabilities, transition: Transition, params: Mapping[str, Any]) -> Body[bool]:
    return (yield from _move(caps, transition, params)) is not None


def _request(caps: Capabilities, transition: Transition, params: Mapping[str, Any]) -> Body[bool]:
    if (yield from _move(caps, transition, params)) is None:
        return False
    if caps.name == "postgresql" and not caps.single_statement:  # else the statement notified
        yield Step(statements.notify_handoff_requested(), {"session_id": params["session_id"]})
    return True


def _claimed(caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    """A claim nothing will be fenced on (a store without ownership): no attempt to read back."""
    return (yield from _move(caps, statements.claim_handoff(False), params)) is not None


def _claim(caps: Capabilities, params: Mapping[str, Any]) -> Body[int | None]:
    """The attempt number claimed, or None when another claimer won."""
    returning = caps.update_returning
    audit_returning = not returning and caps.insert_returning
    transition = statements.claim_handoff(returning, audit_returning)
    applied = yield from _move(caps, transition, params)
    if applied is None:
        return None
    if returning or audit_returning or caps.single_statement:
        return int(applied.rows[0]["handoff_attempt"])
    claimed = yield Step(statements.claimed_attempt(), {"session_id": params["session_id"]})
    return int(claimed.rows[0]["handoff_attempt"])


#: One claim to finish: the row, how it is fenced, the attempt it is fenced on, and its
#: outcome: None completes it, an error fails it.
Claim = tuple[str, statements.Fence, int | None, str | None]


def _finish_claims(
    caps: Capabilities, claims: list[Claim], releases: list[Turn], params: Mapping[str, Any]
) -> Body[dict[str, bool]]:
    """Finish each claim, then give up the turn leases in ``releases``: one statement on
    PostgreSQL; two on SQLite (the events, then the rows) plus one per lease; else one
    transition per row and one release per lease, all in this one transaction.
    ``{id: finished}``, refused ones False."""
    ids = [session_id for session_id, _fence, _attempt, _error in claims]
    fenced = any(fence is not statements.Fence.NONE for _, fence, _, _ in claims)
    if caps.single_statement:
        arrays = {
            **params,
            "ids": ids,
            "attempts": [attempt for _, _, attempt, _ in claims],
            "errors": [error for _, _, _, error in claims],
        }
        if releases:
            arrays["release_ids"] = [session_id for session_id, _holder in releases]
            arrays["release_holders"] = [holder for _session_id, holder in releases]
        outcome = yield Step(statements.finish_claims(fenced, bool(releases)), arrays)
        finished = {row["id"] for row in outcome.rows}
        return {session_id: session_id in finished for session_id in ids}
    done: dict[str, bool] = {}
    if caps.name == "sqlite":
        by_id = {session_id: [attempt, error] for session_id, _, attempt, error in claims}
        listed = {**params, "claims": _json(by_id)}
        moved = yield from _move(caps, statements.finish_claims_json(fenced), listed)
        finished = set() if moved is None else {row["id"] for row in moved.rows}
        done = {session_id: session_id in finished for session_id in ids}
    else:
        for session_id, fence, attempt, error in claims:
            transition = (
                statements.complete_handoff(fence)
                if error is None
                else statements.fail_handoff(frozenset({HandoffState.RUNNING}), fence)
            )
            row = {**params, "session_id": session_id, "attempt": attempt, "error": error}
            done[session_id] = (yield from _move(caps, transition, row)) is not None
    for session_id, holder in releases:
        yield from _release_turn(caps, {"session_id": session_id, "lease_holder": holder})
    return done


def _json(value: list[Any] | dict[str, Any]) -> str:
    """JSON text for SQLite's ``json_each`` (UTF-8 as is, no escapes needed)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _renew(
    caps: Capabilities, session_ids: list[str], params: Mapping[str, Any]
) -> Body[list[str]]:
    if caps.single_statement:
        outcome = yield Step(statements.renew_leases(), {**params, "ids": session_ids})
        return sorted(row["id"] for row in outcome.rows)
    if caps.name == "sqlite":
        listed = {**params, "ids": _json(session_ids)}
        outcome = yield Step(statements.renew_leases_json(), listed)
        return sorted(row["id"] for row in outcome.rows)
    renewed = []
    for session_id in session_ids:
        outcome = yield Step(statements.renew_lease(), {**params, "session_id": session_id})
        if outcome.rowcount == 1:
            renewed.append(session_id)
    return renewed


def _reclaim(caps: Capabilities, scope: ReclaimScope, params: Mapping[str, Any]) -> Body[list[str]]:
    transition = statements.reclaim_handoffs(scope)
    if caps.single_statement:
        moved = yield from _move(caps, transition, params)
        return [] if moved is None else sorted(row["id"] for row in moved.rows)
    locked = yield Step(statements.reclaimable(scope, lock=True), params)
    if not locked.rows:
        return []
    yield from _move(caps, transition, params, expected=len(locked.rows))
    return sorted(row["id"] for row in locked.rows)


def _reclaim_preview(
    _caps: Capabilities, scope: ReclaimScope, params: Mapping[str, Any]
) -> Body[list[Row]]:
    found = yield Step(statements.reclaimable(scope, lock=False), params)
    now, owner = params["now"], params.get("owner")
    return [{**row, "reason": _reclaim_reason(row, now, owner)} for row in found.rows]


def _reclaim_reason(row: Row, now: float, owner: str | None) -> str:
    lease = row["lease_expires_at"]
    if lease is not None and lease < now:
        return f"lease expired {now - lease:.0f} s ago"
    if lease is None:
        return "no lease (claimed by a gateway without leases)"
    if owner is not None and row["owner"] == owner:
        return "claimed by this owner's previous life"
    return "running (reclaimed by --all)"


def _nothing_finished(_caps: Capabilities) -> Body[dict[str, bool]]:
    yield from ()  # no claim given: no statement to run
    return {}


def _nothing_renewed(_caps: Capabilities) -> Body[list[str]]:
    yield from ()  # no statement to run: nothing is leased
    return []
