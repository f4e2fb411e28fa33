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
from typing import Final

from sqlalchemy.engine import URL

from .statements import HANDOFF_CHANNEL

__all__ = ["PostgresListener", "database_key", "publish", "subscribe"]

logger = logging.getLogger(__name__)

RECONNECT_DELAY: Final = 2.0

_subscribers: dict[str, set[Callable[[], None]]] = {}
_lock = threading.Lock()


def database_key(url: URL) -> str:
    """One name per database, whatever the driver, with no password in it."""
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)


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

    Runs until cancelled; a lost connection is re-established after a short delay (polling
    covers the gap). Uses psycopg's asyncio connection in autocommit mode.
    """

    def __init__(self, url: URL, on_request: Callable[[], None]) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._where = url.render_as_string(hide_password=True)
        self._on_request = on_request
        self.listening = asyncio.Event()

    async def run(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {HANDOFF_CHANNEL}")
                    self.listening.set()
                    logger.debug("listening for handoff requests on %s", self._where)
                    async for _notification in connection.notifies():
                        self._on_request()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listening.clear()
                logger.warning(
                    "lost the LISTEN connection to %s (%s); polling until it is back",
                    self._where,
                    exc,
                )
            await asyncio.sleep(RECONNECT_DELAY)
