"""Several gateways sharing one database: lease upkeep in-process on every backend, and two
real gateways (`hermes-state watch` processes) on PostgreSQL.

In-process, a watcher (``GatewayRunner``) serves a store whose clock the test moves by hand:
its lease upkeep runs every third of a short lease in real time, but whether a lease has run
out is up to the hand clock, so no outcome depends on how fast the machine is.

Each real gateway runs as its own process (``python -m hermes_state.cli``, in its own process group)
with a short lease, delivering with a shell command that waits for a file the test creates.
The test watches the database and the gateways' logs; every wait is a poll with a generous
deadline, and no assertion depends on how long anything took. Gateways and their delivery
commands are always killed at the end.

Exactly-once claims by several processes are covered by ``test_concurrency.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import time
import types
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import URL

import gateway.run as run
from hermes_state import AsyncSessionDB, SessionDB
from hermes_state.models import session_turn_leases
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import SERIAL, migrated_database
from tests.support.processes import (
    CLI,
    Watcher,
    cli_argv,
    eventually,
    kill_group,
    read_pid,
    wait_until,
)
from tests.support.stores import HandClock, handoff_row, make_pending

DEADLINE = 60.0  # only reached when something is broken; never a synchronisation tool
INTERVAL = 0.2  # seconds between polls
LONG_LEASE = 600.0  # a lease that cannot expire while a test waits

# A delivery that records its pid and waits for the test's go-ahead (or gives up after 2 min,
# so a leaked command can never outlive the test run for long).
WAITING = (
    'echo $$ > "$RUN_DIR/$HERMES_SESSION_ID.pid"; i=0; '
    'while [ ! -e "$RUN_DIR/go" ] && [ "$i" -lt 1200 ]; do sleep 0.1; i=$((i+1)); done'
)
INSTANT = "true"


# -- lease upkeep in-process, on every backend ----------------------------------------------

UPKEEP_LEASE = 0.3  # seconds: upkeep every 0.1 s of real time; expiry follows the hand clock
# The hand clock moves by half a lease at a time, and only once the watcher has renewed: a
# lease renewed before a step is still live after it, whenever the step lands in an upkeep
# round (between its renewal and its reclaim, say), so a watcher never reclaims its own row.
STEP = UPKEEP_LEASE / 2


class Held:
    """A handler that holds each delivery until the test lets it go."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, row: Any, profile_name: str | None) -> None:
        self.started.append(row["id"])
        await self.release.wait()


@contextlib.asynccontextmanager
async def serving(store: SessionDB, handler: Held) -> AsyncIterator[run.GatewayRunner]:
    """A watcher serving ``store`` in this event loop; stopped and drained at the end (the
    held deliveries let go, so a failing test does not wait out the drain)."""
    runner = run.GatewayRunner(store, handler, interval=0.01, drain_timeout=DEADLINE)
    task = asyncio.ensure_future(runner.run())
    try:
        yield runner
    finally:
        handler.release.set()
        runner.stop()
        await asyncio.wait_for(task, DEADLINE)


def logged(caplog: pytest.LogCaptureFixture, fragment: str) -> Callable[[], bool]:
    return lambda: any(fragment in r.getMessage() for r in list(caplog.records))


async def step_after_renewal(db: SessionDB, session_id: str, clock: HandClock) -> None:
    """Move the hand clock by half a lease, then wait for the watcher to renew the lease of
    ``session_id`` (a lease that now ends more than half a lease ahead)."""
    clock.advance(STEP)

    def renewed() -> bool:
        lease = handoff_row(db, session_id)["lease"]
        return lease is not None and lease > clock.now + STEP

    await eventually(renewed, f"the watcher to renew the lease of {session_id}")


def test_a_watcher_renews_its_leases_so_no_rival_can_take_the_row(
    store: SessionDB, new_store: Callable[..., SessionDB], caplog: pytest.LogCaptureFixture
) -> None:
    clock = HandClock(1_000_000.0)
    gw_a = new_store(owner="gw-a", lease_seconds=UPKEEP_LEASE, clock=clock)
    rival = new_store(owner="gw-b", lease_seconds=UPKEEP_LEASE, clock=clock)
    make_pending(store, "held")
    handler = Held()

    async def scenario() -> None:
        async with serving(gw_a, handler):
            await eventually(lambda: handler.started == ["held"], "gw-a to deliver the row")
            first_lease = handoff_row(store, "held")["lease"]
            assert first_lease == clock.now + UPKEEP_LEASE
            for _ in range(20):  # ten leases' worth of hand-clock time
                await step_after_renewal(store, "held", clock)
                assert await asyncio.to_thread(rival.reclaim_expired_handoffs, "rival") == []
                assert await asyncio.to_thread(rival.reclaim_stale_running_handoffs, "x") == []
            assert clock.now > first_lease + 5 * UPKEEP_LEASE
            handler.release.set()
            await eventually(lambda: handoff_row(store, "held")["state"] == "completed", "done")

    with caplog.at_level(logging.INFO, logger="gateway.run"):
        asyncio.run(scenario())
    assert not logged(caplog, "lost the lease")()
    assert [e["actor"] for e in store.handoff_history("held")] == ["api", "gw-a", "gw-a"]


def test_a_watcher_that_lost_its_lease_says_so_and_discards_the_outcome(
    store: SessionDB, new_store: Callable[..., SessionDB], caplog: pytest.LogCaptureFixture
) -> None:
    clock = HandClock(1_000_000.0)
    gw_a = new_store(owner="gw-a", lease_seconds=UPKEEP_LEASE, clock=clock)
    operator = new_store(owner="gw-b", clock=clock)
    make_pending(store, "held")
    handler = Held()

    async def scenario() -> None:
        async with serving(gw_a, handler):
            await eventually(lambda: handler.started == ["held"], "gw-a to deliver the row")
            taken = await asyncio.to_thread(operator.reclaim_running_handoffs, "taken over")
            assert taken == ["held"]
            await eventually(logged(caplog, "lost the lease of held"), "gw-a to notice")
            handler.release.set()
            await eventually(
                logged(caplog, "the completion of held was discarded"), "gw-a to discard it"
            )

    with caplog.at_level(logging.INFO, logger="gateway.run"):
        asyncio.run(scenario())
    row = handoff_row(store, "held")
    assert (row["state"], row["error"], row["owner"]) == ("failed", "taken over", "gw-a")
    assert [e["actor"] for e in store.handoff_history("held")] == ["api", "gw-a", "gw-b"]


def test_a_watcher_reclaims_rows_whose_lease_ran_out(
    store: SessionDB, new_store: Callable[..., SessionDB]
) -> None:
    """A gateway that stopped renewing (its store is here, its watcher gone): once its lease
    runs out, not before, a live watcher's upkeep fails the row with the re-run hint."""
    clock = HandClock(1_000_000.0)
    dead = new_store(owner="gw-dead", lease_seconds=UPKEEP_LEASE, clock=clock)
    gw_a = new_store(owner="gw-a", lease_seconds=UPKEEP_LEASE, clock=clock)
    make_pending(store, "stranded")
    assert dead.claim_handoff("stranded") is True
    handler = Held()

    async def scenario() -> None:
        async with serving(gw_a, handler):
            make_pending(store, "probe")  # a row of gw-a's own, to see its upkeep rounds
            await eventually(lambda: handler.started == ["probe"], "gw-a to serve")
            await step_after_renewal(store, "probe", clock)
            assert clock.now < handoff_row(store, "stranded")["lease"]
            assert handoff_row(store, "stranded")["state"] == "running"
            for _ in range(2):  # now past the stranded row's lease
                await step_after_renewal(store, "probe", clock)
            await eventually(
                lambda: handoff_row(store, "stranded")["state"] == "failed",
                "gw-a to reclaim the expired row",
            )
            handler.release.set()

    asyncio.run(scenario())
    row = handoff_row(store, "stranded")
    assert row["error"] == STRANDED_ERROR
    assert "/handoff" in row["error"]
    assert store.handoff_history("stranded")[-1]["actor"] == "gw-a"
    assert handoff_row(store, "probe")["state"] == "completed"


# -- two real gateways on PostgreSQL: helpers ----------------------------------------------------


@functools.cache
def measured_lease() -> float:
    """The real gateways' lease, in seconds (they renew every third of it), measured once.

    A gateway loses a live row when it cannot renew for two thirds of its lease. On a machine
    shared with other work, the same stall shows in how long a fresh interpreter takes to
    start the CLI (seconds of wall time for half a second of CPU, measured on a loaded
    2-core box), so the lease is three such startups, and never under 1.5 s.
    """
    started = time.monotonic()
    subprocess.run([*CLI, "--help"], check=True, capture_output=True, timeout=DEADLINE)
    return max(1.5, 3 * (time.monotonic() - started))


# ``python -m hermes_state.cli`` with the watcher's turn lease set first (argv[1], in seconds).
WITH_TURN_LEASE = (
    "import sys, gateway.run; gateway.run.TURN_LEASE_SECONDS = float(sys.argv.pop(1)); "
    "from hermes_state.cli import main; sys.exit(main())"
)


class Gateway(Watcher):
    """A `hermes-state watch` process leading its own process group; killed with the group.

    ``turn_lease`` shortens the watcher's turn lease on each conversation it delivers (60 s
    otherwise, whatever the claim's lease): a killed gateway's turn lease outlives it until it
    runs out, and until then no gateway may deliver a new request of that conversation.
    """

    def __init__(
        self,
        url: URL,
        owner: str,
        command: str,
        env: dict[str, str],
        max_concurrency: int = 3,
        lease: float | None = None,
        turn_lease: float | None = None,
    ) -> None:
        self.owner = owner
        argv = cli_argv(
            url,
            "watch",
            "--owner",
            owner,
            "--lease-seconds",
            str(measured_lease() if lease is None else lease),
            "--interval",
            str(INTERVAL),
            "--max-concurrency",
            str(max_concurrency),
            "--exec",
            command,
        )
        if turn_lease is not None:
            assert argv[1:3] == ["-m", "hermes_state.cli"], argv
            argv[1:3] = ["-c", WITH_TURN_LEASE, str(turn_lease)]
        super().__init__(argv, env, name=owner, own_group=True, deadline=DEADLINE)


@pytest.fixture
def pg_url() -> Iterator[URL]:
    with migrated_database("postgresql") as url:
        yield url


@pytest.fixture
def db(pg_url: URL) -> Iterator[SessionDB]:
    """The test's own view of the database (an ownerless store)."""
    with SessionDB(url=pg_url) as store:
        yield store


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """Where delivery commands record their pids and look for the go-ahead; every delivery
    command still alive at the end is killed."""
    folder = tmp_path / "run"
    folder.mkdir()
    yield folder
    (folder / "go").touch()
    for pid_file in folder.glob("*.pid"):
        text = pid_file.read_text().strip()
        if text.isdigit() and started_here(int(text), folder):
            kill_group(int(text))  # each command leads its own process group


def started_here(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` is still one of this test's delivery commands (not a reused pid)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"RUN_DIR={run_dir}".encode() in environ


@pytest.fixture
def gateways(pg_url: URL, run_dir: Path) -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []
    env = {**os.environ, "RUN_DIR": str(run_dir)}

    def start(
        owner: str,
        command: str,
        max_concurrency: int = 3,
        lease: float | None = None,
        turn_lease: float | None = None,
    ) -> Gateway:
        gateway = Gateway(pg_url, owner, command, env, max_concurrency, lease, turn_lease)
        started.append(gateway)
        return gateway

    try:
        yield start
    finally:
        for gateway in started:
            gateway.kill()


def delivery_pid(run_dir: Path, session_id: str) -> int:
    pid_file = run_dir / f"{session_id}.pid"
    wait_until(lambda: read_pid(pid_file) is not None, "a pid", deadline=DEADLINE)
    pid = read_pid(pid_file)
    assert pid is not None
    return pid


def running_under(db: SessionDB, session_id: str, owner: str) -> Callable[[], bool]:
    def check() -> bool:
        row = handoff_row(db, session_id)
        return row["state"] == "running" and row["owner"] == owner

    return check


def turn_lease_row(db: SessionDB, conversation_id: str) -> dict[str, Any]:
    """The turn lease held on a conversation: holder, acquired_at and expires_at."""
    query = select(session_turn_leases).where(
        session_turn_leases.c.conversation_id == conversation_id
    )
    return db._execute_write(lambda conn: dict(conn.execute(query).mappings().one()))


def state_is(db: SessionDB, session_id: str, state: str) -> Callable[[], bool]:
    return lambda: handoff_row(db, session_id)["state"] == state


def prove_serving(db: SessionDB, gateway: Gateway, session_id: str) -> None:
    """Request a row only ``gateway`` can take (the other one is full) and wait until it
    delivered it: from then on its startup reclaim is behind it and it polls and upkeeps."""
    make_pending(db, session_id)
    wait_until(
        state_is(db, session_id, "completed"),
        f"{gateway.owner} to deliver {session_id}",
        deadline=DEADLINE,
    )
    actors = {event["actor"] for event in db.handoff_history(session_id)[1:]}
    assert actors == {gateway.owner}, db.handoff_history(session_id)


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\n[test_gateways] {text}")


# -- a live gateway's delivery is left alone ---------------------------------------------------


@SERIAL
def test_a_second_gateway_leaves_a_live_delivery_alone_well_past_the_lease(
    db: SessionDB, gateways: Callable[..., Gateway], run_dir: Path
) -> None:
    session_id = "a-long-delivery"
    make_pending(db, session_id)
    gw_a = gateways("gw-a", WAITING, max_concurrency=1)
    wait_until(running_under(db, session_id, "gw-a"), "gw-a to claim the row", deadline=DEADLINE)
    delivery_pid(run_dir, session_id)

    gw_b = gateways("gw-b", INSTANT)
    prove_serving(db, gw_b, "b-probe")
    lease_when_b_served = handoff_row(db, session_id)["lease"]
    assert lease_when_b_served is not None

    # Watch the row while gw-a keeps renewing: the lease gw-b first saw runs out many times
    # over (by gw-a's own clock), and at every look the row is still gw-a's.
    leases = {lease_when_b_served}

    def renewed_well_past_the_lease() -> bool:
        row = handoff_row(db, session_id)
        assert (row["state"], row["owner"], row["attempt"]) == ("running", "gw-a", 1), row
        leases.add(row["lease"])
        return len(leases) >= 3 and max(leases) > lease_when_b_served + 2 * measured_lease()

    wait_until(
        renewed_well_past_the_lease,
        "gw-a to renew its lease well past its length",
        deadline=DEADLINE,
    )
    gw_a.assert_alive()
    gw_b.assert_alive()
    assert session_id not in gw_b.log, gw_b.log
    assert "lost the lease" not in gw_a.log, gw_a.log
    assert [e["to_state"] for e in db.handoff_history(session_id)] == ["pending", "running"]

    (run_dir / "go").touch()
    wait_until(
        state_is(db, session_id, "completed"), "gw-a to finish its delivery", deadline=DEADLINE
    )
    event = db.handoff_history(session_id)[-1]
    assert (event["from_state"], event["to_state"], event["actor"]) == (
        "running",
        "completed",
        "gw-a",
    )
    wait_until(
        lambda: any(" completed " in line and session_id in line for line in gw_a.lines),
        "gw-a to say it completed the delivery",
        deadline=DEADLINE,
    )
    assert session_id not in gw_b.log, gw_b.log


# -- a killed gateway's delivery is rescued by the other one -----------------------------------


@SERIAL
def test_the_row_of_a_killed_gateway_is_failed_by_the_survivor(
    db: SessionDB,
    gateways: Callable[..., Gateway],
    run_dir: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    session_id = "killed-mid-delivery"
    make_pending(db, session_id)
    # gw-a's turn lease on the conversation is as long as its claim's lease (both renewed every
    # third), so the re-request at the end waits seconds for it to run out, not a minute.
    gw_a = gateways("gw-a", WAITING, max_concurrency=1, turn_lease=measured_lease())
    wait_until(running_under(db, session_id, "gw-a"), "gw-a to claim the row", deadline=DEADLINE)
    command = delivery_pid(run_dir, session_id)
    turn = turn_lease_row(db, session_id)
    assert turn["holder"].endswith(":gw-a"), turn
    assert turn["expires_at"] <= time.time() + measured_lease(), turn  # the short turn lease
    gw_b = gateways("gw-b", INSTANT)
    prove_serving(db, gw_b, "b-probe")

    # The whole machine of gw-a goes: the gateway and its delivery command.
    kill_group(gw_a.process.pid)
    kill_group(command)
    killed_at = time.monotonic()
    assert gw_a.process.wait(timeout=DEADLINE) == -signal.SIGKILL

    wait_until(state_is(db, session_id, "failed"), "gw-b to fail gw-a's row", deadline=DEADLINE)
    took = time.monotonic() - killed_at
    lease = measured_lease()
    nominal = lease + lease / 3 + 3 * INTERVAL
    report(
        capsys,
        f"gw-b failed the killed gateway's row {took:.2f} s after SIGKILL "
        f"(lease {lease:.2f} s, checked every {lease / 3:.2f} s, poll {INTERVAL:g} s; "
        f"nominal bound about {nominal:.1f} s)",
    )
    record_property("reclaim_seconds_after_sigkill", round(took, 3))

    row = handoff_row(db, session_id)
    assert "/handoff" in row["error"]
    assert row["lease"] is None
    event = db.handoff_history(session_id)[-1]
    assert (event["from_state"], event["to_state"], event["actor"]) == (
        "running",
        "failed",
        "gw-b",
    )
    assert "/handoff" in event["detail"]
    gw_b.wait_for_line(f"reclaimed {session_id}")
    gw_b.assert_alive()

    # Failed, never re-queued: the user runs /handoff again and a gateway delivers it (once
    # the dead gateway's turn lease on the conversation has run out).
    assert db.request_handoff(session_id, "telegram") is True
    wait_until(
        state_is(db, session_id, "completed"), "gw-b to deliver the new request", deadline=DEADLINE
    )
    assert db.handoff_history(session_id)[-1]["actor"] == "gw-b"


@SERIAL
def test_a_restarted_gateway_fails_its_previous_lifes_row_at_once(
    db: SessionDB, gateways: Callable[..., Gateway], run_dir: Path
) -> None:
    """Same owner, new process: its own dead claim is failed at startup, long before the
    lease would have expired (the lease is far longer than the test's deadline)."""
    session_id = "died-with-its-gateway"
    make_pending(db, session_id)
    first_life = gateways("gw-a", WAITING, lease=LONG_LEASE)
    wait_until(running_under(db, session_id, "gw-a"), "gw-a to claim the row", deadline=DEADLINE)
    command = delivery_pid(run_dir, session_id)
    kill_group(first_life.process.pid)
    kill_group(command)
    first_life.process.wait(timeout=DEADLINE)
    lease = handoff_row(db, session_id)["lease"]
    assert lease is not None
    assert lease > time.time() + LONG_LEASE - DEADLINE  # still live for longer than we wait

    second_life = gateways("gw-a", INSTANT, lease=LONG_LEASE)
    wait_until(
        state_is(db, session_id, "failed"),
        "gw-a's next life to fail its dead claim",
        deadline=DEADLINE,
    )
    second_life.wait_for_line(f"reclaimed {session_id} (root): left running by a stopped gateway")
    event = db.handoff_history(session_id)[-1]
    assert (event["from_state"], event["to_state"], event["actor"]) == (
        "running",
        "failed",
        "gw-a",
    )
    assert "/handoff" in handoff_row(db, session_id)["error"]


# -- a zombie's late result is discarded ------------------------------------------------------


@SERIAL
def test_a_hung_gateway_that_resumes_after_the_rescue_has_its_result_discarded(
    db: SessionDB, gateways: Callable[..., Gateway], run_dir: Path
) -> None:
    session_id = "hung-delivery"
    make_pending(db, session_id)
    gw_a = gateways("gw-a", WAITING, max_concurrency=1)
    wait_until(running_under(db, session_id, "gw-a"), "gw-a to claim the row", deadline=DEADLINE)
    delivery_pid(run_dir, session_id)
    gw_b = gateways("gw-b", INSTANT)
    prove_serving(db, gw_b, "b-probe")

    os.kill(gw_a.process.pid, signal.SIGSTOP)  # gw-a hangs (its delivery command does not)
    try:
        wait_until(
            state_is(db, session_id, "failed"),
            "gw-b to rescue the hung gateway's row",
            deadline=DEADLINE,
        )
        rescued = handoff_row(db, session_id)
        (run_dir / "go").touch()  # the delivery finishes while gw-a cannot notice
    finally:
        os.kill(gw_a.process.pid, signal.SIGCONT)

    gw_a.wait_for_line(f"the completion of {session_id} was discarded")
    gw_a.assert_alive()
    assert handoff_row(db, session_id) == rescued
    assert "/handoff" in rescued["error"]
    actors = [event["actor"] for event in db.handoff_history(session_id)]
    assert actors[-1] == "gw-b"
    assert "gw-a" not in actors[actors.index("gw-b") :], db.handoff_history(session_id)


@SERIAL
def test_a_zombie_store_cannot_finish_rows_another_gateway_rescued(
    pg_url: URL,
    db: SessionDB,
    gateways: Callable[..., Gateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = [
        "zombie-direct",
        "zombie-delivered",
        "zombie-raised",
        "zombie-batch-delivered",
        "zombie-batch-raised",
    ]
    make_pending(db, *ids)
    # The zombie: a gateway's store whose claims are never renewed (its gateway hung).
    with SessionDB(url=pg_url, owner="gw-a", lease_seconds=1.0) as zombie:
        for session_id in ids:
            assert zombie.claim_handoff(session_id) is True
        assert {handoff_row(db, sid)["owner"] for sid in ids} == {"gw-a"}

        gateways("gw-b", INSTANT)
        for session_id in ids:
            wait_until(
                state_is(db, session_id, "failed"),
                f"gw-b to rescue {session_id}",
                deadline=DEADLINE,
            )
        rescued = {sid: handoff_row(db, sid) for sid in ids}
        assert all("/handoff" in row["error"] for row in rescued.values())
        assert {db.handoff_history(sid)[-1]["actor"] for sid in ids} == {"gw-b"}

        # The store API answers False ...
        assert zombie.complete_handoff("zombie-direct") is False

        # ... and the watcher's delivery path logs that the result was discarded.
        async def delivers(row: Any, profile_name: str | None) -> None:
            return None

        async def raises(row: Any, profile_name: str | None) -> None:
            raise RuntimeError("platform said no")

        store = AsyncSessionDB(zombie)
        with caplog.at_level(logging.INFO, logger="gateway.run"):
            for session_id, handler in (
                ("zombie-delivered", delivers),
                ("zombie-raised", raises),
                ("zombie-batch-delivered", delivers),
                ("zombie-batch-raised", raises),
            ):
                runner = types.SimpleNamespace(_process_handoff=handler)
                watch = run.HandoffWatch(runner, interval=1.0, drain_timeout=1.0)
                row = {"id": session_id, "handoff_platform": "telegram"}
                claimed = run._Claimed((None, session_id), None)
                if "batch" in session_id:  # through the flusher, as the batch pipeline does
                    run_coroutine(delivered_batched(watch, store, row, claimed))
                else:
                    run_coroutine(watch._deliver(store, row, claimed))
        discarded = [r.getMessage() for r in caplog.records if "discarded" in r.getMessage()]
        for session_id in ("zombie-delivered", "zombie-batch-delivered"):
            assert any(f"completion of {session_id} was" in m for m in discarded), discarded
        for session_id in ("zombie-raised", "zombie-batch-raised"):
            assert any(f"failure of {session_id} was" in m for m in discarded), discarded
        assert not any(
            "completed" in r.getMessage() and "zombie-" in r.getMessage() for r in caplog.records
        )

    for session_id in ids:
        assert handoff_row(db, session_id) == rescued[session_id], session_id


def run_coroutine(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def delivered_batched(
    watch: run.HandoffWatch, store: Any, row: dict[str, Any], claimed: Any
) -> None:
    """One batched delivery with its watcher's flusher running, flushed before returning."""
    watch.flusher.start()
    try:
        await watch._deliver_batched(store, row, claimed)
    finally:
        await watch.flusher.close()
