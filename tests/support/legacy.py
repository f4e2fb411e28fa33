"""Build ``state.db`` files the way hermes versions before Alembic made them, and fingerprint them.

Older hermes wrote its schema with the ``sqlite3`` module directly: a ``sessions`` table with
many columns hermes-state does not model, ``messages`` with a full-text index kept current by
triggers, bookkeeping tables beside them, and its own indexes. Two generations exist: a recent
one that already carries the three ``handoff_*`` columns (with rows in every handoff state),
and an older one without them (and without ``title``).

Nothing here goes through SQLAlchemy or hermes-state: these files must look exactly like what
the old code left on disk.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LEGACY_MESSAGE_COLUMNS",
    "LegacyFile",
    "build_legacy_db",
    "row_digest",
    "schema_entries",
    "table_columns",
]

# The columns the old writers name in their INSERTs (see insert_legacy_session/message).
LEGACY_MESSAGE_COLUMNS = (
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
)

_SESSIONS_HEAD = """\
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    last_activity_at REAL,
    session_key TEXT"""

_SESSIONS_TITLE = ",\n    title TEXT"
_SESSIONS_HANDOFF = """,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT"""
_SESSIONS_TAIL = """,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
)"""

_REST = [
    """CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT
)""",
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE INDEX idx_sessions_source ON sessions(source)",
    "CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX idx_sessions_started ON sessions(started_at DESC)",
    "CREATE UNIQUE INDEX idx_sessions_key ON sessions(session_key) WHERE session_key IS NOT NULL",
    "CREATE INDEX idx_messages_session ON messages(session_id, timestamp)",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=id)",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
]

# The handoff generation polled with one partial index over both live states.
_HANDOFF_INDEX = (
    "CREATE INDEX idx_sessions_handoff_active ON sessions(handoff_state) "
    "WHERE handoff_state IN ('pending','running')"
)

_SOURCES = ("cli", "telegram", "discord", "slack", "cron")
_WORDS = (
    "deploy",
    "gateway",
    "ünïcödé",
    "日本語のテキスト",
    "emoji 🚀✨",
    "naïve café",
    "Ωmega",
    "quote ' and \" marks",
    "-- not a comment",
    "NULL",
    "tab\tand\nnewline",
)


@dataclass(frozen=True)
class LegacyFile:
    """A legacy ``state.db`` and what was put into it."""

    path: Path
    with_handoff: bool
    session_ids: tuple[str, ...]
    #: session id -> (handoff_state, handoff_platform, handoff_error), for the handoff generation.
    handoffs: dict[str, tuple[str | None, str | None, str | None]]
    #: a word present in the content of exactly the messages of one session (FTS probes).
    probe_word: str

    def ids_in(self, state: str) -> list[str]:
        return sorted(sid for sid, (s, _p, _e) in self.handoffs.items() if s == state)


def legacy_schema(with_handoff: bool) -> list[str]:
    sessions = _SESSIONS_HEAD
    if with_handoff:
        sessions += _SESSIONS_TITLE + _SESSIONS_HANDOFF
    statements = [sessions + _SESSIONS_TAIL, *_REST]
    if with_handoff:
        statements.append(_HANDOFF_INDEX)
    return statements


def build_legacy_db(
    path: Path, *, with_handoff: bool, sessions: int = 300, seed: int = 7
) -> LegacyFile:
    """Create ``path`` as an older hermes would have, filled with ``sessions`` realistic rows."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("BEGIN")
        for statement in legacy_schema(with_handoff):
            connection.execute(statement)
        connection.execute("INSERT INTO schema_version (version) VALUES (4)")
        connection.executemany(
            "INSERT INTO state_meta (key, value) VALUES (?, ?)",
            [("installed_by", "hermes 0.9.3"), ("last_vacuum", "1717171717.5"), ("ü", "✓")],
        )

        ids: list[str] = []
        handoffs: dict[str, tuple[str | None, str | None, str | None]] = {}
        states = (None, None, None, "pending", "running", "completed", "failed")
        base = 1_700_000_000.0
        for number in range(sessions):
            sid = f"2024{number:05d}_{rng.getrandbits(32):08x}"
            if number % 37 == 5:
                sid += "-ünï'code"  # ids the old code never escaped for us
            started = base + number * 61.25 + rng.random()
            parent = ids[rng.randrange(len(ids))] if ids and number % 9 == 0 else None
            row: dict[str, object] = {
                "id": sid,
                "source": _SOURCES[number % len(_SOURCES)],
                "user_id": f"user-{number % 13}" if number % 4 else None,
                "model": "hermes-3-llama-3.1-405b" if number % 2 else "claude-sonnet",
                "model_config": '{"temperature": 0.7, "max_tokens": 4096}',
                "system_prompt": "You are Hermes. " * (1 + number % 5),
                "parent_session_id": parent,
                "started_at": started,
                "ended_at": started + 300.5 if number % 3 == 0 else None,
                "end_reason": "user_exit" if number % 3 == 0 else None,
                "message_count": number % 11,
                "tool_call_count": number % 4,
                "input_tokens": number * 17,
                "output_tokens": number * 5,
                "last_activity_at": started + 12.0,
                "session_key": f"agent:main:{number}" if number % 5 == 0 else None,
            }
            if with_handoff:
                row["title"] = f"Session {number} — {_WORDS[number % len(_WORDS)]}"
                state = states[number % len(states)]
                platform = None if state is None else ("telegram", "discord")[number % 2]
                error = "delivery failed: 403 Forbidden" if state == "failed" else None
                row["handoff_state"] = state
                row["handoff_platform"] = platform
                row["handoff_error"] = error
                handoffs[sid] = (state, platform, error)
            insert_legacy_session(connection, row)
            ids.append(sid)

        probe_word = "zyzzogeton"
        messages = []
        for number, sid in enumerate(ids):
            for turn in range(number % 4):
                content = f"{_WORDS[(number + turn) % len(_WORDS)]} turn {turn} of {number}"
                if number == 42:
                    content += f" {probe_word}"
                messages.append(
                    (
                        sid,
                        ("user", "assistant", "tool")[turn % 3],
                        content if turn != 3 else None,
                        f"call_{number}_{turn}" if turn % 3 == 2 else None,
                        '[{"name": "terminal"}]' if turn % 3 == 1 else None,
                        "terminal" if turn % 3 == 2 else None,
                        base + number * 61.25 + turn,
                        len(content),
                        "stop" if turn % 3 == 1 else None,
                    )
                )
        connection.executemany(_message_insert(), messages)
        connection.execute("COMMIT")
        # Old writers deleted and edited messages too; the FTS triggers followed.
        connection.execute("DELETE FROM messages WHERE id % 50 = 0")
        connection.execute("UPDATE messages SET content = content || ' (edited)' WHERE id % 7 = 0")
    finally:
        connection.close()
    return LegacyFile(path, with_handoff, tuple(ids), handoffs, probe_word)


def insert_legacy_session(connection: sqlite3.Connection, row: dict[str, object]) -> None:
    """An INSERT naming only the columns the old writer knows, as it did."""
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    connection.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", tuple(row.values()))


def _message_insert() -> str:
    names = ", ".join(LEGACY_MESSAGE_COLUMNS)
    marks = ", ".join("?" for _ in LEGACY_MESSAGE_COLUMNS)
    return f"INSERT INTO messages ({names}) VALUES ({marks})"


def insert_legacy_message(connection: sqlite3.Connection, values: Iterable[object]) -> int:
    cursor = connection.execute(_message_insert(), tuple(values))
    assert cursor.lastrowid is not None
    return cursor.lastrowid


# -- fingerprints --------------------------------------------------------------------------------


def schema_entries(path: Path) -> set[tuple[str, str, str, str | None]]:
    """Every ``sqlite_master`` entry: (type, name, table, sql)."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        connection.close()
    return {tuple(row) for row in rows}


def table_columns(path: Path) -> dict[str, tuple[str, ...]]:
    """The columns of every table (virtual and shadow tables included), by table name."""
    connection = sqlite3.connect(path)
    try:
        names = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {
            name: tuple(column[1] for column in connection.execute(f'PRAGMA table_info("{name}")'))
            for name in names
        }
    finally:
        connection.close()


def row_digest(
    path: Path, columns: dict[str, tuple[str, ...]] | None = None
) -> dict[str, tuple[int, str]]:
    """(row count, sha256) of the rows of every table, or of ``columns`` (table -> columns).

    Each row is identified by its rowid when the table has one (and by its whole content
    otherwise); values are compared with their storage class, so ``1`` and ``1.0`` or ``'1'``
    differ. Rows are hashed in a canonical order, so the digest does not depend on scan order.
    """
    columns = columns if columns is not None else table_columns(path)
    connection = sqlite3.connect(path)
    try:
        digest: dict[str, tuple[int, str]] = {}
        for table, names in sorted(columns.items()):
            quoted = ", ".join(f'"{name}", typeof("{name}")' for name in names)
            try:
                rows = connection.execute(f'SELECT rowid, {quoted} FROM "{table}"').fetchall()
            except sqlite3.OperationalError:  # WITHOUT ROWID
                rows = connection.execute(f'SELECT {quoted} FROM "{table}"').fetchall()
            canonical = sorted(repr(row) for row in rows)
            hasher = hashlib.sha256()
            for line in canonical:
                hasher.update(line.encode("utf-8", "surrogatepass") + b"\n")
            digest[table] = (len(rows), hasher.hexdigest())
        return digest
    finally:
        connection.close()
