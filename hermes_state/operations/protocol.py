"""``AsyncStore``: the asyncio store's Protocol, generated
from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit;
change the declaration and run that command (a test fails while this file is stale).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from .protocol_sessions import AsyncSessionStore

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from ..execution import WriteConnection
    from ..plans import ClaimBatch, Row

T = TypeVar("T")

__all__ = ["AsyncStore"]


class AsyncStore(AsyncSessionStore, Protocol):
    """The asyncio store: :class:`~hermes_state.surface.Store`'s operations as coroutine
    functions (``NativeAsyncSessionDB``, ``AsyncSessionDB``, ``AbsentStore``); each
    one's docstring is in ``Store``."""

    @property
    def url(self) -> URL: ...

    @property
    def where(self) -> str: ...

    @property
    def owner(self) -> str | None: ...

    @property
    def lease_seconds(self) -> float | None: ...

    @property
    def actor(self) -> str: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T: ...

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str: ...

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str: ...

    async def append_message(
        self,
        session_id: str,
        role: str,
        content: str | list[Any] | dict[str, Any] | None = None,
        **fields: Any,
    ) -> int: ...

    async def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        include_compacted: bool = False,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
    ) -> list[Row]: ...

    async def count_messages(self, session_id: str) -> int: ...

    async def message_count(self, session_id: str | None = None) -> int: ...

    async def session_count(
        self,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: Sequence[str] | None = None,
        scope: str | None = None,
        requester_user_id: str | int | None = None,
    ) -> int: ...

    async def request_handoff(self, session_id: str, platform: str) -> bool: ...

    async def retry_handoff(self, session_id: str, platform: str | None = None) -> bool: ...

    async def claim_handoff(self, session_id: str) -> bool: ...

    async def claim_pending_handoffs(
        self, limit: int, *, platform: str | None = None
    ) -> list[Row]: ...

    async def claim_handoffs(
        self,
        session_ids: Iterable[str],
        *,
        turn_holders: Mapping[str, str] | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch: ...

    async def claim_next_handoffs(
        self,
        limit: int,
        *,
        exclude: Iterable[str] = (),
        turn_gateway: str | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch: ...

    async def complete_handoff(self, session_id: str) -> bool: ...

    async def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool: ...

    async def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]: ...

    async def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]: ...

    async def finish_handoffs(
        self, outcomes: Mapping[str, object], *, release_turns: Mapping[str, str] | None = None
    ) -> dict[str, bool]: ...

    async def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]: ...

    async def reclaim_stale_running_handoffs(self, error: object) -> list[str]: ...

    async def reclaim_expired_handoffs(self, error: object) -> list[str]: ...

    async def reclaim_running_handoffs(self, error: object) -> list[str]: ...

    async def preview_reclaim(self, scope: str = "stale") -> list[Row]: ...

    async def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool: ...

    async def acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        on_wait: Callable[[float], object] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], object] | None = None,
        acquire_patience_s: float = 0.5,
        on_contended: Callable[[], object] | None = None,
        wait_notice_backoff: float = 2.0,
        wait_notice_max_interval_seconds: float = 300.0,
    ) -> bool: ...

    async def has_live_session_turn_lease(self, session_id: str) -> bool: ...

    async def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool: ...

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None: ...

    async def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]: ...

    async def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None: ...

    async def handoff_history(self, session_id: str) -> list[Row]: ...

    async def prune_handoff_events(
        self, older_than_seconds: float, *, dry_run: bool = False
    ) -> int: ...

    async def list_pending_handoffs(self) -> list[Row]: ...

    async def list_handoffs(
        self,
        state: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        search: str | None = None,
    ) -> list[Row]: ...

    async def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]: ...

    async def get_session(self, session_id: str) -> Row | None: ...

    async def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]: ...

    async def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]: ...

    async def last_handoff_event_id(self) -> int: ...

    async def list_sessions(
        self,
        *,
        source: str | None = None,
        handoff_state: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Row]: ...

    async def has_pending_handoffs(self) -> bool: ...

    async def get_handoff_state(self, session_id: str) -> Row | None: ...

    async def handoff_change_token(self) -> int | None: ...

    async def handoff_stats(self) -> Row: ...
