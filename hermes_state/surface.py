"""The store surface, declared once: the sync and the asyncio Protocol every store implements."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from .execution import WriteConnection
    from .plans import ClaimBatch, Row

__all__ = ["AsyncStore", "Store"]

T = TypeVar("T")

# A store method is declared here twice, in Store and in AsyncStore, then written in every
# store: SessionDB, NativeAsyncSessionDB and AbsentStore (AsyncSessionDB forwards any method).
# tests/test_surface.py fails until all of them agree on its name, parameters and defaults, and
# mypy holds each store class to its Protocol.


class Store(Protocol):
    """The synchronous store: sessions, transcripts, the handoff state machine, leases, the
    audit trail and reads, one transaction per call. :class:`~hermes_state.SessionDB` is the
    implementation; its methods document the details.
    """

    @property
    def url(self) -> URL:
        """The database, as a SQLAlchemy URL."""
        ...

    @property
    def where(self) -> str:
        """The database for messages: the file path, or the URL with its password hidden."""
        ...

    @property
    def owner(self) -> str | None:
        """The gateway this store claims for (None: the only gateway of its database)."""
        ...

    @property
    def lease_seconds(self) -> float | None:
        """How long a claim holds without renewal (None: claims never expire)."""
        ...

    @property
    def actor(self) -> str:
        """Who the audit trail records as having made each change."""
        ...

    # -- life cycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection; the store cannot be used afterwards."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        """``fn(conn)`` in one write transaction, retried whole on lock contention."""
        ...

    # -- sessions and transcript ------------------------------------------------------------

    def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Insert a session (an existing one keeps its values); returns the id."""
        ...

    def ensure_session(self, session_id: str, source: str = "unknown", **fields: Any) -> str:
        """``create_session`` with a default source."""
        ...

    def append_message(
        self, session_id: str, role: str, content: str | None = None, **fields: Any
    ) -> int:
        """Append a live message to the transcript; returns its id."""
        ...

    def get_messages(self, session_id: str) -> list[Row]:
        """The live transcript, oldest first."""
        ...

    def count_messages(self, session_id: str) -> int:
        """How many messages ``get_messages`` would return (0 for an unknown session)."""
        ...

    # -- handoff transitions ----------------------------------------------------------------

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """NULL/completed/failed -> pending; False when in flight or unknown."""
        ...

    def retry_handoff(self, session_id: str, platform: str | None = None) -> bool:
        """failed -> pending again; False unless it failed."""
        ...

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running, a compare-and-swap: one of concurrent claimers wins."""
        ...

    def claim_pending_handoffs(self, limit: int, *, platform: str | None = None) -> list[Row]:
        """Claim up to ``limit`` pending rows, oldest first; returns them as claimed."""
        ...

    def claim_handoffs(
        self,
        session_ids: Iterable[str],
        *,
        turn_holders: Mapping[str, str] | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        """Claim those of the given rows still pending, each with its conversation's turn
        lease when ``turn_holders`` names a holder per id; the rest are left alone."""
        ...

    def claim_next_handoffs(
        self,
        limit: int,
        *,
        exclude: Iterable[str] = (),
        turn_gateway: str | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        """Claim up to ``limit`` of the oldest pending rows no other claimer holds (not those
        in ``exclude``), each with its turn lease for ``turn_gateway``'s delivery holder."""
        ...

    def complete_handoff(self, session_id: str) -> bool:
        """running -> completed (fenced on this store's claim when it has an owner)."""
        ...

    def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        """pending/running (or only ``only_states``) -> failed with the error."""
        ...

    def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]:
        """Complete many running rows at once; ``{id: completed}``."""
        ...

    def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]:
        """Fail many running rows at once, ``{id: error}``; ``{id: failed}``."""
        ...

    def finish_handoffs(
        self, outcomes: Mapping[str, object], *, release_turns: Mapping[str, str] | None = None
    ) -> dict[str, bool]:
        """Complete (``None``) or fail (an error) many running rows at once, each fenced on its
        own claim, giving up the turn leases ``release_turns`` names in the same transaction."""
        ...

    def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        """Extend the leases this owner still holds; the ids renewed."""
        ...

    def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        """Fail running rows no live gateway holds; their ids."""
        ...

    def reclaim_expired_handoffs(self, error: object) -> list[str]:
        """Fail running rows whose lease expired; their ids."""
        ...

    def reclaim_running_handoffs(self, error: object) -> list[str]:
        """Fail every running row; their ids."""
        ...

    def preview_reclaim(self, scope: str = "stale") -> list[Row]:
        """What a reclaim in ``scope`` would fail, and why."""
        ...

    # -- session turn leases ----------------------------------------------------------------

    def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        """Take the conversation's turn lease for ``holder``; True when it holds it."""
        ...

    def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend ``holder``'s turn lease; False when it lost it."""
        ...

    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Give up ``holder``'s turn lease."""
        ...

    def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]:
        """Extend many turn leases at once (``{session id: holder}``); returns those kept."""
        ...

    def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None:
        """Give up many turn leases at once (``{session id: holder}``)."""
        ...

    # -- the audit trail --------------------------------------------------------------------

    def handoff_history(self, session_id: str) -> list[Row]:
        """The session's recorded transitions, oldest first."""
        ...

    def prune_handoff_events(self, older_than_seconds: float, *, dry_run: bool = False) -> int:
        """Delete (count, with ``dry_run``) events older than this."""
        ...

    # -- reads ------------------------------------------------------------------------------

    def list_pending_handoffs(self) -> list[Row]:
        """Pending rows, whole, oldest first."""
        ...

    def list_handoffs(
        self,
        state: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        search: str | None = None,
    ) -> list[Row]:
        """Handed-off rows (in ``state``), paged by id."""
        ...

    def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]:
        """:meth:`get_messages` of many sessions at once: ``{id: transcript}``."""
        ...

    def get_session(self, session_id: str) -> Row | None:
        """The session's whole row, or None."""
        ...

    def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]:
        """Audit events with an id above ``after``, oldest first."""
        ...

    def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]:
        """The newest failure events, newest first."""
        ...

    def last_handoff_event_id(self) -> int:
        """The newest audit event's id (0: none)."""
        ...

    def list_sessions(
        self,
        *,
        source: str | None = None,
        handoff_state: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        """Session rows, newest first, filtered."""
        ...

    def has_pending_handoffs(self) -> bool:
        """Is any row pending? (cheap)"""
        ...

    def get_handoff_state(self, session_id: str) -> Row | None:
        """``{"state", "platform", "error"}``, or None for an unknown id."""
        ...

    def handoff_change_token(self) -> int | None:
        """A number that moves when another connection commits; None: no such number."""
        ...

    def handoff_stats(self) -> Row:
        """Counts per state, oldest pending age, running rows per owner, recent failures."""
        ...


class AsyncStore(Protocol):
    """:class:`Store`'s methods as coroutine functions, with the same parameters (and
    ``async with`` in place of ``with``): :class:`~hermes_state.NativeAsyncSessionDB`,
    :class:`~hermes_state.AsyncSessionDB` over a store, and the watcher's store of a profile
    that has no database yet (:class:`~hermes_state.absent.AbsentStore`)."""

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

    # -- life cycle -------------------------------------------------------------------------

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T: ...

    # -- sessions and transcript ------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str: ...

    async def ensure_session(
        self, session_id: str, source: str = "unknown", **fields: Any
    ) -> str: ...

    async def append_message(
        self, session_id: str, role: str, content: str | None = None, **fields: Any
    ) -> int: ...

    async def get_messages(self, session_id: str) -> list[Row]: ...

    async def count_messages(self, session_id: str) -> int: ...

    # -- handoff transitions ----------------------------------------------------------------

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

    # -- session turn leases ----------------------------------------------------------------

    async def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool: ...

    async def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool: ...

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None: ...

    async def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]: ...

    async def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None: ...

    # -- the audit trail --------------------------------------------------------------------

    async def handoff_history(self, session_id: str) -> list[Row]: ...

    async def prune_handoff_events(
        self, older_than_seconds: float, *, dry_run: bool = False
    ) -> int: ...

    # -- reads ------------------------------------------------------------------------------

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
