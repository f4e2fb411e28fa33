"""``AsyncStore``: the asyncio store's Protocol, generated
from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit;
change the declaration and run that command (a test fails while this file is stale).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from os import PathLike

    from sqlalchemy.engine import URL

    from ..execution import WriteConnection
    from ..plans import ClaimBatch, Row

T = TypeVar("T")

__all__ = ["AsyncStore"]


class AsyncStore(Protocol):
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

    async def end_session(self, session_id: str, end_reason: str) -> None: ...

    async def reopen_session(self, session_id: str) -> None: ...

    async def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None: ...

    async def update_session_model(
        self, session_id: str, model: str, provider: str | None = None
    ) -> None: ...

    async def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
    ) -> None: ...

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

    async def set_session_title(self, session_id: str, title: str | None) -> bool: ...

    async def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool: ...

    async def get_session_title_source(self, session_id: str) -> str | None: ...

    async def set_session_title_source(self, session_id: str, source: str) -> bool: ...

    async def get_session_title(self, session_id: str) -> str | None: ...

    async def get_session_by_title(self, title: str) -> Row | None: ...

    async def resolve_session_by_title(self, title: str) -> str | None: ...

    async def get_next_title_in_lineage(self, base_title: str) -> str: ...

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

    async def set_session_archived(self, session_id: str, archived: bool) -> bool: ...

    async def set_session_pinned(self, session_id: str, pinned: bool) -> bool: ...

    async def set_session_hidden(self, session_id: str, hidden: bool) -> bool: ...

    async def set_session_read(self, session_id: str, read: bool = True) -> bool: ...

    async def resolve_session_id(self, session_id_or_prefix: str) -> str | None: ...

    async def resolve_resume_session_id(self, session_id: str | None) -> str | None: ...

    async def get_compression_chain(self, session_id: str | None) -> list[str]: ...

    async def get_compression_tip(self, session_id: str | None) -> str | None: ...

    async def get_compression_lineage(self, session_id: str | None) -> list[str]: ...

    async def delete_session(
        self,
        session_id: str,
        sessions_dir: str | PathLike[str] | None = None,
        expected_delete_ids: Iterable[str] | None = None,
    ) -> bool: ...

    async def delete_sessions(
        self, session_ids: Iterable[str] | None, sessions_dir: str | PathLike[str] | None = None
    ) -> int: ...

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str | None) -> None: ...

    async def append_messages_batch(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        chunk_rows: int | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int: ...

    async def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]: ...

    async def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
        include_row_ids: bool = False,
        include_compacted: bool = False,
    ) -> list[Row]: ...

    async def clear_session_messages(
        self,
        session_id: str,
        keep_last_n: int | None = None,
        before_timestamp: float | None = None,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> bool: ...

    async def rewind_to_message(
        self,
        session_id: str,
        target_message_id: int,
        *,
        preserve_compaction_handoff: bool = False,
        expected_active_ids: Sequence[int] | None = None,
        expected_target_content: Any = None,
    ) -> dict[str, Any]: ...

    async def list_sessions_rich(
        self,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        include_pinned: bool = False,
        session_key: str | None = None,
        include_hidden: bool = False,
        scope: str | None = None,
        requester_user_id: str | int | None = None,
    ) -> list[Row]: ...

    async def session_count_ge(self, n: int = 1) -> bool: ...

    async def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]: ...

    async def search_sessions(
        self,
        source: str | Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[Row]: ...
