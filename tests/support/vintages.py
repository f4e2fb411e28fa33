"""Upstream ``state.db`` files of three schema versions (2, 11 and 16), built with plain sqlite3.

The upstream hermes-agent writes its ``state.db`` with the ``sqlite3`` module; its schema grew
version by version (``schema_version`` records which). The shapes here follow that history as
far as upstream's ``hermes_state.py`` and the real file it wrote
(``tests/fixtures/upstream-schema11-state.db``, schema 11) show it:

* **2**: sessions with the model config, system prompt and first counters; messages with tool
  calls, tool name and call id, token count and finish reason; ``schema_version``; an FTS5 index
  over message content kept by triggers.
* **11**: adds titles (with their unique index), cache/reasoning token and cost columns, the
  reasoning fields of messages, ``state_meta``, the handoff columns, the telegram DM topic tables
  and a second, trigram FTS5 index; both indexes cover content, tool name and tool calls.
* **16**: adds rewinds (``messages.active``, 0 for a rewound turn), platform message ids,
  ``observed``, the session's ``cwd``, ``archived`` and ``last_activity_at``, and
  ``compression_locks``. Where the record did not show a column's exact declaration, the type is
  the one upstream uses for columns of that kind (TEXT, INTEGER, REAL).

Rows are realistic: tool calls as JSON, tool results, unicode, rewound (inactive) turns, topic
bindings, locks. Nothing here imports hermes-state. Use :func:`build_vintage`.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = [
    "FIXTURES",
    "REAL_SCHEMA11",
    "REAL_SCHEMA30",
    "VERSIONS",
    "Vintage",
    "build_vintage",
    "copy_real_schema11",
    "primary_tables",
    "schema_statements",
    "table_rows",
]

VERSIONS: Final = (2, 11, 16)
#: Real files written by upstream's own code, kept with the tests (see fixtures/README.md).
FIXTURES: Final = Path(__file__).resolve().parents[1] / "fixtures"
REAL_SCHEMA11: Final = FIXTURES / "upstream-schema11-state.db"
REAL_SCHEMA30: Final = FIXTURES / "upstream-schema30-state.db"

T0: Final = 1_760_000_000.25

# (name, declaration) per table and version; a column appears from the first version listed.
_SESSIONS: Final[list[tuple[int, str, str]]] = [
    (2, "id", "TEXT PRIMARY KEY"),
    (2, "source", "TEXT NOT NULL"),
    (2, "user_id", "TEXT"),
    (2, "model", "TEXT"),
    (2, "model_config", "TEXT"),
    (2, "system_prompt", "TEXT"),
    (2, "parent_session_id", "TEXT"),
    (2, "started_at", "REAL NOT NULL"),
    (2, "ended_at", "REAL"),
    (2, "end_reason", "TEXT"),
    (2, "message_count", "INTEGER DEFAULT 0"),
    (2, "tool_call_count", "INTEGER DEFAULT 0"),
    (2, "input_tokens", "INTEGER DEFAULT 0"),
    (2, "output_tokens", "INTEGER DEFAULT 0"),
    (11, "cache_read_tokens", "INTEGER DEFAULT 0"),
    (11, "cache_write_tokens", "INTEGER DEFAULT 0"),
    (11, "reasoning_tokens", "INTEGER DEFAULT 0"),
    (11, "billing_provider", "TEXT"),
    (11, "billing_base_url", "TEXT"),
    (11, "billing_mode", "TEXT"),
    (11, "estimated_cost_usd", "REAL"),
    (11, "actual_cost_usd", "REAL"),
    (11, "cost_status", "TEXT"),
    (11, "cost_source", "TEXT"),
    (11, "pricing_version", "TEXT"),
    (11, "title", "TEXT"),
    (11, "api_call_count", "INTEGER DEFAULT 0"),
    (11, "handoff_state", "TEXT"),
    (11, "handoff_platform", "TEXT"),
    (11, "handoff_error", "TEXT"),
    (16, "cwd", "TEXT"),
    (16, "archived", "INTEGER NOT NULL DEFAULT 0"),
    (16, "last_activity_at", "REAL"),
]

_MESSAGES: Final[list[tuple[int, str, str]]] = [
    (2, "id", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    (2, "session_id", "TEXT NOT NULL REFERENCES sessions(id)"),
    (2, "role", "TEXT NOT NULL"),
    (2, "content", "TEXT"),
    (2, "tool_call_id", "TEXT"),
    (2, "tool_calls", "TEXT"),
    (2, "tool_name", "TEXT"),
    (2, "timestamp", "REAL NOT NULL"),
    (2, "token_count", "INTEGER"),
    (2, "finish_reason", "TEXT"),
    (11, "reasoning", "TEXT"),
    (11, "reasoning_content", "TEXT"),
    (11, "reasoning_details", "TEXT"),
    (11, "codex_reasoning_items", "TEXT"),
    (11, "codex_message_items", "TEXT"),
    (16, "platform_message_id", "TEXT"),
    (16, "observed", "INTEGER NOT NULL DEFAULT 0"),
    (16, "active", "INTEGER NOT NULL DEFAULT 1"),
]

_TOPIC_MODE: Final = """CREATE TABLE telegram_dm_topic_mode (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
)"""

_TOPIC_BINDINGS: Final = """CREATE TABLE telegram_dm_topic_bindings (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)"""

_COMPRESSION_LOCKS: Final = """CREATE TABLE compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
)"""


def _columns(spec: list[tuple[int, str, str]], version: int) -> list[tuple[str, str]]:
    return [(name, declaration) for since, name, declaration in spec if since <= version]


def _create(table: str, columns: list[tuple[str, str]], tail: str = "") -> str:
    body = ",\n    ".join(f"{name} {declaration}" for name, declaration in columns)
    return f"CREATE TABLE {table} (\n    {body}{tail}\n)"


def _fts(name: str, version: int, tokenize: str = "") -> list[str]:
    """An FTS5 index over messages, kept current by three triggers."""
    # From schema 11 on, tool names and tool calls are searchable too.
    indexed = (
        "new.content"
        if version < 11
        else "COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || "
        "COALESCE(new.tool_calls, '')"
    )
    options = f",\n    tokenize='{tokenize}'" if tokenize else ""
    return [
        f"CREATE VIRTUAL TABLE {name} USING fts5(\n    content{options}\n)",
        f"CREATE TRIGGER {name}_insert AFTER INSERT ON messages BEGIN\n"
        f"    INSERT INTO {name}(rowid, content) VALUES (new.id, {indexed});\nEND",
        f"CREATE TRIGGER {name}_delete AFTER DELETE ON messages BEGIN\n"
        f"    DELETE FROM {name} WHERE rowid = old.id;\nEND",
        f"CREATE TRIGGER {name}_update AFTER UPDATE ON messages BEGIN\n"
        f"    DELETE FROM {name} WHERE rowid = old.id;\n"
        f"    INSERT INTO {name}(rowid, content) VALUES (new.id, {indexed});\nEND",
    ]


def schema_statements(version: int) -> list[str]:
    """The DDL a file of ``version`` carries, in the order upstream creates it."""
    if version not in VERSIONS:
        raise ValueError(f"no vintage {version}; choose one of {VERSIONS}")
    statements = [
        "CREATE TABLE schema_version (\n    version INTEGER NOT NULL\n)",
        _create(
            "sessions",
            _columns(_SESSIONS, version),
            ",\n    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)",
        ),
        _create("messages", _columns(_MESSAGES, version)),
        "CREATE INDEX idx_sessions_source ON sessions(source)",
        "CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)",
        "CREATE INDEX idx_sessions_started ON sessions(started_at DESC)",
        "CREATE INDEX idx_messages_session ON messages(session_id, timestamp)",
        *_fts("messages_fts", version),
    ]
    if version >= 11:
        statements += [
            "CREATE TABLE state_meta (\n    key TEXT PRIMARY KEY,\n    value TEXT\n)",
            "CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) "
            "WHERE title IS NOT NULL",
            *_fts("messages_fts_trigram", version, tokenize="trigram"),
            _TOPIC_MODE,
            _TOPIC_BINDINGS,
            "CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session "
            "ON telegram_dm_topic_bindings(session_id)",
            "CREATE INDEX idx_telegram_dm_topic_bindings_user "
            "ON telegram_dm_topic_bindings(user_id, chat_id)",
        ]
    if version >= 16:
        statements += [
            _COMPRESSION_LOCKS,
            "CREATE INDEX idx_messages_platform_msg_id ON messages(session_id, "
            "platform_message_id) WHERE platform_message_id IS NOT NULL",
            "CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp)",
        ]
    return statements


@dataclass
class Vintage:
    """A built file: where it is, its version, and what went into it."""

    path: Path
    version: int
    session_ids: list[str] = field(default_factory=list)
    #: session id -> the message ids upstream's get_messages returns (active ones, in id order)
    active_message_ids: dict[str, list[int]] = field(default_factory=dict)
    #: session id -> every message id, rewound ones included
    message_ids: dict[str, list[int]] = field(default_factory=dict)


_TOOL_CALL: Final = [
    {
        "id": "call_0001",
        "type": "function",
        "function": {"name": "terminal", "arguments": json.dumps({"command": "ls -la ~/projets"})},
    }
]


def build_vintage(path: Path, version: int) -> Vintage:
    """Write a new ``state.db`` of schema ``version`` (2, 11 or 16) at ``path``, with rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise FileExistsError(path)
    built = Vintage(path, version)
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA foreign_keys = ON")
        with connection:
            for statement in schema_statements(version):
                connection.execute(statement)
            connection.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            _fill(connection, built)
    finally:
        connection.close()
    return built


def _insert(connection: sqlite3.Connection, table: str, row: dict[str, Any]) -> int:
    present = {info[1] for info in connection.execute(f"PRAGMA table_info({table})")}
    values = {name: value for name, value in row.items() if name in present}
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    statement = f"INSERT INTO {table} ({names}) VALUES ({marks})"
    cursor = connection.execute(statement, [*values.values()])
    return int(cursor.lastrowid or 0)


def _fill(connection: sqlite3.Connection, built: Vintage) -> None:
    sessions = [
        ("cli-20251009-1", "cli", None, "Déployer le gateway 🚀"),
        ("tg-42-7", "telegram", "cli-20251009-1", "日本語のセッション"),
        ("dc-plain", "discord", None, None),
        ("cron-nightly", "cron", None, "nightly 'report' \"quoted\""),
    ]
    for n, (session_id, source, parent, title) in enumerate(sessions):
        started = T0 + n * 60.5
        _insert(
            connection,
            "sessions",
            {
                "id": session_id,
                "source": source,
                "user_id": f"user-{n}" if n % 2 == 0 else None,
                "model": "anthropic/claude-sonnet-4",
                "model_config": json.dumps({"max_iterations": 90, "reasoning": {"effort": "high"}}),
                "system_prompt": f"You are Hermes. Session {n}.\nBe brief — très bref.",
                "parent_session_id": parent,
                "started_at": started,
                "ended_at": started + 300.125 if n == 3 else None,
                "end_reason": "cron_complete" if n == 3 else None,
                "input_tokens": 1200 * (n + 1),
                "output_tokens": 340 * (n + 1),
                "cache_read_tokens": 77 * n,
                "reasoning_tokens": 12,
                "billing_provider": "openrouter",
                "estimated_cost_usd": 0.0123 * (n + 1),
                "cost_status": "estimated",
                "title": title,
                "api_call_count": n + 2,
                "handoff_state": {1: "pending", 2: "completed"}.get(n),
                "handoff_platform": {1: "telegram", 2: "discord"}.get(n),
                "cwd": f"/home/user/projets/{session_id}",
                "archived": 1 if n == 3 else 0,
                "last_activity_at": started + 42.0,
            },
        )
        built.session_ids.append(session_id)
        built.message_ids[session_id] = []
        built.active_message_ids[session_id] = []
        turns: list[dict[str, Any]] = [
            {"role": "user", "content": f"Liste les fichiers ({session_id}) — ünïcödé ✓"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": json.dumps(_TOOL_CALL),
                "finish_reason": "tool_calls",
                "reasoning": "The user wants a listing; use the terminal.",
                "reasoning_details": json.dumps([{"type": "reasoning.text", "text": "ok"}]),
            },
            {
                "role": "tool",
                "content": json.dumps({"output": "total 0\ndrwxr-xr-x  notes.md", "exit_code": 0}),
                "tool_call_id": "call_0001",
                "tool_name": "terminal",
            },
            {"role": "assistant", "content": "Voilà : notes.md 📄", "finish_reason": "stop"},
        ]
        if n == 0:  # a rewound exchange: soft-deleted where the schema knows rewinds
            turns += [
                {"role": "user", "content": "Efface tout !", "active": 0},
                {"role": "assistant", "content": "Je ne ferai pas ça.", "active": 0},
                {"role": "user", "content": "Pardon, garde tout."},
            ]
        for m, turn in enumerate(turns):
            active = turn.pop("active", 1)
            message_id = _insert(
                connection,
                "messages",
                {
                    "session_id": session_id,
                    "timestamp": started + m * 1.5,
                    "token_count": 10 + m,
                    "platform_message_id": f"{n}{m:03d}" if source == "telegram" else None,
                    "observed": 1 if m == 0 else 0,
                    "active": active,
                    **turn,
                },
            )
            built.message_ids[session_id].append(message_id)
            if active or built.version < 16:
                built.active_message_ids[session_id].append(message_id)
        connection.execute(
            "UPDATE sessions SET message_count = ?, tool_call_count = 1 WHERE id = ?",
            (len(turns), session_id),
        )
    if built.version >= 11:
        for key, value in (("fts_storage_version", "0"), ("last_vacuum_at", str(T0))):
            _insert(connection, "state_meta", {"key": key, "value": value})
        _insert(
            connection,
            "telegram_dm_topic_mode",
            {
                "chat_id": "424242",
                "user_id": "user-1",
                "enabled": 1,
                "activated_at": T0,
                "updated_at": T0 + 5,
                "has_topics_enabled": 1,
                "intro_message_id": "9001",
            },
        )
        # Three bindings (each session at most once): the composite key pages in batches.
        for chat_id, thread_id, session_id in (
            ("424242", "17", "tg-42-7"),
            ("424242", "18", "dc-plain"),
            ("424243", "1", "cron-nightly"),
        ):
            _insert(
                connection,
                "telegram_dm_topic_bindings",
                {
                    "chat_id": chat_id,
                    "thread_id": thread_id,
                    "user_id": "user-1",
                    "session_key": f"agent:main:telegram:dm:{chat_id}:{thread_id}",
                    "session_id": session_id,
                    "linked_at": T0 + 6,
                    "updated_at": T0 + 7,
                },
            )
    if built.version >= 16:
        _insert(
            connection,
            "compression_locks",
            {
                "session_id": "cli-20251009-1",
                "holder": "pid=4242:host=laptop",
                "acquired_at": T0 + 100,
                "expires_at": T0 + 400,
            },
        )


def copy_real_schema11(destination: Path) -> Path:
    """A writable copy of the real upstream schema-11 file (the original is read-only)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REAL_SCHEMA11.resolve(), destination)
    return destination


_FTS_SUFFIXES: Final = ("_data", "_idx", "_content", "_docsize", "_config")


def primary_tables(path: Path) -> list[str]:
    """The tables holding primary data: not FTS5 indexes or their shadows, not SQLite's own,
    not the bookkeeping hermes-state adds when it adopts a file."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ).fetchall()
    finally:
        connection.close()
    virtual = {name for name, sql in rows if (sql or "").startswith("CREATE VIRTUAL")}
    derived = virtual | {name + suffix for name in virtual for suffix in _FTS_SUFFIXES}
    return [
        name
        for name, _ in rows
        if name not in derived and not name.startswith(("sqlite_", "hermes_state_"))
    ]


def table_rows(path: Path, table: str) -> list[dict[str, Any]]:
    """Every row of ``table``, every column, in a stable order (by all columns)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        rows = [dict(row) for row in connection.execute(f'SELECT * FROM "{table}"')]
    finally:
        connection.close()
    return sorted(rows, key=lambda row: repr(sorted(row.items())))
