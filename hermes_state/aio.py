"""NativeAsyncSessionDB: SessionDB's methods as coroutines on SQLAlchemy's AsyncEngine.

It drives the same plans as the synchronous store (:mod:`hermes_state.plans`), so both
run identical statements; only the awaiting differs. Drivers: aiosqlite for SQLite, asyncpg
(or psycopg) for PostgreSQL, aiomysql for MySQL/MariaDB.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from .engine import READ_ONLY, dispose_async, is_sqlite, make_async_engine
from .errors import keep_step_params, raise_translated
from .execution import WriteConnection, next_retry_delay, outcome_of, refuse_second_statement
from .plans import Body, ClaimBatch, Plan, Row, lease_patience
from .schema import bring_current, current_revision, ensure_current
from .statements import Capabilities, ReclaimScope
from .store import Clock, StoreSettings

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .surface import AsyncStore

__all__ = ["NativeAsyncSessionDB"]

T = TypeVar("T")


async def drive(body: Body[Any], connection: AsyncConnection, *, single: bool = False) -> Any:
    """Execute each step a plan yields on ``connection`` and return what the plan returns;
    with ``single`` (autocommit), refuse a second step."""
    try:
        step = next(body)
        while True:
            try:
                result = await connection.execute(step.statement, step.params)
            except Exception as exc:
                keep_step_params(exc, step.params)
                raise
            step = body.send(outcome_of(result, step))
            if single:
                refuse_second_statement(step)
    except StopIteration as stop:
        return stop.value


class NativeAsyncSessionDB(StoreSettings):
    """The asyncio twin of :class:`~hermes_state.SessionDB`, with the same method names.

    The schema is checked (and an embedded file upgraded, in a worker thread) on the first
    call, since a constructor cannot await.
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
        self._engine = make_async_engine(self.url)
        self._caps: Capabilities | None = None
        self._ready_lock = asyncio.Lock()
        self._probe: AsyncConnection | None = None
        self._probe_lock = asyncio.Lock()

    async def __aenter__(self) -> NativeAsyncSessionDB:
        await self._ready()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._probe is not None:
            await self._probe.close()
            self._probe = None
        await dispose_async(self._engine)  # on SQLite, after a passive WAL checkpoint

    async def _ready(self) -> Capabilities:
        if self._caps is not None:
            return self._caps
        async with self._ready_lock:
            if self._caps is None:
                if is_sqlite(self.url):
                    # Read-only, before the engine's first connection (which switches to WAL).
                    await asyncio.to_thread(
                        ensure_current, self._engine.sync_engine, auto_upgrade=True, url=self.url
                    )
                else:
                    try:
                        async with self._engine.connect() as connection:
                            await connection.execution_options(**{READ_ONLY: True})
                            revision = await connection.run_sync(current_revision)
                            await connection.rollback()
                    except Exception as exc:
                        raise_translated(exc, self.where)
                        raise
                    await asyncio.to_thread(bring_current, self.url, revision, auto_upgrade=False)
                self._caps = Capabilities.of(self._engine.dialect)
        return self._caps

    async def _retrying(self, attempt: Callable[[], Any]) -> Any:
        delays: Iterator[float] | None = None
        while True:
            try:
                return await attempt()
            except Exception as exc:
                delays = delays or self._patience.delays(self.where)
                await asyncio.sleep(next_retry_delay(exc, delays, self.where))

    async def _run(self, plan: Plan[T]) -> T:
        caps = await self._ready()

        autocommit = plan.single_statement and caps.single_statement

        async def attempt() -> Any:
            async with self._engine.connect() as connection:
                if autocommit:  # one statement, its own transaction (see execution.py)
                    await connection.execution_options(isolation_level="AUTOCOMMIT")
                    return await drive(plan.start(caps), connection, single=True)
                await connection.execution_options(**{READ_ONLY: not plan.writes})
                async with connection.begin():
                    return await drive(plan.start(caps), connection)

        return plan.finish(await self._retrying(attempt))

    async def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        """``fn(conn)`` in one write transaction, as in ``SessionDB._execute_write`` (``fn`` is
        synchronous and runs through ``AsyncConnection.run_sync``)."""
        await self._ready()

        async def attempt() -> T:
            async with self._engine.begin() as connection:
                return await connection.run_sync(lambda sync: fn(WriteConnection(sync)))

        result: T = await self._retrying(attempt)
        return result

    # -- sessions and transcript ---------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        return await self._run(self._plans.create_session(session_id, source, fields))

    async def ensure_session(self, session_id: str, source: str = "unknown", **fields: Any) -> str:
        return await self.create_session(session_id, source, **fields)

    async def append_message(
        self, session_id: str, role: str, content: str | None = None, **fields: Any
    ) -> int:
        return await self._run(self._plans.append_message(session_id, role, content, fields))

    async def get_messages(self, session_id: str) -> list[Row]:
        return await self._run(self._plans.get_messages(session_id))

    async def count_messages(self, session_id: str) -> int:
        return await self._run(self._plans.count_messages(session_id))

    # -- handoff transitions ------------------------------------------------------------------

    async def request_handoff(self, session_id: str, platform: str) -> bool:
        return await self._run(self._plans.request_handoff(session_id, platform))

    async def retry_handoff(self, session_id: str, platform: str | None = None) -> bool:
        return await self._run(self._plans.retry_handoff(session_id, platform))

    async def claim_handoff(self, session_id: str) -> bool:
        return await self._run(self._plans.claim_handoff(session_id))

    async def claim_pending_handoffs(self, limit: int, *, platform: str | None = None) -> list[Row]:
        return await self._run(self._plans.claim_pending_handoffs(limit, platform))

    async def claim_handoffs(
        self,
        session_ids: Iterable[str],
        *,
        turn_holders: Mapping[str, str] | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        return await self._run(self._plans.claim_handoffs(session_ids, turn_holders, turn_seconds))

    async def claim_next_handoffs(
        self,
        limit: int,
        *,
        exclude: Iterable[str] = (),
        turn_gateway: str | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        plan = self._plans.claim_next_handoffs(limit, exclude, turn_gateway, turn_seconds)
        return await self._run(plan)

    async def complete_handoff(self, session_id: str) -> bool:
        return await self._run(self._plans.complete_handoff(session_id))

    async def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        return await self._run(self._plans.fail_handoff(session_id, error, only_states))

    async def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]:
        return await self._run(self._plans.complete_handoffs(session_ids))

    async def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]:
        return await self._run(self._plans.fail_handoffs(errors))

    async def finish_handoffs(
        self,
        outcomes: Mapping[str, object],
        *,
        release_turns: Mapping[str, str] | None = None,
    ) -> dict[str, bool]:
        return await self._run(self._plans.finish_handoffs(outcomes, release_turns))

    async def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        return await self._run(self._plans.renew_handoff_leases(session_ids))

    async def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        return await self._run(self._plans.reclaim_handoffs(ReclaimScope.STALE, error))

    async def reclaim_expired_handoffs(self, error: object) -> list[str]:
        return await self._run(self._plans.reclaim_handoffs(ReclaimScope.EXPIRED, error))

    async def reclaim_running_handoffs(self, error: object) -> list[str]:
        return await self._run(self._plans.reclaim_handoffs(ReclaimScope.ALL, error))

    async def preview_reclaim(self, scope: str = "stale") -> list[Row]:
        return await self._run(self._plans.preview_reclaim(scope))

    # -- session turn leases -------------------------------------------------------------------

    async def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        plans = self._plans
        if await self._run(plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)):
            return True
        for delay in lease_patience(patience_s):
            await asyncio.sleep(delay)
            plan = plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
            if await self._run(plan):
                return True
        return False

    async def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool:
        return await self._run(
            self._plans.refresh_session_turn_lease(session_id, holder, ttl_seconds)
        )

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        await self._run(self._plans.release_session_turn_lease(session_id, holder))

    async def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]:
        return await self._run(self._plans.refresh_session_turn_leases(turn_holders, ttl_seconds))

    async def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None:
        await self._run(self._plans.release_session_turn_leases(turn_holders))

    # -- the audit trail -----------------------------------------------------------------------

    async def handoff_history(self, session_id: str) -> list[Row]:
        return await self._run(self._plans.handoff_history(session_id))

    async def prune_handoff_events(
        self, older_than_seconds: float, *, dry_run: bool = False
    ) -> int:
        return await self._run(self._plans.prune_handoff_events(older_than_seconds, dry_run))

    # -- reads ---------------------------------------------------------------------------------

    async def list_pending_handoffs(self) -> list[Row]:
        return await self._run(self._plans.list_pending_handoffs())

    async def list_handoffs(
        self,
        state: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        search: str | None = None,
    ) -> list[Row]:
        return await self._run(self._plans.list_handoffs(state, limit, after, search))

    async def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]:
        return await self._run(self._plans.get_transcripts(session_ids))

    async def get_session(self, session_id: str) -> Row | None:
        return await self._run(self._plans.get_session(session_id))

    async def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]:
        return await self._run(self._plans.handoff_events_after(after, limit))

    async def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]:
        return await self._run(self._plans.recent_handoff_failures(limit))

    async def last_handoff_event_id(self) -> int:
        return await self._run(self._plans.last_handoff_event_id())

    async def list_sessions(
        self,
        *,
        source: str | None = None,
        handoff_state: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        return await self._run(self._plans.list_sessions(source, handoff_state, since, limit))

    async def has_pending_handoffs(self) -> bool:
        return await self._run(self._plans.has_pending_handoffs())

    async def get_handoff_state(self, session_id: str) -> Row | None:
        return await self._run(self._plans.get_handoff_state(session_id))

    async def handoff_change_token(self) -> int | None:
        """As ``SessionDB.handoff_change_token``: SQLite's ``PRAGMA data_version`` read on a
        connection of its own that never writes, so it moves whenever any other connection
        commits; None on servers."""
        await self._ready()
        if not is_sqlite(self.url):
            return None
        async with self._probe_lock:
            try:
                if self._probe is None:
                    self._probe = await self._engine.connect()
                    await self._probe.execution_options(**{READ_ONLY: True})
                async with self._probe.begin():
                    result = await self._probe.exec_driver_sql("PRAGMA data_version")
                    return int(result.scalar_one())
            except Exception as exc:
                raise_translated(exc, self.where)
                raise

    async def handoff_stats(self) -> Row:
        return await self._run(self._plans.handoff_stats())


if TYPE_CHECKING:
    _surface: type[AsyncStore] = NativeAsyncSessionDB
