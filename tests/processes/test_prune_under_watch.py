"""A prune of thousands of old sessions on an SQLite file while a real ``hermes-state watch``
delivers handoffs on it: every handoff requested is delivered exactly once (a session whose
handoff is pending or running is never pruned), the prune deletes everything else that is
old, and the watcher keeps delivering between the prune's batches."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from tests.conftest import SERIAL, database_at_head
from tests.support.processes import Watcher, cli_argv, wait_until

pytestmark = SERIAL

HANDLER = """\
import os
from pathlib import Path


def deliver(row, profile_name):
    with open(Path(os.environ["PRUNE_RUN_DIR"]) / "deliveries.log", "a") as log:
        log.write(row["id"] + "\\n")
"""

OLD_SESSIONS = 3000
DAY = 86400.0


@pytest.fixture
def url(tmp_path: Path) -> Iterator[URL]:
    with database_at_head("sqlite", tmp_path / "db") as database:
        yield database


def fill(path: str, count: int) -> None:
    """``count`` sessions ended 400 days ago, two messages each, by bulk insert."""
    old = time.time() - 400 * DAY
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, message_count)"
            " VALUES (?, 'cli', ?, ?, 'done', 2)",
            ((f"old-{index:05d}", old + index, old + index + 1) for index in range(count)),
        )
        connection.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (
                (f"old-{index:05d}", role, f"{role} {index}", old + index)
                for index in range(count)
                for role in ("user", "assistant")
            ),
        )
        connection.execute("COMMIT")
    finally:
        connection.close()


def test_a_prune_never_takes_a_session_whose_handoff_is_in_flight(url: URL, tmp_path: Path) -> None:
    path = str(url.database)
    fill(path, OLD_SESSIONS)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "prune_handler.py").write_text(HANDLER)
    env = {
        **os.environ,
        "PRUNE_RUN_DIR": str(run_dir),
        "PYTHONPATH": os.pathsep.join([str(run_dir), os.environ.get("PYTHONPATH", "")]),
    }
    argv = cli_argv(
        url, "watch", "--handler", "prune_handler:deliver", "--owner", "gw", "--interval", "0.05"
    )
    watcher = Watcher(argv, env, name="the watcher")
    requested: list[str] = []
    pruning = threading.Event()
    done = threading.Event()

    def request_while_pruning() -> None:
        # Old sessions the prune reaches late (it walks ids in order), and new ones.
        with SessionDB(url=url) as requester:
            pruning.wait(10)
            index = 0
            while not done.is_set() or index < 10:
                target = f"old-{OLD_SESSIONS - 1 - index:05d}" if index % 2 else f"new-{index}"
                if target.startswith("new-"):
                    requester.create_session(target, "cli")
                if requester.request_handoff(target, "telegram"):
                    requested.append(target)
                index += 1
                time.sleep(0.01)

    requester = threading.Thread(target=request_while_pruning)
    requester.start()
    try:
        with SessionDB(url=url) as db:
            pruning.set()
            report = db.prune_report(90)
        done.set()
        requester.join(30)
        log = run_dir / "deliveries.log"

        def every_request_delivered() -> bool:
            return log.exists() and set(requested) <= set(log.read_text().split())

        wait_until(every_request_delivered, "the watcher to deliver every handoff requested")
    finally:
        done.set()
        requester.join(30)
        watcher.process.send_signal(signal.SIGTERM)
        assert watcher.wait() == 0, watcher.log
    assert "Traceback" not in watcher.log, watcher.log
    delivered = Counter(log.read_text().split())
    assert set(delivered) == set(requested)
    assert max(delivered.values()) == 1, delivered.most_common(3)
    old_requested = [sid for sid in requested if sid.startswith("old-")]
    assert old_requested, "no old session was requested while the prune ran"
    assert report["batches"] > 10  # many short transactions, not one long one
    connection = sqlite3.connect(path)
    try:
        left = {row[0] for row in connection.execute("SELECT id FROM sessions")}
        orphans = connection.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
        ).fetchone()[0]
    finally:
        connection.close()
    assert orphans == 0
    assert {sid for sid in requested if sid.startswith("new-")} <= left
    # An old session left was in flight when the prune reached it; every other one went.
    old_left = {sid for sid in left if sid.startswith("old-")}
    assert old_left <= set(old_requested)
    assert report["sessions"] == OLD_SESSIONS - len(old_left)
