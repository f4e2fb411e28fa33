"""Sessions and handoff transitions as sans-IO plans, run alike by the sync and the async stores.

A plan is a generator: it yields a :class:`Step` (a statement from :mod:`hermes_state.statements`
and its parameters), receives the :class:`Outcome`, and finally returns the operation's result.
The stores own connections, transactions and retries and only *drive* plans, so every
transition's logic is written once, here. Inputs are validated when a plan is made, before any
connection is touched, so bad input never opens a transaction.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Executable

from .. import statements
from ..content import decoded_content
from ..errors import (
    ConcurrentChangeError,
    HermesStateError,
    InvalidInputError,
    InvalidInputTypeError,
    UnknownSessionError,
)
from ..models import HandoffState
from ..statements import Capabilities, ReclaimScope, Transition
from ..validation import (
    NAME_LENGTH,
    ROLE_LENGTH,
    clean_error,
    require_count,
    require_fields,
    require_identifier,
    require_identifiers,
    require_message_fields,
    require_only_states,
    require_scope,
    require_seconds,
    require_state,
    require_text,
)

__all__ = [
    "MAX_BATCH",
    "MIN_TURN_LEASE_SECONDS",
    "STATS_FAILURE_WINDOW",
    "STATS_TOP_ERRORS",
    "STRANDED_ERROR",
    "ClaimBatch",
    "ClaimLedger",
    "Outcome",
    "Ownership",
    "Plan",
    "PlanBook",
    "Step",
    "UnknownSessionError",
    "delivery_holder",
    "lease_patience",
]

T = TypeVar("T")
Row = dict[str, Any]


#: The most rows one call may claim or finish at once.
MAX_BATCH = 10_000

#: ``handoff_stats`` reports failures of the last hour, with its most common errors.
STATS_FAILURE_WINDOW = 3600.0
STATS_TOP_ERRORS = 5

#: The error a reclaimed row gets: the delivery may or may not have happened, so say how to retry.
STRANDED_ERROR = (
    "The gateway stopped while delivering this handoff, so it may or may not have arrived. "
    "Run /handoff again to retry."
)


#: A turn lease lasts at least this long, whatever ``ttl_seconds`` asks (as upstream).
MIN_TURN_LEASE_SECONDS = 0.1
#: How far a lineage walk goes up before it stops (the statements' walk stops there too).
MAX_LINEAGE_DEPTH = statements.MAX_LINEAGE_DEPTH
#: Between two attempts of ``try_acquire_session_turn_lease(..., patience_s=...)``.
LEASE_RETRY_SECONDS = 0.05


def lease_patience(patience_s: float | None) -> Iterator[float]:
    """The pauses between attempts to take a held turn lease: none without patience, else
    every :data:`LEASE_RETRY_SECONDS` until ``patience_s`` seconds have passed."""
    if not patience_s:
        return
    deadline = time.monotonic() + require_seconds("patience_s", patience_s)
    while (remaining := deadline - time.monotonic()) > 0:
        yield min(LEASE_RETRY_SECONDS, remaining)


@dataclass(frozen=True, slots=True)
class Step:
    """One statement to execute with its bind parameters.

    ``wants_lastrowid`` asks for the driver's last inserted row id, for inserts on dialects
    without RETURNING (not every driver has the attribute, so it is read only on request).
    """

    statement: Executable
    params: Mapping[str, Any] = field(default_factory=dict)
    wants_lastrowid: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What executing a step produced, already fetched, so plans never touch a cursor."""

    rowcount: int
    rows: list[Row]
    lastrowid: int | None = None


Body = Generator[Step, Outcome, T]


class Plan(Generic[T]):
    """A validated unit of work. ``start()`` runs it from the top, which is how retries work.

    The body receives the connected dialect's :class:`Capabilities` first, for the transitions
    whose statements differ per dialect. ``after`` turns the body's result into the caller's,
    and runs only once the transaction committed (it may record what the store now holds).
    """

    __slots__ = ("_after", "_args", "_body", "single_statement", "writes")

    def __init__(
        self,
        body: Callable[..., Body[Any]],
        *args: Any,
        writes: bool,
        after: Callable[[Any], T] | None = None,
        single_statement: bool = True,
    ) -> None:
        self._body = body
        self._args = args
        self._after = after
        self.writes = writes
        #: The body runs at most one statement where ``Capabilities.single_statement`` holds,
        #: so a runner may send it in autocommit: one round trip, no BEGIN or COMMIT. A body
        #: that needs several statements there must say False (the runner refuses a second).
        self.single_statement = single_statement

    def start(self, caps: Capabilities) -> Body[Any]:
        return self._body(caps, *self._args)

    def finish(self, result: Any) -> T:
        """The caller's result, from what the committed body returned."""
        return result if self._after is None else self._after(result)


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who a store claims for, and for how long a claim holds without renewal.

    A store without ownership acts as the only gateway of its database: it reclaims every
    running row and finishes any running row. With ownership, claims are stamped, fenced and
    leased (``lease_seconds`` None: stamped and fenced, never expiring).
    """

    owner: str
    lease_seconds: float | None = None

    @classmethod
    def configure(cls, owner: object, lease_seconds: object) -> Ownership | None:
        """Validated ownership from a store's ``owner``/``lease_seconds`` arguments."""
        if owner is None:
            if lease_seconds is not None:
                raise InvalidInputError("lease_seconds needs an owner: leases belong to someone")
            return None
        lease = None if lease_seconds is None else require_seconds("lease_seconds", lease_seconds)
        if lease is not None and lease <= 0:
            raise InvalidInputError(f"lease_seconds must be positive, not {lease_seconds!r}")
        return cls(require_identifier("owner", owner), lease)

    def lease_until(self, now: float) -> float | None:
        return None if self.lease_seconds is None else now + self.lease_seconds


class ClaimLedger:
    """The attempt number of every row this store claimed and has not finished yet.

    Finishing a row is fenced on it: a gateway whose claim was rescued and handed to another
    attempt gets ``False`` instead of overwriting the newer attempt's outcome.
    """

    def __init__(self) -> None:
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, session_id: str, attempt: int | None) -> bool:
        if attempt is None:
            return False
        with self._lock:
            self._attempts[session_id] = attempt
        return True

    def record_claimed(self, rows: list[Row]) -> list[Row]:
        """Record every row of a claimed batch (its ``id`` and ``handoff_attempt``)."""
        attempts = {row["id"]: int(row["handoff_attempt"]) for row in rows}
        with self._lock:
            self._attempts.update(attempts)
        return rows

    def fence(
        self, session_id: str, ownership: Ownership | None
    ) -> tuple[statements.Fence, dict[str, Any]]:
        if ownership is None:
            return statements.Fence.NONE, {}
        with self._lock:
            attempt = self._attempts.get(session_id)
        if attempt is None:
            return statements.Fence.OWNER, {"owner": ownership.owner}
        return statements.Fence.CLAIM, {"owner": ownership.owner, "attempt": attempt}

    def forget(self, session_id: str, finished: bool) -> bool:
        """After a finish: a finished claim is over; a refused one stays fenced on its attempt,
        so a later complete/fail of the same lost claim cannot hit a newer attempt."""
        if finished:
            with self._lock:
                self._attempts.pop(session_id, None)
        return finished

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._attempts)


# -- bodies ------------------------------------------------------------------------------------


def _rows(_caps: Capabilities, statement: Executable, params: Mapping[str, Any]) -> Body[list[Row]]:
    outcome = yield Step(statement, params)
    return outcome.rows


def _first_row(
    _caps: Capabilities, statement: Executable, params: Mapping[str, Any]
) -> Body[Row | None]:
    outcome = yield Step(statement, params)
    return outcome.rows[0] if outcome.rows else None


def _has_rows(_caps: Capabilities, statement: Executable) -> Body[bool]:
    outcome = yield Step(statement)
    return bool(outcome.rows)


def _create_session(caps: Capabilities, params: Mapping[str, Any]) -> Body[str]:
    yield Step(statements.insert_session(caps.name), params)
    return str(params["id"])


def _append_message(caps: Capabilities, params: Mapping[str, Any]) -> Body[int]:
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
    row["content"] = decoded_content(row.get("content"), server=server)
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


#: One claim to finish: the row, how it is fenced, the attempt it is fenced on, and its
#: outcome: None completes it, an error fails it.
Claim = tuple[str, statements.Fence, int | None, str | None]
#: A turn lease to give up or refresh: the session and the holder named when it was taken.
Turn = tuple[str, str]


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


def _constant(_caps: Capabilities, value: T) -> Body[T]:
    yield from ()  # nothing to ask the database
    return value


def _owner_stats(row: Row) -> Row:
    running, live, expired = (int(row[k]) for k in ("running", "live_leases", "expired_leases"))
    return {
        "owner": row["owner"],
        "running": running,
        "live_leases": live,
        "expired_leases": expired,
        "no_lease": running - live - expired,
    }


def _stats(_caps: Capabilities, now: float) -> Body[Row]:
    counted = yield Step(statements.count_handoffs_by_state())
    counts = {state.value: 0 for state in HandoffState}
    counts.update({row["state"]: int(row["count"]) for row in counted.rows})
    oldest = yield Step(statements.oldest_pending_requested_at())
    requested_at = oldest.rows[0]["requested_at"] if oldest.rows else None
    owners = yield Step(statements.running_by_owner(), {"now": now})
    since = now - STATS_FAILURE_WINDOW
    failures = yield Step(statements.count_failures_since(), {"since": since})
    top = yield Step(statements.recent_failures(), {"since": since, "limit": STATS_TOP_ERRORS})
    return {
        "counts": counts,
        "oldest_pending_age_seconds": None
        if requested_at is None
        else max(0.0, now - requested_at),
        "running_by_owner": [_owner_stats(row) for row in owners.rows],
        "failures_last_hour": {
            "count": int(failures.rows[0]["count"]),
            "top_errors": [{"error": row["error"], "count": int(row["count"])} for row in top.rows],
        },
    }


# -- the plan book: every public operation as a plan ------------------------------------------


class PlanBook:
    """Builds the plan of every store operation, with the store's context bound.

    Both stores hold one and only run its plans (synchronously or awaited), so the wiring of
    clock, actor, ownership and fencing is written once, here. ``actor`` is what the audit
    trail records as "who" (the gateway's owner, "cli", or the caller's choice).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        actor: str,
        ownership: Ownership | None,
        announce: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock
        self.actor = actor
        self.ownership = ownership
        self.ledger = ClaimLedger()
        self._announce = announce

    # sessions and transcript

    def create_session(self, session_id: object, source: object, **fields: object) -> Plan[str]:
        values: dict[str, Any] = dict.fromkeys(statements.SESSION_FIELDS)
        values["started_at"] = self.clock()
        values.update(require_fields(fields))
        values["id"] = require_identifier("session_id", session_id)
        values["source"] = require_identifier("source", source, max_length=NAME_LENGTH)
        return Plan(_create_session, values, writes=True)

    def ensure_session(
        self, session_id: object, source: object = "unknown", **fields: object
    ) -> Plan[str]:
        return self.create_session(session_id, source, **fields)

    def append_message(
        self, session_id: object, role: object, content: object = None, **fields: object
    ) -> Plan[int]:
        """Append a live message with upstream's optional fields; the session's message and
        tool-call counters move in the same transaction."""
        values, tool_calls, timestamp = require_message_fields(fields)
        params = {
            **values,
            "session_id": require_identifier("session_id", session_id),
            "role": require_identifier("role", role, max_length=ROLE_LENGTH),
            "content": require_text("content", content),
            "now": self.clock() if timestamp is None else timestamp,
            "tool_calls_added": tool_calls,
        }
        return Plan(_append_message, params, writes=True)

    def get_messages(self, session_id: object) -> Plan[list[Row]]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_transcript, params, writes=False)

    def count_messages(self, session_id: object) -> Plan[int]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_count, statements.count_messages(), params, writes=False)

    # handoff transitions

    def _transition_params(self, session_id: object) -> dict[str, Any]:
        return {
            "session_id": require_identifier("session_id", session_id),
            "now": self.clock(),
            "actor": self.actor,
        }

    def _announced(self, requested: bool) -> bool:
        if requested and self._announce is not None:
            self._announce()
        return requested

    def request_handoff(self, session_id: object, platform: object) -> Plan[bool]:
        params = self._transition_params(session_id)
        params["platform"] = require_identifier("platform", platform, max_length=NAME_LENGTH)
        transition = statements.request_handoff()
        return Plan(_request, transition, params, writes=True, after=self._announced)

    def retry_handoff(self, session_id: object, platform: object = None) -> Plan[bool]:
        """failed -> pending again, on the same platform unless another is given."""
        params = self._transition_params(session_id)
        if platform is not None:
            platform = require_identifier("platform", platform, max_length=NAME_LENGTH)
        params["platform"] = platform
        transition = statements.request_handoff(retry=True)
        return Plan(_request, transition, params, writes=True, after=self._announced)

    def claim_handoff(self, session_id: object) -> Plan[bool]:
        params = self._transition_params(session_id)
        ownership = self.ownership
        if ownership is None:
            # Without ownership nothing is fenced on the attempt (ClaimLedger.fence answers
            # Fence.NONE), so the hot path neither reads it back nor records it.
            params.update(owner=None, lease_expires_at=None)
            return Plan(_claimed, params, writes=True)
        params["owner"] = ownership.owner
        params["lease_expires_at"] = ownership.lease_until(params["now"])
        after = functools.partial(self.ledger.record, params["session_id"])
        return Plan(_claim, params, writes=True, after=after)

    def claim_pending_handoffs(self, limit: object, platform: object = None) -> Plan[list[Row]]:
        """Up to ``limit`` pending rows (of ``platform``, when given) claimed in one go."""
        params: dict[str, Any] = {
            "limit": require_count("limit", limit, maximum=MAX_BATCH),
            "now": self.clock(),
            "actor": self.actor,
        }
        if platform is not None:
            params["platform"] = require_identifier("platform", platform, max_length=NAME_LENGTH)
        ownership = self.ownership
        params["owner"] = ownership.owner if ownership else None
        params["lease_expires_at"] = ownership.lease_until(params["now"]) if ownership else None
        return Plan(
            _claim_batch,
            platform is not None,
            params,
            writes=True,
            after=self._record_claims,
        )

    def _record_claims(self, rows: list[Row]) -> list[Row]:
        return rows if self.ownership is None else self.ledger.record_claimed(rows)

    def claim_handoffs(
        self, session_ids: object, turn_holders: object = None, turn_seconds: object = 300.0
    ) -> Plan[ClaimBatch]:
        """pending -> running for those of ``session_ids`` still pending (rows another claimer
        holds are left to it), each stamped, leased and recorded like :meth:`claim_handoff`.

        With ``turn_holders`` (``{session id: holder}``, one for every id), a row is claimed
        only with its conversation's turn lease, taken for its holder for ``turn_seconds`` in
        the same transaction (as :meth:`try_acquire_session_turn_lease` takes it); of several
        rows of one conversation only the oldest is tried. A row whose turn is held elsewhere
        stays pending, and nothing is taken for it.
        """
        ids = require_identifiers("session_ids", session_ids)
        if len(ids) > MAX_BATCH:
            raise InvalidInputError(
                f"session_ids names {len(ids)} rows; claim at most {MAX_BATCH} at once"
            )
        now = self.clock()
        ownership = self.ownership
        params: dict[str, Any] = {
            "now": now,
            "actor": self.actor,
            "owner": ownership.owner if ownership else None,
            "lease_expires_at": ownership.lease_until(now) if ownership else None,
        }
        holders = None
        if turn_holders is not None:
            holders = dict(_turns("turn_holders", turn_holders))
            missing = [session_id for session_id in ids if session_id not in holders]
            if missing:
                raise InvalidInputError(
                    f"turn_holders names no holder for {missing[0]!r}; give one for every id"
                )
            ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("turn_seconds", turn_seconds))
            params["turn_until"] = now + ttl
        if not ids:
            return Plan(_constant, ClaimBatch([], []), writes=False)
        return Plan(_claim_given, ids, holders, params, writes=True, after=self._record_batch)

    def claim_next_handoffs(
        self,
        limit: object,
        exclude: object = (),
        turn_gateway: object = None,
        turn_seconds: object = 300.0,
    ) -> Plan[ClaimBatch]:
        """:meth:`claim_handoffs` of the ``limit`` oldest pending rows no other claimer holds,
        but those in ``exclude``; each row's turn lease (with ``turn_gateway``) named for its
        :func:`delivery_holder`."""
        now = self.clock()
        ownership = self.ownership
        params: dict[str, Any] = {
            "limit": require_count("limit", limit, maximum=MAX_BATCH),
            "exclude": require_identifiers("exclude", exclude),
            "now": now,
            "actor": self.actor,
            "owner": ownership.owner if ownership else None,
            "lease_expires_at": ownership.lease_until(now) if ownership else None,
        }
        gateway = None
        if turn_gateway is not None:
            gateway = require_identifier("turn_gateway", turn_gateway)
            ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("turn_seconds", turn_seconds))
            params.update(turn_gateway=gateway, turn_until=now + ttl)
        return Plan(_claim_next, gateway, params, writes=True, after=self._record_batch)

    def _record_batch(self, batch: ClaimBatch) -> ClaimBatch:
        self._record_claims(batch.rows)
        return batch

    def complete_handoff(self, session_id: object) -> Plan[bool]:
        params = self._transition_params(session_id)
        if self.ownership is None:  # nothing was recorded by claim_handoff: nothing to forget
            transition = statements.complete_handoff(statements.Fence.NONE)
            return Plan(_moved, transition, params, writes=True)
        fence, fence_params = self.ledger.fence(params["session_id"], self.ownership)
        params.update(fence_params)
        after = functools.partial(self.ledger.forget, params["session_id"])
        transition = statements.complete_handoff(fence)
        return Plan(_moved, transition, params, writes=True, after=after)

    def fail_handoff(
        self, session_id: object, error: object, only_states: object = None
    ) -> Plan[bool]:
        params = self._transition_params(session_id)
        from_states = require_only_states(only_states)
        fence, fence_params = self.ledger.fence(params["session_id"], self.ownership)
        params.update(fence_params, error=clean_error(error))
        after = functools.partial(self.ledger.forget, params["session_id"])
        transition = statements.fail_handoff(from_states, fence)
        return Plan(_moved, transition, params, writes=True, after=after)

    def complete_handoffs(self, session_ids: object) -> Plan[dict[str, bool]]:
        """running -> completed for many rows at once, each fenced like :meth:`complete_handoff`."""
        ids = require_identifiers("session_ids", session_ids)
        return self._finish(dict.fromkeys(ids), [])

    def fail_handoffs(self, errors: object) -> Plan[dict[str, bool]]:
        """running -> failed for many rows at once (``{id: error}``), each with its own error,
        each fenced like :meth:`fail_handoff` on a running row."""
        if not isinstance(errors, Mapping):
            kind = type(errors).__name__
            raise InvalidInputTypeError(f"errors must be a mapping of id to error, not {kind}")
        ids = require_identifiers("errors", list(errors))
        return self._finish({i: clean_error(errors[i]) for i in ids}, [])

    def finish_handoffs(
        self, outcomes: object, release_turns: object = None
    ) -> Plan[dict[str, bool]]:
        """Finish many running rows at once, ``{id: None}`` completing one and ``{id: error}``
        failing it, each fenced like :meth:`complete_handoff` / :meth:`fail_handoff`; and, in
        the same transaction, give up the turn leases ``release_turns`` names
        (``{session id: holder}``), whatever became of the rows."""
        if not isinstance(outcomes, Mapping):
            kind = type(outcomes).__name__
            raise InvalidInputTypeError(
                f"outcomes must be a mapping of id to None (completed) or an error (failed), "
                f"not {kind}"
            )
        ids = require_identifiers("outcomes", list(outcomes))
        errors = {i: None if outcomes[i] is None else clean_error(outcomes[i]) for i in ids}
        releases = [] if release_turns is None else _turns("release_turns", release_turns)
        return self._finish(errors, releases)

    def _finish(
        self, errors: Mapping[str, str | None], releases: list[Turn]
    ) -> Plan[dict[str, bool]]:
        if not errors and not releases:
            return Plan(_nothing_finished, writes=False)
        claims: list[Claim] = []
        for session_id, error in errors.items():
            fence, fence_params = self.ledger.fence(session_id, self.ownership)
            claims.append((session_id, fence, fence_params.get("attempt"), error))
        owner = self.ownership.owner if self.ownership else None
        params = {"now": self.clock(), "actor": self.actor, "owner": owner}
        after = self._forget_finished
        return Plan(_finish_claims, claims, releases, params, writes=True, after=after)

    def _forget_finished(self, done: dict[str, bool]) -> dict[str, bool]:
        for session_id, finished in done.items():
            self.ledger.forget(session_id, finished)
        return done

    def renew_handoff_leases(self, session_ids: object) -> Plan[list[str]]:
        # In id order, like the row locks a reclaim takes: opposite orders would deadlock.
        ids = sorted(require_identifiers("session_ids", session_ids))
        ownership = self.ownership
        if ownership is None or ownership.lease_seconds is None or not ids:
            return Plan(_nothing_renewed, writes=False)
        lease_until = ownership.lease_until(self.clock())
        params = {"owner": ownership.owner, "lease_expires_at": lease_until}
        return Plan(_renew, ids, params, writes=True)

    def _reclaim_params(self, error: object) -> dict[str, Any]:
        return {
            "error": clean_error(error),
            "now": self.clock(),
            "actor": self.actor,
            "owner": self.ownership.owner if self.ownership else None,
        }

    def reclaim_handoffs(self, scope: object, error: object) -> Plan[list[str]]:
        """Fail the running rows in ``scope`` (see :class:`~hermes_state.statements.ReclaimScope`).

        STALE without ownership takes rows without a lease or with an expired one: a store
        that does not know who it is never takes a row a live gateway holds under a lease.
        """
        params = self._reclaim_params(error)
        return Plan(_reclaim, require_scope(scope), params, writes=True)

    def reclaim_stale_running_handoffs(self, error: object) -> Plan[list[str]]:
        return self.reclaim_handoffs(statements.ReclaimScope.STALE, error)

    def reclaim_expired_handoffs(self, error: object) -> Plan[list[str]]:
        return self.reclaim_handoffs(statements.ReclaimScope.EXPIRED, error)

    def reclaim_running_handoffs(self, error: object) -> Plan[list[str]]:
        return self.reclaim_handoffs(statements.ReclaimScope.ALL, error)

    def preview_reclaim(self, scope: object = "stale") -> Plan[list[Row]]:
        """What :meth:`reclaim_handoffs` would fail, and why, changing nothing."""
        params = self._reclaim_params("")
        return Plan(_reclaim_preview, require_scope(scope), params, writes=False)

    # the audit trail

    def handoff_history(self, session_id: object) -> Plan[list[Row]]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_rows, statements.handoff_history(), params, writes=False)

    def prune_handoff_events(self, older_than_seconds: object, dry_run: bool = False) -> Plan[int]:
        """Delete events older than ``older_than_seconds``; with ``dry_run`` only count them."""
        age = require_seconds("older_than_seconds", older_than_seconds)
        if age < 0:
            raise InvalidInputError(f"older_than_seconds must not be negative, not {age:g}")
        params = {"before": self.clock() - age}
        if dry_run:
            return Plan(_count, statements.count_events_before(), params, writes=False)
        return Plan(_changed, statements.prune_events(), params, writes=True)

    # session turn leases

    def _turn_params(
        self, session_id: object, holder: object, ttl_seconds: object = None
    ) -> dict[str, Any] | None:
        """Validated parameters; None for an empty id or holder (upstream answers "no")."""
        if session_id == "" or holder == "":
            return None
        params: dict[str, Any] = {
            "session_id": require_identifier("session_id", session_id),
            "lease_holder": require_identifier("holder", holder),
            "now": self.clock(),
        }
        if ttl_seconds is not None:
            ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("ttl_seconds", ttl_seconds))
            params["lease_until"] = params["now"] + ttl
        return params

    def try_acquire_session_turn_lease(
        self, session_id: object, holder: object, ttl_seconds: object
    ) -> Plan[bool]:
        """Take the conversation's turn lease (an expired one is taken over); True when
        ``holder`` holds it afterwards, also when it already did."""
        params = self._turn_params(session_id, holder, ttl_seconds)
        if params is None:
            return Plan(_constant, False, writes=False)
        # Several statements (the lineage walk, then the lease): one transaction.
        return Plan(_acquire_turn, params, writes=True, single_statement=False)

    def refresh_session_turn_lease(
        self, session_id: object, holder: object, ttl_seconds: object
    ) -> Plan[bool]:
        """Extend the lease while ``holder`` holds it; False once another took it over."""
        params = self._turn_params(session_id, holder, ttl_seconds)
        if params is None:
            return Plan(_constant, False, writes=False)
        return Plan(_refresh_turn, params, writes=True, single_statement=False)

    def release_session_turn_lease(self, session_id: object, holder: object) -> Plan[None]:
        """Give the lease up if ``holder`` holds it; otherwise change nothing."""
        params = self._turn_params(session_id, holder)
        if params is None:
            return Plan(_constant, None, writes=False)
        return Plan(_release_turn, params, writes=True, single_statement=False)

    def refresh_session_turn_leases(
        self, turn_holders: object, ttl_seconds: object
    ) -> Plan[list[str]]:
        """:meth:`refresh_session_turn_lease` for many sessions at once (``{session id:
        holder}``); the sessions whose holder still held the lease, sorted."""
        turns = _turns("turn_holders", turn_holders)
        if not turns:
            return Plan(_constant, [], writes=False)
        ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("ttl_seconds", ttl_seconds))
        now = self.clock()
        params = {"now": now, "lease_until": now + ttl}
        return Plan(_refresh_turns, turns, params, writes=True)

    def release_session_turn_leases(self, turn_holders: object) -> Plan[None]:
        """:meth:`release_session_turn_lease` for many sessions at once (``{session id:
        holder}``)."""
        turns = _turns("turn_holders", turn_holders)
        if not turns:
            return Plan(_constant, None, writes=False)
        return Plan(_release_turns, turns, writes=True)

    # reads

    def list_pending_handoffs(self) -> Plan[list[Row]]:
        return Plan(_rows, statements.list_handoffs(HandoffState.PENDING), {}, writes=False)

    def list_handoffs(
        self,
        state: object = None,
        limit: object = None,
        after: object = None,
        search: object = None,
    ) -> Plan[list[Row]]:
        """Rows in ``state`` (every handed-off row for None), at most ``limit`` of them, those
        sorting after the session ``after`` (a page's last id), with ``search`` in their id."""
        wanted = None if state is None else require_state(state)
        params: dict[str, Any] = {}
        if limit is not None:
            params["limit"] = require_count("limit", limit)
        if after is not None:
            params["after"] = require_identifier("after", after)
        if search is not None:
            needle = require_text("search", search, nullable=False) or ""
            escaped = needle.replace("/", "//").replace("%", "/%").replace("_", "/_")
            params["search"] = f"%{escaped}%"
        statement = statements.list_handoffs(
            wanted, limit is not None, after=after is not None, search=search is not None
        )
        return Plan(_rows, statement, params, writes=False)

    def get_transcripts(self, session_ids: object) -> Plan[dict[str, list[Row]]]:
        """:meth:`get_messages` of many sessions at once: ``{id: transcript}``, every id given
        (an unknown one with an empty transcript)."""
        ids = require_identifiers("session_ids", session_ids)
        if not ids:
            return Plan(_constant, {}, writes=False)
        return Plan(_transcripts, ids, writes=False)

    def get_session(self, session_id: object) -> Plan[Row | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_first_row, statements.get_session(), params, writes=False)

    def handoff_events_after(self, after: object, limit: object) -> Plan[list[Row]]:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise InvalidInputError(f"after must be an event id (a number >= 0), not {after!r}")
        params = {"after": after, "limit": require_count("limit", limit)}
        return Plan(_rows, statements.handoff_events_after(), params, writes=False)

    def recent_handoff_failures(self, limit: object) -> Plan[list[Row]]:
        params = {"limit": require_count("limit", limit)}
        return Plan(_rows, statements.recent_failed_events(), params, writes=False)

    def last_handoff_event_id(self) -> Plan[int]:
        return Plan(_last_event_id, writes=False)

    def list_sessions(
        self,
        source: object = None,
        handoff_state: object = None,
        since: object = None,
        limit: object = None,
    ) -> Plan[list[Row]]:
        """Sessions, newest first: of ``source``, in ``handoff_state``, started at or after
        ``since`` (epoch seconds), at most ``limit`` (None: no filter, no limit)."""
        params: dict[str, Any] = {}
        if source is not None:
            params["source"] = require_identifier("source", source, max_length=NAME_LENGTH)
        if since is not None:
            params["since"] = require_seconds("since", since)
        if limit is not None:
            params["limit"] = require_count("limit", limit)
        statement = statements.list_sessions(
            None if handoff_state is None else require_state(handoff_state),
            by_source=source is not None,
            since=since is not None,
            limited=limit is not None,
        )
        return Plan(_rows, statement, params, writes=False)

    def has_pending_handoffs(self) -> Plan[bool]:
        return Plan(_has_rows, statements.has_pending_handoffs(), writes=False)

    def get_handoff_state(self, session_id: object) -> Plan[Row | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_first_row, statements.get_handoff_state(), params, writes=False)

    def handoff_stats(self) -> Plan[Row]:
        return Plan(_stats, self.clock(), writes=False, single_statement=False)


def _turns(name: str, value: object) -> list[Turn]:
    """Validated ``{session id: holder}`` pairs, in session id order."""
    if not isinstance(value, Mapping):
        kind = type(value).__name__
        raise InvalidInputTypeError(f"{name} must be a mapping of session id to holder, not {kind}")
    pairs = {
        require_identifier("session_id", session_id): require_identifier("holder", holder)
        for session_id, holder in value.items()
    }
    return sorted(pairs.items())


def _nothing_finished(_caps: Capabilities) -> Body[dict[str, bool]]:
    yield from ()  # no claim given: no statement to run
    return {}


def _last_event_id(_caps: Capabilities) -> Body[int]:
    outcome = yield Step(statements.last_handoff_event_id())
    last = outcome.rows[0]["last"] if outcome.rows else None
    return int(last or 0)


def _nothing_renewed(_caps: Capabilities) -> Body[list[str]]:
    yield from ()  # no statement to run: nothing is leased
    return []


def _changed(_caps: Capabilities, statement: Executable, params: Mapping[str, Any]) -> Body[int]:
    outcome = yield Step(statement, params)
    return outcome.rowcount


def _count(_caps: Capabilities, statement: Executable, params: Mapping[str, Any]) -> Body[int]:
    outcome = yield Step(statement, params)
    return int(outcome.rows[0]["count"]) if outcome.rows else 0
