"""PostgreSQL URLs that list several servers, in each of libpq's spellings, wherever a URL is
read: the library, the stores of every kind, the command line, and the LISTEN connection.

The servers are real: a closed loopback port listed first (a dead primary), the test server
second. Each spelling must reach the live one; ``target_session_attrs`` goes to the driver.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from sqlalchemy.engine import URL

from gateway.run import GatewayRunner
from hermes_state import SessionDB, multihost, notify
from hermes_state.engine import describe, resolve_url
from hermes_state.errors import DatabaseUnavailableError, InvalidInputError
from tests.conftest import migrated_database
from tests.support.processes import DEADLINE, eventually, in_process, run_cli
from tests.support.stores import STORE_KINDS, LoopThread, open_kind

AN_HOUR = 3600.0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def spellings(live: URL, dead_port: int) -> dict[str, str]:
    """``live``'s database behind a dead server, in each spelling libpq and SQLAlchemy know."""
    user = live.username or "root"
    password = f":{live.password}" if live.password else ""
    live_host, live_port = live.host or "127.0.0.1", live.port or 5432
    database = live.database
    return {
        "authority": (
            f"postgresql://{user}{password}@127.0.0.1:{dead_port},{live_host}:{live_port}"
            f"/{database}?target_session_attrs=read-write"
        ),
        "host-params": (
            f"postgresql://{user}{password}@/{database}?host=127.0.0.1:{dead_port}"
            f"&host={live_host}:{live_port}&target_session_attrs=read-write"
        ),
        "host-and-port-lists": (
            f"postgresql://{user}{password}@/{database}?host=127.0.0.1,{live_host}"
            f"&port={dead_port},{live_port}&target_session_attrs=read-write"
        ),
    }


# -- reading them (no server needed) -------------------------------------------------------------


def test_every_spelling_reads_into_one_url_and_back_into_libpqs_form() -> None:
    shapes = {
        resolve_url(text)
        for text in (
            "postgresql://u:secret@h1:5433,h2:5432/db?target_session_attrs=read-write",
            "postgresql://u:secret@/db?host=h1:5433&host=h2:5432&target_session_attrs=read-write",
            "postgresql://u:secret@/db?host=h1,h2&port=5433,5432&target_session_attrs=read-write",
            "postgres://u:secret@h1:5433,h2/db?target_session_attrs=read-write",
        )
    }
    assert len(shapes) == 1
    (url,) = shapes
    assert url.query["host"] == ("h1:5433", "h2:5432")
    assert url.query["target_session_attrs"] == "read-write"
    assert url.password == "secret"
    shown = describe(url)
    assert shown == ("postgresql://u:***@h1:5433,h2:5432/db?target_session_attrs=read-write")
    assert "secret" not in shown


def test_a_password_with_url_characters_and_ipv6_hosts_are_kept() -> None:
    url = resolve_url("postgresql://u:p%40ss%2Cw@[::1]:5433,db.example:5432/x")
    assert url.password == "p@ss,w"
    assert multihost.hosts(url) == [("::1", 5433), ("db.example", 5432)]
    assert describe(url) == "postgresql://u:***@[::1]:5433,db.example:5432/x"
    params = notify.connect_params(url)
    assert (params["host"], params["port"]) == ("::1,db.example", "5433,5432")
    assert params["password"] == "p@ss,w"


def test_the_listen_connection_gets_every_host_and_the_primary_only() -> None:
    url = resolve_url("postgresql://u@h1:5433,h2:5432/db")
    params = notify.connect_params(url)
    assert (params["host"], params["port"], params["dbname"]) == ("h1,h2", "5433,5432", "db")
    # A standby cannot LISTEN and never sends NOTIFY: the listener asks for the primary.
    assert params["target_session_attrs"] == "read-write"
    chosen = notify.connect_params(
        resolve_url("postgresql://u@h1,h2/db?target_session_attrs=primary")
    )
    assert chosen["target_session_attrs"] == "primary"
    single = notify.connect_params(resolve_url("postgresql://u@h1:5433/db"))
    assert (single["host"], single["port"]) == ("h1", 5433)
    assert "target_session_attrs" not in single


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("mysql://u:secret@h1:3306,h2:3306/db", "mysql://USER@PRIMARY:3306/DB"),
        ("mariadb://u@/db?host=h1&host=h2", "mariadb://USER@PRIMARY:3306/DB"),
        ("postgresql://u:secret@h1,h2/db?host=h3", "target_session_attrs=read-write"),
        ("postgresql://u@/db?host=h1:1&host=h2:2&port=3,4", "?host=HOST1:5432&host=HOST2:5432"),
        ("postgresql://u@/db?host=h1&host=h2&port=3,4,5", "HOST1:5432,HOST2:5432"),
        ("postgresql://u@h1:99999,h2/db", "HOST1:5432,HOST2:5432"),
    ],
)
def test_an_unsupported_combination_is_one_line_naming_a_form_that_works(
    text: str, names: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        resolve_url(text)
    message = str(refused.value)
    assert "\n" not in message
    assert names in message
    assert "secret" not in message


def test_the_command_line_masks_the_password_of_a_list_of_hosts() -> None:
    port = closed_port()
    typed = f"postgresql://u:hunter2@127.0.0.1:{port},127.0.0.1:{closed_port()}/x"
    finished = in_process("--url", typed, "session", "list")
    assert finished.returncode != 0
    assert "hunter2" not in finished.stderr + finished.stdout
    assert "cannot open" in finished.stderr
    assert f"127.0.0.1:{port}" in finished.stderr
    assert len(finished.stderr.strip().splitlines()) == 1


# -- on a real server, behind a dead one ---------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[URL]:
    with migrated_database("postgresql") as url:
        yield url


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    try:
        yield thread
    finally:
        thread.close()


@pytest.mark.parametrize("spelling", ["authority", "host-params", "host-and-port-lists"])
@pytest.mark.parametrize("kind", STORE_KINDS)
def test_every_store_kind_reaches_the_live_server_behind_a_dead_one(
    live: URL, loop: LoopThread, kind: str, spelling: str
) -> None:
    text = spellings(live, closed_port())[spelling]
    session_id = f"{kind}-{spelling}"
    db = open_kind(kind, resolve_url(text), loop)
    try:
        db.create_session(session_id, "cli")
        assert db.get_session(session_id) is not None
        assert "***" in db.where or live.password is None
    finally:
        db.close()
    with SessionDB(url=live) as direct:
        assert direct.get_session(session_id) is not None


def test_the_command_line_and_db_copy_take_the_authority_form(live: URL, tmp_path: Any) -> None:
    text = spellings(live, closed_port())["authority"]
    created = run_cli(text, "session", "create", "from-the-cli")
    assert created.returncode == 0, created.stderr
    with SessionDB(url=live) as direct:
        assert direct.get_session("from-the-cli") is not None
    target = tmp_path / "copy.db"
    copied = run_cli(text, "db", "copy", "--to", str(target))
    assert copied.returncode == 0, copied.stderr
    with SessionDB(target) as copy:
        assert copy.get_session("from-the-cli") is not None


def test_only_dead_servers_is_database_unavailable() -> None:
    text = f"postgresql://root@127.0.0.1:{closed_port()},127.0.0.1:{closed_port()}/x"
    with pytest.raises(DatabaseUnavailableError) as refused:
        SessionDB(url=text)
    assert "Check the URL and that the server is running" in str(refused.value)


def test_a_closed_loopback_port_is_database_unavailable() -> None:
    with pytest.raises(DatabaseUnavailableError):
        SessionDB(url=f"postgresql://root@127.0.0.1:{closed_port()}/x")


@pytest.mark.asyncio
async def test_a_watcher_listening_through_a_list_of_hosts_is_woken(live: URL) -> None:
    text = spellings(live, closed_port())["authority"]
    store = SessionDB(url=text)
    await asyncio.to_thread(store.create_session, "woken", "cli")
    delivered: list[str] = []

    async def handler(row: Mapping[str, Any], _profile: str | None) -> None:
        delivered.append(row["id"])

    runner = GatewayRunner(store, handler, interval=AN_HOUR)
    task = asyncio.ensure_future(runner.run())
    try:
        await eventually(lambda: listening(live), "the watcher to LISTEN")
        requested = await asyncio.to_thread(
            run_cli, text, "handoff", "request", "woken", "telegram"
        )
        assert requested.returncode == 0, requested.stderr
        await eventually(lambda: delivered == ["woken"], "the LISTEN wake-up", DEADLINE)
    finally:
        runner.stop()
        try:
            await asyncio.wait_for(task, DEADLINE)
        finally:
            await runner.close()
    with SessionDB(url=live) as direct:
        handoff = direct.get_handoff_state("woken")
        assert handoff is not None
        assert handoff["state"] == "completed"


def listening(url: URL) -> bool:
    from sqlalchemy import create_engine, text

    from tests.support.digest import sync_url

    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as connection:
            return bool(
                connection.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query ILIKE 'LISTEN %'"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def test_the_dashboard_serves_and_streams_through_a_list_of_hosts(live: URL) -> None:
    import httpx

    from tests.support.processes import DashboardProcess

    text = spellings(live, closed_port())["authority"]
    with SessionDB(url=live) as writer:
        writer.create_session("seen", "cli")
    with (
        DashboardProcess(text) as dashboard,
        httpx.stream("GET", dashboard.base + "/events", timeout=30) as response,
    ):
        assert httpx.get(dashboard.base + "/api/stats").is_success
        lines = response.iter_lines()
        assert next(lines) == "retry: 1000"
        done = run_cli(text, "handoff", "request", "seen", "discord")
        assert done.returncode == 0, done.stderr
        assert any("seen" in line for line in itertools.islice(lines, 20)), "no event"
