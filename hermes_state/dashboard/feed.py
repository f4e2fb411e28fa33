"""The dashboard's change feed: one follower of the audit trail, fanned out to every SSE client.

Every transition, by any process, writes an audit event, so following the event ids is a change
probe that works on every backend. One task per dashboard reads the new events and hands them
to each client's bounded queue; a client whose queue is full is dropped, never buffered
without limit. Wake-ups make it prompt: requests in this process (:func:`notify.subscribe`),
PostgreSQL LISTEN/NOTIFY from other hosts, and on SQLite the change token, which is cheap
enough to probe often. Otherwise it polls every ``interval`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from .. import notify
from ..engine import is_sqlite

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["ChangeFeed", "Subscription"]

logger = logging.getLogger(__name__)

#: Events a client may lag behind before it is dropped.
QUEUE_SIZE: Final = 256
#: Events read per query.
BATCH: Final = 200
#: A gap in the event ids may be a transaction that has not committed yet: look again for it
#: this long before giving up (a rolled-back insert leaves a gap forever).
GAP_PATIENCE: Final = 5.0
#: Of a larger jump (a pruned trail, whose ids go on from the sequence; a sequence cache)
#: only the ids just below the new event are tracked: a concurrent insert took one of those.
MAX_GAP: Final = 1000
#: The SQLite change token is probed this often; a full look runs every ``interval`` anyway.
TOKEN_PROBE: Final = 0.1

Event = dict[str, Any]


@dataclass(eq=False)
class Subscription:
    """One client's queue of events; ``dropped`` once it fell ``QUEUE_SIZE`` events behind."""

    queue: asyncio.Queue[Event | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=QUEUE_SIZE)
    )
    dropped: bool = False

    def offer(self, event: Event) -> bool:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped = True
            self.close()
            return False
        return True

    def close(self) -> None:
        """Queue the end marker, making room for it: the stream ends once the client reads."""
        if self.queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
        self.queue.put_nowait(None)


class ChangeFeed:
    """Follows the audit trail of ``store`` (an awaitable store) and fans events out."""

    def __init__(self, store: AsyncStore, *, interval: float = 0.5) -> None:
        self.store = store
        self.interval = interval
        self._subscriptions: set[Subscription] = set()
        self._wake = asyncio.Event()
        self._last = 0
        self._gaps: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._undo_subscribe: Callable[[], None] | None = None
        self.dropped_clients = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._placed = False

    @property
    def clients(self) -> int:
        return len(self._subscriptions)

    async def start(self) -> None:
        # Where the feed starts: events from before it opened are history, not news. Known
        # before the first client can connect; a database that is down now is retried later.
        self._placed = await self._place()
        loop = self._loop = asyncio.get_running_loop()
        url = self.store.url

        def wake_from_any_thread() -> None:
            loop.call_soon_threadsafe(self._wake.set)

        self._undo_subscribe = notify.subscribe(notify.database_key(url), wake_from_any_thread)
        if url.get_backend_name() == "postgresql":
            try:
                import psycopg  # noqa: F401
            except ImportError:
                logger.info("psycopg is not installed: the dashboard polls PostgreSQL")
            else:
                listener = notify.PostgresListener(url, self._wake.set)
                self._listener = asyncio.create_task(listener.run(), name="dashboard-listen")
        self._task = asyncio.create_task(self._follow(), name="dashboard-feed")

    async def _place(self) -> bool:
        try:
            self._last = await self.store.last_handoff_event_id()
        except Exception as exc:
            logger.warning("the dashboard's change feed cannot start yet (%s)", exc)
            return False
        return True

    async def stop(self) -> None:
        if self._undo_subscribe is not None:
            self._undo_subscribe()
        for task in (self._task, self._listener):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self.close_streams()

    def close_streams(self) -> None:
        """End every client's stream (they reconnect to a restarted dashboard by themselves)."""
        for subscription in list(self._subscriptions):
            subscription.close()
        self._subscriptions.clear()

    def close_streams_threadsafe(self) -> None:
        """``close_streams`` from a signal handler or another thread: a server that is stopping
        waits for open connections, and an event stream never closes by itself."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.close_streams)

    def wake(self) -> None:
        """Look for new events now (after this dashboard's own actions)."""
        self._wake.set()

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Subscription]:
        subscription = Subscription()
        self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)

    async def _follow(self) -> None:
        sqlite = is_sqlite(self.store.url)
        token_of = getattr(self.store, "handoff_change_token", None) if sqlite else None
        token: int | None = None
        while not self._placed:
            await asyncio.sleep(self.interval)
            self._placed = await self._place()
        while True:
            try:
                await self._wait(token_of, token)
                if token_of is not None:
                    token = await token_of()
                await self._read_new_events()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("the dashboard's change feed failed (%s); retrying", exc)
                await asyncio.sleep(self.interval)

    async def _wait(self, token_of: Callable[[], Any] | None, token: int | None) -> None:
        """Until woken, the SQLite change token moved, or ``interval`` passed."""
        deadline = time.monotonic() + self.interval
        step = TOKEN_PROBE if token_of is not None else self.interval
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(step, remaining)):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake.clear()
                return
            if token_of is not None and await token_of() != token:
                return

    async def _read_new_events(self) -> None:
        now = time.monotonic()
        self._gaps = {gap: seen for gap, seen in self._gaps.items() if now - seen < GAP_PATIENCE}
        start = min(self._gaps) - 1 if self._gaps else self._last
        while True:
            events = await self.store.handoff_events_after(start, limit=BATCH)
            for event in events:
                self._accept(event, now)
            if len(events) < BATCH:
                return
            start = int(events[-1]["id"])

    def _accept(self, event: Event, now: float) -> None:
        event_id = int(event["id"])
        if event_id in self._gaps:
            del self._gaps[event_id]
        elif event_id > self._last:
            for missing in range(max(self._last + 1, event_id - MAX_GAP), event_id):
                self._gaps[missing] = now
            self._last = event_id
        else:
            return  # already delivered
        for subscription in list(self._subscriptions):
            if not subscription.offer(event):
                self._subscriptions.discard(subscription)
                self.dropped_clients += 1
                logger.info("dropped a dashboard client that fell %d events behind", QUEUE_SIZE)
