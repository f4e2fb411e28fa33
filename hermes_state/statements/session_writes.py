"""Writes to a session row: the upsert of create_session, inheritance, end/reopen, prompt, usage."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Delete,
    Double,
    Insert,
    Integer,
    Select,
    String,
    Update,
    bindparam,
    case,
    cast,
    delete,
    exists,
    func,
    literal_column,
    or_,
    select,
    update,
)

from ..models import session_model_usage, sessions, system_prompts
from .core import SESSION_FIELDS, _c, insert_if_absent, upsert

#: The columns a later ``create_session`` fills only where an earlier writer left NULL
#: (upstream's upsert keeps what was set first: a gateway writes a bare row, then the agent
#: the real model and prompt).
KEPT_FIRST: Final = (
    "model",
    "model_config",
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "parent_session_id",
    "cwd",
    "profile_name",
    "git_repo_root",
    "origin_json",
    "display_name",
)

#: What a child session takes from its parent where its own value is NULL.
INHERITED: Final = ("cwd", "git_repo_root", "git_branch", "profile_name")
#: What a compression continuation also takes: the gateway peer it talks to.
INHERITED_ROUTE: Final = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
)

#: A placeholder source (upstream's token guard creates rows with it) a real one replaces.
UNKNOWN_SOURCE: Final = "unknown"

#: The billing route a usage report names (and a session records its first one of).
ROUTE_FIELDS: Final = ("model", "billing_provider", "billing_base_url", "billing_mode")

#: The token counters of a session (and of a ``session_model_usage`` row).
TOKEN_COUNTERS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


_UNKNOWN: Final[ColumnElement[str]] = literal_column(f"'{UNKNOWN_SOURCE}'")


def _typed(name: str) -> Any:
    return bindparam(name, type_=_c[name].type)


@functools.cache
def store_system_prompt(dialect_name: str) -> Insert:
    """Keep ``:prompt`` under its ``:hash`` in ``system_prompts`` (once, however many use it)."""
    return insert_if_absent(dialect_name, system_prompts, ("hash", "prompt"), "hash")


@functools.cache
def forget_system_prompt() -> Delete:
    """Delete the prompt ``:old_hash`` when no session points at it any more (only that one:
    upstream sweeps the whole table; the hash a write replaced is the only one it can orphan)."""
    old: ColumnElement[str] = bindparam("old_hash", type_=String(64))
    # Upstream's newest files also keep a session's tool names in this table, by hash.
    used = exists().where(or_(_c.system_prompt_hash == old, _c.tool_names == old))
    return delete(system_prompts).where(system_prompts.c.hash == bindparam("old_hash"), ~used)


def _filled(new: Callable[[str], ColumnElement[Any]]) -> list[tuple[Any, Any]]:
    """The columns of an existing session another ``create_session`` writes, ``new(name)``
    being the value it brings: NULL columns of :data:`KEPT_FIRST` take the new values, a
    placeholder source the real one, a prompt by hash replaces an inline one; nothing already
    set changes."""
    pairs: list[tuple[Any, Any]] = [
        # First: MySQL evaluates SET left to right, so this reads the hash before it is set.
        (
            _c.system_prompt,
            case(
                (_c.system_prompt_hash.is_(None) & new("system_prompt_hash").is_not(None), None),
                else_=_c.system_prompt,
            ),
        ),
        (_c.system_prompt_hash, func.coalesce(_c.system_prompt_hash, new("system_prompt_hash"))),
        (_c.source, case((_c.source == _UNKNOWN, new("source")), else_=_c.source)),
    ]
    pairs += [(_c[name], func.coalesce(_c[name], new(name))) for name in KEPT_FIRST]
    return pairs


#: What ``create_session`` inserts: every field, the prompt by ``:system_prompt_hash``.
_INSERTED: Final = ("id", "source", *SESSION_FIELDS, "system_prompt_hash")


@functools.cache
def insert_session(dialect_name: str) -> Insert:
    """Insert a session with every field; on SQLite and PostgreSQL an existing ``:id`` is
    filled in instead, in the same statement (see :func:`fill_session`). On MySQL/MariaDB an
    existing row is left as it is and :func:`fill_session` follows (its upsert would also
    swallow a clash on the unique title)."""
    if dialect_name in ("mysql", "mariadb"):
        return insert_if_absent(dialect_name, sessions, _INSERTED, "id")
    values: dict[str, Any] = {name: bindparam(name) for name in _INSERTED}
    return upsert(
        dialect_name,
        sessions,
        values,
        lambda new: {column.name: value for column, value in _filled(lambda n: new[n])},
    )


@functools.cache
def fill_session() -> Update:
    """MySQL/MariaDB: an existing ``:session_id`` after another ``create_session`` (see
    :func:`_filled`)."""
    where = _c.id == bindparam("session_id")
    return update(sessions).where(where).ordered_values(*_filled(_typed))


@functools.cache
def session_and_parent() -> Select[Any]:
    """What inheritance reads: ``:id`` and ``:parent_session_id``, their inherited columns."""
    wanted = sorted({"id", "end_reason", *INHERITED, *INHERITED_ROUTE})
    return select(*(_c[name] for name in wanted)).where(
        or_(_c.id == bindparam("id"), _c.id == bindparam("parent_session_id"))
    )


@functools.cache
def inherit_session() -> Update:
    """Fill ``:session_id``'s NULL inherited columns with the values given (a NULL parameter changes
    nothing)."""
    names = (*INHERITED, *INHERITED_ROUTE)
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values({name: func.coalesce(_c[name], _typed(name)) for name in names})
    )


@functools.cache
def end_session() -> Update:
    """End ``:session_id`` at ``:now`` for ``:end_reason``, unless it already ended (the first
    reason stays: a compression split keeps 'compression' when a late end arrives)."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"), _c.ended_at.is_(None))
        .values(ended_at=bindparam("now", type_=Double()), end_reason=bindparam("end_reason"))
    )


@functools.cache
def reopen_session() -> Update:
    """Make ``:session_id`` live again: no end time, no reason."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values(ended_at=None, end_reason=None)
    )


@functools.cache
def session_prompt_and_config() -> Select[Any]:
    """``:session_id``'s prompt hash and model config, locked until the write commits."""
    return (
        select(_c.system_prompt_hash, _c.model_config)
        .where(_c.id == bindparam("session_id"))
        .with_for_update()
    )


@functools.cache
def set_system_prompt() -> Update:
    """Point ``:session_id`` at the prompt ``:system_prompt_hash`` (NULL: none), inline copy
    cleared."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values(system_prompt=None, system_prompt_hash=_typed("system_prompt_hash"))
    )


@functools.cache
def set_session_model() -> Update:
    """``:session_id`` runs ``:model`` with ``:model_config``; its prompt snapshot (which names
    the old model) is dropped, to be rebuilt."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values(
            model=_typed("model"),
            model_config=_typed("model_config"),
            system_prompt=None,
            system_prompt_hash=None,
        )
    )


@functools.cache
def usage_route() -> Select[Any]:
    """The route ``:session_id`` records usage under, locked until the write commits."""
    return (
        select(
            _c.model, _c.billing_provider, _c.billing_base_url, _c.billing_mode, _c.api_call_count
        )
        .where(_c.id == bindparam("session_id"))
        .with_for_update()
    )


@functools.cache
def set_usage_route() -> Update:
    """The first accounted call's route replaces the one the session was created with."""
    return (
        update(sessions)
        .where(_c.id == bindparam("session_id"))
        .values(
            model=_typed("model"),
            billing_provider=_typed("billing_provider"),
            billing_base_url=_typed("billing_base_url"),
            billing_mode=_typed("billing_mode"),
        )
    )


@functools.cache
def count_tokens(absolute: bool) -> Update:
    """One usage report on ``:session_id``: counters added (set when ``absolute``), the
    estimate added (set), the billed cost added when given, status fields replaced when
    given, route fields filled where NULL."""

    def added(name: str, zero_null: bool = False) -> ColumnElement[Any]:
        given = bindparam(name, type_=Integer())
        if absolute:
            return given
        return (func.coalesce(_c[name], 0) if zero_null else _c[name]) + given

    estimate: ColumnElement[float] = bindparam("estimated_cost_usd", type_=Double())
    actual: ColumnElement[float] = bindparam("actual_cost_usd", type_=Double())
    values: dict[str, Any] = {name: added(name) for name in TOKEN_COUNTERS}
    values["estimated_cost_usd"] = (
        func.coalesce(estimate, 0)
        if absolute
        else func.coalesce(_c.estimated_cost_usd, 0) + func.coalesce(estimate, 0)
    )
    values["actual_cost_usd"] = case(
        # Cast: PostgreSQL cannot tell the type of a bare parameter tested for NULL.
        (cast(actual, Double()).is_(None), _c.actual_cost_usd),
        else_=actual if absolute else func.coalesce(_c.actual_cost_usd, 0) + actual,
    )
    for name in ("cost_status", "cost_source", "pricing_version"):
        values[name] = func.coalesce(_typed(name), _c[name])
    for name in ROUTE_FIELDS:
        values[name] = func.coalesce(_c[name], bindparam(f"route_{name}", type_=_c[name].type))
    values["api_call_count"] = added("api_call_count", zero_null=True)
    return update(sessions).where(_c.id == bindparam("session_id")).values(values)


#: The columns of one ``session_model_usage`` row a usage report writes.
USAGE_COLUMNS: Final = (
    "session_id",
    "model",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "task",
    "api_call_count",
    *TOKEN_COUNTERS,
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "first_seen",
    "last_seen",
)
_SUMMED: Final = ("api_call_count", *TOKEN_COUNTERS, "estimated_cost_usd", "actual_cost_usd")


@functools.cache
def record_model_usage(dialect_name: str) -> Insert:
    """Add one report to its (session, model, route, task) row of ``session_model_usage``,
    creating the row on its first report."""
    u = session_model_usage.c
    row = {name: bindparam(name, type_=u[name].type) for name in USAGE_COLUMNS}

    def added(new: Any) -> dict[str, Any]:
        return {name: u[name] + new[name] for name in _SUMMED} | {
            "cost_status": func.coalesce(new.cost_status, u.cost_status),
            "cost_source": func.coalesce(new.cost_source, u.cost_source),
            "last_seen": new.last_seen,
        }

    # The primary key is the table's only unique key, so a duplicate can only be this row.
    return upsert(dialect_name, session_model_usage, row, added)
