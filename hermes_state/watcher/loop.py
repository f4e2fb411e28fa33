"""The watch loop and its supervision: reclaim, ticks, drain, and supervised side tasks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SideTaskFailed
from ..outage import BACKOFF_CEILING, Outage, unavailable
from . import profiles, settings, upkeep
from .claimed import Claimed, Key, Turn, TurnTable
from .claims import Claims, ScopeState
from .deliveries import Deliveries
from .flusher import Flusher
from .host import Host, Row, Runner, SideTask
from .profiles import ProfileStores, Scope
from .settings import LEGACY_HANDOFF_ENV, LOGGER_NAME, WatchSettings
from .upkeep import Upkeep

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["HandoffWatch"]

logger = logging.getLogger(LOGGER_NAME)


class HandoffWatch:
    """One run of the watcher, owning everything that run needs.

    It reads its runner once (:class:`~hermes_state.watcher.host.Host`) into its settings, and
    holds the deliveries in flight, the turn leases they hold, the flusher that records their
    outcomes, the per-scope state, the wake-up event, the profile stores (the runner's, else
    its own) and the supervised side tasks. ``run`` is the whole life of it.
    """

    def __init__(self, runner: Runner, *, interval: float, drain_timeout: float) -> None:
        self.host = Host(runner)
        self.settings = WatchSettings.read(
            self.host, interval=interval, drain_timeout=drain_timeout
        )
        self.wakeup = self.host.wakeup
        self.table = TurnTable()
        self.flusher = Flusher(
            self.table,
            patience=self.settings.lease_seconds or self.settings.turn_seconds,
            close_patience=drain_timeout,
        )
        self.deliveries = Deliveries(self.host, self.flusher, self._wake)
        self.claims = Claims(self.host, self.settings, self.deliveries, self.table, self._wake)
        self.upkeep = Upkeep(self.host, self.settings, self.deliveries, self.flusher, self.table)
        self.scopes: list[Scope] = []
        self.states: dict[str | None, ScopeState] = {}
        self.side_tasks: dict[str, asyncio.Task[None]] = {}
        #: Per scope: its trouble reaching its store, and when to poll it next meanwhile.
        self.outages: dict[str | None, Outage] = {}
        self.retry_at: dict[str | None, float] = {}
        self.loop_restarts = 0
        self.failure: BaseException | None = None
        self.reclaimed = False
        self.last_tick: float | None = None
        self.idle_logged = False
        stores = self.host.profile_stores
        self._own_stores = not isinstance(stores, ProfileStores)
        self.profile_stores = stores if isinstance(stores, ProfileStores) else ProfileStores()

    @property
    def turns(self) -> dict[Key, Turn]:
        """The turn leases the deliveries in flight hold, kept up until given back."""
        return self.table.turns

    async def deliver(self, db: AsyncStore, row: Row, claimed: Claimed) -> None:
        """Deliver one claimed row of ``db`` and record its outcome (see
        :meth:`~hermes_state.watcher.deliveries.Deliveries.deliver`)."""
        await self.deliveries.deliver(db, row, claimed)

    # The names the delivery had when the watcher had a second, per-row pipeline.
    _deliver = deliver
    _deliver_batched = deliver

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reclaim, then poll every ``interval`` s until ``_running`` is false; then drain."""
        try:
            with profiles.active_profile_stores(self.profile_stores):
                await self._run()
        finally:
            if self._own_stores:
                await asyncio.to_thread(self.profile_stores.close)

    async def _run(self) -> None:
        self.scopes = await self._resolve_scopes()
        self.states = {profile_name: ScopeState() for profile_name, _home in self.scopes}
        if not settings.legacy_handoff_forbidden():
            self.reclaimed = True
            await self.upkeep.reclaim_stranded(self.scopes)
        self._start_side_tasks()
        self.flusher.start()
        try:
            await self._supervised_ticks()
        finally:
            await self._drain()  # leases are still renewed while draining
            await self._stop_side_tasks()
        if self.failure is not None:
            raise SideTaskFailed(f"the watcher stopped: {self.failure}") from self.failure

    async def _supervised_ticks(self) -> None:
        """Tick and pause until stopped. An unexpected error out of a tick (the poll's own
        errors are handled per scope) restarts the loop after a growing pause rather than
        ending the watcher; each restart is counted (``loop_restarts``, and the metrics'
        ``hermes_state_watch_loop_restarts``)."""
        trouble = Outage("the watch loop", logger, first_delay=self.settings.restart_delay)
        while self.host.running and self.failure is None:
            try:
                await self._tick_all()
            except Exception as exc:
                self.loop_restarts += 1
                if self.host.metrics is not None:
                    restarted = getattr(self.host.metrics, "loop_restarted", None)
                    if callable(restarted):
                        restarted()
                await upkeep.nap(trouble.failed(exc))
                continue
            trouble.succeeded()
            await self._pause()

    async def _drain(self) -> None:
        """Stop: give in-flight deliveries ``drain_timeout`` seconds, then cancel the rest;
        then flush the outcomes (and turn leases to give back) still queued."""
        try:
            await self.deliveries.drain(self.settings.drain_timeout)
        finally:
            await self.flusher.close()

    async def _resolve_scopes(self) -> list[Scope]:
        run_in_executor = self.host.run_in_executor
        if run_in_executor is None:
            return list(profiles.watch_scopes(self.host.runner))
        try:
            return list(await run_in_executor(profiles.watch_scopes, self.host.runner))
        except Exception:
            logger.exception(
                "could not resolve the profiles to watch; watching the root store only"
            )
            return [(None, None)]

    async def _tick_all(self) -> None:
        started = time.monotonic()
        try:
            await self._tick_scopes()
        finally:
            if self.host.metrics is not None:
                self.host.metrics.ticked(time.monotonic() - started)

    async def _tick_scopes(self) -> None:
        if settings.legacy_handoff_forbidden():
            if not self.idle_logged:
                logger.warning(
                    "legacy handoff is disabled by the writer policy (%s); the watcher is idle",
                    LEGACY_HANDOFF_ENV,
                )
                self.idle_logged = True
            return
        self.idle_logged = False
        if not self.reclaimed:
            self.reclaimed = True
            await self.upkeep.reclaim_stranded(self.scopes)
        for profile_name, home in self.scopes:
            outage = self._outage(profile_name)
            if time.monotonic() < self.retry_at.get(profile_name, 0.0):
                continue  # its store is away: polled again once its pause is over
            if home is not None and not await self._scope_is_busy(home):
                continue
            try:
                async with profiles.enter_scope(home):
                    state = self.states.setdefault(profile_name, ScopeState())
                    await self.claims.tick(self.host.store, profile_name, home, state)
            except Exception as exc:
                pause = outage.failed(exc)
                self.retry_at.pop(profile_name, None)
                if unavailable(exc):  # else (a broken file, a bug): polled again next tick
                    self.retry_at[profile_name] = time.monotonic() + pause
            else:
                self.retry_at.pop(profile_name, None)
                if outage.down:
                    outage.succeeded()
                    self._wake()  # back: look again at once for what piled up
        self.last_tick = time.monotonic()

    def _outage(self, profile_name: str | None) -> Outage:
        outage = self.outages.get(profile_name)
        if outage is None:
            outage = Outage(
                f"poll of {profile_name or 'the root store'}",
                logger,
                first_delay=min(self.settings.interval, BACKOFF_CEILING) or 0.2,
            )
            self.outages[profile_name] = outage
        return outage

    async def _scope_is_busy(self, home: Path) -> bool:
        """The idle gate: skip a profile only when its store says nothing is pending. One that
        cannot be probed (no database yet, an error) is polled inside its scope (fail open)."""
        try:
            return await asyncio.to_thread(self.profile_stores.has_pending, home)
        except Exception as exc:
            logger.debug("pending probe of profile %s failed (%s); polling it", home, exc)
            return True

    async def _pause(self) -> None:
        """Between ticks: ``interval`` seconds, cut short by a wake-up when the runner has one.

        A wake-up also ends the backoff of scopes whose store was away: it comes from the
        database (a NOTIFY, the LISTEN connection back, a request or a recorded outcome in
        this process), so the store is likely back."""
        interval = self.settings.interval
        if self.wakeup is None or interval <= 0:  # no pause: one turn of the loop
            await asyncio.sleep(interval)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self.wakeup.wait()
        if self.wakeup is not None:
            if self.wakeup.is_set():
                self.retry_at.clear()
            self.wakeup.clear()

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup.set()

    # -- side tasks ---------------------------------------------------------------------------

    def _start_side_tasks(self) -> None:
        side: dict[str, SideTask] = {
            "turn-lease-keeper": self.upkeep.keep_turns,
            "heartbeat": functools.partial(self.upkeep.beat, self.describe),
        }
        lease = self.settings.lease_seconds
        if lease is not None:
            side["handoff-lease-keeper"] = functools.partial(
                self.upkeep.keep_leases, lease / 3, self.scopes
            )
        side.update(self.host.side_tasks)
        loop = asyncio.get_running_loop()
        for name, factory in side.items():
            self.side_tasks[name] = loop.create_task(
                self._supervise(name, factory), name=f"hermes-watcher:{name}"
            )

    async def _stop_side_tasks(self) -> None:
        tasks = list(self.side_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.side_tasks.clear()

    async def _supervise(self, name: str, factory: SideTask) -> None:
        """Run a side task; restart it when it crashes, and stop the watcher loudly when it
        crashes more than ``max_restarts`` times within ``restart_window`` seconds."""
        window = self.settings.restart_window
        crashes: list[float] = []
        while True:
            try:
                await factory()
                return  # finished its work: nothing to supervise
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                now = time.monotonic()
                crashes = [at for at in crashes if now - at < window] + [now]
                if len(crashes) > self.settings.max_restarts:
                    logger.critical(
                        "side task %s crashed %d times within %gs; stopping the watcher",
                        name,
                        len(crashes),
                        window,
                        exc_info=True,
                    )
                    self.failure = RuntimeError(f"side task {name} keeps crashing: {exc!r}")
                    self._wake()
                    return
                logger.error("side task %s crashed; restarting it", name, exc_info=True)
                await upkeep.nap(self.settings.restart_delay)

    def describe(self) -> str:
        """The heartbeat's line: scopes, pending rows, deliveries in flight, last tick."""
        ago = "never" if self.last_tick is None else f"{time.monotonic() - self.last_tick:.1f}s ago"
        pending = sum(state.listed for state in self.states.values())
        return (
            f"watcher alive: {len(self.scopes)} scope(s), {pending} pending at last look, "
            f"{len(self.deliveries)} in flight, last tick {ago}"
        )
