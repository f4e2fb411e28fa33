"""The store surface, declared once: every operation's name, parameters, result and docstring."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from os import PathLike

    from sqlalchemy.engine import URL

    from .execution import WriteConnection
    from .plans import ClaimBatch, Row

__all__ = ["HAND_WRITTEN", "AsyncStore", "Store"]

T = TypeVar("T")

# Every operation is declared once, here. tools/generate_operations.py writes from this class
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
    }
)


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
        self, session_id: str, role: str, content: str | None = None, **fields: Any
    ) -> int:
        """Append a live message to the session's transcript; returns the message id.

        ``fields`` are upstream's message keywords (``tool_name``, ``tool_calls`` as a list/dict
        or its JSON text, ``tool_call_id``, ``token_count``, ``finish_reason``, the reasoning
        fields, ``platform_message_id``, ``observed``, ...; see docs/library.md). The session's
        ``message_count`` and ``tool_call_count`` move in the same transaction.
        """
        ...

    def get_messages(self, session_id: str) -> list[Row]:
        """The live transcript (rewound turns left out), oldest first: one dict per message
        with every column the table has, ``tool_calls`` decoded from JSON.
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

    def session_count(self, source: str | None = None) -> int:
        """How many sessions there are, or how many have this ``source``."""
        ...

    # -- session writes ---------------------------------------------------------------------

    def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session now for ``end_reason``. An ended session keeps its first end (a
        compression split stays ``'compression'``); ``reopen_session`` first to end it anew.
        """
        ...

    def reopen_session(self, session_id: str) -> None:
        """Make an ended session live again: ``ended_at`` and ``end_reason`` cleared."""
        ...

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Record the session's assembled system prompt (None: none), kept once in
        ``system_prompts`` by its SHA-256; a prompt no session uses any more is deleted.
        """
        ...

    def update_session_model(
        self, session_id: str, model: str, provider: str | None = None
    ) -> None:
        """After a mid-session model switch: the session runs ``model`` (and ``provider``,
        merged into ``model_config``, which also loses its ``browser_model_lock``); its prompt
        snapshot, which names the old model, is dropped to be rebuilt. No-op for an unknown id.
        """
        ...

    def update_token_counts(
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
    ) -> None:
        """Account one API call's usage (``absolute``: set the session's cumulative totals).

        Counters and the estimate are added (set); a billed cost is added (set) when given;
        status fields replace the stored ones when given; the route (model, billing provider,
        base URL, mode) fills NULLs, except that the first accounted call's route replaces the
        one the session was created with. A missing session is created with source
        ``'unknown'``. Each incremental call with usage is also added to its
        ``session_model_usage`` row (per session, model, route and task).
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

    # -- titles -----------------------------------------------------------------------------

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Give the session a title the user chose (``title_source`` 'user'), cleaned by
        ``sanitize_title``; an empty title clears it. Titles are unique: one another session
        holds raises ``InvalidInputError`` (a ``ValueError``) naming it. False for an unknown id.
        """
        ...

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title, or None (untitled, or an unknown id)."""
        ...

    def get_session_by_title(self, title: str) -> Row | None:
        """The whole row of the session titled exactly ``title``, or None."""
        ...

    def resolve_session_by_title(self, title: str) -> str | None:
        """The id ``title`` names, preferring its newest numbered continuation
        (``"title #N"``, by ``started_at``) over the exact title; None when neither exists.
        """
        ...

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """The title a continuation of ``base_title`` gets: the base itself (any ``" #N"``
        suffix removed) while no session holds it, else ``"base #N"`` one above the highest
        number in use (the unnumbered original counts as #1).
        """
        ...

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

    # -- session flags, ids and meta --------------------------------------------------------

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive (or unarchive) the session and its whole compression lineage: every ancestor
        reached through parents that ended by compression and every continuation below them.
        Archiving only hides; messages stay. False for an unknown id.
        """
        ...

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin (or unpin) the session's compression lineage. Pinning also unhides it, except
        upstream's canonical Bot Chat (a hidden session titled "Bot Chat"), which stays hidden.
        False for an unknown id.
        """
        ...

    def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        """Hide (or show) the session's compression lineage in default listings; a hidden
        session can still be resumed. False for an unknown id.
        """
        ...

    def set_session_read(self, session_id: str, read: bool = True) -> bool:
        """Mark the session's compression lineage read (``last_read_at`` = now) or unread
        (``last_read_at`` = 0.0): a watermark, unread while activity is newer than it (NULL:
        never tracked, which reads as read). False for an unknown id.
        """
        ...

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """The id of the session named exactly, else of the one session whose id starts with
        the prefix (``%`` and ``_`` match only themselves), else None: no match, or several.
        """
        ...

    def resolve_resume_session_id(self, session_id: str | None) -> str | None:
        """The session a resume of ``session_id`` should load: first the live tip of its
        compression chain (see ``get_compression_chain``), then, below the tip, the deepest
        session holding messages along the newest child that is no fork (branch, delegate run,
        reset successor or tool session), at most 32 steps down. The tip when none holds
        messages; an unknown id, ``""`` and None come back as they are.
        """
        ...

    def get_compression_chain(self, session_id: str | None) -> list[str]:
        """The compression chain from ``session_id`` forward to its live tip, oldest first:
        at each session that ended by compression, its continuation (a child that is no
        branch, delegate run, reset successor or tool session), preferring one compressed
        again, then a live one, then the most recently active. ``[session_id]`` when nothing
        continues it (an unknown id too); ``[]`` for ``""`` or None.
        """
        ...

    def get_compression_tip(self, session_id: str | None) -> str | None:
        """The last session of ``get_compression_chain(session_id)``: where the conversation
        lives now. ``session_id`` itself when nothing continues it (``""`` and None too).
        """
        ...

    def get_compression_lineage(self, session_id: str | None) -> list[str]:
        """Every segment of the session's conversation, oldest first: up through parents that
        ended by compression to the root, then down through the earliest started continuation
        of each compressed segment. ``[session_id]`` for a branch or delegate run of its
        parent, or when the walk does not pass through it; ``[]`` for an unknown id.
        """
        ...

    def delete_session(
        self,
        session_id: str,
        sessions_dir: str | PathLike[str] | None = None,
        expected_delete_ids: Iterable[str] | None = None,
    ) -> bool:
        """Delete the session, its messages and usage rows, and its delegate runs (sessions
        whose ``_delegate_from`` marker names it, or children of it carrying one, and theirs in
        turn); every other child (branches, compression continuations) stays, detached
        (``parent_session_id`` NULL). Prompts no session uses any more go too; the audit trail
        stays. With ``sessions_dir``, the sessions' upstream transcript files there are removed
        after the commit. With ``expected_delete_ids``, nothing is deleted (False) unless the
        session and its delegate runs are exactly those ids. False for an unknown id.

        Refused with ``SessionInUseError``, deleting nothing, while any of these sessions has a
        handoff pending or running (a gateway may be delivering it) or a live turn lease is
        held on its conversation.
        """
        ...

    def delete_sessions(
        self, session_ids: Iterable[str] | None, sessions_dir: str | PathLike[str] | None = None
    ) -> int:
        """``delete_session`` for many sessions in one transaction, all or none: how many of
        ``session_ids`` existed and were deleted (their delegate runs not counted). Unknown ids
        and items that are no id (not a str, or empty) are skipped; the same refusal holds.
        """
        ...

    def get_meta(self, key: str) -> str | None:
        """The value upstream's ``state_meta`` bookkeeping holds under ``key``, or None."""
        ...

    def set_meta(self, key: str, value: str | None) -> None:
        """Store ``value`` under ``key`` in ``state_meta``, replacing what the key held."""
        ...


from .operations import AsyncStore  # noqa: E402  (generated from Store, above)
