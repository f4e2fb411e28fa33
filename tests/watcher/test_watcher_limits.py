"""The watcher's bounded concurrency, its wake-ups and its cheap idle poll (gateway/run.py).

The watchers are real ``GatewayRunner`` objects on real databases (an SQLite file, PostgreSQL
when configured); the concurrency a delivery sees is read from the database by the handler
itself. Wake-up tests poll with an interval of an hour: the row can only be claimed within the
test's deadline if something woke the watcher. Nothing here asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from gateway.run import GatewayRunner, default_owner
from hermes_state import SessionDB
from hermes_state.cli import main
from hermes_state.plans import ClaimBatch
from tests.conftest import empty_tables, migrated_database
from tests.support.digest import sync_url
from tests.support.processes import DEADLINE, eventually, run_cli
from tests.support.stores import make_pending

AN_HOUR = 3600.0  # a poll interval that never elapses during a test
STARTED = 1000.0  # when the first pending session started; the next ones a second apart each
ROWS = [f"row-{index}" for index in range(6)]


# -- helpers ---------------------------------------------------------------------------------


class CountingStore(SessionDB):
    """A SessionDB that counts the watcher's polls of its pending rows and its change-token
    probes. A poll is a listing or, where the watcher lists nothing first, a claim of the
    oldest pending rows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listings = 0  # polls that returned
        self.tokens = 0  # handoff_change_token calls that returned

    def claim_next_handoffs(self, limit: int, **options: Any) -> ClaimBatch:
        batch = super().claim_next_handoffs(limit, **options)
        self.listings += 1
        return batch

    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        rows = super().list_pending_handoffs()
        self.listings += 1
        return rows

    def list_handoffs(self, state: str | None = None, *, limit: int | None = None) -> Any:
        rows = super().list_handoffs(state, limit=limit)
        if state == "pending":
            self.listings += 1
        return rows

    def handoff_change_token(self) -> int | None:
        token = super().handoff_change_token()
        self.tokens += 1
        return token


@contextlib.asynccontextmanager
async def serving(runner: GatewayRunner) -> AsyncIterator[asyncio.Task[None]]:
    """Run the watcher in a task; stop it, wait for it and close its store afterwards."""
    task = asyncio.ensure_future(runner.run())
    try:
        yield task
    finally:
        runner.stop()
        try:
            await asyncio.wait_for(task, DEADLINE)
        finally:
            await runner.close()


def state_of(db: SessionDB, session_id: str) -> str | None:
    handoff = db.get_handoff_state(session_id)
    assert handoff is not None, f"no session {session_id!r}"
    return handoff["state"]


def states(db: SessionDB, session_ids: list[str]) -> Counter[str | None]:
    return Counter(state_of(db, session_id) for session_id in session_ids)


def claimer(db: SessionDB, session_id: str) -> str | None:
    """Who claimed the row last, from the audit trail."""
    claims = [e for e in db.handoff_history(session_id) if e["to_state"] == "running"]
    return claims[-1]["actor"] if claims else None


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def reader(path: Path) -> Iterator[SessionDB]:
    """The test's (and the handlers') own store on the watcher's file."""
    with SessionDB(path) as db:
        yield db


# -- bounded concurrency -----------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("limit", [1, 2, 4])
async def test_a_backlog_never_runs_more_deliveries_than_the_limit(
    path: Path, reader: SessionDB, limit: int
) -> None:
    make_pending(reader, *ROWS, started_at=STARTED)
    store = CountingStore(path)
    started: list[str] = []
    seen_running: dict[str, list[str]] = {}
    releases = {session_id: asyncio.Event() for session_id in ROWS}

    async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
        started.append(row["id"])
        running = await asyncio.to_thread(reader.list_handoffs, "running")
        seen_running[row["id"]] = sorted(r["id"] for r in running)
        await releases[row["id"]].wait()

    runner = GatewayRunner(store, handler, interval=0.01, max_concurrency=limit, drain_timeout=5)
    try:
        async with serving(runner):
            for done in range(len(ROWS)):
                in_flight = min(limit, len(ROWS) - done)
                backlog = len(ROWS) - done - in_flight
                starts = done + in_flight
                await eventually(lambda n=starts: len(started) >= n, f"{starts} starts")
                assert len(started) == starts, started
                if backlog:
                    # Let the watcher tick a few more times with no slot free (each tick reads
                    # the change token; a full watcher need not ask the store for more).
                    looked = store.tokens
                    await eventually(lambda n=looked + 3: store.tokens >= n, "three more ticks")
                assert len(started) == done + in_flight, started
                counts = await asyncio.to_thread(states, reader, ROWS)
                assert counts["running"] == in_flight, counts
                assert counts["pending"] == backlog, counts
                finishing = started[done]
                releases[finishing].set()
                await eventually(
                    lambda sid=finishing: state_of(reader, sid) == "completed",
                    f"{finishing} to complete",
                )
            assert states(reader, ROWS)["completed"] == len(ROWS)
    finally:
        for release in releases.values():
            release.set()

    assert started == ROWS  # oldest first, each delivered once
    for session_id, running in seen_running.items():
        assert session_id in running
        assert len(running) <= limit, (session_id, running)
    assert max(len(running) for running in seen_running.values()) == limit


@pytest.mark.asyncio
async def test_a_full_watcher_leaves_the_backlog_to_another_watcher(
    path: Path, reader: SessionDB
) -> None:
    make_pending(reader, "first", "second", started_at=STARTED)
    release_first = asyncio.Event()
    delivered: list[tuple[str, str]] = []

    async def slow(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(("w1", row["id"]))
        await release_first.wait()

    async def quick(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(("w2", row["id"]))

    store_1 = CountingStore(path, owner="w1", lease_seconds=60)
    w1 = GatewayRunner(store_1, slow, interval=0.01, max_concurrency=1, drain_timeout=5)
    w2 = GatewayRunner(
        SessionDB(path, owner="w2", lease_seconds=60),
        quick,
        interval=0.01,
        max_concurrency=1,
        drain_timeout=5,
    )
    try:
        async with serving(w1):
            await eventually(lambda: delivered == [("w1", "first")], "w1 to take the first row")
            looked = store_1.tokens
            await eventually(lambda: store_1.tokens >= looked + 3, "w1 to tick again, full")
            assert state_of(reader, "second") == "pending"
            assert delivered == [("w1", "first")]

            async with serving(w2):
                await eventually(
                    lambda: state_of(reader, "second") == "completed",
                    "w2 to deliver the row w1 left pending",
                )
            assert claimer(reader, "second") == "w2"
            assert state_of(reader, "first") == "running"

            release_first.set()
            await eventually(
                lambda: state_of(reader, "first") == "completed",
                "w1 to finish",
            )
    finally:
        release_first.set()
    assert claimer(reader, "first") == "w1"
    assert sorted(delivered) == [("w1", "first"), ("w2", "second")]


# -- wake-ups ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_request_in_the_same_process_wakes_an_idle_watcher(
    path: Path, reader: SessionDB
) -> None:
    store = CountingStore(path)
    delivered: list[str] = []

    async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    async with serving(GatewayRunner(store, handler, interval=AN_HOUR)):
        await eventually(lambda: store.listings >= 1, "the first poll")
        reader.create_session("woken", "cli")
        assert await asyncio.to_thread(reader.request_handoff, "woken", "telegram") is True
        await eventually(lambda: delivered == ["woken"], "the request to be delivered")
    assert state_of(reader, "woken") == "completed"


@pytest.mark.asyncio
async def test_a_finished_delivery_frees_its_slot_at_once(path: Path, reader: SessionDB) -> None:
    make_pending(reader, "first", "second", started_at=STARTED)
    delivered: list[str] = []
    in_flight = 0
    most = 0

    async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        delivered.append(row["id"])
        await asyncio.sleep(0)
        in_flight -= 1

    runner = GatewayRunner(SessionDB(path), handler, interval=AN_HOUR, max_concurrency=1)
    async with serving(runner):
        await eventually(lambda: len(delivered) == 2, "both rows to be delivered")
        await eventually(
            lambda: states(reader, ["first", "second"])["completed"] == 2, "both rows completed"
        )
    assert delivered == ["first", "second"]
    assert most == 1


def listeners(url: URL) -> int:
    """Connections to this database whose last statement was a LISTEN."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query ILIKE 'LISTEN %'"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.mark.asyncio
async def test_a_request_from_another_process_wakes_a_postgresql_watcher() -> None:
    with migrated_database("postgresql") as url:
        store = CountingStore(url=url)
        delivered: list[str] = []

        async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
            delivered.append(row["id"])

        async with serving(GatewayRunner(store, handler, interval=AN_HOUR)):
            await eventually(lambda: store.listings >= 1, "the first poll")
            await eventually(lambda: listeners(url) >= 1, "the watcher to LISTEN")
            await asyncio.to_thread(store.create_session, "from-afar", "cli")
            requested = await asyncio.to_thread(
                run_cli, url, "handoff", "request", "from-afar", "telegram"
            )
            assert requested.returncode == 0, requested.stderr
            await eventually(lambda: delivered == ["from-afar"], "the watcher to be woken")
        with SessionDB(url=url) as db:
            assert state_of(db, "from-afar") == "completed"


# -- the idle probe ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_idle_sqlite_ticks_skip_the_listing_until_another_connection_commits(
    path: Path, reader: SessionDB
) -> None:
    reader.create_session("idle", "cli")
    store = CountingStore(path)
    delivered: list[str] = []  # an assertion in the handler would be swallowed as a failure

    async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    async def idle_ticks(count: int) -> int:
        """Wait for ``count`` more ticks (each reads the token once); the listings meanwhile."""
        listed, probed = store.listings, store.tokens
        await eventually(lambda: store.tokens >= probed + count, f"{count} idle ticks")
        return store.listings - listed

    async with serving(GatewayRunner(store, handler, interval=0.005)):
        await eventually(lambda: store.listings >= 1, "a first, clean listing")
        assert await idle_ticks(10) == 0

        # Another connection commits something that does not wake the watcher.
        def rename() -> None:
            with contextlib.closing(sqlite3.connect(path)) as connection, connection:
                connection.execute("UPDATE sessions SET title = 'renamed' WHERE id = 'idle'")

        listed = store.listings
        await asyncio.to_thread(rename)
        await eventually(lambda: store.listings > listed, "the watcher to look again")
        assert await idle_ticks(10) == 0
    assert delivered == []  # nothing was ever pending


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
async def test_servers_have_no_change_token_so_every_tick_lists(
    backend: str, migrated_servers: dict[str, URL]
) -> None:
    url = migrated_servers[backend]
    empty_tables(url)  # the shared database may hold other tests' pending rows
    store = CountingStore(url=url)
    assert store.handoff_change_token() is None
    delivered: list[str] = []

    async def handler(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(row["id"])

    async with serving(GatewayRunner(store, handler, interval=0.005)):
        await eventually(lambda: store.listings >= 5, "five listings in a row")
    assert delivered == []


# -- the command line --------------------------------------------------------------------------


def test_watch_help_names_the_environment_twins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--help"]) == 0
    shown = capsys.readouterr().out
    for option, variable in (
        ("--owner", "HERMES_STATE_OWNER"),
        ("--lease-seconds", "HERMES_STATE_LEASE_SECONDS"),
        ("--max-concurrency", "HERMES_STATE_MAX_CONCURRENCY"),
    ):
        assert option in shown
        assert variable in shown


BAD_VALUES = [
    ("--max-concurrency", "HERMES_STATE_MAX_CONCURRENCY", value)
    for value in ("0", "-1", "x", "1.5")
] + [
    ("--lease-seconds", "HERMES_STATE_LEASE_SECONDS", value)
    for value in ("0", "-1", "x", "nan", "inf")
]


@pytest.mark.parametrize("given_as", ["flag", "environment"])
@pytest.mark.parametrize(("option", "variable", "value"), BAD_VALUES)
def test_bad_watch_limits_are_bad_input(
    path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    variable: str,
    value: str,
    given_as: str,
) -> None:
    with SessionDB(path) as db:
        make_pending(db, "untouched", started_at=STARTED)
    argv = ["--url", str(path), "watch", "--once", "--exec", "exit 0"]
    if given_as == "flag":
        argv += [option, value]
    else:
        monkeypatch.setenv(variable, value)
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    # One line that names the option and the value it refused, however the value was given.
    assert f"argument {option}: " in error, error
    assert f"not '{value}'" in error, error
    with SessionDB(path) as db:
        assert state_of(db, "untouched") == "pending"


def test_the_default_owner_is_the_host_and_the_home(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_owner() == f"{socket.gethostname()}:{isolated_home.resolve()}"
    other_home = tmp_path / "other-home"
    monkeypatch.setenv("HERMES_HOME", str(other_home))
    assert default_owner() == f"{socket.gethostname()}:{other_home.resolve()}"
    assert default_owner() != f"{socket.gethostname()}:{isolated_home.resolve()}"


def watch_once(path: Path, env: dict[str, str], *options: str) -> None:
    finished = run_cli(path, "watch", "--once", *options, "--exec", "exit 0", env=env)
    assert finished.returncode == 0, finished.stderr


def test_a_watch_claims_under_its_default_or_given_owner(path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_OWNER"}
    for session_id, extra_env, options, owner in (
        ("by-default", {}, (), default_owner()),
        ("by-flag", {}, ("--owner", "gw-flag"), "gw-flag"),
        ("by-variable", {"HERMES_STATE_OWNER": "gw-env"}, (), "gw-env"),
    ):
        with SessionDB(path) as db:
            make_pending(db, session_id, started_at=STARTED)
        watch_once(path, {**env, **extra_env}, *options)
        with SessionDB(path) as db:
            assert state_of(db, session_id) == "completed"
            assert claimer(db, session_id) == owner
