"""Sessions and handoff transitions as sans-IO plans, run alike by the sync and the async stores.

A plan is a generator: it yields a :class:`Step` (a statement from :mod:`hermes_state.statements`
and its parameters), receives the :class:`Outcome`, and finally returns the operation's result.
The stores own connections, transactions and retries and only *drive* plans, so every
transition's logic is written once, here. Inputs are validated when a plan is made, before any
connection is touched, so bad input never opens a transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Executable

from . import statements
from .errors import HermesStateError
from .models import HandoffState
from .statements import Capabilities
from .validation import (
    NAME_LENGTH,
    ROLE_LENGTH,
    clean_error,
    require_count,
    require_fields,
    require_identifier,
    require_only_states,
    require_state,
    require_text,
)

__all__ = [
    "STRANDED_ERROR",
    "Outcome",
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
    "reclaim_stale_running_handoffs",
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
    whose statements differ per dialect.
    """

    __slots__ = ("_args", "_body", "writes")

    def __init__(self, body: Callable[..., Body[T]], *args: Any, writes: bool) -> None:
        self._body = body
        self._args = args
        self.writes = writes

    def start(self, caps: Capabilities) -> Body[T]:
        return self._body(caps, *self._args)


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


def _reclaim(caps: Capabilities, error: str, now: float) -> Body[list[str]]:
    params = {"error": error, "now": now}
    if caps.update_returning:
        outcome = yield Step(statements.reclaim_running_handoffs(True, False), params)
        return sorted(row["id"] for row in outcome.rows)
    locked = yield Step(statements.lock_running_handoffs())
    ids = sorted(row["id"] for row in locked.rows)
    if ids:
        yield Step(statements.reclaim_running_handoffs(False, True), {**params, "ids": ids})
    return ids


# -- plans: the public operations --------------------------------------------------------------


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


def request_handoff(session_id: object, platform: object, *, now: float) -> Plan[bool]:
    params = {
        "session_id": require_identifier("session_id", session_id),
        "platform": require_identifier("platform", platform, max_length=NAME_LENGTH),
        "now": now,
    }
    return Plan(_changed_one, statements.request_handoff(), params, writes=True)


def claim_handoff(session_id: object, *, now: float) -> Plan[bool]:
    params = {"session_id": require_identifier("session_id", session_id), "now": now}
    return Plan(_changed_one, statements.claim_handoff(), params, writes=True)


def complete_handoff(session_id: object, *, now: float) -> Plan[bool]:
    params = {"session_id": require_identifier("session_id", session_id), "now": now}
    return Plan(_changed_one, statements.complete_handoff(), params, writes=True)


def fail_handoff(
    session_id: object, error: object, *, only_states: Sequence[str] | None, now: float
) -> Plan[bool]:
    statement = statements.fail_handoff(require_only_states(only_states))
    params = {
        "session_id": require_identifier("session_id", session_id),
        "error": clean_error(error),
        "now": now,
    }
    return Plan(_changed_one, statement, params, writes=True)


def reclaim_stale_running_handoffs(error: object, *, now: float) -> Plan[list[str]]:
    return Plan(_reclaim, clean_error(error), now, writes=True)


def list_pending_handoffs() -> Plan[list[Row]]:
    return Plan(_rows, statements.list_handoffs(HandoffState.PENDING), {}, writes=False)


def list_handoffs(state: object = None, *, limit: object = None) -> Plan[list[Row]]:
    """Rows in ``state`` (every handed-off row for None), at most ``limit`` of them."""
    wanted = None if state is None else require_state(state)
    if limit is None:
        return Plan(_rows, statements.list_handoffs(wanted), {}, writes=False)
    params = {"limit": require_count("limit", limit)}
    return Plan(_rows, statements.list_handoffs(wanted, limited=True), params, writes=False)


def handoff_stats(*, now: float) -> Plan[Row]:
    return Plan(_stats, now, writes=False)


def _stats(_caps: Capabilities, now: float) -> Body[Row]:
    counted = yield Step(statements.count_handoffs_by_state())
    counts = {state.value: 0 for state in HandoffState}
    counts.update({row["state"]: int(row["count"]) for row in counted.rows})
    oldest = yield Step(statements.oldest_pending_requested_at())
    requested_at = oldest.rows[0]["requested_at"] if oldest.rows else None
    return {
        "counts": counts,
        "oldest_pending_age_seconds": None
        if requested_at is None
        else max(0.0, now - requested_at),
    }


def has_pending_handoffs() -> Plan[bool]:
    return Plan(_has_rows, statements.has_pending_handoffs(), writes=False)


def _has_rows(_caps: Capabilities, statement: Executable) -> Body[bool]:
    outcome = yield Step(statement)
    return bool(outcome.rows)


def get_handoff_state(session_id: object) -> Plan[Row | None]:
    params = {"session_id": require_identifier("session_id", session_id)}
    return Plan(_first_row, statements.get_handoff_state(), params, writes=False)
