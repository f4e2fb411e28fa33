"""AbsentStore: the asyncio store of a database not created yet, answering as an empty one."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import DatabaseUnavailableError, missing_database
from .execution import WriteConnection
from .models import HandoffState
from .plans import ClaimBatch, Row, _unknown_session
from .statements import ReclaimScope
from .store import Clock, StoreSettings
from .validation import require_identifiers

if TYPE_CHECKING:
    from .surface import AsyncStore

__all__ = ["AbsentStore"]

T = TypeVar("T")


class AbsentStore(StoreSettings):
    """What a store of ``db_path`` would answer while the file does not exist, creating nothing.

    The gateway watches profiles whose first session has not been recorded yet; watching must
    not create their home or their ``state.db``. Every read answers as an empty database at
    head does (no rows, zero counts); every transition finds no row and answers as the store
    does for an unknown id (False, ``[]``, ``{id: False}``). Arguments are validated exactly as
    the store validates them. What would change an empty database (``create_session``,
    ``ensure_session``, taking a turn lease, ``_execute_write``) raises
    :class:`~hermes_state.DatabaseUnavailableError` instead: open the real store to create the
    file. ``handoff_change_token`` is None (no file to watch: a watcher lists every tick).
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        *,
        clock: Clock = time.time,
        owner: str | None = None,
        lease_seconds: float | None = None,
        actor: str | None = None,
    ) -> None:
        super().__init__(
            db_path,
            None,
            busy_patience=0.0,
            clock=clock,
            owner=owner,
            lease_seconds=lease_seconds,
            actor=actor,
        )

    def _absent(self) -> DatabaseUnavailableError:
        return missing_database(self.where)

    async def __aenter__(self) -> AbsentStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Nothing is open."""

    async def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        raise self._absent()

    # -- sessions and transcript ---------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        self._plans.create_session(session_id, source, fields)
        raise self._absent()

    async def ensure_session(self, session_id: str, source: str = "unknown", **fields: Any) -> str:
        return await self.create_session(session_id, source, **fields)

    async def append_message(
        self, session_id: str, role: str, content: str | None = None, **fields: Any
    ) -> int:
        self._plans.append_message(session_id, role, content, fields)
        raise _unknown_session(session_id)

    async def get_messages(self, session_id: str) -> list[Row]:
        self._plans.get_messages(session_id)
        return []

    async def count_messages(self, session_id: str) -> int:
        self._plans.count_messages(session_id)
        return 0

    # -- handoff transitions ------------------------------------------------------------------

    async def request_handoff(self, session_id: str, platform: str) -> bool:
        self._plans.request_handoff(session_id, platform)
        return False

    async def retry_handoff(self, session_id: str, platform: str | None = None) -> bool:
        self._plans.retry_handoff(session_id, platform)
        return False

    async def claim_handoff(self, session_id: str) -> bool:
        self._plans.claim_handoff(session_id)
        return False

    async def claim_pending_handoffs(self, limit: int, *, platform: str | None = None) -> list[Row]:
        self._plans.claim_pending_handoffs(limit, platform)
        return []

    async def claim_handoffs(
        self,
        session_ids: Iterable[str],
        *,
        turn_holders: Mapping[str, str] | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        self._plans.claim_handoffs(session_ids, turn_holders, turn_seconds)
        return ClaimBatch([], [])  # nothing is pending, so no turn lease is taken either

    async def claim_next_handoffs(
        self,
        limit: int,
        *,
        exclude: Iterable[str] = (),
        turn_gateway: str | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        self._plans.claim_next_handoffs(limit, exclude, turn_gateway, turn_seconds)
        return ClaimBatch([], [])

    async def complete_handoff(self, session_id: str) -> bool:
        self._plans.complete_handoff(session_id)
        return False

    async def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        self._plans.fail_handoff(session_id, error, only_states)
        return False

    async def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]:
        ids = require_identifiers("session_ids", session_ids)  # an iterator is read once
        self._plans.complete_handoffs(ids)
        return dict.fromkeys(ids, False)

    async def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]:
        self._plans.fail_handoffs(errors)
        return dict.fromkeys(errors, False)

    async def finish_handoffs(
        self, outcomes: Mapping[str, object], *, release_turns: Mapping[str, str] | None = None
    ) -> dict[str, bool]:
        self._plans.finish_handoffs(outcomes, release_turns)
        return dict.fromkeys(outcomes, False)

    async def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        self._plans.renew_handoff_leases(session_ids)
        return []

    async def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        self._plans.reclaim_handoffs(ReclaimScope.STALE, error)
        return []

    async def reclaim_expired_handoffs(self, error: object) -> list[str]:
        self._plans.reclaim_handoffs(ReclaimScope.EXPIRED, error)
        return []

    async def reclaim_running_handoffs(self, error: object) -> list[str]:
        self._plans.reclaim_handoffs(ReclaimScope.ALL, error)
        return []

    async def preview_reclaim(self, scope: str = "stale") -> list[Row]:
        self._plans.preview_reclaim(scope)
        return []

    # -- session turn leases -------------------------------------------------------------------

    async def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        # An empty database would grant the lease by recording it, which needs the file.
        plan = self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
        if not plan.writes:
            return False  # an empty id or holder: the store answers "no" without asking
        raise self._absent()

    async def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool:
        self._plans.refresh_session_turn_lease(session_id, holder, ttl_seconds)
        return False

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        self._plans.release_session_turn_lease(session_id, holder)

    async def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]:
        self._plans.refresh_session_turn_leases(turn_holders, ttl_seconds)
        return []

    async def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None:
        self._plans.release_session_turn_leases(turn_holders)

    # -- the audit trail -----------------------------------------------------------------------

    async def handoff_history(self, session_id: str) -> list[Row]:
        self._plans.handoff_history(session_id)
        return []

    async def prune_handoff_events(
        self, older_than_seconds: float, *, dry_run: bool = False
    ) -> int:
        self._plans.prune_handoff_events(older_than_seconds, dry_run)
        return 0

    # -- reads ---------------------------------------------------------------------------------

    async def list_pending_handoffs(self) -> list[Row]:
        return []

    async def list_handoffs(
        self,
        state: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        search: str | None = None,
    ) -> list[Row]:
        self._plans.list_handoffs(state, limit, after, search)
        return []

    async def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]:
        ids = require_identifiers("session_ids", session_ids)  # an iterator is read once
        self._plans.get_transcripts(ids)
        return {session_id: [] for session_id in ids}

    async def get_session(self, session_id: str) -> Row | None:
        self._plans.get_session(session_id)
        return None

    async def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]:
        self._plans.handoff_events_after(after, limit)
        return []

    async def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]:
        self._plans.recent_handoff_failures(limit)
        return []

    async def last_handoff_event_id(self) -> int:
        return 0

    async def list_sessions(
        self,
        *,
        source: str | None = None,
        handoff_state: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        self._plans.list_sessions(source, handoff_state, since, limit)
        return []

    async def has_pending_handoffs(self) -> bool:
        return False

    async def get_handoff_state(self, session_id: str) -> Row | None:
        self._plans.get_handoff_state(session_id)
        return None

    async def handoff_change_token(self) -> int | None:
        return None

    async def handoff_stats(self) -> Row:
        return {
            "counts": {state.value: 0 for state in HandoffState},
            "oldest_pending_age_seconds": None,
            "running_by_owner": [],
            "failures_last_hour": {"count": 0, "top_errors": []},
        }


if TYPE_CHECKING:
    _surface: type[AsyncStore] = AbsentStore
