"""The catalog: which builders each store operation runs on each dialect, in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .. import statements as S
from ..models import HandoffState
from ..statements import Capabilities, Fence, ReclaimScope
from ..validation import require_only_states
from .search_catalog import SEARCH_OPERATIONS
from .sent import PER_WALK, Operation, Sent, call_of, only, sends
from .session_catalog import SESSION_OPERATIONS


def _move(
    caps: Capabilities, transition: S.Transition, builder: str, call: str, note: str
) -> list[Sent]:
    """A transition's statements as :func:`hermes_state.plans.transitions._move` sends them: the one
    statement on PostgreSQL, else the event, then the move."""
    parts = ("single",) if caps.single_statement else ("record", "apply")
    return [Sent(builder, f"{call}.{part}", getattr(transition, part), note) for part in parts]


def _transition(
    caps: Capabilities, builder: Callable[..., S.Transition], *args: Any, note: str = "", **kw: Any
) -> list[Sent]:
    transition = builder(*args, **kw)
    return _move(caps, transition, builder.__name__, call_of(builder, args, kw), note)


_SERVER_FILL = "MySQL/MariaDB: when the id existed (elsewhere the insert fills it in)"


def _create_session(prompt: bool, parent: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        mysql = caps.name in ("mysql", "mariadb")
        sent = [sends(S.store_system_prompt, caps.name)] if prompt else []
        sent.append(sends(S.insert_session, caps.name))
        if mysql:
            sent.append(sends(S.fill_session, note=_SERVER_FILL))
        if prompt:
            unused = "when the id existed: its own prompt stays" if mysql else ""
            sent.append(sends(S.forget_system_prompt, note=unused))
        if parent:
            sent.append(sends(S.session_and_parent))
            sent.append(sends(S.inherit_session, note="when the parent has something to give"))
        return sent

    return steps


def _prompt_update(statement: Callable[..., Any], prompt: bool) -> Callable[..., list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        sent = [sends(S.session_prompt_and_config)]
        if prompt:
            sent.append(sends(S.store_system_prompt, caps.name, note="when the session exists"))
        sent += [
            sends(statement, note="when the session exists"),
            sends(S.forget_system_prompt, note="when the session pointed at another prompt"),
        ]
        return sent

    return steps


def _token_counts(absolute: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        sent = [*_create_session(False, False)(caps), sends(S.usage_route)]
        sent.append(sends(S.set_usage_route, note="the first accounted call, on another route"))
        sent.append(sends(S.count_tokens, absolute))
        if not absolute:
            sent.append(sends(S.record_model_usage, caps.name, note="when the call has usage"))
        return sent

    return steps


def _append_message(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [sends(S.append_message_counted)]
    return [sends(S.append_message, caps.insert_returning), sends(S.count_appended_message)]


def _get_transcripts(caps: Capabilities) -> list[Sent]:
    if caps.name == "sqlite":
        return [sends(S.get_messages, note="once per session")]
    return [sends(S.get_transcripts, caps.name == "postgresql")]


def _request(retry: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if retry:
            return _transition(caps, S.request_handoff, retry=True)
        return _transition(caps, S.request_handoff)

    return steps


def _claim_one(caps: Capabilities) -> list[Sent]:
    returning = caps.update_returning
    audit_returning = not returning and caps.insert_returning
    sent = _transition(caps, S.claim_handoff, returning, audit_returning)
    if not (returning or audit_returning or caps.single_statement):
        sent.append(sends(S.claimed_attempt))
    return sent


def _claim_batch(by_platform: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.name == "postgresql":
            return [sends(S.claim_pending_statement, by_platform)]
        if caps.update_returning:
            return _transition(caps, S.claim_pending_transition, by_platform)
        claim = S.claim_picked(by_platform)
        call = call_of(S.claim_picked, (by_platform,), {}) + ".transition"
        return [
            sends(S.claim_picked, by_platform, part="pick"),
            *_move(caps, claim.transition, "claim_picked", call, ""),
            sends(S.claim_picked, by_platform, part="fetch"),
        ]

    return steps


def _take_turn(caps: Capabilities, note: str) -> list[Sent]:
    """The one-row acquire of a turn lease (after the lineage walk)."""
    return [
        sends(S.expire_turn_lease, note=note),
        sends(S.insert_turn_lease, caps.name, note=note),
        sends(S.turn_lease_holder, note=note),
    ]


def _claim_given_steps(caps: Capabilities, turns: bool) -> list[Sent]:
    """:func:`hermes_state.plans.claims._claim_given` where it is not one statement."""
    sent = [sends(S.pending_row_locked, note="once per session given")]
    if turns:
        sent.append(sends(S.lineage_parent, note="for each row locked: " + PER_WALK))
        sent += _take_turn(caps, "once per conversation, in key order")
    per_row = "once per row claimed"
    sent += _transition(caps, S.claim_handoff, False, note=per_row)
    sent.append(sends(S.get_session, note=per_row))
    return sent


def _claim_given(turns: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [sends(S.claim_given, turns)]
        return _claim_given_steps(caps, turns)

    return steps


def _claim_next(turns: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [sends(S.claim_next, turns)]
        return [sends(S.oldest_pending_locked), *_claim_given_steps(caps, turns)]

    return steps


def _complete_one(caps: Capabilities) -> list[Sent]:
    return _transition(caps, S.complete_handoff, Fence.CLAIM)


def _fail_one(caps: Capabilities) -> list[Sent]:
    return _transition(caps, S.fail_handoff, require_only_states(None), Fence.CLAIM)


def _release_steps(note: str) -> list[Sent]:
    return [sends(S.lineage_parent, note=PER_WALK), sends(S.release_turn_lease, note=note)]


def _finish(completes: bool, fails: bool, releases: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [sends(S.finish_claims, True, releases)]
        if caps.name == "sqlite":
            sent = _transition(caps, S.finish_claims_json, True)
        else:
            sent = []
            if completes:
                sent += _transition(caps, S.complete_handoff, Fence.CLAIM, note="once per row")
            if fails:
                running = frozenset({HandoffState.RUNNING})
                sent += _transition(caps, S.fail_handoff, running, Fence.CLAIM, note="once per row")
        return sent + (_release_steps("once per lease given back") if releases else [])

    return steps


def _renew(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [sends(S.renew_leases)]
    if caps.name == "sqlite":
        return [sends(S.renew_leases_json)]
    return [sends(S.renew_lease, note="once per session")]


def _reclaim(scope: ReclaimScope) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return _transition(caps, S.reclaim_handoffs, scope)
        return [
            sends(S.reclaimable, scope, lock=True),
            *_transition(caps, S.reclaim_handoffs, scope),
        ]

    return steps


def _preview(scope: ReclaimScope) -> Callable[[Capabilities], list[Sent]]:
    return lambda _caps: [sends(S.reclaimable, scope, lock=False)]


def _acquire_turn(caps: Capabilities) -> list[Sent]:
    return [sends(S.lineage_parent, note=PER_WALK), *_take_turn(caps, "")]


def _live_turn(_caps: Capabilities) -> list[Sent]:
    return [sends(S.lineage_parent, note=PER_WALK), sends(S.live_turn_lease)]


def _refresh_turn(_caps: Capabilities) -> list[Sent]:
    return [sends(S.lineage_parent, note=PER_WALK), sends(S.refresh_turn_lease)]


def _release_turn(_caps: Capabilities) -> list[Sent]:
    return _release_steps("")


def _refresh_turns(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [sends(S.refresh_turn_leases)]
    per = "once per session"
    walk = "for each session: " + PER_WALK
    return [sends(S.lineage_parent, note=walk), sends(S.refresh_turn_lease, note=per)]


def _release_turns(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [sends(S.release_turn_leases)]
    walk = "for each session: " + PER_WALK
    return [
        sends(S.lineage_parent, note=walk),
        sends(S.release_turn_lease, note="once per session"),
    ]


def _stats(_caps: Capabilities) -> list[Sent]:
    return [
        sends(S.count_handoffs_by_state),
        sends(S.oldest_pending_requested_at),
        sends(S.running_by_owner),
        sends(S.count_failures_since),
        sends(S.recent_failures),
    ]


_SESSIONS = "Sessions and transcripts"
_TRANSITIONS = "Handoff transitions"
_BATCHES = "Batches"
_LEASES = "Claim leases and reclaims"
_TURNS = "Session turn leases"
_AUDIT = "Audit trail"
_READS = "Reads"

_O = Operation
#: Every operation, in the order of the index; a variant is an operation called with the
#: arguments that change what it sends.
OPERATIONS: Final[tuple[Operation, ...]] = (
    _O(
        _SESSIONS,
        "create_session",
        "",
        "create_session(session_id, source, **fields)",
        _create_session(prompt=False, parent=False),
    ),
    _O(
        _SESSIONS,
        "create_session",
        "prompt",
        "create_session(session_id, source, system_prompt=...)",
        _create_session(prompt=True, parent=False),
    ),
    _O(
        _SESSIONS,
        "create_session",
        "child",
        "create_session(session_id, source, parent_session_id=...)",
        _create_session(prompt=False, parent=True),
    ),
    _O(_SESSIONS, "end_session", "", "end_session(session_id, end_reason)", only(S.end_session)),
    _O(_SESSIONS, "reopen_session", "", "reopen_session(session_id)", only(S.reopen_session)),
    _O(
        _SESSIONS,
        "update_system_prompt",
        "",
        "update_system_prompt(session_id, system_prompt)",
        _prompt_update(S.set_system_prompt, prompt=True),
    ),
    _O(
        _SESSIONS,
        "update_session_model",
        "",
        "update_session_model(session_id, model, provider)",
        _prompt_update(S.set_session_model, prompt=False),
    ),
    _O(
        _SESSIONS,
        "update_token_counts",
        "",
        "update_token_counts(session_id, input_tokens, ...)",
        _token_counts(absolute=False),
    ),
    _O(
        _SESSIONS,
        "update_token_counts",
        "absolute",
        "update_token_counts(session_id, ..., absolute=True)",
        _token_counts(absolute=True),
    ),
    _O(
        _SESSIONS,
        "append_message",
        "",
        "append_message(session_id, role, content, **fields)",
        _append_message,
    ),
    _O(_SESSIONS, "get_messages", "", "get_messages(session_id)", only(S.get_messages)),
    _O(_SESSIONS, "count_messages", "", "count_messages(session_id)", only(S.count_messages)),
    _O(_SESSIONS, "get_transcripts", "", "get_transcripts(session_ids)", _get_transcripts),
    _O(
        _TRANSITIONS,
        "request_handoff",
        "",
        "request_handoff(session_id, platform)",
        _request(retry=False),
    ),
    _O(
        _TRANSITIONS,
        "retry_handoff",
        "",
        "retry_handoff(session_id, platform=None)",
        _request(retry=True),
    ),
    _O(_TRANSITIONS, "claim_handoff", "", "claim_handoff(session_id)", _claim_one),
    _O(
        _TRANSITIONS,
        "complete_handoff",
        "",
        "complete_handoff(session_id)",
        _complete_one,
        when=", after the store claimed it",
    ),
    _O(
        _TRANSITIONS,
        "fail_handoff",
        "",
        "fail_handoff(session_id, error)",
        _fail_one,
        when=", after the store claimed it",
    ),
    _O(
        _BATCHES, "claim_pending_handoffs", "", "claim_pending_handoffs(limit)", _claim_batch(False)
    ),
    _O(
        _BATCHES,
        "claim_pending_handoffs",
        "platform",
        "claim_pending_handoffs(limit, platform=platform)",
        _claim_batch(True),
    ),
    _O(_BATCHES, "claim_handoffs", "", "claim_handoffs(session_ids)", _claim_given(False)),
    _O(
        _BATCHES,
        "claim_handoffs",
        "turns",
        "claim_handoffs(session_ids, turn_holders=holders)",
        _claim_given(True),
    ),
    _O(
        _BATCHES,
        "claim_next_handoffs",
        "",
        "claim_next_handoffs(limit, exclude=ids)",
        _claim_next(False),
    ),
    _O(
        _BATCHES,
        "claim_next_handoffs",
        "turns",
        "claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)",
        _claim_next(True),
    ),
    _O(
        _BATCHES,
        "complete_handoffs",
        "",
        "complete_handoffs(session_ids)",
        _finish(completes=True, fails=False, releases=False),
        when=", after the store claimed them",
    ),
    _O(
        _BATCHES,
        "fail_handoffs",
        "",
        "fail_handoffs(errors)",
        _finish(completes=False, fails=True, releases=False),
        when=", after the store claimed them",
    ),
    _O(
        _BATCHES,
        "finish_handoffs",
        "",
        "finish_handoffs(outcomes)",
        _finish(completes=True, fails=True, releases=False),
        when=", after the store claimed them",
    ),
    _O(
        _BATCHES,
        "finish_handoffs",
        "release_turns",
        "finish_handoffs(outcomes, release_turns=holders)",
        _finish(completes=True, fails=True, releases=True),
        when=", after the store claimed them",
    ),
    _O(_LEASES, "renew_handoff_leases", "", "renew_handoff_leases(session_ids)", _renew),
    _O(
        _LEASES,
        "reclaim_stale_running_handoffs",
        "",
        "reclaim_stale_running_handoffs(error)",
        _reclaim(ReclaimScope.STALE),
    ),
    _O(
        _LEASES,
        "reclaim_expired_handoffs",
        "",
        "reclaim_expired_handoffs(error)",
        _reclaim(ReclaimScope.EXPIRED),
    ),
    _O(
        _LEASES,
        "reclaim_running_handoffs",
        "",
        "reclaim_running_handoffs(error)",
        _reclaim(ReclaimScope.ALL),
    ),
    _O(_LEASES, "preview_reclaim", "", "preview_reclaim('stale')", _preview(ReclaimScope.STALE)),
    _O(
        _LEASES,
        "preview_reclaim",
        "expired",
        "preview_reclaim('expired')",
        _preview(ReclaimScope.EXPIRED),
    ),
    _O(_LEASES, "preview_reclaim", "all", "preview_reclaim('all')", _preview(ReclaimScope.ALL)),
    _O(
        _TURNS,
        "has_live_session_turn_lease",
        "",
        "has_live_session_turn_lease(session_id)",
        _live_turn,
    ),
    _O(
        _TURNS,
        "try_acquire_session_turn_lease",
        "",
        "try_acquire_session_turn_lease(session_id, holder)",
        _acquire_turn,
    ),
    _O(
        _TURNS,
        "refresh_session_turn_lease",
        "",
        "refresh_session_turn_lease(session_id, holder)",
        _refresh_turn,
    ),
    _O(
        _TURNS,
        "release_session_turn_lease",
        "",
        "release_session_turn_lease(session_id, holder)",
        _release_turn,
    ),
    _O(
        _TURNS,
        "refresh_session_turn_leases",
        "",
        "refresh_session_turn_leases(turn_holders)",
        _refresh_turns,
    ),
    _O(
        _TURNS,
        "release_session_turn_leases",
        "",
        "release_session_turn_leases(turn_holders)",
        _release_turns,
    ),
    _O(_AUDIT, "handoff_history", "", "handoff_history(session_id)", only(S.handoff_history)),
    _O(
        _AUDIT,
        "prune_handoff_events",
        "",
        "prune_handoff_events(older_than_seconds)",
        only(S.prune_events),
    ),
    _O(
        _AUDIT,
        "prune_handoff_events",
        "dry_run",
        "prune_handoff_events(older_than_seconds, dry_run=True)",
        only(S.count_events_before),
    ),
    _O(
        _AUDIT,
        "handoff_events_after",
        "",
        "handoff_events_after(after, limit=limit)",
        only(S.handoff_events_after),
    ),
    _O(
        _AUDIT,
        "recent_handoff_failures",
        "",
        "recent_handoff_failures(limit=limit)",
        only(S.recent_failed_events),
    ),
    _O(
        _AUDIT,
        "last_handoff_event_id",
        "",
        "last_handoff_event_id()",
        only(S.last_handoff_event_id),
    ),
    _O(
        _READS,
        "list_pending_handoffs",
        "",
        "list_pending_handoffs()",
        only(S.list_handoffs, HandoffState.PENDING),
    ),
    _O(
        _READS,
        "list_handoffs",
        "",
        "list_handoffs()",
        only(S.list_handoffs, None, False, after=False, search=False),
    ),
    _O(
        _READS,
        "list_handoffs",
        "filtered",
        "list_handoffs(state='failed', limit=limit, after=session_id, search=text)",
        only(S.list_handoffs, HandoffState.FAILED, True, after=True, search=True),
    ),
    _O(
        _READS,
        "list_sessions",
        "",
        "list_sessions()",
        only(S.list_sessions, None, by_source=False, since=False, limited=False),
    ),
    _O(
        _READS,
        "list_sessions",
        "filtered",
        "list_sessions(source=source, handoff_state='pending', since=since, limit=limit)",
        only(S.list_sessions, HandoffState.PENDING, by_source=True, since=True, limited=True),
    ),
    _O(_READS, "get_session", "", "get_session(session_id)", only(S.get_session)),
    _O(_READS, "message_count", "", "message_count()", only(S.count_message_rows, False)),
    _O(
        _READS,
        "message_count",
        "session",
        "message_count(session_id)",
        only(S.count_message_rows, True),
    ),
    _O(_READS, "get_handoff_state", "", "get_handoff_state(session_id)", only(S.get_handoff_state)),
    _O(_READS, "has_pending_handoffs", "", "has_pending_handoffs()", only(S.has_pending_handoffs)),
    _O(_READS, "handoff_stats", "", "handoff_stats()", _stats),
    *SESSION_OPERATIONS,
    *SEARCH_OPERATIONS,
)

#: Builders of :mod:`hermes_state.statements` no operation sends, and why.
NOT_SENT: Final = {
    "notify_handoff_requested": "a request on PostgreSQL notifies from its one statement",
}
