"""Sessions and handoff transitions as sans-IO plans, run alike by the sync and the async stores.

A plan is a generator: it yields a :class:`Step` (a statement from :mod:`hermes_state.statements`
and its parameters), receives the :class:`Outcome`, and finally returns the operation's result.
The stores own connections, transactions and retries and only *drive* plans, so every
transition's logic is written once, here. Inputs are validated when a plan is made, before any
connection is touched, so bad input never opens a transaction.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Executable

from . import statements
from .errors import HermesStateError, InvalidInputError
from .models import HandoffState
from .statements import Capabilities, ReclaimScope
from .validation import (
    NAME_LENGTH,
    ROLE_LENGTH,
    clean_error,
    require_count,
    require_fields,
    require_identifier,
    require_identifiers,
    require_only_states,
    require_seconds,
    require_state,
    require_text,
)

__all__ = [
    "STRANDED_ERROR",
    "ClaimLedger",
    "Outcome",
    "Ownership",
    "Plan",
    "Step",
    "UnknownSessionError",
    "append_message",
    "claim_handoff",
    "complete_handoff",
    "create_session",
    "fail_handoff",
    "get_handoff_state",
    "get_messages",
    "handoff_stats",
    "has_pending_handoffs",
    "list_handoffs",
    "list_pending_handoffs",
    "reclaim_expired_handoffs",
    "reclaim_stale_running_handoffs",
    "renew_handoff_leases",
    "request_handoff",
]

T = TypeVar("T")
Row = dict[str, Any]


#: The error a reclaimed row gets: the delivery may or may not have happened, so say how to retry.
STRANDED_ERROR = (
    "The gateway stopped while delivering this handoff, so it may or may not have arrived. "
    "Run /handoff again to retry."
)


class UnknownSessionError(HermesStateError, LookupError):
    """The operation needs an existing session and there is none with this id."""


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

    __slots__ = ("_after", "_args", "_body", "writes")

    def __init__(
        self,
        body: Callable[..., Body[Any]],
        *args: Any,
        writes: bool,
        after: Callable[[Any], T] | None = None,
    ) -> None:
        self._body = body
        self._args = args
        self._after = after
        self.writes = writes

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
        with self._lock:
            self._attempts.pop(session_id, None)
        return finished

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._attempts)


# -- bodies ------------------------------------------------------------------------------------


def _changed_one(
    _caps: Capabilities, statement: Executable, params: Mapping[str, Any]
) -> Body[bool]:
    outcome = yield Step(statement, params)
    return outcome.rowcount == 1


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
    returning = caps.insert_returning
    outcome = yield Step(
        statements.append_message(returning), params, wants_lastrowid=not returning
    )
    if outcome.rowcount == 0 and not outcome.rows:
        raise UnknownSessionError(
            f"session {params['session_id']!r} does not exist; create it with create_session first"
        )
    if outcome.rows:
        return int(outcome.rows[0]["id"])
    assert outcome.lastrowid is not None, "the driver reported no id for the inserted message"
    return outcome.lastrowid


def _request(caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    outcome = yield Step(statements.request_handoff(), params)
    if outcome.rowcount != 1:
        return False
    if caps.name == "postgresql":
        yield Step(statements.notify_handoff_requested(), {"session_id": params["session_id"]})
    return True


def _claim(caps: Capabilities, params: Mapping[str, Any]) -> Body[int | None]:
    """The attempt number claimed, or None when another claimer won."""
    returning = caps.update_returning
    outcome = yield Step(statements.claim_handoff(returning), params)
    if returning:
        return int(outcome.rows[0]["handoff_attempt"]) if outcome.rows else None
    if outcome.rowcount != 1:
        return None
    claimed = yield Step(statements.claimed_attempt(), {"session_id": params["session_id"]})
    return int(claimed.rows[0]["handoff_attempt"])


def _renew(
    _caps: Capabilities, session_ids: list[str], params: Mapping[str, Any]
) -> Body[list[str]]:
    renewed = []
    for session_id in session_ids:
        outcome = yield Step(statements.renew_lease(), {**params, "session_id": session_id})
        if outcome.rowcount == 1:
            renewed.append(session_id)
    return renewed


def _reclaim(caps: Capabilities, scope: ReclaimScope, params: Mapping[str, Any]) -> Body[list[str]]:
    if caps.update_returning:
        outcome = yield Step(statements.reclaim_handoffs(scope, True, False), params)
        return sorted(row["id"] for row in outcome.rows)
    locked = yield Step(statements.lock_reclaimable(scope), params)
    ids = sorted(row["id"] for row in locked.rows)
    if ids:
        yield Step(statements.reclaim_handoffs(scope, False, True), {**params, "ids": ids})
    return ids


def _stats(_caps: Capabilities, now: float) -> Body[Row]:
    counted = yield Step(statements.count_handoffs_by_state())
    counts = {state.value: 0 for state in HandoffState}
    counts.update({row["state"]: int(row["count"]) for row in counted.rows})
    oldest = yield Step(statements.oldest_pending_requested_at())
    requested_at = oldest.rows[0]["requested_at"] if oldest.rows else None
    age = None if requested_at is None else max(0.0, now - requested_at)
    return {"counts": counts, "oldest_pending_age_seconds": age}


# -- plans: sessions and transcript ------------------------------------------------------------


def create_session(
    session_id: object, source: object, fields: Mapping[str, object], *, now: float
) -> Plan[str]:
    values: dict[str, Any] = dict.fromkeys(statements.SESSION_FIELDS)
    values["started_at"] = now
    values.update(require_fields(fields))
    values["id"] = require_identifier("session_id", session_id)
    values["source"] = require_identifier("source", source, max_length=NAME_LENGTH)
    return Plan(_create_session, values, writes=True)


def append_message(session_id: object, role: object, content: object, *, now: float) -> Plan[int]:
    params = {
        "session_id": require_identifier("session_id", session_id),
        "role": require_identifier("role", role, max_length=ROLE_LENGTH),
        "content": require_text("content", content),
        "now": now,
    }
    return Plan(_append_message, params, writes=True)


def get_messages(session_id: object) -> Plan[list[Row]]:
    params = {"session_id": require_identifier("session_id", session_id)}
    return Plan(_rows, statements.get_messages(), params, writes=False)


# -- plans: handoff transitions ----------------------------------------------------------------


def request_handoff(
    session_id: object,
    platform: object,
    *,
    now: float,
    announce: Callable[[], None] | None = None,
) -> Plan[bool]:
    """``announce`` runs once a request committed (the in-process watcher wake-up)."""
    params = {
        "session_id": require_identifier("session_id", session_id),
        "platform": require_identifier("platform", platform, max_length=NAME_LENGTH),
        "now": now,
    }
    after = None if announce is None else functools.partial(_announced, announce)
    return Plan(_request, params, writes=True, after=after)


def _announced(announce: Callable[[], None], requested: bool) -> bool:
    if requested:
        announce()
    return requested


def claim_handoff(
    session_id: object, *, now: float, ownership: Ownership | None, ledger: ClaimLedger
) -> Plan[bool]:
    sid = require_identifier("session_id", session_id)
    params = {
        "session_id": sid,
        "now": now,
        "owner": ownership.owner if ownership else None,
        "lease_expires_at": ownership.lease_until(now) if ownership else None,
    }
    return Plan(_claim, params, writes=True, after=functools.partial(ledger.record, sid))


def complete_handoff(
    session_id: object, *, now: float, ownership: Ownership | None, ledger: ClaimLedger
) -> Plan[bool]:
    sid = require_identifier("session_id", session_id)
    fence, fence_params = ledger.fence(sid, ownership)
    params = {"session_id": sid, "now": now, **fence_params}
    statement = statements.complete_handoff(fence)
    return Plan(
        _changed_one, statement, params, writes=True, after=functools.partial(ledger.forget, sid)
    )


def fail_handoff(
    session_id: object,
    error: object,
    *,
    only_states: Sequence[str] | None,
    now: float,
    ownership: Ownership | None,
    ledger: ClaimLedger,
) -> Plan[bool]:
    sid = require_identifier("session_id", session_id)
    from_states = require_only_states(only_states)
    fence, fence_params = ledger.fence(sid, ownership)
    params = {"session_id": sid, "error": clean_error(error), "now": now, **fence_params}
    statement = statements.fail_handoff(from_states, fence)
    return Plan(
        _changed_one, statement, params, writes=True, after=functools.partial(ledger.forget, sid)
    )


def renew_handoff_leases(
    session_ids: object, *, now: float, ownership: Ownership | None
) -> Plan[list[str]]:
    ids = require_identifiers("session_ids", session_ids)
    if ownership is None or ownership.lease_seconds is None or not ids:
        return Plan(_nothing_renewed, writes=False)
    params = {"owner": ownership.owner, "lease_expires_at": ownership.lease_until(now)}
    return Plan(_renew, ids, params, writes=True)


def _nothing_renewed(_caps: Capabilities) -> Body[list[str]]:
    yield from ()  # no statement to run: nothing is leased
    return []


def reclaim_stale_running_handoffs(
    error: object, *, now: float, ownership: Ownership | None
) -> Plan[list[str]]:
    """Without ownership: every running row. With it: the rows no live gateway holds."""
    params = {"error": clean_error(error), "now": now}
    if ownership is None:
        return Plan(_reclaim, ReclaimScope.ALL, params, writes=True)
    return Plan(_reclaim, ReclaimScope.STALE, {**params, "owner": ownership.owner}, writes=True)


def reclaim_expired_handoffs(error: object, *, now: float) -> Plan[list[str]]:
    params = {"error": clean_error(error), "now": now}
    return Plan(_reclaim, ReclaimScope.EXPIRED, params, writes=True)


# -- plans: reads ------------------------------------------------------------------------------


def list_pending_handoffs() -> Plan[list[Row]]:
    return Plan(_rows, statements.list_handoffs(HandoffState.PENDING), {}, writes=False)


def list_handoffs(state: object = None, *, limit: object = None) -> Plan[list[Row]]:
    """Rows in ``state`` (every handed-off row for None), at most ``limit`` of them."""
    wanted = None if state is None else require_state(state)
    if limit is None:
        return Plan(_rows, statements.list_handoffs(wanted), {}, writes=False)
    params = {"limit": require_count("limit", limit)}
    return Plan(_rows, statements.list_handoffs(wanted, limited=True), params, writes=False)


def has_pending_handoffs() -> Plan[bool]:
    return Plan(_has_rows, statements.has_pending_handoffs(), writes=False)


def get_handoff_state(session_id: object) -> Plan[Row | None]:
    params = {"session_id": require_identifier("session_id", session_id)}
    return Plan(_first_row, statements.get_handoff_state(), params, writes=False)


def handoff_stats(*, now: float) -> Plan[Row]:
    return Plan(_stats, now, writes=False)
