"""Batch claims, the delivery-holder rule, finishing many claims and renewing claim leases."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from sqlalchemy import (
    ColumnElement,
    Double,
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
    func,
    literal_column,
    or_,
    select,
)

from ..models import ID_LENGTH, HandoffState, handoff_events, sessions
from .audit import EVENT_COLUMNS
from .core import _c, _literal, _pg_array, _state_is_unindexed, _unnested, session_columns, state_is
from .transitions import (
    _MYSQL_BY_KEY,
    Fence,
    Transition,
    _claimed_values,
    _finished,
    _recorded_claims,
    _running_under,
    _transition,
)
from .turn_leases import _lineage_roots, _release_turns, _take_turns


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


# -- batches of the watcher's pipeline ---------------------------------------------------------
#
# A watcher claims the rows it listed, each under its conversation's turn lease, in one call;
# it finishes (completes or fails) the deliveries that ended close together, releasing their
# turn leases, in one call; and it refreshes every turn lease it holds in one call. On
# PostgreSQL each call is one statement (parallel arrays unnested, the lineage walked by a
# recursive CTE); elsewhere the plans run the one-row statements above in one transaction.


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
