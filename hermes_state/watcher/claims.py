"""Claiming: the rows a tick's free slots allow, with their turn leases, then dispatch."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..plans import MAX_BATCH, Row, delivery_holder
from .adapter import StoreCalls
from .claimed import Claimed, TurnTable
from .deliveries import Deliveries, maybe_await
from .host import Host
from .settings import LOGGER_NAME, WatchSettings

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["Claims", "ScopeState"]

logger = logging.getLogger(LOGGER_NAME)


@dataclass
class ScopeState:
    """What the watcher remembers of one scope between ticks."""

    change_token: int | None = None
    tokenless: bool = False  # its store answered None: a server, which has no change token
    backlog: bool = True  # rows may be pending that the last tick did not claim
    listed: int = 0  # pending rows the last look found (for the heartbeat)


class Claims:
    """Claims rows for the deliveries of one watch.

    A tick claims no more rows than there are free delivery slots, leaving the rest pending
    for other gateways, and never a row whose delivery is still in flight here. Two ways to
    choose them, one claim: where the store can and the runner needs no ids before the claim,
    the oldest pending rows no other claimer holds, in one call; else the listing's rows, after
    skipping those in flight, those a local turn of this process is busy with, and reserving
    their sources. Either way the rows are claimed with their turn leases in one store call
    (:class:`~hermes_state.watcher.adapter.StoreCalls` makes it of single claims for stores
    without it), then each is delivered by its own task.
    """

    def __init__(
        self,
        host: Host,
        settings: WatchSettings,
        deliveries: Deliveries,
        turns: TurnTable,
        wake: Callable[[], None],
    ) -> None:
        self.host = host
        self.settings = settings
        self.deliveries = deliveries
        self.turns = turns
        self.wake = wake

    async def tick(
        self, db: AsyncStore, profile_name: str | None, home: Path | None, state: ScopeState
    ) -> None:
        """One poll of ``db``: claim what is pending and dispatch each row.

        When the store offers a change token and nothing changed since a tick that left no
        backlog, nothing is listed (the cheap idle poll on SQLite).
        """
        calls = StoreCalls(db)
        if not state.tokenless and calls.offers.change_token:
            token = await db.handoff_change_token()
            if token is not None and token == state.change_token and not state.backlog:
                return
            state.change_token = token
            state.tokenless = token is None
        # Until this tick's listing and claims succeed, assume rows are waiting: a tick that
        # fails half way must not leave the next ticks skipping on an unchanged token.
        state.backlog = True
        if self._takes_oldest(calls):
            state.backlog = await self._claim_oldest(calls, profile_name, home, state)
        else:
            state.backlog = await self._claim_listed(calls, profile_name, home, state)

    def _takes_oldest(self, calls: StoreCalls) -> bool:
        """Whether a tick may claim the oldest pending rows without listing them first: the
        store can, and the runner neither checks turns in-process nor reserves sources (both
        need the ids before the claim)."""
        host = self.host
        return calls.offers.oldest_claims and not host.checks_turns and host.reserve is None

    def _free(self) -> int:
        limit = self.settings.limit
        return MAX_BATCH if limit is None else min(MAX_BATCH, limit - len(self.deliveries))

    def _has_room(self) -> bool:
        limit = self.settings.limit
        return limit is None or len(self.deliveries) < limit

    async def _claim_oldest(
        self, calls: StoreCalls, profile_name: str | None, home: Path | None, state: ScopeState
    ) -> bool:
        """Claim the oldest pending rows, as many as slots are free, with their turn leases,
        in one call (other gateways' rows are skipped, so gateways draining one backlog take
        disjoint rows); True when rows may be waiting."""
        free = self._free()
        if free <= 0:
            return True  # every slot is busy: look again once one frees up
        gateway = self.settings.holder if calls.offers.turn_leases else None
        # A row still in flight here can be pending again (an operator failed it and the
        # user asked again): it waits until its delivery ends.
        busy = self.deliveries.busy(profile_name)
        batch = await calls.db.claim_next_handoffs(
            free, exclude=busy, turn_gateway=gateway, turn_seconds=self.settings.turn_seconds
        )
        state.listed = len(batch.rows) + len(batch.turn_held)
        claims = {row["id"]: Claimed((profile_name, row["id"]), home) for row in batch.rows}
        holders = None
        if gateway is not None:
            holders = {session_id: delivery_holder(gateway, session_id) for session_id in claims}
        await self._launch(calls, batch.rows, claims, holders, profile_name)
        full = state.listed >= free
        if full and self._has_room():
            self.wake()  # a full batch and slots to spare: claim more now
        return full or bool(batch.turn_held) or bool(busy)

    async def _claim_listed(
        self, calls: StoreCalls, profile_name: str | None, home: Path | None, state: ScopeState
    ) -> bool:
        """Claim what the listing offers, in batches; True when rows may be left waiting.

        A tick claims at most ``limit - in flight`` rows and skips at most ``in flight``
        listed ones, so ``limit`` listed rows are enough: listing the whole backlog every tick
        would cost O(pending) per claim.
        """
        limit = self.settings.limit
        rows = await calls.pending(limit)
        state.listed = len(rows)
        backlog = limit is not None and len(rows) >= limit  # the listing may have been cut short
        candidates: list[Row] = []
        for row in rows:
            if (profile_name, row["id"]) in self.deliveries:
                # Pending again while its last delivery is still finishing (a re-request):
                # look at it again next tick even if nothing else changes in the database.
                backlog = True
                continue
            if limit is not None and len(self.deliveries) + len(candidates) >= limit:
                backlog = True  # left for another gateway, or for a slot freeing up here
                break
            if self._turn_in_progress(row["id"]):
                backlog = True  # a local turn of this session runs in this process: later
                continue
            candidates.append(row)
        raced = False
        for start in range(0, len(candidates), MAX_BATCH):
            held, lost = await self._claim_batch(
                calls, candidates[start : start + MAX_BATCH], profile_name, home
            )
            backlog = backlog or held  # a conversation's turn is taken: a later tick tries again
            raced = raced or lost  # another gateway (or a waiter's fail) got there first
        if raced and backlog and self._has_room():
            self.wake()  # lost races on a cut-short listing: list again now
        return backlog

    def _turn_in_progress(self, session_id: str) -> bool:
        """Whether the host runs a turn of this session right now (an in-process check)."""
        try:
            return self.host.turn_in_progress(session_id)
        except Exception:
            logger.debug("could not tell whether %s has a turn running", session_id, exc_info=True)
            return False

    async def _claim_batch(
        self, calls: StoreCalls, rows: list[Row], profile_name: str | None, home: Path | None
    ) -> tuple[bool, bool]:
        """Reserve the sources, claim the rows with their turn leases in one call, dispatch
        what was claimed. Says whether rows were left for their turn, and whether another
        claimer took some. A row not claimed gets its reservation back (no turn lease was
        taken for it)."""
        pending = {row["id"]: Claimed((profile_name, row["id"]), home) for row in rows}
        reserve = self.host.reserve
        holders = None
        if calls.offers.turn_leases:
            holders = {sid: delivery_holder(self.settings.holder, sid) for sid in pending}
        try:
            if reserve is not None:
                for session_id, claimed in pending.items():
                    claimed.reservation = await maybe_await(reserve(session_id))
            batch = await calls.claim(
                rows, turn_holders=holders, turn_seconds=self.settings.turn_seconds
            )
        except BaseException:
            for claimed in pending.values():
                await self.deliveries.release_reservation(claimed)
            raise
        won = [row for row in batch.rows if row["id"] in pending]
        taken = {row["id"] for row in won}
        for session_id, claimed in pending.items():
            if session_id not in taken:
                await self.deliveries.release_reservation(claimed)
        held = set(batch.turn_held) & pending.keys()
        await self._launch(calls, won, pending, holders, profile_name)
        return bool(held), len(pending) - len(won) - len(held) > 0

    async def _launch(
        self,
        calls: StoreCalls,
        rows: list[Row],
        claims: Mapping[str, Claimed],
        holders: Mapping[str, str] | None,
        profile_name: str | None,
    ) -> None:
        """Dispatch the rows a claim won: each its own task, with its transcript when the
        runner wants documents (read for all in one call where the store can)."""
        if not rows:
            return
        logger.info(
            "claimed %d handoff(s) in %s: %s",
            len(rows),
            profile_name or "root",
            ", ".join(f"{row['id']} ({row.get('handoff_platform')})" for row in rows),
        )
        metrics = self.host.metrics
        for row in rows:
            if holders is not None:
                self.turns.hold(claims[row["id"]], holders[row["id"]])
            if metrics is not None:
                metrics.claimed(row)
        try:
            documents = await calls.documents(rows) if self.settings.wants_document else rows
        except Exception as exc:
            failed = sorted(row["id"] for row in rows)
            logger.exception("could not read the transcripts of %s; failing them", failed)
            error = f"the gateway could not start the delivery: {exc}"
            for row in rows:
                self.deliveries.fail_unstarted(calls.db, claims[row["id"]], error)
            return
        for document in documents:
            self.deliveries.start(calls.db, document, claims[document["id"]])
