"""Fixtures shared by the benchmarks: big SQLite files, throwaway PostgreSQL databases, children.

Large files are built once per run, fast (``sqlite3.executemany`` into a schema the store
created), kept in one temporary folder for the whole ``python -m bench`` run and deleted at
its end (:func:`cleanup`, also registered to run at exit). A benchmark that changes a file
works on a copy (:func:`copy_sqlite`).

PostgreSQL is used when ``HERMES_STATE_BENCH_PG_URL`` (set by ``python -m bench --pg-url``)
or else ``HERMES_STATE_TEST_PG_URL`` names a server; benchmarks skip their PostgreSQL cases
when neither is set, and fail loudly when one is set but the server cannot be reached. Each
benchmark works in databases of its own, created on that server and dropped afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import resolve_url, with_driver

from .common import BenchmarkError

__all__ = [
    "COMPLETED_EVERY",
    "MYSQL_URL_ENVS",
    "PG_URL_ENVS",
    "PLATFORM",
    "PROJECT_ROOT",
    "child_environment",
    "cleanup",
    "copy_sqlite",
    "mysql_server",
    "pg_conninfo",
    "pg_load_sessions",
    "pg_server",
    "scratch",
    "server_database",
    "session_id",
    "session_ids",
    "skipping",
    "sqlite_sessions",
    "sqlite_transcripts",
]

#: Where ``python -m bench`` runs from; children run there too, so ``bench`` is importable.
PROJECT_ROOT: Final = Path(__file__).resolve().parent.parent
PG_URL_ENVS: Final = ("HERMES_STATE_BENCH_PG_URL", "HERMES_STATE_TEST_PG_URL")
MYSQL_URL_ENVS: Final = ("HERMES_STATE_BENCH_MYSQL_URL", "HERMES_STATE_TEST_MYSQL_URL")
PLATFORM: Final = "telegram"
#: Sessions in a built file: one in this many has a completed handoff (history, not pending).
COMPLETED_EVERY: Final = 20
_EPOCH: Final = 1_767_225_600.0  # 2026-01-01

_lock = threading.Lock()
_folder: tempfile.TemporaryDirectory[str] | None = None
_templates: dict[int, Path] = {}
_transcripts: dict[int, Path] = {}


def scratch() -> Path:
    """This run's temporary folder (created on first use, deleted by :func:`cleanup`)."""
    global _folder
    with _lock:
        if _folder is None:
            _folder = tempfile.TemporaryDirectory(prefix="hermes-bench-")
            atexit.register(cleanup)
        return Path(_folder.name)


def cleanup() -> None:
    """Delete every fixture this run built."""
    global _folder
    with _lock:
        if _folder is not None:
            _folder.cleanup()
            _folder = None
        _templates.clear()
        _transcripts.clear()


def session_id(index: int) -> str:
    """Timestamp-and-hex ids of a realistic length (22 characters), sorting in index order."""
    return f"20260101_000000_{index:06x}"


def session_ids(indexes: Iterable[int]) -> list[str]:
    return [session_id(index) for index in indexes]


def sqlite_sessions(size: int) -> Path:
    """A checkpointed SQLite file at head with ``size`` sessions, none pending (cached).

    One session in :data:`COMPLETED_EVERY` has a completed handoff, the rest none. The file
    is shared: copy it before changing it.
    """
    with _lock:
        cached = _templates.get(size)
    if cached is not None:
        return cached
    path = scratch() / f"sessions-{size}.db"
    SessionDB(path).close()  # the store's own schema and indexes
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at, handoff_state, handoff_platform, "
            "handoff_attempt) VALUES (?, 'bench', ?, ?, ?, ?)",
            (
                (
                    session_id(index),
                    _EPOCH + index,
                    *(
                        ("completed", PLATFORM, 1)
                        if index % COMPLETED_EVERY == 0
                        else (None, None, 0)
                    ),
                )
                for index in range(size)
            ),
        )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    with _lock:
        _templates[size] = path
    return path


def sqlite_transcripts(size: int) -> Path:
    """:func:`sqlite_sessions` with one message in every session (cached): a messages table
    as large as the sessions table, indexed for full-text search by the store's own triggers
    as it is filled. The file is shared: copy it before changing it."""
    with _lock:
        cached = _transcripts.get(size)
    if cached is not None:
        return cached
    path = copy_sqlite(sqlite_sessions(size), scratch() / f"transcripts-{size}.db")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (
                (session_id(index), "user", f"hello from session {index}", _EPOCH + index)
                for index in range(size)
            ),
        )
        connection.execute("UPDATE sessions SET message_count = 1")
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    with _lock:
        _transcripts[size] = path
    return path


def copy_sqlite(source: Path, target: Path) -> Path:
    """A private copy of a checkpointed fixture file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def child_environment() -> dict[str, str]:
    """The environment for a child Python: this project importable, no stray database URL."""
    environment = dict(os.environ)
    path = environment.get("PYTHONPATH")
    environment["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)
    environment.pop("HERMES_STATE_URL", None)
    return environment


# -- PostgreSQL --------------------------------------------------------------------------------

_checked: dict[str, URL] = {}


def pg_server() -> URL | None:
    """The configured PostgreSQL server, or None; raises when it is set but unreachable."""
    return _server(PG_URL_ENVS, "postgresql", "PostgreSQL")


def mysql_server() -> URL | None:
    """The configured MariaDB/MySQL server, or None; raises when it is set but unreachable."""
    return _server(MYSQL_URL_ENVS, "mysql", "MariaDB/MySQL")


def _server(envs: tuple[str, ...], backend: str, kind: str) -> URL | None:
    for name in envs:
        raw = os.environ.get(name, "").strip()
        if raw:
            break
    else:
        return None
    if raw in _checked:
        return _checked[raw]
    url = resolve_url(raw)
    if url.get_backend_name() != backend:
        raise BenchmarkError(f"{name} must name a {kind} server, not {url.get_backend_name()}")
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        where = url.render_as_string(hide_password=True)
        raise BenchmarkError(
            f"{name} is set to {where} but the server is unreachable: {exc}"
        ) from exc
    finally:
        engine.dispose()
    _checked[raw] = url
    return url


def skipping(what: str, envs: tuple[str, ...] = PG_URL_ENVS) -> None:
    """Say on stderr that a server case is skipped (PostgreSQL's unless ``envs`` says)."""
    print(f"  {what}: skipped ({' / '.join(envs)} not set)", file=sys.stderr)


@contextlib.contextmanager
def server_database(server: URL, *, at_head: bool = True) -> Iterator[URL]:
    """A new database on the PostgreSQL or MariaDB/MySQL ``server`` (at the head revision
    unless ``at_head`` is False: then empty, for other systems' schemas), dropped afterwards
    (on PostgreSQL forcibly, whoever is still connected)."""
    from hermes_state import schema

    name = f"hs_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(with_driver(server, asyncio=False), isolation_level="AUTOCOMMIT")
    force = " WITH (FORCE)" if server.get_backend_name() == "postgresql" else ""
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
        url = server.set(database=name)
        if at_head:
            schema.upgrade(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
        admin.dispose()


def pg_conninfo(url: URL) -> str:
    """A libpq connection string for psycopg (password included)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def pg_load_sessions(url: URL, size: int) -> None:
    """``size`` sessions as in :func:`sqlite_sessions`, through COPY, then VACUUM ANALYZE."""
    import psycopg

    with psycopg.connect(pg_conninfo(url)) as connection:
        with (
            connection.cursor() as cursor,
            cursor.copy(
                "COPY sessions (id, source, started_at, handoff_state, handoff_platform, "
                "handoff_attempt) FROM STDIN"
            ) as copy,
        ):
            for index in range(size):
                completed = index % COMPLETED_EVERY == 0
                copy.write_row(
                    (
                        session_id(index),
                        "bench",
                        _EPOCH + index,
                        "completed" if completed else None,
                        PLATFORM if completed else None,
                        1 if completed else 0,
                    )
                )
        connection.commit()
    with psycopg.connect(pg_conninfo(url), autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE sessions")
