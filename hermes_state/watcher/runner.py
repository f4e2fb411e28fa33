"""The gateway runner: a root store, profiles and a handler, served until a signal stops it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from .. import notify
from ..store import SessionDB as _SessionDB
from ..threaded import AsyncSessionDB
from . import profiles, settings
from .host import Metrics, Row, SideTask, closer_of, url_of
from .loop import HandoffWatch
from .profiles import GatewayConfig, ProfileStores
from .settings import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_MAX_CONCURRENCY, LOGGER_NAME

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["GatewayRunner", "Handler"]

T = TypeVar("T")

logger = logging.getLogger(LOGGER_NAME)

#: What delivers a handoff: ``handler(row, profile_name)``, async or sync.
Handler = Callable[[Row, str | None], object]


class GatewayRunner:
    """A gateway's handoff side: a root store, optional profiles, and a handler that delivers.

    ``GatewayRunner(store, handler)`` takes a store (``SessionDB``, ``AsyncSessionDB``,
    ``NativeAsyncSessionDB``), a path or a URL. ``await runner.run()`` serves until SIGINT or
    SIGTERM (or :meth:`stop`), then stops polling, drains in-flight deliveries and returns.
    The handler gets the row as claimed, with its transcript under ``"messages"``, and the
    profile name. The runner owns the profile stores it opens; :meth:`close` closes them.
    """

    def __init__(
        self,
        store: object = None,
        handler: Handler | None = None,
        *,
        profiles: Iterable[tuple[str, str | os.PathLike[str]]] = (),
        interval: float = 2.0,
        drain_timeout: float = 30.0,
        max_concurrency: int | None = DEFAULT_MAX_CONCURRENCY,
        heartbeat: float = DEFAULT_HEARTBEAT_SECONDS,
        metrics: Metrics | None = None,
    ) -> None:
        if handler is None:
            raise TypeError("GatewayRunner needs a handler: handler(row, profile_name)")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        if not interval > 0:
            raise ValueError(f"interval must be a number of seconds > 0, not {interval!r}")
        self._root_db = _as_awaitable_store(store)
        self._handler = handler
        self.config = GatewayConfig(tuple((name, Path(home)) for name, home in profiles))
        self.interval = interval
        self.drain_timeout = drain_timeout
        self._handoff_max_concurrency = max_concurrency
        self._handoff_wakeup = asyncio.Event()
        self._handoff_heartbeat = heartbeat
        self._handoff_wants_document = True
        #: A hermes_state.metrics.WatcherMetrics (``watch --metrics-port``), or None.
        self._handoff_metrics = metrics
        self._handoff_side_tasks: dict[str, SideTask] = {}
        self._profile_stores = ProfileStores()
        self._running: object = False

    @property
    def _session_db(self) -> AsyncStore:
        """The store of the current profile scope, else the root store."""
        scoped = profiles.scoped_store()
        return scoped if scoped is not None else self._root_db

    async def _process_handoff(self, row: Row, profile_name: str | None = None) -> None:
        if settings.legacy_handoff_forbidden():
            raise RuntimeError(
                f"legacy handoff is disabled by the writer policy ({settings.LEGACY_HANDOFF_ENV}); "
                "the handoff was not delivered"
            )
        result = self._handler(row, profile_name)
        if inspect.isawaitable(result):
            await result

    async def _run_in_executor_with_context(self, func: Callable[..., T], *args: object) -> T:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(None, context.run, func, *args)

    async def _handoff_watcher(self, interval: float = 2.0, drain_timeout: float = 30.0) -> None:
        """Reclaim stranded rows, then poll every ``interval`` s until ``_running`` is false."""
        await HandoffWatch(self, interval=interval, drain_timeout=drain_timeout).run()

    def stop(self) -> None:
        """Stop polling; ``run`` then drains in-flight deliveries and returns."""
        self._running = False
        self._handoff_wakeup.set()

    async def run(self, *, ticks: int | None = None) -> None:
        """Serve until stopped (SIGINT/SIGTERM), or for ``ticks`` polls when given."""
        loop = asyncio.get_running_loop()
        self._running = _TickBudget(ticks) if ticks is not None else True
        # An asyncio.Event belongs to the loop that first waits on it: a runner run again
        # under another loop (``asyncio.run(runner.run(ticks=1))`` twice) needs a new one.
        self._handoff_wakeup = asyncio.Event()
        installed = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._on_signal, signum)
                installed.append(signum)
        # A single tick (``--once``) has no next tick to pause before.
        interval = 0.0 if ticks == 1 else self.interval
        stop_wakeups = self._start_wakeups(loop)
        try:
            await GatewayRunner._handoff_watcher(self, interval, self.drain_timeout)
        finally:
            await stop_wakeups()
            for signum in installed:
                loop.remove_signal_handler(signum)

    def _start_wakeups(self, loop: asyncio.AbstractEventLoop) -> Callable[[], Awaitable[None]]:
        """Wake the watcher early on new requests: from this process always, and through
        LISTEN/NOTIFY when the root store is PostgreSQL (a supervised side task of the watch).
        Returns the function that stops them."""
        url = url_of(self._root_db)
        if url is None:
            return _nothing_to_stop
        wakeup = self._handoff_wakeup

        def wake_from_any_thread() -> None:
            loop.call_soon_threadsafe(wakeup.set)

        unsubscribe = notify.subscribe(notify.database_key(url), wake_from_any_thread)
        if url.get_backend_name() == "postgresql":
            listener = notify.PostgresListener(url, wakeup.set)
            self._handoff_side_tasks["postgres-listen"] = listener.run

        async def stop() -> None:
            unsubscribe()
            self._handoff_side_tasks.pop("postgres-listen", None)

        return stop

    def _on_signal(self, signum: int) -> None:
        logger.info(
            "%s received: no new claims; draining deliveries in flight", signal.Signals(signum).name
        )
        self.stop()

    async def serve(self, *, ticks: int | None = None) -> None:
        """``run``, then ``close``: the whole life of a watcher process."""
        try:
            await self.run(ticks=ticks)
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the profile stores this runner opened, and the root store when it can be."""
        await asyncio.to_thread(self._profile_stores.close)
        close = closer_of(self._root_db)
        if close is not None:
            await close()


async def _nothing_to_stop() -> None:
    return None


class _TickBudget:
    """A ``_running`` that stays true for a fixed number of reads (``--once``: one tick)."""

    def __init__(self, ticks: int) -> None:
        self.remaining = ticks

    def __bool__(self) -> bool:
        self.remaining -= 1
        return self.remaining >= 0


def _as_awaitable_store(store: object) -> AsyncStore:
    """An awaitable store of what the runner was given: a path or URL (None: the default
    file) is opened with :mod:`~hermes_state.watcher.profiles`' ``SessionDB``, a synchronous
    store is wrapped, and anything else is taken to be awaitable already."""
    if store is None or isinstance(store, str | os.PathLike):
        return AsyncSessionDB(profiles.SessionDB(store))
    if isinstance(store, _SessionDB):
        return AsyncSessionDB(store)
    return cast("AsyncStore", store)
