"""The one place that reads the runner and its stores with getattr, into typed values."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from ..surface import AsyncStore

__all__ = [
    "Host",
    "Metrics",
    "Row",
    "RunInExecutor",
    "Runner",
    "SessionLookup",
    "SideTask",
    "StoreOffers",
    "closer_of",
    "config_of",
    "configured_profiles",
    "store_offers",
    "url_of",
]

T = TypeVar("T")

Row = Mapping[str, Any]
#: A side task the watcher supervises: a coroutine function, restarted when it crashes.
SideTask = Callable[[], Awaitable[None]]


class Runner(Protocol):
    """What the watcher requires of its runner; :class:`Host` reads the optional rest."""

    #: Truthiness re-read every tick: false stops the watch.
    _running: object

    @property
    def _session_db(self) -> AsyncStore:
        """The store of the current profile scope (the root store outside any)."""
        ...


class RunInExecutor(Protocol):
    """A runner's ``_run_in_executor_with_context``: ``func(*args)`` in a worker thread."""

    def __call__(self, func: Callable[..., T], /, *args: object) -> Awaitable[T]: ...


class _SessionEntry(Protocol):
    @property
    def session_key(self) -> object: ...


class SessionLookup(Protocol):
    """A runner's ``session_store``: the in-process sessions, by id."""

    def lookup_by_session_id(self, session_id: str) -> _SessionEntry | None: ...


class Metrics(Protocol):
    """What the watcher reports (:class:`~hermes_state.metrics.WatcherMetrics` is one)."""

    def claimed(self, row: Row) -> None: ...

    def delivered(self, outcome: str, seconds: float) -> None: ...

    def ticked(self, seconds: float) -> None: ...


def _takes_profile(process: Callable[..., object]) -> bool:
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


def _positive(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _offered(target: object, name: str) -> Any:
    """The named attribute of ``target``, or None when it has none."""
    return getattr(target, name, None)


class Host:
    """A runner as the watcher sees it.

    Required: ``_session_db`` (an awaitable store, re-read at every use: it is the current
    profile scope's) and ``_running`` (its truthiness re-read every tick); ``_process_handoff``
    is required to deliver. The optional pieces are read once, when the watch starts:
    ``_handoff_max_concurrency``, ``_handoff_wakeup``, ``_handoff_heartbeat``,
    ``_handoff_metrics``, ``_handoff_wants_document``, ``_handoff_side_tasks``,
    ``_profile_stores``, ``_run_in_executor_with_context``, ``_reserve_handoff_source`` with
    ``_release_handoff_source_reservation``, ``session_store`` with ``_is_session_running``
    (an in-process turn in progress). Its ``config`` is read by :func:`config_of`.
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._process: Callable[..., Awaitable[object]] | None = _offered(
            runner, "_process_handoff"
        )
        self._takes_profile = self._process is not None and _takes_profile(self._process)
        limit = _offered(runner, "_handoff_max_concurrency")
        self.limit: int | None = limit if isinstance(limit, int) else None
        wakeup = _offered(runner, "_handoff_wakeup")
        self.wakeup: asyncio.Event | None = wakeup if isinstance(wakeup, asyncio.Event) else None
        heartbeat = _offered(runner, "_handoff_heartbeat")
        self.heartbeat: float | None = None if heartbeat is None else float(heartbeat)
        self.metrics: Metrics | None = _offered(runner, "_handoff_metrics")
        self.wants_document = bool(_offered(runner, "_handoff_wants_document"))
        self.side_tasks: dict[str, SideTask] = dict(_offered(runner, "_handoff_side_tasks") or {})
        self.profile_stores: object = _offered(runner, "_profile_stores")
        self.run_in_executor: RunInExecutor | None = _offered(
            runner, "_run_in_executor_with_context"
        )
        self.reserve: Callable[[str], object] | None = _offered(runner, "_reserve_handoff_source")
        self.release_reservation: Callable[[object], object] | None = _offered(
            runner, "_release_handoff_source_reservation"
        )
        self._is_session_running: Callable[[object], object] | None = _offered(
            runner, "_is_session_running"
        )
        self._sessions: SessionLookup | None = _offered(runner, "session_store")

    @property
    def store(self) -> AsyncStore:
        """The store of the current scope (the root store outside any profile scope)."""
        return self.runner._session_db

    @property
    def root_store(self) -> AsyncStore | None:
        """The store as the watch starts (outside any scope); None when the runner has none."""
        store: AsyncStore | None = _offered(self.runner, "_session_db")
        return store

    @property
    def running(self) -> bool:
        return bool(self.runner._running)

    @property
    def checks_turns(self) -> bool:
        """Whether the runner checks for turns running in this process (``_is_session_running``)."""
        return self._is_session_running is not None

    def turn_in_progress(self, session_id: str) -> bool:
        """Whether a local turn of this session runs in this process right now."""
        if self._is_session_running is None or self._sessions is None:
            return False
        entry = self._sessions.lookup_by_session_id(session_id)
        return entry is not None and bool(self._is_session_running(entry.session_key))

    async def deliver(self, row: Row, profile_name: str | None) -> None:
        """The runner's ``_process_handoff``, called the way it takes its arguments."""
        if self._process is None:
            raise AttributeError("the runner has no _process_handoff to deliver with")
        if self._takes_profile:
            await self._process(row, profile_name)
        else:
            await self._process(row)


@dataclass(frozen=True, slots=True)
class StoreOffers:
    """Which optional calls a store offers, and whom it claims for.

    Every store of this package offers them all; the stand-ins of hosts and tests may offer no
    more than listing, claiming, completing and failing one row at a time (the watcher's
    :class:`~hermes_state.watcher.adapter.StoreCalls` makes the batch calls of those).
    """

    owner: str | None
    lease_seconds: float | None
    batch_claims: bool  # claim_handoffs
    batch_finish: bool  # finish_handoffs
    oldest_claims: bool  # claim_next_handoffs
    paged_listing: bool  # list_handoffs
    change_token: bool  # handoff_change_token
    turn_leases: bool  # try_acquire_session_turn_lease
    turn_release: bool  # release_session_turn_lease
    turn_refresh_many: bool  # refresh_session_turn_leases
    turn_refresh: bool  # refresh_session_turn_lease
    transcripts: bool  # get_transcripts
    sessions: bool  # get_session
    messages: bool  # get_messages
    stale_reclaim: bool  # reclaim_stale_running_handoffs
    lease_renewal: bool  # renew_handoff_leases
    expired_reclaim: bool  # reclaim_expired_handoffs


def store_offers(db: object) -> StoreOffers:
    """What ``db`` offers, probed now (a store's methods may be replaced on the instance)."""

    def has(name: str) -> bool:
        return _offered(db, name) is not None

    owner = _offered(db, "owner")
    return StoreOffers(
        owner=owner if isinstance(owner, str) and owner else None,
        lease_seconds=_positive(_offered(db, "lease_seconds")),
        batch_claims=has("claim_handoffs"),
        batch_finish=has("finish_handoffs"),
        oldest_claims=has("claim_next_handoffs"),
        paged_listing=has("list_handoffs"),
        change_token=has("handoff_change_token"),
        turn_leases=has("try_acquire_session_turn_lease"),
        turn_release=has("release_session_turn_lease"),
        turn_refresh_many=has("refresh_session_turn_leases"),
        turn_refresh=has("refresh_session_turn_lease"),
        transcripts=has("get_transcripts"),
        sessions=has("get_session"),
        messages=has("get_messages"),
        stale_reclaim=has("reclaim_stale_running_handoffs"),
        lease_renewal=has("renew_handoff_leases"),
        expired_reclaim=has("reclaim_expired_handoffs"),
    )


def url_of(db: object) -> URL | None:
    """The store's database URL, or None when it has none (a stand-in)."""
    from sqlalchemy.engine import URL

    url = _offered(db, "url")
    return url if isinstance(url, URL) else None


def closer_of(db: object) -> Callable[[], Awaitable[object]] | None:
    """The store's ``close`` coroutine function, or None when it cannot be closed."""
    close: Callable[[], Awaitable[object]] | None = _offered(db, "close")
    return close


def config_of(runner: object) -> object:
    """The runner's ``config`` (what it multiplexes), or None."""
    return _offered(runner, "config")


def configured_profiles(config: object) -> Iterable[tuple[str, str | os.PathLike[str]]]:
    """The (name, home) pairs of a gateway config's ``profiles`` (none when it has none)."""
    profiles: Iterable[tuple[str, str | os.PathLike[str]]] = _offered(config, "profiles") or ()
    return profiles
