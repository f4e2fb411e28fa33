"""The handoff watcher: polls stores, claims pending rows, delivers each in its own task.

:class:`GatewayRunner` is a gateway: a root store, optional profiles and a handler;
:class:`HandoffWatch` is one run of its watcher, which needs only ``runner._session_db`` (an
awaitable store), ``runner._running`` (re-read every tick) and ``runner._process_handoff``.

Its parts, one module each: ``host`` (the only reader of the runner's and stores' optional
pieces), ``settings`` (defaults, the writer policy and what a run reads once), ``profiles``
(scopes and their stores), ``adapter`` (the batch calls of any store), ``claims``,
``claimed`` (what a claimed row holds), ``deliveries``, ``flusher`` (batched outcome
recording), ``upkeep`` (leases, reclaims, heartbeat), ``loop`` (the run and its supervision)
and ``runner``.

Guarantees: the event loop never waits on database or file I/O (stores are awaited, file work
runs in threads); one slow delivery never delays another (fire-and-forget tasks); a row is
never dispatched twice (claims are compare-and-swap, and in-flight rows are skipped); a row
left ``running`` by a dead gateway is failed at the next start with a hint to re-run
``/handoff``, never re-queued; a handoff never runs during a local turn of its conversation
(the durable turn lease), and a side task that keeps crashing stops the watcher loudly.

A host may replace, before a watch starts, the tunables in :mod:`.settings`
(``TURN_LEASE_SECONDS``, ``MAX_RESTARTS``, ``RESTART_WINDOW``, ``RESTART_DELAY``) and, at any
time, the functions of :mod:`.profiles` and ``settings.legacy_handoff_forbidden``: the watcher
looks them up on those modules when it uses them.
"""

from __future__ import annotations

from ..errors import SideTaskFailed
from .claimed import Claimed
from .host import Metrics, StoreOffers
from .loop import HandoffWatch
from .profiles import (
    GatewayConfig,
    ProfileStores,
    Scope,
    default_owner,
    get_hermes_home,
    multiplex_profile_homes,
    profile_runtime_scope,
    watch_scopes,
)
from .runner import GatewayRunner, Handler
from .settings import (
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_MAX_CONCURRENCY,
    LEGACY_HANDOFF_ENV,
    RECLAIM_MESSAGE,
    WatchSettings,
    legacy_handoff_forbidden,
)

__all__ = [
    "DEFAULT_HEARTBEAT_SECONDS",
    "DEFAULT_MAX_CONCURRENCY",
    "LEGACY_HANDOFF_ENV",
    "RECLAIM_MESSAGE",
    "Claimed",
    "GatewayConfig",
    "GatewayRunner",
    "Handler",
    "HandoffWatch",
    "Metrics",
    "ProfileStores",
    "Scope",
    "SideTaskFailed",
    "StoreOffers",
    "WatchSettings",
    "default_owner",
    "get_hermes_home",
    "legacy_handoff_forbidden",
    "multiplex_profile_homes",
    "profile_runtime_scope",
    "watch_scopes",
]
