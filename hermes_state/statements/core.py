"""What the builders share: fields, session columns, capabilities, state literals, PG arrays."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Dialect,
    String,
    and_,
    bindparam,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import UnaryExpression

from ..models import HandoffState, sessions, system_prompts

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
    "_compressed_summary",
    "api_content",
    "display_kind",
    "display_metadata",
)

_c = sessions.c

#: The end reason of a session whose conversation went on in a continuation session.
_COMPRESSION_END: ColumnElement[str] = literal_column("'compression'")


def closed_by_compression() -> ColumnElement[bool]:
    """A session that compression ended: its conversation goes on in the continuation, and
    upstream appends nothing more to it."""
    return and_(_c.ended_at.is_not(None), _c.end_reason == _COMPRESSION_END)


def open_for_appends() -> ColumnElement[bool]:
    """The negation of :func:`closed_by_compression`, NULLs included (a session never ended,
    or ended without a reason, takes messages)."""
    return or_(_c.ended_at.is_(None), _c.end_reason.is_(None), _c.end_reason != _COMPRESSION_END)


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


def _pg_array(name: str, item: Any = None) -> Any:
    from sqlalchemy.dialects.postgresql import ARRAY  # only PostgreSQL builds these

    return bindparam(name, type_=ARRAY(item if item is not None else String()))


def _unnested(*columns: tuple[str, str, Any]) -> Any:
    """PostgreSQL: ``unnest(:array, ...)`` of parallel arrays, as a table whose columns are
    named as given: (bind parameter, column, item type) each."""
    arrays = [_pg_array(param, item) for param, _name, item in columns]
    names = [name for _param, name, _item in columns]
    return func.unnest(*arrays).table_valued(*names).render_derived(with_types=False)
