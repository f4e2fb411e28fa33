"""SQLite's full-text index of the transcript, in upstream's layout: two FTS5 tables over source
views of ``messages``, kept current by triggers. Derived data: built here, never copied.

The layout is upstream's schema-30 one, so upstream's store finds it current on a file
hermes-state made: ``messages_fts`` (unicode61 words over content, tool name and tool calls;
a tool result's content is indexed up to 8192 characters) and ``messages_fts_trigram``
(trigrams of the content and tool name, for substrings and CJK text, leaving out tool results
and the sessions of cron jobs, subagents and delegated children). Both are external-content
tables: the text lives once, in ``messages``. The triggers skip rows inside a deferred
backfill window that upstream may have open (its ``fts_rebuild_high_water`` and
``fts_rebuild_progress`` keys in ``state_meta``), as upstream's own triggers do.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, text

__all__ = ["OBJECTS", "create", "drop", "present", "rebuild"]

#: Only tool results are cut before indexing: their output can be megabytes of logs.
_TOOL_TEXT_LIMIT: Final = 8192

_WORDS_TEXT: Final = (
    "CASE WHEN {row}.role = 'tool' "
    f"THEN substr(COALESCE({{row}}.content, ''), 1, {_TOOL_TEXT_LIMIT}) "
    "ELSE {row}.content END"
)


def _searchable_session(alias: str) -> str:
    """Sessions whose messages the trigram index holds: not cron, not subagents, not delegated."""
    config = (
        f"CASE WHEN json_valid({alias}.model_config) THEN {alias}.model_config "
        "ELSE json_object() END"
    )
    return (
        f"{alias}.source NOT IN ('cron', 'subagent') "
        f"AND json_extract(({config}), '$._delegate_from') IS NULL"
    )


def _outside_backfill(row: str) -> str:
    """True for a row the triggers own: not inside upstream's deferred backfill window."""

    def mark(key: str) -> str:
        return f"COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{key}'), -1)"

    high_water, progress = mark("fts_rebuild_high_water"), mark("fts_rebuild_progress")
    return f"({row}.id > {high_water} OR {row}.id <= {progress})"


def _trigram_row(row: str) -> str:
    """The trigram index holds this row: not a tool result, and of a searchable session."""
    return (
        f"{row}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions AS owner "
        f"WHERE owner.id = {row}.session_id AND {_searchable_session('owner')})"
    )


def _words(row: str) -> str:
    return _WORDS_TEXT.format(row=row)


_STATEMENTS: Final = (
    # Sources: what each index sees of a message.
    f"""CREATE VIEW messages_fts_src AS
    SELECT m.id, {_words("m")} AS content, m.tool_name, m.tool_calls FROM messages AS m""",
    f"""CREATE VIEW messages_fts_trigram_src AS
    SELECT m.id, m.role, m.content, m.tool_name
    FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND {_searchable_session("s")}""",
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id')""",
    """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content, tool_name, content='messages_fts_trigram_src', content_rowid='id',
    tokenize='trigram')""",
    # The word index: every message.
    f"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN {_outside_backfill("new")}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {_words("new")}, new.tool_name, new.tool_calls);
END""",
    f"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN {_outside_backfill("old")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {_words("old")}, old.tool_name, old.tool_calls);
END""",
    f"""CREATE TRIGGER messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
  AND {_outside_backfill("old")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {_words("old")}, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {_words("new")}, new.tool_name, new.tool_calls);
END""",
    # The trigram index: what the trigram source holds.
    f"""CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN {_trigram_row("new")} AND {_outside_backfill("new")}
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END""",
    f"""CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
WHEN {_trigram_row("old")} AND {_outside_backfill("old")}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END""",
    f"""CREATE TRIGGER messages_fts_trigram_update
AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.role IS NOT new.role)
  AND {_outside_backfill("old")}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name WHERE {_trigram_row("old")};
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name WHERE {_trigram_row("new")};
END""",
)

#: (type, name) of every object :func:`create` makes, in the order :func:`drop` removes them.
OBJECTS: Final = (
    ("trigger", "messages_fts_insert"),
    ("trigger", "messages_fts_delete"),
    ("trigger", "messages_fts_update"),
    ("trigger", "messages_fts_trigram_insert"),
    ("trigger", "messages_fts_trigram_delete"),
    ("trigger", "messages_fts_trigram_update"),
    ("table", "messages_fts"),
    ("table", "messages_fts_trigram"),
    ("view", "messages_fts_src"),
    ("view", "messages_fts_trigram_src"),
)


def present(connection: Connection) -> bool:
    """Whether the file has a full-text index of any layout (upstream's older ones included)."""
    found = connection.execute(
        text("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'")
    ).scalar()
    return bool(found)


def create(connection: Connection) -> None:
    """Create the index's tables, views and triggers, and fill it from ``messages``."""
    for statement in _STATEMENTS:
        connection.exec_driver_sql(statement)
    rebuild(connection)


def rebuild(connection: Connection) -> None:
    """Fill both indexes again from their sources (after rows arrived without the triggers,
    e.g. a copy back from a server), and close any backfill window upstream left open."""
    connection.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    connection.exec_driver_sql(
        "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')"
    )
    connection.exec_driver_sql(
        "DELETE FROM state_meta WHERE key IN ('fts_rebuild_high_water', 'fts_rebuild_progress')"
    )


def drop(connection: Connection) -> None:
    """Remove every object :func:`create` made (their shadow tables go with them)."""
    for kind, name in OBJECTS:
        connection.exec_driver_sql(f"DROP {kind.upper()} IF EXISTS {name}")
