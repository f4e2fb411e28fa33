"""Wake-ups for watchers: in-process notifications, and PostgreSQL LISTEN/NOTIFY across hosts.

A successful ``request_handoff`` publishes to every watcher of the same database in this
process (after its transaction committed). On PostgreSQL the request also NOTIFYs in its
transaction, and :class:`PostgresListener` turns those notifications into wake-ups for
watchers on other hosts. Polling stays the fallback everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy.engine import URL

from . import multihost
from .outage import Outage
from .statements import HANDOFF_CHANNEL

__all__ = ["PostgresListener", "database_key", "publish", "subscribe"]

logger = logging.getLogger(__name__)

#: The longest pause between two tries to get the LISTEN connection back.
RECONNECT_DELAY: Final = 2.0

_subscribers: dict[str, set[Callable[[], None]]] = {}
_lock = threading.Lock()


def database_key(url: URL) -> str:
    """One name per database, whatever the driver, with no password in it."""
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)


def connect_params(url: URL) -> dict[str, Any]:
    """psycopg's keyword arguments for ``url``, built as the store's engine builds them (one
    host or a list: ``host=h1,h2 port=p1,p2``, and every libpq parameter of the query).

    A URL listing several servers connects to the one that accepts writes unless it says
    otherwise (``target_session_attrs``): a standby cannot LISTEN, and NOTIFY is only ever
    sent on the primary.
    """
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    _args, params = PGDialect_psycopg().create_connect_args(url)  # type: ignore[no-untyped-call]
    if multihost.hosts(url) is not None:
        params.setdefault("target_session_attrs", "read-write")
    return dict(params)


def subscribe(key: str, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` (from any thread) on each request in this process; returns the undo."""
    with _lock:
        _subscribers.setdefault(key, set()).add(callback)

    def unsubscribe() -> None:
        with _lock:
            _subscribers.get(key, set()).discard(callback)

    return unsubscribe


def publish(key: str) -> None:
    with _lock:
        callbacks = list(_subscribers.get(key, ()))
    for callback in callbacks:
        try:
            callback()
        except Exception:  # a closed event loop must not fail the request that woke it
            logger.debug("wake-up callback failed", exc_info=True)


class PostgresListener:
    """LISTENs on the handoff channel and calls ``on_request`` for every notification.

    Runs until cancelled; a lost connection is re-established with a growing, jittered pause
    (polling covers the gap), logged once when it is lost, every half minute while it stays
    away and once when it is back (:class:`~hermes_state.outage.Outage`). Uses psycopg's
    asyncio connection in autocommit mode. Once the connection is (back) up, ``on_request``
    is called once too: requests made while it was away were not heard.
    """

    def __init__(self, url: URL, on_request: Callable[[], None]) -> None:
        self._params = connect_params(url)
        self._where = multihost.render(url)
        self._on_request = on_request
        self.listening = asyncio.Event()
        self.outage = Outage(
            f"the LISTEN connection to {self._where} (polling meanwhile)",
            logger,
            ceiling=RECONNECT_DELAY,
        )

    async def run(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    **self._params, autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {HANDOFF_CHANNEL}")
                    self.listening.set()
                    was_down = self.outage.down
                    self.outage.succeeded()
                    logger.debug("listening for handoff requests on %s", self._where)
                    if was_down:
                        self._on_request()
                    async for _notification in connection.notifies():
                        self._on_request()
                raise ConnectionError("the server ended the LISTEN connection")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listening.clear()
                delay = self.outage.failed(exc)
            await asyncio.sleep(delay)
