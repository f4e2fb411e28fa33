"""AsyncSessionDB: a synchronous store's methods as coroutine functions run in worker threads."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .surface import AsyncStore

__all__ = ["AsyncSessionDB"]


class AsyncSessionDB:
    """Wraps a synchronous store so an event loop never waits on its I/O.

    Every callable attribute of the wrapped store becomes a coroutine function that runs the
    bound method through ``asyncio.to_thread``, looked up when it is called (so a store or
    method replaced later is honoured). A missing attribute raises ``AttributeError``, so
    ``getattr(store, "optional_method", None)`` tells whether the store offers a method.
    Non-callable attributes are returned as they are.
    """

    __slots__ = ("_db",)

    def __init__(self, db: object) -> None:
        self._db = db

    @property
    def wrapped(self) -> object:
        """The synchronous store underneath."""
        return self._db

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._db, name)
        if not callable(attribute):
            return attribute
        db = self._db

        @functools.wraps(attribute)
        async def call_in_thread(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(getattr(db, name), *args, **kwargs)

        return call_in_thread

    def __repr__(self) -> str:
        return f"AsyncSessionDB({self._db!r})"

    async def __aenter__(self) -> AsyncSessionDB:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        close: Callable[[], Coroutine[Any, Any, Any]] | None = getattr(self, "close", None)
        if close is not None:
            await close()


if TYPE_CHECKING:
    _surface: type[AsyncStore] = AsyncSessionDB
