"""Schema versions: the cheap head check on open, and the Alembic work behind ``hermes-state db``.

Opening a store only reads one row of the version table and compares it with
:data:`HEAD_REVISION`; Alembic and the migration scripts are imported only when something must
change (a test keeps the constant equal to the scripts' head).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, inspect, text

from .engine import READ_ONLY, describe, make_engine
from .errors import (
    InvalidInputError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    translated,
)

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import URL

__all__ = [
    "HEAD_REVISION",
    "NO_REVISION",
    "VERSION_TABLE",
    "Comparison",
    "Drift",
    "HistoryEntry",
    "bring_current",
    "check",
    "compare",
    "current_revision",
    "downgrade",
    "ensure_current",
    "history",
    "migration_connection",
    "revision_of",
    "script_location",
    "upgrade",
]

#: The newest migration; equal to the scripts' head (pinned by a test).
HEAD_REVISION: Final = "0004_upstream_columns"
VERSION_TABLE: Final = "hermes_state_alembic_version"
#: What ``db current``, ``db check`` and ``db copy`` call a database without a revision.
NO_REVISION: Final = "base"
#: Bookkeeping table of the baseline migration: what adoption added, so downgrade removes only that.
ADOPTION_TABLE: Final = "hermes_state_adoption"


def script_location() -> Path:
    """The Alembic scripts: ``migrations/`` in a checkout, ``hermes_state/migrations`` installed."""
    return Path(str(importlib.resources.files("hermes_state.migrations")))


def current_revision(connection: Connection) -> str | None:
    """The revision recorded in the version table, or None when there is no table (yet)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    query = text(f"SELECT version_num FROM {VERSION_TABLE}")  # noqa: S608 - a constant
    rows = connection.execute(query).scalars().all()
    if len(rows) > 1:
        raise SchemaTooNewError(
            f"the version table holds several heads ({', '.join(rows)}); "
            "this database was migrated by another tool"
        )
    return rows[0] if rows else None


def ensure_current(engine: Engine, *, auto_upgrade: bool) -> None:
    """Bring an embedded database to head, or refuse a server database that is behind."""
    with translated(describe(engine.url)), engine.connect() as connection:
        connection.execution_options(**{READ_ONLY: True})
        revision = current_revision(connection)
        connection.rollback()
    bring_current(engine.url, revision, auto_upgrade=auto_upgrade)


def bring_current(url: URL, revision: str | None, *, auto_upgrade: bool) -> None:
    """Given the database's revision: nothing at head, else upgrade (embedded) or refuse."""
    if revision == HEAD_REVISION:
        return
    where = describe(url)
    if auto_upgrade:
        upgrade(url, "head")
        return
    if revision is not None and not _is_known(revision):
        raise _too_new(where, revision)
    raise SchemaOutOfDateError(
        f"{where} is at revision {revision or NO_REVISION}, behind {HEAD_REVISION}; "
        f"run `hermes-state --url '{where}' db upgrade` and try again"
    )


def _too_new(where: str, revision: str) -> SchemaTooNewError:
    return SchemaTooNewError(
        f"{where} is at revision {revision!r}, which this hermes-state does not know; "
        "it was migrated by a newer version: upgrade hermes-state"
    )


# -- Alembic, imported lazily ------------------------------------------------------------------


def _config(connection: Connection | None = None, output: io.StringIO | None = None) -> Config:
    from alembic.config import Config

    config = Config(stdout=output) if output is not None else Config()
    config.set_main_option("script_location", str(script_location()))
    # The connection goes through attributes, not sqlalchemy.url: Alembic's config parser would
    # treat the '%' of URL-encoded passwords as interpolation.
    config.attributes["connection"] = connection
    return config


def _is_known(revision: str) -> bool:
    from alembic.script import ScriptDirectory

    try:
        return ScriptDirectory.from_config(_config()).get_revision(revision) is not None
    except Exception:
        return False


@contextlib.contextmanager
def migration_connection(url: URL, *, read_only: bool = False) -> Iterator[Connection]:
    """A connection for migrations; foreign keys off on SQLite so table rebuilds cascade nothing."""
    engine = make_engine(url, enforce_foreign_keys=False)
    try:
        with translated(describe(url)), engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: read_only})
            yield connection
    finally:
        engine.dispose()


def _run(url: URL, command_name: str, *args: Any) -> None:
    from alembic import command
    from alembic.util import CommandError

    where = describe(url)
    with migration_connection(url) as connection:
        revision = current_revision(connection)
        connection.rollback()
        if revision is not None and not _is_known(revision):
            raise _too_new(where, revision)
        try:
            getattr(command, command_name)(_config(connection), *args)
        except CommandError as exc:
            # Alembic's command errors are about the revision asked for (unknown, ambiguous,
            # or in the wrong direction): bad input, not a database failure.
            raise InvalidInputError(f"cannot {command_name} {where}: {exc}") from None
        connection.commit()


def upgrade(url: URL, revision: str = "head") -> None:
    """Migrate up to ``revision`` in one transaction (SQLite) or per Alembic's defaults."""
    _run(url, "upgrade", revision)


def downgrade(url: URL, revision: str) -> None:
    _run(url, "downgrade", revision)


def revision_of(url: URL) -> str | None:
    with migration_connection(url, read_only=True) as connection:
        return current_revision(connection)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    revision: str
    down_revision: str | None
    message: str
    is_current: bool
    is_head: bool


def history(url: URL | None) -> list[HistoryEntry]:
    """Every revision, oldest first; ``is_current`` marks the database's (when a URL is given)."""
    from alembic.script import ScriptDirectory

    current = revision_of(url) if url is not None else None
    scripts = ScriptDirectory.from_config(_config())
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


@dataclass(frozen=True, slots=True)
class Drift:
    """One difference between the models and the database, in words."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Comparison:
    """``db check``'s finding: drift, and the differences an adopted file is allowed to keep."""

    drifts: list[Drift]
    #: Pre-existing legacy columns of an adopted file that differ from the models (nullability,
    #: types): the migrations left them as they were, on purpose; not drift.
    adopted: list[Drift]


def check(url: URL) -> list[Drift]:
    """Differences between the models and the database; legacy extras are not drift."""
    return compare(url).drifts


def compare(url: URL) -> Comparison:
    """The models against the database, adopted legacy differences set apart."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from .migration_support import context_options, describe_diffs, modified_column
    from .models import metadata

    with migration_connection(url, read_only=True) as connection:
        drifts: list[Drift] = []
        adopted: list[Drift] = []
        revision = current_revision(connection)
        if revision != HEAD_REVISION:
            drifts.append(
                Drift(
                    "revision",
                    f"database is at {revision or NO_REVISION}, head is {HEAD_REVISION}",
                )
            )
        added = _added_by_adoption(connection)
        context = MigrationContext.configure(
            connection, opts=context_options(connection.dialect.name)
        )
        for diff, words in describe_diffs(
            compare_metadata(context, metadata), connection.dialect.name, with_diffs=True
        ):
            column = modified_column(diff)
            legacy = (
                column is not None
                and added is not None
                and column[0] not in added.tables
                and column not in added.columns
            )
            (adopted if legacy else drifts).append(Drift(*words))
        connection.rollback()
        return Comparison(drifts, adopted)


@dataclass(frozen=True, slots=True)
class _Added:
    tables: set[str]
    columns: set[tuple[str, str]]


def _added_by_adoption(connection: Connection) -> _Added | None:
    """What the baseline migration added to this database (None: no record, nothing adopted)."""
    if not inspect(connection).has_table(ADOPTION_TABLE):
        return None
    query = text(f"SELECT kind, table_name, name FROM {ADOPTION_TABLE}")  # noqa: S608
    added = _Added(set(), set())
    for kind, table_name, name in connection.execute(query):
        if kind == "table":
            added.tables.add(table_name)
        elif kind == "column":
            added.columns.add((table_name, name))
    return added
