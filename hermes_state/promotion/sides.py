"""The two databases as the copy finds them: the pair checked, each brought to head."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import URL

from ..engine import READ_ONLY, connect_for_reading, describe, is_sqlite, make_engine, resolve_url
from ..errors import InvalidInputError, translated
from ..models import metadata
from ..notify import database_key
from ..schema import (
    HEAD_REVISION,
    FileKind,
    check_upgradable,
    current_revision,
    is_known_revision,
    look_at_sqlite_file,
    out_of_date,
    too_new,
    upgrade,
)
from .reports import SideState


def _check_pair(source_url: Any, target_url: Any, batch_size: int) -> None:
    if batch_size < 1:
        raise InvalidInputError(f"batch size must be at least 1, not {batch_size}")
    if database_key(source_url) == database_key(target_url):
        raise InvalidInputError(f"{describe(source_url)} is both the source and the target")


@contextlib.contextmanager
def _at_head(url: URL, *, target: bool = False) -> Iterator[tuple[URL, SideState]]:
    """The database as the copy would read or write it once at head, and its state now.

    A database at head is read as it is. An SQLite file that is not (or does not exist) is
    stood in for by a temporary copy brought to head (the file itself is only read); so is a
    ``target`` server database that holds none of the tables yet (planned as the empty
    database the copy would migrate). Any other server database behind head is refused.
    """
    where = describe(url)
    if not is_sqlite(url):
        revision, empty = _server_state(url)
        if revision == HEAD_REVISION:
            yield url, SideState(where, HEAD_REVISION, exists=True, upgraded_first=False)
            return
        if not (target and empty):
            raise out_of_date(where, revision)
        with tempfile.TemporaryDirectory(prefix="hermes-state-dry-run-") as folder:
            stand_in = resolve_url(Path(folder) / "at-head.db")
            upgrade(stand_in)
            yield stand_in, SideState(where, revision, exists=True, upgraded_first=True, empty=True)
        return
    assert url.database is not None
    state = look_at_sqlite_file(url)
    if state.revision == HEAD_REVISION:
        yield url, SideState(where, HEAD_REVISION, exists=True, upgraded_first=False)
        return
    check_upgradable(url)  # what the copy's upgrade would refuse, said of the file itself
    exists = Path(url.database).exists()
    with tempfile.TemporaryDirectory(prefix="hermes-state-dry-run-") as folder:
        stand_in = resolve_url(Path(folder) / "at-head.db")
        if exists and state.kind is not FileKind.NEW:
            assert stand_in.database is not None
            with (
                translated(where),
                contextlib.closing(connect_for_reading(url.database)) as original,
                contextlib.closing(sqlite3.connect(stand_in.database)) as copy,
            ):
                original.backup(copy)
        upgrade(stand_in)
        yield stand_in, SideState(where, state.revision, exists=exists, upgraded_first=True)


def _server_state(url: URL) -> tuple[str | None, bool]:
    """A server database's revision, and whether it holds none of the modelled tables."""
    engine = make_engine(url)
    try:
        with translated(describe(url)), engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            revision = current_revision(connection)
            present = set(inspect(connection).get_table_names()) & set(metadata.tables)
            connection.rollback()
    finally:
        engine.dispose()
    if revision is not None and revision != HEAD_REVISION and not is_known_revision(revision):
        raise too_new(describe(url), revision)
    return revision, not present


def _absent_sqlite_file(url: Any) -> Path | None:
    if isinstance(url, URL) and is_sqlite(url) and url.database:
        path = Path(url.database)
        return None if path.exists() else path
    return None
