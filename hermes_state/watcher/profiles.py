"""Profile scopes: which profiles are watched, their stores, and entering one.

The functions a host may replace are looked up here when called: :func:`watch_scopes`,
:func:`profile_runtime_scope`, :func:`multiplex_profile_homes`, :func:`get_hermes_home` and
``SessionDB`` (what a profile's store is opened with).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..absent import AbsentStore
from ..engine import hermes_home
from ..errors import HermesStateError
from ..store import SessionDB
from ..surface import AsyncStore, Store
from ..threaded import AsyncSessionDB
from .host import config_of, configured_profiles
from .settings import LOGGER_NAME

__all__ = [
    "GatewayConfig",
    "ProfileStores",
    "Scope",
    "SessionDB",
    "active_profile_stores",
    "default_owner",
    "enter_scope",
    "get_hermes_home",
    "multiplex_profile_homes",
    "profile_runtime_scope",
    "scoped_store",
    "watch_scopes",
]

logger = logging.getLogger(LOGGER_NAME)

#: (profile name, home) of a store the watcher serves; (None, None) is the root store.
Scope = tuple[str | None, Path | None]

# The store of the profile whose scope the current task runs in (None: the root store).
_scoped_store: contextvars.ContextVar[AsyncStore | None] = contextvars.ContextVar(
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


@dataclass(frozen=True)
class GatewayConfig:
    """What a gateway serves besides its root store: multiplexed profiles as (name, home)."""

    profiles: tuple[tuple[str, Path], ...] = field(default_factory=tuple)


def multiplex_profile_homes(config: object) -> list[tuple[str, Path]]:
    """The (name, home) of every profile the gateway multiplexes, from its config."""
    return [(str(name), Path(home)) for name, home in configured_profiles(config)]


def watch_scopes(runner: object) -> list[Scope]:
    """The root store first, then each multiplexed profile whose home is not the launch home.

    Touches the file system (resolving paths), so the watcher calls it off the event loop when
    the runner can. A failing resolver degrades to the root store alone.
    """
    scopes: list[Scope] = [(None, None)]
    try:
        launch = get_hermes_home().resolve()
        for name, home in multiplex_profile_homes(config_of(runner)):
            if home.resolve() != launch:
                scopes.append((name, home))
    except Exception:
        logger.exception("could not resolve the profiles to watch; watching the root store only")
        return [(None, None)]
    return scopes


@dataclass
class _Opened:
    store: Store
    awaitable: AsyncSessionDB


class ProfileStores:
    """The stores of the profiles a runner serves: each opened once, all closed together.

    Methods block (they open files): call them off the event loop. This module's
    ``SessionDB`` is looked up when a store is opened, so a host (or a test) can replace it.
    """

    def __init__(self) -> None:
        self._stores: dict[Path, _Opened] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _opened(self, home: Path) -> _Opened:
        key = home.expanduser().resolve()
        with self._lock:
            if self._closed:
                raise HermesStateError("the gateway's profile stores are closed")
            opened = self._stores.get(key)
            if opened is None:
                store: Store = SessionDB(key / "state.db")
                opened = self._stores[key] = _Opened(store, AsyncSessionDB(store))
            return opened

    def open(self, home: Path) -> AsyncSessionDB:
        """The profile's store (opened, and its schema brought current, the first time)."""
        return self._opened(home).awaitable

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
        return bool(self._opened(home).store.has_pending_handoffs())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            opened, self._stores = list(self._stores.values()), {}
        for each in opened:
            with contextlib.suppress(Exception):
                each.store.close()


@contextlib.contextmanager
def active_profile_stores(stores: ProfileStores) -> Iterator[None]:
    """Within this, the profile scopes the current task enters open their stores in ``stores``."""
    token = _active_profile_stores.set(stores)
    try:
        yield
    finally:
        _active_profile_stores.reset(token)


def _current_profile_stores() -> ProfileStores:
    stores = _active_profile_stores.get()
    if stores is None:
        raise RuntimeError("profile scopes are entered by a running watcher only")
    return stores


def scoped_store() -> AsyncStore | None:
    """The store of the profile scope the current task runs in; None outside any."""
    return _scoped_store.get()


@contextlib.asynccontextmanager
async def profile_runtime_scope(home: Path) -> AsyncIterator[None]:
    """Inside this scope ``runner._session_db`` is the profile's own store."""
    store = await asyncio.to_thread(_current_profile_stores().if_present, home)
    token = _scoped_store.set(store)
    try:
        yield
    finally:
        _scoped_store.reset(token)


def enter_scope(home: Path | None) -> contextlib.AbstractAsyncContextManager[object]:
    """The scope of ``home``'s profile (:func:`profile_runtime_scope`, looked up now); none
    for the root store."""
    if home is None:
        return contextlib.nullcontext()
    scope: contextlib.AbstractAsyncContextManager[object] = profile_runtime_scope(home)
    return scope
