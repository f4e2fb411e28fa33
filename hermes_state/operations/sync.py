"""``SyncOperations``: the operations as methods of a synchronous store, generated
from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit;
change the declaration and run that command (a test fails while this file is stale).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .sync_sessions import SyncSessionOperations

if TYPE_CHECKING:
    from ..plans import ClaimBatch, Plan, PlanBook, Row

T = TypeVar("T")

__all__ = ["SyncOperations"]


class SyncOperations(SyncSessionOperations):
    """The operations of a synchronous store: each runs its plan through ``_run``."""

    _plans: PlanBook

    def _run(self, plan: Plan[T]) -> T:
        raise NotImplementedError

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
        return self._run(self._plans.create_session(session_id=session_id, source=source, **fields))

    def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """``create_session`` with upstream's defaults: source ``'unknown'``, an optional
        ``model``.
        """
        return self._run(
            self._plans.ensure_session(session_id=session_id, source=source, model=model, **fields)
        )

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
        return self._run(
            self._plans.append_message(session_id=session_id, role=role, content=content, **fields)
        )

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
        return self._run(
            self._plans.get_messages(
                session_id=session_id,
                include_inactive=include_inactive,
                include_compacted=include_compacted,
                limit=limit,
                offset=offset,
                latest=latest,
                after_id=after_id,
            )
        )

    def count_messages(self, session_id: str) -> int:
        """How many messages ``get_messages`` would return, counted in the database (0 for an
        unknown session).
        """
        return self._run(self._plans.count_messages(session_id=session_id))

    def message_count(self, session_id: str | None = None) -> int:
        """Upstream's count: every message row of the session (rewound and compacted ones
        too, unlike ``count_messages``), or of every session when no id is given.
        """
        return self._run(self._plans.message_count(session_id=session_id))

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
        return self._run(
            self._plans.session_count(
                source=source,
                sources=sources,
                cwd_prefix=cwd_prefix,
                min_message_count=min_message_count,
                include_archived=include_archived,
                archived_only=archived_only,
                exclude_children=exclude_children,
                exclude_sources=exclude_sources,
                scope=scope,
                requester_user_id=requester_user_id,
            )
        )

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """NULL/completed/failed -> pending. False when one is in flight or the id is unknown."""
        return self._run(self._plans.request_handoff(session_id=session_id, platform=platform))

    def retry_handoff(self, session_id: str, platform: str | None = None) -> bool:
        """failed -> pending again (same platform unless given). False unless it failed."""
        return self._run(self._plans.retry_handoff(session_id=session_id, platform=platform))

    def claim_handoff(self, session_id: str) -> bool:
        """pending -> running, atomically: of concurrent claimers exactly one gets True."""
        return self._run(self._plans.claim_handoff(session_id=session_id))

    def claim_pending_handoffs(self, limit: int, *, platform: str | None = None) -> list[Row]:
        """Claim up to ``limit`` pending rows (of ``platform``, when given), oldest
        ``started_at`` first, in one statement where the backend allows; returns them as
        claimed (running, owner, lease, attempt). Concurrent callers get disjoint rows.
        """
        return self._run(self._plans.claim_pending_handoffs(limit=limit, platform=platform))

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
        return self._run(
            self._plans.claim_handoffs(
                session_ids=session_ids, turn_holders=turn_holders, turn_seconds=turn_seconds
            )
        )

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
        return self._run(
            self._plans.claim_next_handoffs(
                limit=limit, exclude=exclude, turn_gateway=turn_gateway, turn_seconds=turn_seconds
            )
        )

    def complete_handoff(self, session_id: str) -> bool:
        """running -> completed, clearing the error. With an owner, only this store's claim."""
        return self._run(self._plans.complete_handoff(session_id=session_id))

    def fail_handoff(
        self, session_id: str, error: object, *, only_states: Sequence[str] | None = None
    ) -> bool:
        """pending/running -> failed with ``str(error)[:500]``; ``only_states`` narrows the
        states it may fail from (a waiter passes ``("pending",)`` so a claimed row is never
        failed under its gateway). With an owner, a running row only under this store's claim.
        """
        return self._run(
            self._plans.fail_handoff(session_id=session_id, error=error, only_states=only_states)
        )

    def complete_handoffs(self, session_ids: Iterable[str]) -> dict[str, bool]:
        """Complete many running rows at once (one statement on PostgreSQL, one transaction
        elsewhere), each fenced like :meth:`complete_handoff` on its own claim's attempt.
        Returns ``{id: completed}``: False for each row refused (not running, not this
        store's claim).
        """
        return self._run(self._plans.complete_handoffs(session_ids=session_ids))

    def fail_handoffs(self, errors: Mapping[str, object]) -> dict[str, bool]:
        """Fail many running rows at once, ``{id: error}``, each error stored as
        ``str(error)[:500]`` and each row fenced like :meth:`fail_handoff`. Returns
        ``{id: failed}``.
        """
        return self._run(self._plans.fail_handoffs(errors=errors))

    def finish_handoffs(
        self, outcomes: Mapping[str, object], *, release_turns: Mapping[str, str] | None = None
    ) -> dict[str, bool]:
        """Finish many running rows at once: ``{id: None}`` completes a row, ``{id: error}``
        fails it with ``str(error)[:500]``, each fenced like :meth:`complete_handoff`; in the
        same transaction (one statement on PostgreSQL) give up the turn leases
        ``release_turns`` names (``{session id: holder}``). Returns ``{id: finished}``.
        """
        return self._run(
            self._plans.finish_handoffs(outcomes=outcomes, release_turns=release_turns)
        )

    def renew_handoff_leases(self, session_ids: Iterable[str]) -> list[str]:
        """Extend the leases this owner still holds; returns the ids renewed."""
        return self._run(self._plans.renew_handoff_leases(session_ids=session_ids))

    def reclaim_stale_running_handoffs(self, error: object) -> list[str]:
        """Fail the running rows no live gateway holds, in one transaction; returns their ids.

        Rows without a lease, with an expired lease, or claimed by this store's owner (its
        previous life died). They are failed, never re-queued: the dead gateway may already
        have delivered.
        """
        return self._run(self._plans.reclaim_stale_running_handoffs(error=error))

    def reclaim_expired_handoffs(self, error: object) -> list[str]:
        """Fail running rows whose lease has expired, whoever holds them; returns their ids."""
        return self._run(self._plans.reclaim_expired_handoffs(error=error))

    def reclaim_running_handoffs(self, error: object) -> list[str]:
        """Fail every running row, leased or not: for an operator who knows no gateway lives."""
        return self._run(self._plans.reclaim_running_handoffs(error=error))

    def preview_reclaim(self, scope: str = "stale") -> list[Row]:
        """What a reclaim in ``scope`` ("stale", "expired", "all") would fail, and why."""
        return self._run(self._plans.preview_reclaim(scope=scope))

    def has_live_session_turn_lease(self, session_id: str) -> bool:
        """Whether anyone holds the conversation's turn lease unexpired now."""
        return self._run(self._plans.has_live_session_turn_lease(session_id=session_id))

    def refresh_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend ``holder``'s lease to ``ttl_seconds`` from now; False when it lost it."""
        return self._run(
            self._plans.refresh_session_turn_lease(
                session_id=session_id, holder=holder, ttl_seconds=ttl_seconds
            )
        )

    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Give up ``holder``'s lease; a release by anyone else changes nothing."""
        return self._run(
            self._plans.release_session_turn_lease(session_id=session_id, holder=holder)
        )

    def refresh_session_turn_leases(
        self, turn_holders: Mapping[str, str], *, ttl_seconds: float = 300.0
    ) -> list[str]:
        """Extend, in one call, the leases the holders of ``{session id: holder}`` still hold
        to ``ttl_seconds`` from now; returns the sessions whose lease was kept.
        """
        return self._run(
            self._plans.refresh_session_turn_leases(
                turn_holders=turn_holders, ttl_seconds=ttl_seconds
            )
        )

    def release_session_turn_leases(self, turn_holders: Mapping[str, str]) -> None:
        """Give up, in one call, the leases the holders of ``{session id: holder}`` hold."""
        return self._run(self._plans.release_session_turn_leases(turn_holders=turn_holders))

    def handoff_history(self, session_id: str) -> list[Row]:
        """Every recorded transition of the session, oldest first."""
        return self._run(self._plans.handoff_history(session_id=session_id))

    def prune_handoff_events(self, older_than_seconds: float, *, dry_run: bool = False) -> int:
        """Delete events older than this; returns how many went (would go, with dry_run)."""
        return self._run(
            self._plans.prune_handoff_events(older_than_seconds=older_than_seconds, dry_run=dry_run)
        )

    def list_pending_handoffs(self) -> list[Row]:
        """Pending rows, whole, oldest ``started_at`` first."""
        return self._run(self._plans.list_pending_handoffs())

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
        return self._run(
            self._plans.list_handoffs(state=state, limit=limit, after=after, search=search)
        )

    def get_transcripts(self, session_ids: Iterable[str]) -> dict[str, list[Row]]:
        """:meth:`get_messages` of many sessions in one statement (one read transaction on
        SQLite): ``{id: transcript}`` for every id given.
        """
        return self._run(self._plans.get_transcripts(session_ids=session_ids))

    def get_session(self, session_id: str) -> Row | None:
        """The session's whole row (every column), or None for an unknown id."""
        return self._run(self._plans.get_session(session_id=session_id))

    def handoff_events_after(self, after: int = 0, *, limit: int = 100) -> list[Row]:
        """Audit events with an id above ``after``, oldest first: what changed since then, by
        any process (each transition records one).
        """
        return self._run(self._plans.handoff_events_after(after=after, limit=limit))

    def recent_handoff_failures(self, *, limit: int = 10) -> list[Row]:
        """The newest failure events of the audit trail, newest first (``detail``: the error)."""
        return self._run(self._plans.recent_handoff_failures(limit=limit))

    def last_handoff_event_id(self) -> int:
        """The newest audit event's id (0 when there is none): where a change feed starts."""
        return self._run(self._plans.last_handoff_event_id())

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
        return self._run(
            self._plans.list_sessions(
                source=source, handoff_state=handoff_state, since=since, limit=limit
            )
        )

    def has_pending_handoffs(self) -> bool:
        """A cheap probe: is any row pending? (Uses the partial index; O(1) in sessions.)"""
        return self._run(self._plans.has_pending_handoffs())

    def get_handoff_state(self, session_id: str) -> Row | None:
        """``{"state", "platform", "error"}`` of the session, or None for an unknown id."""
        return self._run(self._plans.get_handoff_state(session_id=session_id))

    def handoff_stats(self) -> Row:
        """Counts per state, oldest pending age, running rows per owner with their leases, and
        the failures of the last hour with their most common errors.
        """
        return self._run(self._plans.handoff_stats())
