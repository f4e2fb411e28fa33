"""Paths that ordinary use never takes, each taken on purpose.

* A database migrated by a newer hermes-state (a revision this one does not know), or whose
  version table holds several heads: refused with ``SchemaTooNewError``, untouched.
* A store used in a child made by ``os.fork()``: the child opens connections of its own.
* A connection whose rollback failed is dropped; the store carries on with a fresh one.
* The CLI's last resorts: Ctrl-C (a real SIGINT) exits 130; an unexpected exception is one line
  that calls itself a bug, and ``HERMES_STATE_DEBUG=1`` shows its traceback instead.
* A wake-up callback that raises neither fails the request that woke it nor silences the
  other watchers.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import (
    HermesStateError,
    NativeAsyncSessionDB,
    SchemaTooNewError,
    SessionDB,
    notify,
    schema,
)
from hermes_state.cli import handoff as handoff_command
from hermes_state.cli import main
from tests.conftest import CliResult, url_arg
from tests.support.digest import database_digest, sync_url
from tests.support.processes import cli_argv, in_forked_child, run_cli, wait_until

FUTURE_REVISION = "9999_from_a_newer_hermes_state"


def rewrite_versions(url: URL, *revisions: str) -> None:
    """Make the version table hold exactly ``revisions``, as another tool might have left it."""
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(text(f"DELETE FROM {schema.VERSION_TABLE}"))
            for revision in revisions:
                connection.execute(
                    text(f"INSERT INTO {schema.VERSION_TABLE} (version_num) VALUES (:r)"),
                    {"r": revision},
                )
    finally:
        engine.dispose()


# -- a database from the future ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("revisions", "said"),
    [
        ((FUTURE_REVISION,), "migrated by a newer version: upgrade hermes-state"),
        ((schema.HEAD_REVISION, FUTURE_REVISION), "several heads"),
    ],
    ids=["unknown-revision", "several-heads"],
)
def test_a_database_from_a_newer_version_is_refused_untouched(
    empty_database: URL,
    revisions: tuple[str, ...],
    said: str,
    cli: Callable[..., CliResult],
) -> None:
    schema.upgrade(empty_database)
    with SessionDB(url=empty_database) as db:
        db.create_session("kept", "cli")
    rewrite_versions(empty_database, *revisions)
    before = database_digest(empty_database)

    with pytest.raises(SchemaTooNewError, match=said):
        SessionDB(url=empty_database)

    async def first_native_call() -> None:
        native = NativeAsyncSessionDB(url=empty_database)
        try:
            await native.get_handoff_state("kept")
        finally:
            await native.close()

    with pytest.raises(SchemaTooNewError, match=said):
        asyncio.run(first_native_call())

    upgraded = cli("--url", url_arg(empty_database), "db", "upgrade")
    assert upgraded.code == 1, upgraded
    assert said in upgraded.err
    assert len(upgraded.err.strip().splitlines()) == 1, upgraded.err
    assert database_digest(empty_database) == before


# -- fork ----------------------------------------------------------------------------------------


def sqlite_connections() -> list[sqlite3.Connection]:
    """Every sqlite3 connection object alive in this process (held, so none is freed and its
    address reused while the test compares identities)."""
    return [thing for thing in gc.get_objects() if isinstance(thing, sqlite3.Connection)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_connections_of_its_own(tmp_path: Path) -> None:
    """The library forgets, in a forked child, every SQLite connection the parent opened (the
    thread's, the change-token probe's and those idle in the pool); the child's first call
    opens new ones. SQLite forbids carrying a connection across fork()."""
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("parent", "cli")
        assert isinstance(db.handoff_change_token(), int)  # opens the probe connection
        inherited = sqlite_connections()
        assert len(inherited) >= 2  # the thread's connection and the probe, at least

        def child() -> str | None:
            db.create_session("child", "cli")
            assert db.request_handoff("child", "telegram") is True
            assert isinstance(db.handoff_change_token(), int)  # from a probe of its own
            runner = db._runner
            used = [runner._connection(), runner._probe.dbapi]  # type: ignore[attr-defined]
            shared = [c for c in used if any(c is parents for parents in inherited)]
            if shared:
                return f"the child used {len(shared)} of its parent's connections"
            return None

        assert in_forked_child(child) == "ok"
        # The parent's store is unharmed and sees what the child committed.
        assert db.get_handoff_state("child") == {
            "state": "pending",
            "platform": "telegram",
            "error": None,
        }
        assert db.claim_handoff("child") is True


# -- a connection that breaks under the store ----------------------------------------------------


def test_a_connection_whose_rollback_failed_is_dropped(tmp_path: Path) -> None:
    """The thread's SQLite connection dies under the store (closed here; a driver fault does
    the same): the call fails, its rollback fails too, and the store drops the connection, so
    the next call on the same thread works on a fresh one."""
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", "cli")
        broken = db._runner._connection()  # type: ignore[attr-defined]
        broken.close()
        with pytest.raises(HermesStateError):
            db.request_handoff("s", "telegram")
        assert db.request_handoff("s", "telegram") is True
        assert db._runner._connection() is not broken  # type: ignore[attr-defined]
        assert db.get_handoff_state("s") == {
            "state": "pending",
            "platform": "telegram",
            "error": None,
        }


# -- the command line's last resorts -------------------------------------------------------------


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
    waiter = subprocess.Popen(
        cli_argv(path, "handoff", "request", "s", "telegram", "--wait"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with SessionDB(path) as db:
            # Requested: the waiter is now following it (nothing will ever claim it).
            wait_until(lambda: db.get_handoff_state("s")["state"] == "pending", "the request")
        waiter.send_signal(signal.SIGINT)
        out, err = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 130, (out, err)
    # One line (issue 12: a request still pending when Ctrl-C comes is withdrawn, and said so).
    assert err.strip() == (
        "hermes-state: interrupted: the request for 's' was withdrawn before a gateway claimed it"
    ), err
    assert "Traceback" not in err
    with SessionDB(path) as db:
        assert db.get_handoff_state("s")["state"] == "failed"


def explode(*_args: object) -> int:
    raise ZeroDivisionError("a mistake in the command itself")


def test_an_unexpected_error_is_one_line_that_calls_itself_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]
) -> None:
    monkeypatch.setattr(handoff_command, "run_stats", explode)
    monkeypatch.delenv("HERMES_STATE_DEBUG", raising=False)
    result = cli("--url", str(tmp_path / "state.db"), "handoff", "stats")
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "unexpected ZeroDivisionError: a mistake in the command itself" in lines[0]
    assert "a bug" in lines[0]
    assert "HERMES_STATE_DEBUG=1" in lines[0]


def test_hermes_state_debug_shows_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(handoff_command, "run_stats", explode)
    monkeypatch.setenv("HERMES_STATE_DEBUG", "1")
    assert main(["--url", str(tmp_path / "state.db"), "handoff", "stats"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "ZeroDivisionError: a mistake in the command itself" in err
    assert "in explode" in err


def test_user_errors_stay_one_line_even_with_debug_on(tmp_path: Path) -> None:
    """HERMES_STATE_DEBUG is for bugs: bad input is still reported in one line, exit 2."""
    done = run_cli(
        tmp_path / "state.db",
        "handoff",
        "request",
        "",
        "telegram",
        env={**os.environ, "HERMES_STATE_DEBUG": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# -- wake-ups ------------------------------------------------------------------------------------


def test_a_failing_wake_up_callback_neither_fails_the_request_nor_silences_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", "cli")
        key = notify.database_key(db.url)
        woken: list[str] = []

        def closed_loop() -> None:
            raise RuntimeError("Event loop is closed")

        undo = [
            notify.subscribe(key, closed_loop),
            notify.subscribe(key, lambda: woken.append("ok")),
        ]
        try:
            with caplog.at_level(logging.DEBUG, logger=notify.__name__):
                assert db.request_handoff("s", "telegram") is True
        finally:
            for unsubscribe in undo:
                unsubscribe()
        assert woken == ["ok"]
        assert db.get_handoff_state("s") == {
            "state": "pending",
            "platform": "telegram",
            "error": None,
        }
        failures = [r for r in caplog.records if r.getMessage() == "wake-up callback failed"]
        assert len(failures) == 1
        assert failures[0].exc_info is not None
        assert isinstance(failures[0].exc_info[1], RuntimeError)
