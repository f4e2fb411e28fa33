"""AbsentStore: the asyncio store of a database not created yet, answering as an empty one."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.pool import StaticPool

from .aio_retention import AsyncRetention
from .errors import DatabaseUnavailableError, missing_database
from .execution import WriteConnection, drive, outcome_of
from .models import metadata
from .operations import AsyncOperations
from .plans import LeaseWait, Plan
from .plans.retention import Call
from .statements import Capabilities
from .store import Clock, StoreSettings

if TYPE_CHECKING:
    from .surface import AsyncStore

__all__ = ["AbsentStore"]

T = TypeVar("T")


class _EmptyDatabase:
    """An empty database at head, in memory, shared by every absent store of the process:
    each plan runs on it in a transaction that is rolled back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Engine | None = None

    def _ready(self) -> Engine:
        if self._engine is None:
            engine = create_engine("sqlite://", poolclass=StaticPool)
            metadata.create_all(engine)
            self._engine = engine
        return self._engine

    def run(self, plan: Plan[T], where: str) -> T:
        """What ``plan`` answers on an empty database; one that would change a row there
        needs the database itself, which does not exist."""
        with self._lock:
            engine = self._ready()
            caps = Capabilities.of(engine.dialect)
            with engine.connect() as connection:
                before = _changes(connection)
                try:
                    result = drive(
                        plan.start(caps),
                        lambda step: outcome_of(
                            connection.execute(step.statement, step.params), step
                        ),
                    )
                    changed = _changes(connection) != before
                finally:
                    connection.rollback()
        if changed:
            raise missing_database(where)
        return plan.finish(result)


def _changes(connection: Connection) -> int:
    """Rows inserted, updated or deleted on this SQLite connection so far (rolled back or not)."""
    raw = connection.connection.driver_connection
    assert isinstance(raw, sqlite3.Connection)
    return raw.total_changes


_EMPTY = _EmptyDatabase()


class AbsentStore(StoreSettings, AsyncRetention, AsyncOperations):
    """What a store of ``db_path`` would answer while the file does not exist, creating nothing.

    The gateway watches profiles whose first session has not been recorded yet; watching must
    not create their home or their ``state.db``. Each operation runs its plan, validating the
    arguments exactly as the store does, on an empty database at head kept in memory (one per
    process), so every read answers as an empty database does (no rows, zero counts) and every
    transition as the store does for an unknown id (False, ``[]``, ``{id: False}``), by
    construction. A plan that would change a row there (``create_session``,
    ``ensure_session``, taking a turn lease), and ``_execute_write``, raise
    :class:`~hermes_state.DatabaseUnavailableError` instead: open the real store to create the
    file. ``handoff_change_token`` is None (no file to watch: a watcher lists every tick).
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        *,
        clock: Clock = time.time,
        owner: str | None = None,
        lease_seconds: float | None = None,
        actor: str | None = None,
    ) -> None:
        super().__init__(
            db_path,
            None,
            busy_patience=0.0,
            clock=clock,
            owner=owner,
            lease_seconds=lease_seconds,
            actor=actor,
        )

    def _absent(self) -> DatabaseUnavailableError:
        return missing_database(self.where)

    async def _run(self, plan: Plan[T]) -> T:
        # In memory and without I/O: microseconds, so it runs on the loop.
        return _EMPTY.run(plan, self.where)

    async def __aenter__(self) -> AbsentStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Nothing is open."""

    async def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        raise self._absent()

    async def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        # An empty database would grant the lease by recording it, which needs the file.
        plan = self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
        return await self._run(plan)

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
        LeaseWait.configure(
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
        # Nobody holds a lease in an empty database: the first attempt decides.
        plan = self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
        return await self._run(plan)

    async def handoff_change_token(self) -> int | None:
        return None

    async def vacuum(self) -> int:
        return 0  # nothing to give back

    async def _maintenance_call(self, call: Call) -> object:
        # Upstream's start-up maintenance on an empty database: nothing to prune or vacuum,
        # and its run is not recorded (that would need the file).
        if call.name == "set_meta":
            return None
        return await super()._maintenance_call(call)


if TYPE_CHECKING:
    _surface: type[AsyncStore] = AbsentStore
