"""docs/sql/: the SQL each store operation sends on each dialect, rendered from the builders."""

from __future__ import annotations

import argparse
import enum
import inspect
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from sqlalchemy import Connection, Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from .. import statements as S
from ..models import HandoffState
from ..statements import Capabilities, Fence, ReclaimScope
from ..validation import require_only_states

__all__ = [
    "DIALECTS",
    "DIRECTORY",
    "FLAVOURS",
    "NOT_SENT",
    "OPERATIONS",
    "Catalog",
    "Compiled",
    "Document",
    "Flavour",
    "Operation",
    "Sent",
    "catalog",
    "compiled",
    "layout",
    "main",
    "render",
    "sql_text",
]

# ``python -m hermes_state.sql_docs`` rewrites docs/sql/: a file per statement of each operation
# on each dialect, and index.md listing them; ``--check`` only says which files are stale or
# missing (exit 1), for CI and the tests. Another directory can be named as the argument.
#
# OPERATIONS says which builders each operation runs on each dialect, as the plans in
# hermes_state/plans.py choose them for a store with an owner and leases (a gateway's); the
# tests hold it to what a store actually sends. Each statement is compiled as the stores
# compile it, ``statement.compile(dialect=...)`` with no options, by the dialect of the store's
# driver (pysqlite, psycopg, PyMySQL) without connecting. Only the parameter style differs
# (``:name``, so every parameter reads by name), and whitespace is laid out for reading.

#: The directory it writes by default, from the repository root.
DIRECTORY: Final = Path("docs/sql")
#: Lines are wrapped at this width where a clause allows.
WIDTH: Final = 100
_INDENT: Final = "  "


# -- the dialects ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Flavour:
    """One server as the docs render for it: the directory its files go to, its name and its
    driver's in their headers, and the driver's dialect (``:name`` parameters), whose
    capabilities the plans choose by."""

    key: str
    directory: str
    server: str
    driver: str
    dialect: Dialect

    @property
    def caps(self) -> Capabilities:
        return Capabilities.of(self.dialect)


def _sqlite() -> Dialect:
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    return SQLiteDialect_pysqlite(paramstyle="named")


def _postgresql() -> Dialect:
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    dialect: Callable[..., Dialect] = PGDialect_psycopg  # its __init__ is not annotated
    return dialect(paramstyle="named")


def _mysql(version: tuple[int, ...], mariadb: bool) -> Dialect:
    """PyMySQL's dialect as connecting to that server would set it up: SQLAlchemy's own
    vendor setup, which reads nothing but the server's version (it decides, e.g., RETURNING on
    MariaDB and the new row's alias in MySQL's ON DUPLICATE KEY UPDATE)."""
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql

    dialect = MySQLDialect_pymysql(paramstyle="named", is_mariadb=mariadb)
    dialect.server_version_info = version
    no_connection = cast(Connection, None)
    if mariadb:
        dialect._initialize_mariadb(no_connection)
    else:
        dialect._initialize_mysql(no_connection)
    return dialect


def _flavours() -> tuple[Flavour, ...]:
    return (
        Flavour("sqlite", "sqlite", "SQLite", "pysqlite", _sqlite()),
        Flavour("postgresql", "postgresql", "PostgreSQL", "psycopg", _postgresql()),
        Flavour("mysql", "mysql", "MySQL 8.0", "PyMySQL", _mysql((8, 0, 36), mariadb=False)),
        Flavour("mariadb", "mysql", "MariaDB 10.11", "PyMySQL", _mysql((10, 11, 0), mariadb=True)),
    )


#: Every flavour rendered; MySQL and MariaDB share the mysql directory (a file of MariaDB's
#: only where what it is sent differs).
FLAVOURS: Final = _flavours()
#: The directories, one per dialect.
DIALECTS: Final = tuple(dict.fromkeys(flavour.directory for flavour in FLAVOURS))


# -- the catalog: which builders each operation runs ------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)  # a statement's == builds SQL
class Sent:
    """One statement an operation sends: the builder (a cached function of
    :mod:`hermes_state.statements`), how it was called, the statement, and when it is sent."""

    builder: str
    call: str
    statement: ClauseElement
    note: str = ""


def _arg(value: object) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(_arg(item) for item in value)) + "}"
    return repr(value)


def _call(builder: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> str:
    """``statements.builder(name=value, ...)``, the arguments named."""
    bound = inspect.signature(builder).bind(*args, **kw)
    shown = ", ".join(f"{name}={_arg(value)}" for name, value in bound.arguments.items())
    return f"statements.{builder.__name__}({shown})"


def _sent(
    builder: Callable[..., Any], *args: Any, part: str | None = None, note: str = "", **kw: Any
) -> Sent:
    """The statement ``builder(*args, **kw)`` builds (its attribute ``part``, for a builder of
    several), called as the plans call it, so it is the very object they send."""
    built = builder(*args, **kw)
    statement = built if part is None else getattr(built, part)
    assert isinstance(statement, ClauseElement)
    call = _call(builder, args, kw) + ("" if part is None else f".{part}")
    return Sent(builder.__name__, call, statement, note)


def _move(
    caps: Capabilities, transition: S.Transition, builder: str, call: str, note: str
) -> list[Sent]:
    """A transition's statements as :func:`hermes_state.plans._move` sends them: the one
    statement on PostgreSQL, else the event, then the move."""
    parts = ("single",) if caps.single_statement else ("record", "apply")
    return [Sent(builder, f"{call}.{part}", getattr(transition, part), note) for part in parts]


def _transition(
    caps: Capabilities, builder: Callable[..., S.Transition], *args: Any, note: str = "", **kw: Any
) -> list[Sent]:
    transition = builder(*args, **kw)
    return _move(caps, transition, builder.__name__, _call(builder, args, kw), note)


#: The lineage walk (:func:`hermes_state.plans._conversation`): the session's parent, then its
#: parent's, while the parent ended by compression.
_PER_WALK = "once, and once more per step up the session's compression lineage"


def _create_session(caps: Capabilities) -> list[Sent]:
    return [_sent(S.insert_session, caps.name)]


def _append_message(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.append_message_counted)]
    return [_sent(S.append_message, caps.insert_returning), _sent(S.count_appended_message)]


def _get_transcripts(caps: Capabilities) -> list[Sent]:
    if caps.name == "sqlite":
        return [_sent(S.get_messages, note="once per session")]
    return [_sent(S.get_transcripts, caps.name == "postgresql")]


def _request(retry: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if retry:
            return _transition(caps, S.request_handoff, retry=True)
        return _transition(caps, S.request_handoff)

    return steps


def _claim_one(caps: Capabilities) -> list[Sent]:
    returning = caps.update_returning
    audit_returning = not returning and caps.insert_returning
    sent = _transition(caps, S.claim_handoff, returning, audit_returning)
    if not (returning or audit_returning or caps.single_statement):
        sent.append(_sent(S.claimed_attempt))
    return sent


def _claim_batch(by_platform: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.name == "postgresql":
            return [_sent(S.claim_pending_statement, by_platform)]
        if caps.update_returning:
            return _transition(caps, S.claim_pending_transition, by_platform)
        claim = S.claim_picked(by_platform)
        call = _call(S.claim_picked, (by_platform,), {}) + ".transition"
        return [
            _sent(S.claim_picked, by_platform, part="pick"),
            *_move(caps, claim.transition, "claim_picked", call, ""),
            _sent(S.claim_picked, by_platform, part="fetch"),
        ]

    return steps


def _take_turn(caps: Capabilities, note: str) -> list[Sent]:
    """The one-row acquire of a turn lease (after the lineage walk)."""
    return [
        _sent(S.expire_turn_lease, note=note),
        _sent(S.insert_turn_lease, caps.name, note=note),
        _sent(S.turn_lease_holder, note=note),
    ]


def _claim_given_steps(caps: Capabilities, turns: bool) -> list[Sent]:
    """:func:`hermes_state.plans._claim_given` where it is not one statement."""
    sent = [_sent(S.pending_row_locked, note="once per session given")]
    if turns:
        sent.append(_sent(S.lineage_parent, note="for each row locked: " + _PER_WALK))
        sent += _take_turn(caps, "once per conversation, in key order")
    per_row = "once per row claimed"
    sent += _transition(caps, S.claim_handoff, False, note=per_row)
    sent.append(_sent(S.get_session, note=per_row))
    return sent


def _claim_given(turns: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [_sent(S.claim_given, turns)]
        return _claim_given_steps(caps, turns)

    return steps


def _claim_next(turns: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [_sent(S.claim_next, turns)]
        return [_sent(S.oldest_pending_locked), *_claim_given_steps(caps, turns)]

    return steps


def _complete_one(caps: Capabilities) -> list[Sent]:
    return _transition(caps, S.complete_handoff, Fence.CLAIM)


def _fail_one(caps: Capabilities) -> list[Sent]:
    return _transition(caps, S.fail_handoff, require_only_states(None), Fence.CLAIM)


def _release_steps(note: str) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), _sent(S.release_turn_lease, note=note)]


def _finish(completes: bool, fails: bool, releases: bool) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return [_sent(S.finish_claims, True, releases)]
        if caps.name == "sqlite":
            sent = _transition(caps, S.finish_claims_json, True)
        else:
            sent = []
            if completes:
                sent += _transition(caps, S.complete_handoff, Fence.CLAIM, note="once per row")
            if fails:
                running = frozenset({HandoffState.RUNNING})
                sent += _transition(caps, S.fail_handoff, running, Fence.CLAIM, note="once per row")
        return sent + (_release_steps("once per lease given back") if releases else [])

    return steps


def _renew(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.renew_leases)]
    if caps.name == "sqlite":
        return [_sent(S.renew_leases_json)]
    return [_sent(S.renew_lease, note="once per session")]


def _reclaim(scope: ReclaimScope) -> Callable[[Capabilities], list[Sent]]:
    def steps(caps: Capabilities) -> list[Sent]:
        if caps.single_statement:
            return _transition(caps, S.reclaim_handoffs, scope)
        return [
            _sent(S.reclaimable, scope, lock=True),
            *_transition(caps, S.reclaim_handoffs, scope),
        ]

    return steps


def _preview(scope: ReclaimScope) -> Callable[[Capabilities], list[Sent]]:
    return lambda _caps: [_sent(S.reclaimable, scope, lock=False)]


def _only(
    builder: Callable[..., Any], *args: Any, **kw: Any
) -> Callable[[Capabilities], list[Sent]]:
    """An operation that sends one statement, the same builder on every dialect."""
    return lambda _caps: [_sent(builder, *args, **kw)]


def _acquire_turn(caps: Capabilities) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), *_take_turn(caps, "")]


def _refresh_turn(_caps: Capabilities) -> list[Sent]:
    return [_sent(S.lineage_parent, note=_PER_WALK), _sent(S.refresh_turn_lease)]


def _release_turn(_caps: Capabilities) -> list[Sent]:
    return _release_steps("")


def _refresh_turns(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.refresh_turn_leases)]
    per = "once per session"
    walk = "for each session: " + _PER_WALK
    return [_sent(S.lineage_parent, note=walk), _sent(S.refresh_turn_lease, note=per)]


def _release_turns(caps: Capabilities) -> list[Sent]:
    if caps.single_statement:
        return [_sent(S.release_turn_leases)]
    walk = "for each session: " + _PER_WALK
    return [
        _sent(S.lineage_parent, note=walk),
        _sent(S.release_turn_lease, note="once per session"),
    ]


def _stats(_caps: Capabilities) -> list[Sent]:
    return [
        _sent(S.count_handoffs_by_state),
        _sent(S.oldest_pending_requested_at),
        _sent(S.running_by_owner),
        _sent(S.count_failures_since),
        _sent(S.recent_failures),
    ]


@dataclass(frozen=True, slots=True)
class Operation:
    """A store operation (a method of :class:`~hermes_state.SessionDB`), called as ``call``
    shows (``when`` says in what state, if it matters), and the statements it sends on a
    dialect (``steps``), in order."""

    section: str
    name: str
    variant: str
    call: str
    steps: Callable[[Capabilities], list[Sent]]
    when: str = ""

    @property
    def slug(self) -> str:
        return self.name + (f".{self.variant}" if self.variant else "")


_SESSIONS = "Sessions and transcripts"
_TRANSITIONS = "Handoff transitions"
_BATCHES = "Batches"
_LEASES = "Claim leases and reclaims"
_TURNS = "Session turn leases"
_AUDIT = "Audit trail"
_READS = "Reads"

_O = Operation
#: Every operation, in the order of the index; a variant is an operation called with the
#: arguments that change what it sends.
OPERATIONS: Final[tuple[Operation, ...]] = (
    _O(
        _SESSIONS,
        "create_session",
        "",
        "create_session(session_id, source, **fields)",
        _create_session,
    ),
    _O(
        _SESSIONS,
        "append_message",
        "",
        "append_message(session_id, role, content, **fields)",
        _append_message,
    ),
    _O(_SESSIONS, "get_messages", "", "get_messages(session_id)", _only(S.get_messages)),
    _O(_SESSIONS, "count_messages", "", "count_messages(session_id)", _only(S.count_messages)),
    _O(_SESSIONS, "get_transcripts", "", "get_transcripts(session_ids)", _get_transcripts),
    _O(
        _TRANSITIONS,
        "request_handoff",
        "",
        "request_handoff(session_id, platform)",
        _request(retry=False),
    ),
    _O(
        _TRANSITIONS,
        "retry_handoff",
        "",
        "retry_handoff(session_id, platform=None)",
        _request(retry=True),
    ),
    _O(_TRANSITIONS, "claim_handoff", "", "claim_handoff(session_id)", _claim_one),
    _O(
        _TRANSITIONS,
        "complete_handoff",
        "",
        "complete_handoff(session_id)",
        _complete_one,
        when=", after the store claimed it",
    ),
    _O(
        _TRANSITIONS,
        "fail_handoff",
        "",
        "fail_handoff(session_id, error)",
        _fail_one,
        when=", after the store claimed it",
    ),
    _O(
        _BATCHES, "claim_pending_handoffs", "", "claim_pending_handoffs(limit)", _claim_batch(False)
    ),
    _O(
        _BATCHES,
        "claim_pending_handoffs",
        "platform",
        "claim_pending_handoffs(limit, platform=platform)",
        _claim_batch(True),
    ),
    _O(_BATCHES, "claim_handoffs", "", "claim_handoffs(session_ids)", _claim_given(False)),
    _O(
        _BATCHES,
        "claim_handoffs",
        "turns",
        "claim_handoffs(session_ids, turn_holders=holders)",
        _claim_given(True),
    ),
    _O(
        _BATCHES,
        "claim_next_handoffs",
        "",
        "claim_next_handoffs(limit, exclude=ids)",
        _claim_next(False),
    ),
    _O(
        _BATCHES,
        "claim_next_handoffs",
        "turns",
        "claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)",
        _claim_next(True),
    ),
    _O(
        _BATCHES,
        "complete_handoffs",
        "",
        "complete_handoffs(session_ids)",
        _finish(completes=True, fails=False, releases=False),
        when=", after the store claimed them",
    ),
    _O(
        _BATCHES,
        "fail_handoffs",
        "",
        "fail_handoffs(errors)",
        _finish(completes=False, fails=True, releases=False),
        when=", after the store claimed them",
    ),
    _O(
        _BATCHES,
        "finish_handoffs",
        "",
        "finish_handoffs(outcomes)",
        _finish(completes=True, fails=True, releases=False),
        when=", after the store claimed them",
    ),
    _O(
        _BATCHES,
        "finish_handoffs",
        "release_turns",
        "finish_handoffs(outcomes, release_turns=holders)",
        _finish(completes=True, fails=True, releases=True),
        when=", after the store claimed them",
    ),
    _O(_LEASES, "renew_handoff_leases", "", "renew_handoff_leases(session_ids)", _renew),
    _O(
        _LEASES,
        "reclaim_stale_running_handoffs",
        "",
        "reclaim_stale_running_handoffs(error)",
        _reclaim(ReclaimScope.STALE),
    ),
    _O(
        _LEASES,
        "reclaim_expired_handoffs",
        "",
        "reclaim_expired_handoffs(error)",
        _reclaim(ReclaimScope.EXPIRED),
    ),
    _O(
        _LEASES,
        "reclaim_running_handoffs",
        "",
        "reclaim_running_handoffs(error)",
        _reclaim(ReclaimScope.ALL),
    ),
    _O(_LEASES, "preview_reclaim", "", "preview_reclaim('stale')", _preview(ReclaimScope.STALE)),
    _O(
        _LEASES,
        "preview_reclaim",
        "expired",
        "preview_reclaim('expired')",
        _preview(ReclaimScope.EXPIRED),
    ),
    _O(_LEASES, "preview_reclaim", "all", "preview_reclaim('all')", _preview(ReclaimScope.ALL)),
    _O(
        _TURNS,
        "try_acquire_session_turn_lease",
        "",
        "try_acquire_session_turn_lease(session_id, holder)",
        _acquire_turn,
    ),
    _O(
        _TURNS,
        "refresh_session_turn_lease",
        "",
        "refresh_session_turn_lease(session_id, holder)",
        _refresh_turn,
    ),
    _O(
        _TURNS,
        "release_session_turn_lease",
        "",
        "release_session_turn_lease(session_id, holder)",
        _release_turn,
    ),
    _O(
        _TURNS,
        "refresh_session_turn_leases",
        "",
        "refresh_session_turn_leases(turn_holders)",
        _refresh_turns,
    ),
    _O(
        _TURNS,
        "release_session_turn_leases",
        "",
        "release_session_turn_leases(turn_holders)",
        _release_turns,
    ),
    _O(_AUDIT, "handoff_history", "", "handoff_history(session_id)", _only(S.handoff_history)),
    _O(
        _AUDIT,
        "prune_handoff_events",
        "",
        "prune_handoff_events(older_than_seconds)",
        _only(S.prune_events),
    ),
    _O(
        _AUDIT,
        "prune_handoff_events",
        "dry_run",
        "prune_handoff_events(older_than_seconds, dry_run=True)",
        _only(S.count_events_before),
    ),
    _O(
        _AUDIT,
        "handoff_events_after",
        "",
        "handoff_events_after(after, limit=limit)",
        _only(S.handoff_events_after),
    ),
    _O(
        _AUDIT,
        "recent_handoff_failures",
        "",
        "recent_handoff_failures(limit=limit)",
        _only(S.recent_failed_events),
    ),
    _O(
        _AUDIT,
        "last_handoff_event_id",
        "",
        "last_handoff_event_id()",
        _only(S.last_handoff_event_id),
    ),
    _O(
        _READS,
        "list_pending_handoffs",
        "",
        "list_pending_handoffs()",
        _only(S.list_handoffs, HandoffState.PENDING),
    ),
    _O(
        _READS,
        "list_handoffs",
        "",
        "list_handoffs()",
        _only(S.list_handoffs, None, False, after=False, search=False),
    ),
    _O(
        _READS,
        "list_handoffs",
        "filtered",
        "list_handoffs(state='failed', limit=limit, after=session_id, search=text)",
        _only(S.list_handoffs, HandoffState.FAILED, True, after=True, search=True),
    ),
    _O(
        _READS,
        "list_sessions",
        "",
        "list_sessions()",
        _only(S.list_sessions, None, by_source=False, since=False, limited=False),
    ),
    _O(
        _READS,
        "list_sessions",
        "filtered",
        "list_sessions(source=source, handoff_state='pending', since=since, limit=limit)",
        _only(S.list_sessions, HandoffState.PENDING, by_source=True, since=True, limited=True),
    ),
    _O(_READS, "get_session", "", "get_session(session_id)", _only(S.get_session)),
    _O(
        _READS, "get_handoff_state", "", "get_handoff_state(session_id)", _only(S.get_handoff_state)
    ),
    _O(_READS, "has_pending_handoffs", "", "has_pending_handoffs()", _only(S.has_pending_handoffs)),
    _O(_READS, "handoff_stats", "", "handoff_stats()", _stats),
)

#: Builders of :mod:`hermes_state.statements` no operation sends, and why.
NOT_SENT: Final = {
    "notify_handoff_requested": "a request on PostgreSQL notifies from its one statement",
}


# -- compiling and laying out ------------------------------------------------------------------

_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement as compiled for a flavour: its SQL (laid out), the parameters whose value
    the statement itself carries (name, value), and the expanding ones."""

    sql: str
    fixed: tuple[tuple[str, object], ...]
    expanding: tuple[str, ...]


#: What :func:`compiled` made, by statement (its id, the statement kept alive beside it: a
#: ClauseElement's ``==`` builds SQL, so it cannot be a key) and flavour.
_COMPILED: dict[tuple[int, str], tuple[ClauseElement, Compiled]] = {}


def compiled(statement: ClauseElement, flavour: Flavour) -> Compiled:
    """``statement`` compiled as a store compiles it, laid out for reading."""
    key = (id(statement), flavour.key)
    known = _COMPILED.get(key)
    if known is None or known[0] is not statement:
        known = _COMPILED[key] = (statement, _compile(statement, flavour))
    return known[1]


def _compile(statement: ClauseElement, flavour: Flavour) -> Compiled:
    result = statement.compile(dialect=flavour.dialect)
    assert isinstance(result, SQLCompiler)
    text = result.string
    # An expanding list (MySQL's IN lists) is rendered per call; shown here by its name.
    expanding = tuple(dict.fromkeys(_POSTCOMPILE.findall(text)))
    text = _POSTCOMPILE.sub(r":\1", text)
    fixed = []
    for name, bind in result.binds.items():
        found = re.search(rf":{re.escape(name)}\b", text)
        if found and not bind.required and not bind.expanding:
            fixed.append((found.start(), name, bind.value))
    shown = tuple((name, value) for _at, name, value in sorted(fixed, key=lambda item: item[:2]))
    return Compiled(layout(text), shown, expanding)


def sql_text(statement: ClauseElement, flavour: Flavour) -> str:
    """The laid-out SQL of ``statement`` for ``flavour`` (what a file shows below its header)."""
    return compiled(statement, flavour).sql


_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<text>'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`)"""
    r"""|(?P<open>\()|(?P<close>\))|(?P<comma>,)|(?P<word>[^\s'"`(),]+)"""
)


@dataclass(slots=True)
class _Token:
    text: str
    space: bool  # whitespace before it in the compiled SQL


@dataclass(slots=True)
class _Group:
    """A parenthesised part (the top level has no parentheses)."""

    items: list[_Token | _Group]
    space: bool
    parens: bool = True

    def starts(self, *words: str) -> bool:
        first = self.items[0] if self.items else None
        return isinstance(first, _Token) and first.text in words


def _parse(sql: str) -> _Group:
    top = _Group([], False, parens=False)
    stack = [top]
    space = False
    for match in _TOKEN.finditer(sql):
        kind, value = match.lastgroup, match.group()
        if kind == "space":
            space = True
            continue
        if kind == "open":
            group = _Group([], space)
            stack[-1].items.append(group)
            stack.append(group)
        elif kind == "close" and len(stack) > 1:
            stack.pop()
        else:
            stack[-1].items.append(_Token(value, space))
        space = False
    return top


#: Where a clause starts, longest first; ``UPDATE`` only opens a statement.
_CLAUSES: Final = sorted(
    (
        tuple(words.split())
        for words in (
            "WITH",
            "SELECT",
            "FROM",
            "WHERE",
            "GROUP BY",
            "HAVING",
            "ORDER BY",
            "LIMIT",
            "OFFSET",
            "FOR UPDATE",
            "UNION ALL",
            "UNION",
            "RETURNING",
            "SET",
            "VALUES",
            "ON CONFLICT",
            "ON DUPLICATE KEY UPDATE",
            "INSERT INTO",
            "DELETE FROM",
            "LEFT OUTER JOIN",
            "JOIN",
        )
    ),
    key=len,
    reverse=True,
)
_STATEMENTS: Final = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


def _clause_at(items: list[_Token | _Group], at: int) -> int:
    """How many items starting at ``at`` open a clause (0: none)."""
    if at == 0 and items and isinstance(items[0], _Token) and items[0].text == "UPDATE":
        return 1
    for words in _CLAUSES:
        found = items[at : at + len(words)]
        if len(found) == len(words) and all(
            isinstance(item, _Token) and item.text == word
            for item, word in zip(found, words, strict=True)
        ):
            after = items[at + len(words)] if at + len(words) < len(items) else None
            if words == ("VALUES",) and isinstance(after, _Group) and not after.space:
                return 0  # MySQL's VALUES(column), a function
            return len(words)
    return 0


def _clauses(group: _Group) -> Iterator[list[_Token | _Group]]:
    current: list[_Token | _Group] = []
    at = 0
    while at < len(group.items):
        opening = _clause_at(group.items, at)
        if opening and current:
            yield current
            current = []
        step = max(opening, 1)
        current.extend(group.items[at : at + step])
        at += step
    if current:
        yield current


def _inline(items: Sequence[_Token | _Group]) -> str:
    out = []
    for n, item in enumerate(items):
        gap = " " if n and item.space else ""
        body = item.text if isinstance(item, _Token) else f"({_inline(item.items)})"
        out.append(gap + body)
    return "".join(out)


def _block(group: _Group, column: int) -> str:
    """A statement (or subquery) laid out, a line per clause. Lines after the first are
    indented relative to it; it starts at ``column`` (what the widths count from)."""
    return "\n".join(_clause(items, column, column) for items in _clauses(group))


def _piece(item: _Token | _Group, at: int, pad: int) -> str:
    """A token, or a parenthesised part starting at column ``at`` of a line indented by
    ``pad``: a subquery as a block indented one step from the line, anything else on one
    line where it fits, else filled like a clause."""
    if isinstance(item, _Token):
        return item.text
    if item.starts(*_STATEMENTS):
        inner = _block(item, pad + len(_INDENT))
        return "(\n" + "\n".join(_INDENT + line for line in inner.split("\n")) + "\n)"
    flat = f"({_inline(item.items)})"
    if at + len(flat) <= WIDTH or not item.items:
        return flat
    return f"({_clause(item.items, at + 1, pad)})"


def _segment(items: Sequence[_Token | _Group], at: int, pad: int) -> str:
    """Pieces that stay together on a line (between two places a clause may break)."""
    out = ""
    for n, item in enumerate(items):
        gap = " " if n and item.space else ""
        last = out.rsplit("\n", 1)
        column = (at if len(last) == 1 else pad) + len(last[-1]) + len(gap)
        out += gap + _piece(item, column, pad)
    return out


#: Where a clause too long for one line may break: after a comma, or before these.
_BREAK_BEFORE: Final = frozenset({"AND", "OR", "||"})
#: How much further a clause's wrapped lines are indented.
_CONTINUED: Final = _INDENT * 2


def _clause(items: list[_Token | _Group], first: int, pad: int) -> str:
    """One clause, its first line starting at column ``first`` of a line indented by
    ``pad``: its pieces filled into lines of :data:`WIDTH`, with a new line after each CTE of
    a WITH and, where a line would be too long, after a comma or before AND, OR or ``||``.
    Lines after the first are indented relative to the line the clause starts on; a piece of
    several lines (a subquery) is indented as the line it starts on."""
    segments: list[tuple[bool, list[_Token | _Group]]] = []  # (space before it, pieces)
    current: list[_Token | _Group] = []
    space = False
    for n, item in enumerate(items):
        if isinstance(item, _Token) and item.text in _BREAK_BEFORE and current:
            segments.append((space, current))
            current = []
        if not current:
            space = bool(n) and item.space
        current.append(item)
        if isinstance(item, _Token) and item.text == ",":
            segments.append((space, current))
            current = []
    if current:
        segments.append((space, current))
    cte_list = isinstance(items[0], _Token) and items[0].text == "WITH"
    lines = [""]

    def column() -> int:
        return (first if len(lines) == 1 else pad) + len(lines[-1])

    for n, (spaced, pieces) in enumerate(segments):
        fresh = not lines[-1].strip()
        if cte_list and n:
            lines.append("")
            fresh = True
        gap = " " if spaced and not fresh else ""
        text = _segment(pieces, column() + len(gap), pad)
        if not fresh and column() + len(gap) + len(text.split("\n", 1)[0]) > WIDTH:
            lines.append(_CONTINUED)
            gap = ""
            text = _segment(pieces, column(), pad + len(_CONTINUED))
        line = lines[-1]
        indent = line[: len(line) - len(line.lstrip())]
        more = text.split("\n")
        lines[-1] = line + gap + more[0]
        lines += [indent + rest for rest in more[1:]]
    return "\n".join(line.rstrip() for line in lines)


def layout(sql: str) -> str:
    """``sql`` laid out for reading: only whitespace changes (a line per clause, subqueries
    and CTEs indented, long clauses wrapped); every other character stays as compiled."""
    return _block(_parse(sql), 0)


# -- the files ---------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Document:
    """One file: where it goes (relative to the docs' directory), the statement it shows, and
    the flavours it is sent to as step ``step`` of ``steps`` of ``operation``."""

    path: Path
    operation: Operation
    sent: Sent
    step: int
    steps: int
    flavours: list[Flavour]

    @property
    def label(self) -> str:
        """The builder and, for a builder of several statements, which one."""
        part = self.sent.call.rsplit(")", 1)[1]
        return self.sent.builder + part

    def text(self) -> str:
        result = compiled(self.sent.statement, self.flavours[0])
        servers = " and ".join(flavour.server for flavour in self.flavours)
        driver = self.flavours[0].driver
        where = "the operation's one statement" if self.steps == 1 else f"step {self.step}"
        if self.steps > 1:
            where += f" of {self.steps}"
        note = f", {self.sent.note}" if self.sent.note else ""
        lines = [
            f"-- {self.sent.call}, sent by {self.operation.call}{self.operation.when}",
            f"-- {servers} ({driver}): {where}{note}.",
        ]
        if result.fixed:
            shown = ", ".join(f":{name} = {_value(value)}" for name, value in result.fixed)
            lines.append(f"-- Parameters the statement carries: {shown}.")
        lines += [f"-- :{name} is a list: one parameter per item." for name in result.expanding]
        return "\n".join([*lines, "", result.sql + ";", ""])


def _value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _file_name(operation: Operation, sent: Sent, step: int, steps: int, own: str) -> str:
    """``<operation>[.<variant>][.<step>-<builder>[-<part>]][.<flavour>].sql``"""
    name = operation.slug
    if steps > 1:
        part = sent.call.rsplit(")", 1)[1].lstrip(".").replace(".", "-")
        name += f".{step}-{sent.builder}" + (f"-{part}" if part else "")
    return name + (f".{own}" if own else "") + ".sql"


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every file, and for each operation and flavour the files of its steps, in order."""

    documents: list[Document]
    steps: dict[tuple[str, str], list[Document]]


def catalog() -> Catalog:
    """The files. Flavours sharing a directory share a file where they are sent the same
    step of the same number of steps; elsewhere the later flavour has a file of its own."""
    documents: list[Document] = []
    steps: dict[tuple[str, str], list[Document]] = {}
    for directory in DIALECTS:
        flavours = [flavour for flavour in FLAVOURS if flavour.directory == directory]
        for operation in OPERATIONS:
            first: list[tuple[str, str, Document]] = []
            for flavour in flavours:
                sent = operation.steps(flavour.caps)
                mine = []
                for n, one in enumerate(sent, start=1):
                    text = sql_text(one.statement, flavour)
                    shared = next(
                        (
                            doc
                            for call, known, doc in first
                            if len(first) == len(sent)
                            and doc.step == n
                            and (call, known) == (one.call, text)
                        ),
                        None,
                    )
                    if shared is not None:
                        shared.flavours.append(flavour)
                        mine.append(shared)
                        continue
                    own = "" if flavour is flavours[0] else flavour.key
                    name = _file_name(operation, one, n, len(sent), own)
                    doc = Document(Path(directory, name), operation, one, n, len(sent), [flavour])
                    documents.append(doc)
                    mine.append(doc)
                    if flavour is flavours[0]:
                        first.append((one.call, text, doc))
                steps[operation.slug, flavour.key] = mine
    return Catalog(documents, steps)


_INDEX_HEAD = """\
# The SQL each operation sends

Generated by `python -m hermes_state.sql_docs` from the statement builders
(`hermes_state/statements.py`), as the plans (`hermes_state/plans.py`) choose them for a
store with an owner and leases (a gateway's store); `tests/test_sql_docs.py` fails when a
file is out of date, and holds the catalog to what a store sends. Do not edit the files by
hand.

Each statement is compiled as the stores compile it, by the dialect of the store's driver
(pysqlite, psycopg, PyMySQL), without a connection. Parameters are shown by name (`:name`;
the drivers are sent `?`, `%(name)s` or `%s`; a list SQLAlchemy expands per call, as in
MySQL's `IN (:ids)`, by its name too), and only whitespace is changed for reading.
A file's first comment line names the builder and the operation, the next which step of the
operation it is; the steps of one operation run in one transaction. On PostgreSQL nearly
every operation is one statement, sent in autocommit.

The `mysql` files are what MySQL 8.0 and MariaDB 10.11 are sent; where MariaDB is sent
something else, its file's name ends in `.mariadb.sql`. The asyncio stores run the same plans,
so the same statements (asyncpg numbers the parameters `$1`, `$2`, ...).

Builders no operation sends: {not_sent}.
"""


def _index(found: Catalog) -> str:
    not_sent = "; ".join(f"`{name}` ({why})" for name, why in sorted(NOT_SENT.items()))
    lines = [_INDEX_HEAD.format(not_sent=not_sent)]
    by_path = {doc.path: doc for doc in found.documents}
    section = ""
    for operation in OPERATIONS:
        if operation.section != section:
            section = operation.section
            lines += [f"## {section}", ""]
        lines += [f"### `{operation.call}`{operation.when}", ""]
        listed: list[tuple[list[str], list[Path]]] = []
        for flavour in FLAVOURS:
            docs = found.steps[operation.slug, flavour.key]
            paths = [doc.path for doc in docs]
            same = next((names for names, known in listed if known == paths), None)
            if same is not None:
                same.append(flavour.server)
            else:
                listed.append(([flavour.server], paths))
        for names, paths in listed:
            docs = [by_path[path] for path in paths]
            links = ", ".join(
                f"[{f'{doc.step}. ' if doc.steps > 1 else ''}`{doc.label}`]({doc.path.as_posix()})"
                for doc in docs
            )
            lines.append(f"- {' and '.join(names)}: {links}")
        lines.append("")
    return "\n".join(lines)


def render() -> dict[Path, str]:
    """Every file of the docs (paths relative to their directory) and its text."""
    found = catalog()
    files = {doc.path: doc.text() for doc in found.documents}
    files[Path("index.md")] = _index(found)
    return files


def _on_disk(directory: Path) -> set[Path]:
    found = {path.relative_to(directory) for path in directory.glob("*/*.sql")}
    if (directory / "index.md").exists():
        found.add(Path("index.md"))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_state.sql_docs")
    parser.add_argument("directory", nargs="?", default=DIRECTORY, type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    directory: Path = args.directory
    wanted = render()
    present = _on_disk(directory) if directory.is_dir() else set()
    stale = sorted(
        path
        for path in wanted
        if path not in present or (directory / path).read_text(encoding="utf-8") != wanted[path]
    )
    extra = sorted(present - wanted.keys())
    if args.check:
        for path in stale:
            state = "missing" if path not in present else "out of date"
            print(f"{directory / path}: {state}")
        for path in extra:
            print(f"{directory / path}: no operation sends it any more")
        if stale or extra:
            print(f"run {parser.prog} to rewrite {directory}")
            return 1
        return 0
    for path in stale:
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(wanted[path], encoding="utf-8")
    for path in extra:
        (directory / path).unlink()
    return 0
