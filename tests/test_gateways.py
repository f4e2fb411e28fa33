"""Two real gateways (`hermes-state watch` processes) sharing one PostgreSQL database.

Each gateway runs as its own process (``python -m hermes_state.cli``, in its own process group)
with a short lease, delivering with a shell command that waits for a file the test creates.
The test watches the database and the gateways' logs; every wait is a poll with a generous
deadline, and no assertion depends on how long anything took. Gateways and their delivery
commands are always killed at the end.

Exactly-once claims by several processes are covered by ``test_concurrency.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

import gateway.run as run
from hermes_state import AsyncSessionDB, SessionDB, schema

from .conftest import throwaway_database
from .processes import Watcher, cli_argv, kill_group, read_pid, wait_until
from .stores import handoff_row, make_pending

pytestmark = pytest.mark.skipif(
    not os.environ.get("HERMES_STATE_TEST_PG_URL", "").strip(),
    reason="HERMES_STATE_TEST_PG_URL is not set",
)

DEADLINE = 60.0  # only reached when something is broken; never a synchronisation tool
LEASE = 1.5  # seconds; the gateways renew every third of it
INTERVAL = 0.2  # seconds between polls
LONG_LEASE = 600.0  # a lease that cannot expire while a test waits

# A delivery that records its pid and waits for the test's go-ahead (or gives up after 2 min,
# so a leaked command can never outlive the test run for long).
WAITING = (
    'echo $$ > "$RUN_DIR/$HERMES_SESSION_ID.pid"; i=0; '
    'while [ ! -e "$RUN_DIR/go" ] && [ "$i" -lt 1200 ]; do sleep 0.1; i=$((i+1)); done'
)
INSTANT = "true"


# -- helpers ---------------------------------------------------------------------------------


class Gateway(Watcher):
    """A `hermes-state watch` process leading its own process group; killed with the group."""

    def __init__(
        self,
        url: URL,
        owner: str,
        command: str,
        env: dict[str, str],
        max_concurrency: int = 3,
        lease: float = LEASE,
    ) -> None:
        self.owner = owner
        argv = cli_argv(
            url,
            "watch",
            "--owner",
            owner,
            "--lease-seconds",
            str(lease),
            "--interval",
            str(INTERVAL),
            "--max-concurrency",
            str(max_concurrency),
            "--exec",
            command,
        )
        super().__init__(argv, env, name=owner, own_group=True, deadline=DEADLINE)


@pytest.fixture
def pg_url() -> Iterator[URL]:
    with throwaway_database("postgresql") as url:
        schema.upgrade(url)
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

    def start(owner: str, command: str, max_concurrency: int = 3, lease: float = LEASE) -> Gateway:
        gateway = Gateway(pg_url, owner, command, env, max_concurrency, lease)
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
        return len(leases) >= 3 and max(leases) > lease_when_b_served + 2 * LEASE

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
    gw_a.wait_for_line(f"handoff {session_id} completed")
    assert session_id not in gw_b.log, gw_b.log


# -- a killed gateway's delivery is rescued by the other one -----------------------------------


def test_the_row_of_a_killed_gateway_is_failed_by_the_survivor(
    db: SessionDB,
    gateways: Callable[..., Gateway],
    run_dir: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    session_id = "killed-mid-delivery"
    make_pending(db, session_id)
    gw_a = gateways("gw-a", WAITING, max_concurrency=1)
    wait_until(running_under(db, session_id, "gw-a"), "gw-a to claim the row", deadline=DEADLINE)
    command = delivery_pid(run_dir, session_id)
    gw_b = gateways("gw-b", INSTANT)
    prove_serving(db, gw_b, "b-probe")

    # The whole machine of gw-a goes: the gateway and its delivery command.
    kill_group(gw_a.process.pid)
    kill_group(command)
    killed_at = time.monotonic()
    assert gw_a.process.wait(timeout=DEADLINE) == -signal.SIGKILL

    wait_until(state_is(db, session_id, "failed"), "gw-b to fail gw-a's row", deadline=DEADLINE)
    took = time.monotonic() - killed_at
    nominal = LEASE + LEASE / 3 + 3 * INTERVAL
    report(
        capsys,
        f"gw-b failed the killed gateway's row {took:.2f} s after SIGKILL "
        f"(lease {LEASE:g} s, checked every {LEASE / 3:g} s, poll {INTERVAL:g} s; "
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

    # Failed, never re-queued: the user runs /handoff again and a gateway delivers it.
    assert db.request_handoff(session_id, "telegram") is True
    wait_until(
        state_is(db, session_id, "completed"), "gw-b to deliver the new request", deadline=DEADLINE
    )


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


def test_a_zombie_store_cannot_finish_rows_another_gateway_rescued(
    pg_url: URL,
    db: SessionDB,
    gateways: Callable[..., Gateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = ["zombie-direct", "zombie-delivered", "zombie-raised"]
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
            for session_id, handler in (("zombie-delivered", delivers), ("zombie-raised", raises)):
                runner = types.SimpleNamespace(_process_handoff=handler)
                watch = run.HandoffWatch(runner, interval=1.0, drain_timeout=1.0)
                row = {"id": session_id, "handoff_platform": "telegram"}
                claimed = run._Claimed((None, session_id), None)
                run_coroutine(watch._deliver(store, row, claimed))
        discarded = [r.getMessage() for r in caplog.records if "discarded" in r.getMessage()]
        assert any("completion of zombie-delivered" in m for m in discarded), discarded
        assert any("failure of zombie-raised" in m for m in discarded), discarded
        assert not any(
            "handoff zombie-delivered completed" in r.getMessage() for r in caplog.records
        )

    for session_id in ids:
        assert handoff_row(db, session_id) == rescued[session_id], session_id


def run_coroutine(coroutine: Any) -> Any:
    return asyncio.run(coroutine)
