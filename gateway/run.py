"""The gateway's handoff watcher: polls stores, claims pending rows, delivers each in its own task.

The watcher (:meth:`GatewayRunner._handoff_watcher`) needs only ``runner._session_db`` (an
awaitable store), ``runner._running`` (re-read every tick) and ``runner._process_handoff``.
Everything else it uses is a module-level name looked up when called, so a host process (or a
test) can replace any piece: ``asyncio``, ``_handoff_watch_scopes``,
``_async_profile_runtime_scope``, ``_multiplex_profile_homes``, ``get_hermes_home`` and
``_legacy_handoff_forbidden_by_writer_policy``. Optional pieces a runner (and a store) may
offer are used when present: see :class:`HandoffWatch`.

Guarantees: the event loop never waits on database or file I/O (stores are awaited, file work
runs in threads); one slow delivery never delays another (fire-and-forget tasks); a row is
never dispatched twice (claims are compare-and-swap, and in-flight rows are skipped); a row
left ``running`` by a dead gateway is failed at the next start with a hint to re-run
``/handoff``, never re-queued; a handoff never runs during a local turn of its conversation
(the durable turn lease), and a side task that keeps crashing stops the watcher loudly.
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
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy.engine import URL

from hermes_state import AsyncSessionDB, SessionDB, notify
from hermes_state.absent import AbsentStore
from hermes_state.engine import hermes_home
from hermes_state.errors import HermesStateError, SideTaskFailed
from hermes_state.plans import MAX_BATCH, STRANDED_ERROR, delivery_holder
from hermes_state.surface import AsyncStore

__all__ = [
    "DEFAULT_HEARTBEAT_SECONDS",
    "LEGACY_HANDOFF_ENV",
    "RECLAIM_MESSAGE",
    "GatewayConfig",
    "GatewayRunner",
    "Handler",
    "HandoffWatch",
    "ProfileStores",
    "SideTaskFailed",
    "default_owner",
    "get_hermes_home",
]

logger = logging.getLogger(__name__)

RECLAIM_MESSAGE: Final = STRANDED_ERROR
DEFAULT_MAX_CONCURRENCY: Final = 3
#: How often an idle watcher says, at INFO, that it is alive and what it watches.
DEFAULT_HEARTBEAT_SECONDS: Final = 180.0
#: How long the watcher's turn lease on a conversation lasts without a refresh (at most: a
#: store with a shorter claim lease shortens it, see :func:`_turn_seconds`); refreshed every
#: third of it while the delivery runs.
TURN_LEASE_SECONDS: Final = 60.0
#: A side task that crashes more often than this within :data:`RESTART_WINDOW` seconds stops
#: the watcher; below that it is restarted after :data:`RESTART_DELAY` seconds.
MAX_RESTARTS: Final = 5
RESTART_WINDOW: Final = 60.0
RESTART_DELAY: Final = 0.5
#: The writer-policy setting: ``off`` makes the legacy (polling) handoff path do nothing.
LEGACY_HANDOFF_ENV: Final = "HERMES_STATE_LEGACY_HANDOFF"
_OFF: Final = frozenset({"off", "0", "false", "no", "disabled", "forbidden"})

Row = Mapping[str, Any]
#: What delivers a handoff: ``handler(row, profile_name)``, async or sync.
Handler = Callable[[Row, str | None], Any]
Scope = tuple[str | None, Path | None]
Key = tuple[str | None, str]  # (profile name, session id) of a delivery in flight
SideTask = Callable[[], Coroutine[Any, Any, None]]

# The store of the profile whose scope the current task runs in (None: the root store).
_scoped_store: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "hermes_profile_store", default=None
)
# The profile stores of the watcher the current task belongs to (None: outside a watcher).
_active_profile_stores: contextvars.ContextVar[ProfileStores | None] = contextvars.ContextVar(
    "hermes_profile_stores", default=None
)


def get_hermes_home() -> Path:
    """The launch home: ``$HERMES_HOME``, defaulting to ``~/.hermes``."""
    return hermes_home()


def default_owner() -> str:
    """A gateway identity stable across restarts: host name and launch home.

    A restarted gateway recognises its previous life's claims by it and reclaims them at once
    instead of waiting for their leases to expire.
    """
    return f"{socket.gethostname()}:{get_hermes_home().resolve()}"


def _legacy_handoff_forbidden_by_writer_policy() -> bool:
    """True when the deployment's writer policy turns the legacy handoff path off.

    Set ``HERMES_STATE_LEGACY_HANDOFF=off`` where another writer owns handoffs: the watcher
    then claims nothing, and ``GatewayRunner._process_handoff`` refuses to deliver.
    """
    return os.environ.get(LEGACY_HANDOFF_ENV, "").strip().lower() in _OFF


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


class ProfileStores:
    """The stores of the profiles a runner serves: each opened once, all closed together.

    Methods block (they open files): call them off the event loop. The module's ``SessionDB``
    is looked up when a store is opened, so a host (or a test) can replace it.
    """

    def __init__(self) -> None:
        self._stores: dict[Path, AsyncSessionDB] = {}
        self._lock = threading.Lock()
        self._closed = False

    def open(self, home: Path) -> AsyncSessionDB:
        key = home.expanduser().resolve()
        with self._lock:
            if self._closed:
                raise HermesStateError("the gateway's profile stores are closed")
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = AsyncSessionDB(SessionDB(key / "state.db"))
            return store

    def if_present(self, home: Path) -> AsyncStore:
        """The profile's store; when it has no database yet, the store of an empty one that
        creates nothing (watching a profile must not create its home or its ``state.db``: the
        first session the profile records does)."""
        path = home.expanduser() / "state.db"
        if not path.exists():
            return AbsentStore(path)
        return self.open(home)

    def has_pending(self, home: Path) -> bool:
        """The idle gate's probe; raises when it cannot tell (no database, a database error)."""
        if not (home.expanduser() / "state.db").exists():
            raise FileNotFoundError(f"{home} has no state.db yet")
        store = self.open(home).wrapped
        return bool(store.has_pending_handoffs())  # type: ignore[attr-defined]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            with contextlib.suppress(Exception):
                store.wrapped.close()  # type: ignore[attr-defined]


def _current_profile_stores() -> ProfileStores:
    stores = _active_profile_stores.get()
    if stores is None:
        raise RuntimeError("profile scopes are entered by a running watcher only")
    return stores


@contextlib.asynccontextmanager
async def _async_profile_runtime_scope(home: Path) -> AsyncIterator[None]:
    """Inside this scope ``runner._session_db`` is the profile's own store."""
    store = await asyncio.to_thread(_current_profile_stores().if_present, home)
    token = _scoped_store.set(store)
    try:
        yield
    finally:
        _scoped_store.reset(token)


def _enter_scope(home: Path | None) -> contextlib.AbstractAsyncContextManager[Any]:
    if home is None:
        return contextlib.nullcontext()
    scope: contextlib.AbstractAsyncContextManager[Any] = _async_profile_runtime_scope(home)
    return scope


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


def _turn_seconds(db: Any) -> float:
    """How long a delivery's turn lease lasts: :data:`TURN_LEASE_SECONDS`, or the store's claim
    lease when that is shorter, so that the conversations of a gateway that died are free
    again by the time its rows are reclaimed (a re-request is not kept waiting for a lease
    nobody renews)."""
    lease = getattr(db, "lease_seconds", None)
    if isinstance(lease, int | float) and not isinstance(lease, bool) and lease > 0:
        return min(TURN_LEASE_SECONDS, float(lease))
    return TURN_LEASE_SECONDS


def _turn_holder(db: Any) -> str:
    """Whom the watcher's turn leases name: its gateway's owner when the store has one, so a
    restarted gateway takes its dead previous life's leases back at once (as it reclaims its
    claims), else this process."""
    owner = getattr(db, "owner", None)
    if isinstance(owner, str) and owner:
        return owner
    return f"{socket.gethostname()}:pid={os.getpid()}:{uuid.uuid4().hex[:8]}"


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _nap(seconds: float) -> None:
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


def _discarded(what: str, session_id: str) -> None:
    logger.warning(
        "the %s of %s was discarded: its claim was reclaimed meanwhile "
        "(lease expired or gateway presumed dead)",
        what,
        session_id,
    )


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
        _discarded(what, session_id)
        return False
    return True


def _reported(session_id: str, error: str | None, recorded: bool | None) -> str:
    """Say how a batched delivery ended, once its flush returned (the flush logged the
    completions it committed, one line for all); its metrics label."""
    if recorded is None:
        return "discarded"  # not recorded: the flusher said why
    if recorded is False:
        _discarded("completion" if error is None else "failure", session_id)
        return "discarded"
    return "completed" if error is None else "failed"


@dataclass
class _ScopeState:
    """What the watcher remembers of one scope between ticks."""

    change_token: int | None = None
    tokenless: bool = False  # its store answered None: a server, which has no change token
    backlog: bool = True  # rows may be pending that the last tick did not claim
    listed: int = 0  # pending rows the last listing returned (for the heartbeat)


@dataclass
class _Turn:
    """A conversation whose turn lease the watcher holds while it delivers (named for the
    delivery's holder, :func:`~hermes_state.plans.delivery_holder`)."""

    home: Path | None
    session_id: str
    holder: str


@dataclass
class _Claimed:
    """What a claimed row's delivery must give back on every path."""

    key: Key
    home: Path | None
    reservation: Any = None
    turn: _Turn | None = None  # the turn lease it holds (its entry in HandoffWatch.turns)


def _offers_batches(db: Any) -> bool:
    """Whether a store claims and finishes many rows per call (every store of this package);
    the watcher falls back to one row per call for stores without (duck-typed stand-ins)."""
    return (
        getattr(db, "claim_handoffs", None) is not None
        and getattr(db, "finish_handoffs", None) is not None
    )


@dataclass
class _Finish:
    """A delivery's outcome waiting for the flush that records it (``error`` None: it
    completed), or (``release_only``) a cancelled delivery's turn lease to give back."""

    db: Any
    claimed: _Claimed
    error: str | None
    release_only: bool
    recorded: asyncio.Future[bool | None]


class _Flusher:
    """Records the outcomes of deliveries that ended close together in one store call.

    A group commit: an outcome handed in while no flush runs is flushed at the next turn of the
    event loop; those handed in while one runs go together in the next flush, started as soon
    as that one returns. One ``finish_handoffs`` per store per flush completes and fails the
    rows and gives up their turn leases. Each outcome's future resolves once its flush
    committed: True recorded, False discarded (the claim was lost), None not recorded (the
    store failed; the row stays running until reclaimed). ``close`` flushes what is queued.
    """

    def __init__(self, watch: HandoffWatch) -> None:
        self.watch = watch
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
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._run(), name="hermes-watcher:flush")

    def submit(self, db: Any, claimed: _Claimed, error: str | None) -> asyncio.Future[bool | None]:
        recorded: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self.queue.append(_Finish(db, claimed, error, False, recorded))
        self.ready.set()
        return recorded

    def give_back(self, db: Any, claimed: _Claimed) -> None:
        """Release a cancelled delivery's turn lease with the next flush (its row stays
        running, for the next start's reclaim)."""
        if claimed.turn:
            recorded: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
            self.queue.append(_Finish(db, claimed, None, True, recorded))
            self.ready.set()

    async def close(self) -> None:
        """Flush everything queued, then stop."""
        self.closing = True
        self.ready.set()
        if self.task is not None:
            await self.task
        await self._flush()  # what a flusher that never started (or crashed) left

    async def _run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            await self._flush()
            if self.closing and not self.queue:
                return

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
                await self._flush_group(now)

    async def _flush_group(self, now: list[_Finish]) -> None:
        async with self.lock:
            await self._flush_locked(now)

    async def _flush_locked(self, now: list[_Finish]) -> None:
        """One store call for ``now``; every future in it is resolved, whatever happens."""
        done: dict[str, bool] | None = None
        outcomes: dict[str, str | None] = {}
        try:
            outcomes = {f.claimed.key[1]: f.error for f in now if not f.release_only}
            releases = {f.claimed.key[1]: f.claimed.turn.holder for f in now if f.claimed.turn}
            done = await now[0].db.finish_handoffs(outcomes, release_turns=releases or None)
        except Exception:
            logger.exception(
                "could not record the outcome of %s; they stay running until reclaimed "
                "(and their turn leases expire by themselves)",
                ", ".join(sorted(outcomes)) or "no delivery",
            )
        else:
            completed = [sid for sid, error in outcomes.items() if error is None and done.get(sid)]
            if completed:
                logger.info("completed %d handoff(s): %s", len(completed), ", ".join(completed))
        finally:
            for finish in now:
                self.watch.drop_turn(finish.claimed)
                if not finish.release_only:
                    self.settled.add(finish.claimed.key)
                if not finish.recorded.done():
                    session_id = finish.claimed.key[1]
                    finish.recorded.set_result(None if done is None else done.get(session_id))


class HandoffWatch:
    """One run of the watcher, owning everything that run needs.

    It holds the deliveries in flight (keyed by profile and session id), the per-scope state,
    the concurrency limit, the wake-up event, the handler's calling convention (worked out
    once), the profile stores (the runner's, else its own) and the supervised side tasks.

    From the runner it needs ``_session_db``, ``_running`` and ``_process_handoff``; it uses,
    when present: ``_handoff_max_concurrency``, ``_handoff_wakeup``, ``_profile_stores``,
    ``_handoff_side_tasks`` (name -> coroutine function, supervised), ``_handoff_heartbeat``
    (seconds), ``_handoff_metrics`` (a ``WatcherMetrics``: claims, deliveries, ticks),
    ``_handoff_wants_document`` (deliver the row as claimed, with its transcript),
    ``_run_in_executor_with_context``, ``_reserve_handoff_source`` /
    ``_release_handoff_source_reservation``, and ``session_store`` with ``_is_session_running``
    (an in-process turn in progress). From stores, when present: the turn-lease methods,
    ``renew_handoff_leases``/``reclaim_expired_handoffs`` with ``lease_seconds``,
    ``handoff_change_token``, ``list_handoffs``, ``get_session`` and ``get_messages``.
    """

    def __init__(self, runner: Any, *, interval: float, drain_timeout: float) -> None:
        self.runner = runner
        self.interval = interval
        self.drain_timeout = drain_timeout
        self.limit: int | None = getattr(runner, "_handoff_max_concurrency", None)
        self.wakeup: asyncio.Event | None = getattr(runner, "_handoff_wakeup", None)
        process = runner._process_handoff
        self.process: Callable[..., Any] = process
        self.takes_profile = _accepts_profile(process)
        self.wants_document = bool(getattr(runner, "_handoff_wants_document", False))
        self.heartbeat: float = getattr(runner, "_handoff_heartbeat", DEFAULT_HEARTBEAT_SECONDS)
        self.metrics: Any = getattr(runner, "_handoff_metrics", None)
        self.holder = _turn_holder(getattr(runner, "_session_db", None))
        self.turn_seconds = _turn_seconds(getattr(runner, "_session_db", None))
        self.in_flight: dict[Key, asyncio.Task[None]] = {}
        self.turns: dict[Key, _Turn] = {}
        self.flusher = _Flusher(self)
        self.scopes: list[Scope] = []
        self.states: dict[str | None, _ScopeState] = {}
        self.side_tasks: dict[str, asyncio.Task[None]] = {}
        self.failure: BaseException | None = None
        self.reclaimed = False
        self.last_tick: float | None = None
        self.idle_logged = False
        runner_stores = getattr(runner, "_profile_stores", None)
        self._own_stores = not isinstance(runner_stores, ProfileStores)
        self.profile_stores: ProfileStores = (
            runner_stores if isinstance(runner_stores, ProfileStores) else ProfileStores()
        )

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reclaim, then poll every ``interval`` s until ``_running`` is false; then drain."""
        token = _active_profile_stores.set(self.profile_stores)
        try:
            self.scopes = await self._resolve_scopes()
            self.states = {profile_name: _ScopeState() for profile_name, _home in self.scopes}
            if not _legacy_handoff_forbidden_by_writer_policy():
                self.reclaimed = True
                await self._reclaim_stranded()
            self._start_side_tasks()
            self.flusher.start()
            try:
                while self.runner._running and self.failure is None:
                    await self._tick_all()
                    await self._pause()
            finally:
                await self._drain()  # leases are still renewed while draining
                await self._stop_side_tasks()
            if self.failure is not None:
                raise SideTaskFailed(f"the watcher stopped: {self.failure}") from self.failure
        finally:
            _active_profile_stores.reset(token)
            if self._own_stores:
                await asyncio.to_thread(self.profile_stores.close)

    async def _resolve_scopes(self) -> list[Scope]:
        run_in_executor = getattr(self.runner, "_run_in_executor_with_context", None)
        if run_in_executor is None:
            return list(_handoff_watch_scopes(self.runner))
        try:
            return list(await run_in_executor(_handoff_watch_scopes, self.runner))
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
            if self.metrics is not None:
                self.metrics.ticked(time.monotonic() - started)

    async def _tick_scopes(self) -> None:
        if _legacy_handoff_forbidden_by_writer_policy():
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
            await self._reclaim_stranded()
        for profile_name, home in self.scopes:
            if home is not None and not await self._scope_is_busy(home):
                continue
            try:
                async with _enter_scope(home):
                    await self._tick(profile_name, home)
            except Exception:
                logger.warning(
                    "poll of %s failed; retrying next tick",
                    profile_name or "the root store",
                    exc_info=True,
                )
        self.last_tick = time.monotonic()

    async def _reclaim_stranded(self) -> None:
        """In each scope, fail the rows a previous life of this gateway left running."""
        for profile_name, home in self.scopes:
            try:
                async with _enter_scope(home):
                    reclaim = getattr(
                        self.runner._session_db, "reclaim_stale_running_handoffs", None
                    )
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

    async def _scope_is_busy(self, home: Path) -> bool:
        """The idle gate: skip a profile only when its store says nothing is pending. One that
        cannot be probed (no database yet, an error) is polled inside its scope (fail open)."""
        try:
            return await asyncio.to_thread(self.profile_stores.has_pending, home)
        except Exception as exc:
            logger.debug("pending probe of profile %s failed (%s); polling it", home, exc)
            return True

    async def _pause(self) -> None:
        """Between ticks: ``interval`` seconds, cut short by a wake-up when the runner has one."""
        if self.wakeup is None or self.interval <= 0:  # no pause: one turn of the loop
            await asyncio.sleep(self.interval)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self.wakeup.wait()
        if self.wakeup is not None:
            self.wakeup.clear()

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup.set()

    # -- one tick of one scope ----------------------------------------------------------------

    async def _tick(self, profile_name: str | None, home: Path | None) -> None:
        """One poll of the current scope's store: claim what is pending and dispatch each row.

        Claims no more rows than free delivery slots, leaving the rest pending for other
        gateways. When the store offers a change token and nothing changed since a tick that
        left no backlog, the listing is skipped (the cheap idle poll on SQLite).
        """
        state = self.states.setdefault(profile_name, _ScopeState())
        db = self.runner._session_db
        token_of = None if state.tokenless else getattr(db, "handoff_change_token", None)
        if token_of is not None:
            token = await token_of()
            if token is not None and token == state.change_token and not state.backlog:
                return
            state.change_token = token
            state.tokenless = token is None
        # Until this tick's listing and claims succeed, assume rows are waiting: a tick that
        # fails half way must not leave the next ticks skipping on an unchanged token.
        state.backlog = True
        state.backlog = await self._claim_pending(db, profile_name, home, state)

    async def _claim_pending(
        self, db: Any, profile_name: str | None, home: Path | None, state: _ScopeState
    ) -> bool:
        """Claim and dispatch what the listing offers; True when rows may be left waiting."""
        if self._takes_oldest(db):
            return await self._claim_next(db, profile_name, home, state)
        rows = await self._pending_rows(db)
        state.listed = len(rows)
        limit = self.limit
        backlog = limit is not None and len(rows) >= limit  # the listing may have been cut short
        if _offers_batches(db):
            return await self._claim_listed(db, rows, profile_name, home, backlog)
        raced = False
        for row in rows:
            key: Key = (profile_name, row["id"])
            if key in self.in_flight:
                # Pending again while its last delivery is still finishing (a re-request):
                # look at it again next tick even if nothing else changes in the database.
                backlog = True
                continue
            if limit is not None and len(self.in_flight) >= limit:
                backlog = True  # left for another gateway, or for a slot freeing up here
                break
            if self._turn_in_progress(row["id"]):
                backlog = True  # a local turn of this session runs in this process: later
                continue
            outcome = await self._claim(db, row, key, home)
            if outcome is None:
                backlog = True  # its conversation's turn is taken: a later tick tries again
            elif outcome is False:
                raced = True  # another gateway (or a waiter's fail) got there first
        if raced and backlog and limit is not None and len(self.in_flight) < limit:
            self._wake()  # lost races on a cut-short listing: list again now, not next interval
        return backlog

    async def _claim_listed(
        self, db: Any, rows: list[Row], profile_name: str | None, home: Path | None, backlog: bool
    ) -> bool:
        """The batch path: the rows this tick may take, claimed with their turn leases in one
        store call, then dispatched; True when rows may be left waiting."""
        limit = self.limit
        candidates: list[Row] = []
        for row in rows:
            if (profile_name, row["id"]) in self.in_flight:
                backlog = True  # pending again while its last delivery is finishing
                continue
            if limit is not None and len(self.in_flight) + len(candidates) >= limit:
                backlog = True
                break
            if self._turn_in_progress(row["id"]):
                backlog = True
                continue
            candidates.append(row)
        raced = False
        for start in range(0, len(candidates), MAX_BATCH):
            held, lost = await self._claim_batch(
                db, candidates[start : start + MAX_BATCH], profile_name, home
            )
            backlog = backlog or held  # a conversation's turn is taken: a later tick tries again
            raced = raced or lost  # another gateway (or a waiter's fail) got there first
        if raced and backlog and (limit is None or len(self.in_flight) < limit):
            self._wake()  # lost races on a cut-short listing: list again now
        return backlog

    async def _claim_batch(
        self, db: Any, rows: list[Row], profile_name: str | None, home: Path | None
    ) -> tuple[bool, bool]:
        """Reserve the sources, claim the rows with their turn leases in one call, dispatch
        what was claimed. Says whether rows were left for their turn, and whether another
        claimer took some. A row not claimed gets its reservation back (no turn lease was
        taken for it)."""
        pending = {row["id"]: _Claimed((profile_name, row["id"]), home) for row in rows}
        reserve = getattr(self.runner, "_reserve_handoff_source", None)
        holders = None
        if getattr(db, "try_acquire_session_turn_lease", None) is not None:
            holders = {
                session_id: delivery_holder(self.holder, session_id) for session_id in pending
            }
        try:
            if reserve is not None:
                for session_id, claimed in pending.items():
                    claimed.reservation = await _maybe_await(reserve(session_id))
            if holders is None:
                batch = await db.claim_handoffs(list(pending))
            else:
                batch = await db.claim_handoffs(
                    list(pending), turn_holders=holders, turn_seconds=self.turn_seconds
                )
        except BaseException:
            for claimed in pending.values():
                await self._give_back(db, claimed)
            raise
        won: list[dict[str, Any]] = [row for row in batch.rows if row["id"] in pending]
        taken = {row["id"] for row in won}
        for session_id, claimed in pending.items():
            if session_id not in taken:
                await self._give_back(db, claimed)
        held = set(batch.turn_held) & pending.keys()
        await self._launch(db, won, pending, holders, profile_name)
        return bool(held), len(pending) - len(won) - len(held) > 0

    async def _claim_next(
        self, db: Any, profile_name: str | None, home: Path | None, state: _ScopeState
    ) -> bool:
        """The batch path without a listing: claim the oldest pending rows, as many as slots
        are free, with their turn leases, in one call (other gateways' rows are skipped, so
        gateways draining one backlog take disjoint rows); True when rows may be waiting."""
        limit = self.limit
        free = MAX_BATCH if limit is None else min(MAX_BATCH, limit - len(self.in_flight))
        if free <= 0:
            return True  # every slot is busy: look again once one frees up
        gateway = None
        if getattr(db, "try_acquire_session_turn_lease", None) is not None:
            gateway = self.holder
        # A row still in flight here can be pending again (an operator failed it and the
        # user asked again): it waits until its delivery ends.
        busy = [session_id for scope, session_id in self.in_flight if scope == profile_name]
        batch = await db.claim_next_handoffs(
            free, exclude=busy, turn_gateway=gateway, turn_seconds=self.turn_seconds
        )
        state.listed = len(batch.rows) + len(batch.turn_held)
        claims = {row["id"]: _Claimed((profile_name, row["id"]), home) for row in batch.rows}
        holders = None
        if gateway is not None:
            holders = {session_id: delivery_holder(gateway, session_id) for session_id in claims}
        await self._launch(db, batch.rows, claims, holders, profile_name)
        full = state.listed >= free
        if full and (limit is None or len(self.in_flight) < limit):
            self._wake()  # a full batch and slots to spare: claim more now
        return full or bool(batch.turn_held) or bool(busy)

    def _takes_oldest(self, db: Any) -> bool:
        """Whether a tick may claim the oldest pending rows without listing them first: the
        store can, and the runner neither checks turns in-process nor reserves sources (both
        need the ids before the claim)."""
        runner = self.runner
        return (
            getattr(db, "claim_next_handoffs", None) is not None
            and getattr(db, "finish_handoffs", None) is not None
            and getattr(runner, "_is_session_running", None) is None
            and getattr(runner, "_reserve_handoff_source", None) is None
        )

    async def _launch(
        self,
        db: Any,
        rows: list[dict[str, Any]],
        claims: dict[str, _Claimed],
        holders: dict[str, str] | None,
        profile_name: str | None,
    ) -> None:
        """Dispatch the rows a batch claim won: each its own task, with its transcript when
        the runner wants documents (read for all in one call)."""
        if not rows:
            return
        logger.info(
            "claimed %d handoff(s) in %s: %s",
            len(rows),
            profile_name or "root",
            ", ".join(f"{row['id']} ({row.get('handoff_platform')})" for row in rows),
        )
        for row in rows:
            if holders is not None:
                self.hold_turn(claims[row["id"]], holders[row["id"]])
            if self.metrics is not None:
                self.metrics.claimed(row)
        try:
            documents = await self._documents(db, rows) if self.wants_document else rows
        except Exception as exc:
            failed = sorted(row["id"] for row in rows)
            logger.exception("could not read the transcripts of %s; failing them", failed)
            error = f"the gateway could not start the delivery: {exc}"
            for row in rows:
                claimed = claims[row["id"]]
                self._track(claimed, self._fail_undelivered(db, claimed, error))
            return
        for document in documents:
            self._start(db, document, claims[document["id"]])

    async def _documents(self, db: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows as claimed, each with its transcript: one read for all when the store can."""
        many = getattr(db, "get_transcripts", None)
        if many is None:
            return [await self._document(db, row) for row in rows]
        transcripts = await many([row["id"] for row in rows])
        for row in rows:  # the claim's own rows: filled in place
            row["messages"] = list(transcripts.get(row["id"], []))
        return rows

    def _start(self, db: Any, document: dict[str, Any], claimed: _Claimed) -> None:
        """Start one batched delivery as its own task. One that cannot start is failed, by a
        task that holds its slot until the failure is recorded."""
        delivery = self._deliver_batched(db, document, claimed)
        try:
            task = asyncio.ensure_future(delivery)
        except Exception as exc:
            delivery.close()
            logger.exception("could not start the delivery of %s; failing it", claimed.key[1])
            error = f"the gateway could not start the delivery: {exc}"
            self._track(claimed, self._fail_undelivered(db, claimed, error))
            return
        self.in_flight[claimed.key] = task
        task.add_done_callback(functools.partial(self._forget, claimed.key))

    def _track(self, claimed: _Claimed, failing: Coroutine[Any, Any, None]) -> None:
        """Hold a claimed row's slot while its failure is recorded, as a delivery would."""
        task = asyncio.get_running_loop().create_task(failing)
        self.in_flight[claimed.key] = task
        task.add_done_callback(functools.partial(self._forget, claimed.key))

    async def _fail_undelivered(self, db: Any, claimed: _Claimed, error: str) -> None:
        """Fail a claimed row whose delivery never started, through the flusher."""
        try:
            recorded = await self.flusher.submit(db, claimed, error)
            if recorded is False:
                _discarded("failure", claimed.key[1])
        finally:
            await self._give_back(db, claimed)

    async def _deliver_batched(self, db: Any, row: Row, claimed: _Claimed) -> None:
        """One batched delivery: run the handler, hand its outcome to the flusher and wait
        for the flush to commit it; only then is it reported (log, metrics, slot freed).

        A cancelled handler leaves the row ``running`` (for the next start's reclaim) and its
        turn lease is given back with the next flush; a cancel while the outcome waits for its
        flush does not withdraw it. The source reservation is given back on every path.
        """
        session_id = row["id"]
        started = time.monotonic()
        outcome = "cancelled"
        submitted = False
        try:
            error: str | None = None
            try:
                await self._handler(row, claimed.key[0])
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
            await self._release_reservation(claimed)
            if self.metrics is not None:
                self.metrics.delivered(outcome, time.monotonic() - started)

    async def _pending_rows(self, db: Any) -> list[Row]:
        """The pending rows a tick may claim, oldest first: at most ``limit`` when there is one.

        A tick claims at most ``limit - len(in_flight)`` rows and skips at most
        ``len(in_flight)`` listed ones (re-requested while in flight), so ``limit`` rows are
        enough; listing the whole backlog every tick would cost O(pending) per claim. Stores
        without ``list_handoffs`` (the founding tests' stand-ins) list everything.
        """
        lister = getattr(db, "list_handoffs", None)
        if self.limit is None or lister is None:
            return list(await db.list_pending_handoffs())
        return list(await lister("pending", limit=self.limit))

    def _turn_in_progress(self, session_id: str) -> bool:
        """Whether the host runs a turn of this session right now (an in-process check)."""
        is_running = getattr(self.runner, "_is_session_running", None)
        sessions = getattr(self.runner, "session_store", None)
        if is_running is None or sessions is None:
            return False
        try:
            entry = sessions.lookup_by_session_id(session_id)
            return entry is not None and bool(is_running(entry.session_key))
        except Exception:
            logger.debug("could not tell whether %s has a turn running", session_id, exc_info=True)
            return False

    async def _claim(self, db: Any, row: Row, key: Key, home: Path | None) -> bool | None:
        """Reserve the source, take the turn lease, claim, dispatch. True: dispatched; False:
        lost the claim; None: the conversation's turn is held elsewhere. Whatever this took is
        given back on every path that does not end in a running delivery."""
        session_id = row["id"]
        claimed = _Claimed(key, home)
        reserve = getattr(self.runner, "_reserve_handoff_source", None)
        if reserve is not None:
            claimed.reservation = await _maybe_await(reserve(session_id))
        try:
            acquire = getattr(db, "try_acquire_session_turn_lease", None)
            if acquire is not None:
                holder = delivery_holder(self.holder, session_id)
                if not await acquire(session_id, holder, ttl_seconds=self.turn_seconds):
                    logger.debug("%s: its conversation's turn is taken; later", session_id)
                    await self._give_back(db, claimed)
                    return None
                self.hold_turn(claimed, holder)
            won = bool(await db.claim_handoff(session_id))
        except BaseException:
            await self._give_back(db, claimed)
            raise
        if not won:
            await self._give_back(db, claimed)
            return False
        logger.info(
            "claimed %s for %s (%s)", session_id, row.get("handoff_platform"), key[0] or "root"
        )
        if self.metrics is not None:
            self.metrics.claimed(row)
        await self._dispatch(db, row, claimed)
        return True

    async def _dispatch(self, db: Any, row: Row, claimed: _Claimed) -> None:
        """Start the delivery task; a row that cannot be started is failed, not left running."""
        session_id = row["id"]
        delivery: Coroutine[Any, Any, None] | None = None
        try:
            document = await self._document(db, row) if self.wants_document else row
            delivery = self._deliver(db, document, claimed)
            task = asyncio.ensure_future(delivery)
        except Exception as exc:
            if delivery is not None:
                delivery.close()
            logger.exception("could not start the delivery of %s; failing it", session_id)
            error = f"the gateway could not start the delivery: {exc}"
            await _record_outcome(db.fail_handoff(session_id, error), session_id, "failure")
            await self._give_back(db, claimed)
            return
        self.in_flight[claimed.key] = task
        task.add_done_callback(functools.partial(self._forget, claimed.key))

    async def _document(self, db: Any, row: Row) -> dict[str, Any]:
        """The row as claimed (state running, owner, attempt, lease) and its transcript."""
        session_id = row["id"]
        get_session = getattr(db, "get_session", None)
        claimed = await get_session(session_id) if get_session is not None else None
        document = dict(claimed if claimed is not None else row)
        get_messages = getattr(db, "get_messages", None)
        document["messages"] = list(await get_messages(session_id)) if get_messages else []
        return document

    def _forget(self, key: Key, task: asyncio.Task[None]) -> None:
        if self.in_flight.get(key) is task:
            del self.in_flight[key]
            self.flusher.settled.discard(key)
        self._wake()  # a slot is free: a backlog can be claimed now, not an interval later

    async def _give_back(self, db: Any, claimed: _Claimed) -> None:
        """Release the turn lease and the source reservation; never raises."""
        await self._release_turn(db, claimed)
        await self._release_reservation(claimed)

    def hold_turn(self, claimed: _Claimed, holder: str) -> None:
        """Note that ``claimed``'s delivery holds its conversation's turn lease for ``holder``."""
        claimed.turn = _Turn(claimed.home, claimed.key[1], holder)
        self.turns[claimed.key] = claimed.turn

    def drop_turn(self, claimed: _Claimed) -> _Turn | None:
        """Forget ``claimed``'s turn lease (given back, or left to expire); the one it held."""
        turn, claimed.turn = claimed.turn, None
        if turn is not None and self.turns.get(claimed.key) is turn:
            del self.turns[claimed.key]
        return turn

    async def _release_turn(self, db: Any, claimed: _Claimed) -> None:
        turn = self.drop_turn(claimed)
        if turn is not None:
            release = getattr(db, "release_session_turn_lease", None)
            if release is not None:
                try:
                    await release(claimed.key[1], turn.holder)
                except Exception:
                    logger.warning(
                        "could not release the turn lease of %s; it expires by itself",
                        claimed.key[1],
                        exc_info=True,
                    )

    async def _release_reservation(self, claimed: _Claimed) -> None:
        if claimed.reservation is not None:
            value, claimed.reservation = claimed.reservation, None
            try:
                await _maybe_await(self.runner._release_handoff_source_reservation(value))
            except Exception:
                logger.warning(
                    "could not release the source reservation of %s", claimed.key[1], exc_info=True
                )

    async def _deliver(self, db: Any, row: Row, claimed: _Claimed) -> None:
        """One dispatch: run the handler, then complete the row or fail it with the error.

        A cancelled delivery leaves the row ``running``: whether it arrived is unknown, so the
        next start's reclaim fails it with the retry hint instead of risking a double delivery.
        The turn lease and the source reservation are given back on every path.
        """
        try:
            await self._handle(db, row, claimed)
        finally:
            await self._give_back(db, claimed)

    async def _handle(self, db: Any, row: Row, claimed: _Claimed) -> None:
        started = time.monotonic()
        outcome = "cancelled"  # unless _outcome returns
        try:
            outcome = await self._outcome(db, row, claimed)
        finally:
            if self.metrics is not None:
                self.metrics.delivered(outcome, time.monotonic() - started)

    async def _handler(self, row: Row, profile_name: str | None) -> None:
        """The runner's ``_process_handoff``, called the way it takes its arguments."""
        if self.takes_profile:
            await self.process(row, profile_name)
        else:
            await self.process(row)

    async def _outcome(self, db: Any, row: Row, claimed: _Claimed) -> str:
        """Run the handler and record its result; says how the delivery ended (the metrics'
        outcome label): completed, failed, discarded (the claim was lost) or cancelled."""
        session_id = row["id"]
        try:
            await self._handler(row, claimed.key[0])
        except asyncio.CancelledError:
            logger.warning("delivery of %s cancelled; it stays running until reclaimed", session_id)
            raise
        except Exception as exc:
            error = str(exc) or type(exc).__name__
            logger.info("handoff %s failed: %s", session_id, error)
            failure = db.fail_handoff(session_id, error)
            return (
                "failed" if await _record_outcome(failure, session_id, "failure") else "discarded"
            )
        if await _record_outcome(db.complete_handoff(session_id), session_id, "completion"):
            logger.info("handoff %s completed", session_id)
            return "completed"
        return "discarded"

    async def _drain(self) -> None:
        """Stop: give in-flight deliveries ``drain_timeout`` seconds, then cancel the rest;
        then flush the outcomes (and turn leases to give back) still queued."""
        try:
            await self._wait_for_deliveries()
        finally:
            await self.flusher.close()

    async def _wait_for_deliveries(self) -> None:
        tasks = list(self.in_flight.values())
        if not tasks:
            return
        logger.info(
            "waiting up to %gs for %d delivery(ies) in flight", self.drain_timeout, len(tasks)
        )
        _done, pending = await asyncio.wait(tasks, timeout=self.drain_timeout)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning(
                "cancelled %d delivery(ies) still running after %gs",
                len(pending),
                self.drain_timeout,
            )
            await asyncio.gather(*pending, return_exceptions=True)

    # -- side tasks ---------------------------------------------------------------------------

    def _start_side_tasks(self) -> None:
        side: dict[str, SideTask] = {
            "turn-lease-keeper": self._keep_turns,
            "heartbeat": self._beat,
        }
        lease = getattr(self.runner._session_db, "lease_seconds", None)
        if isinstance(lease, int | float) and not isinstance(lease, bool) and lease > 0:
            side["handoff-lease-keeper"] = functools.partial(self._keep_leases, lease / 3)
        side.update(getattr(self.runner, "_handoff_side_tasks", None) or {})
        for name, factory in side.items():
            self.side_tasks[name] = asyncio.get_running_loop().create_task(
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
        crashes more than :data:`MAX_RESTARTS` times within :data:`RESTART_WINDOW` seconds."""
        crashes: list[float] = []
        while True:
            try:
                await factory()
                return  # finished its work: nothing to supervise
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                now = time.monotonic()
                crashes = [at for at in crashes if now - at < RESTART_WINDOW] + [now]
                if len(crashes) > MAX_RESTARTS:
                    logger.critical(
                        "side task %s crashed %d times within %gs; stopping the watcher",
                        name,
                        len(crashes),
                        RESTART_WINDOW,
                        exc_info=True,
                    )
                    self.failure = RuntimeError(f"side task {name} keeps crashing: {exc!r}")
                    self._wake()
                    return
                logger.error("side task %s crashed; restarting it", name, exc_info=True)
                await _nap(RESTART_DELAY)

    async def _keep_leases(self, period: float) -> None:
        """Every ``period`` s: renew the leases of rows in flight, and fail rows whose lease
        expired (their gateway stopped renewing: it died or hung), in every scope."""
        while True:
            await _nap(period)
            for profile_name, home in self.scopes:
                try:
                    async with _enter_scope(home):
                        await self._upkeep(self.runner._session_db, profile_name)
                except Exception:
                    logger.warning(
                        "lease upkeep failed in %s", profile_name or "the root store", exc_info=True
                    )

    def _unsettled(self, profile_name: str | None) -> list[str]:
        """The rows of a scope in flight whose outcome no flush has settled yet."""
        settled = self.flusher.settled
        return [key[1] for key in self.in_flight if key[0] == profile_name and key not in settled]

    async def _upkeep(self, db: Any, profile_name: str | None) -> None:
        renew = getattr(db, "renew_handoff_leases", None)
        held: list[str] = []
        renewed: set[str] = set()
        if renew is not None:
            async with self.flusher.lock:  # wholly before a flush, or wholly after it
                held = self._unsettled(profile_name)
                if held:
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

    async def _keep_turns(self) -> None:
        """Refresh the turn leases of deliveries in flight, a third of their life apart: one
        call per store for all it holds, where the store can."""
        while True:
            await _nap(self.turn_seconds / 3)
            by_home: dict[Path | None, dict[Key, _Turn]] = {}
            for key, turn in list(self.turns.items()):
                by_home.setdefault(turn.home, {})[key] = turn
            for home, turns in by_home.items():
                try:
                    async with _enter_scope(home), self.flusher.lock:
                        # A flush that gave a lease back meanwhile dropped it from the table.
                        turns = {k: t for k, t in turns.items() if self.turns.get(k) is t}
                        lost = await self._refresh_turns(self.runner._session_db, turns)
                except Exception:
                    logger.warning(
                        "could not refresh the turn leases of %s",
                        ", ".join(sorted(turn.session_id for turn in turns.values())),
                        exc_info=True,
                    )
                    continue
                for key in lost:
                    if key in self.turns:
                        logger.warning(
                            "lost the turn lease of %s while delivering it: a local turn may start",
                            key[1],
                        )

    async def _refresh_turns(self, db: Any, turns: dict[Key, _Turn]) -> list[Key]:
        """Refresh ``turns`` in ``db``; the keys whose lease another holder has now."""
        many = getattr(db, "refresh_session_turn_leases", None)
        if many is not None:
            holders = {turn.session_id: turn.holder for turn in turns.values()}
            kept = set(await many(holders, ttl_seconds=self.turn_seconds))
            return [key for key, turn in turns.items() if turn.session_id not in kept]
        refresh = getattr(db, "refresh_session_turn_lease", None)
        if refresh is None:
            return []
        lost = []
        for key, turn in turns.items():
            try:
                kept_one = await refresh(
                    turn.session_id, turn.holder, ttl_seconds=self.turn_seconds
                )
            except Exception:
                logger.warning("could not refresh the turn lease of %s", key[1], exc_info=True)
                continue
            if kept_one is False:
                lost.append(key)
        return lost

    async def _beat(self) -> None:
        """At INFO, every ``heartbeat`` s: scopes, pending rows, deliveries in flight, last tick."""
        while True:
            await _nap(self.heartbeat)
            logger.info("%s", self.describe())

    def describe(self) -> str:
        ago = "never" if self.last_tick is None else f"{time.monotonic() - self.last_tick:.1f}s ago"
        pending = sum(state.listed for state in self.states.values())
        return (
            f"watcher alive: {len(self.scopes)} scope(s), {pending} pending at last look, "
            f"{len(self.in_flight)} in flight, last tick {ago}"
        )


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
        store: Any = None,
        handler: Handler | None = None,
        *,
        profiles: Iterable[tuple[str, str | os.PathLike[str]]] = (),
        interval: float = 2.0,
        drain_timeout: float = 30.0,
        max_concurrency: int | None = DEFAULT_MAX_CONCURRENCY,
        heartbeat: float = DEFAULT_HEARTBEAT_SECONDS,
        metrics: Any = None,
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
        self._running: Any = False

    @property
    def _session_db(self) -> Any:
        """The store of the current profile scope, else the root store."""
        scoped = _scoped_store.get()
        return scoped if scoped is not None else self._root_db

    async def _process_handoff(self, row: Row, profile_name: str | None = None) -> None:
        if _legacy_handoff_forbidden_by_writer_policy():
            raise RuntimeError(
                f"legacy handoff is disabled by the writer policy ({LEGACY_HANDOFF_ENV}); "
                "the handoff was not delivered"
            )
        result = self._handler(row, profile_name)
        if inspect.isawaitable(result):
            await result

    async def _run_in_executor_with_context(self, func: Callable[..., Any], *args: Any) -> Any:
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
        url = getattr(self._root_db, "url", None)
        if not isinstance(url, URL):
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
