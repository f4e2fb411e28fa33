"""Retention on the asyncio stores: the prune sweep and upstream's start-up maintenance, driven
awaiting (their schedules are the plans'; ``SessionDB`` drives the same ones synchronously)."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, TypeVar

from .plans import Plan, PlanBook
from .plans.retention import (
    AUTO_VACUUM_MIN_FREELIST_RATIO,
    PRUNE_BATCH,
    Call,
    PruneBatch,
    PruneSweep,
    PruneTotals,
    auto_maintenance,
)

T = TypeVar("T")

__all__ = ["AsyncRetention"]


class AsyncRetention:
    """``prune_sessions``, ``prune_report`` and ``maybe_auto_prune_and_vacuum`` of an asyncio
    store (``NativeAsyncSessionDB``, ``AbsentStore``), over its own ``_run``."""

    _plans: PlanBook

    if TYPE_CHECKING:  # the store's own, from AsyncOperations and its runner

        async def _run(self, plan: Plan[T]) -> T: ...

        async def storage_report(self) -> dict[str, Any]: ...

    async def _sweep(self, sweep: PruneSweep) -> PruneTotals:
        schedule = sweep.run()
        try:
            request = next(schedule)
            while True:
                if isinstance(request, Plan):
                    batch: PruneBatch = await self._run(request)
                    request = schedule.send(batch)
                else:
                    await asyncio.sleep(request)
                    request = schedule.send(None)
        except StopIteration as finished:
            totals: PruneTotals = finished.value
            return totals

    async def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: str | os.PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        **filters: Any,
    ) -> int:
        sweep = self._plans.prune_sweep(
            older_than_days, source, sessions_dir=sessions_dir, filters=filters
        )
        return (await self._sweep(sweep)).sessions

    async def prune_report(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        *,
        dry_run: bool = False,
        sessions_dir: str | os.PathLike[str] | None = None,
        batch_size: int = PRUNE_BATCH,
        sample: int = 0,
        **filters: Any,
    ) -> dict[str, Any]:
        sweep = self._plans.prune_sweep(
            older_than_days,
            source,
            sessions_dir=sessions_dir,
            dry_run=dry_run,
            batch_size=batch_size,
            sample=sample,
            filters=filters,
            operation="prune_report",
        )
        return (await self._sweep(sweep)).report()

    async def _freelist_ratio(self) -> float | None:
        """SQLite's share of free pages (what a VACUUM gives back); None on a server."""
        ratio = (await self.storage_report()).get("free_ratio")
        return None if ratio is None else float(ratio)

    async def _maintenance_call(self, call: Call) -> Any:
        """One call of the maintenance schedule, on this store's (replaceable) method."""
        return await getattr(self, call.name)(*call.args, **call.kwargs)

    async def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: str | os.PathLike[str] | None = None,
        min_vacuum_interval_days: int = 30,
        min_vacuum_freelist_ratio: float = AUTO_VACUUM_MIN_FREELIST_RATIO,
    ) -> dict[str, Any]:
        schedule = auto_maintenance(
            retention_days=retention_days,
            min_interval_hours=min_interval_hours,
            vacuum=vacuum,
            sessions_dir=sessions_dir,
            min_vacuum_interval_days=min_vacuum_interval_days,
            min_vacuum_freelist_ratio=min_vacuum_freelist_ratio,
            clock=self._plans.clock,
        )
        try:
            call = next(schedule)
            while True:
                try:
                    answer = await self._maintenance_call(call)
                except Exception as exc:
                    call = schedule.throw(exc)
                else:
                    call = schedule.send(answer)
        except StopIteration as finished:
            report: dict[str, Any] = finished.value
            return report
