"""The catalog of upstream's session and message operations: titles, flags, ids and meta,
messages, listing (the rest is in :mod:`.operations`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .. import statements as S
from ..statements import Capabilities
from .sent import PER_WALK, Operation, Sent, only, sends

__all__ = ["SESSION_OPERATIONS"]

_TITLES = "Titles"
_FLAGS = "Session flags, ids and meta"
_MESSAGES = "Messages"
_LISTING = "Session listing"
_PORTABILITY = "Export and import"
_RETENTION = "Retention"


def _set_title(holder: str) -> Callable[[Capabilities], list[Sent]]:
    """The title writes (the user's and an automatic one send the same statements) when the
    title is free (``holder`` empty), held by an earlier compression segment of the session
    ("segment"), or held by an archived "Bot Chat" a hidden session replaces ("retired")."""

    def steps(_caps: Capabilities) -> list[Sent]:
        sent = [
            sends(S.title_state, note="the session must exist (and its title may change)"),
            sends(S.title_holder, note="when a title is given: another session holding it"),
        ]
        if holder:
            sent.append(sends(S.compression_parent, note=PER_WALK))
            sent.append(sends(S.release_title, with_source=holder == "retired"))
        sent.append(sends(S.set_title, note="only if the title is still what was read"))
        return sent

    return steps


def _append_refused(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:  # its one row says why nothing was appended
        return [sends(S.append_message_counted)]
    why = "nothing was appended: is there no such session, or did compression close it?"
    return [sends(S.append_message, caps.insert_returning), sends(S.session_closed, note=why)]


def _append_batch(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.count_appended_messages, note="the session must exist"),
        sends(S.append_message, False, note="once per message"),
    ]


def _fence() -> list[Sent]:
    """A write fenced on its conversation's turn lease: the walk, the lease, and its revival."""
    return [
        sends(S.lineage_parent, note=PER_WALK),
        sends(S.turn_lease_holder, note="another holder, or none: nothing is written"),
        sends(S.refresh_turn_lease, note="when the holder's own lease expired"),
    ]


def _append_fenced(caps: Capabilities) -> list[Sent]:
    return [
        *_fence(),
        sends(S.append_message, caps.insert_returning),
        sends(S.count_appended_message),
    ]


def _append_batch_fenced(_caps: Capabilities) -> list[Sent]:
    return [*_fence(), *_append_batch(_caps)]


def _around(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.messages_around, True),
        sends(S.messages_around, False, note="when the anchor is a message of the session"),
    ]


def _conversation(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.lineage_link, note="once, and once more per step up the session's lineage"),
        sends(S.get_messages, S.Visibility.LIVE, note="once per session of the lineage"),
    ]


def _clear(kept: str) -> Callable[[Capabilities], list[Sent]]:
    """``clear_session_messages``: every message (which leaves none), the newest ``keep_last_n``
    or those after ``before_timestamp`` (which here leave some)."""

    def steps(_caps: Capabilities) -> list[Sent]:
        sent = [sends(S.session_locked, note="the session must exist")]
        if kept == "keep_last_n":
            sent.append(sends(S.nth_newest_message))
            sent.append(sends(S.delete_messages, before_id=True, note="when there are more"))
        elif kept == "before_timestamp":
            sent.append(sends(S.delete_messages, before_timestamp=True))
        else:
            sent.append(sends(S.delete_messages))
        sent.append(sends(S.live_counts))
        if kept:
            sent.append(sends(S.set_message_counters, True, note="when messages are left"))
        else:
            sent.append(sends(S.reset_session_counters, note="when no message is left"))
            sent.append(sends(S.delete_model_usage, note="when no message is left"))
        sent.append(sends(S.delete_unreferenced_prompts))
        return sent

    return steps


def _rewind(expected: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(_caps: Capabilities) -> list[Sent]:
        sent = [sends(S.count_rewind, note="the session must exist")]
        if expected:
            sent.append(sends(S.live_message_ids, note="to compare with expected_active_ids"))
        return [
            *sent,
            sends(S.message_of_session, note="the target must be a user message of it"),
            sends(S.rewind_from),
            sends(S.live_counts),
            sends(S.live_tool_calls),
            sends(S.set_message_counters, False),
            sends(S.live_head),
        ]

    return steps


#: The lineage-wide flags: upstream's walk of the session's compression lineage, then one
#: update per session of it.
_PER_SEGMENT = "once per session of the lineage"


def _lineage_flag(column: str) -> Callable[[Capabilities], list[Sent]]:
    return lambda _caps: [
        sends(S.lineage_ids),
        sends(S.set_lineage_flag, column, note=_PER_SEGMENT),
    ]


def _pin(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.lineage_ids),
        sends(S.set_lineage_flag, "pinned", note=_PER_SEGMENT),
        sends(S.pin_guard, note="when pinning"),
        sends(
            S.set_lineage_flag,
            "hidden",
            note="when pinning anything but the hidden canonical Bot Chat: " + _PER_SEGMENT,
        ),
    ]


def _resolve_id(caps: Capabilities) -> list[Sent]:
    return [
        sends(S.session_exists),
        sends(S.ids_with_prefix, caps.name == "sqlite", note="when no session has exactly this id"),
    ]


#: The forward walk of a compression chain (:func:`hermes_state.plans.session_flags._chain`).
_PER_SEGMENT_DOWN = "once, and once more per continuation down the compression chain"


def _resume(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.child_sessions, note=_PER_SEGMENT_DOWN + ", then per step below the tip"),
        sends(S.has_messages, note="once per step from the tip down (at most 32)"),
    ]


def _compression_lineage(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.lineage_row, note="once, and once more per step up to the lineage's root"),
        sends(S.child_sessions, note="once per compressed segment, from the root down"),
    ]


def _deletion(given: str) -> Callable[[Capabilities], list[Sent]]:
    """A delete (:func:`hermes_state.plans.session_flags._deletion`): existence and handoff
    state, the delegate runs, the refusals, then the rows of each session deleted."""
    each = "once per session deleted (with its delegate runs)"

    def steps(_caps: Capabilities) -> list[Sent]:
        return [
            sends(S.session_in_flight, note=f"once for {given}, then once per delegate run"),
            sends(S.delegate_candidates, note="when a session given exists"),
            sends(S.lineage_parent, note=f"for {given}: " + PER_WALK),
            sends(S.live_turn_lease, note="once per session deleted and conversation of one"),
            sends(S.orphan_children, note=each),
            sends(S.delete_messages, note=each),
            sends(S.delete_model_usage, note=each),
            sends(S.delete_session_turn_lease, note=each),
            sends(S.delete_session_row, note=each),
            sends(S.delete_unreferenced_prompts),
        ]

    return steps


#: The filter of a prune by age alone (``older_than_days``), which the examples use.
_BY_AGE = S.PruneFilter(names=("last_active_before",))
_PER_BATCH = "once per batch (100 sessions), each resuming after the last id the one before read"


def _prune(dry_run: bool) -> Callable[[Capabilities], list[Sent]]:
    """A prune (:class:`hermes_state.plans.retention.PruneSweep`): each batch reads the next
    sessions its rows let go, checks their lineage, then (unless a dry run) deletes them as
    ``delete_session`` does."""
    each = "once per session deleted"

    def steps(caps: Capabilities) -> list[Sent]:
        sent = [
            sends(S.prune_window, note=_PER_BATCH),
            sends(S.prune_batch, caps.name, _BY_AGE, dry_run, note="once per batch, in its window"),
            sends(S.kept_continuation, caps.name, _BY_AGE, note="per session compression ended"),
            sends(S.lineage_guard, note="per session continuing one that compression ended"),
        ]
        if dry_run:
            return sent
        return [
            *sent,
            sends(S.orphan_children, note=each),
            sends(S.delete_messages, note=each),
            sends(S.delete_model_usage, note=each),
            sends(S.delete_session_turn_lease, note=each),
            sends(S.delete_session_row, note=each),
            sends(S.delete_unreferenced_prompts, note="once per batch that deleted sessions"),
        ]

    return steps


def _candidates(caps: Capabilities) -> list[Sent]:
    return [
        sends(S.prune_candidates, caps.name, _BY_AGE),
        sends(S.kept_continuation, caps.name, _BY_AGE, note="per session compression ended"),
        sends(S.lineage_guard, note="per session continuing one that compression ended"),
    ]


#: The listing filters the examples of the catalog use.
_PICKER = S.SessionFilter(listable_only=True, visible_only=True)


_EVERY_FILTER = S.SessionFilter(
    listable_only=True,
    by_sources=True,
    by_session_key=True,
    excluding_sources=True,
    by_cwd=True,
    by_message_count=True,
    visible_only=True,
)


_COMPRESSED = "when the page holds compressed conversations: their chains, then their tips"


def _list_rich(caps: Capabilities) -> list[Sent]:
    return [
        sends(S.rich_sessions, caps.name, _PICKER, False),
        sends(S.compression_chains, caps.name, note=_COMPRESSED),
        sends(S.rich_sessions_by_id, caps.name, False, note=_COMPRESSED),
    ]


def _list_rich_filtered(caps: Capabilities) -> list[Sent]:
    return [
        sends(S.rich_sessions, caps.name, _EVERY_FILTER, False),
        sends(S.pinned_sessions, caps.name, _EVERY_FILTER, False, note="with include_pinned"),
    ]


def _list_rich_by_activity(caps: Capabilities) -> list[Sent]:
    chosen = S.SessionFilter(visible_only=True)
    return [
        sends(
            S.rich_sessions_by_activity,
            caps.name,
            chosen,
            True,
            by_id=True,
            by_text=True,
            by_compact_text=True,
        )
    ]


def _exported(caps: Capabilities) -> list[Sent]:
    return [sends(S.get_session), sends(S.get_messages)]


def _exported_lineage(caps: Capabilities) -> list[Sent]:
    each = "per segment of the lineage: the row, then the transcript"
    return [
        *_compression_lineage(caps),
        sends(S.get_session, note=each),
        sends(S.get_messages, note=each),
    ]


def _exported_all(caps: Capabilities) -> list[Sent]:
    return [
        sends(S.search_sessions, caps.name, by_sources=False, by_workspace=False),
        sends(S.get_messages, note="once per session"),
    ]


def _imported(caps: Capabilities) -> list[Sent]:
    record = "once per record"
    return [
        sends(S.session_exists, note="once per record: an id already stored is skipped"),
        sends(S.title_taken, note="once per new record with a title (titles are unique)"),
        sends(S.store_system_prompt, caps.name, note="once per new record with a prompt"),
        sends(S.import_session, note=record + " not skipped"),
        sends(S.import_message, note="once per message"),
        sends(S.finish_imported_session, note="its counters and end, once its messages are in"),
        sends(S.parent_of, note="per step of the walk that refuses a cycle of parents"),
        sends(S.set_imported_parent, note="once per new record whose parent is there"),
    ]


def _per_dialect(
    builder: Callable[..., Any], *args: Any, **kw: Any
) -> Callable[[Capabilities], list[Sent]]:
    """An operation that sends one statement, built for the connected dialect."""
    return lambda caps: [sends(builder, caps.name, *args, **kw)]


_O = Operation
#: upstream's session and message operations, in the order of the index.
SESSION_OPERATIONS: Final[tuple[Operation, ...]] = (
    _O(_TITLES, "set_session_title", "", "set_session_title(session_id, title)", _set_title("")),
    _O(
        _TITLES,
        "set_session_title",
        "segment",
        "set_session_title(session_id, title)",
        _set_title("segment"),
        when=", the title held by an earlier compression segment of the session",
    ),
    _O(
        _TITLES,
        "set_session_title",
        "retired",
        "set_session_title(session_id, 'Bot Chat')",
        _set_title("retired"),
        when=", the title held by an archived session, the claimant or the holder hidden",
    ),
    _O(_TITLES, "get_session_title", "", "get_session_title(session_id)", only(S.get_title)),
    _O(
        _TITLES,
        "set_auto_title",
        "",
        "set_auto_title(session_id, title, source=...)",
        _set_title(""),
    ),
    _O(
        _TITLES,
        "get_session_title_source",
        "",
        "get_session_title_source(session_id)",
        only(S.title_state),
    ),
    _O(
        _TITLES,
        "set_session_title_source",
        "",
        "set_session_title_source(session_id, source)",
        only(S.set_title_source),
    ),
    _O(
        _TITLES,
        "get_session_by_title",
        "",
        "get_session_by_title(title)",
        only(S.session_by_title),
    ),
    _O(
        _TITLES,
        "resolve_session_by_title",
        "",
        "resolve_session_by_title(title)",
        only(S.lineage),
    ),
    _O(
        _TITLES,
        "get_next_title_in_lineage",
        "",
        "get_next_title_in_lineage(base_title)",
        only(S.lineage),
    ),
    _O(
        _FLAGS,
        "set_session_archived",
        "",
        "set_session_archived(session_id, archived)",
        _lineage_flag("archived"),
    ),
    _O(_FLAGS, "set_session_pinned", "", "set_session_pinned(session_id, pinned)", _pin),
    _O(
        _FLAGS,
        "set_session_hidden",
        "",
        "set_session_hidden(session_id, hidden)",
        _lineage_flag("hidden"),
    ),
    _O(
        _FLAGS,
        "set_session_read",
        "",
        "set_session_read(session_id, read)",
        _lineage_flag("last_read_at"),
    ),
    _O(
        _FLAGS,
        "resolve_session_id",
        "",
        "resolve_session_id(session_id_or_prefix)",
        _resolve_id,
    ),
    _O(
        _FLAGS,
        "resolve_resume_session_id",
        "",
        "resolve_resume_session_id(session_id)",
        _resume,
    ),
    _O(
        _FLAGS,
        "get_compression_chain",
        "",
        "get_compression_chain(session_id)",
        only(S.child_sessions, note=_PER_SEGMENT_DOWN),
    ),
    _O(
        _FLAGS,
        "get_compression_tip",
        "",
        "get_compression_tip(session_id)",
        only(S.child_sessions, note=_PER_SEGMENT_DOWN),
    ),
    _O(
        _FLAGS,
        "get_compression_lineage",
        "",
        "get_compression_lineage(session_id)",
        _compression_lineage,
    ),
    _O(_FLAGS, "delete_session", "", "delete_session(session_id)", _deletion("the session")),
    _O(
        _FLAGS,
        "delete_sessions",
        "",
        "delete_sessions(session_ids)",
        _deletion("each session given"),
    ),
    _O(_FLAGS, "get_meta", "", "get_meta(key)", only(S.get_meta)),
    _O(_FLAGS, "set_meta", "", "set_meta(key, value)", lambda caps: [sends(S.set_meta, caps.name)]),
    _O(
        _MESSAGES,
        "append_message",
        "closed",
        "append_message(session_id, role, content)",
        _append_refused,
        when=", when compression closed the session",
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "paged",
        "get_messages(session_id, limit=limit, offset=offset)",
        only(S.get_messages, limited=True, skipped=True),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "latest",
        "get_messages(session_id, limit=limit, latest=True)",
        only(S.get_messages, newest_first=True, limited=True),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "after",
        "get_messages(session_id, limit=limit, after_id=after_id)",
        only(S.get_messages, after=True, limited=True),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "inactive",
        "get_messages(session_id, include_inactive=True)",
        only(S.get_messages, S.Visibility.ALL),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "compacted",
        "get_messages(session_id, include_compacted=True)",
        only(S.get_messages, S.Visibility.DISPLAY),
    ),
    _O(
        _MESSAGES,
        "append_messages_batch",
        "",
        "append_messages_batch(session_id, messages)",
        _append_batch,
    ),
    _O(
        _MESSAGES,
        "append_message",
        "fenced",
        "append_message(session_id, role, content, turn_lease_holder=holder)",
        _append_fenced,
    ),
    _O(
        _MESSAGES,
        "append_messages_batch",
        "fenced",
        "append_messages_batch(session_id, messages, turn_lease_holder=holder)",
        _append_batch_fenced,
    ),
    _O(
        _MESSAGES,
        "get_messages_around",
        "",
        "get_messages_around(session_id, around_message_id, window)",
        _around,
    ),
    _O(
        _MESSAGES,
        "get_messages_as_conversation",
        "",
        "get_messages_as_conversation(session_id)",
        only(S.get_messages, S.Visibility.LIVE),
    ),
    _O(
        _MESSAGES,
        "get_messages_as_conversation",
        "ancestors",
        "get_messages_as_conversation(session_id, include_ancestors=True)",
        _conversation,
    ),
    _O(
        _MESSAGES,
        "clear_session_messages",
        "",
        "clear_session_messages(session_id)",
        _clear(""),
    ),
    _O(
        _MESSAGES,
        "clear_session_messages",
        "keep_last_n",
        "clear_session_messages(session_id, keep_last_n=n)",
        _clear("keep_last_n"),
    ),
    _O(
        _MESSAGES,
        "clear_session_messages",
        "before_timestamp",
        "clear_session_messages(session_id, before_timestamp=when)",
        _clear("before_timestamp"),
    ),
    _O(
        _MESSAGES,
        "rewind_to_message",
        "",
        "rewind_to_message(session_id, target_message_id)",
        _rewind(expected=False),
    ),
    _O(
        _MESSAGES,
        "rewind_to_message",
        "expected",
        "rewind_to_message(session_id, target_message_id, expected_active_ids=ids)",
        _rewind(expected=True),
    ),
    _O(_LISTING, "list_sessions_rich", "", "list_sessions_rich()", _list_rich),
    _O(
        _LISTING,
        "list_sessions_rich",
        "filtered",
        "list_sessions_rich(source, exclude_sources=..., session_key=..., cwd_prefix=..., "
        "min_message_count=1, include_pinned=True)",
        _list_rich_filtered,
    ),
    _O(
        _LISTING,
        "list_sessions_rich",
        "by_activity",
        "list_sessions_rich(order_by_last_active=True, id_query=..., search_query=..., "
        "include_children=True, compact_rows=True)",
        _list_rich_by_activity,
    ),
    _O(
        _LISTING,
        "session_count",
        "",
        "session_count()",
        _per_dialect(S.count_listed_sessions, S.SessionFilter()),
    ),
    _O(
        _LISTING,
        "session_count",
        "filtered",
        "session_count(source, exclude_children=True, include_archived=True)",
        _per_dialect(
            S.count_listed_sessions,
            S.SessionFilter(listable_only=True, by_sources=True, archived="any"),
        ),
    ),
    _O(
        _LISTING,
        "session_count",
        "own",
        "session_count(scope='own', requester_user_id=...)",
        _per_dialect(S.count_listed_sessions, S.SessionFilter(own_dm=True)),
    ),
    _O(_LISTING, "session_count_ge", "", "session_count_ge(n)", only(S.some_sessions)),
    _O(
        _LISTING,
        "session_count_by_source",
        "",
        "session_count_by_source()",
        _per_dialect(S.count_sessions_by_source, S.SessionFilter()),
    ),
    _O(
        _LISTING,
        "search_sessions",
        "",
        "search_sessions()",
        _per_dialect(S.search_sessions, by_sources=False, by_workspace=False),
    ),
    _O(
        _LISTING,
        "search_sessions",
        "filtered",
        "search_sessions(source=[...], workspace_key=...)",
        _per_dialect(S.search_sessions, by_sources=True, by_workspace=True),
    ),
    _O(_PORTABILITY, "export_session", "", "export_session(session_id)", _exported),
    _O(
        _PORTABILITY,
        "export_session_lineage",
        "",
        "export_session_lineage(session_id)",
        _exported_lineage,
    ),
    _O(_PORTABILITY, "export_all", "", "export_all()", _exported_all),
    _O(
        _PORTABILITY,
        "assert_export_safe",
        "",
        "assert_export_safe(session_id, max_messages=...)",
        only(S.count_live_messages_upto),
    ),
    _O(_PORTABILITY, "import_sessions", "", "import_sessions(sessions)", _imported),
    _O(_RETENTION, "prune_sessions", "", "prune_sessions(older_than_days)", _prune(False)),
    _O(
        _RETENTION,
        "prune_report",
        "dry_run",
        "prune_report(older_than_days, dry_run=True)",
        _prune(True),
    ),
    _O(
        _RETENTION,
        "list_prune_candidates",
        "",
        "list_prune_candidates(older_than_days, whole_lineages=True)",
        _candidates,
    ),
)
