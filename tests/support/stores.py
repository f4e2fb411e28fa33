"""Putting rows in place through real stores, and reading back what the public API hides.

* ``HandClock``: a clock the test moves by hand, to give to every store of a test.
* ``put`` / ``make_pending``: sessions walked to a handoff state through real transitions,
  never by raw SQL.
* ``handoff_row``: a session's handoff columns, owner, lease and attempt included.
* ``STORE_KINDS`` / ``open_kind``: the same store surface three ways (``SessionDB``, the native
  asyncio store, ``AsyncSessionDB`` over ``SessionDB``), each called like the synchronous one
  through ``Blocking``, so a test body is written once for all of them.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.engine import URL

from hermes_state import AsyncSessionDB, NativeAsyncSessionDB, SessionDB
from hermes_state.models import messages, sessions

__all__ = [
    "STORE_KINDS",
    "TRANSCRIPT_KEYS",
    "Blocking",
    "HandClock",
    "LoopThread",
    "handoff_row",
    "make_pending",
    "open_kind",
    "put",
]

#: The keys of a message as get_messages returns it, as upstream's does: every column but its
#: display bookkeeping (and the compression-summary flag, present only where it is set).
TRANSCRIPT_KEYS = {column.name for column in messages.columns} - {
    "display_identity",
    "display_order",
    "_compressed_summary",
}

#: sync: SessionDB; threaded: AsyncSessionDB(SessionDB); native: NativeAsyncSessionDB.
STORE_KINDS = ("sync", "threaded", "native")
CALL_WAIT = 120.0  # a safety net against a hung call, never a synchronisation tool


class LoopThread:
    """The test's event loop, run in a thread of its own so that any thread (the test's, or
    the racers it starts) can hand it a coroutine and wait for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(CALL_WAIT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CALL_WAIT)
        self.loop.close()


class Blocking:
    """Any store, called like ``SessionDB``: a coroutine a method returns runs on the loop
    thread and its result (or exception) comes back to the caller."""

    def __init__(self, store: Any, loop: LoopThread) -> None:
        self.store = store
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            return self._loop.run(result) if inspect.isawaitable(result) else result

        return call

    def __repr__(self) -> str:
        return f"Blocking({self.store!r})"


def open_kind(kind: str, url: URL, loop: LoopThread, **options: Any) -> SessionDB:
    """A store of ``kind`` on ``url`` with ``options``, typed as what it behaves like."""
    if kind == "sync":
        return SessionDB(url=url, **options)

    async def build() -> Any:  # on the loop: the native store's lock and engine belong to it
        if kind == "threaded":
            return AsyncSessionDB(await asyncio.to_thread(SessionDB, url=url, **options))
        assert kind == "native", kind
        native = NativeAsyncSessionDB(url=url, **options)
        await native._ready()  # as SessionDB does on open: a bad database fails here
        return native

    return cast(SessionDB, Blocking(loop.run(build()), loop))


class HandClock:
    """A clock the test moves by hand; every store of a test reads the same one."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 1.0) -> None:
        self.now += seconds


def put(
    db: SessionDB,
    session_id: str,
    state: str | None,
    *,
    platform: str = "telegram",
    error: str = "the platform said no",
) -> None:
    """Create the session and walk it to ``state`` (None: never requested) through real
    transitions: requested for ``platform``, claimed, then completed or failed with ``error``."""
    db.create_session(session_id, "cli")
    if state is None:
        return
    assert db.request_handoff(session_id, platform) is True
    if state == "pending":
        return
    assert db.claim_handoff(session_id) is True
    if state == "completed":
        assert db.complete_handoff(session_id) is True
    elif state == "failed":
        assert db.fail_handoff(session_id, error) is True


def make_pending(
    db: SessionDB, *session_ids: str, platform: str = "telegram", started_at: float | None = None
) -> None:
    """Create each session and request its handoff. With ``started_at``, the sessions start
    a second apart from then, in the order given (so they are listed oldest first)."""
    for index, session_id in enumerate(session_ids):
        if started_at is None:
            db.create_session(session_id, "cli")
        else:
            db.create_session(session_id, "cli", started_at=started_at + index)
        assert db.request_handoff(session_id, platform) is True


_c = sessions.c
_HANDOFF_COLUMNS = select(
    _c.handoff_state.label("state"),
    _c.handoff_owner.label("owner"),
    _c.handoff_lease_expires_at.label("lease"),
    _c.handoff_attempt.label("attempt"),
    _c.handoff_error.label("error"),
)


def handoff_row(db: SessionDB, session_id: str) -> dict[str, Any]:
    """The handoff columns of one session: state, owner, lease, attempt and error."""
    query = _HANDOFF_COLUMNS.where(_c.id == session_id)
    return db._execute_write(lambda conn: dict(conn.execute(query).mappings().one()))
