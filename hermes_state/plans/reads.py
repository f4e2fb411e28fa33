"""Bodies of the reads: rows, one row, counts, constants and the handoff stats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Executable

from .. import statements
from ..models import HandoffState
from ..statements import Capabilities
from .core import STATS_FAILURE_WINDOW, STATS_TOP_ERRORS, Body, Row, Step, T


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


def _last_event_id(_caps: Capabilities) -> Body[int]:
    outcome = yield Step(statements.last_handoff_event_id())
    last = outcome.rows[0]["last"] if outcome.rows else None
    return int(last or 0)


def _changed(_caps: Capabilities, statement: Executable, params: Mapping[str, Any]) -> Body[int]:
    outcome = yield Step(statement, params)
    return outcome.rowcount


def _done(_caps: Capabilities, statement: Executable, params: Mapping[str, Any]) -> Body[None]:
    yield Step(statement, params)


def _count(_caps: Capabilities, statement: Executable, params: Mapping[str, Any]) -> Body[int]:
    outcome = yield Step(statement, params)
    return int(outcome.rows[0]["count"]) if outcome.rows else 0
