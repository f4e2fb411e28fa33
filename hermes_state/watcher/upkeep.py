"""Upkeep: startup reclaim, lease renewal and expiry reclaim, turn-lease refresh, heartbeat."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..outage import Outage
from . import profiles
from .adapter import StoreCalls
from .claimed import Key, Turn, TurnTable
from .deliveries import Deliveries
from .flusher import Flusher
from .host import Host, store_offers
from .profiles import Scope
from .settings import LOGGER_NAME, RECLAIM_MESSAGE, WatchSettings

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["Upkeep", "nap"]

logger = logging.getLogger(LOGGER_NAME)


async def nap(seconds: float) -> None:
    """Sleep on the loop's timer: side tasks keep their pace even where ``asyncio.sleep`` is
    replaced (hosts and tests stub it to drive the poll loop)."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    timer = loop.call_later(seconds, wake)
    try:
        await woken
    finally:
        timer.cancel()


class Upkeep:
    """What keeps a watch's claims honest while it runs; each loop is a supervised side task."""

    def __init__(
        self,
        host: Host,
        settings: WatchSettings,
        deliveries: Deliveries,
        flusher: Flusher,
        turns: TurnTable,
    ) -> None:
        self.host = host
        self.settings = settings
        self.deliveries = deliveries
        self.flusher = flusher
        self.turns = turns

    async def reclaim_stranded(self, scopes: list[Scope]) -> None:
        """In each scope, fail the rows a previous life of this gateway left running; a store
        without the call, or one that fails, is passed over."""
        for profile_name, home in scopes:
            try:
                async with profiles.enter_scope(home):
                    db = self.host.store
                    if not store_offers(db).stale_reclaim:
                        continue
                    reclaimed = await db.reclaim_stale_running_handoffs(RECLAIM_MESSAGE)
            except Exception:
                logger.warning(
                    "startup reclaim failed in scope %s", profile_name or "root", exc_info=True
                )
                continue
            for session_id in reclaimed or ():
                logger.info(
                    "reclaimed %s (%s): left running by a stopped gateway",
                    session_id,
                    profile_name or "root",
                )

    async def keep_leases(self, period: float, scopes: list[Scope]) -> None:
        """Every ``period`` s: renew the leases of rows in flight, and fail rows whose lease
        expired (their gateway stopped renewing: it died or hung), in every scope. Upkeep the
        database could not take is tried again sooner, with a growing jittered pause (at most
        ``period``), until it goes through: a lease must not lapse over a short outage."""
        outages = {
            profile_name: Outage(f"lease upkeep in {profile_name or 'the root store'}", logger)
            for profile_name, _home in scopes
        }
        pause = period
        while True:
            await nap(pause)
            pause = period
            for profile_name, home in scopes:
                outage = outages[profile_name]
                try:
                    async with profiles.enter_scope(home):
                        await self._leases(self.host.store, profile_name)
                except Exception as exc:
                    pause = min(pause, outage.failed(exc))
                else:
                    outage.succeeded()

    async def _leases(self, db: AsyncStore, profile_name: str | None) -> None:
        offers = store_offers(db)
        if offers.lease_renewal:
            renewed: set[str] = set()
            async with self.flusher.lock:  # wholly before a flush, or wholly after it
                held = self.deliveries.unsettled(profile_name)
                if held:
                    renewed = set(await db.renew_handoff_leases(held))
                    self.deliveries.renewed(profile_name, renewed)
            for session_id in sorted(set(held) - renewed):
                logger.warning(
                    "lost the lease of %s: another gateway may have reclaimed it; "
                    "its outcome will be discarded",
                    session_id,
                )
        if offers.expired_reclaim:
            for session_id in await db.reclaim_expired_handoffs(RECLAIM_MESSAGE):
                logger.info("reclaimed %s: its gateway's lease expired", session_id)

    async def keep_turns(self) -> None:
        """Refresh the turn leases of deliveries in flight, a third of their life apart: one
        call per store for all it holds, where the store can. A refresh the database could
        not take is tried again sooner, with a growing jittered pause (as lease upkeep)."""
        period = self.settings.turn_seconds / 3
        outages: dict[Path | None, Outage] = {}
        pause = period
        while True:
            await nap(pause)
            pause = period
            for home, turns in self.turns.by_home().items():
                outage = outages.setdefault(
                    home, Outage(f"turn lease upkeep in {home or 'the root store'}", logger)
                )
                try:
                    async with profiles.enter_scope(home), self.flusher.lock:
                        # A flush that gave a lease back meanwhile dropped it from the table.
                        turns = self.turns.still_held(turns)
                        lost = await self._refresh(self.host.store, turns)
                except Exception as exc:
                    pause = min(pause, outage.failed(exc))
                    continue
                outage.succeeded()
                for key in lost:
                    if key in self.turns.turns:
                        logger.warning(
                            "lost the turn lease of %s while delivering it: a local turn may start",
                            key[1],
                        )

    async def _refresh(self, db: AsyncStore, turns: dict[Key, Turn]) -> list[Key]:
        """Refresh ``turns`` in ``db``; the keys whose lease another holder has now."""
        if not turns:
            return []
        holders = {turn.session_id: turn.holder for turn in turns.values()}
        lost = set(
            await StoreCalls(db).refresh_turns(holders, ttl_seconds=self.settings.turn_seconds)
        )
        return [key for key, turn in turns.items() if turn.session_id in lost]

    async def beat(self, describe: Callable[[], str]) -> None:
        """At INFO, every ``heartbeat`` s: what ``describe`` says of the watch."""
        while True:
            await nap(self.settings.heartbeat)
            logger.info("%s", describe())
