"""Settings read once from the runner, its store and the environment into a frozen dataclass."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Final

from ..plans import STRANDED_ERROR
from .host import Host, store_offers

__all__ = [
    "DEFAULT_HEARTBEAT_SECONDS",
    "DEFAULT_MAX_CONCURRENCY",
    "LEGACY_HANDOFF_ENV",
    "LOGGER_NAME",
    "MAX_RESTARTS",
    "RECLAIM_MESSAGE",
    "RESTART_DELAY",
    "RESTART_WINDOW",
    "TURN_LEASE_SECONDS",
    "WatchSettings",
    "legacy_handoff_forbidden",
]

#: The watcher logs under the name of the module that first held it (``gateway/run.py``), the
#: name hosts' logging configurations select.
LOGGER_NAME: Final = "gateway.run"
#: The error a row left running by a stopped gateway gets: say how to retry.
RECLAIM_MESSAGE: Final = STRANDED_ERROR
DEFAULT_MAX_CONCURRENCY: Final = 3
#: How often an idle watcher says, at INFO, that it is alive and what it watches.
DEFAULT_HEARTBEAT_SECONDS: Final = 180.0
#: How long the watcher's turn lease on a conversation lasts without a refresh (at most: a
#: store with a shorter claim lease shortens it); refreshed every third of it while the
#: delivery runs. Read when a watch starts, so a host may change it first.
TURN_LEASE_SECONDS = 60.0
#: A side task that crashes more often than this within :data:`RESTART_WINDOW` seconds stops
#: the watcher; below that it is restarted after :data:`RESTART_DELAY` seconds.
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
RESTART_DELAY = 0.5
#: The writer-policy setting: ``off`` makes the legacy (polling) handoff path do nothing.
LEGACY_HANDOFF_ENV: Final = "HERMES_STATE_LEGACY_HANDOFF"
_OFF: Final = frozenset({"off", "0", "false", "no", "disabled", "forbidden"})


def legacy_handoff_forbidden() -> bool:
    """True when the deployment's writer policy turns the legacy handoff path off.

    Set ``HERMES_STATE_LEGACY_HANDOFF=off`` where another writer owns handoffs: the watcher
    then claims nothing, and ``GatewayRunner._process_handoff`` refuses to deliver. Read at
    every tick, so the policy can change while a watcher runs.
    """
    return os.environ.get(LEGACY_HANDOFF_ENV, "").strip().lower() in _OFF


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """What one run of the watcher reads once, before it starts."""

    interval: float
    drain_timeout: float
    #: Deliveries in flight at once (None: no limit).
    limit: int | None
    #: Seconds between the heartbeat's INFO lines.
    heartbeat: float
    #: Deliver the row as claimed with its transcript (``messages``), not the row as listed.
    wants_document: bool
    #: The gateway its deliveries' turn leases name (:func:`~hermes_state.plans.delivery_holder`).
    holder: str
    turn_seconds: float
    #: The root store's claim lease: renewed (and expired ones reclaimed) every third of it.
    lease_seconds: float | None
    max_restarts: int
    restart_window: float
    restart_delay: float

    @classmethod
    def read(cls, host: Host, *, interval: float, drain_timeout: float) -> WatchSettings:
        """The settings of a watch of ``host``'s runner, from it and its root store."""
        offers = store_offers(host.root_store)
        lease = offers.lease_seconds
        turn_seconds = TURN_LEASE_SECONDS if lease is None else min(TURN_LEASE_SECONDS, lease)
        # A restarted gateway takes its previous life's turn leases back at once when they
        # name its owner (as it reclaims its claims); a store without one: this process.
        holder = offers.owner or f"{socket.gethostname()}:pid={os.getpid()}:{uuid.uuid4().hex[:8]}"
        return cls(
            interval=interval,
            drain_timeout=drain_timeout,
            limit=host.limit,
            heartbeat=DEFAULT_HEARTBEAT_SECONDS if host.heartbeat is None else host.heartbeat,
            wants_document=host.wants_document,
            holder=holder,
            turn_seconds=turn_seconds,
            lease_seconds=lease,
            max_restarts=MAX_RESTARTS,
            restart_window=RESTART_WINDOW,
            restart_delay=RESTART_DELAY,
        )
