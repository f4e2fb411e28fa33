"""``hermes-state db backup`` and ``db restore`` (and ``hermes_state.backup`` beneath them): an
online copy taken while another process writes is sound and holds a consistent prefix; bad
destinations and sources are refused with nothing written; a restore goes onto an absent or
empty database only."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermes_state import SessionDB, backup
from hermes_state.errors import InvalidInputError
from tests.conftest import CliResult, require_server, throwaway_database, url_arg
from tests.support.digest import database_digest, forget
from tests.support.processes import wait_until

# A writer of its own process: sessions of five messages each (the session in one transaction,
# its five messages and its message_count in the next) until the stop file appears; the number
# of sessions written so far in the count file.
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from hermes_state import SessionDB

    db_path, stop, count = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    written = 0
    with SessionDB(db_path) as db:
        while not stop.exists():
            sid = f"w-{written:06d}"
            db.create_session(sid, "cli", model="m")
            db.append_messages_batch(
                sid, [{"role": "user", "content": f"message {n} " + "x" * 200} for n in range(5)]
            )
            written += 1
            count.with_suffix(".new").write_text(str(written))
            count.with_suffix(".new").replace(count)
    """
)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for n in range(20):
            db.create_session(f"s{n}", "cli")
            db.append_message(f"s{n}", "user", f"hello {n}")
    return path


def counts(path: Path) -> tuple[int, int]:
    with contextlib.closing(sqlite3.connect(path)) as raw:
        sessions = raw.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        messages = raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    return int(sessions), int(messages)


@pytest.fixture
def writer(state: Path, tmp_path: Path) -> Iterator[Callable[[], int]]:
    """A process writing to ``state`` until the test ends; calling it says how many sessions it
    has written so far."""
    stop, count = tmp_path / "stop", tmp_path / "count"
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(state), str(stop), str(count)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def written() -> int:
        text = count.read_text() if count.exists() else ""
        return int(text) if text.strip() else 0

    try:
        wait_until(lambda: written() >= 20, "the writer to write 20 sessions")
        yield written
    finally:
        stop.touch()
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""


def test_a_backup_taken_while_another_process_writes_is_sound_and_consistent(
    cli: Callable[..., CliResult], state: Path, tmp_path: Path, writer: Callable[[], int]
) -> None:
    dest = tmp_path / "backups" / "state-copy.db"
    dest.parent.mkdir()
    before_sessions, before_messages = counts(state)
    # One page a step: the writer commits between the steps, so the copy starts over.
    done = cli("db", "backup", str(dest), "--url", str(state), "--pages-per-step", "1", "--json")
    after_sessions, after_messages = counts(state)
    assert done.code == 0, done.err
    report = done.json()
    assert report["integrity_check"] == "ok"
    with contextlib.closing(sqlite3.connect(dest)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        orphans = raw.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
        ).fetchone()[0]
        assert orphans == 0
        # A transaction is in the copy entirely or not at all: each session's message_count
        # (written in the same transaction as its messages) matches the messages present, and a
        # writer's session holds none or all five of them.
        torn = raw.execute(
            "SELECT COUNT(*) FROM sessions s WHERE s.message_count !="
            " (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id)"
            " OR (s.id LIKE 'w-%' AND s.message_count NOT IN (0, 5))"
        ).fetchone()[0]
        assert torn == 0
    sessions, messages = counts(dest)
    assert before_sessions <= sessions <= after_sessions
    assert before_messages <= messages <= after_messages
    assert (report["copy"]["sessions"], report["copy"]["messages"]) == (sessions, messages)
    assert writer() > 20  # it kept writing
    print("restarts", report["restarts"], "seconds", report["seconds"], "sessions", sessions)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["state-copy.db"]
    with SessionDB(dest, read_only=True) as copy:
        assert copy.get_messages("s3")[0]["content"] == "hello 3"


def test_the_library_backs_up_in_steps_and_reports_progress(state: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    made = backup.backup_sqlite(
        state, tmp_path / "copy.db", pages=2, progress=lambda d, t: seen.append((d, t))
    )
    assert len(seen) > 1
    assert seen[-1][0] == seen[-1][1]
    assert (made.copy.sessions, made.copy.messages) == (20, 20)
    assert made.copy.revision == made.source.revision is not None
    assert database_digest(f"sqlite:///{tmp_path / 'copy.db'}") == database_digest(
        f"sqlite:///{state}"
    )
    with pytest.raises(InvalidInputError, match="pages"):
        backup.backup_sqlite(state, tmp_path / "other.db", pages=0)


def test_a_copy_that_fails_its_check_leaves_nothing_behind(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "backups"
    folder.mkdir()
    checked = backup.verify_sqlite

    def failing(path: Path | str) -> backup.Verified:
        if Path(path).name.endswith(".partial"):
            raise InvalidInputError("simulated: the copy fails integrity_check")
        return checked(path)

    monkeypatch.setattr(backup, "verify_sqlite", failing)
    with pytest.raises(InvalidInputError, match="simulated"):
        backup.backup_sqlite(state, folder / "copy.db")
    assert list(folder.iterdir()) == []


def test_backup_refuses_an_existing_destination_and_a_missing_folder(
    cli: Callable[..., CliResult], state: Path, tmp_path: Path
) -> None:
    existing = tmp_path / "taken.db"
    existing.write_bytes(b"mine")
    done = cli("db", "backup", str(existing), "--url", str(state))
    assert done.code == 2
    assert "exists" in done.err
    assert existing.read_bytes() == b"mine"
    missing = cli("db", "backup", str(tmp_path / "no" / "copy.db"), "--url", str(state))
    assert missing.code == 2
    assert "not a folder" in missing.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db", "taken.db"]


def test_backup_refuses_a_source_that_is_no_database(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    done = cli("db", "backup", str(tmp_path / "copy.db"), "--url", str(text))
    assert done.code == 2
    assert "not an SQLite database" in done.err
    absent = cli("db", "backup", str(tmp_path / "copy.db"), "--url", str(tmp_path / "none.db"))
    assert absent.code == 1
    assert "there is no database" in absent.err
    assert not (tmp_path / "copy.db").exists()
    assert not list(tmp_path.glob(".copy.db.*"))


def test_dry_runs_check_everything_and_write_nothing(
    cli: Callable[..., CliResult], state: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "copy.db"
    done = cli("db", "backup", str(dest), "--url", str(state), "--dry-run", "--json")
    assert done.code == 0, done.err
    assert done.json()["sessions"] == 20
    assert not dest.exists()
    assert cli("db", "backup", str(state), "--url", str(state), "--dry-run").code == 2
    assert cli("db", "backup", str(dest), "--url", str(state)).code == 0
    target = tmp_path / "restored.db"
    would = cli("db", "restore", str(dest), "--url", str(target), "--dry-run")
    assert would.code == 0
    assert "would restore" in would.out
    assert not target.exists()
    onto_rows = cli("db", "restore", str(dest), "--url", str(state), "--dry-run")
    assert onto_rows.code == 2
    assert "not empty" in onto_rows.err


def test_a_restore_goes_onto_an_absent_or_empty_database(
    cli: Callable[..., CliResult], state: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.db"
    assert cli("db", "backup", str(copy), "--url", str(state)).code == 0
    absent = tmp_path / "restored" / "state.db"
    absent.parent.mkdir()
    done = cli("db", "restore", str(copy), "--url", str(absent), "--json")
    assert done.code == 0, done.err
    assert done.json()["copy"]["sessions"] == 20
    assert database_digest(f"sqlite:///{absent}") == database_digest(f"sqlite:///{state}")
    empty = tmp_path / "empty.db"
    SessionDB(empty).close()  # at head, no rows
    assert cli("db", "restore", str(copy), "--url", str(empty)).code == 0
    with SessionDB(empty, read_only=True) as db:
        assert db.get_messages("s7")[0]["content"] == "hello 7"


def test_a_restore_refuses_a_database_with_rows_and_a_source_that_is_no_backup(
    cli: Callable[..., CliResult], state: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.db"
    assert cli("db", "backup", str(copy), "--url", str(state)).code == 0
    digest = database_digest(f"sqlite:///{state}")
    refused = cli("db", "restore", str(copy), "--url", str(state))
    assert refused.code == 2
    assert "not empty" in refused.err
    assert database_digest(f"sqlite:///{state}") == digest
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    target = tmp_path / "target.db"
    bad = cli("db", "restore", str(text), "--url", str(target))
    assert bad.code == 2
    assert "SRC:" in bad.err
    assert not target.exists()
    gone = cli("db", "restore", str(tmp_path / "none.db"), "--url", str(target))
    assert gone.code == 2
    assert not target.exists()
    damaged = tmp_path / "damaged.db"
    raw = bytearray(copy.read_bytes())
    raw[4096 : 4096 * 3] = b"\xff" * (4096 * 2)
    damaged.write_bytes(bytes(raw))
    broken = cli("db", "restore", str(damaged), "--url", str(target))
    assert broken.code == 2
    assert not target.exists()


def test_an_upstream_state_file_is_backed_up_and_restored(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    from tests.support.vintages import REAL_SCHEMA30

    upstream = tmp_path / "upstream.db"
    upstream.write_bytes(REAL_SCHEMA30.read_bytes())
    done = cli("db", "backup", str(tmp_path / "copy.db"), "--url", str(upstream), "--json")
    assert done.code == 0, done.err
    assert done.json()["copy"]["upstream_schema"] == 30
    restored = cli("db", "restore", str(tmp_path / "copy.db"), "--url", str(tmp_path / "r.db"))
    assert restored.code == 0, restored.err


def test_on_a_server_backup_names_the_dump_tool_with_the_password_masked(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    url = require_server("postgresql")
    with_password = url.set(password="s3cret-pw")
    done = cli("db", "backup", str(tmp_path / "dump.pg"), "--url", url_arg(with_password))
    assert done.code == 0
    assert "pg_dump --format=custom" in done.out
    assert "PGPASSWORD=***" in done.out
    assert "s3cret-pw" not in done.out + done.err
    assert not (tmp_path / "dump.pg").exists()
    to_server = cli("db", "restore", str(tmp_path / "x.db"), "--url", url_arg(with_password))
    assert to_server.code == 2  # SRC is checked first
    assert "s3cret-pw" not in to_server.out + to_server.err


@pytest.mark.parametrize("server", ["postgresql", "mysql"])
def test_a_restore_onto_an_empty_server_copies_the_backup_and_refuses_one_with_rows(
    cli: Callable[..., CliResult], state: Path, tmp_path: Path, server: str
) -> None:
    require_server(server)
    copy = tmp_path / "copy.db"
    assert cli("db", "backup", str(copy), "--url", str(state)).code == 0
    with throwaway_database(server) as url:
        would = cli("db", "restore", str(copy), "--url", url_arg(url), "--dry-run")
        assert would.code == 0, would.err
        done = cli("db", "restore", str(copy), "--url", url_arg(url), "--json")
        assert done.code == 0, done.err
        assert (done.json()["sessions"], done.json()["messages"]) == (20, 20)
        with SessionDB(url=url) as db:
            assert db.get_messages("s4")[0]["content"] == "hello 4"
        digest = database_digest(url)
        again = cli("db", "restore", str(copy), "--url", url_arg(url))
        assert again.code == 2
        assert "not empty" in again.err
        assert database_digest(url) == digest
        forget(url)


def test_run_dump_runs_the_servers_tool(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    import shutil

    url = require_server("postgresql")
    if shutil.which("pg_dump") is None:
        pytest.skip("pg_dump is not on PATH")
    dest = tmp_path / "dump.pg"
    started = time.monotonic()
    done = cli("db", "backup", str(dest), "--url", url_arg(url), "--run-dump", "--json")
    assert done.code == 0, done.err
    assert done.json()["ran"] is True
    assert dest.stat().st_size > 0
    assert time.monotonic() - started < 120
    again = cli("db", "backup", str(dest), "--url", url_arg(url), "--run-dump")
    assert again.code == 2
