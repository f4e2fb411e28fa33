"""Every SQL statement hermes-state runs, each built once here and shared by sync and async code.

Builders return SQLAlchemy Core statements whose variable parts are named bind parameters
(``:session_id``, ``:now``, ...). Builders are cached, so a statement is one object per
variant and each store compiles it once. State names are rendered as SQL literals, not bound
parameters: the partial indexes on ``handoff_state`` are only used by a query whose predicate
implies the index's ``WHERE``. SQLite re-plans with bound values, but PostgreSQL's generic
plan for a prepared statement (psycopg prepares after five executions) cannot know a
parameter's value; a literal keeps every backend on the index.
"""

from __future__ import annotations

from .audit import (
    EVENT_COLUMNS,
    count_failures_since,
    handoff_history,
    prune_events,
    recent_failures,
    running_by_owner,
)
from .audit import count_events_before as count_events_before
from .claims import (
    DELIVERY_HOLDER,
    DeliveryHolder,
    PickedClaim,
    claim_pending_statement,
    claim_pending_transition,
    claim_picked,
    finish_claims,
    finish_claims_json,
    renew_lease,
    renew_leases,
    renew_leases_json,
)
from .claims import PICKED as PICKED
from .claims import claim_given as claim_given
from .claims import claim_next as claim_next
from .claims import oldest_pending_locked as oldest_pending_locked
from .claims import pending_row_locked as pending_row_locked
from .core import (
    HANDOFF_CHANNEL,
    MESSAGE_FIELDS,
    SESSION_FIELDS,
    Capabilities,
    session_columns,
    state_is,
)
from .messages import (
    count_appended_messages,
    count_rewind,
    delete_messages,
    delete_model_usage,
    delete_unreferenced_prompts,
    lineage_link,
    live_counts,
    live_head,
    live_message_ids,
    live_tool_calls,
    message_of_session,
    messages_around,
    nth_newest_message,
    reset_session_counters,
    rewind_from,
    session_closed,
    session_locked,
    set_message_counters,
)
from .reads import (
    count_handoffs_by_state,
    get_handoff_state,
    get_session,
    handoff_events_after,
    has_pending_handoffs,
    last_handoff_event_id,
    list_handoffs,
    oldest_pending_requested_at,
    recent_failed_events,
)
from .reads import count_sessions as count_sessions
from .reads import list_sessions as list_sessions
from .titles import get_title, lineage, session_by_title, set_title, title_holder
from .transcript import (
    Visibility,
    append_message,
    append_message_counted,
    count_all_messages,
    count_appended_message,
    count_messages,
    get_messages,
    insert_session,
)
from .transcript import get_transcripts as get_transcripts
from .transitions import (
    Fence,
    ReclaimScope,
    Transition,
    claim_handoff,
    claimed_attempt,
    complete_handoff,
    fail_handoff,
    notify_handoff_requested,
    reclaim_handoffs,
    reclaimable,
    request_handoff,
)
from .turn_leases import MAX_LINEAGE_DEPTH as MAX_LINEAGE_DEPTH
from .turn_leases import (
    expire_turn_lease,
    insert_turn_lease,
    lineage_parent,
    refresh_turn_lease,
    release_turn_lease,
    turn_lease_holder,
)
from .turn_leases import refresh_turn_leases as refresh_turn_leases
from .turn_leases import release_turn_leases as release_turn_leases

__all__ = [
    "DELIVERY_HOLDER",
    "EVENT_COLUMNS",
    "HANDOFF_CHANNEL",
    "MESSAGE_FIELDS",
    "SESSION_FIELDS",
    "Capabilities",
    "DeliveryHolder",
    "Fence",
    "PickedClaim",
    "ReclaimScope",
    "Transition",
    "Visibility",
    "append_message",
    "append_message_counted",
    "claim_handoff",
    "claim_pending_statement",
    "claim_pending_transition",
    "claim_picked",
    "claimed_attempt",
    "complete_handoff",
    "count_all_messages",
    "count_appended_message",
    "count_appended_messages",
    "count_failures_since",
    "count_handoffs_by_state",
    "count_messages",
    "count_rewind",
    "count_sessions",
    "delete_messages",
    "delete_model_usage",
    "delete_unreferenced_prompts",
    "expire_turn_lease",
    "fail_handoff",
    "finish_claims",
    "finish_claims_json",
    "get_handoff_state",
    "get_messages",
    "get_session",
    "get_title",
    "handoff_events_after",
    "handoff_history",
    "has_pending_handoffs",
    "insert_session",
    "insert_turn_lease",
    "last_handoff_event_id",
    "lineage",
    "lineage_link",
    "lineage_parent",
    "list_handoffs",
    "live_counts",
    "live_head",
    "live_message_ids",
    "live_tool_calls",
    "message_of_session",
    "messages_around",
    "notify_handoff_requested",
    "nth_newest_message",
    "oldest_pending_requested_at",
    "prune_events",
    "recent_failed_events",
    "recent_failures",
    "reclaim_handoffs",
    "reclaimable",
    "refresh_turn_lease",
    "release_turn_lease",
    "renew_lease",
    "renew_leases",
    "renew_leases_json",
    "request_handoff",
    "reset_session_counters",
    "rewind_from",
    "running_by_owner",
    "session_by_title",
    "session_closed",
    "session_columns",
    "session_locked",
    "set_message_counters",
    "set_title",
    "state_is",
    "title_holder",
    "turn_lease_holder",
]
