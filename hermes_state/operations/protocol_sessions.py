"""``AsyncSessionStore``: upstream's session and message operations of the asyncio
store's Protocol, generated
from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit;
change the declaration and run that command (a test fails while this file is stale).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from os import PathLike

    from ..plans import Row

T = TypeVar("T")

__all__ = ["AsyncSessionStore"]


class AsyncSessionStore(Protocol):
    """Upstream's session and message operations of the asyncio store, each one's
    docstring in ``SessionSurface``."""

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

    async def set_session_title(self, session_id: str, title: str | None) -> bool: ...

    async def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool: ...

    async def get_session_title_source(self, session_id: str) -> str | None: ...

    async def set_session_title_source(self, session_id: str, source: str) -> bool: ...

    async def get_session_title(self, session_id: str) -> str | None: ...

    async def get_session_by_title(self, title: str) -> Row | None: ...

    async def resolve_session_by_title(self, title: str) -> str | None: ...

    async def get_next_title_in_lineage(self, base_title: str) -> str: ...

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

    async def search_messages(
        self,
        query: str,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
        fields: Iterable[str] | None = None,
        include_reasoning: bool = False,
    ) -> list[Row]: ...

    async def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
    ) -> list[Row]: ...

    async def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: str | PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        **filters: Any,
    ) -> int: ...

    async def prune_report(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        *,
        dry_run: bool = False,
        sessions_dir: str | PathLike[str] | None = None,
        batch_size: int = 100,
        sample: int = 0,
        **filters: Any,
    ) -> dict[str, Any]: ...

    async def list_prune_candidates(
        self,
        older_than_days: float | None = None,
        source: str | None = None,
        *,
        whole_lineages: bool = False,
        **filters: Any,
    ) -> list[Row]: ...

    async def vacuum(self) -> int: ...

    async def storage_report(self) -> dict[str, Any]: ...

    async def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: str | PathLike[str] | None = None,
        min_vacuum_interval_days: int = 30,
        min_vacuum_freelist_ratio: float = 0.25,
    ) -> dict[str, Any]: ...

    async def export_session(self, session_id: str) -> Row | None: ...

    async def export_session_lineage(self, session_id: str | None) -> Row | None: ...

    async def export_all(self, source: str | Sequence[str] | None = None) -> list[Row]: ...

    async def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int: ...

    async def import_sessions(self, sessions: list[Row]) -> Row: ...
