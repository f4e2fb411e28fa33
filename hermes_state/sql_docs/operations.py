"""The catalog: which builders each store operation runs on each dialect, in order."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy.sql.elements import ClauseElement

from .. import statements as S
from ..models import HandoffState
from ..statements import Capabilities, Fence, ReclaimScope
from ..validation import require_only_states


@dataclass(frozen=True, slots=True, eq=False)  # a statement's == builds SQL
class Sent:
    """One statement an operation sends: the builder (a cached function of
    :mod:`hermes_state.statements`), how it was called, the statement, and when it is sent."""

    builder: str
    call: str
    statement: ClauseElement
    note: str = ""


def _arg(value: object) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(_arg(item) for item in value)) + "}"
    return repr(value)


def _call(builder: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> str:
    """``statements.builder(name=value, ...)``, the arguments named."""
    bound = inspect.signature(builder).bind(*args, **kw)
    shown = ", ".join(f"{name}={_arg(value)}" for name, value in bound.arguments.items())
    return f"statements.{builder.__name__}({shown})"


def _sent(
    builder: Callable[..., Any], *args: Any, part: str | None = None, note: str = "", **kw: Any
) -> Sent:
    """The statement ``builder(*args, **kw)`` builds (its attribute ``part``, for a builder of
    several), called as the plans call it, so it is the very object they send."""
    built = builder(*args, **kw)
    statement = built if part is None else getattr(built, part)
    assert isinstance(statement, ClauseElement)
    call = _call(builder, args, kw) + ("" if part is None else f".{part}")
    return Sent(builder.__name__, call, statement, note)


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
    return _move(caps, transition, builder.__name__, _call(builder, args, kw), note)


#: The lineage walk (:func:`hermes_state.plans.turn_leases._conversation`): the session's
#: parent, then its parent's, while the parent ended by compression.
_PER_WALK = "once, and once more per step up the session's compression lineage"


_SERVER_FILL = "MySQL/MariaDB: when the id existed (elsewhere the insert fills it in)"


def _create_session(prompt: bool, parent: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        mysql = caps.name in ("mysql", "mariadb")
        sent = [_sent(S.store_system_prompt, caps.name)] if prompt else []
        sent.append(_sent(S.insert_session, caps.name))
        if mysql:
            sent.append(_sent(S.fill_session, note=_SERVER_FILL))
        if prompt:
            unused = "when the id existed: its own prompt stays" if mysql else ""
            sent.append(_sent(S.forget_system_prompt, note=unused))
        if parent:
            sent.append(_sent(S.session_and_parent))
            sent.append(_sent(S.inherit_session, note="when the parent has something to give"))
        return sent

    return steps


def _prompt_update(statement: Callable[..., Any], prompt: bool) -> Callable[..., list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        sent = [_sent(S.session_prompt_and_config)]
        if prompt:
            sent.append(_sent(S.store_system_prompt, caps.name, note="when the session exists"))
        sent += [
            _sent(statement, note="when the session exists"),
            _sent(S.forget_system_prompt, note="when the session pointed at another prompt"),
        ]
        return sent

    return steps


def _token_counts(absolute: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        sent = [*_create_session(False, False)(caps), _sent(S.usage_route)]
        sent.append(_sent(S.set_usage_route, note="the first accounted call, on another route"))
        sent.append(_sent(S.count_tokens, absolute))
        if not absolute:
            sent.append(_sent(S.record_model_usage, caps.name, note="when the call has usage"))
        return sent

    return steps


def _append_message(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.append_message_counted)]
    return [_sent(S.append_message, caps.insert_returning), _sent(S.count_appended_message)]


def _get_transcripts(caps: Capabilities) -> list[Sent]:
    if caps.name == "sqlite":
        return [_sent(S.get_messages, note="once per session")]
    return [_sent(S.get_transcripts, caps.name == "postgresql")]


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
        sent.append(_sent(S.claimed_attempt))
    return sent


def _claim_batch(by_platform: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.name == "postgresql":
            return [_sent(S.claim_pending_statement, by_platform)]
        if caps.update_returning:
            return _transition(caps, S.claim_pending_transition, by_platform)
        claim = S.claim_picked(by_platform)
        call = _call(S.claim_picked, (by_platform,), {}) + ".transition"
        return [
            _sent(S.claim_picked, by_platform, part="pick"),
            *_move(caps, claim.transition, "claim_picked", call, ""),
            _sent(S.claim_picked, by_platform, part="fetch"),
        ]

    return steps


def _take_turn(caps: Capabilities, note: str) -> list[Sent]:
    """The one-row acquire of a turn lease (after the lineage walk)."""
    return [
        _sent(S.expire_turn_lease, note=note),
        _sent(S.insert_turn_lease, caps.name, note=note),
        _sent(S.turn_lease_holder, note=note),
    ]


def _claim_given_steps(caps: Capabilities, turns: bool) -> list[Sent]:
    """:func:`hermes_state.plans.claims._claim_given` where it is not one statement."""
    sent = [_sent(S.pending_row_locked, note="once per session given")]
    if turns:
        sent.append(_sent(S.lineage_parent, note="for each row locked: " + _PER_WALK))
        sent += _take_turn(caps, "once per conversation, in key order")
    per_row = "once per row claimed"
    sent += _transition(caps, S.claim_handoff, False, note=per_row)
    sent.append(_sent(S.get_session, note=per_row))
    return sent


def _claim_given(turns: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [_sent(S.claim_given, turns)]
        return _claim_given_steps(caps, turns)

    return steps


def _claim_next(turns: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [_sent(S.claim_next, turns)]
        return [_sent(S.oldest_pending_locked), *_claim_given_steps(caps, turns)]

    return steps


def _complete_one(caps: Capabilities) -> list[Sent]:
    return _transition(caps, S.complete_handoff, Fence.CLAIM)


def _fail_one(caps: Capabilities) -> list[Sent]:
    return _transition(caps, S.fail_handoff, require_only_states(None), Fence.CLAIM)


def _release_steps(note: str) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), _sent(S.release_turn_lease, note=note)]


def _finish(completes: bool, fails: bool, releases: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [_sent(S.finish_claims, True, releases)]
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
        return [_sent(S.renew_leases)]
    if caps.name == "sqlite":
        return [_sent(S.renew_leases_json)]
    return [_sent(S.renew_lease, note="once per session")]


def _reclaim(scope: ReclaimScope) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return _transition(caps, S.reclaim_handoffs, scope)
        return [
            _sent(S.reclaimable, scope, lock=True),
            *_transition(caps, S.reclaim_handoffs, scope),
        ]

    return steps


def _preview(scope: ReclaimScope) -> Callable[[Capabilities], list[Sent]]:
    return lambda _caps: [_sent(S.reclaimable, scope, lock=False)]


def _only(
    builder: Callable[..., Any], *args: Any, **kw: Any
) -> Callable[[Capabilities], list[Sent]]:
    """An operation that sends one statement, the same builder on every dialect."""
    return lambda _caps: [_sent(builder, *args, **kw)]


def _acquire_turn(caps: Capabilities) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), *_take_turn(caps, "")]


def _live_turn(_caps: Capabilities) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), _sent(S.live_turn_lease)]


def _refresh_turn(_caps: Capabilities) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), _sent(S.refresh_turn_lease)]


def _release_turn(_caps: Capabilities) -> list[Sent]:
    return _release_steps("")


def _refresh_turns(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.refresh_turn_leases)]
    per = "once per session"
    walk = "for each session: " + _PER_WALK
    return [_sent(S.lineage_parent, note=walk), _sent(S.refresh_turn_lease, note=per)]


def _release_turns(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.release_turn_leases)]
    walk = "for each session: " + _PER_WALK
    return [
        _sent(S.lineage_parent, note=walk),
        _sent(S.release_turn_lease, note="once per session"),
    ]


def _set_title(holder: str) -> Callable[[Capabilities], list[Sent]]:
    """The title writes (the user's and an automatic one send the same statements) when the
    title is free (``holder`` empty), held by an earlier compression segment of the session
    ("segment"), or held by an archived "Bot Chat" a hidden session replaces ("retired")."""

    def steps(_caps: Capabilities) -> list[Sent]:
        sent = [
            _sent(S.title_state, note="the session must exist (and its title may change)"),
            _sent(S.title_holder, note="when a title is given: another session holding it"),
        ]
        if holder:
            sent.append(_sent(S.compression_parent, note=_PER_WALK))
            sent.append(_sent(S.release_title, with_source=holder == "retired"))
        sent.append(_sent(S.set_title, note="only if the title is still what was read"))
        return sent

    return steps


def _append_refused(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:  # its one row says why nothing was appended
        return [_sent(S.append_message_counted)]
    why = "nothing was appended: is there no such session, or did compression close it?"
    return [_sent(S.append_message, caps.insert_returning), _sent(S.session_closed, note=why)]


def _append_batch(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.count_appended_messages, note="the session must exist"),
        _sent(S.append_message, False, note="once per message"),
    ]


def _around(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.messages_around, True),
        _sent(S.messages_around, False, note="when the anchor is a message of the session"),
    ]


def _conversation(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.lineage_link, note="once, and once more per step up the session's lineage"),
        _sent(S.get_messages, S.Visibility.LIVE, note="once per session of the lineage"),
    ]


def _clear(kept: str) -> Callable[[Capabilities], list[Sent]]:
    """``clear_session_messages``: every message (which leaves none), the newest ``keep_last_n``
    or those after ``before_timestamp`` (which here leave some)."""

    def steps(_caps: Capabilities) -> list[Sent]:
        sent = [_sent(S.session_locked, note="the session must exist")]
        if kept == "keep_last_n":
            sent.append(_sent(S.nth_newest_message))
            sent.append(_sent(S.delete_messages, before_id=True, note="when there are more"))
        elif kept == "before_timestamp":
            sent.append(_sent(S.delete_messages, before_timestamp=True))
        else:
            sent.append(_sent(S.delete_messages))
        sent.append(_sent(S.live_counts))
        if kept:
            sent.append(_sent(S.set_message_counters, True, note="when messages are left"))
        else:
            sent.append(_sent(S.reset_session_counters, note="when no message is left"))
            sent.append(_sent(S.delete_model_usage, note="when no message is left"))
        sent.append(_sent(S.delete_unreferenced_prompts))
        return sent

    return steps


def _rewind(expected: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(_caps: Capabilities) -> list[Sent]:
        sent = [_sent(S.count_rewind, note="the session must exist")]
        if expected:
            sent.append(_sent(S.live_message_ids, note="to compare with expected_active_ids"))
        return [
            *sent,
            _sent(S.message_of_session, note="the target must be a user message of it"),
            _sent(S.rewind_from),
            _sent(S.live_counts),
            _sent(S.live_tool_calls),
            _sent(S.set_message_counters, False),
            _sent(S.live_head),
        ]

    return steps


def _stats(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.count_handoffs_by_state),
        _sent(S.oldest_pending_requested_at),
        _sent(S.running_by_owner),
        _sent(S.count_failures_since),
        _sent(S.recent_failures),
    ]


#: The lineage-wide flags: upstream's walk of the session's compression lineage, then one
#: update per session of it.
_PER_SEGMENT = "once per session of the lineage"


def _lineage_flag(column: str) -> Callable[[Capabilities], list[Sent]]:
    return lambda _caps: [
        _sent(S.lineage_ids),
        _sent(S.set_lineage_flag, column, note=_PER_SEGMENT),
    ]


def _pin(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.lineage_ids),
        _sent(S.set_lineage_flag, "pinned", note=_PER_SEGMENT),
        _sent(S.pin_guard, note="when pinning"),
        _sent(
            S.set_lineage_flag,
            "hidden",
            note="when pinning anything but the hidden canonical Bot Chat: " + _PER_SEGMENT,
        ),
    ]


def _resolve_id(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.session_exists),
        _sent(S.ids_with_prefix, note="when no session has exactly this id"),
    ]


#: The forward walk of a compression chain (:func:`hermes_state.plans.session_flags._chain`).
_PER_SEGMENT_DOWN = "once, and once more per continuation down the compression chain"


def _resume(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.child_sessions, note=_PER_SEGMENT_DOWN + ", then per step below the tip"),
        _sent(S.has_messages, note="once per step from the tip down (at most 32)"),
    ]


def _compression_lineage(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.lineage_row, note="once, and once more per step up to the lineage's root"),
        _sent(S.child_sessions, note="once per compressed segment, from the root down"),
    ]


def _deletion(given: str) -> Callable[[Capabilities], list[Sent]]:
    """A delete (:func:`hermes_state.plans.session_flags._deletion`): existence and handoff
    state, the delegate runs, the refusals, then the rows of each session deleted."""
    each = "once per session deleted (with its delegate runs)"

    def steps(_caps: Capabilities) -> list[Sent]:
        return [
            _sent(S.session_in_flight, note=f"once for {given}, then once per delegate run"),
            _sent(S.delegate_candidates, note="when a session given exists"),
            _sent(S.lineage_parent, note=f"for {given}: " + _PER_WALK),
            _sent(S.live_turn_lease, note="once per session deleted and conversation of one"),
            _sent(S.orphan_children, note=each),
            _sent(S.delete_messages, note=each),
            _sent(S.delete_model_usage, note=each),
            _sent(S.delete_session_turn_lease, note=each),
            _sent(S.delete_session_row, note=each),
            _sent(S.delete_unreferenced_prompts),
        ]

    return steps


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
        _sent(S.rich_sessions, caps.name, _PICKER, False),
        _sent(S.compression_chains, caps.name, note=_COMPRESSED),
        _sent(S.rich_sessions_by_id, caps.name, False, note=_COMPRESSED),
    ]


def _list_rich_filtered(caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.rich_sessions, caps.name, _EVERY_FILTER, False),
        _sent(S.pinned_sessions, caps.name, _EVERY_FILTER, False, note="with include_pinned"),
    ]


def _list_rich_by_activity(caps: Capabilities) -> list[Sent]:
    chosen = S.SessionFilter(visible_only=True)
    return [
        _sent(
            S.rich_sessions_by_activity,
            caps.name,
            chosen,
            True,
            by_id=True,
            by_text=True,
            by_compact_text=True,
        )
    ]


def _per_dialect(
    builder: Callable[..., Any], *args: Any, **kw: Any
) -> Callable[[Capabilities], list[Sent]]:
    """An operation that sends one statement, built for the connected dialect."""
    return lambda caps: [_sent(builder, caps.name, *args, **kw)]


@dataclass(frozen=True, slots=True)
class Operation:
    """A store operation (a method of :class:`~hermes_state.SessionDB`), called as ``call``
    shows (``when`` says in what state, if it matters), and the statements it sends on a
    dialect (``steps``), in order."""

    section: str
    name: str
    variant: str
    call: str
    steps: Callable[[Capabilities], list[Sent]]
    when: str = ""

    @property
    def slug(self) -> str:
        return self.name + (f".{self.variant}" if self.variant else "")


_SESSIONS = "Sessions and transcripts"
_TRANSITIONS = "Handoff transitions"
_BATCHES = "Batches"
_LEASES = "Claim leases and reclaims"
_TURNS = "Session turn leases"
_AUDIT = "Audit trail"
_READS = "Reads"
_TITLES = "Titles"
_FLAGS = "Session flags, ids and meta"
_MESSAGES = "Messages"
_LISTING = "Session listing"

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
    _O(_SESSIONS, "end_session", "", "end_session(session_id, end_reason)", _only(S.end_session)),
    _O(_SESSIONS, "reopen_session", "", "reopen_session(session_id)", _only(S.reopen_session)),
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
    _O(_SESSIONS, "get_messages", "", "get_messages(session_id)", _only(S.get_messages)),
    _O(_SESSIONS, "count_messages", "", "count_messages(session_id)", _only(S.count_messages)),
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
    _O(_AUDIT, "handoff_history", "", "handoff_history(session_id)", _only(S.handoff_history)),
    _O(
        _AUDIT,
        "prune_handoff_events",
        "",
        "prune_handoff_events(older_than_seconds)",
        _only(S.prune_events),
    ),
    _O(
        _AUDIT,
        "prune_handoff_events",
        "dry_run",
        "prune_handoff_events(older_than_seconds, dry_run=True)",
        _only(S.count_events_before),
    ),
    _O(
        _AUDIT,
        "handoff_events_after",
        "",
        "handoff_events_after(after, limit=limit)",
        _only(S.handoff_events_after),
    ),
    _O(
        _AUDIT,
        "recent_handoff_failures",
        "",
        "recent_handoff_failures(limit=limit)",
        _only(S.recent_failed_events),
    ),
    _O(
        _AUDIT,
        "last_handoff_event_id",
        "",
        "last_handoff_event_id()",
        _only(S.last_handoff_event_id),
    ),
    _O(
        _READS,
        "list_pending_handoffs",
        "",
        "list_pending_handoffs()",
        _only(S.list_handoffs, HandoffState.PENDING),
    ),
    _O(
        _READS,
        "list_handoffs",
        "",
        "list_handoffs()",
        _only(S.list_handoffs, None, False, after=False, search=False),
    ),
    _O(
        _READS,
        "list_handoffs",
        "filtered",
        "list_handoffs(state='failed', limit=limit, after=session_id, search=text)",
        _only(S.list_handoffs, HandoffState.FAILED, True, after=True, search=True),
    ),
    _O(
        _READS,
        "list_sessions",
        "",
        "list_sessions()",
        _only(S.list_sessions, None, by_source=False, since=False, limited=False),
    ),
    _O(
        _READS,
        "list_sessions",
        "filtered",
        "list_sessions(source=source, handoff_state='pending', since=since, limit=limit)",
        _only(S.list_sessions, HandoffState.PENDING, by_source=True, since=True, limited=True),
    ),
    _O(_READS, "get_session", "", "get_session(session_id)", _only(S.get_session)),
    _O(_READS, "message_count", "", "message_count()", _only(S.count_message_rows, False)),
    _O(
        _READS,
        "message_count",
        "session",
        "message_count(session_id)",
        _only(S.count_message_rows, True),
    ),
    _O(
        _READS, "get_handoff_state", "", "get_handoff_state(session_id)", _only(S.get_handoff_state)
    ),
    _O(_READS, "has_pending_handoffs", "", "has_pending_handoffs()", _only(S.has_pending_handoffs)),
    _O(_READS, "handoff_stats", "", "handoff_stats()", _stats),
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
    _O(_TITLES, "get_session_title", "", "get_session_title(session_id)", _only(S.get_title)),
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
        _only(S.title_state),
    ),
    _O(
        _TITLES,
        "set_session_title_source",
        "",
        "set_session_title_source(session_id, source)",
        _only(S.set_title_source),
    ),
    _O(
        _TITLES,
        "get_session_by_title",
        "",
        "get_session_by_title(title)",
        _only(S.session_by_title),
    ),
    _O(
        _TITLES,
        "resolve_session_by_title",
        "",
        "resolve_session_by_title(title)",
        _only(S.lineage),
    ),
    _O(
        _TITLES,
        "get_next_title_in_lineage",
        "",
        "get_next_title_in_lineage(base_title)",
        _only(S.lineage),
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
        _only(S.child_sessions, note=_PER_SEGMENT_DOWN),
    ),
    _O(
        _FLAGS,
        "get_compression_tip",
        "",
        "get_compression_tip(session_id)",
        _only(S.child_sessions, note=_PER_SEGMENT_DOWN),
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
    _O(_FLAGS, "get_meta", "", "get_meta(key)", _only(S.get_meta)),
    _O(_FLAGS, "set_meta", "", "set_meta(key, value)", lambda caps: [_sent(S.set_meta, caps.name)]),
    # -- messages
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
        _only(S.get_messages, limited=True, skipped=True),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "latest",
        "get_messages(session_id, limit=limit, latest=True)",
        _only(S.get_messages, newest_first=True, limited=True),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "after",
        "get_messages(session_id, limit=limit, after_id=after_id)",
        _only(S.get_messages, after=True, limited=True),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "inactive",
        "get_messages(session_id, include_inactive=True)",
        _only(S.get_messages, S.Visibility.ALL),
    ),
    _O(
        _MESSAGES,
        "get_messages",
        "compacted",
        "get_messages(session_id, include_compacted=True)",
        _only(S.get_messages, S.Visibility.DISPLAY),
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
        _only(S.get_messages, S.Visibility.LIVE),
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
    _O(_LISTING, "session_count_ge", "", "session_count_ge(n)", _only(S.some_sessions)),
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
)

#: Builders of :mod:`hermes_state.statements` no operation sends, and why.
NOT_SENT: Final = {
    "notify_handoff_requested": "a request on PostgreSQL notifies from its one statement",
}
