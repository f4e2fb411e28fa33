"""Crash kit: real processes killed with SIGKILL at each point of a delivery and mid-migration.

Delivery, on SQLite, PostgreSQL and MariaDB: a watcher process (the real ``hermes-state watch``
CLI, or ``tests/support/crash_points.py`` running the same ``GatewayRunner`` over a store that
can stop between its steps) marks the point it reached and hangs there until the test kills it:

* ``claimed``    — the claim committed, the handler has not started;
* ``handler``    — inside the handler (through ``hermes-state watch --handler``);
* ``completing`` — the handler returned, the completion is not recorded yet.

After a restart with the same owner, nothing is left ``running`` by the dead watcher, the
affected session is reclaimed (never re-delivered behind the user's back), can be handed off
again and completes, and no other row of any table changed.

Migration: ``hermes-state db upgrade`` of a populated legacy ``state.db`` is killed while it
holds the write lock; the file is then at its old revision with every row intact, or at head,
never in between, and a later upgrade succeeds with every row intact.

Waits are polls with deadlines; nothing sleeps and hopes. The long migration variant (more
kill points, and a file at an older hermes-state revision) is opt-in:

    pytest -m slow tests/processes/test_crash_kit.py
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hermes_state import SessionDB, drift, schema
from hermes_state.engine import resolve_url
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import SERIAL, url_arg
from tests.support.digest import database_snapshot
from tests.support.legacy import build_legacy_db, row_digest, schema_entries, table_columns
from tests.support.processes import DEADLINE, cli_argv, wait_until

pytestmark = SERIAL  # kills at chosen points of a real process: never beside another such test

ROOT = Path(__file__).resolve().parents[2]
OWNER = "crash-gateway"
VICTIM = "victim"
FOREIGN_OWNER = "other-gateway"


def short_lived(target: str | Path, **options: Any) -> SessionDB:
    """A store opened for a few calls only, like an operator's command: the test process
    holds no connection of its own while the watcher processes come and go. ``target`` is an
    SQLite file or a database URL."""
    return SessionDB(target, **options)


def state_of(target: str | Path, session_id: str) -> dict[str, Any] | None:
    with short_lived(target) as db:
        return db.get_handoff_state(session_id)


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as stderr:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr
        )


# -- delivery crashes ---------------------------------------------------------------------------


def populate(target: str) -> None:
    """The victim (pending) among rows in every other situation, each with a transcript."""
    with short_lived(target) as db:
        for number, session_id in enumerate(
            (VICTIM, "never-asked", "delivered", "refused", "abandoned", "elsewhere")
        ):
            db.create_session(session_id, "cli", title=f"session {number}", started_at=number)
            db.append_message(session_id, "user", f"hello from {session_id}")
            db.append_message(session_id, "assistant", "ünïcödé reply 🚀")
        for session_id in ("delivered", "refused", "abandoned"):
            assert db.request_handoff(session_id, "discord")
        assert db.claim_handoff("delivered")
        assert db.complete_handoff("delivered")
        assert db.claim_handoff("refused")
        assert db.fail_handoff("refused", "403 Forbidden")
        assert db.fail_handoff("abandoned", "nobody came", only_states=("pending",))
        assert db.request_handoff(VICTIM, "telegram")
    # A row another gateway holds under a live lease: a restart must leave it alone.
    with short_lived(target, owner=FOREIGN_OWNER, lease_seconds=86_400.0) as other:
        assert other.request_handoff("elsewhere", "slack")
        assert other.claim_handoff("elsewhere")


def everything_but(target: str, session_id: str) -> dict[str, Any]:
    """Every row of every table, minus the session's own row and its audit events."""
    snapshot = database_snapshot(resolve_url(target))
    kept: dict[str, Any] = {}
    for table, (columns, rows) in snapshot.items():
        if table in ("sessions", "handoff_events"):
            key = columns.index("id" if table == "sessions" else "session_id")
            rows = [row for row in rows if row[key] != session_id]
        kept[table] = (columns, rows)
    return kept


def deliveries(folder: Path) -> list[str]:
    log = folder / "deliveries.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def history(target: str, session_id: str) -> list[tuple[Any, ...]]:
    with short_lived(target) as db:
        return [
            (e["from_state"], e["to_state"], e["actor"], e["attempt"], e["detail"])
            for e in db.handoff_history(session_id)
        ]


def crash_script(db: str, point: str) -> list[str]:
    """tests/support/crash_points.py: the watcher over a store that stops at ``point``."""
    script = [sys.executable, "-m", "tests.support.crash_points"]
    return [*script, "--db", db, "--owner", OWNER, "--point", point]


def watch_cli(db: str) -> list[str]:
    """The real CLI watcher, delivering with tests/support/crash_points.py's handler."""
    return [
        *cli_argv(db, "watch", "--interval", "0.02", "--owner", OWNER),
        "--handler",
        "tests.support.crash_points:deliver",
    ]


@dataclass
class Crash:
    point: str
    argv: Callable[[str], list[str]]
    delivered_before_the_kill: int


CRASHES = [
    Crash(
        "claimed",
        lambda db: crash_script(db, "claimed"),
        delivered_before_the_kill=0,
    ),
    Crash(
        "handler",
        lambda db: watch_cli(db),
        delivered_before_the_kill=1,
    ),
    Crash(
        "completing",
        lambda db: crash_script(db, "completing"),
        delivered_before_the_kill=1,
    ),
]


@pytest.mark.parametrize("crash", CRASHES, ids=[crash.point for crash in CRASHES])
def test_sigkill_at_each_point_of_a_delivery_strands_nothing(
    crash: Crash, backend_url: URL, tmp_path: Path
) -> None:
    db_path = url_arg(backend_url)  # the SQLite file's URL, or the server database's
    populate(db_path)
    before = everything_but(db_path, VICTIM)
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "CRASH_POINT": crash.point}
    log = tmp_path / "watchers.log"

    watcher = spawn(crash.argv(db_path), env, log)
    try:
        marker = tmp_path / f"{crash.point}.marker"
        wait_until(
            lambda: marker.exists() or watcher.poll() is not None,
            f"the watcher to reach the {crash.point!r} point",
        )
        assert watcher.poll() is None, f"the watcher exited early:\n{log.read_text()}"
        assert marker.read_text().split()[0] == VICTIM
        watcher.send_signal(signal.SIGKILL)
        assert watcher.wait(timeout=DEADLINE) == -signal.SIGKILL
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()

    # Killed at that point: the row is claimed by the dead watcher, delivered or not.
    assert state_of(db_path, VICTIM) == {"state": "running", "platform": "telegram", "error": None}
    assert deliveries(tmp_path) == [VICTIM] * crash.delivered_before_the_kill

    # A new watcher with the same owner: its startup reclaims the row and delivers nothing.
    env["CRASH_POINT"] = "none"
    restarted = spawn(
        watch_cli(db_path),
        env,
        log,
    )
    try:
        wait_until(
            lambda: (state_of(db_path, VICTIM) or {}).get("state") == "failed",
            "the restarted watcher to reclaim the stranded row",
        )
        assert state_of(db_path, VICTIM) == {
            "state": "failed",
            "platform": "telegram",
            "error": STRANDED_ERROR,
        }
        assert "/handoff" in STRANDED_ERROR
        assert deliveries(tmp_path) == [VICTIM] * crash.delivered_before_the_kill

        # The user runs /handoff again: accepted, and delivered exactly once more.
        with short_lived(db_path) as db:
            assert db.request_handoff(VICTIM, "telegram") is True
        wait_until(
            lambda: (state_of(db_path, VICTIM) or {}).get("state") == "completed",
            "the restarted watcher to deliver the new request",
        )
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(timeout=DEADLINE) == 0, log.read_text()
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait()

    assert "Traceback" not in log.read_text()
    assert state_of(db_path, VICTIM) == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }
    assert deliveries(tmp_path) == [VICTIM] * (crash.delivered_before_the_kill + 1)
    with short_lived(db_path) as db:
        # Nothing the dead watcher held is still running; the foreign live lease is untouched.
        assert [row["id"] for row in db.list_handoffs("running")] == ["elsewhere"]
    assert history(db_path, VICTIM) == [
        (None, "pending", "api", 0, "requested for telegram"),
        ("pending", "running", OWNER, 1, None),
        ("running", "failed", OWNER, 1, STRANDED_ERROR),
        ("failed", "pending", "api", 1, "requested for telegram"),
        ("pending", "running", OWNER, 2, None),
        ("running", "completed", OWNER, 2, None),
    ]
    assert everything_but(db_path, VICTIM) == before


# -- a migration killed while it holds the write lock -------------------------------------------


@dataclass(frozen=True)
class Original:
    """A populated file nothing has migrated yet, and its fingerprints."""

    path: Path
    revision: str | None
    entries: set[tuple[str, str, str, str | None]]
    columns: dict[str, tuple[str, ...]]
    rows: dict[str, tuple[int, str]]


def fingerprint(path: Path, revision: str | None) -> Original:
    return Original(path, revision, schema_entries(path), table_columns(path), row_digest(path))


@pytest.fixture(scope="module")
def legacy_file(tmp_path_factory: pytest.TempPathFactory) -> Original:
    """A legacy state.db (before Alembic) with enough rows that the upgrade takes a while."""
    path = tmp_path_factory.mktemp("legacy") / "state.db"
    build_legacy_db(path, with_handoff=True, sessions=12_000)
    return fingerprint(path, None)


def older_revision_file(folder: Path) -> Original:
    """A file hermes-state made at its first revision, filled with many rows."""
    path = folder / "state.db"
    schema.upgrade(resolve_url(path), "0001_baseline")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN")
        states = (None, "pending", "running", "completed", "failed")
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at, handoff_state, handoff_platform) "
            "VALUES (?, 'cli', ?, ?, ?)",
            [
                (f"old-{n:06d}", float(n), states[n % 5], None if n % 5 == 0 else "telegram")
                for n in range(30_000)
            ],
        )
        connection.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [(f"old-{n:06d}", "user", f"message {n} ünï", float(n)) for n in range(0, 30_000, 3)],
        )
        connection.execute("COMMIT")
    finally:
        connection.close()
    return fingerprint(path, "0001_baseline")


def revision_in_file(path: Path) -> str | None:
    connection = sqlite3.connect(path)
    try:
        found = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
            (schema.VERSION_TABLE,),
        ).fetchone()
        if found is None:
            return None
        rows = connection.execute(f"SELECT version_num FROM {schema.VERSION_TABLE}").fetchall()
        assert len(rows) == 1, rows
        return str(rows[0][0])
    finally:
        connection.close()


def lock_is_held(probe: sqlite3.Connection) -> bool:
    """Whether another connection holds the write lock (a BEGIN IMMEDIATE that cannot wait)."""
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        refusal = str(exc)
    else:
        probe.execute("ROLLBACK")
        return False
    assert "locked" in refusal or "busy" in refusal, refusal
    return True


def upgrade_and_kill(path: Path, held_probes: int, log: Path) -> str:
    """Start ``db upgrade``; SIGKILL it once the write lock was seen held ``held_probes`` times.

    Returns "killed" or, when the upgrade finished before that, "finished".
    """
    upgrade = spawn(cli_argv(path, "db", "upgrade"), dict(os.environ), log)
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        seen = 0
        deadline = time.monotonic() + DEADLINE
        while upgrade.poll() is None:
            if lock_is_held(probe):
                seen += 1
                if seen >= held_probes:
                    upgrade.send_signal(signal.SIGKILL)
                    upgrade.wait(timeout=DEADLINE)
                    return "killed" if upgrade.returncode == -signal.SIGKILL else "finished"
            if time.monotonic() > deadline:
                pytest.fail("the upgrade neither finished nor took the write lock")
            time.sleep(0.0002)
        assert upgrade.returncode == 0, log.read_text()
        return "finished"
    finally:
        probe.close()
        if upgrade.poll() is None:
            upgrade.kill()
            upgrade.wait()


#: What a migration itself writes: the revision, and its adoption records (a file hermes-state
#: made at an older revision has some; each later migration adds its own).
BOOKKEEPING = (schema.VERSION_TABLE, schema.ADOPTION_TABLE)


def old_rows(path: Path, original: Original) -> dict[str, tuple[int, str]]:
    """The digest of the rows and columns the file had before, bar the bookkeeping tables;
    the adoption records it had must all still be there."""
    assert adoption_records(original.path) <= adoption_records(path)
    digest = row_digest(path, original.columns)
    for table in BOOKKEEPING:
        digest.pop(table, None)
    return digest


def original_rows(original: Original) -> dict[str, tuple[int, str]]:
    return {t: d for t, d in original.rows.items() if t not in BOOKKEEPING}


def adoption_records(path: Path) -> set[tuple[Any, ...]]:
    """Every row of the adoption table (none in a file without one)."""
    connection = sqlite3.connect(path)
    try:
        return set(connection.execute(f"SELECT * FROM {schema.ADOPTION_TABLE}"))
    except sqlite3.OperationalError:  # no such table: an upstream file
        return set()
    finally:
        connection.close()


def assert_old_or_head(path: Path, original: Original) -> str | None:
    """The file is exactly as it was, or completely migrated with every old row intact."""
    revision = revision_in_file(path)
    if revision == original.revision:
        assert schema_entries(path) == original.entries, "schema changed without a new revision"
        assert row_digest(path) == original.rows
    elif revision == schema.HEAD_REVISION:
        assert drift.check(resolve_url(path)) == []
        assert old_rows(path, original) == original_rows(original)
    else:
        pytest.fail(f"half-migrated: the file says revision {revision!r}")
    return revision


def run_killed_migrations(original: Original, folder: Path, kill_points: list[int]) -> None:
    outcomes = []
    for number, held_probes in enumerate(kill_points):
        attempt = folder / f"attempt-{number}"
        attempt.mkdir()
        path = attempt / "state.db"
        shutil.copyfile(original.path, path)
        log = attempt / "upgrade.log"
        how = upgrade_and_kill(path, held_probes, log)
        assert "Traceback" not in log.read_text()
        revision = assert_old_or_head(path, original)
        outcomes.append((held_probes, how, revision))

        # A later upgrade finishes the job, whatever the kill left, and keeps every row.
        finished = subprocess.run(
            cli_argv(path, "db", "upgrade"), cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert finished.returncode == 0, finished.stderr
        assert revision_in_file(path) == schema.HEAD_REVISION
        assert drift.check(resolve_url(path)) == []
        assert old_rows(path, original) == original_rows(original)
    print("kill after N probes seeing the lock, outcome, revision left:", outcomes)
    assert any(how == "killed" for _, how, _ in outcomes), outcomes


def test_sigkill_during_a_legacy_upgrade_leaves_old_or_head(
    legacy_file: Original, tmp_path: Path
) -> None:
    # Two points in the default run; the opt-in soak below kills at ten.
    run_killed_migrations(legacy_file, tmp_path, kill_points=[8, 60])
    # The adopted file serves the legacy rows' handoffs as they were.
    path = tmp_path / "attempt-0" / "state.db"
    with short_lived(path) as db:
        connection = sqlite3.connect(legacy_file.path)
        try:
            rows = connection.execute(
                "SELECT id, handoff_state, handoff_platform, handoff_error FROM sessions "
                "WHERE rowid % 997 = 0"
            ).fetchall()
        finally:
            connection.close()
        assert rows
        for session_id, state, platform, error in rows:
            expected = {"state": state, "platform": platform, "error": error}
            assert db.get_handoff_state(session_id) == expected


@pytest.mark.slow
def test_sigkill_during_a_legacy_upgrade_at_many_points(
    legacy_file: Original, tmp_path: Path
) -> None:
    run_killed_migrations(legacy_file, tmp_path, kill_points=[1, 2, 4, 8, 15, 25, 40, 60, 90, 130])


@pytest.mark.slow
def test_sigkill_during_an_upgrade_from_an_older_revision(tmp_path: Path) -> None:
    original = older_revision_file(tmp_path / "source")
    run_killed_migrations(original, tmp_path, kill_points=[1, 3, 10, 30, 100])
