"""Bodies of batch claims: pending rows, given rows, the next rows, and their holders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import statements
from ..statements import Capabilities
from .core import Body, Outcome, Row, Step
from .transitions import _move
from .turn_leases import _conversation, _take_turn


def _claim_batch(
    caps: Capabilities, by_platform: bool, params: Mapping[str, Any]
) -> Body[list[Row]]:
    """The rows claimed, as claimed, oldest ``started_at`` first (one builder per dialect)."""
    if caps.name == "postgresql":
        claimed = yield Step(statements.claim_pending_statement(by_platform), params)
        return claimed.rows  # in order already
    if caps.update_returning:
        applied = yield from _move(caps, statements.claim_pending_transition(by_platform), params)
        rows = [] if applied is None else applied.rows
        # SQLite returns the updated rows in no promised order.
        return sorted(rows, key=lambda row: (row["started_at"], row["id"]))
    claim = statements.claim_picked(by_platform)
    picked = yield Step(claim.pick, params)
    if not picked.rows:
        return []
    chosen = {**params, "ids": [row["id"] for row in picked.rows]}
    yield from _move(caps, claim.transition, chosen, expected=len(picked.rows))
    fetched = yield Step(claim.fetch, chosen)
    return fetched.rows


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What a claim of given rows did: the rows claimed, as claimed, oldest ``started_at``
    first; and the pending rows left alone because their conversation's turn is taken (by a
    local turn, or by another delivery of the same conversation). A row in neither list was
    no longer pending, or another claimer held it."""

    rows: list[Row]
    turn_held: list[str]


def _claim_given(
    caps: Capabilities, ids: list[str], holders: dict[str, str] | None, params: Mapping[str, Any]
) -> Body[ClaimBatch]:
    if caps.single_statement:
        arrays = {**params, "ids": ids}
        if holders is not None:
            arrays["holders"] = [holders[session_id] for session_id in ids]
        outcome = yield Step(statements.claim_given(holders is not None), arrays)
        return _claimed_or_held(outcome)
    picked = []
    for session_id in ids:
        found = yield Step(statements.pending_row_locked(), {"session_id": session_id})
        picked.extend(found.rows)
    winners, held = [], []
    if holders is None:
        winners = [row["id"] for row in _oldest_first(picked)]
    else:
        # The oldest row of each conversation is tried; leases are taken in key order.
        conversations: dict[str, str] = {}
        for row in _oldest_first(picked):
            conversation = yield from _conversation(row["id"])
            if conversation in conversations:
                held.append(row["id"])
            else:
                conversations[conversation] = row["id"]
        for conversation, session_id in sorted(conversations.items()):
            turn = {"now": params["now"], "lease_holder": holders[session_id]}
            turn["lease_until"] = params["turn_until"]
            taken = yield from _take_turn(caps, conversation, turn)
            (winners if taken else held).append(session_id)
    rows = []
    transition = statements.claim_handoff(False)
    for session_id in winners:
        row_params = {**params, "session_id": session_id}
        # The row is pending and locked by this transaction (or SQLite's write lock).
        yield from _move(caps, transition, row_params, expected=1)
        claimed = yield Step(statements.get_session(), {"session_id": session_id})
        rows.extend(claimed.rows)
    return ClaimBatch(_oldest_first(rows), sorted(held))


def _claimed_or_held(outcome: Outcome) -> ClaimBatch:
    """A claim statement's answer: a row per row it locked, the claimed ones whole."""
    rows, held = [], []
    for row in outcome.rows:
        picked = row.pop(statements.PICKED)
        if row["id"] is not None:
            rows.append(row)
        else:
            held.append(picked)
    return ClaimBatch(_oldest_first(rows), sorted(held))


def _claim_next(
    caps: Capabilities, gateway: str | None, params: Mapping[str, Any]
) -> Body[ClaimBatch]:
    if caps.single_statement:
        outcome = yield Step(statements.claim_next(gateway is not None), params)
        return _claimed_or_held(outcome)
    # Pick enough to have ``limit`` once the rows to leave alone are left out.
    excluded = set(params["exclude"])
    over = {"limit": params["limit"] + len(excluded)}
    picked = yield Step(statements.oldest_pending_locked(), over)
    ids = [row["id"] for row in picked.rows if row["id"] not in excluded][: params["limit"]]
    if not ids:
        return ClaimBatch([], [])
    holders = None if gateway is None else {i: delivery_holder(gateway, i) for i in ids}
    return (yield from _claim_given(caps, ids, holders, params))


def delivery_holder(gateway: str, session_id: str) -> str:
    """Whom the turn lease of one delivery of ``session_id`` by ``gateway`` names: per
    session, so two segments of one conversation pending at once are delivered one after the
    other, never together; and stable across the gateway's restarts, so its next life takes a
    dead one's leases back at once. The rule is :data:`statements.DELIVERY_HOLDER`, whose SQL
    form the one-statement claim of the next rows computes in the database."""
    return statements.DELIVERY_HOLDER.name(gateway, session_id)


def _oldest_first(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: (row["started_at"], row["id"]))
