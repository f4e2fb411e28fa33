"""What the builders share: fields, session columns, capabilities, state literals, PG arrays."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Dialect,
    FunctionElement,
    Insert,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.ext.compiler import compiles
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
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "cwd",
    "profile_name",
    "git_repo_root",
    "git_branch",
    "origin_json",
    "display_name",
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

#: The ``end_reason`` of a session that compression ended and continued in a child session,
#: and the same as an SQL literal (a literal keeps the statements on the partial indexes).
COMPRESSION: Final = "compression"
COMPRESSION_END: Final[ColumnElement[str]] = literal_column(f"'{COMPRESSION}'")


def closed_by_compression() -> ColumnElement[bool]:
    """A session that compression ended: its conversation goes on in the continuation, and
    upstream appends nothing more to it."""
    return and_(_c.ended_at.is_not(None), _c.end_reason == COMPRESSION_END)


def open_for_appends() -> ColumnElement[bool]:
    """The negation of :func:`closed_by_compression`, NULLs included (a session never ended,
    or ended without a reason, takes messages)."""
    return or_(_c.ended_at.is_(None), _c.end_reason.is_(None), _c.end_reason != COMPRESSION_END)


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


def insert_if_absent(dialect_name: str, table: Table, names: Iterable[str], key: str) -> Insert:
    """Insert one row of ``names`` (bound by name), leaving an existing row with the same
    ``key`` untouched."""
    names = tuple(names)
    values: dict[str, Any] = {name: bindparam(name) for name in names}
    if dialect_name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table).values(values).on_conflict_do_nothing(index_elements=[key])
    if dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table).values(values).on_conflict_do_nothing(index_elements=[key])
    if dialect_name in ("mysql", "mariadb"):
        # Not ON DUPLICATE KEY UPDATE (nor INSERT IGNORE): that would also swallow a clash on
        # another unique key (upstream's idx_sessions_title_unique), silently creating nothing.
        # Only an existing key is skipped; any other duplicate fails with 1062 (see errors.py).
        row = select(*(bindparam(name, type_=table.c[name].type) for name in names)).where(
            ~exists().where(table.c[key] == bindparam(key))
        )
        return table.insert().from_select(names, row)
    raise NotImplementedError(f"hermes-state does not support the {dialect_name!r} dialect")


class MarkerText(FunctionElement[str]):
    """The text under a top-level key of a JSON-text column (``model_config``), NULL when the
    text is not JSON or lacks the key; never an error, whatever a row holds. The key is code's,
    never a caller's: it is rendered into the SQL."""

    type = Text()
    inherit_cache = True
    name = "marker_text"

    def __init__(self, column: ColumnElement[Any], key: str) -> None:
        if not key.replace("_", "").isalnum():
            raise ValueError(f"not a marker key: {key!r}")
        self.key = key
        super().__init__(column)


@compiles(MarkerText, "sqlite")
def _sqlite_marker(element: MarkerText, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"CASE WHEN json_valid({column}) THEN json_extract({column}, '$.{element.key}') END"


@compiles(MarkerText, "mysql")
@compiles(MarkerText, "mariadb")
def _mysql_marker(element: MarkerText, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    value = f"JSON_UNQUOTE(JSON_EXTRACT({column}, '$.{element.key}'))"
    # utf8mb4_bin is JSON's; the column's own collation is what ids compare under.
    return f"CASE WHEN JSON_VALID({column}) THEN {value} COLLATE utf8mb4_unicode_ci END"


@compiles(MarkerText, "postgresql")
def _postgresql_marker(element: MarkerText, compiler: Any, **kw: Any) -> str:
    # A cast to jsonb raises on text that is not JSON, so the value is matched instead: the
    # string under the key (upstream writes its markers as plain ids, never escaped).
    column = compiler.process(element.clauses, **kw)
    return f'substring({column} from \'"{element.key}"\\s*:\\s*"([^"]*)"\')'


#: The ``model_config`` keys that mark a child as a fork of its parent, not a continuation:
#: a branch, a delegate (sub-agent) and a reset.
FORK_MARKERS: Final = ("_branched_from", "_delegate_from", "_reset_from")


def forked(row: Any) -> ColumnElement[int]:
    """1 when ``row`` (``sessions`` or an alias) is an explicit fork of its parent, else 0:
    a tool session, or a child whose ``model_config`` names its own parent under a fork
    marker (a compression continuation copies its parent's config, so a marker naming another
    session is inherited, not its own)."""
    parent = row.c.parent_session_id
    marked = [
        and_(
            MarkerText(row.c.model_config, key).is_not(None),
            MarkerText(row.c.model_config, key) == parent,
        )
        for key in FORK_MARKERS
    ]
    is_fork = or_(row.c.source == literal_column("'tool'"), *marked)
    return case((is_fork, literal_column("1")), else_=literal_column("0"))


def upsert(
    dialect_name: str,
    table: Table,
    values: dict[str, Any],
    set_: Callable[[Any], dict[str, Any]],
) -> Insert:
    """Insert one row of ``values`` into ``table``; on a clash with its primary key, update the
    existing row with ``set_(new)`` instead, ``new`` naming the row that was to be inserted
    (``excluded`` on SQLite and PostgreSQL, ``VALUES()`` / the new-row alias on MySQL)."""
    if dialect_name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        # ON DUPLICATE KEY also fires on another unique key: callers use it on tables whose
        # primary key is their only one.
        stmt = mysql.insert(table).values(values)
        return stmt.on_duplicate_key_update(set_(stmt.inserted))
    if dialect_name == "sqlite":
        from sqlalchemy.dialects import sqlite

        insert: Any = sqlite.insert(table).values(values)
    elif dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        insert = postgresql.insert(table).values(values)
    else:
        raise NotImplementedError(f"hermes-state does not support the {dialect_name!r} dialect")
    keys = [column.name for column in table.primary_key.columns]
    result: Insert = insert.on_conflict_do_update(index_elements=keys, set_=set_(insert.excluded))
    return result


def _pg_array(name: str, item: Any = None) -> Any:
    from sqlalchemy.dialects.postgresql import ARRAY  # only PostgreSQL builds these

    return bindparam(name, type_=ARRAY(item if item is not None else String()))


def _unnested(*columns: tuple[str, str, Any]) -> Any:
    """PostgreSQL: ``unnest(:array, ...)`` of parallel arrays, as a table whose columns are
    named as given: (bind parameter, column, item type) each."""
    arrays = [_pg_array(param, item) for param, _name, item in columns]
    names = [name for _param, name, _item in columns]
    return func.unnest(*arrays).table_valued(*names).render_derived(with_types=False)
