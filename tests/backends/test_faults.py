"""Faults: a database error in the middle of a dispatch leaves a consistent state and a clear
message, and the watcher keeps running and recovers once the fault clears.

Real faults where they can be made:

* **disk full** — SQLite's ``PRAGMA max_page_count`` on every connection of the store's engine,
  and the file filled up to that size. The fill is made of copies of the audit event the next
  write will record, so that write finds no room in any page it touches: it fails every time,
  whatever the page layout.
* **read-only** — the tests run as root, and root ignores file permissions (``chmod 0444`` on
  the file and its folder changes nothing for it). So a real read-only file system is used
  where possible: ``unshare --mount`` gives the child process a private mount namespace with the
  folder bind-mounted read-only. A file system cannot turn read-only under a process that has
  the file open for writing (the kernel refuses the remount: "mount point is busy"), so a
  mid-operation read-only database is simulated with ``PRAGMA query_only = ON`` on the store's
  connections, which SQLite reports exactly like a read-only file.
* **connection dropped** — ``pg_terminate_backend`` of the store's PostgreSQL connections, in the
  middle of a transaction and between transactions.

The watcher's own contract (keep ticking, leave rows consistent, deliver everything once the
fault clears) is also checked with a store wrapper that raises translated database errors from
chosen methods for a while: there the contract is about the watcher, not the database.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import shutil
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL

from gateway.run import GatewayRunner
from hermes_state import AsyncSessionDB, SessionDB
from hermes_state.errors import (
    DatabaseError,
    DatabaseUnavailableError,
    DiskFullError,
    HermesStateError,
    ReadOnlyDatabaseError,
    translate,
)
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import empty_tables, sqlite_url
from tests.support.digest import database_digest, sync_url
from tests.support.processes import CLI, eventually, wait_until

DEADLINE = 20.0
OWNER = "fault-gateway"
T0 = 1_700_000_000.0


class ConnectionHook:
    """Runs PRAGMAs on every DBAPI connection of one store's engine, present and future.

    New connections get ``on_checkout`` statements when a thread first takes them from the
    pool; ``run`` applies a statement to the connections already out. Call ``run`` only while
    the store is idle (it touches connections that belong to other threads).
    """

    def __init__(self, store: SessionDB) -> None:
        self.connections: list[Any] = []
        self.on_checkout: list[str] = []
        self._lock = threading.Lock()
        # The store exposes no engine; the runner's is the one its connections come from.
        engine = store._runner._engine
        event.listen(engine, "checkout", self._checkout)

    def _checkout(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        with self._lock:
            if dbapi_connection not in self.connections:
                self.connections.append(dbapi_connection)
            statements = list(self.on_checkout)
        for statement in statements:
            dbapi_connection.execute(statement)

    def run(self, statement: str) -> None:
        with self._lock:
            self.on_checkout.append(statement)
            connections = list(self.connections)
        for connection in connections:
            connection.execute(statement)


def page_count(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("PRAGMA page_count").fetchone()[0])
    finally:
        connection.close()


def max_event_id(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(
            connection.execute("SELECT coalesce(max(id), 0) FROM handoff_events").fetchone()[0]
        )
    finally:
        connection.close()


Event = tuple[str, str | None, str, float, str | None, int | None, str | None]


def fill_with_copies_of(path: Path, event_row: Event, pages: int) -> int:
    """Grow the file to ``pages`` pages with copies of an audit event, until nothing fits.

    The last copy that failed went exactly where the real event will go (same key in every
    index, same size), so the real write cannot fit either. Returns how many copies went in.
    """
    connection = sqlite3.connect(path, isolation_level=None, timeout=30)
    copies = 0
    try:
        connection.execute(f"PRAGMA max_page_count = {pages}")
        while True:
            try:
                connection.execute(
                    "INSERT INTO handoff_events "
                    "(session_id, from_state, to_state, at, actor, attempt, detail) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    event_row,
                )
            except sqlite3.OperationalError as exc:
                refusal = str(exc)
                break
            copies += 1
        assert "full" in refusal, refusal
        return copies
    finally:
        connection.close()


def delete_events_after(path: Path, last_real_id: int, count: int | None = None) -> None:
    """Delete the ``count`` events after ``last_real_id`` (all of them for None)."""
    last = last_real_id + count if count is not None else 2**62
    connection = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        connection.execute(
            "DELETE FROM handoff_events WHERE id > ? AND id <= ?", (last_real_id, last)
        )
    finally:
        connection.close()


def history(db: SessionDB, session_id: str, last_real_id: int | None = None) -> list[tuple]:
    return [
        (e["from_state"], e["to_state"], e["attempt"], e["detail"])
        for e in db.handoff_history(session_id)
        if last_real_id is None or e["id"] <= last_real_id
    ]


def one_clear_line(error: BaseException, *fragments: str) -> None:
    message = str(error)
    assert "\n" not in message.strip(), message
    for fragment in fragments:
        assert fragment in message, message


# -- disk full ----------------------------------------------------------------------------------

# Each write, how to bring the session to just before it, and the event it will record
# (session, from, to, attempt, detail; time and actor are added by the test).
DISK_FULL_WRITES: dict[
    str, tuple[Callable[[SessionDB], Any], Callable[[SessionDB], Any], tuple]
] = {
    "request": (
        lambda db: None,
        lambda db: db.request_handoff("s", "telegram"),
        ("s", None, "pending", 0, "requested for telegram"),
    ),
    "claim": (
        lambda db: db.request_handoff("s", "telegram"),
        lambda db: db.claim_handoff("s"),
        ("s", "pending", "running", 1, None),
    ),
    "complete": (
        lambda db: db.request_handoff("s", "telegram") and db.claim_handoff("s"),
        lambda db: db.complete_handoff("s"),
        ("s", "running", "completed", 1, None),
    ),
    "fail": (
        lambda db: db.request_handoff("s", "telegram") and db.claim_handoff("s"),
        lambda db: db.fail_handoff("s", "bounced"),
        ("s", "running", "failed", 1, "bounced"),
    ),
    "reclaim": (
        lambda db: db.request_handoff("s", "telegram") and db.claim_handoff("s"),
        lambda db: db.reclaim_stale_running_handoffs(STRANDED_ERROR),
        ("s", "running", "failed", 1, STRANDED_ERROR),
    ),
}


@pytest.mark.parametrize("write", sorted(DISK_FULL_WRITES))
def test_a_full_disk_refuses_the_write_whole_and_it_works_once_there_is_room(
    write: str, tmp_path: Path
) -> None:
    prepare, attempt, (sid, from_state, to_state, attempt_no, detail) = DISK_FULL_WRITES[write]
    path = tmp_path / "state.db"
    url = sqlite_url(tmp_path)
    with SessionDB(path, owner=OWNER, lease_seconds=60.0, clock=lambda: T0) as db:
        hook = ConnectionHook(db)
        db.create_session("s", "cli")
        db.create_session("bystander", "cli")
        db.append_message("s", "user", "hello")
        prepare(db)
        last_real = max_event_id(path)
        pages = page_count(path)
        hook.run(f"PRAGMA max_page_count = {pages}")
        copy = (sid, from_state, to_state, T0, OWNER, attempt_no, detail)
        copies = fill_with_copies_of(path, copy, pages)
        before = database_digest(url)
        state_before = db.get_handoff_state("s")

        with pytest.raises(DiskFullError) as refused:
            attempt(db)
        one_clear_line(refused.value, str(path), "is full", "free space")
        assert database_digest(url) == before, "a refused write left something behind"
        assert db.get_handoff_state("s") == state_before  # reads still work

        # Bigger writes are refused the same way (a transcript entry needs new pages).
        with pytest.raises(DiskFullError):
            db.append_message("bystander", "user", "x" * 20_000)
        assert database_digest(url) == before

        hook.run("PRAGMA max_page_count = 1000000")  # the disk has room again
        result = attempt(db)
        assert result in (True, ["s"]), result
        assert db.get_handoff_state("s")["state"] == to_state
        delete_events_after(path, last_real, copies)  # the filler; the real event stays
        real = [e for e in history(db, "s") if e[1] == to_state and e[0] == from_state]
        assert real[-1] == (from_state, to_state, attempt_no, detail)
        assert db.append_message("bystander", "user", "x" * 20_000) > 0


@pytest.mark.asyncio
async def test_a_watcher_whose_completion_hits_a_full_disk_keeps_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.run")
    path = tmp_path / "state.db"
    store = SessionDB(path, owner=OWNER, lease_seconds=60.0)
    hook = ConnectionHook(store)
    store.create_session("victim", "cli")
    store.create_session("later", "cli")
    assert store.request_handoff("victim", "telegram")
    pages = page_count(path) + 2  # room for the claim; then the handler fills the rest
    hook.run(f"PRAGMA max_page_count = {pages}")
    last_real = 0
    delivered: list[str] = []

    async def deliver(row: Any, _profile: str | None) -> None:
        nonlocal last_real
        delivered.append(row["id"])
        if row["id"] == "victim":  # mid-dispatch, the disk fills up
            last_real = await asyncio.to_thread(max_event_id, path)
            copy = ("victim", "running", "completed", time.time(), OWNER, 1, None)
            await asyncio.to_thread(fill_with_copies_of, path, copy, pages)

    def logged(fragment: str) -> bool:
        return any(fragment in record.getMessage() for record in caplog.records)

    runner = GatewayRunner(store, deliver, interval=0.01)
    serving = asyncio.ensure_future(runner.run())
    try:
        await eventually(
            lambda: logged("could not record the outcome of victim"),
            "the completion to fail",
            deadline=DEADLINE,
        )
        failure = next(r for r in caplog.records if "outcome of victim" in r.getMessage())
        assert failure.exc_info is not None
        assert isinstance(failure.exc_info[1], DiskFullError)
        one_clear_line(failure.exc_info[1], "is full", "free space")
        # Consistent: still running under this gateway, not half-completed.
        assert store.get_handoff_state("victim") == {
            "state": "running",
            "platform": "telegram",
            "error": None,
        }
        assert history(store, "victim", last_real)[-1] == ("pending", "running", 1, None)

        # The fault clears (the filler goes); the same watcher serves the next request.
        await asyncio.to_thread(delete_events_after, path, last_real)
        assert await asyncio.to_thread(store.request_handoff, "later", "discord")
        await eventually(
            lambda: store.get_handoff_state("later")["state"] == "completed",
            "the watcher to deliver after the fault cleared",
            deadline=DEADLINE,
        )
        assert not serving.done()
    finally:
        runner.stop()
        await serving
    assert delivered == ["victim", "later"]
    assert store.get_handoff_state("victim")["state"] == "running"
    store.close()

    # The next start of this gateway reclaims the row whose completion was lost.
    again = SessionDB(path, owner=OWNER, lease_seconds=60.0)
    runner = GatewayRunner(again, deliver, interval=0.01)
    serving = asyncio.ensure_future(runner.run())
    try:
        await eventually(
            lambda: again.get_handoff_state("victim")["state"] == "failed",
            "the reclaim",
            deadline=DEADLINE,
        )
        assert again.get_handoff_state("victim")["error"] == STRANDED_ERROR
        assert await asyncio.to_thread(again.request_handoff, "victim", "telegram")
        await eventually(
            lambda: again.get_handoff_state("victim")["state"] == "completed",
            "the re-requested delivery",
            deadline=DEADLINE,
        )
    finally:
        runner.stop()
        await serving
        await runner.close()
    assert delivered == ["victim", "later", "victim"]


# -- read-only ----------------------------------------------------------------------------------

READ_ONLY_WRITES: dict[str, Callable[[SessionDB], Any]] = {
    "create_session": lambda db: db.create_session("new", "cli"),
    "append_message": lambda db: db.append_message("s", "user", "hi"),
    "request": lambda db: db.request_handoff("idle", "telegram"),
    "claim": lambda db: db.claim_handoff("waiting"),
    "complete": lambda db: db.complete_handoff("s"),
    "fail": lambda db: db.fail_handoff("s", "nope"),
    "reclaim": lambda db: db.reclaim_stale_running_handoffs(STRANDED_ERROR),
    "renew": lambda db: db.renew_handoff_leases(["s"]),
    "raw write": lambda db: db._execute_write(
        lambda conn: conn.execute("UPDATE sessions SET title = ? WHERE id = ?", ("t", "s"))
    ),
}


@pytest.mark.parametrize("write", sorted(READ_ONLY_WRITES))
def test_a_read_only_database_refuses_writes_clearly_and_recovers(
    write: str, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    with SessionDB(url=url, owner=OWNER, lease_seconds=60.0) as db:
        hook = ConnectionHook(db)
        for sid in ("s", "idle", "waiting"):
            db.create_session(sid, "cli")
        assert db.request_handoff("s", "telegram")
        assert db.claim_handoff("s")
        assert db.request_handoff("waiting", "telegram")
        before = database_digest(url)

        hook.run("PRAGMA query_only = ON")
        with pytest.raises(ReadOnlyDatabaseError) as refused:
            READ_ONLY_WRITES[write](db)
        one_clear_line(refused.value, str(url.database), "read-only", "permissions")
        assert database_digest(url) == before
        assert db.get_handoff_state("s")["state"] == "running"  # reads still work

        hook.run("PRAGMA query_only = OFF")
        READ_ONLY_WRITES[write](db)
        assert database_digest(url) != before


def unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "true"], capture_output=True, check=False, timeout=DEADLINE
    )
    return probe.returncode == 0


@pytest.mark.parametrize("open_elsewhere", [True, False], ids=["in-use", "closed"])
def test_a_read_only_file_system_gives_a_clear_error(open_elsewhere: bool, tmp_path: Path) -> None:
    if not unshare_works():
        pytest.skip("needs unshare --mount (a private mount namespace) to mount read-only")
    folder = tmp_path / "ro"
    url = sqlite_url(folder)
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
    before = database_digest(url)
    holder = SessionDB(url=url) if open_elsewhere else None
    try:
        if holder is not None:
            holder.get_handoff_state("s")  # a live gateway keeps the -wal and -shm files
        cli = shlex.join([*CLI, "--url", str(url.database)])
        place = shlex.quote(str(folder))
        script = (
            f"mount --bind -o ro {place} {place} && "
            f"{cli} handoff request s telegram; echo request=$?; "
            f"{cli} handoff show s; echo show=$?"
        )
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", script],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            check=False,
            timeout=DEADLINE,
        )
    finally:
        if holder is not None:
            holder.close()
    assert "Traceback" not in done.stderr
    assert "request=1" in done.stdout, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("hermes-state:")]
    assert errors, done.stderr
    if open_elsewhere:
        # Writes are refused as read-only; reads still work.
        assert "is read-only" in errors[0], errors
        assert "permissions" in errors[0], errors
        assert "show=0" in done.stdout
        assert "never requested" in done.stdout
    else:
        # A WAL database cannot even be opened read-only without its -shm file: SQLite says
        # "unable to open", and the message points at permissions.
        assert "cannot open" in errors[0], errors
        assert "permissions" in errors[0], errors
    assert database_digest(url) == before


# -- PostgreSQL: connections dropped ------------------------------------------------------------


@pytest.fixture
def pg_url(migrated_servers: dict[str, URL]) -> URL:
    url = migrated_servers["postgresql"]  # skips when not configured
    empty_tables(url)
    return url


def terminate_backends(url: URL, where: str = "true") -> list[int]:
    """pg_terminate_backend of the database's other connections matching ``where``."""
    admin = create_engine(sync_url(url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            # Chosen first, killed after: in one WHERE clause PostgreSQL may evaluate the
            # termination before the filter that spares this very connection.
            victims = (
                connection.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = :db "
                        f"AND pid <> pg_backend_pid() AND ({where})"
                    ),
                    {"db": url.database},
                )
                .scalars()
                .all()
            )
            for pid in victims:
                # With a timeout, PostgreSQL returns once the backend has exited: the kill has
                # happened (its FATAL message sent, its socket closed) when this returns.
                connection.execute(
                    text("SELECT pg_terminate_backend(:pid, :wait_ms)"),
                    {"pid": pid, "wait_ms": 10_000},
                )
            return list(victims)
    finally:
        admin.dispose()


def test_a_connection_killed_mid_transaction_fails_clearly_then_recovers(pg_url: URL) -> None:
    with SessionDB(url=pg_url, owner=OWNER, lease_seconds=60.0) as db:
        db.create_session("s", "cli")
        assert db.request_handoff("s", "telegram")
        assert db.claim_handoff("s")
        before = database_digest(pg_url)
        other = create_engine(sync_url(pg_url))
        locker = other.connect()
        outcome: dict[str, Any] = {}
        try:
            # Another session holds the row, so the completion waits inside its transaction.
            locker.execute(text("SELECT id FROM sessions WHERE id = 's' FOR UPDATE"))
            locker_pid = locker.execute(text("SELECT pg_backend_pid()")).scalar_one()

            def complete() -> None:
                try:
                    outcome["result"] = db.complete_handoff("s")
                except BaseException as exc:
                    outcome["error"] = exc

            worker = threading.Thread(target=complete)
            worker.start()
            killed: list[int] = []

            def kill_the_waiter() -> bool:
                killed.extend(
                    terminate_backends(
                        pg_url, f"wait_event_type = 'Lock' AND pid <> {int(locker_pid)}"
                    )
                )
                return bool(killed)

            wait_until(
                kill_the_waiter, "the completion to wait for the row lock", deadline=DEADLINE
            )
            worker.join(DEADLINE)
            assert not worker.is_alive()
        finally:
            locker.rollback()
            locker.close()
            other.dispose()
        assert "error" in outcome, outcome
        error = outcome["error"]
        assert isinstance(error, DatabaseError), repr(error)
        assert "terminating connection" in str(error) or "closed" in str(error), str(error)
        assert pg_url.render_as_string(hide_password=True) in str(error)

        # Rolled back by the server: still running under this gateway, and the next call works.
        assert database_digest(pg_url) == before
        assert db.get_handoff_state("s")["state"] == "running"
        assert db.complete_handoff("s") is True
        assert db.get_handoff_state("s") == {
            "state": "completed",
            "platform": "telegram",
            "error": None,
        }


def test_idle_connections_killed_between_calls_are_replaced(pg_url: URL) -> None:
    with SessionDB(url=pg_url) as db:
        db.create_session("s", "cli")
        assert db.request_handoff("s", "telegram")
        assert terminate_backends(pg_url), "the store kept no connection to kill"
        # pool_pre_ping notices the dead connections: nothing fails.
        assert db.claim_handoff("s") is True
        assert terminate_backends(pg_url)
        assert db.complete_handoff("s") is True


@pytest.mark.asyncio
async def test_a_watcher_on_postgresql_survives_its_connections_being_killed(
    pg_url: URL,
) -> None:
    store = SessionDB(url=pg_url, owner=OWNER, lease_seconds=60.0)
    for sid in ("a", "b"):
        store.create_session(sid, "cli")
    assert store.request_handoff("a", "telegram")
    delivered: list[str] = []
    killed = asyncio.Event()

    async def deliver(row: Any, _profile: str | None) -> None:
        delivered.append(row["id"])
        if not killed.is_set():
            # Mid-dispatch, every connection of the gateway is dropped (a server restart, a
            # proxy timeout). Nothing else is querying at this moment: the watcher's next tick
            # waits for a wake-up (long interval), and the test waits for this event.
            assert await asyncio.to_thread(terminate_backends, pg_url)
            killed.set()

    runner = GatewayRunner(store, deliver, interval=30.0)
    serving = asyncio.ensure_future(runner.run())
    try:
        await asyncio.wait_for(killed.wait(), DEADLINE)
        await eventually(
            lambda: store.get_handoff_state("a")["state"] == "completed",
            "the completion on a fresh connection",
            deadline=DEADLINE,
        )
        # Still serving: a new request wakes it up and is delivered.
        assert await asyncio.to_thread(store.request_handoff, "b", "discord")
        await eventually(
            lambda: store.get_handoff_state("b")["state"] == "completed",
            "the next delivery",
            deadline=DEADLINE,
        )
    finally:
        runner.stop()
        await serving
        await runner.close()
    assert delivered == ["a", "b"]


# -- the watcher over a store that fails for a while --------------------------------------------


def outage() -> Exception:
    """What a store raises when its disk fails: the driver's error, translated."""
    error = translate(sqlite3.OperationalError("disk I/O error"), where="the test database")
    assert isinstance(error, DatabaseError)
    return error


class FlakyStore:
    """An awaitable store that raises a translated database error from chosen calls for their
    first times, and passes everything else to a real store.

    Calls are chosen by method name or by kind, whichever way the watcher makes them (one row
    per call, or a batch): ``listing``, ``claim`` and ``finish``. ``before`` calls fail without
    reaching the database; ``after`` calls run for real and then fail, like a commit whose
    answer was lost on the way back.
    """

    KINDS: ClassVar[dict[str, str]] = {
        "list_pending_handoffs": "listing",
        "list_handoffs": "listing",
        "claim_handoff": "claim",
        "claim_handoffs": "claim",
        "claim_next_handoffs": "claim",
        "complete_handoff": "finish",
        "fail_handoff": "finish",
        "finish_handoffs": "finish",
    }

    def __init__(
        self, real: AsyncSessionDB, before: dict[str, int], after: dict[str, int] | None = None
    ) -> None:
        self._real = real
        self._before = Counter(before)
        self._after = Counter(after or {})
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if not callable(attribute):
            return attribute
        key = self.KINDS.get(name, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[key] += 1
            if self._before[key] > 0:
                self._before[key] -= 1
                raise outage()
            result = await attribute(*args, **kwargs)
            if self._after[key] > 0:
                self._after[key] -= 1
                raise outage()
            return result

        return call

    @property
    def polls(self) -> int:
        """A tick's first look at what is pending: a listing, or a claim of the oldest rows
        where the watcher lists nothing first."""
        return self.calls["listing"] + self.calls["claim"]


class Ticks:
    """The watcher's metrics hook, counting its ticks."""

    def __init__(self) -> None:
        self.count = 0

    def claimed(self, row: Any) -> None:
        pass

    def delivered(self, outcome: str, seconds: float) -> None:
        pass

    def ticked(self, seconds: float) -> None:
        self.count += 1


TICK_BUDGET = 300  # ticks a recovering watcher gets after the faults ran out; it needs a few


def watching(store: Any, deliver: Any) -> tuple[GatewayRunner, Ticks]:
    """A watcher with one delivery slot (so a failed call concerns one row), counting ticks."""
    ticks = Ticks()
    runner = GatewayRunner(store, deliver, interval=0.01, max_concurrency=1, metrics=ticks)
    return runner, ticks


async def serve_until(
    watcher: tuple[GatewayRunner, Ticks], flaky: FlakyStore, done: Callable[[], bool], what: str
) -> None:
    """Run the watcher until ``done()`` holds, or until it had TICK_BUDGET ticks to get there."""
    runner, ticks = watcher
    serving = asyncio.ensure_future(runner.run())
    try:
        start = time.monotonic()
        while not await asyncio.to_thread(done):
            if ticks.count > TICK_BUDGET or time.monotonic() - start > 60:
                pytest.fail(f"{what}: not done after {ticks.count} ticks; calls {flaky.calls}")
            assert not serving.done(), "the watcher stopped"
            await asyncio.sleep(0.01)
    finally:
        runner.stop()
        await serving


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "backend_url",
    ["sqlite", "postgresql", "mysql"],
    indirect=True,
)
async def test_a_watcher_keeps_ticking_through_database_errors_and_catches_up(
    backend_url: URL,
) -> None:
    store = SessionDB(url=backend_url, owner=OWNER, lease_seconds=60.0)
    ids = ["r1", "r2", "r3"]
    for number, sid in enumerate(ids):
        store.create_session(sid, "cli", started_at=float(number))
        assert store.request_handoff(sid, "telegram")
    flaky = FlakyStore(
        AsyncSessionDB(store),
        before={
            "reclaim_stale_running_handoffs": 1,  # startup reclaim
            "listing": 2,
            "claim": 2,
            "finish": 1,
        },
    )
    delivered: list[str] = []

    async def deliver(row: Any, _profile: str | None) -> None:
        delivered.append(row["id"])

    def states() -> Counter[str]:
        return Counter(store.get_handoff_state(sid)["state"] for sid in ids)

    await serve_until(
        watching(flaky, deliver),
        flaky,
        lambda: states() == Counter(completed=2, running=1),
        "every row delivered once the faults ran out",
    )
    assert sorted(delivered) == ids, "each row is delivered exactly once"
    assert flaky.polls > 2  # it kept polling through the failed polls
    # The row whose completion could not be recorded stays running under this gateway...
    (stuck,) = [sid for sid in ids if store.get_handoff_state(sid)["state"] == "running"]

    # ...until this gateway starts again and reclaims it; then it can be handed off again.
    healthy = FlakyStore(AsyncSessionDB(store), before={})
    await serve_until(
        watching(healthy, deliver),
        healthy,
        lambda: store.get_handoff_state(stuck)["state"] == "failed",
        "the startup reclaim",
    )
    assert store.get_handoff_state(stuck)["error"] == STRANDED_ERROR
    assert store.request_handoff(stuck, "telegram")
    await serve_until(
        watching(healthy, deliver),
        healthy,
        lambda: store.get_handoff_state(stuck)["state"] == "completed",
        "the re-requested delivery",
    )
    assert sorted(delivered) == sorted([*ids, stuck])
    store.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend_url", ["sqlite", "postgresql"], indirect=True)
async def test_a_claim_whose_answer_was_lost_is_reclaimed_never_delivered_twice(
    backend_url: URL,
) -> None:
    store = SessionDB(url=backend_url, owner=OWNER, lease_seconds=60.0)
    for number, sid in enumerate(["lost", "fine"]):
        store.create_session(sid, "cli", started_at=float(number))
        assert store.request_handoff(sid, "telegram")
    # The first claim commits, but its answer never reaches the watcher.
    flaky = FlakyStore(AsyncSessionDB(store), before={}, after={"claim": 1})
    delivered: list[str] = []

    async def deliver(row: Any, _profile: str | None) -> None:
        delivered.append(row["id"])

    await serve_until(
        watching(flaky, deliver),
        flaky,
        lambda: store.get_handoff_state("fine")["state"] == "completed",
        "the other row to be delivered",
    )
    # Claimed in the database but unknown to the watcher: running, never delivered.
    assert store.get_handoff_state("lost") == {
        "state": "running",
        "platform": "telegram",
        "error": None,
    }
    assert delivered == ["fine"]

    restarted = FlakyStore(AsyncSessionDB(store), before={})
    await serve_until(
        watching(restarted, deliver),
        restarted,
        lambda: store.get_handoff_state("lost")["state"] == "failed",
        "the reclaim at the next start",
    )
    assert store.get_handoff_state("lost")["error"] == STRANDED_ERROR
    assert delivered == ["fine"]
    store.close()


def test_the_wrappers_fault_is_what_a_store_raises_for_a_failing_disk() -> None:
    error = outage()
    assert isinstance(error, HermesStateError)
    assert "disk I/O error" in str(error)
    assert not isinstance(error, DatabaseUnavailableError | ReadOnlyDatabaseError | DiskFullError)
