"""Reads and writes of session titles: the holder of a title, setting one, lineage lookups."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import Select, Update, bindparam, or_, select, update

from ..models import sessions
from .core import _c, session_columns

#: The escape character of :func:`lineage`'s LIKE pattern (``titles.lineage_pattern`` writes
#: the pattern with it).
LIKE_ESCAPE: Final = "/"


@functools.cache
def title_holder() -> Select[tuple[Any]]:
    """The id of another session than ``:session_id`` whose title is ``:title``."""
    return select(_c.id).where(_c.title == bindparam("title"), _c.id != bindparam("session_id"))


@functools.cache
def set_title() -> Update:
    """``:session_id``'s title and its provenance (``:title_source``)."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values(title=bindparam("title"), title_source=bindparam("title_source"))
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
