"""Reads and writes of session titles: the holder of a title, setting one and its provenance,
releasing one, lineage lookups."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import Select, Update, bindparam, null, or_, select, update

from ..models import sessions
from .core import COMPRESSION_END, _c, session_columns

#: The escape character of :func:`lineage`'s LIKE pattern (``titles.lineage_pattern`` writes
#: the pattern with it).
LIKE_ESCAPE: Final = "/"


@functools.cache
def title_state() -> Select[tuple[Any, Any, Any]]:
    """What a title write of ``:session_id`` decides on: its title, the title's provenance, and
    whether the session is hidden."""
    return select(_c.title, _c.title_source, _c.hidden).where(_c.id == bindparam("session_id"))


@functools.cache
def title_holder() -> Select[tuple[Any, Any, Any]]:
    """Another session than ``:session_id`` whose title is ``:title``: its id, and whether it
    is archived and hidden."""
    return select(_c.id, _c.archived, _c.hidden).where(
        _c.title == bindparam("title"), _c.id != bindparam("session_id")
    )


@functools.cache
def compression_parent() -> Select[tuple[Any]]:
    """The parent of ``:session_id`` when that parent ended by compression: the session is a
    continuation of it (upstream's edge for handing a title down, forks included)."""
    child = sessions.alias("child")
    parent = sessions.alias("parent")
    return (
        select(parent.c.id)
        .select_from(child.join(parent, parent.c.id == child.c.parent_session_id))
        .where(
            child.c.id == bindparam("session_id"),
            parent.c.end_reason == COMPRESSION_END,
        )
    )


@functools.cache
def release_title(*, with_source: bool) -> Update:
    """``:holder_id`` gives its title up (NULL), and its provenance too when ``with_source``."""
    cleared = {"title": null(), "title_source": null()} if with_source else {"title": null()}
    return update(sessions).where(_c.id == bindparam("holder_id")).values(**cleared)


@functools.cache
def set_title() -> Update:
    """``:session_id``'s title and its provenance (``:title_source``), provided both are still
    what the write read (``:seen_title``, ``:seen_source``; NULL matches NULL): a write that
    raced in between wins, this one changes nothing."""
    return (
        update(sessions)
        .where(
            _c.id == bindparam("session_id"),
            _c.title.is_not_distinct_from(bindparam("seen_title")),
            _c.title_source.is_not_distinct_from(bindparam("seen_source")),
        )
        .values(title=bindparam("title"), title_source=bindparam("title_source"))
    )


@functools.cache
def set_title_source() -> Update:
    """The provenance (``:title_source``) of ``:session_id``'s title, when it has one."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"), _c.title.is_not(None))
        .values(title_source=bindparam("title_source"))
    )


@functools.cache
def get_title() -> Select[tuple[Any]]:
    """The title of ``:session_id``."""
    return select(_c.title).where(_c.id == bindparam("session_id"))


@functools.cache
def session_by_title() -> Select[tuple[object, ...]]:
    """The whole row of the session titled exactly ``:title``."""
    return select(*session_columns()).where(_c.title == bindparam("title"))


@functools.cache
def lineage() -> Select[tuple[Any, ...]]:
    """Sessions titled ``:base`` or matching ``:pattern`` (``"base #%"``, escaped), newest
    first; served by the unique index on ``title`` for the exact title."""
    return (
        select(_c.id, _c.title, _c.started_at)
        .where(
            or_(
                _c.title == bindparam("base"),
                _c.title.like(bindparam("pattern"), escape=LIKE_ESCAPE),
            )
        )
        .order_by(_c.started_at.desc(), _c.id.desc())
    )
