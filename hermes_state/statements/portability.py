"""Export and import of sessions: the imported rows, the parent link, the guard count."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import Insert, Select, Update, bindparam, func, literal_column, select

from ..models import messages, sessions
from .core import MESSAGE_FIELDS, _c

#: The session columns an import writes from the exported row (as upstream's import: the
#: conversation's history and accounting; routing, handoff and live activity start empty).
IMPORTED_COLUMNS: Final = (
    "id",
    "source",
    "user_id",
    "model",
    "model_config",
    "system_prompt_hash",
    "started_at",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
    "api_call_count",
    "archived",
)


@functools.cache
def import_session() -> Insert:
    """A new session from an export: :data:`IMPORTED_COLUMNS` bound by name, counters at zero
    and no parent yet (:func:`finish_imported_session` and :func:`set_imported_parent` follow,
    once its messages are in)."""
    values: dict[str, Any] = {
        name: bindparam(name, type_=_c[name].type) for name in IMPORTED_COLUMNS
    }
    zero: Any = literal_column("0")
    values.update(message_count=zero, tool_call_count=zero)
    return sessions.insert().values(**values)


@functools.cache
def import_message() -> Insert:
    """One imported message of ``:session_id``, live, with every message field (a plain insert:
    an imported session that compression ended still takes its own history)."""
    m = messages.c
    values: dict[str, Any] = {
        "session_id": bindparam("session_id", type_=m.session_id.type),
        "role": bindparam("role", type_=m.role.type),
        "content": bindparam("content", type_=m.content.type),
        "timestamp": bindparam("now", type_=m.timestamp.type),
        "active": literal_column("1"),
    }
    values.update({name: bindparam(name, type_=m[name].type) for name in MESSAGE_FIELDS})
    return messages.insert().values(**values)


@functools.cache
def finish_imported_session() -> Update:
    """``:session_id`` once its messages are in: its counters (``:messages_total``,
    ``:tool_calls_total``) and how it ended (``:ended``, ``:reason``)."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"))
        .values(
            message_count=bindparam("messages_total", type_=_c.message_count.type),
            tool_call_count=bindparam("tool_calls_total", type_=_c.tool_call_count.type),
            ended_at=bindparam("ended", type_=_c.ended_at.type),
            end_reason=bindparam("reason", type_=_c.end_reason.type),
        )
    )


@functools.cache
def set_imported_parent() -> Update:
    """Link the imported ``:session_id`` to its parent ``:parent``."""
    return (
        sessions.update()
        .where(_c.id == bindparam("session_id"))
        .values(parent_session_id=bindparam("parent", type_=_c.parent_session_id.type))
    )


@functools.cache
def parent_of() -> Select[tuple[Any]]:
    """The parent of ``:session_id`` (no row: no such session)."""
    return select(_c.parent_session_id).where(_c.id == bindparam("session_id"))


@functools.cache
def title_taken() -> Select[tuple[Any]]:
    """The session already titled ``:title``, if any."""
    return select(_c.id).where(_c.title == bindparam("title")).limit(1)


@functools.cache
def count_live_messages_upto() -> Select[Any]:
    """How many live messages ``:session_id`` has, counting no further than ``:bound`` (the
    export guard only needs to know whether the limit is passed)."""
    m = messages.c
    some = (
        select(m.id)
        .where(m.session_id == bindparam("session_id"), m.active == literal_column("1"))
        .limit(bindparam("bound"))
        .subquery("counted")
    )
    return select(func.count().label("n")).select_from(some)
