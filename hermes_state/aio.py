"""NativeAsyncSessionDB: SessionDB's methods as coroutines on SQLAlchemy's AsyncEngine.

It drives the same plans as the synchronous store (:mod:`hermes_state.plans`), so both
run identical statements; only the awaiting differs. Drivers: aiosqlite for SQLite, asyncpg
(or psycopg) for PostgreSQL, aiomysql for MySQL/MariaDB.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from . import statements
from .aio_retention import AsyncRetention
from .engine import READ_ONLY, dispose_async, is_sqlite, make_async_engine
from .errors import DatabaseBusyError, keep_step_params, raise_translated
from .execution import WriteConnection, next_retry_delay, outcome_of, refuse_second_statement
from .operations import AsyncOperations
from .plans import ATTEMPT, Body, LeaseWait, Plan, lease_patience
from .schema import bring_current, current_revision, ensure_current
from .statements import Capabilities
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


class NativeAsyncSessionDB(StoreSettings, AsyncRetention, AsyncOperations):
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

    # -- written here rather than generated (surface.HAND_WRITTEN) ----------------------------

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

    async def acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        on_wait: Callable[[float], object] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], object] | None = None,
        acquire_patience_s: float = 0.5,
        on_contended: Callable[[], object] | None = None,
        wait_notice_backoff: float = 2.0,
        wait_notice_max_interval_seconds: float = 300.0,
    ) -> bool:
        """As ``SessionDB.acquire_session_turn_lease``, sleeping on the event loop."""
        wait = LeaseWait.configure(
            wait_seconds=wait_seconds,
            poll_interval_seconds=poll_interval_seconds,
            wait_notice_interval_seconds=wait_notice_interval_seconds,
            wait_notice_backoff=wait_notice_backoff,
            wait_notice_max_interval_seconds=wait_notice_max_interval_seconds,
            on_wait=on_wait,
            should_abort=should_abort,
            on_contended=on_contended,
            acquire_patience_s=acquire_patience_s,
        )
        plans = self._plans
        plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)  # bad input first
        schedule = wait.run()
        try:
            request = next(schedule)
            while True:
                if request is ATTEMPT:
                    plan = plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
                    try:
                        taken: bool | None = await self._run(plan)
                    except DatabaseBusyError:
                        taken = None
                    request = schedule.send(taken)
                else:
                    await asyncio.sleep(request)
                    request = schedule.send(None)
        except StopIteration as finished:
            return bool(finished.value)

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

    async def vacuum(self) -> int:
        # Declared in SessionSurface: outside any transaction, so on a connection of its own.
        await self._ready()
        sql = statements.maintenance_sql(self.url.get_backend_name())

        async def attempt() -> None:
            async with self._engine.connect() as connection:
                if is_sqlite(self.url):
                    # An engine transaction would BEGIN (which VACUUM refuses): the driver's own.
                    raw = await connection.get_raw_connection()
                    driver = raw.driver_connection
                    assert driver is not None
                    for statement in sql:
                        cursor = await driver.execute(statement)
                        await cursor.fetchall()
                        await cursor.close()
                    return
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                for statement in sql:
                    result = await connection.exec_driver_sql(statement)
                    if result.returns_rows:
                        result.fetchall()

        await self._retrying(attempt)
        return 0


if TYPE_CHECKING:
    _surface: type[AsyncStore] = NativeAsyncSessionDB
