"""Putting rows in place through real stores, and reading back what the public API hides.

* ``HandClock``: a clock the test moves by hand, to give to every store of a test.
* ``put`` / ``make_pending``: sessions walked to a handoff state through real transitions,
  never by raw SQL.
* ``handoff_row``: a session's handoff columns, owner, lease and attempt included.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from hermes_state import SessionDB
from hermes_state.models import sessions

__all__ = ["HandClock", "handoff_row", "make_pending", "put"]


class HandClock:
    """A clock the test moves by hand; every store of a test reads the same one."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 1.0) -> None:
        self.now += seconds


def put(
    db: SessionDB,
    session_id: str,
    state: str | None,
    *,
    platform: str = "telegram",
    error: str = "the platform said no",
) -> None:
    """Create the session and walk it to ``state`` (None: never requested) through real
    transitions: requested for ``platform``, claimed, then completed or failed with ``error``."""
    db.create_session(session_id, "cli")
    if state is None:
        return
    assert db.request_handoff(session_id, platform) is True
    if state == "pending":
        return
    assert db.claim_handoff(session_id) is True
    if state == "completed":
        assert db.complete_handoff(session_id) is True
    elif state == "failed":
        assert db.fail_handoff(session_id, error) is True


def make_pending(
    db: SessionDB, *session_ids: str, platform: str = "telegram", started_at: float | None = None
) -> None:
    """Create each session and request its handoff. With ``started_at``, the sessions start
    a second apart from then, in the order given (so they are listed oldest first)."""
    for index, session_id in enumerate(session_ids):
        if started_at is None:
            db.create_session(session_id, "cli")
        else:
            db.create_session(session_id, "cli", started_at=started_at + index)
        assert db.request_handoff(session_id, platform) is True


_c = sessions.c
_HANDOFF_COLUMNS = select(
    _c.handoff_state.label("state"),
    _c.handoff_owner.label("owner"),
    _c.handoff_lease_expires_at.label("lease"),
    _c.handoff_attempt.label("attempt"),
    _c.handoff_error.label("error"),
)


def handoff_row(db: SessionDB, session_id: str) -> dict[str, Any]:
    """The handoff columns of one session: state, owner, lease, attempt and error."""
    query = _HANDOFF_COLUMNS.where(_c.id == session_id)
    return db._execute_write(lambda conn: dict(conn.execute(query).mappings().one()))
