"""Schema versions: the cheap head check on open, and the Alembic work behind ``hermes-state db``.

Opening a store only reads one row of the version table and compares it with
:data:`HEAD_REVISION`; Alembic and the migration scripts are imported only when something must
change (a test keeps the constant equal to the scripts' head).
"""

from __future__ import annotations

import contextlib
import enum
import importlib.resources
import io
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, column, func, inspect, select, table, text

from .engine import (
    READ_ONLY,
    connect_for_reading,
    describe,
    is_sqlite,
    make_engine,
    refuse_directory,
    secure_sqlite_files,
)
from .errors import (
    ForeignDatabaseError,
    InvalidInputError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    corrupt_error,
    translated,
)

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import URL

__all__ = [
    "HEAD_REVISION",
    "NO_REVISION",
    "TARGET_DIALECT",
    "VERSION_TABLE",
    "FileKind",
    "FileState",
    "HistoryEntry",
    "Loss",
    "StepHook",
    "bring_current",
    "check_upgradable",
    "current_revision",
    "damage_of",
    "downgrade",
    "downgrade_losses",
    "ensure_current",
    "ensure_readable",
    "history",
    "is_known_revision",
    "look_at_sqlite_file",
    "migration_connection",
    "offline_sql",
    "out_of_date",
    "revision_of",
    "run_command",
    "script_location",
    "target_dialect",
    "too_new",
    "upgrade",
    "upstream_schema_of",
]

#: ``Connection.info`` key naming the backend a migration plans for, where that is not the
#: connection's own (``db upgrade --dry-run`` runs the migrations on an SQLite shadow).
TARGET_DIALECT: Final = "hermes_state_target_dialect"


def target_dialect(connection: Connection) -> str:
    """The backend the migrations running on ``connection`` are for."""
    info = getattr(connection, "info", {})  # (offline, Alembic's MockConnection has none)
    return str(info.get(TARGET_DIALECT, connection.dialect.name))


#: The newest migration; equal to the scripts' head (pinned by a test).
HEAD_REVISION: Final = "0008_search_indexes"
VERSION_TABLE: Final = "hermes_state_alembic_version"
#: What ``db current``, ``db check`` and ``db copy`` call a database without a revision.
NO_REVISION: Final = "base"
#: Bookkeeping table of the baseline migration: what adoption added, so downgrade removes only that.
ADOPTION_TABLE: Final = "hermes_state_adoption"


def script_location() -> Path:
    """The Alembic scripts: ``migrations/`` in a checkout, ``hermes_state/migrations`` installed."""
    return Path(str(importlib.resources.files("hermes_state.migrations")))


_VERSION_QUERY: Final = f"SELECT version_num FROM {VERSION_TABLE}"  # noqa: S608 - a constant
_TABLES_QUERY: Final = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
)
#: Columns every upstream vintage of hermes' ``sessions`` table has: what makes a file ours.
HERMES_SESSION_COLUMNS: Final = frozenset({"id", "source", "started_at"})


def _one_revision(rows: Sequence[str]) -> str | None:
    if len(rows) > 1:
        raise SchemaTooNewError(
            f"the version table holds several heads ({', '.join(rows)}); "
            "this database was migrated by another tool"
        )
    return rows[0] if rows else None


def current_revision(connection: Connection) -> str | None:
    """The revision recorded in the version table, or None when there is no table (yet)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    return _one_revision(connection.execute(text(_VERSION_QUERY)).scalars().all())


class FileKind(enum.Enum):
    NEW = "new"  # absent, zero bytes, or without a single table
    HERMES = "hermes"  # a hermes state database of any vintage, adopted or not
    FOREIGN = "foreign"  # another application's SQLite database


@dataclass(frozen=True, slots=True)
class FileState:
    kind: FileKind
    revision: str | None


@contextlib.contextmanager
def _read_only_sqlite(path: str) -> Iterator[sqlite3.Connection]:
    """A plain ``sqlite3`` connection that cannot write, create the file or change its mode."""
    with translated(path):
        connection = connect_for_reading(path)
        try:
            yield connection
        finally:
            connection.close()


def look_at_sqlite_file(url: URL) -> FileState:
    """Whose file this is and its revision, read without writing a byte (see FileKind)."""
    assert url.database is not None
    path = Path(url.database)
    refuse_directory(path)
    if not path.is_file() or path.stat().st_size == 0:
        return FileState(FileKind.NEW, None)
    with _read_only_sqlite(url.database) as connection:
        tables = {name for (name,) in connection.execute(_TABLES_QUERY)}
        if VERSION_TABLE in tables:
            rows = [row[0] for row in connection.execute(_VERSION_QUERY)]
            return FileState(FileKind.HERMES, _one_revision(rows))
        if "sessions" in tables:
            columns = {row[1] for row in connection.execute("PRAGMA table_info(sessions)")}
            if columns >= HERMES_SESSION_COLUMNS:
                return FileState(FileKind.HERMES, None)
        elif tables and tables <= _upstream_side_tables():
            return FileState(FileKind.HERMES, None)  # upstream's, without its sessions yet
    return FileState(FileKind.FOREIGN if tables else FileKind.NEW, None)


def _upstream_side_tables() -> set[str]:
    from .models import UPSTREAM_SIDE_TABLES

    return set(UPSTREAM_SIDE_TABLES)


def upstream_schema_of(url: URL) -> int | None:
    """The version upstream's code recorded in an SQLite file's ``schema_version`` (None when
    it holds none), read without writing."""
    assert url.database is not None
    with _read_only_sqlite(url.database) as connection:
        try:
            row = connection.execute("SELECT MAX(version) FROM schema_version").fetchone()
        except sqlite3.OperationalError:
            return None
    return int(row[0]) if row and isinstance(row[0], int) else None


def _foreign(where: str) -> ForeignDatabaseError:
    return ForeignDatabaseError(
        f"{where} is another application's SQLite database (it has no hermes `sessions` "
        "table); it was left untouched"
    )


def _sqlite_revision(url: URL) -> str | None:
    """The revision of an SQLite file that is ours (or new); another application's is refused."""
    state = look_at_sqlite_file(url)
    if state.kind is FileKind.FOREIGN:
        raise _foreign(describe(url))
    return state.revision


def damage_of(url: URL) -> str | None:
    """What ``PRAGMA quick_check`` finds wrong with an SQLite file, in one line; None if sound."""
    assert url.database is not None
    if not Path(url.database).is_file():
        return None
    with _read_only_sqlite(url.database) as connection:
        try:
            findings = [str(row[0]) for row in connection.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as exc:
            if "malformed" not in str(exc):
                raise
            return str(exc)
    if findings == ["ok"]:
        return None
    shown = "; ".join(line.replace("\n", " ") for line in findings[:3])
    more = f" (and {len(findings) - 3} more findings)" if len(findings) > 3 else ""
    return f"quick_check: {shown}{more}"


def _refuse_damage(url: URL) -> None:
    damage = damage_of(url)
    if damage is not None:
        raise corrupt_error(describe(url), damage)


def ensure_current(engine: Engine, *, auto_upgrade: bool, url: URL | None = None) -> None:
    """Bring an embedded database to head, or refuse a server database that is behind.

    ``url`` is the database as the user named it (default: the engine's). An SQLite file is
    read through a read-only connection of its own first: one that is not ours is refused
    before the engine's first connection switches it to WAL (itself a write).
    """
    url = url or engine.url
    if is_sqlite(url):
        revision = _sqlite_revision(url)
    else:
        with translated(describe(url)), engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            revision = current_revision(connection)
            connection.rollback()
    bring_current(url, revision, auto_upgrade=auto_upgrade)
    if auto_upgrade:
        secure_sqlite_files(url)  # a file we write, known to be ours by now: owner-only


def ensure_readable(engine: Engine, url: URL | None = None) -> None:
    """Make ``engine`` (a read-only one) able to read the database as head's reads expect.

    An SQLite file of ours at an older revision, or an upstream file not adopted yet, is read
    through the lens (:mod:`.lens`): nothing is migrated or written. A server database that
    is behind is refused, as is a file migrated by a newer hermes-state.
    """
    url = url or engine.url
    if not is_sqlite(url):
        ensure_current(engine, auto_upgrade=False, url=url)
        return
    revision = _sqlite_revision(url)
    if revision == HEAD_REVISION:
        return
    if revision is not None and not is_known_revision(revision):
        raise too_new(describe(url), revision)
    from .lens import install_lens

    install_lens(engine)


def bring_current(url: URL, revision: str | None, *, auto_upgrade: bool) -> None:
    """Given the database's revision: nothing at head, else upgrade (embedded) or refuse."""
    if revision == HEAD_REVISION:
        return
    where = describe(url)
    if auto_upgrade:
        upgrade(url, "head")
        return
    if revision is not None and not is_known_revision(revision):
        raise too_new(where, revision)
    raise out_of_date(where, revision)


def out_of_date(where: str, revision: str | None) -> SchemaOutOfDateError:
    """The one message for a database this version cannot use until it is migrated."""
    shown = revision or "none (not adopted yet)"
    return SchemaOutOfDateError(
        f"{where} is at revision {shown}, behind {HEAD_REVISION}: it must be migrated first"
    )


def too_new(where: str, revision: str) -> SchemaTooNewError:
    return SchemaTooNewError(
        f"{where} is at revision {revision!r}, which this hermes-state does not know; "
        "it was migrated by a newer version: upgrade hermes-state"
    )


# -- Alembic, imported lazily ------------------------------------------------------------------


def _config(connection: Connection | None = None, output: io.StringIO | None = None) -> Config:
    from alembic.config import Config

    config = Config(output_buffer=output) if output is not None else Config()
    config.set_main_option("script_location", str(script_location()))
    # The connection goes through attributes, not sqlalchemy.url: Alembic's config parser would
    # treat the '%' of URL-encoded passwords as interpolation.
    config.attributes["connection"] = connection
    return config


def _scripts() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def is_known_revision(revision: str) -> bool:
    try:
        return _scripts().get_revision(revision) is not None
    except Exception:
        return False


@contextlib.contextmanager
def migration_connection(url: URL, *, read_only: bool = False) -> Iterator[Connection]:
    """A connection for migrations; foreign keys off on SQLite so table rebuilds cascade nothing.

    ``read_only`` opens an SQLite file in SQLite's read-only mode: nothing can be written.
    """
    engine = make_engine(url, enforce_foreign_keys=False, read_only=read_only)
    try:
        with translated(describe(url)), engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: read_only})
            yield connection
    finally:
        engine.dispose()


#: Called after each migration step with the connection, the revision just applied and its
#: script's message.
StepHook = Callable[[Connection, str, str], None]


def run_command(
    connection: Connection,
    where: str,
    command_name: str,
    revision: str,
    *,
    after_step: StepHook | None = None,
) -> None:
    """Alembic's ``upgrade`` or ``downgrade`` to ``revision`` on ``connection``, then commit.

    A database at a revision this version does not know is refused; Alembic's own errors
    are about the revision asked for (unknown, ambiguous, in the wrong direction): bad input.
    """
    from alembic import command
    from alembic.util import CommandError

    current = current_revision(connection)
    connection.rollback()
    if current is not None and not is_known_revision(current):
        raise too_new(where, current)
    config = _config(connection)
    if after_step is not None:
        hook = after_step

        def on_version_apply(*, ctx: Any, step: Any, **_: Any) -> None:
            hook(ctx.connection, step.up_revision_id, step.up_revision.doc or "")

        config.attributes["on_version_apply"] = (on_version_apply,)
    try:
        getattr(command, command_name)(config, revision)
    except CommandError as exc:
        raise InvalidInputError(f"cannot {command_name} {where}: {exc}") from None
    connection.commit()


def _run(url: URL, command_name: str, revision: str) -> None:
    with migration_connection(url) as connection:
        run_command(connection, describe(url), command_name, revision)


def check_upgradable(url: URL, *, adopt_foreign: bool = False) -> FileState | None:
    """Refuse what ``upgrade`` refuses, reading only; an SQLite file's state, None on a server.

    An SQLite file must be new or a hermes state database (``adopt_foreign`` takes another
    application's file on purpose), and must pass ``PRAGMA quick_check``.
    """
    if not is_sqlite(url):
        return None
    state = look_at_sqlite_file(url)
    if state.kind is FileKind.FOREIGN and not adopt_foreign:
        raise _foreign(describe(url))
    if state.kind is not FileKind.NEW:
        _refuse_damage(url)
    return state


def upgrade(url: URL, revision: str = "head", *, adopt_foreign: bool = False) -> None:
    """Migrate up to ``revision`` in one transaction (SQLite) or per Alembic's defaults.

    What :func:`check_upgradable` refuses is refused before a byte is written.
    """
    check_upgradable(url, adopt_foreign=adopt_foreign)
    _run(url, "upgrade", revision)


def downgrade(url: URL, revision: str) -> None:
    """Migrate down to ``revision``. A database with no revision is left as it is (whoever's
    it is); a damaged SQLite file is refused like on upgrade."""
    if revision_of(url, allow_foreign=True) is None:
        if not is_known_revision(revision) and revision != "base":
            where = describe(url)
            raise InvalidInputError(f"cannot downgrade {where}: unknown revision {revision!r}")
        return
    if is_sqlite(url):
        _refuse_damage(url)
    _run(url, "downgrade", revision)


def revision_of(url: URL, *, allow_foreign: bool = False) -> str | None:
    """The database's revision, read without writing; another application's SQLite file is
    refused unless ``allow_foreign`` (it then has none)."""
    if is_sqlite(url):
        if allow_foreign:
            return look_at_sqlite_file(url).revision
        return _sqlite_revision(url)
    with migration_connection(url, read_only=True) as connection:
        return current_revision(connection)


# -- what a downgrade drops, and the DDL of a migration without a database ----------------------


@dataclass(frozen=True, slots=True)
class Loss:
    """A table, or a column (``column`` set), that a downgrade drops, and the rows it holds
    (for a column: the rows where it has a value)."""

    table: str
    column: str | None
    rows: int

    def __str__(self) -> str:
        if self.column is None:
            return f"table {self.table} ({self.rows} rows)"
        return f"column {self.table}.{self.column} ({self.rows} rows with a value)"


def downgrade_losses(url: URL, revision: str) -> tuple[str | None, list[Loss]]:
    """The database's revision, and what downgrading it to ``revision`` would drop.

    Every revision script declares what its downgrade drops in ``downgrade_drops(bind)``
    (the same list its ``downgrade()`` works from; a test holds each script to it). Read-only:
    nothing is written, nothing is locked for long.
    """
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    where = describe(url)
    current = revision_of(url)
    if current is None:
        return None, []
    if not is_known_revision(current):
        raise too_new(where, current)
    scripts = _scripts()
    with migration_connection(url, read_only=True) as connection:
        try:
            steps = list(scripts.iterate_revisions(current, revision, select_for_downgrade=True))
        except (CommandError, RevisionError) as exc:
            raise InvalidInputError(f"cannot downgrade {where} to {revision!r}: {exc}") from None
        dropped_tables: list[str] = []
        dropped_columns: list[tuple[str, str]] = []
        for step in steps:
            for table_name, column_name in step.module.downgrade_drops(connection):
                if column_name is None:
                    dropped_tables.append(table_name)
                else:
                    dropped_columns.append((table_name, column_name))
        losses = [Loss(name, None, _count(connection, name, None)) for name in dropped_tables]
        losses += [
            Loss(table_name, column_name, _count(connection, table_name, column_name))
            for table_name, column_name in dropped_columns
            if table_name not in dropped_tables
        ]
        connection.rollback()
    return current, losses


def _count(connection: Connection, table_name: str, column_name: str | None) -> int:
    query = select(func.count()).select_from(table(table_name))
    if column_name is not None:
        query = query.where(column(column_name).is_not(None))
    return int(connection.execute(query).scalar_one())


def offline_sql(url: URL, command_name: str, revision: str) -> str:
    """The DDL ``upgrade`` or ``downgrade`` would run, rendered for the URL's dialect without
    connecting (Alembic's offline mode). A downgrade needs ``FROM:TO``, e.g. ``head:base``."""
    from alembic import command
    from alembic.util import CommandError

    where = describe(url)
    if command_name == "downgrade" and ":" not in revision:
        raise InvalidInputError(
            f"db downgrade --sql renders without reading the database, so it needs the range "
            f"as FROM:TO (e.g. {HEAD_REVISION}:base); `db current` shows where {where} is"
        )
    output = io.StringIO()
    config = _config(output=output)
    config.attributes["url"] = url
    try:
        getattr(command, command_name)(config, revision, sql=True)
    except CommandError as exc:
        raise InvalidInputError(f"cannot render {command_name} SQL: {exc}") from None
    return output.getvalue()


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    revision: str
    down_revision: str | None
    message: str
    is_current: bool
    is_head: bool


def history(url: URL | None) -> list[HistoryEntry]:
    """Every revision, oldest first; ``is_current`` marks the database's (when a URL is given)."""
    current = revision_of(url) if url is not None else None
    scripts = _scripts()
    heads = set(scripts.get_heads())
    entries = [
        HistoryEntry(
            revision=script.revision,
            down_revision=script.down_revision if isinstance(script.down_revision, str) else None,
            message=script.doc or "",
            is_current=script.revision == current,
            is_head=script.revision in heads,
        )
        for script in scripts.walk_revisions()
    ]
    return entries[::-1]
