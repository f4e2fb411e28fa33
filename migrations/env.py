"""Alembic environment of hermes-state: one connection, our own version table, batch mode on SQLite.

`hermes-state db ...` hands its connection over in ``config.attributes["connection"]``; a bare
`alembic upgrade head` from the repository root resolves the database from HERMES_STATE_URL
(else $HERMES_HOME/state.db) the same way the library does.
"""

from __future__ import annotations

import warnings

from alembic import context
from sqlalchemy import Connection, text

from hermes_state.drift import context_options
from hermes_state.engine import resolve_url, with_driver
from hermes_state.models import metadata
from hermes_state.schema import VERSION_TABLE, migration_connection

config = context.config


def run_migrations(connection: Connection) -> None:
    # Upstream's idx_sessions_effective_activity is on an expression, which SQLAlchemy's
    # reflection skips with a warning each time a revision looks at the indexes of sessions.
    warnings.filterwarnings("ignore", message="Skipped unsupported reflection of expression")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # `db upgrade --dry-run` looks at the shadow database after each step.
        on_version_apply=config.attributes.get("on_version_apply", ()),
        **context_options(connection.dialect.name),
    )
    with context.begin_transaction():
        context.run_migrations()
        if not context.get_context().get_current_heads():
            # Down to base: leave the database as it was before hermes-state touched it.
            connection.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))


def run_offline() -> None:
    """SQL for the URL's dialect, without connecting (``hermes-state db upgrade --sql``)."""
    url = config.attributes.get("url") or resolve_url(
        config.get_main_option("sqlalchemy.url") or None
    )
    context.configure(
        url=with_driver(url, asyncio=False),
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **context_options(url.get_backend_name()),
    )
    with context.begin_transaction():
        context.run_migrations()
        if context.get_starting_revision_argument() and context.get_revision_argument() is None:
            # Down to base: the same end as online, no version table left behind.
            context.execute(f"DROP TABLE {VERSION_TABLE}")


given = config.attributes.get("connection")
if given is not None:
    run_migrations(given)
elif context.is_offline_mode():
    run_offline()
else:
    with migration_connection(resolve_url(config.get_main_option("sqlalchemy.url") or None)) as own:
        run_migrations(own)
        own.commit()
