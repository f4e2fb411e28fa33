"""SessionDB: the synchronous store with the compatible surface, on embedded SQLite or a server."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.engine import URL

from . import repository
from .engine import Patience, describe, is_sqlite, make_engine, resolve_url
from .errors import InvalidInputError
from .execution import PooledRunner, Runner, SqliteThreadRunner, WriteConnection
from .repository import Plan, Row
from .schema import ensure_current

__all__ = ["SessionDB"]

T = TypeVar("T")
Clock = Callable[[], float]


class SessionDB:
    """Sessions, transcripts and the handoff state machine, one transaction per call.

    ``SessionDB()`` opens ``$HERMES_HOME/state.db`` (``HERMES_HOME`` defaults to ``~/.hermes``);
    ``SessionDB(path)`` another file; ``SessionDB(url=...)`` (or a URL as ``db_path``) any
    supported backend. An embedded SQLite file is brought to the current schema on open; a
    server database that is behind raises :class:`~hermes_state.SchemaOutOfDateError`, which
    names the command to run. The store is safe to share between threads.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        *,
        url: str | URL | None = None,
        busy_patience: float = 30.0,
        clock: Clock = time.time,
    ) -> None:
        if db_path is not None and url is not None:
            raise InvalidInputError("give SessionDB either db_path or url, not both")
        self.url = resolve_url(url if url is not None else db_path)
        self.where = describe(self.url)
        self._clock = clock
        engine = make_engine(self.url)
        embedded = is_sqlite(self.url)
        try:
            ensure_current(engine, auto_upgrade=embedded)
        except BaseException:
            engine.dispose()
            raise
        runner_type = SqliteThreadRunner if embedded else PooledRunner
        self._runner: Runner = runner_type(engine, Patience(busy_patience), self.where)

    def __repr__(self) -> str:
        return f"SessionDB({self.where!r})"

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection the store holds; the store cannot be used afterwards."""
        self._runner.close()

    def _run(self, plan: Plan[T]) -> T:
        return self._runner.run(plan)

    def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        """Run ``fn(conn)`` in one write transaction: committed on return, rolled back on error,
        run again whole on lock contention. ``conn.execute`` takes SQLAlchemy statements or raw
        SQL in the driver's paramstyle (``?`` on SQLite)."""
        return self._runner.run_callable(fn)

    # -- sessions and transcript ---------------------------------------------------------------

    def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Insert a session; an existing row with this id keeps its values. Returns the id."""
        return self._run(repository.create_session(session_id, source, fields, now=self._clock()))

    def ensure_session(self, session_id: str, source: str = "unknown", **fields: Any) -> str:
        """Make sure the session exists (same as ``create_session``, with a default source)."""
        return self.create_session(session_id, source, **fields)

    def append_message(self, session_id: str, role: str, content: str | None) -> int:
        """Append to the session's transcript; returns the message id."""
        return self._run(repository.append_message(session_id, role, content, now=self._clock()))

    def get_messages(self, session_id: str) -> list[Row]:
        """The transcript, oldest first, as dicts (id, session_id, role, content, timestamp)."""
        return self._run(repository.get_messages(session_id))

    # -- handoff transitions ------------------------------------------------------------------

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """NULL/completed/failed -> pending. False when one is in flight or the id is unknown."""
        return self._run(repository.request_handoff(session_id, platform, now=self._clock()))

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running, atomically: of concurrent claimers exactly one gets True."""
        return self._run(repository.claim_handoff(session_id, now=self._clock()))

    def complete_handoff(self, session_id: str) -> bool:
        """running -> completed, clearing the error."""
        return self._run(repository.complete_handoff(session_id, now=self._clock()))

    def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        """pending/running -> failed with ``str(error)[:500]``; ``only_states`` narrows the
        states it may fail from (a waiter passes ``("pending",)`` so a claimed row is never
        failed under its gateway)."""
        return self._run(
            repository.fail_handoff(session_id, error, only_states=only_states, now=self._clock())
        )

    def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        """Fail every ``running`` row in one transaction; returns their ids (sorted).

        For a gateway's startup: rows it left running when it died are failed, never re-queued,
        because the dead gateway may already have delivered them.
        """
        return self._run(repository.reclaim_stale_running_handoffs(error, now=self._clock()))

    # -- reads ---------------------------------------------------------------------------------

    def list_pending_handoffs(self) -> list[Row]:
        """Pending rows, whole, oldest ``started_at`` first."""
        return self._run(repository.list_pending_handoffs())

    def list_handoffs(self, state: str | None = None, *, limit: int | None = None) -> list[Row]:
        """Rows in ``state`` (None: every row ever handed off), oldest ``started_at`` first."""
        return self._run(repository.list_handoffs(state, limit=limit))

    def handoff_stats(self) -> Row:
        """``{"counts": {state: n}, "oldest_pending_age_seconds": float | None}``."""
        return self._run(repository.handoff_stats(now=self._clock()))

    def has_pending_handoffs(self) -> bool:
        """A cheap probe: is any row pending? (Uses the partial index; O(1) in sessions.)"""
        return self._run(repository.has_pending_handoffs())

    def get_handoff_state(self, session_id: str) -> Row | None:
        """``{"state", "platform", "error"}`` of the session, or None for an unknown id."""
        return self._run(repository.get_handoff_state(session_id))
