"""SessionDB: the synchronous store with the compatible surface, on embedded SQLite or a server."""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import URL

from . import notify
from .engine import Patience, describe, is_sqlite, make_engine, refuse_directory, resolve_url
from .errors import InvalidInputError, ReadOnlyDatabaseError, missing_database
from .execution import PooledRunner, PostgresRunner, Runner, SqliteThreadRunner, WriteConnection
from .plans import ClaimBatch, Ownership, Plan, PlanBook, Row, lease_patience
from .schema import ensure_current, ensure_readable
from .statements import ReclaimScope
from .validation import require_identifier, require_seconds

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .surface import Store

__all__ = ["SessionDB", "StoreSettings"]

T = TypeVar("T")
Clock = Callable[[], float]


class StoreSettings:
    """What every store takes: the database, its patience, the clock and who it acts as.

    ``owner`` (a stable gateway name) and ``lease_seconds`` switch on multi-gateway claims:
    stamped, leased, and fenced so a gateway whose claim was rescued cannot overwrite the row.
    ``actor`` is the "who" of the audit trail (default: the owner, else "api").
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str] | Engine | AsyncEngine | None,
        url: str | URL | Engine | AsyncEngine | None,
        *,
        busy_patience: float,
        clock: Clock,
        owner: str | None,
        lease_seconds: float | None,
        actor: str | None,
    ) -> None:
        if db_path is not None and url is not None:
            raise InvalidInputError(f"give {type(self).__name__} either db_path or url, not both")
        self.url = resolve_url(url if url is not None else db_path)
        self.where = describe(self.url)
        self._patience = Patience(require_seconds("busy_patience", busy_patience))
        ownership = Ownership.configure(owner, lease_seconds)
        default_actor = ownership.owner if ownership else "api"
        self._plans = PlanBook(
            clock=clock,
            actor=require_identifier("actor", actor) if actor is not None else default_actor,
            ownership=ownership,
            announce=functools.partial(notify.publish, notify.database_key(self.url)),
        )

    @property
    def owner(self) -> str | None:
        ownership = self._plans.ownership
        return ownership.owner if ownership else None

    @property
    def lease_seconds(self) -> float | None:
        ownership = self._plans.ownership
        return ownership.lease_seconds if ownership else None

    @property
    def actor(self) -> str:
        return self._plans.actor

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

    ``read_only=True`` opens a store that never writes: an existing SQLite file is opened so that
    SQLite refuses every write (no upgrade, no file created); one not at head (an upstream file
    not adopted yet, or an older revision of ours) is read as head would show it, through
    temporary views (:mod:`hermes_state.lens`). Every write method raises
    :class:`~hermes_state.ReadOnlyDatabaseError`.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str] | Engine | AsyncEngine | None = None,
        *,
        url: str | URL | Engine | AsyncEngine | None = None,
        busy_patience: float = 30.0,
        clock: Clock = time.time,
        owner: str | None = None,
        lease_seconds: float | None = None,
        actor: str | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__(
            db_path,
            url,
            busy_patience=busy_patience,
            clock=clock,
            owner=owner,
            lease_seconds=lease_seconds,
            actor=actor,
        )
        self.read_only = read_only
        embedded = is_sqlite(self.url)
        if read_only and embedded and not Path(str(self.url.database)).is_file():
            refuse_directory(Path(str(self.url.database)))
            raise missing_database(self.where)
        engine = make_engine(self.url, read_only=read_only)
        try:
            if read_only:
                ensure_readable(engine, url=self.url)
            else:
                ensure_current(engine, auto_upgrade=embedded, url=self.url)
        except BaseException:
            engine.dispose()
            raise
        runner_type: type[PooledRunner] = PooledRunner
        if embedded:
            runner_type = SqliteThreadRunner
        elif self.url.get_backend_name() == "postgresql":
            runner_type = PostgresRunner
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

    @property
    def _conn(self) -> sqlite3.Connection:
        """SQLite: the calling thread's own DBAPI connection (upstream code reaches for it).

        Statements sent on it run outside the store's transactions; prefer
        :meth:`_execute_write` for writes. Server databases have no such connection.
        """
        runner = self._runner
        if not isinstance(runner, SqliteThreadRunner):
            raise AttributeError(f"{self.where} is not SQLite: it has no _conn; use _execute_write")
        return runner.thread_connection()

    def _run(self, plan: Plan[T]) -> T:
        if plan.writes and self.read_only:
            raise self._refuse_write()
        return self._runner.run(plan)

    def _refuse_write(self) -> ReadOnlyDatabaseError:
        return ReadOnlyDatabaseError(f"this store of {self.where} was opened read-only")

    def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        """Run ``fn(conn)`` in one write transaction: committed on return, rolled back on error,
        run again whole on lock contention. ``conn.execute`` takes SQLAlchemy statements or raw
        SQL in the driver's paramstyle (``?`` on SQLite)."""
        if self.read_only:
            raise self._refuse_write()
        return self._runner.run_callable(fn)

    # -- sessions and transcript ---------------------------------------------------------------

    def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Insert a session; an existing row with this id keeps its values. Returns the id."""
        return self._run(self._plans.create_session(session_id, source, fields))

    def ensure_session(self, session_id: str, source: str = "unknown", **fields: Any) -> str:
        """Make sure the session exists (same as ``create_session``, with a default source)."""
        return self.create_session(session_id, source, **fields)

    def append_message(
        self, session_id: str, role: str, content: str | None = None, **fields: Any
    ) -> int:
        """Append a live message to the session's transcript; returns the message id.

        ``fields`` are upstream's message keywords (``tool_name``, ``tool_calls`` as a list/dict
        or its JSON text, ``tool_call_id``, ``token_count``, ``finish_reason``, the reasoning
        fields, ``platform_message_id``, ``observed``, ...; see the README). The session's
        ``message_count`` and ``tool_call_count`` move in the same transaction.
        """
        return self._run(self._plans.append_message(session_id, role, content, fields))

    def get_messages(self, session_id: str) -> list[Row]:
        """The live transcript (rewound turns left out), oldest first: one dict per message
        with every column the table has, ``tool_calls`` decoded from JSON."""
        return self._run(self._plans.get_messages(session_id))

    def count_messages(self, session_id: str) -> int:
        """How many messages ``get_messages`` would return, counted in the database (0 for an
        unknown session)."""
        return self._run(self._plans.count_messages(session_id))

    # -- handoff transitions ------------------------------------------------------------------

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """NULL/completed/failed -> pending. False when one is in flight or the id is unknown."""
        return self._run(self._plans.request_handoff(session_id, platform))

    def retry_handoff(self, session_id: str, platform: str | None = None) -> bool:
        """failed -> pending again (same platform unless given). False unless it failed."""
        return self._run(self._plans.retry_handoff(session_id, platform))

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running, atomically: of concurrent claimers exactly one gets True."""
        return self._run(self._plans.claim_handoff(session_id))

    def claim_pending_handoffs(self, limit: int, *, platform: str | None = None) -> list[Row]:
        """Claim up to ``limit`` pending rows (of ``platform``, when given), oldest
        ``started_at`` first, in one statement where the backend allows; returns them as
        claimed (running, owner, lease, attempt). Concurrent callers get disjoint rows."""
        return self._run(self._plans.claim_pending_handoffs(limit, platform))

    def claim_handoffs(
        self,
        session_ids: Iterable[str],
        *,
        turn_holders: Mapping[str, str] | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        """Claim those of ``session_ids`` that are still pending, in one statement where the
        backend allows (one transaction elsewhere); rows another claimer holds are left to it.

        With ``turn_holders`` (``{session id: holder}``, one for every id) a row is claimed
        only together with its conversation's turn lease, taken for that holder for
        ``turn_seconds`` as :meth:`try_acquire_session_turn_lease` takes it; of several rows of
        one conversation only the oldest is tried, and a row whose turn is held elsewhere stays
        pending. Returns the rows claimed, as claimed, and the ids left for their turn.
        """
        return self._run(self._plans.claim_handoffs(session_ids, turn_holders, turn_seconds))

    def claim_next_handoffs(
        self,
        limit: int,
        *,
        exclude: Iterable[str] = (),
        turn_gateway: str | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        """Claim up to ``limit`` of the oldest pending rows no other claimer holds, leaving
        out the ids in ``exclude`` (rows the caller still delivers), as :meth:`claim_handoffs`
        claims given rows (one statement on PostgreSQL). With ``turn_gateway``, each row's turn
        lease is taken for the holder :func:`~hermes_state.plans.delivery_holder` names for a
        delivery by that gateway."""
        plan = self._plans.claim_next_handoffs(limit, exclude, turn_gateway, turn_seconds)
        return self._run(plan)

    def complete_handoff(self, session_id: str) -> bool:
        """running -> completed, clearing the error. With an owner, only this store's claim."""
        return self._run(self._plans.complete_handoff(session_id))

    def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        """pending/running -> failed with ``str(error)[:500]``; ``only_states`` narrows the
        states it may fail from (a waiter passes ``("pending",)`` so a claimed row is never
        failed under its gateway). With an owner, a running row only under this store's claim."""
        return self._run(self._plans.fail_handoff(session_id, error, only_states))

    def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]:
        """Complete many running rows at once (one statement on PostgreSQL, one transaction
        elsewhere), each fenced like :meth:`complete_handoff` on its own claim's attempt.
        Returns ``{id: completed}``: False for each row refused (not running, not this
        store's claim)."""
        return self._run(self._plans.complete_handoffs(session_ids))

    def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]:
        """Fail many running rows at once, ``{id: error}``, each error stored as
        ``str(error)[:500]`` and each row fenced like :meth:`fail_handoff`. Returns
        ``{id: failed}``."""
        return self._run(self._plans.fail_handoffs(errors))

    def finish_handoffs(
        self,
        outcomes: Mapping[str, object],
        *,
        release_turns: Mapping[str, str] | None = None,
    ) -> dict[str, bool]:
        """Finish many running rows at once: ``{id: None}`` completes a row, ``{id: error}``
        fails it with ``str(error)[:500]``, each fenced like :meth:`complete_handoff`; in the
        same transaction (one statement on PostgreSQL) give up the turn leases
        ``release_turns`` names (``{session id: holder}``). Returns ``{id: finished}``."""
        return self._run(self._plans.finish_handoffs(outcomes, release_turns))

    def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        """Extend the leases this owner still holds; returns the ids renewed."""
        return self._run(self._plans.renew_handoff_leases(session_ids))

    def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        """Fail the running rows no live gateway holds, in one transaction; returns their ids.

        Rows without a lease, with an expired lease, or claimed by this store's owner (its
        previous life died). They are failed, never re-queued: the dead gateway may already
        have delivered.
        """
        return self._run(self._plans.reclaim_handoffs(ReclaimScope.STALE, error))

    def reclaim_expired_handoffs(self, error: object) -> list[str]:
        """Fail running rows whose lease has expired, whoever holds them; returns their ids."""
        return self._run(self._plans.reclaim_handoffs(ReclaimScope.EXPIRED, error))

    def reclaim_running_handoffs(self, error: object) -> list[str]:
        """Fail every running row, leased or not: for an operator who knows no gateway lives."""
        return self._run(self._plans.reclaim_handoffs(ReclaimScope.ALL, error))

    def preview_reclaim(self, scope: str = "stale") -> list[Row]:
        """What a reclaim in ``scope`` ("stale", "expired", "all") would fail, and why."""
        return self._run(self._plans.preview_reclaim(scope))

    # -- session turn leases -------------------------------------------------------------------

    def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        """Take the conversation's turn lease for ``holder`` for ``ttl_seconds``.

        Atomic across processes: of concurrent takers exactly one gets True. An expired lease
        is taken over; a lease ``holder`` already holds answers True. With ``patience_s``,
        a held lease is asked for again until that many seconds have passed. The key is the
        conversation (the lineage root of a compressed session), as upstream keys it.
        """
        plan = self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
        if self._run(plan):
            return True
        for delay in lease_patience(patience_s):
            time.sleep(delay)
            if self._run(
                self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
            ):
                return True
        return False

    def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend ``holder``'s lease to ``ttl_seconds`` from now; False when it lost it."""
        return self._run(self._plans.refresh_session_turn_lease(session_id, holder, ttl_seconds))

    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Give up ``holder``'s lease; a release by anyone else changes nothing."""
        self._run(self._plans.release_session_turn_lease(session_id, holder))

    def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]:
        """Extend, in one call, the leases the holders of ``{session id: holder}`` still hold
        to ``ttl_seconds`` from now; returns the sessions whose lease was kept."""
        return self._run(self._plans.refresh_session_turn_leases(turn_holders, ttl_seconds))

    def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None:
        """Give up, in one call, the leases the holders of ``{session id: holder}`` hold."""
        self._run(self._plans.release_session_turn_leases(turn_holders))

    # -- the audit trail -----------------------------------------------------------------------

    def handoff_history(self, session_id: str) -> list[Row]:
        """Every recorded transition of the session, oldest first."""
        return self._run(self._plans.handoff_history(session_id))

    def prune_handoff_events(self, older_than_seconds: float, *, dry_run: bool = False) -> int:
        """Delete events older than this; returns how many went (would go, with dry_run)."""
        return self._run(self._plans.prune_handoff_events(older_than_seconds, dry_run))

    # -- reads ---------------------------------------------------------------------------------

    def list_pending_handoffs(self) -> list[Row]:
        """Pending rows, whole, oldest ``started_at`` first."""
        return self._run(self._plans.list_pending_handoffs())

    def list_handoffs(
        self,
        state: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        search: str | None = None,
    ) -> list[Row]:
        """Rows in ``state`` (None: every row ever handed off), oldest ``started_at`` first;
        ``after`` a session id: the page that follows it; ``search``: ids containing it."""
        return self._run(self._plans.list_handoffs(state, limit, after, search))

    def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]:
        """:meth:`get_messages` of many sessions in one statement (one read transaction on
        SQLite): ``{id: transcript}`` for every id given."""
        return self._run(self._plans.get_transcripts(session_ids))

    def get_session(self, session_id: str) -> Row | None:
        """The session's whole row (every column), or None for an unknown id."""
        return self._run(self._plans.get_session(session_id))

    def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]:
        """Audit events with an id above ``after``, oldest first: what changed since then, by
        any process (each transition records one)."""
        return self._run(self._plans.handoff_events_after(after, limit))

    def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]:
        """The newest failure events of the audit trail, newest first (``detail``: the error)."""
        return self._run(self._plans.recent_handoff_failures(limit))

    def last_handoff_event_id(self) -> int:
        """The newest audit event's id (0 when there is none): where a change feed starts."""
        return self._run(self._plans.last_handoff_event_id())

    def list_sessions(
        self,
        *,
        source: str | None = None,
        handoff_state: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        """Whole session rows, newest ``started_at`` first, optionally filtered by source,
        handoff state and start time (epoch seconds, inclusive), at most ``limit``."""
        return self._run(self._plans.list_sessions(source, handoff_state, since, limit))

    def has_pending_handoffs(self) -> bool:
        """A cheap probe: is any row pending? (Uses the partial index; O(1) in sessions.)"""
        return self._run(self._plans.has_pending_handoffs())

    def get_handoff_state(self, session_id: str) -> Row | None:
        """``{"state", "platform", "error"}`` of the session, or None for an unknown id."""
        return self._run(self._plans.get_handoff_state(session_id))

    def handoff_change_token(self) -> int | None:
        """A number that changes whenever another connection commits (SQLite); None on servers.

        A watcher that saw nothing left to claim may skip its next listing while this number
        stays the same: the cheap idle poll across processes.
        """
        return self._runner.change_token()

    def handoff_stats(self) -> Row:
        """Counts per state, oldest pending age, running rows per owner with their leases, and
        the failures of the last hour with their most common errors."""
        return self._run(self._plans.handoff_stats())


if TYPE_CHECKING:
    _surface: type[Store] = SessionDB
