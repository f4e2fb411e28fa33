"""The deliveries in flight: one task per claimed row, from handler to flushed outcome."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .claimed import Claimed, Key
from .flusher import Flusher
from .host import Host, Row
from .settings import LOGGER_NAME

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["Deliveries", "discarded"]

logger = logging.getLogger(LOGGER_NAME)


def discarded(what: str, session_id: str) -> None:
    logger.warning(
        "the %s of %s was discarded: its claim was reclaimed meanwhile "
        "(lease expired or gateway presumed dead)",
        what,
        session_id,
    )


def _reported(session_id: str, error: str | None, recorded: bool | None) -> str:
    """Say how a delivery ended, once its flush returned (the flush logged the completions it
    committed, one line for all); its metrics label."""
    if recorded is None:
        return "discarded"  # not recorded: the flusher said why
    if recorded is False:
        discarded("completion" if error is None else "failure", session_id)
        return "discarded"
    return "completed" if error is None else "failed"


async def maybe_await(value: object) -> object:
    return await value if inspect.isawaitable(value) else value


class Deliveries:
    """The table of deliveries in flight, keyed by (profile name, session id).

    A delivery runs the runner's handler, hands its outcome to the flusher and waits for the
    flush to commit it; only then is it reported (log, metrics) and its slot freed. A freed
    slot wakes the watcher, so a backlog is claimed at once rather than an interval later.
    """

    def __init__(self, host: Host, flusher: Flusher, wake: Callable[[], None]) -> None:
        self.host = host
        self.flusher = flusher
        self.wake = wake
        self.in_flight: dict[Key, asyncio.Task[None]] = {}
        #: The claims of the deliveries in flight (lease upkeep notes their renewals).
        self.claims: dict[Key, Claimed] = {}

    def __len__(self) -> int:
        return len(self.in_flight)

    def __contains__(self, key: Key) -> bool:
        return key in self.in_flight

    def busy(self, profile_name: str | None) -> list[str]:
        """The session ids of a scope in flight."""
        return [session_id for scope, session_id in self.in_flight if scope == profile_name]

    def unsettled(self, profile_name: str | None) -> list[str]:
        """The session ids of a scope in flight whose outcome no flush has settled yet."""
        settled = self.flusher.settled
        return [key[1] for key in self.in_flight if key[0] == profile_name and key not in settled]

    def start(self, db: AsyncStore, document: Row, claimed: Claimed) -> None:
        """Start one delivery as its own task. One that cannot start is failed, by a task that
        holds its slot until the failure is recorded."""
        delivery = self.deliver(db, document, claimed)
        try:
            task = asyncio.ensure_future(delivery)
        except Exception as exc:
            delivery.close()
            logger.exception("could not start the delivery of %s; failing it", claimed.key[1])
            self.fail_unstarted(db, claimed, f"the gateway could not start the delivery: {exc}")
            return
        self._hold(claimed, task)

    def fail_unstarted(self, db: AsyncStore, claimed: Claimed, error: str) -> None:
        """Fail a claimed row whose delivery never started, holding its slot meanwhile."""
        failing = asyncio.get_running_loop().create_task(self._fail(db, claimed, error))
        self._hold(claimed, failing)

    def _hold(self, claimed: Claimed, task: asyncio.Task[None]) -> None:
        self.in_flight[claimed.key] = task
        self.claims[claimed.key] = claimed
        task.add_done_callback(functools.partial(self._forget, claimed.key))

    def _forget(self, key: Key, task: asyncio.Task[None]) -> None:
        if self.in_flight.get(key) is task:
            del self.in_flight[key]
            self.claims.pop(key, None)
            self.flusher.settled.discard(key)
        self.wake()

    def renewed(self, profile_name: str | None, session_ids: set[str]) -> None:
        """Note that the leases of ``session_ids`` (in the scope of ``profile_name``) were
        just renewed: their claims hold for another lease from now."""
        now = time.monotonic()
        for session_id in session_ids:
            claimed = self.claims.get((profile_name, session_id))
            if claimed is not None:
                claimed.renewed_at = now

    async def _fail(self, db: AsyncStore, claimed: Claimed, error: str) -> None:
        try:
            if await self.flusher.submit(db, claimed, error) is False:
                discarded("failure", claimed.key[1])
        finally:
            await self.release_reservation(claimed)

    async def deliver(self, db: AsyncStore, row: Row, claimed: Claimed) -> None:
        """One delivery: run the handler, hand its outcome to the flusher and wait for the
        flush to commit it; then report it.

        A cancelled handler leaves the row ``running`` (whether it arrived is unknown, so the
        next start's reclaim fails it with the retry hint instead of risking a double
        delivery) and its turn lease is given back with the next flush; a cancel while the
        outcome waits for its flush does not withdraw it. The source reservation is given back
        on every path.
        """
        session_id = row["id"]
        metrics = self.host.metrics
        started = time.monotonic()
        outcome = "cancelled"
        submitted = False
        try:
            error: str | None = None
            try:
                await self.host.deliver(row, claimed.key[0])
            except asyncio.CancelledError:
                logger.warning(
                    "delivery of %s cancelled; it stays running until reclaimed", session_id
                )
                raise
            except Exception as exc:
                error = str(exc) or type(exc).__name__
                logger.info("handoff %s failed: %s", session_id, error)
            recorded = self.flusher.submit(db, claimed, error)
            submitted = True
            # A cancel now leaves the outcome queued: the flush records it all the same.
            outcome = _reported(session_id, error, await recorded)
        finally:
            if not submitted:
                self.flusher.give_back(db, claimed)  # the turn lease goes back with a flush
            await self.release_reservation(claimed)
            if metrics is not None:
                metrics.delivered(outcome, time.monotonic() - started)

    async def release_reservation(self, claimed: Claimed) -> None:
        """Give the runner back the source reservation of ``claimed``; never raises."""
        if claimed.reservation is None:
            return
        value, claimed.reservation = claimed.reservation, None
        try:
            release = self.host.release_reservation
            if release is None:
                raise AttributeError("the runner has no _release_handoff_source_reservation")
            await maybe_await(release(value))
        except Exception:
            logger.warning(
                "could not release the source reservation of %s", claimed.key[1], exc_info=True
            )

    async def drain(self, seconds: float) -> None:
        """Give the deliveries in flight ``seconds`` to end, then cancel the rest."""
        tasks = list(self.in_flight.values())
        if not tasks:
            return
        logger.info("waiting up to %gs for %d delivery(ies) in flight", seconds, len(tasks))
        _done, pending = await asyncio.wait(tasks, timeout=seconds)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning(
                "cancelled %d delivery(ies) still running after %gs", len(pending), seconds
            )
            await asyncio.gather(*pending, return_exceptions=True)
