"""Batched outcome recording: one store call per flush for the deliveries that ended."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..outage import Outage, one_line, unavailable
from .adapter import StoreCalls
from .claimed import Claimed, Key, TurnTable
from .settings import LOGGER_NAME, TURN_LEASE_SECONDS

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["Flusher"]

logger = logging.getLogger(LOGGER_NAME)


@dataclass
class _Finish:
    """A delivery's outcome waiting for the flush that records it (``error`` None: it
    completed), or (``release_only``) a cancelled delivery's turn lease to give back."""

    db: AsyncStore
    claimed: Claimed
    error: str | None
    release_only: bool
    recorded: asyncio.Future[bool | None]


class Flusher:
    """Records the outcomes of deliveries in groups.

    An outcome handed in while no flush runs is flushed at the next turn of the event loop;
    those handed in while one runs go together in the next flush, started as soon as that one
    returns. One ``finish_handoffs`` per store per flush completes and fails the rows and gives
    up their turn leases. Each outcome's future resolves once its flush committed: True
    recorded, False discarded (the claim was lost), None not recorded (the store failed; the
    row stays running until reclaimed). The flush task starts with the watch (or with the
    first outcome handed in); ``close`` flushes what is queued and stops it.

    A flush the database could not take because it is away (:func:`unavailable`: a server
    down, or a failover under way) is tried again, with a growing jittered pause, fenced on
    the claim's attempt as every finish is, while the claim may still hold: until
    ``patience`` seconds after its lease was last renewed (lease upkeep goes on meanwhile),
    or ``close_patience`` seconds into ``close``. Only then is it left running, to be
    reclaimed. Its turn lease is kept up until then too.
    """

    def __init__(
        self,
        turns: TurnTable,
        *,
        patience: float | None = None,
        close_patience: float = 30.0,
    ) -> None:
        self.turns = turns
        self.patience = TURN_LEASE_SECONDS if patience is None else patience
        self.close_patience = close_patience
        self.closing_at: float | None = None
        #: Outcomes waiting for the database to come back, and the timer that requeues them.
        self.retrying: list[_Finish] = []
        self._retry_timer: asyncio.TimerHandle | None = None
        self.outage = Outage("recording outcomes", logger)
        self.queue: list[_Finish] = []
        self.ready = asyncio.Event()
        self.closing = False
        self.task: asyncio.Task[None] | None = None
        #: Held while a flush runs: lease upkeep takes it too, so a renewal never races a
        #: flush that is finishing the rows it renews.
        self.lock = asyncio.Lock()
        #: Deliveries whose outcome a flush settled (recorded, discarded or failed to record)
        #: and that have not left the in-flight table yet: no lease of theirs is kept up.
        self.settled: set[Key] = set()

    def start(self) -> None:
        """Start the flush task, unless it runs (or the flusher is closing)."""
        if self.task is None or (self.task.done() and not self.closing):
            loop = asyncio.get_running_loop()
            self.task = loop.create_task(self._run(), name="hermes-watcher:flush")

    def submit(
        self, db: AsyncStore, claimed: Claimed, error: str | None
    ) -> asyncio.Future[bool | None]:
        """Queue a delivery's outcome; the future says how its flush went."""
        return self._queue(db, claimed, error, release_only=False)

    def give_back(self, db: AsyncStore, claimed: Claimed) -> None:
        """Release a cancelled delivery's turn lease with the next flush (its row stays
        running, for the next start's reclaim)."""
        if claimed.turn:
            self._queue(db, claimed, None, release_only=True)

    def _queue(
        self, db: AsyncStore, claimed: Claimed, error: str | None, *, release_only: bool
    ) -> asyncio.Future[bool | None]:
        recorded: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self.queue.append(_Finish(db, claimed, error, release_only, recorded))
        self.ready.set()
        self.start()
        return recorded

    async def close(self) -> None:
        """Flush everything queued (retrying what the database could not take for at most
        ``close_patience`` seconds), then stop."""
        self.closing = True
        self.closing_at = time.monotonic()
        self.ready.set()
        if self.task is not None:
            await self.task
        await self._flush()  # what a flusher that crashed left
        self._give_up(self.retrying, "the watcher stopped")
        self.retrying = []

    async def _run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            await self._flush()
            if self.closing and not self.queue and not self.retrying:
                return

    def _retry_later(self, finishes: list[_Finish], delay: float) -> None:
        self.retrying.extend(finishes)
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        self._retry_timer = asyncio.get_running_loop().call_later(delay, self._requeue)

    def _requeue(self) -> None:
        self._retry_timer = None
        self.queue.extend(self.retrying)
        self.retrying = []
        self.ready.set()
        self.start()

    def _deadline(self, finish: _Finish) -> float:
        """Until when an outcome the database cannot take is tried again."""
        deadline = finish.claimed.renewed_at + self.patience
        if self.closing_at is not None:
            deadline = min(deadline, self.closing_at + self.close_patience)
        return deadline

    def _give_up(self, finishes: list[_Finish], why: str) -> None:
        if not finishes:
            return
        logger.warning(
            "could not record the outcome of %s (%s); they stay running until reclaimed "
            "(and their turn leases expire by themselves)",
            ", ".join(sorted(f.claimed.key[1] for f in finishes)),
            why,
        )
        self._settle(finishes, None)

    def _settle(self, finishes: list[_Finish], done: dict[str, bool] | None) -> None:
        for finish in finishes:
            self.turns.drop(finish.claimed)
            if not finish.release_only:
                self.settled.add(finish.claimed.key)
            if not finish.recorded.done():
                session_id = finish.claimed.key[1]
                finish.recorded.set_result(None if done is None else done.get(session_id))

    async def _flush(self) -> None:
        while self.queue:
            batch, self.queue = self.queue, []
            groups: dict[int, list[_Finish]] = {}
            for finish in batch:
                groups.setdefault(id(finish.db), []).append(finish)
            for group in groups.values():
                now: list[_Finish] = []
                named: set[str] = set()
                for finish in group:
                    session_id = finish.claimed.key[1]
                    if session_id in named:  # the same session twice: the second waits
                        self.queue.append(finish)
                    else:
                        named.add(session_id)
                        now.append(finish)
                async with self.lock:
                    await self._flush_group(now)

    async def _flush_group(self, now: list[_Finish]) -> None:
        """One store call for ``now``; every future in it is resolved, whatever happens."""
        done: dict[str, bool] | None = None
        outcomes: dict[str, str | None] = {}
        settle = now
        try:
            outcomes = {f.claimed.key[1]: f.error for f in now if not f.release_only}
            releases = {f.claimed.key[1]: f.claimed.turn.holder for f in now if f.claimed.turn}
            done = await StoreCalls(now[0].db).finish(outcomes, release_turns=releases)
        except Exception as exc:
            if unavailable(exc):
                delay = self.outage.failed(exc)
                moment = time.monotonic()
                again = [f for f in now if moment + delay < self._deadline(f)]
                self._retry_later(again, delay)
                settle = [f for f in now if f not in again]
                if settle:
                    self._give_up(settle, f"the database stayed away: {one_line(exc)}")
                    settle = []
            else:
                logger.exception(
                    "could not record the outcome of %s; they stay running until reclaimed "
                    "(and their turn leases expire by themselves)",
                    ", ".join(sorted(outcomes)) or "no delivery",
                )
        else:
            self.outage.succeeded()
            completed = [sid for sid, error in outcomes.items() if error is None and done.get(sid)]
            if completed:
                logger.info("completed %d handoff(s): %s", len(completed), ", ".join(completed))
        finally:
            self._settle(settle, done)
