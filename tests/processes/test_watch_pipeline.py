"""The watcher's batch pipeline with real ``hermes-state watch`` processes, on every backend.

* Several watchers drain one backlog: every row is delivered exactly once, by the gateway
  whose claim the audit trail records, with one event per row per transition.
* A watcher killed (SIGKILL) after a delivery finished but before its flush committed: a
  completion it reported done is in the database; the unflushed one is not, and the next
  start fails that row with the re-run hint, never completing it silently or stranding it.
* SIGTERM while completions wait for their flush: the drain records them, even past
  ``--drain-timeout``.
* Turns under batching: a local turn held by another process keeps its row pending while the
  watcher delivers newer rows; two pending segments of one conversation are delivered one
  after the other.

The flush is held by a lock the test takes on the database (the victim's row on a server,
SQLite's write lock), never by a sleep. Each delivery goes through the handler module below:
it logs its start and end and, for a session whose ``hold-ID`` file exists, marks that it
started and waits for its ``go-ID`` file, which the test creates. Waits are polls with
deadlines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import with_driver
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import BACKENDS, SERIAL, database_at_head
from tests.support.processes import DEADLINE, Watcher, cli_argv, wait_until

pytestmark = SERIAL  # real watchers killed and drained mid-delivery, as in test_watch_crash

HANDLER = """\
import os, time
from pathlib import Path

RUN = Path(os.environ["PIPELINE_DIR"])


def _log(what, session_id):
    with open(RUN / "deliveries.log", "a") as log:
        log.write(f"{what} {session_id} {os.getpid()}\\n")


def deliver(row, profile_name):
    session_id = row["id"]
    _log("start", session_id)
    if (RUN / f"hold-{session_id}").exists():
        (RUN / f"started-{session_id}").touch()
        while not (RUN / f"go-{session_id}").exists():
            time.sleep(0.01)
    _log("end", session_id)
"""


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A database of its own, at head (several processes write it)."""
    with database_at_head(request.param, tmp_path / "db") as database:
        yield database


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "pipeline_handler.py").write_text(HANDLER)
    return folder


@pytest.fixture
def env(run_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PIPELINE_DIR": str(run_dir),
        "PYTHONPATH": os.pathsep.join([str(run_dir), os.environ.get("PYTHONPATH", "")]),
    }


def watcher(url: URL, env: dict[str, str], owner: str, *options: str) -> Watcher:
    argv = cli_argv(
        url,
        "watch",
        "--handler",
        "pipeline_handler:deliver",
        "--owner",
        owner,
        "--interval",
        "0.05",
        "--max-concurrency",
        "10",
        *options,
    )
    return Watcher(argv, env, name=f"watcher {owner}")


def stop(*watchers: Watcher) -> None:
    """SIGTERM each, and check each drained and exited cleanly."""
    for each in watchers:
        each.process.send_signal(signal.SIGTERM)
    for each in watchers:
        assert each.wait() == 0, each.log
        assert "Traceback" not in each.log, each.log


def deliveries(run_dir: Path) -> list[tuple[str, str, int]]:
    log = run_dir / "deliveries.log"
    if not log.exists():
        return []
    return [
        (what, session_id, int(pid))
        for what, session_id, pid in (line.split() for line in log.read_text().splitlines())
    ]


def ended(run_dir: Path, session_id: str) -> bool:
    return ("end", session_id) in [(what, sid) for what, sid, _pid in deliveries(run_dir)]


def state(url: URL, session_id: str) -> dict[str, Any] | None:
    with SessionDB(url=url) as db:  # short-lived: no connection held across the test
        return db.get_handoff_state(session_id)


def history(url: URL, session_id: str) -> list[tuple[Any, ...]]:
    with SessionDB(url=url) as db:
        return [
            (e["from_state"], e["to_state"], e["actor"], e["attempt"], e["detail"])
            for e in db.handoff_history(session_id)
        ]


def make_pending(url: URL, *session_ids: str, started_at: float = 1000.0) -> None:
    with SessionDB(url=url) as db:
        for index, session_id in enumerate(session_ids):
            db.create_session(session_id, "cli", started_at=started_at + index)
            assert db.request_handoff(session_id, "telegram") is True


def completed_lines(process: Watcher) -> list[str]:
    """The ids the watcher said it completed (one log line per flush)."""
    done: list[str] = []
    for line in process.lines:
        if "completed " in line and "handoff(s): " in line:
            done.extend(line.rsplit("handoff(s): ", 1)[1].strip().split(", "))
    return done


def requested(session_id: str) -> tuple[Any, ...]:
    return (None, "pending", "api", 0, "requested for telegram")


# -- a lock the test holds on the database ------------------------------------------------------


@contextlib.contextmanager
def holding_row(url: URL, session_id: str) -> Iterator[None]:
    """Block every write to ``session_id``'s row (on SQLite: every write) until the block
    ends: a transaction of the test's own that locks it."""
    if url.get_backend_name() == "sqlite":
        connection = sqlite3.connect(str(url.database), isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            yield
        finally:
            connection.execute("ROLLBACK")
            connection.close()
        return
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        with engine.connect() as connection, connection.begin():
            connection.execute(
                text("SELECT id FROM sessions WHERE id = :id FOR UPDATE"), {"id": session_id}
            )
            yield
    finally:
        engine.dispose()


def a_write_waits_on_a_lock(url: URL) -> bool:
    """Whether a connection to this database is waiting for a row lock (servers; SQLite cannot
    tell)."""
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        with engine.connect() as connection:
            if url.get_backend_name() == "postgresql":
                sql = (
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
            else:
                # Only this database's waits: another test's, on the other xdist worker or
                # in another run on the same server, must not answer for this one.
                sql = (
                    "SELECT count(*) FROM information_schema.innodb_trx AS t "
                    "JOIN information_schema.processlist AS p ON p.id = t.trx_mysql_thread_id "
                    "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
                )
            return bool(connection.execute(text(sql)).scalar_one())
    finally:
        engine.dispose()


def wait_for_the_blocked_flush(url: URL) -> None:
    if url.get_backend_name() != "sqlite":
        wait_until(lambda: a_write_waits_on_a_lock(url), "the flush to wait for the test's lock")


def abandon_the_statements_of_dead_clients(url: URL) -> None:
    """PostgreSQL: check every 50 ms that a client whose statement runs is still there, as a
    production server should (``client_connection_check_interval``). Without it a flush
    already sent, waiting on a lock, would still commit once the lock is free, though its
    watcher died (its deliveries did end, so the rows would be completed: an in-doubt commit,
    not the crash this file is about)."""
    if url.get_backend_name() == "postgresql":
        engine = create_engine(with_driver(url, asyncio=False), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(
                    text(
                        f'ALTER DATABASE "{url.database}" '
                        "SET client_connection_check_interval = '50ms'"
                    )
                )
        finally:
            engine.dispose()


def the_dead_watchers_flush_is_gone(url: URL) -> None:
    """After the kill: on PostgreSQL the server abandons the flush waiting on the lock (see
    above); on MariaDB that flush is a transaction whose COMMIT can never come; SQLite's died
    with the process."""
    if url.get_backend_name() == "postgresql":
        wait_until(
            lambda: not a_write_waits_on_a_lock(url), "the server to drop the dead watcher's flush"
        )


# -- several watchers, one backlog ------------------------------------------------------------


def test_several_watchers_deliver_each_row_exactly_once(
    url: URL, env: dict[str, str], run_dir: Path
) -> None:
    owners = ["gw-a", "gw-b", "gw-c"]
    watchers = [watcher(url, env, owner) for owner in owners]
    rows = [f"row-{n:03d}" for n in range(150)]
    try:
        for each in watchers:
            each.wait_for_line("watching ")
        make_pending(url, *rows)  # while all three poll
        with SessionDB(url=url) as db:
            wait_until(
                lambda: db.handoff_stats()["counts"]["completed"] == len(rows),
                "the watchers to drain the backlog",
                deadline=DEADLINE * 2,
            )
        stop(*watchers)
    finally:
        for each in watchers:
            each.kill()

    owner_of = {each.process.pid: owner for each, owner in zip(watchers, owners, strict=True)}
    log = deliveries(run_dir)
    assert Counter(session_id for what, session_id, _pid in log if what == "start") == Counter(
        dict.fromkeys(rows, 1)
    )
    delivered_by = {session_id: owner_of[pid] for what, session_id, pid in log if what == "end"}
    assert sorted(delivered_by) == rows
    for session_id in rows:
        owner = delivered_by[session_id]
        assert history(url, session_id) == [
            requested(session_id),
            ("pending", "running", owner, 1, None),
            ("running", "completed", owner, 1, None),
        ], session_id
    said = Counter(done for each in watchers for done in completed_lines(each))
    assert said == Counter(dict.fromkeys(rows, 1))
    print(f"\n[pipeline] deliveries per gateway: {Counter(delivered_by.values())}")


# -- a crash between a delivery's end and its flush ---------------------------------------------


def test_a_completion_reported_done_survives_a_kill_and_an_unflushed_one_is_reclaimed(
    url: URL, env: dict[str, str], run_dir: Path
) -> None:
    abandon_the_statements_of_dead_clients(url)
    make_pending(url, "first", "victim")
    (run_dir / "hold-victim").touch()
    gateway = watcher(url, env, "gw-crash")
    try:
        wait_until(lambda: "first" in completed_lines(gateway), "first to be reported done")
        wait_until(lambda: (run_dir / "started-victim").exists(), "victim's delivery to start")
        with holding_row(url, "victim"):
            (run_dir / "go-victim").touch()
            wait_until(
                lambda: ended(run_dir, "victim"),
                "victim's delivery to end",
            )
            wait_for_the_blocked_flush(url)
            gateway.process.send_signal(signal.SIGKILL)
            assert gateway.wait() == -signal.SIGKILL
            the_dead_watchers_flush_is_gone(url)
    finally:
        gateway.kill()

    # What it reported done is recorded; what it could not flush is not, and was not reported.
    assert history(url, "first")[1:] == [
        ("pending", "running", "gw-crash", 1, None),
        ("running", "completed", "gw-crash", 1, None),
    ]
    assert "victim" not in completed_lines(gateway)
    assert state(url, "victim") == {"state": "running", "platform": "telegram", "error": None}
    assert history(url, "victim")[1:] == [("pending", "running", "gw-crash", 1, None)]

    restarted = watcher(url, env, "gw-crash")
    try:
        wait_until(
            lambda: (state(url, "victim") or {}).get("state") == "failed",
            "the next start to reclaim the victim",
        )
        stop(restarted)
    finally:
        restarted.kill()
    assert state(url, "victim") == {
        "state": "failed",
        "platform": "telegram",
        "error": STRANDED_ERROR,
    }
    assert history(url, "victim")[1:] == [
        ("pending", "running", "gw-crash", 1, None),
        ("running", "failed", "gw-crash", 1, STRANDED_ERROR),
    ]
    starts = [s for w, s, _ in deliveries(run_dir) if w == "start"]
    assert starts.count("victim") == 1  # never delivered again behind the user's back
    assert "victim" not in completed_lines(restarted)


# -- the drain flushes what is queued ----------------------------------------------------------


def test_sigterm_flushes_queued_completions_even_past_the_drain_timeout(
    url: URL, env: dict[str, str], run_dir: Path
) -> None:
    make_pending(url, "a", "b")
    for session_id in ("a", "b"):
        (run_dir / f"hold-{session_id}").touch()
    gateway = watcher(url, env, "gw-drain", "--drain-timeout", "0.2")
    try:
        for session_id in ("a", "b"):
            wait_until(
                lambda sid=session_id: (run_dir / f"started-{sid}").exists(),
                f"{session_id}'s delivery to start",
            )
        with holding_row(url, "a"):
            for session_id in ("a", "b"):  # a's flush waits on the lock, b's behind it
                (run_dir / f"go-{session_id}").touch()
                wait_until(
                    lambda sid=session_id: (
                        ("end", sid) in [(w, s) for w, s, _ in deliveries(run_dir)]
                    ),
                    f"{session_id}'s delivery to end",
                )
            wait_for_the_blocked_flush(url)
            gateway.process.send_signal(signal.SIGTERM)
            gateway.wait_for_line("cancelled 2 delivery(ies) still running after 0.2s")
            gateway.assert_alive()  # still flushing: nothing it owes is dropped
        assert gateway.wait() == 0, gateway.log
    finally:
        gateway.kill()

    assert "Traceback" not in gateway.log
    for session_id in ("a", "b"):
        assert state(url, session_id) == {
            "state": "completed",
            "platform": "telegram",
            "error": None,
        }
        assert history(url, session_id)[1:] == [
            ("pending", "running", "gw-drain", 1, None),
            ("running", "completed", "gw-drain", 1, None),
        ]
    assert sorted(completed_lines(gateway)) == ["a", "b"]


# -- turns under batching ---------------------------------------------------------------------


def a_conversation(url: URL, *, root_pending: bool) -> None:
    """``root`` ended by compression and ``seg`` continues it (one turn lease, keyed
    ``root``); ``seg`` pending, and ``root`` too when asked."""
    with SessionDB(url=url) as db:
        db.create_session("root", "cli", started_at=1.0, end_reason="compression")
        db.create_session("seg", "cli", started_at=2.0, parent_session_id="root")
        if root_pending:
            assert db.request_handoff("root", "telegram") is True
        assert db.request_handoff("seg", "telegram") is True


def deliver_a_newer_row(url: URL, gateway: Watcher, session_id: str, started_at: float) -> None:
    """Request a row newer than everything pending and wait until it is completed: the tick
    that claimed it looked at every older pending row first."""
    make_pending(url, session_id, started_at=started_at)
    wait_until(
        lambda: (state(url, session_id) or {}).get("state") == "completed",
        f"{session_id} to be delivered",
    )
    gateway.assert_alive()


def test_a_local_turn_of_another_process_keeps_its_row_pending(
    url: URL, env: dict[str, str], run_dir: Path
) -> None:
    a_conversation(url, root_pending=False)
    with SessionDB(url=url) as local:  # a local turn, in this (another) process
        assert local.try_acquire_session_turn_lease("seg", "local-turn", ttl_seconds=600.0)
    gateway = watcher(url, env, "gw-turns")
    try:
        for number in range(3):
            deliver_a_newer_row(url, gateway, f"newer-{number}", started_at=100.0 + number)
        assert state(url, "seg") == {"state": "pending", "platform": "telegram", "error": None}
        assert "seg" not in [s for _w, s, _pid in deliveries(run_dir)]

        with SessionDB(url=url) as local:
            local.release_session_turn_lease("seg", "local-turn")
        wait_until(
            lambda: (state(url, "seg") or {}).get("state") == "completed", "seg to be delivered"
        )
        stop(gateway)
    finally:
        gateway.kill()
    assert history(url, "seg")[1:] == [
        ("pending", "running", "gw-turns", 1, None),
        ("running", "completed", "gw-turns", 1, None),
    ]
    with SessionDB(url=url) as db:  # the watcher gave its own lease back
        assert db.try_acquire_session_turn_lease("root", "next-local-turn") is True


def test_two_segments_of_one_conversation_are_never_delivered_at_once(
    url: URL, env: dict[str, str], run_dir: Path
) -> None:
    a_conversation(url, root_pending=True)
    (run_dir / "hold-root").touch()
    gateway = watcher(url, env, "gw-segments")
    try:
        wait_until(lambda: (run_dir / "started-root").exists(), "root's delivery to start")
        for number in range(3):
            deliver_a_newer_row(url, gateway, f"newer-{number}", started_at=100.0 + number)
        assert state(url, "seg") == {"state": "pending", "platform": "telegram", "error": None}

        (run_dir / "go-root").touch()
        wait_until(
            lambda: (state(url, "seg") or {}).get("state") == "completed", "seg to be delivered"
        )
        stop(gateway)
    finally:
        gateway.kill()
    order = [(what, session_id) for what, session_id, _pid in deliveries(run_dir)]
    conversation = [step for step in order if step[1] in ("root", "seg")]
    assert conversation == [("start", "root"), ("end", "root"), ("start", "seg"), ("end", "seg")]
