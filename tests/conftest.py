"""Fixtures shared by the test suite: backends, throwaway databases, an isolated HERMES_HOME.

SQLite always runs. PostgreSQL and MariaDB/MySQL run when ``HERMES_STATE_TEST_PG_URL`` /
``HERMES_STATE_TEST_MYSQL_URL`` name a server (any database on it; the tests create and drop
their own). A URL that is set but unreachable fails the run instead of skipping quietly.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB, schema
from hermes_state.engine import resolve_url, with_driver

SERVER_ENVS = {
    "postgresql": "HERMES_STATE_TEST_PG_URL",
    "mysql": "HERMES_STATE_TEST_MYSQL_URL",
}
BACKENDS = ["sqlite", "postgresql", "mysql"]


def server_url(backend: str) -> URL | None:
    """The configured server for ``backend``, or None when its environment variable is unset."""
    raw = os.environ.get(SERVER_ENVS[backend], "").strip()
    return resolve_url(raw) if raw else None


_checked: dict[str, URL] = {}


def require_server(backend: str) -> URL:
    """Skip when the backend is not configured; fail loudly when it is but cannot be reached."""
    if backend in _checked:
        return _checked[backend]
    url = server_url(backend)
    if url is None:
        pytest.skip(f"{SERVER_ENVS[backend]} is not set")
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        pytest.fail(
            f"{SERVER_ENVS[backend]} is set to {url.render_as_string(hide_password=True)} "
            f"but the server cannot be reached: {exc}",
            pytrace=False,
        )
    finally:
        engine.dispose()
    _checked[backend] = url
    return url


@contextlib.contextmanager
def throwaway_database(backend: str) -> Iterator[URL]:
    """A new, empty database on the configured server, dropped afterwards."""
    server = require_server(backend)
    name = f"hs_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(with_driver(server, asyncio=False), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
        yield server.set(database=name)
    finally:
        with admin.connect() as connection:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            connection.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
        admin.dispose()


def sqlite_url(folder: Path) -> URL:
    return resolve_url(folder / "state.db")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HERMES_HOME, so nothing ever touches ~/.hermes."""
    home = tmp_path / "hermes-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_STATE_URL", raising=False)
    return home


@pytest.fixture(scope="session")
def migrated_servers() -> Iterator[dict[str, URL]]:
    """One migrated database per configured server for the whole run, created lazily."""
    stack = contextlib.ExitStack()
    urls: dict[str, URL] = {}

    class Lazy(dict[str, URL]):
        def __missing__(self, backend: str) -> URL:
            url = stack.enter_context(throwaway_database(backend))
            schema.upgrade(url)
            urls[backend] = url
            self[backend] = url
            return url

    with stack:
        yield Lazy()


def _empty_tables(url: URL) -> None:
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        with engine.begin() as connection:
            for table in ("messages", "handoff_events", "sessions"):
                connection.execute(text(f"DELETE FROM {table}"))
    finally:
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def backend_url(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_servers: dict[str, URL]
) -> URL:
    """A database at head with empty tables: a fresh SQLite file, or a shared server database."""
    backend: str = request.param
    if backend == "sqlite":
        return sqlite_url(tmp_path)
    url = migrated_servers[backend]
    _empty_tables(url)
    return url


@pytest.fixture
def store(backend_url: URL) -> Iterator[SessionDB]:
    db = SessionDB(url=backend_url)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture(params=BACKENDS)
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A database with nothing in it, of every backend: for migration tests."""
    backend: str = request.param
    if backend == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with throwaway_database(backend) as url:
        yield url
