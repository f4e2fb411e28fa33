"""Crash and shutdown of a real `hermes-state watch` process.

Each test runs the watcher as a separate process (``python -m hermes_state.cli``) on an SQLite
file, with a delivery command that writes its pid and then hangs, and checks the database after
killing or stopping the watcher. Waits are polls with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from tests.conftest import SERIAL
from tests.support.processes import (
    Watcher,
    cli_argv,
    group_is_gone,
    kill_group,
    read_pid,
    run_cli,
    wait_until,
)

pytestmark = SERIAL  # real watchers killed and drained mid-delivery

SESSION = "crash-me"

# The delivery hangs after recording its pid; `exec` keeps that pid for the sleep itself.
HANGING_COMMAND = 'echo $$ > "$PID_FILE"; exec sleep 600'


class ShortLivedStore:
    """Each call opens the database, runs one SessionDB method, and closes it again.

    A store held open across the test would be exposed to the lock bug that
    ``test_a_long_lived_store_keeps_its_writes_visible_to_other_processes`` pins: its writes
    could vanish for the watcher processes. One short-lived store at a time is not.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with SessionDB(self.path) as store:
                return getattr(store, name)(*args, **kwargs)

        return call


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db(db_path: Path) -> ShortLivedStore:
    SessionDB(db_path).close()  # create the file at head first
    store = ShortLivedStore(db_path)
    store.create_session(SESSION, "cli")
    store.append_message(SESSION, "user", "continue this on telegram please")
    assert store.request_handoff(SESSION, "telegram") is True
    return store


@pytest.fixture
def pid_file(tmp_path: Path) -> Path:
    return tmp_path / "delivery.pid"


@pytest.fixture
def env(pid_file: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PID_FILE": str(pid_file), "GO_FILE": str(tmp_path / "go")}


def state_of(db: ShortLivedStore) -> dict[str, str | None]:
    handoff = db.get_handoff_state(SESSION)
    assert handoff is not None
    return handoff


def run_once(db_path: Path, env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    finished = run_cli(db_path, "watch", "--once", "--exec", command, env=env)
    assert "Traceback" not in finished.stderr
    assert finished.returncode == 0, finished.stderr
    return finished


def test_a_killed_watcher_strands_its_row_until_the_next_start(
    db: ShortLivedStore, db_path: Path, pid_file: Path, env: dict[str, str]
) -> None:
    watcher = Watcher(
        cli_argv(db_path, "watch", "--interval", "0.05", "--exec", HANGING_COMMAND), env
    )
    delivery_pid = None
    try:
        wait_until(
            lambda: state_of(db)["state"] == "running" and read_pid(pid_file) is not None,
            "the watcher to claim the row and start delivering",
        )
        delivery_pid = read_pid(pid_file)
        watcher.process.send_signal(signal.SIGKILL)
        assert watcher.wait() == -signal.SIGKILL
    finally:
        watcher.kill()
        kill_group(delivery_pid)  # it runs in its own process group, so it outlived the watcher

    # Nobody knows whether the delivery arrived: the row stays claimed, and a new request waits.
    assert state_of(db) == {"state": "running", "platform": "telegram", "error": None}
    assert db.request_handoff(SESSION, "telegram") is False

    # The next watcher's startup fails it, with a hint to retry, and delivers nothing.
    restarted = run_once(db_path, env, 'echo delivered >> "$PID_FILE.deliveries"')
    reclaimed = state_of(db)
    assert reclaimed["state"] == "failed"
    assert reclaimed["error"] is not None
    assert "/handoff" in reclaimed["error"]
    assert not Path(f"{pid_file}.deliveries").exists(), restarted.stderr

    # The user re-runs /handoff: accepted, and the next watcher delivers it.
    assert db.request_handoff(SESSION, "telegram") is True
    retried = run_once(db_path, env, "cat > /dev/null")
    assert state_of(db) == {"state": "completed", "platform": "telegram", "error": None}, (
        retried.stderr
    )


def test_sigterm_stops_claiming_and_drains_the_delivery_in_flight(
    db: ShortLivedStore, db_path: Path, pid_file: Path, env: dict[str, str], tmp_path: Path
) -> None:
    db.create_session("latecomer", "cli")
    # The delivery waits for a file the test creates, then reads its row and succeeds.
    waits_for_go = (
        'echo $$ > "$PID_FILE"; while [ ! -e "$GO_FILE" ]; do sleep 0.01; done; cat > /dev/null'
    )
    watcher = Watcher(cli_argv(db_path, "watch", "--interval", "0.05", "--exec", waits_for_go), env)
    delivery_pid = None
    try:
        wait_until(
            lambda: state_of(db)["state"] == "running" and read_pid(pid_file) is not None,
            "the delivery to start",
        )
        delivery_pid = read_pid(pid_file)
        watcher.process.send_signal(signal.SIGTERM)
        watcher.wait_for_line("SIGTERM")
        # The drain has begun once the watcher says what it waits for: polling is over.
        watcher.wait_for_line("waiting up to")
        assert db.request_handoff("latecomer", "discord") is True
        assert watcher.process.poll() is None  # still draining: the delivery has not finished
        (tmp_path / "go").touch()
        code = watcher.wait()
    finally:
        watcher.kill()
        kill_group(delivery_pid)

    assert code == 0, watcher.log
    assert "Traceback" not in watcher.log
    assert state_of(db) == {"state": "completed", "platform": "telegram", "error": None}
    assert db.get_handoff_state("latecomer") == {
        "state": "pending",
        "platform": "discord",
        "error": None,
    }


def test_a_drain_timeout_cancels_the_delivery_and_leaves_the_row_running(
    db: ShortLivedStore, db_path: Path, pid_file: Path, env: dict[str, str]
) -> None:
    argv = cli_argv(
        db_path, "watch", "--interval", "0.05", "--drain-timeout", "0.2", "--exec", HANGING_COMMAND
    )
    watcher = Watcher(argv, env)
    delivery_pid = None
    try:
        wait_until(
            lambda: state_of(db)["state"] == "running" and read_pid(pid_file) is not None,
            "the delivery to start",
        )
        delivery_pid = read_pid(pid_file)
        assert delivery_pid is not None
        assert not group_is_gone(delivery_pid)
        watcher.process.send_signal(signal.SIGTERM)
        code = watcher.wait()
        # The cancelled delivery's process group was killed by the watcher on its way out.
        wait_until(lambda: group_is_gone(delivery_pid), "the delivery's process group to go")
    finally:
        watcher.kill()
        kill_group(delivery_pid)

    assert code == 0, watcher.log
    assert "Traceback" not in watcher.log
    assert state_of(db) == {"state": "running", "platform": "telegram", "error": None}


# -- a store kept open while other processes come and go ----------------------------------------


def show(db_path: Path, session_id: str) -> subprocess.CompletedProcess[str]:
    """What a person sees from another shell: `hermes-state handoff show SESSION_ID --json`."""
    return run_cli(db_path, "handoff", "show", session_id, "--json")


@pytest.mark.parametrize("how", ["store creates the file", "a second store opens it"])
def test_a_long_lived_store_keeps_its_writes_visible_to_other_processes(
    tmp_path: Path, how: str
) -> None:
    db_path = tmp_path / "state.db"
    if how == "a second store opens it":
        SessionDB(db_path).close()
    with SessionDB(db_path) as gateway:  # e.g. a gateway process, up for days
        if how == "a second store opens it":
            SessionDB(db_path).close()  # e.g. a profile store, or a helper, in the same process
        gateway.create_session("first", "cli")
        assert gateway.request_handoff("first", "telegram") is True
        seen = show(db_path, "first")  # another process opens, reads and closes the database
        assert seen.returncode == 0, seen.stderr

        gateway.create_session("second", "cli")
        assert gateway.request_handoff("second", "telegram") is True
        seen = show(db_path, "second")
        assert seen.returncode == 0, seen.stderr
        assert json.loads(seen.stdout)["state"] == "pending"
