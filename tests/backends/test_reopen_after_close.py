"""A closed SessionDB opens its database again on the next call, with a warning, as upstream's
store does (a session torn down while a worker still flushes must not lose the flush)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hermes_state import DatabaseError, InvalidInputError, SessionDB

WAIT = 60.0  # a safety net for a hung thread, never a synchronisation tool


def test_a_write_and_a_read_after_close_reopen_with_a_warning(
    backend_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    db = SessionDB(url=backend_url)
    db.create_session("s", "cli")
    db.append_message("s", "user", "before")
    db.close()
    with caplog.at_level(logging.WARNING, logger="hermes_state"):
        assert db.append_message("s", "assistant", "after") > 0
    assert [r.getMessage() for r in caplog.records if "reopening" in r.getMessage()]
    db.close()
    db.close()  # twice: nothing to do
    assert [m["content"] for m in db.get_messages("s")] == ["before", "after"]
    db.close()


def test_conn_is_none_once_closed(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    assert db._conn is not None
    db.close()
    assert db._conn is None
    db.create_session("s", "cli")  # reopens
    assert db._conn is not None
    db._conn = None  # upstream's way of closing under a running store
    assert db._conn is None
    assert db.get_session("s") is not None  # reopened again
    with pytest.raises(InvalidInputError):
        db._conn = sqlite3.connect(":memory:")  # type: ignore[assignment]
    db.close()


def test_closing_under_a_busy_writer_loses_nothing(backend_url: URL) -> None:
    db = SessionDB(url=backend_url)
    db.create_session("s", "cli")
    started = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for n in range(40):
                db.append_message("s", "user", f"m{n}")
                started.set()
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    assert started.wait(WAIT)
    db.close()
    db.close()
    writer.join(WAIT)
    assert errors == []
    assert [m["content"] for m in db.get_messages("s")] == [f"m{n}" for n in range(40)]
    db.close()


def test_a_read_only_store_refuses_after_close(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
    reader = SessionDB(path, read_only=True)
    assert reader.get_session("s") is not None
    reader.close()
    with pytest.raises(DatabaseError, match="closed"):
        reader.get_messages("s")
