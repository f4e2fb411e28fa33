"""SessionDB: the synchronous store with the compatible surface, on embedded SQLite or a server."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.engine import URL

from . import notify, repository
from .engine import Patience, describe, is_sqlite, make_engine, resolve_url
from .errors import InvalidInputError
from .execution import PooledRunner, Runner, SqliteThreadRunner, WriteConnection
from .repository import ClaimLedger, Ownership, Plan, Row
from .schema import ensure_current
from .validation import require_seconds

__all__ = ["SessionDB", "StoreSettings"]

T = TypeVar("T")
Clock = Callable[[], float]


class StoreSettings:
    """What every store takes: the database, its patience, the clock and the gateway identity.

    ``owner`` (a stable gateway name) and ``lease_seconds`` switch on multi-gateway claims:
    stamped, leased, and fenced so a gateway whose claim was rescued cannot overwrite the row.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None,
        url: str | URL | None,
        *,
        busy_patience: float,
        clock: Clock,
        owner: str | None,
        lease_seconds: float | None,
    ) -> None:
        if db_path is not None and url is not None:
            raise InvalidInputError(f"give {type(self).__name__} either db_path or url, not both")
        self.url = resolve_url(url if url is not None else db_path)
        self.where = describe(self.url)
        self._patience = Patience(require_seconds("busy_patience", busy_patience))
        self._clock = clock
        self._ownership = Ownership.configure(owner, lease_seconds)
        self._ledger = ClaimLedger()
        self._announce = functools.partial(notify.publish, notify.database_key(self.url))

    @property
    def owner(self) -> str | None:
        return self._ownership.owner if self._ownership else None

    @property
    def lease_seconds(self) -> float | None:
        return self._ownership.lease_seconds if self._ownership else None

    def __repr__(self) -> str:
        owner = f", owner={self.owner!r}" if self.owner else ""
        return f"{type(self).__name__}({self.where!r}{owner})"


class SessionDB(StoreSettings):
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
        owner: str | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        super().__init__(
            db_path,
            url,
            busy_patience=busy_patience,
            clock=clock,
            owner=owner,
            lease_seconds=lease_seconds,
        )
        engine = make_engine(self.url)
        embedded = is_sqlite(self.url)
        try:
            ensure_current(engine, auto_upgrade=embedded)
        except BaseException:
            engine.dispose()
            raise
        runner_type = SqliteThreadRunner if embedded else PooledRunner
        self._runner: Runner = runner_type(engine, self._patience, self.where)

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
        return self._run(
            repository.request_handoff(
                session_id, platform, now=self._clock(), announce=self._announce
            )
        )

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running, atomically: of concurrent claimers exactly one gets True."""
        return self._run(
            repository.claim_handoff(
                session_id, now=self._clock(), ownership=self._ownership, ledger=self._ledger
            )
        )

    def complete_handoff(self, session_id: str) -> bool:
        """running -> completed, clearing the error. With an owner, only this store's claim."""
        return self._run(
            repository.complete_handoff(
                session_id, now=self._clock(), ownership=self._ownership, ledger=self._ledger
            )
        )

    def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        """pending/running -> failed with ``str(error)[:500]``; ``only_states`` narrows the
        states it may fail from (a waiter passes ``("pending",)`` so a claimed row is never
        failed under its gateway). With an owner, a running row only under this store's claim."""
        return self._run(
            repository.fail_handoff(
                session_id,
                error,
                only_states=only_states,
                now=self._clock(),
                ownership=self._ownership,
                ledger=self._ledger,
            )
        )

    def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        """Extend the leases this owner still holds; returns the ids renewed."""
        return self._run(
            repository.renew_handoff_leases(
                session_ids, now=self._clock(), ownership=self._ownership
            )
        )

    def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        """Fail the running rows no live gateway holds, in one transaction; returns their ids.

        Without an owner: every running row (the store is the only gateway). With one: rows
        without a lease, with an expired lease, or claimed by this owner (its previous life
        died). They are failed, never re-queued: the dead gateway may already have delivered.
        """
        return self._run(
            repository.reclaim_stale_running_handoffs(
                error, now=self._clock(), ownership=self._ownership
            )
        )

    def reclaim_expired_handoffs(self, error: object) -> list[str]:
        """Fail running rows whose lease has expired, whoever holds them; returns their ids."""
        return self._run(repository.reclaim_expired_handoffs(error, now=self._clock()))

    # -- reads ---------------------------------------------------------------------------------

    def list_pending_handoffs(self) -> list[Row]:
        """Pending rows, whole, oldest ``started_at`` first."""
        return self._run(repository.list_pending_handoffs())

    def list_handoffs(self, state: str | None = None, *, limit: int | None = None) -> list[Row]:
        """Rows in ``state`` (None: every row ever handed off), oldest ``started_at`` first."""
        return self._run(repository.list_handoffs(state, limit=limit))

    def has_pending_handoffs(self) -> bool:
        """A cheap probe: is any row pending? (Uses the partial index; O(1) in sessions.)"""
        return self._run(repository.has_pending_handoffs())

    def get_handoff_state(self, session_id: str) -> Row | None:
        """``{"state", "platform", "error"}`` of the session, or None for an unknown id."""
        return self._run(repository.get_handoff_state(session_id))

    def handoff_change_token(self) -> int | None:
        """A number that changes whenever another connection commits (SQLite); None on servers.

        A watcher that saw nothing left to claim may skip its next listing while this number
        stays the same: the cheap idle poll across processes.
        """
        return self._runner.change_token()

    def handoff_stats(self) -> Row:
        """``{"counts": {state: n}, "oldest_pending_age_seconds": float | None}``."""
        return self._run(repository.handoff_stats(now=self._clock()))
