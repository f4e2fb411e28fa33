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
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from hermes_state import AsyncSessionDB, SessionDB
from hermes_state.repository import STRANDED_ERROR

__all__ = [
    "RECLAIM_MESSAGE",
    "GatewayConfig",
    "GatewayRunner",
    "Handler",
    "get_hermes_home",
]

logger = logging.getLogger(__name__)

RECLAIM_MESSAGE: Final = STRANDED_ERROR

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
    return Path(os.environ.get("HERMES_HOME") or "~/.hermes").expanduser()


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


@contextlib.asynccontextmanager
async def _async_profile_runtime_scope(home: Path) -> AsyncIterator[None]:
    """Inside this scope ``runner._session_db`` is the profile's own store."""
    store = await asyncio.to_thread(_open_profile_store, home)
    token = _scoped_store.set(store)
    try:
        yield
    finally:
        _scoped_store.reset(token)


def _profile_has_pending(home: Path) -> bool:
    """The idle gate's probe (blocking). A profile without a database has nothing pending."""
    if not (home / "state.db").exists():
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
    try:
        if _accepts_profile(process):
            await process(row, profile_name)
        else:
            await process(row)
    except asyncio.CancelledError:
        logger.warning("delivery of %s cancelled; it stays running until reclaimed", session_id)
        raise
    except Exception as exc:
        error = str(exc) or type(exc).__name__
        logger.info("handoff %s failed: %s", session_id, error)
        try:
            await db.fail_handoff(session_id, error)
        except Exception:
            logger.exception("could not record the failure of %s", session_id)
        return
    try:
        await db.complete_handoff(session_id)
    except Exception:
        logger.exception("could not record the completion of %s", session_id)
        return
    logger.info("handoff %s completed", session_id)


async def _tick(
    runner: Any, profile_name: str | None, in_flight: dict[Any, asyncio.Task[None]]
) -> None:
    """One poll of the current scope's store: claim what is pending and dispatch each row."""
    db = runner._session_db
    for row in await db.list_pending_handoffs():
        key = (profile_name, row["id"])
        if key in in_flight:
            continue
        if not await db.claim_handoff(row["id"]):
            continue  # another gateway (or a waiter's fail) got there first
        logger.info(
            "claimed %s for %s (%s)", row["id"], row.get("handoff_platform"), profile_name or "root"
        )
        task = asyncio.ensure_future(_deliver(runner, db, row, profile_name))
        in_flight[key] = task
        task.add_done_callback(functools.partial(_forget, in_flight, key))


def _forget(in_flight: dict[Any, asyncio.Task[None]], key: Any, _task: asyncio.Task[None]) -> None:
    in_flight.pop(key, None)


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
    ) -> None:
        if handler is None:
            raise TypeError("GatewayRunner needs a handler: handler(row, profile_name)")
        self._root_db = _as_awaitable_store(store)
        self._handler = handler
        self.config = GatewayConfig(tuple((name, Path(home)) for name, home in profiles))
        self.interval = interval
        self.drain_timeout = drain_timeout
        self._running: Any = False

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
        try:
            while self._running:
                for profile_name, home in scopes:
                    if home is not None and not await _scope_is_busy(home):
                        continue
                    try:
                        async with _enter_scope(home):
                            await _tick(self, profile_name, in_flight)
                    except Exception:
                        logger.warning(
                            "poll of %s failed; retrying next tick",
                            profile_name or "the root store",
                            exc_info=True,
                        )
                await asyncio.sleep(interval)
        finally:
            await _drain(in_flight, drain_timeout)

    def stop(self) -> None:
        """Stop polling; ``run`` then drains in-flight deliveries and returns."""
        self._running = False

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
        try:
            await GatewayRunner._handoff_watcher(self, interval, self.drain_timeout)
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        logger.info(
            "%s received: no new claims; draining deliveries in flight", signal.Signals(signum).name
        )
        self.stop()

    async def close(self) -> None:
        close: Callable[[], Awaitable[Any]] | None = getattr(self._root_db, "close", None)
        if close is not None:
            await close()


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
