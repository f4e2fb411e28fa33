"""``AsyncSessionOperations``: upstream's session and message operations of an asyncio
store, generated
from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit;
change the declaration and run that command (a test fails while this file is stale).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from os import PathLike

    from ..plans import Plan, PlanBook, Row

T = TypeVar("T")

__all__ = ["AsyncSessionOperations"]


class AsyncSessionOperations:
    """Upstream's session and message operations of an asyncio store."""

    _plans: PlanBook

    async def _run(self, plan: Plan[T]) -> T:
        raise NotImplementedError

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session now for ``end_reason``. An ended session keeps its first end (a
        compression split stays ``'compression'``); ``reopen_session`` first to end it anew.
        """
        return await self._run(
            self._plans.end_session(session_id=session_id, end_reason=end_reason)
        )

    async def reopen_session(self, session_id: str) -> None:
        """Make an ended session live again: ``ended_at`` and ``end_reason`` cleared."""
        return await self._run(self._plans.reopen_session(session_id=session_id))

    async def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Record the session's assembled system prompt (None: none), kept once in
        ``system_prompts`` by its SHA-256; a prompt no session uses any more is deleted.
        """
        return await self._run(
            self._plans.update_system_prompt(session_id=session_id, system_prompt=system_prompt)
        )

    async def update_session_model(
        self, session_id: str, model: str, provider: str | None = None
    ) -> None:
        """After a mid-session model switch: the session runs ``model`` (and ``provider``,
        merged into ``model_config``, which also loses its ``browser_model_lock``); its prompt
        snapshot, which names the old model, is dropped to be rebuilt. No-op for an unknown id.
        """
        return await self._run(
            self._plans.update_session_model(session_id=session_id, model=model, provider=provider)
        )

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
    ) -> None:
        """Account one API call's usage (``absolute``: set the session's cumulative totals).

        Counters and the estimate are added (set); a billed cost is added (set) when given;
        status fields replace the stored ones when given; the route (model, billing provider,
        base URL, mode) fills NULLs, except that the first accounted call's route replaces the
        one the session was created with. A missing session is created with source
        ``'unknown'``. Each incremental call with usage is also added to its
        ``session_model_usage`` row (per session, model, route and task).
        """
        return await self._run(
            self._plans.update_token_counts(
                session_id=session_id,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                model=model,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
                reasoning_tokens=reasoning_tokens,
                estimated_cost_usd=estimated_cost_usd,
                actual_cost_usd=actual_cost_usd,
                cost_status=cost_status,
                cost_source=cost_source,
                pricing_version=pricing_version,
                billing_provider=billing_provider,
                billing_base_url=billing_base_url,
                billing_mode=billing_mode,
                api_call_count=api_call_count,
                absolute=absolute,
            )
        )

    async def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Give the session a title the user chose (``title_source`` 'user'), cleaned by
        ``sanitize_title``; an empty title clears it. Titles are unique: one another session
        holds raises ``InvalidInputError`` (a ``ValueError``) naming it, unless that session is
        an earlier compression segment of this one (it gives the title up) or an archived Bot
        Chat retired by a hidden replacement (it gives up title and provenance). A hidden
        session titled "Bot Chat" (Bot Mode's canonical chat) refuses any other title, an empty
        one included. False for an unknown id, or when another write changed the title first.
        """
        return await self._run(self._plans.set_session_title(session_id=session_id, title=title))

    async def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        """Give the session an automatic title, ``source`` its provenance ('derived', 'llm',
        'branch' or 'branch_fallback'; any other is ``InvalidInputError``). It lands only on an
        untitled session or over a title of strictly lower rank (derived and both branch
        sources 0, llm 1, user 2; a title without provenance counts as the user's): False,
        nothing written, otherwise, and on the canonical Bot Chat whatever its provenance.
        Cleaning and uniqueness are ``set_session_title``'s.
        """
        return await self._run(
            self._plans.set_auto_title(session_id=session_id, title=title, source=source)
        )

    async def get_session_title_source(self, session_id: str) -> str | None:
        """The provenance of the session's title ('user', 'llm', 'derived', ...), or None: no
        title, no provenance recorded, or an unknown id.
        """
        return await self._run(self._plans.get_session_title_source(session_id=session_id))

    async def set_session_title_source(self, session_id: str, source: str) -> bool:
        """Record ``source`` ('derived', 'llm' or 'user'; any other is ``InvalidInputError``)
        as the provenance of the session's title, its text unchanged: a title carried over to a
        continuation keeps the original's authority. False when the session has no title or
        the id is unknown.
        """
        return await self._run(
            self._plans.set_session_title_source(session_id=session_id, source=source)
        )

    async def get_session_title(self, session_id: str) -> str | None:
        """The session's title, or None (untitled, or an unknown id)."""
        return await self._run(self._plans.get_session_title(session_id=session_id))

    async def get_session_by_title(self, title: str) -> Row | None:
        """The whole row of the session titled exactly ``title``, or None."""
        return await self._run(self._plans.get_session_by_title(title=title))

    async def resolve_session_by_title(self, title: str) -> str | None:
        """The id ``title`` names, preferring its newest numbered continuation
        (``"title #N"``, by ``started_at``) over the exact title; None when neither exists.
        "Bot Chat" itself is the exception: the session titled exactly so wins over any
        ``"Bot Chat #N"``.
        """
        return await self._run(self._plans.resolve_session_by_title(title=title))

    async def get_next_title_in_lineage(self, base_title: str) -> str:
        """The title a continuation of ``base_title`` gets: the base itself (any ``" #N"``
        suffix removed) while no session holds it, else ``"base #N"`` one above the highest
        number in use (the unnumbered original counts as #1).
        """
        return await self._run(self._plans.get_next_title_in_lineage(base_title=base_title))

    async def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive (or unarchive) the session and its whole compression lineage: every ancestor
        reached through parents that ended by compression and every continuation below them.
        Archiving only hides; messages stay. False for an unknown id.
        """
        return await self._run(
            self._plans.set_session_archived(session_id=session_id, archived=archived)
        )

    async def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin (or unpin) the session's compression lineage. Pinning also unhides it, except
        upstream's canonical Bot Chat (a hidden session titled "Bot Chat"), which stays hidden.
        False for an unknown id.
        """
        return await self._run(self._plans.set_session_pinned(session_id=session_id, pinned=pinned))

    async def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        """Hide (or show) the session's compression lineage in default listings; a hidden
        session can still be resumed. False for an unknown id.
        """
        return await self._run(self._plans.set_session_hidden(session_id=session_id, hidden=hidden))

    async def set_session_read(self, session_id: str, read: bool = True) -> bool:
        """Mark the session's compression lineage read (``last_read_at`` = now) or unread
        (``last_read_at`` = 0.0): a watermark, unread while activity is newer than it (NULL:
        never tracked, which reads as read). False for an unknown id.
        """
        return await self._run(self._plans.set_session_read(session_id=session_id, read=read))

    async def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """The id of the session named exactly, else of the one session whose id starts with
        the prefix (``%`` and ``_`` match only themselves), else None: no match, or several.
        """
        return await self._run(
            self._plans.resolve_session_id(session_id_or_prefix=session_id_or_prefix)
        )

    async def resolve_resume_session_id(self, session_id: str | None) -> str | None:
        """The session a resume of ``session_id`` should load: first the live tip of its
        compression chain (see ``get_compression_chain``), then, below the tip, the deepest
        session holding messages along the newest child that is no fork (branch, delegate run,
        reset successor or tool session), at most 32 steps down. The tip when none holds
        messages; an unknown id, ``""`` and None come back as they are.
        """
        return await self._run(self._plans.resolve_resume_session_id(session_id=session_id))

    async def get_compression_chain(self, session_id: str | None) -> list[str]:
        """The compression chain from ``session_id`` forward to its live tip, oldest first:
        at each session that ended by compression, its continuation (a child that is no
        branch, delegate run, reset successor or tool session), preferring one compressed
        again, then a live one, then the most recently active. ``[session_id]`` when nothing
        continues it (an unknown id too); ``[]`` for ``""`` or None.
        """
        return await self._run(self._plans.get_compression_chain(session_id=session_id))

    async def get_compression_tip(self, session_id: str | None) -> str | None:
        """The last session of ``get_compression_chain(session_id)``: where the conversation
        lives now. ``session_id`` itself when nothing continues it (``""`` and None too).
        """
        return await self._run(self._plans.get_compression_tip(session_id=session_id))

    async def get_compression_lineage(self, session_id: str | None) -> list[str]:
        """Every segment of the session's conversation, oldest first: up through parents that
        ended by compression to the root, then down through the earliest started continuation
        of each compressed segment. ``[session_id]`` for a branch or delegate run of its
        parent, or when the walk does not pass through it; ``[]`` for an unknown id.
        """
        return await self._run(self._plans.get_compression_lineage(session_id=session_id))

    async def delete_session(
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
        return await self._run(
            self._plans.delete_session(
                session_id=session_id,
                sessions_dir=sessions_dir,
                expected_delete_ids=expected_delete_ids,
            )
        )

    async def delete_sessions(
        self, session_ids: Iterable[str] | None, sessions_dir: str | PathLike[str] | None = None
    ) -> int:
        """``delete_session`` for many sessions in one transaction, all or none: how many of
        ``session_ids`` existed and were deleted (their delegate runs not counted). Unknown ids
        and items that are no id (not a str, or empty) are skipped; the same refusal holds.
        """
        return await self._run(
            self._plans.delete_sessions(session_ids=session_ids, sessions_dir=sessions_dir)
        )

    async def get_meta(self, key: str) -> str | None:
        """The value upstream's ``state_meta`` bookkeeping holds under ``key``, or None."""
        return await self._run(self._plans.get_meta(key=key))

    async def set_meta(self, key: str, value: str | None) -> None:
        """Store ``value`` under ``key`` in ``state_meta``, replacing what the key held."""
        return await self._run(self._plans.set_meta(key=key, value=value))

    async def append_messages_batch(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        chunk_rows: int | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        """Upstream's batch append: every message dict (``role``, ``content`` and the keys
        ``append_message`` takes; others are ignored) lands in one transaction, or none does;
        the session's counters move once for all of them. Returns how many were appended (0
        for an empty list, which touches nothing).

        Stored as ``append_message`` stores each, but the reasoning fields are kept on
        assistant messages only and ``message_id`` stands in for ``platform_message_id``;
        messages without a timestamp get the clock's, each a microsecond after the one
        before. An unknown session raises ``UnknownSessionError``, one compression ended
        ``CompressionSessionClosedError``. ``chunk_rows`` is accepted
        and checked, but the batch stays one transaction; ``compression_lock_holder`` changes
        nothing (upstream's appends never wait for a compression). ``turn_lease_holder`` /
        ``turn_lease_ttl_seconds`` fence the batch as in ``append_message``, checked once
        before any row (an empty list is not fenced).
        """
        return await self._run(
            self._plans.append_messages_batch(
                session_id=session_id,
                messages=messages,
                compression_lock_holder=compression_lock_holder,
                turn_lease_holder=turn_lease_holder,
                chunk_rows=chunk_rows,
                turn_lease_ttl_seconds=turn_lease_ttl_seconds,
            )
        )

    async def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """Upstream's anchored window: ``{"window": [...], "messages_before": n,
        "messages_after": m}``, the messages of ``session_id`` from ``window`` before the
        message ``around_message_id`` to ``window`` after it, oldest first, rewound ones
        included, each as ``get_messages`` returns it (but ``_compressed_summary`` as
        stored). ``messages_before`` / ``messages_after`` count each side without the anchor:
        fewer than ``window`` means the session starts or ends there. A negative window is
        0; an anchor that is not a message of this session gives an empty window and zeros.
        """
        return await self._run(
            self._plans.get_messages_around(
                session_id=session_id, around_message_id=around_message_id, window=window
            )
        )

    async def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
        include_row_ids: bool = False,
        include_compacted: bool = False,
    ) -> list[Row]:
        """The transcript as upstream replays it to a model, in id order: ``{"role",
        "content"}`` (recalled ``<memory-context>`` blocks taken out of user and assistant
        text, which is trimmed; multimodal content decoded), then only the fields that say
        something: ``tool_call_id``, ``tool_name``, ``effect_disposition``, ``tool_calls``
        (decoded), ``message_id`` (the platform's id), ``observed``, ``finish_reason`` (any
        role), ``api_content``, ``display_kind``, ``display_metadata``; on assistant turns
        ``reasoning``, ``reasoning_content`` (even empty) and the structured reasoning,
        decoded.

        ``include_ancestors`` replays the lineage (each ``parent_session_id`` up to the root,
        but a ``/branch`` copy alone), a user turn repeated across segments once;
        ``include_inactive`` adds rewound turns; ``include_compacted`` reads the display as
        ``get_messages`` does; ``include_row_ids`` adds ``_row_id``; ``repair_alternation``
        keeps the ``_compressed_summary`` marker (the stored transcript is replayed as it
        is: no turns are merged or inserted).
        """
        return await self._run(
            self._plans.get_messages_as_conversation(
                session_id=session_id,
                include_ancestors=include_ancestors,
                include_inactive=include_inactive,
                repair_alternation=repair_alternation,
                include_row_ids=include_row_ids,
                include_compacted=include_compacted,
            )
        )

    async def clear_session_messages(
        self,
        session_id: str,
        keep_last_n: int | None = None,
        before_timestamp: float | None = None,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> bool:
        """Upstream's clear: delete the session's messages but keep the session. With
        ``keep_last_n`` (> 0) the newest that many (by id) stay; else with
        ``before_timestamp`` those written before it go; else every one goes (rewound rows
        too: they are deleted, not marked). The counters are recounted from the live rows
        left (``tool_call_count`` counting tool results and messages with tool calls, as
        upstream's clear counts them) and ``last_activity_at`` set to now; when none are
        left, every usage counter (tokens, API calls) is zeroed and the session's per-model
        usage deleted. Stored system prompts no session refers to any more are deleted.
        When everything went and ``sessions_dir`` is given, the session's transcript files
        there are removed after the commit. Returns False for an unknown session.
        """
        return await self._run(
            self._plans.clear_session_messages(
                session_id=session_id,
                keep_last_n=keep_last_n,
                before_timestamp=before_timestamp,
                sessions_dir=sessions_dir,
            )
        )

    async def rewind_to_message(
        self,
        session_id: str,
        target_message_id: int,
        *,
        preserve_compaction_handoff: bool = False,
        expected_active_ids: Sequence[int] | None = None,
        expected_target_content: Any = None,
    ) -> dict[str, Any]:
        """Upstream's rewind: the live messages from the user message ``target_message_id``
        on, the target included, are taken back (``active = 0``, kept on disk and readable
        with ``include_inactive``); ``rewind_count`` grows by one and the counters are
        recounted from the live rows. Returns ``{"rewound_count", "target_message" (the
        target as ``get_messages`` returns a row, for the caller to offer again),
        "new_head_id" (the newest live id, or None)}``.

        A target that is not a message of the session, or not a user's, raises
        ``InvalidInputError``; a session compression ended,
        ``CompressionSessionClosedError``. ``expected_active_ids`` (the live ids in order) and
        ``expected_target_content`` (what the user said, memory context taken out) pin what
        the caller saw: a transcript changed since raises ``TranscriptChangedError`` and
        nothing is written. ``preserve_compaction_handoff`` is refused: this store keeps no
        compaction handoff carriers.
        """
        return await self._run(
            self._plans.rewind_to_message(
                session_id=session_id,
                target_message_id=target_message_id,
                preserve_compaction_handoff=preserve_compaction_handoff,
                expected_active_ids=expected_active_ids,
                expected_target_content=expected_target_content,
            )
        )

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
    ) -> list[Row]:
        """One page of sessions for a picker, newest ``started_at`` first: each row every
        session column plus ``last_active`` (its latest heartbeat or message, else its start),
        ``preview`` (the start of its first user message, at most 60 characters and "...")
        and ``unread`` (active since ``last_read_at``).

        Filters: ``source`` or ``sources``, ``exclude_sources``, ``session_key``,
        ``cwd_prefix`` (that directory and below), ``min_message_count``. Archived sessions
        only with ``include_archived`` (``archived_only``: only them, hidden ones included);
        hidden ones only with ``include_hidden``; sub-agent runs and compression
        continuations only with ``include_children`` (branches and resets always show).
        ``project_compression_tips``: a compressed conversation is shown as its live tip,
        keeping its root's ``started_at``, with ``_lineage_root_id`` and ``_lineage_ids``.
        ``order_by_last_active``: the most recently active conversation (its whole chain)
        first, the one order in which ``id_query`` and ``search_query`` (ids and titles of
        the chain, case-insensitive) apply. ``include_pinned`` adds the pinned sessions the
        page missed; ``compact_rows`` leaves out the system prompt and its hash.
        ``scope="own"`` lists only the Telegram direct messages of ``requester_user_id``
        (required then; a row without a chat id is left out); "admin" or None: everyone's.
        """
        return await self._run(
            self._plans.list_sessions_rich(
                source=source,
                sources=sources,
                exclude_sources=exclude_sources,
                cwd_prefix=cwd_prefix,
                limit=limit,
                offset=offset,
                include_children=include_children,
                min_message_count=min_message_count,
                project_compression_tips=project_compression_tips,
                order_by_last_active=order_by_last_active,
                include_archived=include_archived,
                archived_only=archived_only,
                id_query=id_query,
                search_query=search_query,
                compact_rows=compact_rows,
                include_pinned=include_pinned,
                session_key=session_key,
                include_hidden=include_hidden,
                scope=scope,
                requester_user_id=requester_user_id,
            )
        )

    async def session_count_ge(self, n: int = 1) -> bool:
        """Whether at least ``n`` sessions exist (archived ones too), reading at most ``n``
        rows.
        """
        return await self._run(self._plans.session_count_ge(n=n))

    async def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        """``{source: count}`` under :meth:`session_count`'s filters, the largest first (an
        empty source counts as 'cli').
        """
        return await self._run(
            self._plans.session_count_by_source(
                include_archived=include_archived,
                archived_only=archived_only,
                exclude_children=exclude_children,
            )
        )

    async def search_sessions(
        self,
        source: str | Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[Row]:
        """Whole session rows with ``last_active``, the most recently active first (archived
        and hidden ones too): of one source or several, and with ``workspace_key`` of that
        workspace (its git repository root, or for rows without one a directory at or below
        it), as ``hermes -c`` picks the session to continue.
        """
        return await self._run(
            self._plans.search_sessions(
                source=source, limit=limit, offset=offset, workspace_key=workspace_key
            )
        )

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
    ) -> list[Row]:
        """Upstream's message search: the messages matching ``query`` (words, ``"phrases"``,
        ``AND``/``OR``/``NOT``, ``prefix*``; any other character is made literal, so no query
        is a syntax error, and one of punctuation alone finds nothing). Each hit has ``id``,
        ``session_id``, ``role``, ``snippet`` (the match marked ``>>>``/``<<<``),
        ``timestamp``, ``tool_name``, its session's ``source``, ``model`` and
        ``session_started``, and ``context``: the message before it, itself and the one after
        (``role``, ``content`` cut to 200 characters). ``fields`` keeps only those keys.

        ``sort``: None ranks by relevance (BM25 on SQLite), "newest"/"oldest" by time; CJK
        terms shorter than 3 characters are matched with LIKE, newest first. Filters: sources
        (``source_filter``; an empty list finds nothing), ``exclude_sources``, roles
        (``role_filter``; with "tool", tool results are searched whole). Rewound messages are
        left out unless ``include_inactive`` (compacted ones are found); ``include_reasoning``
        also searches assistants' reasoning. ``limit`` is 0 to 10,000, ``offset`` 0 to
        1,000,000; a query is read up to its first 2,048 characters.
        """
        return await self._run(
            self._plans.search_messages(
                query=query,
                source_filter=source_filter,
                exclude_sources=exclude_sources,
                role_filter=role_filter,
                limit=limit,
                offset=offset,
                sort=sort,
                include_inactive=include_inactive,
                fields=fields,
                include_reasoning=include_reasoning,
            )
        )

    async def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: str | None = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
    ) -> list[Row]:
        """Listed sessions (as :meth:`list_sessions_rich` rows, by activity) whose id, or
        whose compression chain's root id, holds ``query`` (case-insensitive): an exact id
        first, then ids starting with it, then the rest; at most ``limit``.
        """
        return await self._run(
            self._plans.search_sessions_by_id(
                query=query,
                limit=limit,
                include_archived=include_archived,
                source=source,
                sources=sources,
                exclude_sources=exclude_sources,
            )
        )

    async def list_prune_candidates(
        self,
        older_than_days: float | None = None,
        source: str | None = None,
        *,
        whole_lineages: bool = False,
        **filters: Any,
    ) -> list[Row]:
        """The sessions a prune with the same filters would delete, nothing changed, the
        longest inactive first: their id, source, title, model, times (``last_active``
        included), counters, costs, flags and gateway peer. ``whole_lineages`` leaves out the
        compression segments a prune keeps for a later segment that stays.
        """
        return await self._run(
            self._plans.list_prune_candidates(
                older_than_days=older_than_days,
                source=source,
                whole_lineages=whole_lineages,
                **filters,
            )
        )

    async def storage_report(self) -> dict[str, Any]:
        """``dialect``; on SQLite also ``page_count``, ``freelist_count``, ``page_size``,
        ``bytes`` and ``free_ratio`` (free pages over pages: what a VACUUM would give back).
        """
        return await self._run(self._plans.storage_report())

    async def export_session(self, session_id: str) -> Row | None:
        """The session's whole row (as :meth:`get_session`) with ``messages``, its live
        transcript (as :meth:`get_messages`), read in one transaction; None for an unknown id.
        No size guard: call :meth:`assert_export_safe` first for an unbounded transcript.
        """
        return await self._run(self._plans.export_session(session_id=session_id))

    async def export_session_lineage(self, session_id: str | None) -> Row | None:
        """The compression lineage of the session (:meth:`get_compression_lineage`) as one
        logical session: the newest segment's row, with ``segments`` (each segment's
        :meth:`export_session`), ``lineage_session_ids``, every segment's ``messages`` in order
        and their number as ``message_count``; None for an unknown id.
        """
        return await self._run(self._plans.export_session_lineage(session_id=session_id))

    async def export_all(self, source: str | Sequence[str] | None = None) -> list[Row]:
        """Every session (archived and hidden ones too; of ``source`` if given), the most
        recently active first, each :meth:`search_sessions`' row with ``messages``; at most
        100,000 sessions, all held in memory (the CLI's export streams instead).
        """
        return await self._run(self._plans.export_all(source=source))

    async def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """How many live messages the session has, counting no further than ``max_messages``
        + 1; raises ``SessionExportTooLargeError`` past ``max_messages`` (None: 20,000, or
        ``HERMES_STATE_MAX_EXPORT_MESSAGES``; 0: no guard, nothing counted, 0 returned).
        """
        return await self._run(
            self._plans.assert_export_safe(session_id=session_id, max_messages=max_messages)
        )

    async def import_sessions(self, sessions: list[Row]) -> Row:
        """Import sessions as :meth:`export_session` or :meth:`export_all` wrote them
        (upstream's too): ``{ok, imported, skipped, detached, imported_ids, skipped_ids,
        errors}``.

        Every record is checked first, with upstream's caps (500 sessions, 10,000 messages a
        session and 50,000 in all, 5 MiB a session and 25 MiB in all): any bad record, or a
        title another session holds, and nothing is written (``ok`` False, ``errors`` with each
        record's ``index``, ``session_id`` and ``error``). Otherwise one transaction: an id
        that exists is skipped untouched (so a second import of the same export changes
        nothing), a new one is inserted with its messages; a parent neither stored nor imported
        (or a link closing a cycle) is dropped and counted in ``detached``. Gateway routing,
        handoff, turn leases and live activity are not imported. Not a list, or more than 500
        sessions: ``InvalidInputError`` (a ``ValueError``).
        """
        return await self._run(self._plans.import_sessions(sessions=sessions))
