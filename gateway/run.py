"""The compatible watcher module: the names the gateway's callers (and its tests) use, over
:mod:`hermes_state.watcher`, where the watcher lives.

The pieces a host (or a test) replaces on this module are the watcher's own, forwarded: reading
``gateway.run._handoff_watch_scopes`` reads the function the watcher calls, and assigning it
(``monkeypatch.setattr(run, "_handoff_watch_scopes", ...)``) replaces it where the watcher
looks it up at call time. They are ``_handoff_watch_scopes``, ``_async_profile_runtime_scope``,
``_multiplex_profile_homes``, ``get_hermes_home``, ``SessionDB`` (what profile stores are opened
with), ``_legacy_handoff_forbidden_by_writer_policy``, ``_nap`` and the tunables
``TURN_LEASE_SECONDS``, ``MAX_RESTARTS``, ``RESTART_WINDOW`` and ``RESTART_DELAY`` (read when a
watch starts). ``asyncio`` is the asyncio module itself, which the watcher uses as
``asyncio.sleep`` and ``asyncio.ensure_future``.
"""

from __future__ import annotations

import asyncio
import sys
import types
from typing import TYPE_CHECKING, Final

from hermes_state.threaded import AsyncSessionDB
from hermes_state.watcher import (
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_MAX_CONCURRENCY,
    LEGACY_HANDOFF_ENV,
    RECLAIM_MESSAGE,
    GatewayConfig,
    GatewayRunner,
    Handler,
    HandoffWatch,
    ProfileStores,
    SideTaskFailed,
    default_owner,
    profiles,
    settings,
    upkeep,
)
from hermes_state.watcher.claimed import Claimed as _Claimed  # noqa: F401 (tests build claims)

if TYPE_CHECKING:  # what type checkers see; at run time these are forwarded (__getattr__)
    SessionDB = profiles.SessionDB
    get_hermes_home = profiles.get_hermes_home
    _handoff_watch_scopes = profiles.watch_scopes
    _async_profile_runtime_scope = profiles.profile_runtime_scope
    _multiplex_profile_homes = profiles.multiplex_profile_homes
    _legacy_handoff_forbidden_by_writer_policy = settings.legacy_handoff_forbidden
    _nap = upkeep.nap
    TURN_LEASE_SECONDS = settings.TURN_LEASE_SECONDS
    MAX_RESTARTS = settings.MAX_RESTARTS
    RESTART_WINDOW = settings.RESTART_WINDOW
    RESTART_DELAY = settings.RESTART_DELAY

__all__ = [
    "DEFAULT_HEARTBEAT_SECONDS",
    "DEFAULT_MAX_CONCURRENCY",
    "LEGACY_HANDOFF_ENV",
    "MAX_RESTARTS",
    "RECLAIM_MESSAGE",
    "RESTART_DELAY",
    "RESTART_WINDOW",
    "TURN_LEASE_SECONDS",
    "AsyncSessionDB",
    "GatewayConfig",
    "GatewayRunner",
    "Handler",
    "HandoffWatch",
    "ProfileStores",
    "SessionDB",
    "SideTaskFailed",
    "asyncio",
    "default_owner",
    "get_hermes_home",
]

#: name here -> (module of the watcher, name there) of every forwarded piece.
_FORWARDED: Final[dict[str, tuple[types.ModuleType, str]]] = {
    "_handoff_watch_scopes": (profiles, "watch_scopes"),
    "_async_profile_runtime_scope": (profiles, "profile_runtime_scope"),
    "_multiplex_profile_homes": (profiles, "multiplex_profile_homes"),
    "get_hermes_home": (profiles, "get_hermes_home"),
    "SessionDB": (profiles, "SessionDB"),
    "_legacy_handoff_forbidden_by_writer_policy": (settings, "legacy_handoff_forbidden"),
    "TURN_LEASE_SECONDS": (settings, "TURN_LEASE_SECONDS"),
    "MAX_RESTARTS": (settings, "MAX_RESTARTS"),
    "RESTART_WINDOW": (settings, "RESTART_WINDOW"),
    "RESTART_DELAY": (settings, "RESTART_DELAY"),
    "_nap": (upkeep, "nap"),
}


def __getattr__(name: str) -> object:
    forwarded = _FORWARDED.get(name)
    if forwarded is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = forwarded
    return getattr(module, attribute)


def __dir__() -> list[str]:
    return sorted({*globals(), *_FORWARDED})


class _ForwardingModule(types.ModuleType):
    """This module, with assignments to the forwarded names made where the watcher reads them."""

    def __setattr__(self, name: str, value: object) -> None:
        forwarded = _FORWARDED.get(name)
        if forwarded is None:
            super().__setattr__(name, value)
        else:
            setattr(forwarded[0], forwarded[1], value)

    def __delattr__(self, name: str) -> None:
        if name in _FORWARDED:
            raise AttributeError(f"{name} is the watcher's own: replace it instead")
        super().__delattr__(name)


sys.modules[__name__].__class__ = _ForwardingModule
