"""A real ``hermes-state watch`` through a database outage, staged with a loopback relay.

The watcher reaches PostgreSQL through :class:`~tests.support.tcp_proxy.TcpProxy`; cutting
the relay is a server gone (connections reset, the port closed), restoring it the server
back. What must hold: a few log lines per outage (not one traceback per poll), the watcher
alive throughout, and an outcome its handler produced while the server was away recorded
once it is back: the row completed, delivered once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from tests.conftest import SERIAL, migrated_database
from tests.support.processes import Watcher, cli_argv, wait_until
from tests.support.tcp_proxy import TcpProxy

pytestmark = SERIAL

#: Runs once per delivery: counts itself, says it started, waits for the test's go.
HANDLER = 'echo run >> "$RUNS"; touch "$STARTED"; while [ ! -e "$GO" ]; do sleep 0.05; done'
OUTAGE = 4.0  # seconds the relay stays cut


@pytest.fixture
def live() -> Iterator[URL]:
    with migrated_database("postgresql") as url:
        yield url


@pytest.fixture
def proxy(live: URL) -> Iterator[TcpProxy]:
    with TcpProxy(live.port or 5432) as relay:
        yield relay


def handler_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RUNS": str(tmp_path / "runs"),
        "STARTED": str(tmp_path / "started"),
        "GO": str(tmp_path / "go"),
    }


def state_of(url: URL, session_id: str) -> str | None:
    with SessionDB(url=url) as db:
        handoff = db.get_handoff_state(session_id)
        return None if handoff is None else handoff["state"]


def watch(url: URL, env: dict[str, str], *extra: str) -> Watcher:
    argv = cli_argv(
        url,
        *extra,
        "watch",
        "--owner",
        "gateway-one",
        "--lease-seconds",
        "30",
        "--interval",
        "0.2",
        "--exec",
        HANDLER,
    )
    return Watcher(argv, env)


def test_an_outage_costs_a_few_log_lines_and_the_watcher_lives_on(
    live: URL, proxy: TcpProxy, tmp_path: Path
) -> None:
    env = handler_env(tmp_path)
    Path(env["GO"]).touch()  # deliveries end at once
    watcher = watch(live.set(port=proxy.port), env)
    try:
        watcher.wait_for_line("watching")
        time.sleep(1.0)  # a few clean polls, the LISTEN connection up
        before = len(watcher.lines)
        proxy.cut()
        time.sleep(OUTAGE)
        proxy.restore()
        watcher.wait_for_line("works again after")
        time.sleep(1.0)
        during = watcher.lines[before:]
        watcher.assert_alive()
        # One line when it starts and one when it is over, per loop that talks to the
        # database (the poll, the LISTEN connection, perhaps lease upkeep): never one per poll.
        # (At 0.2 s a poll, the watcher used to write about 20 tracebacks a second.)
        assert len(during) <= 10, "".join(during)
        assert not any("Traceback" in line for line in during), "".join(during)
        assert any("poll of the root store failed" in line for line in during), "".join(during)
        assert any("poll of the root store works again" in line for line in during)

        # And it serves again.
        with SessionDB(url=live) as db:
            db.create_session("after", "cli")
            assert db.request_handoff("after", "telegram")
        wait_until(lambda: state_of(live, "after") == "completed", "a delivery after it")
    finally:
        watcher.kill()


def test_the_traceback_is_logged_under_verbose_only(
    live: URL, proxy: TcpProxy, tmp_path: Path
) -> None:
    watcher = watch(live.set(port=proxy.port), handler_env(tmp_path), "--verbose")
    try:
        watcher.wait_for_line("watching")
        time.sleep(0.5)
        proxy.cut()
        watcher.wait_for_line("poll of the root store failed")
        wait_until(lambda: "Traceback" in watcher.log, "the traceback under --verbose")
        proxy.restore()
        watcher.wait_for_line("works again after")
    finally:
        watcher.kill()


def test_an_outcome_produced_during_an_outage_is_recorded_once_the_server_is_back(
    live: URL, proxy: TcpProxy, tmp_path: Path
) -> None:
    env = handler_env(tmp_path)
    with SessionDB(url=live) as db:
        db.create_session("through", "cli")
        assert db.request_handoff("through", "telegram")
    watcher = watch(live.set(port=proxy.port), env)
    try:
        wait_until(lambda: Path(env["STARTED"]).exists(), "the delivery to start")
        proxy.cut()
        Path(env["GO"]).touch()  # the handler succeeds while the server is away
        watcher.wait_for_line("recording outcomes failed")
        time.sleep(1.0)  # a retry or two fail too
        assert state_of(live, "through") == "running"
        proxy.restore()  # well before the 30 s lease runs out
        wait_until(lambda: state_of(live, "through") == "completed", "the completion to land")
        watcher.assert_alive()
        assert Path(env["RUNS"]).read_text().splitlines() == ["run"], "delivered once"
        assert "they stay running until reclaimed" not in watcher.log
    finally:
        watcher.kill()
