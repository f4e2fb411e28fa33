"""Fixtures shared by the test suite: backends, throwaway databases, an isolated HERMES_HOME,
and ``cli``, the command line run in-process.

SQLite always runs. PostgreSQL and MariaDB/MySQL run when ``HERMES_STATE_TEST_PG_URL`` /
``HERMES_STATE_TEST_MYSQL_URL`` name a server (any database on it; the tests create and drop
their own). A URL that is set but unreachable fails the run instead of skipping quietly.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB, schema
from hermes_state.cli import main
from hermes_state.engine import resolve_url, with_driver
from tests.digest import forget
from tests.stores import STORE_KINDS, LoopThread, open_kind

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
    """A new, empty database on the configured server, dropped afterwards (after closing the
    connections ``tests.digest`` keeps to it)."""
    server = require_server(backend)
    name = f"hs_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(with_driver(server, asyncio=False), isolation_level="AUTOCOMMIT")
    url = server.set(database=name)
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
        yield url
    finally:
        forget(url)
        with admin.connect() as connection:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            connection.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
        admin.dispose()


def sqlite_url(folder: Path) -> URL:
    return resolve_url(folder / "state.db")


def url_arg(url: URL) -> str:
    """``url`` as given on a command line: a server URL keeps its password."""
    return url.render_as_string(hide_password=False)


@contextlib.contextmanager
def database_at_head(backend: str, folder: Path) -> Iterator[URL]:
    """A database of its own at head: a new SQLite file in ``folder``, or a throwaway server
    database."""
    if backend == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        url = sqlite_url(folder)
        schema.upgrade(url)
        yield url
        return
    with throwaway_database(backend) as url:
        schema.upgrade(url)
        yield url


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


def empty_tables(database: URL | Engine) -> None:
    """Delete every row a store writes (the schema and its bookkeeping stay). ``database`` is
    a URL, or an engine on it to reuse."""
    engine = (
        database
        if isinstance(database, Engine)
        else create_engine(with_driver(database, asyncio=False))
    )
    try:
        with engine.begin() as connection:
            for table in ("messages", "handoff_events", "session_turn_leases", "sessions"):
                connection.execute(text(f"DELETE FROM {table}"))
    finally:
        if engine is not database:
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
    empty_tables(url)
    return url


@pytest.fixture
def store(backend_url: URL) -> Iterator[SessionDB]:
    db = SessionDB(url=backend_url)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def new_store(backend_url: URL) -> Iterator[Callable[..., SessionDB]]:
    """``new_store(**options)`` opens another ``SessionDB`` on the test's database with those
    options (an owner, a clock...); every store it opened is closed at the end."""
    opened: list[SessionDB] = []

    def open_one(**options: Any) -> SessionDB:
        db = SessionDB(url=backend_url, **options)
        opened.append(db)
        return db

    yield open_one
    for db in opened:
        db.close()


@pytest.fixture(params=STORE_KINDS)
def new_any_store(
    request: pytest.FixtureRequest, backend_url: URL
) -> Iterator[Callable[..., SessionDB]]:
    """Like ``new_store``, once per kind of store (``tests.stores.STORE_KINDS``): SessionDB, the
    native asyncio store and AsyncSessionDB, the asyncio ones called through ``Blocking``."""
    loop = LoopThread()
    opened: list[SessionDB] = []

    def open_one(**options: Any) -> SessionDB:
        db = open_kind(request.param, backend_url, loop, **options)
        opened.append(db)
        return db

    try:
        yield open_one
    finally:
        for db in opened:
            db.close()
        loop.close()


@pytest.fixture
def any_store(new_any_store: Callable[..., SessionDB]) -> SessionDB:
    """A store of each kind on the test's database (see ``new_any_store``)."""
    return new_any_store()


@pytest.fixture(params=BACKENDS)
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A database with nothing in it, of every backend: for migration tests."""
    backend: str = request.param
    if backend == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with throwaway_database(backend) as url:
        yield url


# -- the command line, in-process ----------------------------------------------------------------


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """``cli(*argv)`` runs ``hermes-state ARGV...`` through ``hermes_state.cli.main`` in this
    process: its exit code and only what this command printed. No command may print a
    traceback, whatever the outcome."""

    def run(*argv: str) -> CliResult:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err, captured.err
        assert "Traceback" not in captured.out, captured.out
        return CliResult(code, captured.out, captured.err)

    return run
