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
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB, schema
from hermes_state import engine as store_engines
from hermes_state.engine import resolve_url, with_driver
from tests.support.digest import cached_engine, forget
from tests.support.processes import in_process
from tests.support.stores import STORE_KINDS, LoopThread, open_kind

SERVER_ENVS = {
    "postgresql": "HERMES_STATE_TEST_PG_URL",
    "mysql": "HERMES_STATE_TEST_MYSQL_URL",
}
BACKENDS = ["sqlite", "postgresql", "mysql"]

# The engines the tests make themselves (admin connections, digests, rivals) connect to
# MariaDB as the store's engines do: one "preferred TLS" context per process, not one per
# connection (see hermes_state.engine; PyMySQL loads the CA bundle for each otherwise).
with contextlib.suppress(ImportError):
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql

    event.listen(MySQLDialect_pymysql, "do_connect", store_engines._connect_with_one_tls_context)

#: Tests that must not run beside one another on the two xdist workers: the timing-sensitive
#: ones with real processes (SIGKILLs at chosen points, leases renewed while a command runs,
#: the real gateways killed and hung), and the headless browser. ``--dist loadgroup`` (in
#: pyproject's addopts) runs every test of a group on one worker, one after another.
SERIAL = pytest.mark.xdist_group("serial")


_UNGROUPED = pytest.StashKey[str]()


#: pyproject.toml's per-test timeout is for the default run; an opt-in soak gets this long.
SOAK_TIMEOUT = 3600


#: Modules whose server variants repeat, on PostgreSQL and MariaDB, what their SQLite variant
#: proves above the statements (command-line rendering, dry-run predictions, previews, input
#: checks, promotion of each upstream vintage and of hand-made files, backups and exports through
#: the command line); the statements themselves are proven on every server by the transition,
#: ownership, audit, round-trip, search, retention, portability and SQL-docs tests of the
#: default run.
SERVER_REPEATS = frozenset(
    {
        "test_bad_input",
        "test_cli_db",
        "test_cli_retention",
        "test_copy_schema30",
        "test_dashboard",
        "test_db_backup",
        "test_db_dry_run",
        "test_downgrade_safety",
        "test_multihost_urls",
        "test_operator_commands",
        "test_promotion",
        "test_session_portability",
        "test_validation",
        "test_vintages",
    }
)
#: Tests whose server variants repeat their SQLite run: the migrations walked one step at a time
#: (the default run upgrades each server to head and compares it with the models, and goes down
#: and up again with data), and the search fuzzing of every character (the default run searches
#: every operator and punctuation rule on every server).
SERVER_REPEAT_TESTS = frozenset(
    {
        "test_alembic_command_line_from_the_repository_root",
        "test_each_step_goes_down_and_up_again",
        "test_models_match_detects_drift",
        "test_no_character_is_a_syntax_error_on_any_backend",
        "test_round_trip_step_by_step",
    }
)
#: Process tests whose MariaDB variant repeats what PostgreSQL's proves with the same statements
#: through the same watcher: several watchers racing one backlog, SIGKILL at each point of a
#: delivery. The default run races processes on MariaDB in test_concurrency and test_batch_claims.
MARIADB_REPEATS = frozenset({"test_crash_kit", "test_watch_pipeline"})
SERVERS = frozenset({"postgresql", "mysql"})
#: The modules where the native asyncio store runs on a server in the default run: its drivers
#: (asyncpg, aiomysql) and its runner on every operation family, and every transition. Elsewhere
#: its server variants are in the full matrix: the plans it runs are the ones SessionDB runs on
#: every server in the default run, and on SQLite it runs everywhere.
NATIVE_ON_SERVERS = frozenset({"test_async", "test_session_reads", "test_transitions"})


def in_full_matrix(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the full matrix (``pytest -m full``) rather than the default
    run: the thread-wrapper store (``AsyncSessionDB``, which runs ``SessionDB``'s own code in a
    thread) outside ``test_async``; and on a server: a variant of a module in
    ``SERVER_REPEATS`` or of a test in ``SERVER_REPEAT_TESTS``, the MariaDB variant of a module
    in ``MARIADB_REPEATS``, the native asyncio store outside ``NATIVE_ON_SERVERS``, the
    sequential model check (the concurrent one stays)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or not isinstance(item, pytest.Function):
        return False
    values = {value for value in callspec.params.values() if isinstance(value, str)}
    module = item.module.__name__.rpartition(".")[2]
    if "threaded" in values and module != "test_async":
        return True
    if not values & SERVERS:
        return False
    return (
        module in SERVER_REPEATS
        or item.originalname in SERVER_REPEAT_TESTS
        or ("mysql" in values and module in MARIADB_REPEATS)
        or ("native" in values and module not in NATIVE_ON_SERVERS)
        or item.originalname == "test_database_never_diverges_from_the_model"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
        item.add_marker(pytest.mark.timeout(SOAK_TIMEOUT))
    if in_full_matrix(item):
        item.add_marker(pytest.mark.full)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` each worker renames a grouped test NODEID@GROUP, after which
    the scheduler keeps the group on one worker. Where xdist cannot rename it (pytest 9.2,
    pytest-xdist issue 1386) a group would be spread over both workers without a word, so
    each grouped test fails instead, saying why."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            item.stash[_UNGROUPED] = (
                f"xdist did not keep this test in its group: pytest-xdist cannot group tests "
                f"under pytest {pytest.__version__}; install what pyproject.toml's test extra "
                "asks for"
            )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _UNGROUPED in item.stash:
        pytest.fail(item.stash[_UNGROUPED], pytrace=False)


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
def throwaway_database(backend: str, *, template: str | None = None) -> Iterator[URL]:
    """A new, empty database on the configured server, dropped afterwards (after closing the
    connections ``tests.support.digest`` keeps to it). On PostgreSQL, ``template`` names a database
    to copy instead (``CREATE DATABASE ... TEMPLATE``)."""
    server = require_server(backend)
    name = f"hs_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(with_driver(server, asyncio=False), isolation_level="AUTOCOMMIT")
    url = server.set(database=name)
    copy = f" TEMPLATE {template}" if template is not None else ""
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}{copy}"))
        yield url
    finally:
        forget(url)
        with admin.connect() as connection:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            connection.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
        admin.dispose()


class _MigratedTemplates:
    """One database per backend migrated to head by the real migrations, once per test process
    (each xdist worker has its own), and copied for every test that only needs a database at
    head: an SQLite file is copied as a file; PostgreSQL copies with ``CREATE DATABASE ...
    TEMPLATE`` (nothing ever stays connected to the template, or the copy is refused);
    MariaDB/MySQL, which has no templates, replays its tables' own ``SHOW CREATE TABLE`` and
    copies the bookkeeping rows (revision, adoption records).
    ``tests/migrations/test_migrations.py`` checks that a copy is what a migration makes. The
    tests of the migrations themselves still migrate empty databases."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._urls: dict[str, URL] = {}
        self._tables: dict[str, list[tuple[str, str, bool]]] = {}

    def sqlite_file(self) -> Path:
        """The migrated SQLite file itself (never to be opened: copy it)."""
        if "sqlite" not in self._urls:
            scratch = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
            url = sqlite_url(scratch)
            schema.upgrade(url)
            # Closed, so all of it is in the main file: no write-ahead log to copy along.
            assert not Path(f"{url.database}-wal").exists()
            self._urls["sqlite"] = url
        return Path(str(self._urls["sqlite"].database))

    def sqlite_copy(self, folder: Path) -> URL:
        """A copy of the migrated SQLite file as ``folder``/state.db."""
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.sqlite_file(), folder / "state.db")
        return sqlite_url(folder)

    def template(self, backend: str) -> URL:
        if backend not in self._urls:
            url = self._stack.enter_context(throwaway_database(backend))
            schema.upgrade(url)
            self._urls[backend] = url
        return self._urls[backend]

    @contextlib.contextmanager
    def copy(self, backend: str) -> Iterator[URL]:
        template = self.template(backend)
        if backend == "postgresql":
            with throwaway_database(backend, template=template.database) as url:
                yield url
            return
        with throwaway_database(backend) as url:
            engine = create_engine(with_driver(url, asyncio=False), isolation_level="AUTOCOMMIT")
            try:
                with engine.connect() as connection:
                    connection.execute(text("SET FOREIGN_KEY_CHECKS = 0"))  # any table order
                    for table, create, has_rows in self._mysql_tables(connection, template):
                        connection.execute(text(create))
                        if has_rows:
                            connection.execute(
                                text(
                                    f"INSERT INTO `{table}` SELECT * FROM "
                                    f"`{template.database}`.`{table}`"
                                )
                            )
            finally:
                engine.dispose()
            yield url

    def _mysql_tables(self, connection: Connection, template: URL) -> list[tuple[str, str, bool]]:
        """Each table of the template: its name, its CREATE TABLE and whether it has rows."""
        if "mysql" not in self._tables:
            names = connection.execute(
                text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = :db ORDER BY table_name"
                ),
                {"db": template.database},
            ).scalars()
            tables = []
            for name in list(names):
                quoted = f"`{template.database}`.`{name}`"
                create = connection.execute(text(f"SHOW CREATE TABLE {quoted}")).one()[1]
                rows = connection.execute(text(f"SELECT COUNT(*) FROM {quoted}")).scalar()
                tables.append((name, create, bool(rows)))
            self._tables["mysql"] = tables
        return self._tables["mysql"]

    def close(self) -> None:
        self._stack.close()


_templates = _MigratedTemplates()
_store_bring_current = schema.bring_current
_real_upgrade = schema.upgrade


def _bring_a_new_file_current_by_copy(
    url: URL, revision: str | None, *, auto_upgrade: bool
) -> None:
    """``schema.bring_current`` for the tests' stores: a new, absent or empty SQLite file that a
    store would migrate from nothing gets a copy of this worker's migrated file instead (a
    quarter of a second of Alembic saved per store; ``tests/migrations/test_migrations.py``
    checks that the copy is what the migrations make). Anything else, or a test that replaced
    ``schema.upgrade``, takes the real path."""
    database = url.database if store_engines.is_sqlite(url) else None
    if (
        auto_upgrade
        and revision is None
        and database not in (None, "", ":memory:")
        and not url.query
        and schema.upgrade is _real_upgrade
    ):
        path = Path(database)
        new = not path.exists() or path.stat().st_size == 0
        if new and path.parent.is_dir() and not Path(f"{database}-wal").exists():
            shutil.copyfile(_templates.sqlite_file(), path)
            return
    _store_bring_current(url, revision, auto_upgrade=auto_upgrade)


@pytest.fixture(scope="session", autouse=True)
def _drop_migrated_templates() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "bring_current", _bring_a_new_file_current_by_copy)
        yield
    _templates.close()


@contextlib.contextmanager
def migrated_database(backend: str) -> Iterator[URL]:
    """A new database at head on the configured server, dropped afterwards: a copy of one the
    migrations made (see ``_MigratedTemplates``)."""
    with _templates.copy(backend) as url:
        yield url


def sqlite_url(folder: Path) -> URL:
    return resolve_url(folder / "state.db")


def url_arg(url: URL) -> str:
    """``url`` as given on a command line: a server URL keeps its password."""
    return url.render_as_string(hide_password=False)


@contextlib.contextmanager
def database_at_head(backend: str, folder: Path) -> Iterator[URL]:
    """A database of its own at head: a new SQLite file in ``folder``, or a throwaway server
    database (copies of databases the migrations made: see ``_MigratedTemplates``)."""
    if backend == "sqlite":
        yield _templates.sqlite_copy(folder)
        return
    with migrated_database(backend) as url:
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
            url = stack.enter_context(migrated_database(backend))
            urls[backend] = url
            self[backend] = url
            return url

    with stack:
        yield Lazy()


def empty_tables(database: URL | Engine) -> None:
    """Delete every row a store writes (the schema and its bookkeeping stay). ``database`` is
    a URL (its engine is the one ``tests.support.digest`` keeps for it, reused from test to test and
    closed before the database is dropped), or an engine on it."""
    engine = database if isinstance(database, Engine) else cached_engine(database)
    with engine.begin() as connection:
        for table in (
            "messages",
            "handoff_events",
            "session_turn_leases",
            "session_model_usage",
            "sessions",
            "system_prompts",
            "state_meta",
        ):
            connection.execute(text(f"DELETE FROM {table}"))


@pytest.fixture(params=BACKENDS)
def backend_url(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_servers: dict[str, URL]
) -> URL:
    """A database at head with empty tables: a fresh SQLite file (a copy of one the migrations
    made), or a shared server database."""
    backend: str = request.param
    if backend == "sqlite":
        return _templates.sqlite_copy(tmp_path)
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
    """Like ``new_store``, once per kind of store (``tests.support.stores.STORE_KINDS``):
    SessionDB, the native asyncio store and AsyncSessionDB, the asyncio ones called through
    ``Blocking``."""
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
def cli() -> Callable[..., CliResult]:
    """``cli(*argv)`` runs ``hermes-state ARGV...`` through ``hermes_state.cli.main`` in this
    process (``tests.support.processes.in_process``): its exit code and only what this command
    printed. No command may print a traceback, whatever the outcome."""

    def run(*argv: str) -> CliResult:
        done = in_process(*argv)
        return CliResult(done.returncode, done.stdout, done.stderr)

    return run
