"""Session turn leases, one at a time or (PostgreSQL) many at once, keyed by lineage root."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    Delete,
    Double,
    Insert,
    Select,
    String,
    Update,
    all_,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    or_,
    select,
)

from ..models import session_turn_leases, sessions
from .core import COMPRESSION_END, _c, _unnested, forked

_t = session_turn_leases.c


@functools.cache
def lineage_parent() -> Select[tuple[str]]:
    """The parent of ``:session_id`` when that parent ended by compression and the session is
    no explicit fork of it (:func:`forked`): the session is a later segment of the same
    conversation, whose turn lease is keyed by the lineage root."""
    child = sessions.alias("child")
    parent = sessions.alias("parent")
    return (
        select(parent.c.id)
        .select_from(child.join(parent, parent.c.id == child.c.parent_session_id))
        .where(
            child.c.id == bindparam("session_id"),
            parent.c.end_reason == COMPRESSION_END,
            forked(child) == literal_column("0"),
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
def turn_lease_holder() -> Select[tuple[str, float]]:
    """Who holds the conversation's lease now, and until when, read with a lock: on MariaDB a
    plain read would answer from the transaction's snapshot, older than a rival's committed
    insert; on the servers the lock also keeps the row as read until the transaction ends (a
    fenced append writes under it)."""
    return (
        select(_t.holder, _t.expires_at)
        .where(_t.conversation_id == bindparam("conversation"))
        .with_for_update()
    )


@functools.cache
def live_turn_lease() -> Select[tuple[str, float]]:
    """Who holds the conversation's lease live at ``:now``, and until when, if anyone does."""
    return select(_t.holder, _t.expires_at).where(
        _t.conversation_id == bindparam("conversation"),
        _t.expires_at > bindparam("now", type_=Double()),
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


#: How far a lineage walk goes up before it stops: compression chains are short; a longer one
#: (or a cycle written by hand) keys the lease on the highest segment reached.
MAX_LINEAGE_DEPTH = 100


def _lineage_roots(starts: Any, name: str) -> Any:
    """PostgreSQL: the conversation (turn-lease key) of each ``starts.c.id``, as a CTE of
    ``(id, conversation)``.

    The same walk as the one-row plans make with :func:`lineage_parent`, one step at a time:
    up through parents that ended by compression, from segments that are no explicit fork, at
    most :data:`MAX_LINEAGE_DEPTH` steps, stopping before a segment the walk has already
    visited; the key is the last one reached.
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
            forked(first).label("forked"),
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
            forked(parent),
        )
        .select_from(walk.join(parent, parent.c.id == walk.c.up))
        .where(
            parent.c.end_reason == COMPRESSION_END,
            walk.c.depth < literal_column(str(MAX_LINEAGE_DEPTH)),
            walk.c.forked == literal_column("0"),
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
