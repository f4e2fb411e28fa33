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

import enum
import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from sqlalchemy import (
    ColumnElement,
    Delete,
    Dialect,
    Double,
    Insert,
    Integer,
    Select,
    String,
    Text,
    Update,
    all_,
    and_,
    any_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
)
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.util import ClauseAdapter

from ..models import (
    ID_LENGTH,
    REQUESTABLE_STATES,
    HandoffState,
    handoff_events,
    messages,
    session_turn_leases,
    sessions,
    system_prompts,
)

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
    "append_message",
    "append_message_counted",
    "claim_handoff",
    "claim_pending_statement",
    "claim_pending_transition",
    "claim_picked",
    "claimed_attempt",
    "complete_handoff",
    "count_appended_message",
    "count_failures_since",
    "count_handoffs_by_state",
    "count_messages",
    "expire_turn_lease",
    "fail_handoff",
    "finish_claims",
    "finish_claims_json",
    "get_handoff_state",
    "get_messages",
    "get_session",
    "handoff_events_after",
    "handoff_history",
    "has_pending_handoffs",
    "insert_session",
    "insert_turn_lease",
    "last_handoff_event_id",
    "lineage_parent",
    "list_handoffs",
    "notify_handoff_requested",
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
    "running_by_owner",
    "session_columns",
    "state_is",
    "turn_lease_holder",
]

#: Optional columns a caller may set through ``create_session(..., **fields)``.
SESSION_FIELDS = (
    "user_id",
    "title",
    "model",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "model_config",
    "system_prompt",
)

#: Optional columns a caller may set through ``append_message(..., **fields)``: upstream's
#: message fields. ``active`` is not one: an appended turn is always live.
MESSAGE_FIELDS = (
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "effect_disposition",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "platform_message_id",
    "observed",
    "api_content",
    "display_kind",
    "display_metadata",
)

_c = sessions.c
#: The PostgreSQL NOTIFY channel on which ``request_handoff`` wakes watchers.
HANDOFF_CHANNEL = "hermes_state_handoffs"


def _resolved_system_prompt() -> ColumnElement[Any]:
    """``system_prompt`` as upstream reads it: since its schema 25 the text lives in
    ``system_prompts`` under ``system_prompt_hash``; a row without a hash (or whose hash has no
    prompt) keeps its inline ``system_prompt``. Correlated to ``sessions`` explicitly, so the
    same expression serves a SELECT and an ``UPDATE ... RETURNING`` (SQLite and PostgreSQL
    allow subqueries there)."""
    by_hash = (
        select(system_prompts.c.prompt)
        .where(system_prompts.c.hash == _c.system_prompt_hash)
        .correlate(sessions)
        .scalar_subquery()
    )
    return func.coalesce(by_hash, _c.system_prompt, type_=_c.system_prompt.type).label(
        "system_prompt"
    )


def session_columns() -> tuple[ColumnElement[Any], ...]:
    """What every read of a whole session row selects (or returns): the table's columns in
    their order, ``system_prompt`` resolved through ``system_prompts`` (the name kept)."""
    return _SESSION_COLUMNS


#: Built once: the statements below embed it, and their builders are cached.
_SESSION_COLUMNS: Final[tuple[ColumnElement[Any], ...]] = tuple(
    _resolved_system_prompt() if column.name == "system_prompt" else column for column in _c
)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the connected dialect can do, for the builders that must choose per dialect."""

    name: str
    update_returning: bool
    insert_returning: bool

    @classmethod
    def of(cls, dialect: Dialect) -> Capabilities:
        return cls(
            name=dialect.name,
            update_returning=bool(dialect.update_returning),
            insert_returning=bool(dialect.insert_returning),
        )

    @property
    def single_statement(self) -> bool:
        """Whether every transition is one statement here (:attr:`Transition.single`):
        PostgreSQL, whose data-modifying CTEs lock, move and record in one round trip."""
        return self.name == "postgresql"


def _literal(state: HandoffState) -> ColumnElement[str]:
    # The value comes from the enum, never from a caller.
    return literal_column(f"'{state.value}'")


def state_is(state: HandoffState) -> ColumnElement[bool]:
    """``handoff_state = '<state>'`` with the state as a literal (see the module docstring)."""
    return _c.handoff_state == _literal(state)


def _state_is_unindexed(state: HandoffState) -> ColumnElement[bool]:
    """``+handoff_state = '<state>'``: SQLite's unary ``+`` keeps the term off every index, for
    a statement that must reach its few rows by key while also testing their state (without it,
    SQLite may walk the whole partial index of that state, testing each row against the keys)."""
    unindexed: UnaryExpression[str] = UnaryExpression(
        _c.handoff_state, operator=operators.custom_op("+")
    )
    return unindexed == _literal(state)


def _state_in(states: Iterable[HandoffState | None]) -> ColumnElement[bool]:
    terms = [_c.handoff_state.is_(None) if s is None else state_is(s) for s in states]
    return or_(*terms)


# -- sessions and transcript -------------------------------------------------------------------


@functools.cache
def insert_session(dialect_name: str) -> Insert:
    """Insert a session, leaving an existing row with the same id untouched."""
    # Each dialect's insert construct is imported only when that dialect is used.
    values: dict[str, Any] = {name: bindparam(name) for name in ("id", "source", *SESSION_FIELDS)}
    if dialect_name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(sessions).values(values).on_conflict_do_nothing(index_elements=["id"])
    if dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        stmt = postgresql.insert(sessions).values(values)
        return stmt.on_conflict_do_nothing(index_elements=["id"])
    if dialect_name in ("mysql", "mariadb"):
        # Not ON DUPLICATE KEY UPDATE: that would also swallow a clash on another unique key
        # (upstream's idx_sessions_title_unique), silently creating nothing. Only an existing
        # id is skipped; a duplicate title fails with 1062 (translated in errors.py).
        names = ("id", "source", *SESSION_FIELDS)
        row = select(*(bindparam(name, type_=_c[name].type) for name in names)).where(
            ~exists().where(_c.id == bindparam("id"))
        )
        return sessions.insert().from_select(names, row)
    raise NotImplementedError(f"hermes-state does not support the {dialect_name!r} dialect")


@functools.cache
def append_message(returning: bool) -> Insert:
    """Append a live transcript entry with every message field (NULL when not given), inserting
    nothing when the session does not exist."""
    m = messages.c
    # Typed parameters: in a SELECT list nothing else tells the driver (asyncpg asks) their types.
    fields = [bindparam(name, type_=m[name].type) for name in MESSAGE_FIELDS]
    row = select(
        bindparam("session_id", type_=m.session_id.type),
        bindparam("role", type_=m.role.type),
        bindparam("content", type_=m.content.type),
        bindparam("now", type_=m.timestamp.type),
        *fields,
        literal_column("1"),
    ).where(exists().where(_c.id == bindparam("session_id")))
    names = ["session_id", "role", "content", "timestamp", *MESSAGE_FIELDS, "active"]
    stmt = messages.insert().from_select(names, row)
    return stmt.returning(m.id) if returning else stmt


@functools.cache
def count_appended_message() -> Update:
    """Upstream's counters after one append, in the append's transaction: one more message and
    ``:tool_calls_added`` more tool calls (a NULL counter stays NULL, as upstream leaves it)."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"))
        .values(
            message_count=_c.message_count + 1,
            tool_call_count=_c.tool_call_count + bindparam("tool_calls_added", type_=Integer()),
        )
    )


@functools.cache
def append_message_counted() -> Select[tuple[int]]:
    """PostgreSQL, one statement: the append and its counters (see :func:`append_message` and
    :func:`count_appended_message`); returns the new id, no row for an unknown session."""
    inserted = append_message(True).cte("inserted")
    counted = count_appended_message().where(exists(select(inserted.c.id))).cte("counted")
    return select(inserted.c.id).add_cte(counted)


@functools.cache
def get_messages() -> Select[Any]:
    """The live transcript (rewound turns, ``active = 0``, left out), oldest first, with every
    column the table has: ``*`` also reads the columns of an adopted file the models do not
    know, with no reflection and one compiled statement."""
    m = messages.c
    return (
        select(literal_column("*"))
        .select_from(messages)
        .where(m.session_id == bindparam("session_id"), m.active == literal_column("1"))
        .order_by(m.id)
    )


@functools.cache
def count_messages() -> Select[Any]:
    """How many messages :func:`get_messages` returns for ``:session_id``, counted in the
    database (the index on ``session_id, id`` covers the lookup)."""
    m = messages.c
    return (
        select(func.count().label("count"))
        .select_from(messages)
        .where(m.session_id == bindparam("session_id"), m.active == literal_column("1"))
    )


@functools.cache
def get_transcripts(array: bool) -> Select[Any]:
    """The live transcripts of many sessions at once, as :func:`get_messages` reads one: every
    column (``session_id`` among them), in session then message order. The sessions are
    ``:ids``, a PostgreSQL array where ``array``, else an expanding list."""
    m = messages.c
    ids = any_(_pg_array("ids")) if array else None
    wanted = m.session_id == ids if array else m.session_id.in_(bindparam("ids", expanding=True))
    return (
        select(literal_column("*"))
        .select_from(messages)
        .where(wanted, m.active == literal_column("1"))
        .order_by(m.session_id, m.id)
    )


# -- the handoff state machine -----------------------------------------------------------------


class Fence(enum.Enum):
    """How a store proves a running row is still its own before finishing it.

    NONE: any running row (a single gateway, or an operator). OWNER: running under this owner.
    CLAIM: running under this owner *and* the attempt this store claimed, so a gateway whose
    claim was rescued (reclaimed, then claimed again elsewhere) cannot finish the new attempt.
    """

    NONE = "none"
    OWNER = "owner"
    CLAIM = "claim"


class ReclaimScope(enum.Enum):
    """Which running rows a reclaim fails.

    ALL: every running row (one gateway per database). STALE: rows without a lease, with an
    expired lease, or held by ``:owner`` itself (its previous life died). EXPIRED: rows whose
    lease ended before ``:now``, whoever holds them.
    """

    ALL = "all"
    STALE = "stale"
    EXPIRED = "expired"


def _running_under(fence: Fence) -> ColumnElement[bool]:
    condition = state_is(HandoffState.RUNNING)
    if fence is Fence.NONE:
        return condition
    condition = and_(condition, _c.handoff_owner == bindparam("owner"))
    if fence is Fence.CLAIM:
        condition = and_(condition, _c.handoff_attempt == bindparam("attempt"))
    return condition


def _finished(state: HandoffState, error: ColumnElement[Any] | None) -> dict[str, Any]:
    return {
        "handoff_state": _literal(state),
        "handoff_error": error,
        "handoff_finished_at": bindparam("now"),
        "handoff_lease_expires_at": None,
    }


@dataclass(frozen=True, slots=True)
class Transition:
    """One state-machine move, as two statements sharing one condition or as one statement.

    ``record`` appends the audit row, selecting the session rows the move applies to (their
    current state is the event's ``from_state``) and locking them (FOR UPDATE on servers;
    SQLite's BEGIN IMMEDIATE already serialises writers). ``apply`` then updates exactly those
    rows. Run in that order in one transaction, the move and its event commit or vanish
    together, and a lost race inserts no event and updates nothing.

    ``single`` is the same move as one PostgreSQL statement, safe in autocommit: a CTE locks
    the rows (``locked``, keeping their state as ``from_state``), moves them (``moved``) and
    records their events from what moved, then returns each moved row's ``id`` and
    ``handoff_attempt`` (and, for requests, wakes LISTENing watchers with ``pg_notify``).
    None for a move built for SQLite only.
    """

    record: Insert
    apply: Update
    single: Select[Any] | None


def _transition(
    to_state: HandoffState,
    condition: ColumnElement[bool],
    values: dict[str, Any],
    *,
    detail: ColumnElement[Any] | None = None,
    attempt: ColumnElement[Any] | None = None,
    skip_locked: bool = False,
    notify: bool = False,
    by_key: bool = False,
) -> Transition:
    source = (
        select(
            _c.id,
            _c.handoff_state,
            _literal(to_state),
            bindparam("now", type_=Double()),
            bindparam("actor", type_=String()),
            attempt if attempt is not None else _c.handoff_attempt,
            detail if detail is not None else null(),
        )
        .where(condition)
        .with_for_update(skip_locked=skip_locked)
    )
    apply = sessions.update().where(condition).values(**values)
    if by_key:
        source = source.with_hint(sessions, _MYSQL_BY_KEY, "mysql")
        apply = apply.with_hint(_MYSQL_BY_KEY, dialect_name="mysql")
    record = handoff_events.insert().from_select(EVENT_COLUMNS, source)
    single = _single_statement(to_state, condition, values, detail, skip_locked, notify)
    return Transition(record, apply, single)


def _single_statement(
    to_state: HandoffState,
    condition: ColumnElement[bool],
    values: dict[str, Any],
    detail: ColumnElement[Any] | None,
    skip_locked: bool,
    notify: bool,
) -> Select[Any]:
    # Rows are locked in id order, as every multi-row lock here is: no two statements can
    # then wait for each other's rows.
    locked = (
        select(_c.id, _c.handoff_state.label("from_state"))
        .where(condition)
        .order_by(_c.id)
        .with_for_update(skip_locked=skip_locked)
        .cte("locked")
    )
    moved = (
        sessions.update()
        .where(_c.id == locked.c.id)
        .values(**values)
        .returning(_c.id, _c.handoff_attempt, _c.handoff_platform, locked.c.from_state)
        .cte("moved")
    )
    # The event reads the moved row: its attempt is the new one for a claim and unchanged
    # otherwise, and a detail naming the platform names the one the row now has.
    from_moved = ClauseAdapter(moved)
    event = select(
        moved.c.id,
        moved.c.from_state,
        _literal(to_state),
        bindparam("now", type_=Double()),
        bindparam("actor", type_=String()),
        moved.c.handoff_attempt,
        null() if detail is None else from_moved.traverse(detail),
    )
    recorded = handoff_events.insert().from_select(EVENT_COLUMNS, event).cte("recorded")
    answer: list[ColumnElement[Any]] = [moved.c.id, moved.c.handoff_attempt]
    if notify:
        answer.append(func.pg_notify(HANDOFF_CHANNEL, moved.c.id).label("notified"))
    return select(*answer).add_cte(recorded)


def _one_session(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    return and_(_c.id == bindparam("session_id"), condition)


@functools.cache
def request_handoff(retry: bool = False) -> Transition:
    """NULL/completed/failed -> pending (a retry: failed -> pending), clearing the previous
    attempt's error, times, owner and lease. A retry keeps the platform unless given one."""
    condition = state_is(HandoffState.FAILED) if retry else _state_in(REQUESTABLE_STATES)
    platform = (
        func.coalesce(bindparam("platform", type_=String()), _c.handoff_platform)
        if retry
        else bindparam("platform", type_=String())
    )
    reason = "retry for " if retry else "requested for "
    return _transition(
        HandoffState.PENDING,
        _one_session(condition),
        {
            "handoff_state": _literal(HandoffState.PENDING),
            "handoff_platform": platform,
            "handoff_error": None,
            "handoff_requested_at": bindparam("now"),
            "handoff_claimed_at": None,
            "handoff_finished_at": None,
            "handoff_owner": None,
            "handoff_lease_expires_at": None,
        },
        detail=literal(reason) + platform,
        notify=True,
    )


@functools.cache
def notify_handoff_requested() -> Select[tuple[object]]:
    """PostgreSQL: wake LISTENing watchers when the requesting transaction commits."""
    return select(func.pg_notify(HANDOFF_CHANNEL, bindparam("session_id", type_=String())))


def _claimed_values() -> dict[str, Any]:
    return {
        "handoff_state": _literal(HandoffState.RUNNING),
        "handoff_claimed_at": bindparam("now"),
        "handoff_owner": bindparam("owner", type_=String()),
        "handoff_lease_expires_at": bindparam("lease_expires_at", type_=Double()),
        "handoff_attempt": _c.handoff_attempt + 1,
    }


def _recorded_claims(moved: Any) -> Any:
    """PostgreSQL: the audit rows (pending -> running) of the claims ``moved`` returns, as the
    CTE that inserts them."""
    event = select(
        moved.c.id,
        _literal(HandoffState.PENDING),
        _literal(HandoffState.RUNNING),
        bindparam("now", type_=Double()),
        bindparam("actor", type_=String()),
        moved.c.handoff_attempt,
        null(),
    )
    return handoff_events.insert().from_select(EVENT_COLUMNS, event).cte("recorded")


@functools.cache
def claim_handoff(returning: bool, audit_returning: bool = False) -> Transition:
    """pending -> running: a compare-and-swap, so exactly one concurrent claimer wins.

    Stamps the claimer's ``:owner`` and ``:lease_expires_at`` (both may be NULL) and counts the
    attempt, returned by ``apply`` where the dialect can (``returning``), else by ``record``
    where its INSERT can return rows (``audit_returning``, MariaDB: the event records the
    attempt the move makes, on the row it locked), else read with :func:`claimed_attempt`.
    A row another transaction has locked is skipped (``SKIP LOCKED`` on servers): its claimer
    loses at once instead of queueing behind the winner, which is what lets several gateways
    claim in parallel.
    """
    transition = _transition(
        HandoffState.RUNNING,
        _one_session(state_is(HandoffState.PENDING)),
        _claimed_values(),
        attempt=_c.handoff_attempt + 1,
        skip_locked=True,
    )
    if returning:
        apply = transition.apply.returning(_c.handoff_attempt)
        return Transition(transition.record, apply, transition.single)
    if audit_returning:
        record = transition.record.returning(handoff_events.c.attempt.label("handoff_attempt"))
        return Transition(record, transition.apply, transition.single)
    return transition


@dataclass(frozen=True, slots=True)
class PickedClaim:
    """A batch claim for MySQL/MariaDB, which allow no ``LIMIT`` in an ``IN`` subquery and have
    no ``UPDATE ... RETURNING``: ``pick`` locks the oldest pending ids (``SKIP LOCKED``), the
    ``transition`` records and moves exactly those ``:ids``, and ``fetch`` reads them back,
    oldest first."""

    pick: Select[tuple[str]]
    transition: Transition
    fetch: Select[Any]


def _pending_on(by_platform: bool) -> ColumnElement[bool]:
    pending = state_is(HandoffState.PENDING)
    if not by_platform:
        return pending
    return and_(pending, _c.handoff_platform == bindparam("platform", type_=String()))


def _oldest_pending(by_platform: bool, key: ColumnElement[Any] = _c.id) -> Select[Any]:
    return (
        select(key)
        .where(_pending_on(by_platform))
        .order_by(_c.started_at, _c.id)
        .limit(bindparam("limit"))
    )


#: SQLite's own key of a ``sessions`` row (upstream's table and ours are rowid tables): the
#: pending index holds it, so the rows a subquery picks are reached without a second index.
_ROWID = literal_column(f"{sessions.name}.rowid", Integer())


def _claim_where(condition: ColumnElement[bool], *, by_key: bool = False) -> Transition:
    return _transition(
        HandoffState.RUNNING,
        condition,
        _claimed_values(),
        attempt=_c.handoff_attempt + 1,
        by_key=by_key,
    )


#: MySQL/MariaDB: reach the rows of an ``id IN (...)`` list through the primary key. On a
#: table of a few thousand rows the optimizer prefers scanning an index for a hundred ids,
#: and a locking read locks every row it scans: two claimers then wait for each other's rows
#: (a deadlock, which InnoDB reports as error 1467 when the victim was taking the audit
#: table's AUTO-INC lock).
_MYSQL_BY_KEY: Final = "FORCE INDEX (PRIMARY)"


# Batch claims: pending -> running for up to ``:limit`` rows (of ``:platform`` when
# ``by_platform``), oldest ``started_at`` first, stamping ``:owner``, ``:lease_expires_at`` and
# the next attempt, with one event per row. One builder per dialect family.


@functools.cache
def claim_pending_statement(by_platform: bool) -> Select[Any]:
    """PostgreSQL, one statement: a CTE locks the rows (``FOR UPDATE SKIP LOCKED``, so
    concurrent claimers take disjoint rows instead of waiting), moves them, records their
    events, and returns the rows as claimed."""
    picked = _oldest_pending(by_platform).with_for_update(skip_locked=True).cte("picked")
    from sqlalchemy.dialects.postgresql import ARRAY  # only PostgreSQL builds this

    # The ids as one array, so the rows are fetched by key (a join may scan the table).
    chosen = cast(select(func.array_agg(picked.c.id)).scalar_subquery(), ARRAY(String()))
    moved = (
        sessions.update()
        .where(_c.id == any_(chosen))
        .values(**_claimed_values())
        .returning(*session_columns())
        .cte("moved")
    )
    recorded = _recorded_claims(moved)
    # Ordered by the server: sorting a hundred rows there costs less than in Python.
    return select(moved).add_cte(recorded).order_by(moved.c.started_at, moved.c.id)


@functools.cache
def claim_pending_transition(by_platform: bool) -> Transition:
    """SQLite: the events, then ``UPDATE ... RETURNING`` the rows, both selecting through one
    ordered, limited subquery. ``BEGIN IMMEDIATE`` made the transaction the only writer, so
    both statements see the same rows."""
    # No state test beside the subquery's: SQLite would then walk every pending row through
    # the partial index to test membership, instead of looking up the few rows by key. The
    # key is the rowid, which the pending index carries: by id, every row picked would be
    # looked up in the primary key's index first.
    transition = _claim_where(_ROWID.in_(_oldest_pending(by_platform, _ROWID)))
    return Transition(
        transition.record, transition.apply.returning(*session_columns()), transition.single
    )


@functools.cache
def claim_picked(by_platform: bool) -> PickedClaim:
    """MySQL/MariaDB: see :class:`PickedClaim`."""
    chosen = _c.id.in_(bindparam("ids", expanding=True))
    return PickedClaim(
        pick=_oldest_pending(by_platform).with_for_update(skip_locked=True),
        transition=_claim_where(and_(chosen, _pending_on(by_platform)), by_key=True),
        fetch=select(*session_columns())
        .with_hint(sessions, _MYSQL_BY_KEY, "mysql")
        .where(chosen)
        .order_by(_c.started_at, _c.id),
    )


@functools.cache
def claimed_attempt() -> Select[tuple[int]]:
    """The attempt just claimed (read in the claiming transaction, which holds the row lock)."""
    return select(_c.handoff_attempt).where(_c.id == bindparam("session_id"))


@functools.cache
def complete_handoff(fence: Fence) -> Transition:
    """running -> completed, clearing the error; ``fence`` says whose running row."""
    return _transition(
        HandoffState.COMPLETED,
        _one_session(_running_under(fence)),
        _finished(HandoffState.COMPLETED, None),
    )


@functools.cache
def fail_handoff(from_states: frozenset[HandoffState], fence: Fence) -> Transition:
    """``from_states`` -> failed with ``:error``; a running row only under ``fence``."""
    allowed = [
        _running_under(fence) if state is HandoffState.RUNNING else state_is(state)
        for state in sorted(from_states)
    ]
    error = bindparam("error", type_=Text())
    return _transition(
        HandoffState.FAILED,
        _one_session(or_(*allowed)),
        _finished(HandoffState.FAILED, error),
        detail=error,
    )


@functools.cache
def renew_lease() -> Update:
    """Extend the lease of a row this owner still holds (not a transition: no event)."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"), _running_under(Fence.OWNER))
        .values(handoff_lease_expires_at=bindparam("lease_expires_at"))
    )


@functools.cache
def finish_claims(fenced: bool, release: bool = False) -> Select[tuple[str]]:
    """PostgreSQL, one statement: finish many running rows, each with its own attempt and
    outcome, given as the parallel arrays ``:ids``, ``:attempts`` and ``:errors``: a NULL
    error completes the row, any other fails it with that error.

    With ``fenced``, a row moves only while running under ``:owner`` and, where its attempt is
    given, under that attempt (:attr:`Fence.CLAIM`; else :attr:`Fence.OWNER`). Rows are locked in
    id order; the events carry each row's error. With ``release``, the same statement gives up
    the turn leases of ``:release_ids`` their ``:release_holders`` hold (as
    :func:`release_turn_lease`), whatever became of the rows. Returns the ids that moved.
    """
    claims = _unnested(
        ("ids", "id", String()), ("attempts", "attempt", Integer()), ("errors", "error", Text())
    )
    condition = _finishable(claims, fenced, state_is(HandoffState.RUNNING))
    locked = (
        select(_c.id, claims.c.error)
        .where(condition)
        .order_by(_c.id)
        .with_for_update(of=sessions)
        .cte("locked")
    )
    moved = (
        sessions.update()
        .where(_c.id == locked.c.id)
        .values(
            {
                **_finished(HandoffState.COMPLETED, locked.c.error),
                "handoff_state": _outcome_state(locked.c.error),
            }
        )
        .returning(_c.id, _c.handoff_attempt, locked.c.error)
        .cte("moved")
    )
    event = select(
        moved.c.id,
        _literal(HandoffState.RUNNING),
        _outcome_state(moved.c.error),
        bindparam("now", type_=Double()),
        bindparam("actor", type_=String()),
        moved.c.handoff_attempt,
        moved.c.error,
    )
    recorded = handoff_events.insert().from_select(EVENT_COLUMNS, event).cte("recorded")
    answer = select(moved.c.id).add_cte(recorded)
    return answer.add_cte(_release_turns()) if release else answer


def _outcome_state(error: ColumnElement[Any]) -> ColumnElement[str]:
    """completed where the outcome's error is NULL, failed where it is an error."""
    return case(
        (error.is_(None), _literal(HandoffState.COMPLETED)), else_=_literal(HandoffState.FAILED)
    )


def _finishable(claims: Any, fenced: bool, running: ColumnElement[bool]) -> ColumnElement[bool]:
    """The session rows named by ``claims`` (columns ``id``, ``attempt``) that may be finished:
    ``running`` and, with ``fenced``, running under ``:owner`` and, where the claim gives an
    attempt, under that attempt (:attr:`Fence.CLAIM`; else :attr:`Fence.OWNER`)."""
    condition = and_(_c.id == claims.c.id, running)
    if not fenced:
        return condition
    same_attempt = or_(claims.c.attempt.is_(None), _c.handoff_attempt == claims.c.attempt)
    return and_(condition, _c.handoff_owner == bindparam("owner"), same_attempt)


def _json_each(name: str) -> Any:
    """SQLite: the members of the JSON array or object bound as ``:name``, as a table (``key``,
    ``value``). One compiled statement then takes any number of rows: the fast runner sends no
    expanding ``IN`` lists, whose SQL changes with their length."""
    return func.json_each(bindparam(name, type_=Text())).table_valued("key", "value").alias(name)


@functools.cache
def finish_claims_json(fenced: bool) -> Transition:
    """SQLite: finish many running rows in two statements, whatever their number: the claims
    are ``:claims``, a JSON object of ``{id: [attempt, error]}`` (attempt and error may be
    null; a null error completes the row, any other fails it with that error), fenced per row
    as in :func:`finish_claims`. The events carry each row's error; ``apply`` returns the ids
    that moved. Both statements walk the claims and reach each row by its key (the state test
    is kept off the running index, see :func:`_state_is_unindexed`). Keyed by id, a member
    costs two JSON lookups, not three."""
    each = _json_each("claims")
    claims = select(
        each.c.key.label("id"),
        func.json_extract(each.c.value, "$[0]").label("attempt"),
        func.json_extract(each.c.value, "$[1]").label("error"),
    ).subquery("claims")
    condition = _finishable(claims, fenced, _state_is_unindexed(HandoffState.RUNNING))
    event = (
        select(
            _c.id,
            _literal(HandoffState.RUNNING),
            _outcome_state(claims.c.error),
            bindparam("now", type_=Double()),
            bindparam("actor", type_=String()),
            _c.handoff_attempt,
            claims.c.error,
        )
        .select_from(claims.join(sessions, _c.id == claims.c.id))
        .where(condition)
    )
    record = handoff_events.insert().from_select(EVENT_COLUMNS, event)
    finished = {
        **_finished(HandoffState.COMPLETED, claims.c.error),
        "handoff_state": _outcome_state(claims.c.error),
    }
    apply = sessions.update().where(condition).values(finished).returning(_c.id)
    return Transition(record, apply, None)


@functools.cache
def renew_leases_json() -> Update:
    """SQLite: extend in one statement the leases of the ``:ids`` (a JSON array) this owner
    still holds, reaching each by key; returns the ids renewed."""
    ids = select(_json_each("ids").c.value)
    return (
        sessions.update()
        .where(
            _c.id.in_(ids),
            _state_is_unindexed(HandoffState.RUNNING),
            _c.handoff_owner == bindparam("owner"),
        )
        .values(handoff_lease_expires_at=bindparam("lease_expires_at"))
        .returning(_c.id)
    )


@functools.cache
def renew_leases() -> Select[tuple[str]]:
    """PostgreSQL: extend in one statement the leases of the ``:ids`` (an array, so the
    statement's text is the same for any number of ids) this owner still holds, locking them in
    id order (as a reclaim does); returns the ids renewed."""
    from sqlalchemy.dialects.postgresql import ARRAY  # only PostgreSQL builds this

    ids = any_(bindparam("ids", type_=ARRAY(String())))
    locked = (
        select(_c.id)
        .where(_c.id == ids, _running_under(Fence.OWNER))
        .order_by(_c.id)
        .with_for_update()
        .cte("locked")
    )
    renewed = (
        sessions.update()
        .where(_c.id == locked.c.id)
        .values(handoff_lease_expires_at=bindparam("lease_expires_at"))
        .returning(_c.id)
        .cte("renewed")
    )
    return select(renewed.c.id)


def _reclaimable(scope: ReclaimScope) -> ColumnElement[bool]:
    running = state_is(HandoffState.RUNNING)
    lease = _c.handoff_lease_expires_at
    if scope is ReclaimScope.ALL:
        return running
    if scope is ReclaimScope.EXPIRED:
        return and_(running, lease < bindparam("now"))
    # With a NULL :owner the owner test is NULL, so only unleased and expired rows qualify.
    return and_(
        running,
        or_(lease.is_(None), lease < bindparam("now"), _c.handoff_owner == bindparam("owner")),
    )


@functools.cache
def reclaimable(scope: ReclaimScope, lock: bool) -> Select[tuple[Any, ...]]:
    """The running rows a reclaim in ``scope`` would fail (locked when ``lock``), with what
    tells why: owner, claim time and lease."""
    stmt = (
        select(
            _c.id,
            _c.handoff_owner.label("owner"),
            _c.handoff_claimed_at.label("claimed_at"),
            _c.handoff_lease_expires_at.label("lease_expires_at"),
            _c.handoff_attempt.label("attempt"),
        )
        .where(_reclaimable(scope))
        .order_by(_c.id)
    )
    return stmt.with_for_update() if lock else stmt


@functools.cache
def reclaim_handoffs(scope: ReclaimScope) -> Transition:
    """running -> failed with ``:error`` for the rows in ``scope``."""
    error = bindparam("error", type_=Text())
    return _transition(
        HandoffState.FAILED,
        _reclaimable(scope),
        _finished(HandoffState.FAILED, error),
        detail=error,
    )


# -- the audit trail ---------------------------------------------------------------------------

EVENT_COLUMNS = ["session_id", "from_state", "to_state", "at", "actor", "attempt", "detail"]
_e = handoff_events.c


@functools.cache
def handoff_history() -> Select[tuple[Any, ...]]:
    """A session's events, oldest first."""
    return (
        select(
            _e.id, _e.session_id, _e.from_state, _e.to_state, _e.at, _e.actor, _e.attempt, _e.detail
        )
        .where(_e.session_id == bindparam("session_id"))
        .order_by(_e.id)
    )


@functools.cache
def prune_events() -> Delete:
    """Delete the events older than ``:before``."""
    return handoff_events.delete().where(_e.at < bindparam("before"))


@functools.cache
def count_events_before() -> Select[Any]:
    """How many events :func:`prune_events` would delete."""
    return select(func.count().label("count")).where(_e.at < bindparam("before"))


@functools.cache
def recent_failures() -> Select[tuple[str | None, int]]:
    """The most common errors among failures since ``:since``, most frequent first."""
    return (
        select(_e.detail.label("error"), func.count().label("count"))
        .where(_e.to_state == _literal(HandoffState.FAILED), _e.at >= bindparam("since"))
        .group_by(_e.detail)
        .order_by(func.count().desc(), _e.detail)
        .limit(bindparam("limit"))
    )


@functools.cache
def count_failures_since() -> Select[Any]:
    return select(func.count().label("count")).where(
        _e.to_state == _literal(HandoffState.FAILED), _e.at >= bindparam("since")
    )


@functools.cache
def running_by_owner() -> Select[tuple[str | None, int, int, int]]:
    """Running rows per owner: how many, with a live lease, with an expired one."""
    lease = _c.handoff_lease_expires_at
    return (
        select(
            _c.handoff_owner.label("owner"),
            func.count().label("running"),
            func.count(case((lease >= bindparam("now"), 1))).label("live_leases"),
            func.count(case((lease < bindparam("now"), 1))).label("expired_leases"),
        )
        .where(state_is(HandoffState.RUNNING))
        .group_by(_c.handoff_owner)
        .order_by(_c.handoff_owner)
    )


# -- reads -------------------------------------------------------------------------------------


@functools.cache
def list_handoffs(
    state: HandoffState | None,
    limited: bool = False,
    *,
    after: bool = False,
    search: bool = False,
) -> Select[tuple[object, ...]]:
    """Whole rows in ``state`` (any handoff state for None), oldest session first, at most
    ``:limit`` when ``limited``. O(rows) for pending and running, which are indexed; a scan for
    the others, which only administrators list.

    ``after``: only rows that sort after the session ``:after`` (keyset paging on
    ``started_at, id``; an unknown ``:after`` yields nothing). ``search``: only ids containing
    ``:search`` (LIKE wildcards in it are escaped by the caller with ``/``)."""
    condition = _c.handoff_state.is_not(None) if state is None else state_is(state)
    stmt = select(*session_columns()).where(condition)
    if after:
        cursor = sessions.alias("cursor")
        start = (
            select(cursor.c.started_at).where(cursor.c.id == bindparam("after")).scalar_subquery()
        )
        stmt = stmt.where(
            or_(
                _c.started_at > start,
                and_(_c.started_at == start, _c.id > bindparam("after")),
            )
        )
    if search:
        stmt = stmt.where(_c.id.like(bindparam("search"), escape="/"))
    stmt = stmt.order_by(_c.started_at, _c.id)
    return stmt.limit(bindparam("limit")) if limited else stmt


@functools.cache
def list_sessions(
    state: HandoffState | None, *, by_source: bool, since: bool, limited: bool
) -> Select[tuple[object, ...]]:
    """Whole session rows, newest ``started_at`` first; filtered on ``:source`` when
    ``by_source``, on ``state``, and on ``started_at >= :since`` when ``since``; at most
    ``:limit`` when ``limited``."""
    stmt = select(*session_columns())
    if state is not None:
        stmt = stmt.where(state_is(state))
    if by_source:
        stmt = stmt.where(_c.source == bindparam("source"))
    if since:
        stmt = stmt.where(_c.started_at >= bindparam("since"))
    stmt = stmt.order_by(_c.started_at.desc(), _c.id.desc())
    return stmt.limit(bindparam("limit")) if limited else stmt


@functools.cache
def get_session() -> Select[tuple[object, ...]]:
    """The whole row of ``:session_id``."""
    return select(*session_columns()).where(_c.id == bindparam("session_id"))


@functools.cache
def handoff_events_after() -> Select[tuple[Any, ...]]:
    """Events with an id above ``:after``, oldest first, at most ``:limit``: the change feed a
    dashboard follows (every transition writes one, whichever process made it)."""
    return (
        select(
            _e.id, _e.session_id, _e.from_state, _e.to_state, _e.at, _e.actor, _e.attempt, _e.detail
        )
        .where(_e.id > bindparam("after"))
        .order_by(_e.id)
        .limit(bindparam("limit"))
    )


@functools.cache
def recent_failed_events() -> Select[tuple[Any, ...]]:
    """The newest ``:limit`` failure events, newest first (their detail is the error)."""
    return (
        select(_e.id, _e.session_id, _e.from_state, _e.at, _e.actor, _e.attempt, _e.detail)
        .where(_e.to_state == _literal(HandoffState.FAILED))
        .order_by(_e.id.desc())
        .limit(bindparam("limit"))
    )


@functools.cache
def last_handoff_event_id() -> Select[tuple[int | None]]:
    return select(func.max(_e.id).label("last"))


@functools.cache
def has_pending_handoffs() -> Select[tuple[int]]:
    return select(literal_column("1")).where(state_is(HandoffState.PENDING)).limit(1)


@functools.cache
def get_handoff_state() -> Select[tuple[str | None, str | None, str | None]]:
    return select(
        _c.handoff_state.label("state"),
        _c.handoff_platform.label("platform"),
        _c.handoff_error.label("error"),
    ).where(_c.id == bindparam("session_id"))


@functools.cache
def count_handoffs_by_state() -> Select[tuple[str | None, int]]:
    return (
        select(_c.handoff_state.label("state"), func.count().label("count"))
        .where(_c.handoff_state.is_not(None))
        .group_by(_c.handoff_state)
    )


@functools.cache
def oldest_pending_requested_at() -> Select[tuple[float | None]]:
    # Older writers leave handoff_requested_at NULL: their session's start stands in.
    requested = func.coalesce(_c.handoff_requested_at, _c.started_at)
    return select(func.min(requested).label("requested_at")).where(state_is(HandoffState.PENDING))


# -- session turn leases -----------------------------------------------------------------------

_t = session_turn_leases.c
_COMPRESSION = "compression"


@functools.cache
def lineage_parent() -> Select[tuple[str]]:
    """The parent of ``:session_id`` when that parent ended by compression: the session is a
    later segment of the same conversation, whose turn lease is keyed by the lineage root."""
    child = sessions.alias("child")
    parent = sessions.alias("parent")
    return (
        select(parent.c.id)
        .select_from(child.join(parent, parent.c.id == child.c.parent_session_id))
        .where(
            child.c.id == bindparam("session_id"),
            parent.c.end_reason == literal_column(f"'{_COMPRESSION}'"),
        )
    )


@functools.cache
def expire_turn_lease() -> Delete:
    """Drop the conversation's lease when it expired by ``:now`` (whoever held it)."""
    return session_turn_leases.delete().where(
        _t.conversation_id == bindparam("conversation"), _t.expires_at <= bindparam("now")
    )


@functools.cache
def insert_turn_lease(dialect_name: str) -> Insert:
    """Take the conversation's lease for ``:lease_holder`` unless someone holds it."""
    values = {
        "conversation_id": bindparam("conversation", type_=String()),
        "holder": bindparam("lease_holder", type_=String()),
        "acquired_at": bindparam("now", type_=Double()),
        "expires_at": bindparam("lease_until", type_=Double()),
    }
    if dialect_name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return (
            sqlite.insert(session_turn_leases)
            .values(values)
            .on_conflict_do_nothing(index_elements=["conversation_id"])
        )
    if dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return (
            postgresql.insert(session_turn_leases)
            .values(values)
            .on_conflict_do_nothing(index_elements=["conversation_id"])
        )
    if dialect_name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        stmt = mysql.insert(session_turn_leases).values(values)
        return stmt.on_duplicate_key_update(conversation_id=stmt.inserted.conversation_id)
    raise NotImplementedError(f"hermes-state does not support the {dialect_name!r} dialect")


@functools.cache
def turn_lease_holder() -> Select[tuple[str]]:
    """Who holds the conversation's lease now, read with a lock: on MariaDB a plain read would
    answer from the transaction's snapshot, older than a rival's committed insert."""
    return (
        select(_t.holder).where(_t.conversation_id == bindparam("conversation")).with_for_update()
    )


@functools.cache
def refresh_turn_lease() -> Update:
    """Move the expiry of a lease ``:lease_holder`` still holds (expired but not taken over
    counts: nobody else holds it yet)."""
    return (
        session_turn_leases.update()
        .where(
            _t.conversation_id == bindparam("conversation"),
            _t.holder == bindparam("lease_holder"),
        )
        .values(expires_at=bindparam("lease_until"))
    )


@functools.cache
def release_turn_lease() -> Delete:
    """Drop the lease if ``:lease_holder`` holds it; a release by anyone else deletes nothing."""
    return session_turn_leases.delete().where(
        _t.conversation_id == bindparam("conversation"), _t.holder == bindparam("lease_holder")
    )


# -- batches of the watcher's pipeline ---------------------------------------------------------
#
# A watcher claims the rows it listed, each under its conversation's turn lease, in one call;
# it finishes (completes or fails) the deliveries that ended close together, releasing their
# turn leases, in one call; and it refreshes every turn lease it holds in one call. On
# PostgreSQL each call is one statement (parallel arrays unnested, the lineage walked by a
# recursive CTE); elsewhere the plans run the one-row statements above in one transaction.

#: How far a lineage walk goes up before it stops: compression chains are short; a longer one
#: (or a cycle written by hand) keys the lease on the highest segment reached.
MAX_LINEAGE_DEPTH = 100


def _pg_array(name: str, item: Any = None) -> Any:
    from sqlalchemy.dialects.postgresql import ARRAY  # only PostgreSQL builds these

    return bindparam(name, type_=ARRAY(item if item is not None else String()))


def _unnested(*columns: tuple[str, str, Any]) -> Any:
    """PostgreSQL: ``unnest(:array, ...)`` of parallel arrays, as a table whose columns are
    named as given: (bind parameter, column, item type) each."""
    arrays = [_pg_array(param, item) for param, _name, item in columns]
    names = [name for _param, name, _item in columns]
    return func.unnest(*arrays).table_valued(*names).render_derived(with_types=False)


def _lineage_roots(starts: Any, name: str) -> Any:
    """PostgreSQL: the conversation (turn-lease key) of each ``starts.c.id``, as a CTE of
    ``(id, conversation)``.

    The same walk as the one-row plans make with :func:`lineage_parent`, one step at a time:
    up through parents that ended by compression, at most :data:`MAX_LINEAGE_DEPTH` steps,
    stopping before a segment the walk has already visited; the key is the last one reached.
    Each step carries the next parent's id, so it looks sessions up by key only.
    """
    from sqlalchemy.dialects.postgresql import ARRAY, array, distinct_on

    first = sessions.alias(f"{name}_first")
    parent = sessions.alias(f"{name}_parent")
    # Typed like sessions.id (and an array of plain varchar), so both terms of the recursion
    # agree on the column types.
    start = cast(starts.c.id, _c.id.type)
    walk = (
        select(
            start.label("start"),
            start.label("node"),
            first.c.parent_session_id.label("up"),
            literal_column("0").label("depth"),
            cast(array([start]), ARRAY(String())).label("path"),
        )
        .select_from(starts.outerjoin(first, first.c.id == starts.c.id))
        .cte(name, recursive=True)
    )
    step = (
        select(
            walk.c.start,
            parent.c.id,
            parent.c.parent_session_id,
            walk.c.depth + literal_column("1"),
            func.array_append(walk.c.path, parent.c.id),
        )
        .select_from(walk.join(parent, parent.c.id == walk.c.up))
        .where(
            parent.c.end_reason == literal_column(f"'{_COMPRESSION}'"),
            walk.c.depth < literal_column(str(MAX_LINEAGE_DEPTH)),
            parent.c.id != all_(walk.c.path),
        )
    )
    walk = walk.union_all(step)
    return (
        select(walk.c.start.label("id"), walk.c.node.label("conversation"))
        .ext(distinct_on(walk.c.start))
        .order_by(walk.c.start, walk.c.depth.desc())
        .cte(f"{name}_roots")
    )


@functools.cache
def pending_row_locked() -> Select[tuple[str, float]]:
    """``:session_id`` while it is pending, locked (``SKIP LOCKED``: a row another claimer
    holds is left to it), with its start time; the first step of a claim of given rows."""
    return (
        select(_c.id, _c.started_at)
        .where(_c.id == bindparam("session_id"), state_is(HandoffState.PENDING))
        .with_for_update(skip_locked=True)
    )


#: The column of :func:`claim_given`'s answer naming each row it locked (a row left pending
#: has it and NULL for every session column).
PICKED = "_picked_id"


@functools.cache
def claim_given(turns: bool) -> Select[Any]:
    """PostgreSQL, one statement: pending -> running for those of ``:ids`` still pending,
    stamping ``:owner``, ``:lease_expires_at`` and the next attempt, one event per row.

    Rows another claimer has locked are skipped. With ``turns``, each row also needs its
    conversation's turn lease for its holder (``:holders``, parallel to ``:ids``) until
    ``:turn_until``: of several rows of one conversation only the oldest is tried, a lease is
    taken when it is free, expired (by ``:now``) or already that holder's (then it is left as
    it is), and a row whose lease is held by anyone else stays pending, untouched. Leases are
    written in key order and rows locked in id order, as everywhere here.

    Answers one row per row locked: :data:`PICKED` and, for a row claimed, the row as claimed.
    """
    picked = (
        select(_c.id, _c.started_at)
        .where(_c.id == any_(_pg_array("ids")), state_is(HandoffState.PENDING))
        .order_by(_c.id)
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    given = _unnested(("ids", "id", String()), ("holders", "holder", String())) if turns else None
    return _claim_picked(picked, turns, given)


@functools.cache
def claim_next(turns: bool) -> Select[Any]:
    """PostgreSQL, one statement: :func:`claim_given` for the ``:limit`` oldest pending rows
    no other claimer has locked, leaving out the ids ``:exclude``, each row's turn lease taken
    for its delivery holder (:data:`DELIVERY_HOLDER`) of the gateway ``:turn_gateway``."""
    picked = (
        _oldest_pending(False)
        .add_columns(_c.started_at)
        .where(_c.id != all_(_pg_array("exclude")))
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    return _claim_picked(picked, turns, None)


_Part = TypeVar("_Part")


@dataclass(frozen=True, slots=True)
class DeliveryHolder:
    """The delivery-holder rule, defined once: whom the turn lease of one delivery of a session
    by a gateway names. The holder is ``prefix``, the first ``digest_chars`` hex digits of the
    SHA-256 of the session id's UTF-8 bytes, ``separator`` and the gateway, cut to ``length``
    characters. Both forms below are that layout (:meth:`parts`): :meth:`name` computes it in
    Python (:func:`hermes_state.plans.delivery_holder`, for sessions a caller names),
    :meth:`sql` has PostgreSQL compute it in the statement that picks the rows
    (:func:`claim_next`), so neither can change without the other."""

    prefix: str = "handoff:"
    digest_chars: int = 16
    separator: str = ":"
    length: int = ID_LENGTH

    def parts(self, digest: _Part, gateway: _Part) -> tuple[str | _Part, ...]:
        """The holder's parts in order, the fixed ones as text."""
        return (self.prefix, digest, self.separator, gateway)

    def name(self, gateway: str, session_id: str) -> str:
        """The holder, computed here."""
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[: self.digest_chars]
        return "".join(self.parts(digest, gateway))[: self.length]

    def sql(
        self, session_id: ColumnElement[str], gateway: ColumnElement[str]
    ) -> ColumnElement[str]:
        """PostgreSQL: the holder, computed by the database (``left`` counts characters, as
        slicing a Python string does)."""
        digest = func.left(
            func.encode(
                func.sha256(func.convert_to(session_id, literal_column("'UTF8'"))),
                literal_column("'hex'"),
            ),
            literal_column(str(self.digest_chars)),
        )
        first, *rest = (
            _sql_text(part) if isinstance(part, str) else part
            for part in self.parts(digest, gateway)
        )
        holder = first
        for part in rest:
            holder = holder + part
        return func.left(holder, literal_column(str(self.length)), type_=String())


def _sql_text(text: str) -> ColumnElement[str]:
    """A fixed text of the rule as an SQL string literal (never a caller's value)."""
    return literal_column("'" + text.replace("'", "''") + "'", String())


#: The rule every delivery's turn lease is named by (see :class:`DeliveryHolder`).
DELIVERY_HOLDER: Final = DeliveryHolder()


def _claim_picked(picked: Any, turns: bool, given: Any) -> Select[Any]:
    """The claim of the ``picked`` rows (see :func:`claim_given`); holders from ``given``
    (``unnest(:ids, :holders)``), else derived with :data:`DELIVERY_HOLDER`."""
    from sqlalchemy.dialects.postgresql import distinct_on

    target: Any = picked
    if turns:
        roots = _lineage_roots(picked, "lineage")
        joined = roots.join(picked, picked.c.id == roots.c.id)
        if given is not None:
            joined = joined.join(given, given.c.id == roots.c.id)
            holder = given.c.holder
        else:
            gateway = bindparam("turn_gateway", type_=String())
            holder = DELIVERY_HOLDER.sql(roots.c.id, gateway)
        chosen = (
            select(roots.c.id, roots.c.conversation, holder.label("holder"))
            .select_from(joined)
            .ext(distinct_on(roots.c.conversation))
            .order_by(roots.c.conversation, picked.c.started_at, picked.c.id)
            .cte("chosen")
        )
        taken = _take_turns(chosen)
        target = (
            select(chosen.c.id)
            .join(taken, taken.c.conversation_id == chosen.c.conversation)
            .cte("leased")
        )
    moved = (
        sessions.update()
        .where(_c.id == target.c.id, state_is(HandoffState.PENDING))
        .values(**_claimed_values())
        .returning(*session_columns())
        .cte("moved")
    )
    recorded = _recorded_claims(moved)
    return (
        select(picked.c.id.label(PICKED), *moved.c)
        .select_from(picked.outerjoin(moved, moved.c.id == picked.c.id))
        .add_cte(recorded)
    )


@functools.cache
def oldest_pending_locked() -> Select[tuple[str]]:
    """The ids of the ``:limit`` oldest pending rows no other claimer has locked, locked (the
    first step of :func:`claim_next` where it is not one statement)."""
    return _oldest_pending(False).with_for_update(skip_locked=True)


def _take_turns(chosen: Any) -> Any:
    """PostgreSQL: take the turn lease of each ``chosen`` (conversation, holder) where it is
    free, expired by ``:now`` or already the holder's (then unchanged), as the one-row
    :func:`expire_turn_lease`, :func:`insert_turn_lease` and :func:`turn_lease_holder` do;
    a CTE ``taken`` of the conversations now held."""
    from sqlalchemy.dialects.postgresql import insert

    rows = select(
        chosen.c.conversation,
        chosen.c.holder,
        bindparam("now", type_=Double()),
        bindparam("turn_until", type_=Double()),
    ).order_by(chosen.c.conversation)
    stmt = insert(session_turn_leases).from_select(
        ["conversation_id", "holder", "acquired_at", "expires_at"], rows
    )
    new = stmt.excluded
    kept = and_(_t.holder == new.holder, _t.expires_at > bindparam("now", type_=Double()))
    return (
        stmt.on_conflict_do_update(
            index_elements=["conversation_id"],
            set_={
                "holder": new.holder,
                "acquired_at": case((kept, _t.acquired_at), else_=new.acquired_at),
                "expires_at": case((kept, _t.expires_at), else_=new.expires_at),
            },
            where=or_(_t.expires_at <= bindparam("now", type_=Double()), _t.holder == new.holder),
        )
        .returning(_t.conversation_id)
        .cte("taken")
    )


def _given_turns(prefix: str) -> tuple[Any, Any]:
    """PostgreSQL: ``(session id, holder)`` pairs given as ``:{prefix}ids`` and
    ``:{prefix}holders``, with the conversation each session's lease is keyed on: a CTE of
    ``(id, conversation, holder)``."""
    arrays = _unnested((f"{prefix}ids", "id", String()), (f"{prefix}holders", "holder", String()))
    given = select(arrays.c.id, arrays.c.holder).cte(f"{prefix}given")
    roots = _lineage_roots(given, f"{prefix}lineage")
    pairs = (
        select(roots.c.id, roots.c.conversation, given.c.holder)
        .select_from(roots.join(given, given.c.id == roots.c.id))
        .cte(f"{prefix}turns")
    )
    return given, pairs


@functools.cache
def refresh_turn_leases() -> Select[tuple[str]]:
    """PostgreSQL, one statement: move to ``:lease_until`` the expiry of each lease its holder
    still holds, for the sessions ``:ids`` with their ``:holders``; returns the sessions kept."""
    _given, pairs = _given_turns("")
    refreshed = (
        session_turn_leases.update()
        .where(_t.conversation_id == pairs.c.conversation, _t.holder == pairs.c.holder)
        .values(expires_at=bindparam("lease_until", type_=Double()))
        .returning(pairs.c.id)
        .cte("refreshed")
    )
    return select(refreshed.c.id)


def _release_turns() -> Any:
    """PostgreSQL: drop the leases of ``:release_ids`` their ``:release_holders`` hold."""
    _given, pairs = _given_turns("release_")
    return (
        session_turn_leases.delete()
        .where(_t.conversation_id == pairs.c.conversation, _t.holder == pairs.c.holder)
        .returning(_t.conversation_id)
        .cte("released")
    )


@functools.cache
def release_turn_leases() -> Select[Any]:
    """PostgreSQL, one statement: :func:`release_turn_lease` for many sessions at once."""
    released = _release_turns()
    return select(func.count().label("released")).select_from(released)
