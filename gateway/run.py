"""The gateway's handoff watcher: polls stores, claims pending rows, delivers each in its own task.

The watcher (:meth:`GatewayRunner._handoff_watcher`) needs only ``runner._session_db`` (an
awaitable store), ``runner._running`` (re-read every tick) and ``runner._process_handoff``.
Everything else it uses is a module-level name looked up when called, so a host process (or a
test) can replace any piece: ``asyncio``, ``_handoff_watch_scopes``,
``_async_profile_runtime_scope``, ``_multiplex_profile_homes`` and ``get_hermes_home``.

Guarantees: the event loop never waits on database or file I/O (stores are awaited, file work
runs in threads); one slow delivery never delays another (fire-and-forget tasks); a row is
never dispatched twice (claims are compare-and-swap, and in-flight rows are skipped); a row
left ``running`` by a dead gateway is failed at the next start with a hint to re-run
``/handoff``, never re-queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy.engine import URL

from hermes_state import AsyncSessionDB, SessionDB, notify
from hermes_state.engine import hermes_home
from hermes_state.repository import STRANDED_ERROR

__all__ = [
    "RECLAIM_MESSAGE",
    "GatewayConfig",
    "GatewayRunner",
    "Handler",
    "default_owner",
    "get_hermes_home",
]

logger = logging.getLogger(__name__)

RECLAIM_MESSAGE: Final = STRANDED_ERROR
DEFAULT_MAX_CONCURRENCY: Final = 3

Row = Mapping[str, Any]
#: What delivers a handoff: ``handler(row, profile_name)``, async or sync.
Handler = Callable[[Row, str | None], Any]
Scope = tuple[str | None, Path | None]

# The store of the profile whose scope the current task runs in (None: the root store).
_scoped_store: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "hermes_profile_store", default=None
)
_profile_stores: dict[Path, AsyncSessionDB] = {}
_profile_stores_lock = threading.Lock()


def get_hermes_home() -> Path:
    """The launch home: ``$HERMES_HOME``, defaulting to ``~/.hermes``."""
    return hermes_home()


def default_owner() -> str:
    """A gateway identity stable across restarts: host name and launch home.

    A restarted gateway recognises its previous life's claims by it and reclaims them at once
    instead of waiting for their leases to expire.
    """
    return f"{socket.gethostname()}:{get_hermes_home().resolve()}"


@dataclass(frozen=True)
class GatewayConfig:
    """What a gateway serves besides its root store: multiplexed profiles as (name, home)."""

    profiles: tuple[tuple[str, Path], ...] = field(default_factory=tuple)


def _multiplex_profile_homes(config: Any) -> list[tuple[str, Path]]:
    """The (name, home) of every profile the gateway multiplexes, from its config."""
    profiles: Iterable[tuple[str, Any]] = getattr(config, "profiles", None) or ()
    return [(str(name), Path(home)) for name, home in profiles]


def _handoff_watch_scopes(runner: Any) -> list[Scope]:
    """The root store first, then each multiplexed profile whose home is not the launch home.

    Touches the file system (resolving paths), so the watcher calls it off the event loop when
    the runner can. A failing resolver degrades to the root store alone.
    """
    scopes: list[Scope] = [(None, None)]
    try:
        launch = get_hermes_home().resolve()
        for name, home in _multiplex_profile_homes(getattr(runner, "config", None)):
            if home.resolve() != launch:
                scopes.append((name, home))
    except Exception:
        logger.exception("could not resolve the profiles to watch; watching the root store only")
        return [(None, None)]
    return scopes


def _open_profile_store(home: Path) -> AsyncSessionDB:
    """The profile's ``home/state.db``, opened once per process (blocking: call off the loop)."""
    key = home.expanduser().resolve()
    with _profile_stores_lock:
        store = _profile_stores.get(key)
        if store is None:
            store = _profile_stores[key] = AsyncSessionDB(SessionDB(key / "state.db"))
        return store


class _AbsentProfileStore:
    """The store of a profile that has no database yet: nothing to reclaim, list or claim.

    Watching a profile must not create its home or its ``state.db``; the first session the
    profile records creates them.
    """

    async def reclaim_stale_running_handoffs(self, _error: str) -> list[str]:
        return []

    async def reclaim_expired_handoffs(self, _error: str) -> list[str]:
        return []

    async def renew_handoff_leases(self, _session_ids: list[str]) -> list[str]:
        return []

    async def list_pending_handoffs(self) -> list[Row]:
        return []


def _profile_store_if_present(home: Path) -> Any:
    if not (home.expanduser() / "state.db").exists():
        return _AbsentProfileStore()
    return _open_profile_store(home)


@contextlib.asynccontextmanager
async def _async_profile_runtime_scope(home: Path) -> AsyncIterator[None]:
    """Inside this scope ``runner._session_db`` is the profile's own store."""
    store = await asyncio.to_thread(_profile_store_if_present, home)
    token = _scoped_store.set(store)
    try:
        yield
    finally:
        _scoped_store.reset(token)


def _profile_has_pending(home: Path) -> bool:
    """The idle gate's probe (blocking). A profile without a database has nothing pending."""
    if not (home.expanduser() / "state.db").exists():
        return False
    store = _open_profile_store(home).wrapped
    return bool(store.has_pending_handoffs())  # type: ignore[attr-defined]


async def _scope_is_busy(home: Path) -> bool:
    """Whether the tick should enter a profile's scope; fails open, so a probe error polls."""
    try:
        return await asyncio.to_thread(_profile_has_pending, home)
    except Exception:
        logger.warning("pending probe of profile %s failed; polling it anyway", home, exc_info=True)
        return True


def _enter_scope(home: Path | None) -> contextlib.AbstractAsyncContextManager[Any]:
    if home is None:
        return contextlib.nullcontext()
    scope: contextlib.AbstractAsyncContextManager[Any] = _async_profile_runtime_scope(home)
    return scope


async def _resolve_scopes(runner: Any) -> list[Scope]:
    run_in_executor = getattr(runner, "_run_in_executor_with_context", None)
    if run_in_executor is None:
        return list(_handoff_watch_scopes(runner))
    try:
        return list(await run_in_executor(_handoff_watch_scopes, runner))
    except Exception:
        logger.exception("could not resolve the profiles to watch; watching the root store only")
        return [(None, None)]


def _accepts_profile(process: Callable[..., Any]) -> bool:
    """True when ``_process_handoff`` takes (row, profile_name), False for (row) alone."""
    try:
        parameters = inspect.signature(process).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = 0
    for parameter in parameters:
        if parameter.kind is parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


async def _reclaim_stranded(runner: Any, scopes: list[Scope]) -> None:
    """Startup: in each scope, fail the rows a previous life of this gateway left running."""
    for profile_name, home in scopes:
        try:
            async with _enter_scope(home):
                reclaim = getattr(runner._session_db, "reclaim_stale_running_handoffs", None)
                if reclaim is None:
                    continue
                reclaimed = await reclaim(RECLAIM_MESSAGE)
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


async def _deliver(runner: Any, db: Any, row: Row, profile_name: str | None) -> None:
    """One dispatch: run the handler, then complete the row or fail it with the error's text.

    A cancelled delivery leaves the row ``running``: whether it arrived is unknown, so the
    next start's reclaim fails it with the retry hint instead of risking a double delivery.
    """
    session_id = row["id"]
    process = runner._process_handoff
    started = time.monotonic()  # metrics (issue 14)
    try:
        if _accepts_profile(process):
            await process(row, profile_name)
        else:
            await process(row)
    except asyncio.CancelledError:
        logger.warning("delivery of %s cancelled; it stays running until reclaimed", session_id)
        _metric(runner, "delivered", "cancelled", time.monotonic() - started)  # metrics (issue 14)
        raise
    except Exception as exc:
        error = str(exc) or type(exc).__name__
        logger.info("handoff %s failed: %s", session_id, error)
        recorded = await _record_outcome(db.fail_handoff(session_id, error), session_id, "failure")
        outcome = "failed" if recorded else "discarded"
        _metric(runner, "delivered", outcome, time.monotonic() - started)  # metrics (issue 14)
        return
    if await _record_outcome(db.complete_handoff(session_id), session_id, "completion"):
        logger.info("handoff %s completed", session_id)
        _metric(runner, "delivered", "completed", time.monotonic() - started)  # metrics (issue 14)
    else:
        _metric(runner, "delivered", "discarded", time.monotonic() - started)  # metrics (issue 14)


def _metric(runner: Any, name: str, *args: Any) -> None:
    """metrics (issue 14): report to the runner's ``WatcherMetrics`` when it has one."""
    metrics = getattr(runner, "_metrics", None)
    if metrics is not None:
        getattr(metrics, name)(*args)


async def _record_outcome(write: Awaitable[Any], session_id: str, what: str) -> bool:
    """Await the store's complete/fail; a fenced store answers False when the claim was lost."""
    try:
        recorded = await write
    except Exception:
        logger.exception(
            "could not record the %s of %s; it stays running until reclaimed", what, session_id
        )
        return False
    if recorded is False:
        logger.warning(
            "the %s of %s was discarded: its claim was reclaimed meanwhile "
            "(lease expired or gateway presumed dead)",
            what,
            session_id,
        )
        return False
    return True


@dataclass
class _ScopeState:
    """What the watcher remembers of one scope between ticks."""

    change_token: int | None = None
    backlog: bool = True  # rows may be pending that the last tick did not claim


async def _tick(
    runner: Any,
    profile_name: str | None,
    in_flight: dict[Any, asyncio.Task[None]],
    state: _ScopeState,
    limit: int | None,
) -> None:
    """One poll of the current scope's store: claim what is pending and dispatch each row.

    Claims no more rows than free delivery slots (``limit``), leaving the rest pending for
    other gateways. When the store offers a change token and nothing changed since a tick that
    left no backlog, the listing is skipped (the cheap idle poll on SQLite).
    """
    db = runner._session_db
    token_of = getattr(db, "handoff_change_token", None)
    if token_of is not None:
        token = await token_of()
        if token is not None and token == state.change_token and not state.backlog:
            return
        state.change_token = token
    # Until this tick's listing and claims succeed, assume rows are waiting: a tick that fails
    # half way must not leave the next ticks skipping on an unchanged token.
    state.backlog = True
    state.backlog = await _claim_pending(runner, db, profile_name, in_flight, limit)


async def _claim_pending(
    runner: Any,
    db: Any,
    profile_name: str | None,
    in_flight: dict[Any, asyncio.Task[None]],
    limit: int | None,
) -> bool:
    """Claim and dispatch what the listing offers; True when rows may be left waiting."""
    rows = await _pending_rows(db, limit)
    backlog = limit is not None and len(rows) >= limit  # the listing may have been cut short
    raced = False
    for row in rows:
        key = (profile_name, row["id"])
        if key in in_flight:
            # Pending again while its last delivery is still finishing (a re-request): look
            # at it again next tick even if nothing else changes in the database.
            backlog = True
            continue
        if limit is not None and len(in_flight) >= limit:
            backlog = True  # left for another gateway, or for a slot freeing up here
            break
        if not await db.claim_handoff(row["id"]):
            raced = True
            continue  # another gateway (or a waiter's fail) got there first
        logger.info(
            "claimed %s for %s (%s)", row["id"], row.get("handoff_platform"), profile_name or "root"
        )
        _metric(runner, "claimed", row)  # metrics (issue 14)
        task = asyncio.ensure_future(_deliver(runner, db, row, profile_name))
        in_flight[key] = task
        task.add_done_callback(functools.partial(_forget, runner, in_flight, key))
    if raced and backlog and limit is not None and len(in_flight) < limit:
        wakeup = getattr(runner, "_handoff_wakeup", None)
        if wakeup is not None:
            wakeup.set()  # lost races on a cut-short listing: list again now, not next interval
    return backlog


async def _pending_rows(db: Any, limit: int | None) -> list[Row]:
    """The pending rows a tick may claim, oldest first: at most ``limit`` when there is one.

    A tick claims at most ``limit - len(in_flight)`` rows and skips at most ``len(in_flight)``
    listed ones (re-requested while in flight), so ``limit`` rows are enough; listing the
    whole backlog every tick would cost O(pending) per claim, in a worker thread that holds
    the GIL while it builds the rows (the event loop's lag grows with the backlog). Stores
    without ``list_handoffs`` (the founding tests' stand-ins) list everything.
    """
    lister = getattr(db, "list_handoffs", None)
    if limit is None or lister is None:
        return list(await db.list_pending_handoffs())
    return list(await lister("pending", limit=limit))


def _forget(
    runner: Any, in_flight: dict[Any, asyncio.Task[None]], key: Any, _task: asyncio.Task[None]
) -> None:
    in_flight.pop(key, None)
    wakeup = getattr(runner, "_handoff_wakeup", None)
    if wakeup is not None:
        wakeup.set()  # a slot is free: a backlog can be claimed now, not an interval later


async def _pause(runner: Any, interval: float) -> None:
    """Between ticks: ``interval`` seconds, cut short by a wake-up when the runner has one."""
    wakeup = getattr(runner, "_handoff_wakeup", None)
    if wakeup is None:
        await asyncio.sleep(interval)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wakeup.wait(), interval)
    wakeup.clear()


def _start_lease_keeper(
    runner: Any, scopes: list[Scope], in_flight: dict[Any, asyncio.Task[None]]
) -> asyncio.Task[None] | None:
    """Lease upkeep every third of the root store's lease, when it has one."""
    lease = getattr(runner._session_db, "lease_seconds", None)
    if not isinstance(lease, int | float) or isinstance(lease, bool) or lease <= 0:
        return None
    return asyncio.ensure_future(_keep_leases(runner, scopes, in_flight, lease / 3))


async def _keep_leases(
    runner: Any, scopes: list[Scope], in_flight: dict[Any, asyncio.Task[None]], period: float
) -> None:
    """Every ``period`` s: renew the leases of rows in flight, and fail rows whose lease
    expired (their gateway stopped renewing: it died or hung), in every scope."""
    while True:
        await asyncio.sleep(period)
        for profile_name, home in scopes:
            held = [session_id for scope, session_id in list(in_flight) if scope == profile_name]
            try:
                async with _enter_scope(home):
                    await _upkeep(runner._session_db, held)
            except Exception:
                logger.warning(
                    "lease upkeep failed in %s", profile_name or "the root store", exc_info=True
                )


async def _upkeep(db: Any, held: list[str]) -> None:
    renew = getattr(db, "renew_handoff_leases", None)
    if held and renew is not None:
        renewed = set(await renew(held))
        for session_id in sorted(set(held) - renewed):
            logger.warning(
                "lost the lease of %s: another gateway may have reclaimed it; "
                "its outcome will be discarded",
                session_id,
            )
    reclaim = getattr(db, "reclaim_expired_handoffs", None)
    if reclaim is not None:
        for session_id in await reclaim(RECLAIM_MESSAGE):
            logger.info("reclaimed %s: its gateway's lease expired", session_id)


async def _drain(in_flight: dict[Any, asyncio.Task[None]], drain_timeout: float) -> None:
    """Stop: give in-flight deliveries ``drain_timeout`` seconds, then cancel the rest."""
    tasks = list(in_flight.values())
    if not tasks:
        return
    logger.info("waiting up to %gs for %d delivery(ies) in flight", drain_timeout, len(tasks))
    _done, pending = await asyncio.wait(tasks, timeout=drain_timeout)
    for task in pending:
        task.cancel()
    if pending:
        logger.warning(
            "cancelled %d delivery(ies) still running after %gs", len(pending), drain_timeout
        )
        await asyncio.gather(*pending, return_exceptions=True)


class GatewayRunner:
    """A gateway's handoff side: a root store, optional profiles, and a handler that delivers.

    ``GatewayRunner(store, handler)`` takes a store (``SessionDB``, ``AsyncSessionDB``,
    ``NativeAsyncSessionDB``), a path or a URL. ``await runner.run()`` serves until SIGINT or
    SIGTERM (or :meth:`stop`), then stops polling, drains in-flight deliveries and returns.
    """

    def __init__(
        self,
        store: Any = None,
        handler: Handler | None = None,
        *,
        profiles: Iterable[tuple[str, str | os.PathLike[str]]] = (),
        interval: float = 2.0,
        drain_timeout: float = 30.0,
        max_concurrency: int | None = DEFAULT_MAX_CONCURRENCY,
        metrics: Any = None,
    ) -> None:
        if handler is None:
            raise TypeError("GatewayRunner needs a handler: handler(row, profile_name)")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self._root_db = _as_awaitable_store(store)
        self._handler = handler
        self.config = GatewayConfig(tuple((name, Path(home)) for name, home in profiles))
        self.interval = interval
        self.drain_timeout = drain_timeout
        self._handoff_max_concurrency = max_concurrency
        self._handoff_wakeup = asyncio.Event()
        self._running: Any = False
        self._metrics = metrics  # metrics (issue 14): a hermes_state.metrics.WatcherMetrics

    @property
    def _session_db(self) -> Any:
        """The store of the current profile scope, else the root store."""
        scoped = _scoped_store.get()
        return scoped if scoped is not None else self._root_db

    async def _process_handoff(self, row: Row, profile_name: str | None = None) -> None:
        result = self._handler(row, profile_name)
        if inspect.isawaitable(result):
            await result

    async def _run_in_executor_with_context(self, func: Callable[..., Any], *args: Any) -> Any:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(None, context.run, func, *args)

    async def _handoff_watcher(self, interval: float = 2.0, drain_timeout: float = 30.0) -> None:
        """Reclaim stranded rows, then poll every ``interval`` s until ``_running`` is false."""
        scopes = await _resolve_scopes(self)
        await _reclaim_stranded(self, scopes)
        in_flight: dict[Any, asyncio.Task[None]] = {}
        states = {profile_name: _ScopeState() for profile_name, _home in scopes}
        limit = getattr(self, "_handoff_max_concurrency", None)
        keeper = _start_lease_keeper(self, scopes, in_flight)
        try:
            while self._running:
                tick_started = time.monotonic()  # metrics (issue 14)
                for profile_name, home in scopes:
                    if home is not None and not await _scope_is_busy(home):
                        continue
                    try:
                        async with _enter_scope(home):
                            await _tick(self, profile_name, in_flight, states[profile_name], limit)
                    except Exception:
                        logger.warning(
                            "poll of %s failed; retrying next tick",
                            profile_name or "the root store",
                            exc_info=True,
                        )
                _metric(self, "ticked", time.monotonic() - tick_started)  # metrics (issue 14)
                await _pause(self, interval)
        finally:
            await _drain(in_flight, drain_timeout)  # leases are still renewed while draining
            if keeper is not None:
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)

    def stop(self) -> None:
        """Stop polling; ``run`` then drains in-flight deliveries and returns."""
        self._running = False
        self._handoff_wakeup.set()

    async def run(self, *, ticks: int | None = None) -> None:
        """Serve until stopped (SIGINT/SIGTERM), or for ``ticks`` polls when given."""
        loop = asyncio.get_running_loop()
        self._running = _TickBudget(ticks) if ticks is not None else True
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
        LISTEN/NOTIFY when the root store is PostgreSQL. Returns the function that stops them."""
        url = getattr(self._root_db, "url", None)
        if not isinstance(url, URL):
            return _nothing_to_stop
        wakeup = self._handoff_wakeup

        def wake_from_any_thread() -> None:
            loop.call_soon_threadsafe(wakeup.set)

        unsubscribe = notify.subscribe(notify.database_key(url), wake_from_any_thread)
        listener = None
        if url.get_backend_name() == "postgresql":
            listener = asyncio.ensure_future(notify.PostgresListener(url, wakeup.set).run())

        async def stop() -> None:
            unsubscribe()
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)

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
        """Close the root store, when it can be closed."""
        close: Callable[[], Awaitable[Any]] | None = getattr(self._root_db, "close", None)
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


def _as_awaitable_store(store: Any) -> Any:
    if store is None or isinstance(store, str | os.PathLike):
        return AsyncSessionDB(SessionDB(store))
    if isinstance(store, SessionDB):
        return AsyncSessionDB(store)
    return store
