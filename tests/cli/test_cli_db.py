"""``hermes-state db ...`` through ``hermes_state.cli.main``: output, exit codes, URL resolution.

Exit codes: 0 done, 1 refused or failed (drift found, a missing or unreachable database),
2 bad input (arguments, URLs, revisions, files that are not databases). No command ever prints
a traceback for a user error, and a printed server URL never shows its password.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL

from hermes_state import schema
from hermes_state.engine import make_engine, resolve_url
from tests.conftest import CliResult, require_server, throwaway_database, url_arg


def revisions_oldest_first() -> list[str]:
    config = Config()
    config.set_main_option("script_location", str(schema.script_location()))
    walked = ScriptDirectory.from_config(config).walk_revisions("base", "heads")
    return [script.revision for script in reversed(list(walked))]


REVISIONS = revisions_oldest_first()
FIRST = REVISIONS[0]
HEAD = schema.HEAD_REVISION


def tables(url: URL) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def drop_pending_index(url: URL) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            if connection.dialect.name in ("mysql", "mariadb"):
                connection.execute(text("DROP INDEX idx_sessions_handoff_state ON sessions"))
            else:
                connection.execute(text("DROP INDEX idx_sessions_handoff_state"))
    finally:
        engine.dispose()


# -- upgrade, downgrade, current, history, check on every backend ------------------------------


def test_upgrade_current_downgrade(empty_database: URL, cli: Any) -> None:
    url = url_arg(empty_database)

    done = cli("--url", url, "db", "upgrade")
    assert done.code == 0, done.err
    assert f"from base to {HEAD}" in done.out
    assert schema.revision_of(empty_database) == HEAD

    shown = cli("--url", url, "db", "current")
    assert shown.code == 0
    assert shown.out.strip() == f"{HEAD} (head)"

    again = cli("--url", url, "db", "upgrade")
    assert again.code == 0
    assert f"already at {HEAD}" in again.out

    down = cli("--url", url, "db", "downgrade", "base")
    assert down.code == 0, down.err
    assert f"from {HEAD} to base" in down.out
    assert schema.revision_of(empty_database) is None
    assert not ({"sessions", "messages"} & tables(empty_database))

    shown = cli("--url", url, "db", "current", "--json")
    assert shown.code == 0
    assert shown.json()["revision"] is None
    assert shown.json()["is_head"] is False


def test_upgrade_and_downgrade_to_a_revision(empty_database: URL, cli: Any) -> None:
    url = url_arg(empty_database)
    assert cli("--url", url, "db", "upgrade", FIRST).code == 0
    assert schema.revision_of(empty_database) == FIRST

    current = cli("--url", url, "db", "current", "--json").json()
    assert current["revision"] == FIRST
    assert current["head"] == HEAD
    assert current["is_head"] is (FIRST == HEAD)
    plain = cli("--url", url, "db", "current").out.strip()
    assert plain == (f"{FIRST} (head)" if FIRST == HEAD else f"{FIRST} (head is {HEAD})")

    assert cli("--url", url, "db", "upgrade", HEAD).code == 0
    assert schema.revision_of(empty_database) == HEAD

    down = cli("--url", url, "db", "downgrade", FIRST)
    assert down.code == 0, down.err
    assert schema.revision_of(empty_database) == FIRST
    assert {"sessions", "messages"} <= tables(empty_database)


def test_history_marks_the_current_revision(empty_database: URL, cli: Any) -> None:
    url = url_arg(empty_database)
    assert cli("--url", url, "db", "upgrade", FIRST).code == 0

    listed = cli("--url", url, "db", "history", "--json")
    assert listed.code == 0
    entries = listed.json()
    assert [entry["revision"] for entry in entries] == REVISIONS
    assert [entry["current"] for entry in entries] == [r == FIRST for r in REVISIONS]
    assert [entry["head"] for entry in entries] == [r == HEAD for r in REVISIONS]
    assert entries[0]["down_revision"] is None
    assert all(entry["message"] for entry in entries)

    plain = cli("--url", url, "db", "history")
    assert plain.code == 0
    lines = plain.out.splitlines()
    assert len(lines) == len(REVISIONS)
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1
    assert FIRST in marked[0]
    assert "current" in marked[0]
    assert any(HEAD in line and "head" in line for line in lines)


def test_check_in_sync_and_drift(empty_database: URL, cli: Any) -> None:
    url = url_arg(empty_database)
    assert cli("--url", url, "db", "upgrade").code == 0

    ok = cli("--url", url, "db", "check")
    assert ok.code == 0, ok.out
    report = cli("--url", url, "db", "check", "--json")
    assert report.code == 0
    assert report.json()["in_sync"] is True
    assert report.json()["differences"] == []

    drop_pending_index(empty_database)
    drift = cli("--url", url, "db", "check")
    assert drift.code == 1
    assert "idx_sessions_handoff_state" in drift.out
    report = cli("--url", url, "db", "check", "--json")
    assert report.code == 1
    assert report.json()["in_sync"] is False
    assert [(d["kind"], d["detail"].split()[0]) for d in report.json()["differences"]] == [
        ("add index", "idx_sessions_handoff_state")
    ]


def test_check_reports_a_database_behind_head(empty_database: URL, cli: Any) -> None:
    if FIRST == HEAD:
        pytest.skip("a single revision: nothing can be behind")
    url = url_arg(empty_database)
    assert cli("--url", url, "db", "upgrade", FIRST).code == 0
    behind = cli("--url", url, "db", "check", "--json")
    assert behind.code == 1
    kinds = {d["kind"] for d in behind.json()["differences"]}
    assert "revision" in kinds


def test_check_on_an_empty_database_is_drift_not_a_crash(empty_database: URL, cli: Any) -> None:
    if empty_database.get_backend_name() == "sqlite":
        assert empty_database.database is not None
        sqlite3.connect(empty_database.database).close()  # an existing, empty file
    result = cli("--url", url_arg(empty_database), "db", "check")
    assert result.code == 1
    assert "sessions" in result.out


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_unknown_revision_is_bad_input(empty_database: URL, cli: Any, action: str) -> None:
    url = url_arg(empty_database)
    assert cli("--url", url, "db", "upgrade").code == 0
    result = cli("--url", url, "db", action, "no_such_revision")
    assert result.code == 2
    assert "no_such_revision" in result.err
    assert result.out == ""
    assert schema.revision_of(empty_database) == HEAD


def test_downgrade_needs_a_revision(cli: Any, tmp_path: Path) -> None:
    result = cli("--url", str(tmp_path / "x.db"), "db", "downgrade")
    assert result.code == 2
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("argv", [["db"], ["db", "frobnicate"], ["db", "current", "--bogus"]])
def test_usage_errors(cli: Any, argv: list[str]) -> None:
    result = cli(*argv)
    assert result.code == 2
    assert "usage" in result.err


@pytest.mark.parametrize(
    "raw",
    [
        "://nothing",
        "sqlite://",
        "sqlite:///:memory:",
        "oracle://scott:tiger@host/db",
        "postgresql+nodriver://user@host/db",
        "postgresql://user@host:notaport/db",
        "postgresql://user@[::1/db",
    ],
)
@pytest.mark.parametrize("action", ["upgrade", "current", "check", "history"])
def test_malformed_url_is_bad_input(cli: Any, raw: str, action: str) -> None:
    result = cli("--url", raw, "db", action)
    assert result.code == 2, result.err
    assert result.err.startswith("hermes-state: ")
    assert result.out == ""


@pytest.mark.parametrize(
    "raw",
    [
        "oracle://scott:hunter2@host/db",
        "postgresql+nodriver://user:hunter2@host/db",
        "postgresql://user:hunter2@host:notaport/db",
        "://user:hunter2@host/db",
        "postgresql://user:hunter2@[::1/db",
    ],
)
def test_bad_url_messages_mask_the_password(cli: Any, raw: str) -> None:
    result = cli("--url", raw, "db", "current")
    assert result.code == 2, result.err
    assert "hunter2" not in result.err


def test_malformed_url_from_the_environment_is_bad_input(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_STATE_URL", "://nothing")
    result = cli("db", "current")
    assert result.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["db", "upgrade"],
        ["db", "upgrade", "head"],
        ["db", "downgrade", "base"],
        ["db", "current"],
        ["db", "current", "--json"],
        ["db", "history"],
        ["db", "check"],
    ],
)
def test_a_file_that_is_not_a_database_is_left_alone(
    cli: Any, tmp_path: Path, argv: list[str]
) -> None:
    path = tmp_path / "notes.db"
    content = b"These are my notes, not an SQLite database.\n" * 20
    path.write_bytes(content)
    stamp = path.stat().st_mtime_ns
    before = set(tmp_path.iterdir())

    result = cli("--url", str(path), *argv)

    assert result.code == 2
    assert str(path) in result.err
    assert "not an SQLite database" in result.err
    assert path.read_bytes() == content
    assert path.stat().st_mtime_ns == stamp
    assert set(tmp_path.iterdir()) == before  # no -wal, -shm or journal left beside it


def test_a_directory_is_bad_input(cli: Any, tmp_path: Path) -> None:
    result = cli("--url", str(tmp_path), "db", "upgrade")
    assert result.code == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["db", "current"], ["db", "check"], ["db", "downgrade", "base"]])
def test_a_missing_file_is_refused_and_not_created(
    cli: Any, tmp_path: Path, argv: list[str]
) -> None:
    path = tmp_path / "nowhere" / "state.db"
    result = cli("--url", str(path), *argv)
    assert result.code == 1
    assert str(path) in result.err
    assert "db upgrade" in result.err  # says how to create one
    assert not path.exists()
    assert not path.parent.exists()


def test_history_of_a_missing_file_creates_nothing(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "state.db"
    result = cli("--url", str(path), "db", "history", "--json")
    assert result.code == 0
    assert [entry["revision"] for entry in result.json()] == REVISIONS
    assert not any(entry["current"] for entry in result.json())
    assert not path.parent.exists()


def test_upgrade_creates_a_missing_file_and_its_folder(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "state.db"
    assert cli("--url", str(path), "db", "upgrade").code == 0
    assert schema.revision_of(resolve_url(path)) == HEAD


# -- which database: --url, then HERMES_STATE_URL, then $HERMES_HOME/state.db -----------------


def test_url_resolution_order(
    cli: Any, tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "flag" / "state.db"
    env = tmp_path / "env" / "state.db"
    home = isolated_home / "state.db"
    monkeypatch.setenv("HERMES_STATE_URL", f"sqlite:///{env}")

    done = cli("--url", str(flag), "db", "upgrade")
    assert done.code == 0
    assert str(flag) in done.out
    assert flag.exists()
    assert not env.exists()
    assert not home.exists()

    done = cli("db", "upgrade")
    assert done.code == 0
    assert str(env) in done.out
    assert env.exists()
    assert not home.exists()

    monkeypatch.delenv("HERMES_STATE_URL")
    done = cli("db", "upgrade")
    assert done.code == 0
    assert str(home) in done.out
    assert home.exists()

    # The reading commands resolve the same way.
    assert cli("db", "current", "--json").json()["database"] == str(home)
    monkeypatch.setenv("HERMES_STATE_URL", str(env))  # a plain path works too
    assert cli("db", "current", "--json").json()["database"] == str(env)
    assert cli("--url", str(flag), "db", "current", "--json").json()["database"] == str(flag)


def test_empty_environment_url_falls_back_to_home(
    cli: Any, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_STATE_URL", "")
    assert cli("db", "upgrade").code == 0
    assert (isolated_home / "state.db").exists()


def test_json_has_an_environment_twin(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    assert cli("--url", str(path), "db", "upgrade").code == 0
    monkeypatch.setenv("HERMES_STATE_JSON", "1")
    assert cli("--url", str(path), "db", "current").json()["revision"] == HEAD


# -- passwords ---------------------------------------------------------------------------------

PASSWORD = "s3cr%t@pw/x"  # '%' (Alembic's interpolation pitfall), '@' and '/' need encoding


@contextlib.contextmanager
def database_with_password(backend: str) -> Iterator[URL]:
    """A throwaway database owned by a throwaway user who logs in with ``PASSWORD``."""
    server = require_server(backend)
    user = f"hs_user_{uuid.uuid4().hex[:8]}"
    admin = make_engine(server).execution_options(isolation_level="AUTOCOMMIT")
    with throwaway_database(backend) as url:
        try:
            with admin.connect() as connection:
                if backend == "postgresql":
                    connection.exec_driver_sql(f"CREATE ROLE {user} LOGIN PASSWORD '{PASSWORD}'")
                    connection.execute(text(f"ALTER DATABASE {url.database} OWNER TO {user}"))
                else:
                    connection.execute(
                        text(f"CREATE USER '{user}'@'%' IDENTIFIED BY :pw").bindparams(pw=PASSWORD)
                    )
                    connection.execute(text(f"GRANT ALL ON {url.database}.* TO '{user}'@'%'"))
            yield url.set(username=user, password=PASSWORD)
        finally:
            # The user owns what the migrations created: the database goes first, then the user
            # (throwaway_database's own DROP ... IF EXISTS then finds nothing left).
            with admin.connect() as connection:
                if backend == "postgresql":
                    connection.execute(text(f"DROP DATABASE IF EXISTS {url.database} WITH (FORCE)"))
                    connection.execute(text(f"DROP ROLE IF EXISTS {user}"))
                else:
                    connection.execute(text(f"DROP DATABASE IF EXISTS {url.database}"))
                    connection.execute(text(f"DROP USER IF EXISTS '{user}'@'%'"))
            admin.dispose()


def assert_masked(result: CliResult) -> None:
    for stream in (result.out, result.err):
        assert "s3cr" not in stream
        assert "%25" not in stream


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_passwords_are_masked_in_every_printed_url(
    backend: str, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with database_with_password(backend) as url:
        raw = url_arg(url)
        assert "s3cr%25t%40pw%2Fx" in raw  # the password really is in the URL we pass

        upgraded = cli("--url", raw, "db", "upgrade")
        assert upgraded.code == 0, upgraded.err
        assert "***" in upgraded.out
        assert_masked(upgraded)

        current = cli("--url", raw, "db", "current", "--json")
        assert current.code == 0
        assert "***" in current.json()["database"]
        assert_masked(current)

        checked = cli("--url", raw, "db", "check", "--json")
        assert checked.code == 0, checked.out
        assert "***" in checked.json()["database"]
        assert_masked(checked)

        assert_masked(cli("--url", raw, "db", "history"))
        assert_masked(cli("--url", raw, "db", "upgrade", "no_such_revision"))

        # The same URL from the environment behaves the same.
        monkeypatch.setenv("HERMES_STATE_URL", raw)
        from_environment = cli("db", "upgrade")
        assert from_environment.code == 0, from_environment.err
        assert "***" in from_environment.out
        assert_masked(from_environment)
        monkeypatch.delenv("HERMES_STATE_URL")

        downgraded = cli("--url", raw, "db", "downgrade", "base")
        assert downgraded.code == 0
        assert_masked(downgraded)


@pytest.mark.parametrize(
    "raw",
    [
        "postgresql://hermes:s3cr%25t@127.0.0.1:1/nothing",
        "mysql://hermes:s3cr%25t@127.0.0.1:1/nothing",
    ],
)
@pytest.mark.parametrize("action", ["upgrade", "current", "check", "history"])
def test_unreachable_server_is_refused_with_the_password_masked(
    cli: Any, raw: str, action: str
) -> None:
    result = cli("--url", raw, "db", action)
    assert result.code == 1
    assert "***" in result.err
    assert_masked(result)
