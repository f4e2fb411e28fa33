"""The store surface, declared once: every operation's name, parameters, result and docstring."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from .execution import WriteConnection
    from .plans import ClaimBatch, Row

from .surface_sessions import SessionSurface

__all__ = ["HAND_WRITTEN", "AsyncStore", "SessionSurface", "Store"]

T = TypeVar("T")

# Every operation is declared once, here and in surface_sessions.SessionSurface (Store's base).
# tools/generate_operations.py writes from these classes
# hermes_state/operations/: the asyncio Protocol (AsyncStore) and the methods SessionDB,
# NativeAsyncSessionDB and AbsentStore inherit, each running the PlanBook plan of the same name
# (AsyncSessionDB forwards any method to a thread). Only the operations in HAND_WRITTEN are
# written by each store. tests/package/test_surface.py holds every store to the declaration.

#: Operations each store writes itself: the life cycle, the raw write, the turn lease taken
#: with patience (sleeping differs between sync and asyncio) and the change token (the
#: runner's, not a plan's).
HAND_WRITTEN: Final = frozenset(
    {
        "close",
        "_execute_write",
        "try_acquire_session_turn_lease",
        "acquire_session_turn_lease",
        "handoff_change_token",
        # Retention: a prune is a schedule of transactions, vacuum runs outside any, and the
        # start-up maintenance calls the store's own (replaceable) methods.
        "prune_sessions",
        "prune_report",
        "vacuum",
        "maybe_auto_prune_and_vacuum",
    }
)


class Store(SessionSurface, Protocol):
    """The synchronous store: sessions, transcripts, the handoff state machine, leases, the
    audit trail and reads, one transaction per call, and (from :class:`SessionSurface`)
    upstream's session and message operations. :class:`~hermes_state.SessionDB` is the
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
        """Close every connection the store holds; the store cannot be used afterwards."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        """Run ``fn(conn)`` in one write transaction: committed on return, rolled back on error,
        run again whole on lock contention. ``conn.execute`` takes SQLAlchemy statements or raw
        SQL in the driver's paramstyle (``?`` on SQLite).
        """
        ...

    # -- sessions and transcript ------------------------------------------------------------

    def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Create the session, or fill in an existing one; returns the id.

        ``fields`` are upstream's: ``model``, ``model_config`` (a dict or its JSON text),
        ``system_prompt`` (kept once in ``system_prompts``, by hash), ``user_id``,
        ``parent_session_id``, the gateway peer (``session_key``, ``chat_id``, ``chat_type``,
        ``thread_id``, ``display_name``, ``origin_json``), ``cwd``, ``git_repo_root``,
        ``git_branch``, ``profile_name``; and ``title``, ``started_at``, ``ended_at``,
        ``end_reason``. On an existing id nothing already set changes: NULL columns take the new
        values, the placeholder source ``'unknown'`` the real one. A child (``parent_session_id``)
        takes its parent's cwd, git context and profile where its own are NULL (the profile only
        within the same ``agent:<profile>:`` key namespace), and a compression continuation
        also its parent's gateway peer.
        """
        ...

    def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """``create_session`` with upstream's defaults: source ``'unknown'``, an optional
        ``model``.
        """
        ...

    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | list[Any] | dict[str, Any] | None = None,
        **fields: Any,
    ) -> int:
        """Append a live message to the session's transcript; returns the message id.

        ``content`` is text, or multimodal content (a list of parts, or a dict) stored as
        upstream stores it (a NUL, ``json:`` and its JSON) and read back as the parts; lone
        surrogates in text are stored as U+FFFD, as upstream stores them. ``fields`` are
        upstream's message keywords (``tool_name``, ``tool_calls`` as a list/dict or its JSON
        text, ``tool_call_id``, ``token_count``, ``finish_reason``, the reasoning fields,
        ``platform_message_id``, ``observed``, ``_compressed_summary``, ...; see
        docs/library.md). The session's ``message_count`` and ``tool_call_count`` move in the
        same transaction. A session compression ended (``ended_at`` set, ``end_reason =
        'compression'``) takes no more messages: ``CompressionSessionClosedError``.

        With ``turn_lease_holder`` (and ``turn_lease_ttl_seconds``, default 300), the write is
        fenced on the conversation's turn lease, checked in its own transaction: if no lease
        row exists, or another holder has it, ``SessionTurnLeaseLostError`` is raised at once
        (never retried) and nothing is written; the holder's own lease, expired but not taken
        over, is extended to now + ttl (at least 0.1 s). A live lease is not extended.
        """
        ...

    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        include_compacted: bool = False,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
    ) -> list[Row]:
        """The live transcript (rewound turns left out), oldest first: one dict per message
        with every column the table has, ``tool_calls`` decoded from JSON.

        Upstream's switches: ``include_inactive`` adds the rewound rows; ``include_compacted``
        reads the display instead (the live rows and those compaction archived, each message
        of several compaction generations once). ``limit`` and ``offset`` page it from the
        oldest, or from the newest with ``latest`` (the page still oldest first);
        ``after_id`` returns the rows after that id (not with ``latest``, ``offset`` or
        ``include_compacted``: ``InvalidInputError``). Paged reads cost what they return, but
        ``include_compacted`` reads the whole display to deduplicate it, as upstream does.
        """
        ...

    def count_messages(self, session_id: str) -> int:
        """How many messages ``get_messages`` would return, counted in the database (0 for an
        unknown session).
        """
        ...

    def message_count(self, session_id: str | None = None) -> int:
        """Upstream's count: every message row of the session (rewound and compacted ones
        too, unlike ``count_messages``), or of every session when no id is given.
        """
        ...

    def session_count(
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
    ) -> int:
        """How many sessions :meth:`list_sessions_rich` would list under the same filters, so
        a "load more" total agrees with the pages: archived sessions only with
        ``include_archived`` (or only them, ``archived_only``), sub-agent runs and
        compression continuations left out with ``exclude_children``, only the requester's
        own Telegram DMs with ``scope="own"``; hidden sessions count.
        """
        ...

    # -- handoff transitions ----------------------------------------------------------------

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """NULL/completed/failed -> pending. False when one is in flight or the id is unknown."""
        ...

    def retry_handoff(self, session_id: str, platform: str | None = None) -> bool:
        """failed -> pending again (same platform unless given). False unless it failed."""
        ...

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running, atomically: of concurrent claimers exactly one gets True."""
        ...

    def claim_pending_handoffs(self, limit: int, *, platform: str | None = None) -> list[Row]:
        """Claim up to ``limit`` pending rows (of ``platform``, when given), oldest
        ``started_at`` first, in one statement where the backend allows; returns them as
        claimed (running, owner, lease, attempt). Concurrent callers get disjoint rows.
        """
        ...

    def claim_handoffs(
        self,
        session_ids: Iterable[str],
        *,
        turn_holders: Mapping[str, str] | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        """Claim those of ``session_ids`` that are still pending, in one statement where the
        backend allows (one transaction elsewhere); rows another claimer holds are left to it.

        With ``turn_holders`` (``{session id: holder}``, one for every id) a row is claimed
        only together with its conversation's turn lease, taken for that holder for
        ``turn_seconds`` as :meth:`try_acquire_session_turn_lease` takes it; of several rows of
        one conversation only the oldest is tried, and a row whose turn is held elsewhere stays
        pending. Returns the rows claimed, as claimed, and the ids left for their turn.
        """
        ...

    def claim_next_handoffs(
        self,
        limit: int,
        *,
        exclude: Iterable[str] = (),
        turn_gateway: str | None = None,
        turn_seconds: float = 300.0,
    ) -> ClaimBatch:
        """Claim up to ``limit`` of the oldest pending rows no other claimer holds, leaving
        out the ids in ``exclude`` (rows the caller still delivers), as :meth:`claim_handoffs`
        claims given rows (one statement on PostgreSQL). With ``turn_gateway``, each row's turn
        lease is taken for the holder :func:`~hermes_state.plans.delivery_holder` names for a
        delivery by that gateway.
        """
        ...

    def complete_handoff(self, session_id: str) -> bool:
        """running -> completed, clearing the error. With an owner, only this store's claim."""
        ...

    def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        """pending/running -> failed with ``str(error)[:500]``; ``only_states`` narrows the
        states it may fail from (a waiter passes ``("pending",)`` so a claimed row is never
        failed under its gateway). With an owner, a running row only under this store's claim.
        """
        ...

    def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]:
        """Complete many running rows at once (one statement on PostgreSQL, one transaction
        elsewhere), each fenced like :meth:`complete_handoff` on its own claim's attempt.
        Returns ``{id: completed}``: False for each row refused (not running, not this
        store's claim).
        """
        ...

    def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]:
        """Fail many running rows at once, ``{id: error}``, each error stored as
        ``str(error)[:500]`` and each row fenced like :meth:`fail_handoff`. Returns
        ``{id: failed}``.
        """
        ...

    def finish_handoffs(
        self, outcomes: Mapping[str, object], *, release_turns: Mapping[str, str] | None = None
    ) -> dict[str, bool]:
        """Finish many running rows at once: ``{id: None}`` completes a row, ``{id: error}``
        fails it with ``str(error)[:500]``, each fenced like :meth:`complete_handoff`; in the
        same transaction (one statement on PostgreSQL) give up the turn leases
        ``release_turns`` names (``{session id: holder}``). Returns ``{id: finished}``.
        """
        ...

    def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        """Extend the leases this owner still holds; returns the ids renewed."""
        ...

    def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        """Fail the running rows no live gateway holds, in one transaction; returns their ids.

        Rows without a lease, with an expired lease, or claimed by this store's owner (its
        previous life died). They are failed, never re-queued: the dead gateway may already
        have delivered.
        """
        ...

    def reclaim_expired_handoffs(self, error: object) -> list[str]:
        """Fail running rows whose lease has expired, whoever holds them; returns their ids."""
        ...

    def reclaim_running_handoffs(self, error: object) -> list[str]:
        """Fail every running row, leased or not: for an operator who knows no gateway lives."""
        ...

    def preview_reclaim(self, scope: str = "stale") -> list[Row]:
        """What a reclaim in ``scope`` ("stale", "expired", "all") would fail, and why."""
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
        """Take the conversation's turn lease for ``holder`` for ``ttl_seconds``.

        Atomic across processes: of concurrent takers exactly one gets True. An expired lease
        is taken over; a lease ``holder`` already holds answers True. With ``patience_s``,
        a held lease is asked for again until that many seconds have passed. The key is the
        conversation (the lineage root of a compressed session), as upstream keys it.
        """
        ...

    def acquire_session_turn_lease(
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
    ) -> bool:
        """Wait for the conversation's turn lease, as upstream's blocking acquire: True once
        ``holder`` has it; False when ``wait_seconds`` pass or ``should_abort()`` says so
        (asked before every attempt). No database lock is held while waiting.

        Another holder means a poll every ``poll_interval_seconds``, with ``on_wait(elapsed)``
        called on the first miss and then every ``wait_notice_interval_seconds``, each gap
        ``wait_notice_backoff`` times the last, at most ``wait_notice_max_interval_seconds``
        (0: no ceiling). A busy database (``DatabaseBusyError`` once the store's own
        ``busy_patience`` is spent) calls ``on_contended()`` instead and is retried within
        0.15 s; any other error is raised. What a callback raises is logged and ignored.
        ``acquire_patience_s`` is accepted for upstream's callers; each attempt waits for a
        locked database as every call of the store does.
        """
        ...

    def has_live_session_turn_lease(self, session_id: str) -> bool:
        """Whether anyone holds the conversation's turn lease unexpired now."""
        ...

    def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend ``holder``'s lease to ``ttl_seconds`` from now; False when it lost it."""
        ...

    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Give up ``holder``'s lease; a release by anyone else changes nothing."""
        ...

    def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]:
        """Extend, in one call, the leases the holders of ``{session id: holder}`` still hold
        to ``ttl_seconds`` from now; returns the sessions whose lease was kept.
        """
        ...

    def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None:
        """Give up, in one call, the leases the holders of ``{session id: holder}`` hold."""
        ...

    # -- the audit trail --------------------------------------------------------------------

    def handoff_history(self, session_id: str) -> list[Row]:
        """Every recorded transition of the session, oldest first."""
        ...

    def prune_handoff_events(self, older_than_seconds: float, *, dry_run: bool = False) -> int:
        """Delete events older than this; returns how many went (would go, with dry_run)."""
        ...

    # -- reads ------------------------------------------------------------------------------

    def list_pending_handoffs(self) -> list[Row]:
        """Pending rows, whole, oldest ``started_at`` first."""
        ...

    def list_handoffs(
        self,
        state: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        search: str | None = None,
    ) -> list[Row]:
        """Rows in ``state`` (None: every row ever handed off), oldest ``started_at`` first;
        ``after`` a session id: the page that follows it; ``search``: ids containing it.
        """
        ...

    def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]:
        """:meth:`get_messages` of many sessions in one statement (one read transaction on
        SQLite): ``{id: transcript}`` for every id given.
        """
        ...

    def get_session(self, session_id: str) -> Row | None:
        """The session's whole row (every column), or None for an unknown id."""
        ...

    # -- the audit trail, state and stats -------------------------------------------------

    def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]:
        """Audit events with an id above ``after``, oldest first: what changed since then, by
        any process (each transition records one).
        """
        ...

    def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]:
        """The newest failure events of the audit trail, newest first (``detail``: the error)."""
        ...

    def last_handoff_event_id(self) -> int:
        """The newest audit event's id (0 when there is none): where a change feed starts."""
        ...

    def list_sessions(
        self,
        *,
        source: str | None = None,
        handoff_state: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        """Whole session rows, newest ``started_at`` first, optionally filtered by source,
        handoff state and start time (epoch seconds, inclusive), at most ``limit``.
        """
        ...

    def has_pending_handoffs(self) -> bool:
        """A cheap probe: is any row pending? (Uses the partial index; O(1) in sessions.)"""
        ...

    def get_handoff_state(self, session_id: str) -> Row | None:
        """``{"state", "platform", "error"}`` of the session, or None for an unknown id."""
        ...

    def handoff_change_token(self) -> int | None:
        """A number that changes whenever another connection commits (SQLite); None on servers.

        A watcher that saw nothing left to claim may skip its next listing while this number
        stays the same: the cheap idle poll across processes.
        """
        ...

    def handoff_stats(self) -> Row:
        """Counts per state, oldest pending age, running rows per owner with their leases, and
        the failures of the last hour with their most common errors.
        """
        ...


from .operations import AsyncStore  # noqa: E402  (generated from Store, above)
