"""The dashboard: JSON API, pages, hostile ids, actions and their guards, metrics, the change
feed and ``/events`` fed by other processes, and the command's refusals.

The API and pages run in-process (Starlette's test client, the app's lifespan on) against a
real store of every backend; ``/events`` runs against a real ``hermes-state dashboard``
process while another process makes the changes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from markupsafe import escape
from sqlalchemy.engine import URL
from starlette.testclient import TestClient

from hermes_state import AsyncSessionDB, NativeAsyncSessionDB, SessionDB
from hermes_state.cli import main
from hermes_state.dashboard import app as dashboard_app
from hermes_state.dashboard.app import WITHDRAWN_ERROR, create_app, session_path
from hermes_state.dashboard.feed import QUEUE_SIZE, ChangeFeed, Subscription
from hermes_state.engine import describe, make_engine
from hermes_state.models import handoff_events
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import server_url, throwaway_database
from tests.support.processes import (
    DashboardProcess,
    Watcher,
    cli_argv,
    eventually,
    run_cli,
    wait_until,
)
from tests.support.stores import HandClock, put
from tests.support.vintages import FIXTURES

TOKEN = "t0ken-for-tests"
HOSTILE_IDS = [
    'it\'s "quoted"',
    "ünïcødé-sessión-✓",
    "../../etc/passwd",
    "<script>alert(1)</script>",
    "a%2Fb",
    "slash/in/id",
    "question?mark#hash",
    "..",
    ".",
    "trailing/",
    "/leading",
    "spaces  in  id",
]


@pytest.fixture
def db(backend_url: URL) -> Iterator[SessionDB]:
    store = SessionDB(url=backend_url, actor="dashboard")
    try:
        yield store
    finally:
        store.close()


def client_for(db: SessionDB, token: str | None = TOKEN) -> TestClient:
    app = create_app(AsyncSessionDB(db), token=token, where=db.where, feed_interval=0.05)
    return TestClient(app, base_url="http://127.0.0.1:8765")


def walk(db: SessionDB) -> None:
    for index, state in enumerate(["pending", "running", "completed", "failed", "pending"]):
        put(db, f"s{index}", state, error=f"error <{index}>")
        db.append_message(f"s{index}", "user", f"hello {index}")


# -- the JSON API -------------------------------------------------------------------------------


def test_stats_and_listing(db: SessionDB) -> None:
    walk(db)
    with client_for(db) as client:
        stats = client.get("/api/stats").json()
        assert stats["counts"] == {"pending": 2, "running": 1, "completed": 1, "failed": 1}
        assert stats["oldest_pending_age_seconds"] >= 0
        assert stats["where"] == db.where
        listed = client.get("/api/handoffs", params={"state": "pending"}).json()
        assert [row["id"] for row in listed["handoffs"]] == ["s0", "s4"]
        assert listed["next_after"] is None


def test_paging_walks_every_row_once(db: SessionDB) -> None:
    for index in range(7):
        db.create_session(f"p{index}", "cli", started_at=1000.0 + index // 2)  # ties on purpose
        db.request_handoff(f"p{index}", "telegram")
    seen: list[str] = []
    with client_for(db) as client:
        params: dict[str, Any] = {"limit": 3}
        while True:
            page = client.get("/api/handoffs", params=params).json()
            seen += [row["id"] for row in page["handoffs"]]
            if page["next_after"] is None:
                break
            params["after"] = page["next_after"]
    assert seen == [f"p{index}" for index in range(7)]


def test_search_matches_literally(db: SessionDB) -> None:
    for session_id in ("a_b", "axb", "50%", "500", "x/y"):
        put(db, session_id, "pending")
    with client_for(db) as client:

        def ids(q: str) -> list[str]:
            found = client.get("/api/handoffs", params={"q": q}).json()["handoffs"]
            return sorted(row["id"] for row in found)

        assert ids("_") == ["a_b"]
        assert ids("%") == ["50%"]
        assert ids("/") == ["x/y"]
        assert ids("nothing") == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"state": "bogus"}, "unknown state"),
        ({"limit": "0"}, "between 1 and"),
        ({"limit": "many"}, "whole number"),
        ({"limit": "100000"}, "between 1 and"),
    ],
)
def test_listing_bad_input_is_a_400_with_a_message(
    db: SessionDB, query: dict[str, str], message: str
) -> None:
    with client_for(db) as client:
        response = client.get("/api/handoffs", params=query)
        assert response.status_code == 400
        assert message in response.json()["error"]
        page = client.get("/", params=query)
        assert page.status_code == 400
        assert message in page.text


def test_session_document(db: SessionDB) -> None:
    walk(db)
    with client_for(db) as client:
        document = client.get("/api/sessions/s3").json()
        assert document["session"]["id"] == "s3"
        assert document["handoff"] == {
            "state": "failed",
            "platform": "telegram",
            "error": "error <3>",
        }
        assert [e["to_state"] for e in document["history"]] == ["pending", "running", "failed"]
        assert [m["content"] for m in document["messages"]] == ["hello 3"]
        missing = client.get("/api/sessions/nobody")
        assert missing.status_code == 404
        assert "no session" in missing.json()["error"]


# -- hostile ids ----------------------------------------------------------------------------


def test_hostile_ids_route_and_render_escaped(db: SessionDB, backend_url: URL) -> None:
    # A real server: Starlette's test client decodes a path twice, which hides what %25 does.
    for session_id in HOSTILE_IDS:
        put(db, session_id, "failed", error=f"broke on <{session_id}>")
        db.append_message(session_id, "assistant", f"<img src=x onerror=alert('{session_id}')>")
    with (
        DashboardProcess(backend_url) as dashboard,
        httpx.Client(base_url=dashboard.base) as client,
    ):
        overview = client.get("/").text
        for session_id in HOSTILE_IDS:
            document = client.get(session_path(session_id, "/api/sessions/")).json()
            assert document["session"]["id"] == session_id
            page = client.get(session_path(session_id))
            assert page.status_code == 200, session_id
            assert f'<h1 class="session-id">{escape(session_id)}</h1>' in page.text
            assert escape(f"broke on <{session_id}>") in page.text
            # The overview links each id to the URL that routes back to it.
            assert f'href="{escape(session_path(session_id))}"' in overview
        for text in (overview, client.get(session_path("<script>alert(1)</script>")).text):
            assert "<script>alert" not in text
            assert "<img src=x" not in text


def test_session_paths_survive_dot_segment_resolution() -> None:
    base = "http://127.0.0.1:8765/sessions/"
    for session_id in HOSTILE_IDS:
        path = session_path(session_id)
        # What a browser does to a link before requesting it: resolve dot segments.
        assert urljoin(base, path) == "http://127.0.0.1:8765" + path, session_id


def test_a_loopback_dashboard_answers_only_to_loopback_names(tmp_path: Path) -> None:
    SessionDB(tmp_path / "state.db").close()  # only `db upgrade` or the library creates one
    with DashboardProcess(tmp_path / "state.db") as dashboard:
        port = dashboard.base.rsplit(":", 1)[1]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            assert httpx.get(dashboard.base + "/api/stats", headers={"Host": host}).is_success
        rebound = httpx.get(dashboard.base + "/api/stats", headers={"Host": f"evil.example:{port}"})
        assert rebound.status_code == 400
        assert "unexpected Host" in rebound.json()["error"]


# -- actions --------------------------------------------------------------------------------


def test_without_a_token_the_dashboard_is_read_only(db: SessionDB) -> None:
    put(db, "f", "failed")
    with client_for(db, token=None) as client:
        assert "read-only" in client.get("/").text
        response = client.post("/api/actions/retry/f", headers={"Authorization": "Bearer x"})
        assert response.status_code == 403
        assert "--token" in response.json()["error"]
    assert db.get_handoff_state("f")["state"] == "failed"


def test_a_wrong_token_is_told_apart_from_a_missing_one(db: SessionDB) -> None:
    put(db, "f", "failed")
    with client_for(db) as client:
        missing = client.post("/api/actions/retry/f")
        wrong = client.post("/api/actions/retry/f", headers={"Authorization": "Bearer wrong"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert "send the dashboard token" in missing.json()["error"]
    assert "wrong dashboard token" in wrong.json()["error"]
    assert db.get_handoff_state("f")["state"] == "failed"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": f"Basic {TOKEN}"}, 401),
        ({"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}, 403),
        ({"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "cross-site"}, 403),
        ({"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "same-site"}, 403),
    ],
)
def test_actions_refuse_missing_tokens_and_cross_site_requests(
    db: SessionDB, headers: dict[str, str], status: int
) -> None:
    put(db, "f", "failed")
    with client_for(db) as client:
        response = client.post("/api/actions/retry/f", headers=headers)
        assert response.status_code == status
        assert response.json()["error"]
    assert db.get_handoff_state("f")["state"] == "failed"
    assert [e["to_state"] for e in db.handoff_history("f")] == ["pending", "running", "failed"]


def test_actions_run_and_are_audited_as_the_dashboard(db: SessionDB) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://127.0.0.1:8765"}
    put(db, "failed one", "failed")
    put(db, "pending one", "pending")
    put(db, "running one", "running")
    with client_for(db) as client:
        retried = client.post(session_path("failed one", "/api/actions/retry/"), headers=auth)
        assert retried.status_code == 200, retried.text
        assert retried.json()["state"] == "pending"
        withdrawn = client.post(session_path("pending one", "/api/actions/withdraw/"), headers=auth)
        assert withdrawn.json()["state"] == "failed"
        refused = client.post(session_path("running one", "/api/actions/withdraw/"), headers=auth)
        assert refused.status_code == 409
        assert "only a pending handoff" in refused.json()["error"]
        unknown = client.post("/api/actions/retry/nobody", headers=auth)
        assert unknown.status_code == 404
    assert db.handoff_history("failed one")[-1]["actor"] == "dashboard"
    last = db.handoff_history("pending one")[-1]
    assert (last["actor"], last["detail"]) == ("dashboard", WITHDRAWN_ERROR)
    assert db.get_handoff_state("running one")["state"] == "running"


def test_reclaim_fails_only_expired_leases(db: SessionDB, backend_url: URL) -> None:
    past = HandClock(time.time() - 3600)
    with (
        SessionDB(url=backend_url, owner="dead-gw", lease_seconds=60, clock=past) as dead,
        SessionDB(url=backend_url, owner="live-gw", lease_seconds=600) as live,
    ):
        put(dead, "stranded", "running")
        put(live, "healthy", "running")
    with client_for(db) as client:
        page = client.get("/").text
        assert 'class="expired"' in page
        assert "expired 5" in page or "expired 59" in page  # "expired 59.0 min ago"
        response = client.post("/api/actions/reclaim", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.json() == {"reclaimed": ["stranded"]}
    assert db.get_handoff_state("stranded") == {
        "state": "failed",
        "platform": "telegram",
        "error": STRANDED_ERROR,
    }
    assert db.handoff_history("stranded")[-1]["actor"] == "dashboard"
    assert db.get_handoff_state("healthy")["state"] == "running"


# -- metrics --------------------------------------------------------------------------------


def test_metrics_exposition(db: SessionDB) -> None:
    walk(db)
    with client_for(db) as client:
        response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    lines = set(response.text.splitlines())
    assert 'hermes_state_handoffs{state="pending"} 2.0' in lines
    assert 'hermes_state_handoffs{state="failed"} 1.0' in lines
    assert any(line.startswith("hermes_state_oldest_pending_age_seconds ") for line in lines)
    assert 'hermes_state_running_handoffs{owner=""} 1.0' in lines
    assert 'hermes_state_expired_leases{owner=""} 0.0' in lines


# -- no password on any page ----------------------------------------------------------------


def test_no_page_shows_the_database_password() -> None:
    if server_url("postgresql") is None:
        pytest.skip("HERMES_STATE_TEST_PG_URL is not set")
    with throwaway_database("postgresql") as url:
        secret = "pa55-Wörd-s3cret"
        with_password = url.set(password=secret)
        run_cli(with_password, "db", "upgrade")
        with SessionDB(url=with_password) as store:
            put(store, "s", "failed", error="boom")
            with client_for(store) as client:
                for path in ("/", "/sessions/s", "/api/stats", "/api/sessions/s", "/metrics"):
                    assert secret not in client.get(path).text, path
                    assert "pa55" not in client.get(path).text, path
            assert secret not in describe(store.url)


# -- the native async store serves the same app ---------------------------------------------


def test_the_app_runs_on_the_native_async_store(db: SessionDB, backend_url: URL) -> None:
    walk(db)
    native = NativeAsyncSessionDB(url=backend_url, actor="dashboard")
    app = create_app(native, token=TOKEN, where=native.where, feed_interval=0.05)
    with TestClient(app) as client:
        assert client.get("/api/stats").json()["counts"]["pending"] == 2
        assert client.get("/api/sessions/s1").json()["handoff"]["state"] == "running"
        page = client.get("/api/handoffs", params={"limit": 2, "after": "s1"}).json()
        assert [row["id"] for row in page["handoffs"]] == ["s2", "s3"]
        client.portal.call(native.close)  # type: ignore[union-attr]


# -- the change feed ------------------------------------------------------------------------


def test_a_full_subscription_is_dropped_and_ends() -> None:
    async def scenario() -> None:
        subscription = Subscription()
        for event_id in range(QUEUE_SIZE):
            assert subscription.offer({"id": event_id})
        assert subscription.offer({"id": QUEUE_SIZE}) is False
        assert subscription.dropped
        assert subscription.queue.qsize() == QUEUE_SIZE  # bounded: one event made room
        items = [subscription.queue.get_nowait() for _ in range(QUEUE_SIZE)]
        assert items[-1] is None  # the end marker

    asyncio.run(scenario())


@pytest.mark.asyncio
async def test_feed_fans_out_and_drops_a_client_that_never_reads(backend_url: URL) -> None:
    with SessionDB(url=backend_url) as writer:
        writer.create_session("s", "cli")
        store = AsyncSessionDB(SessionDB(url=backend_url))
        feed = ChangeFeed(store, interval=0.02)
        await feed.start()
        try:
            async with feed.subscribe() as reader, feed.subscribe() as sleeper:
                for _ in range(QUEUE_SIZE // 2 + 1):  # two events per loop
                    assert writer.request_handoff("s", "telegram")
                    assert writer.fail_handoff("s", "again")
                    seen = await asyncio.wait_for(reader.queue.get(), 30)
                    assert seen is not None
                    assert seen["session_id"] == "s"
                    while not reader.queue.empty():
                        assert (await reader.queue.get()) is not None
                await eventually(lambda: sleeper.dropped, "the sleeping client dropped")
                assert not reader.dropped
                assert feed.clients == 1
                assert feed.dropped_clients == 1
        finally:
            await feed.stop()
            await store.close()


@pytest.mark.asyncio
async def test_a_stop_right_after_a_wake_up_still_stops_the_feed(tmp_path: Path) -> None:
    """``stop`` cancels the feed's task just as a wake-up ends its wait. Python 3.11's
    ``asyncio.wait_for`` then returned the wait's result and dropped the cancellation, so the
    task went on polling and ``stop`` (and the dashboard's shutdown with it) never returned."""
    store = AsyncSessionDB(SessionDB(tmp_path / "state.db"))
    try:
        for attempt in range(10):
            feed = ChangeFeed(store, interval=30.0)
            await feed.start()
            # Different points of the feed's wait (parked, probing the change token...).
            await asyncio.sleep(0.002 * (attempt % 5))
            feed.wake()
            try:
                async with asyncio.timeout(10):
                    await feed.stop()
            except TimeoutError:
                pytest.fail(f"stop() did not return (attempt {attempt})")
    finally:
        await store.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("pruned", [False, True], ids=["fresh", "pruned"])
async def test_feed_delivers_an_event_committed_after_a_later_one(
    backend_url: URL, pruned: bool
) -> None:
    """Two writers: the event with the lower id commits last. The feed, which has moved past
    it, still delivers it (the id gap is looked at again), also when the trail was pruned, so
    that the ids go on far above the newest event left."""
    if backend_url.get_backend_name() == "sqlite":
        pytest.skip("SQLite serialises writers: ids commit in order")
    with SessionDB(url=backend_url) as writer:
        writer.create_session("late", "cli")
        writer.create_session("early", "cli")
        if pruned:
            pruner = make_engine(backend_url)
            with pruner.begin() as connection:
                old = {"session_id": "late", "to_state": "pending", "at": 0.0}
                connection.execute(handoff_events.insert(), [old] * 1500)
                connection.execute(handoff_events.delete())
            pruner.dispose()
        store = AsyncSessionDB(SessionDB(url=backend_url))
        feed = ChangeFeed(store, interval=0.02)
        await feed.start()
        engine = make_engine(backend_url)
        try:
            async with feed.subscribe() as reader:
                slow = engine.connect()
                slow_transaction = slow.begin()
                event = {"session_id": "late", "to_state": "pending", "at": time.time()}
                slow.execute(handoff_events.insert().values(**event))  # id N, uncommitted
                assert writer.request_handoff("early", "telegram")  # id N+1, committed
                first = await asyncio.wait_for(reader.queue.get(), 30)
                assert first is not None
                assert first["session_id"] == "early"
                slow_transaction.commit()
                slow.close()
                second = await asyncio.wait_for(reader.queue.get(), 30)
                assert second is not None
                assert second["session_id"] == "late"
                assert second["id"] < first["id"]
        finally:
            engine.dispose()
            await feed.stop()
            await store.close()


def read_event(lines: Iterator[str], wanted: str, deadline: float = 30.0) -> dict[str, Any]:
    """The next ``handoff`` event of session ``wanted`` among an SSE response's lines."""
    give_up_at = time.monotonic() + deadline
    for line in lines:
        if line.startswith("data: "):
            event = json.loads(line.removeprefix("data: "))
            if event["session_id"] == wanted:
                return event
        if time.monotonic() > give_up_at:
            break
    pytest.fail(f"no event for {wanted!r} on /events")


def test_events_stream_changes_made_by_other_processes(backend_url: URL) -> None:
    with SessionDB(url=backend_url) as writer:
        writer.create_session("other process", "cli")
    with (
        DashboardProcess(backend_url) as dashboard,
        httpx.stream("GET", dashboard.base + "/events", timeout=30) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(lines) == "retry: 1000"  # subscribed before the change is made
        started = time.monotonic()
        done = run_cli(backend_url, "handoff", "request", "other process", "discord")
        assert done.returncode == 0, done.stderr
        event = read_event(lines, "other process")
        latency = time.monotonic() - started
        assert (event["from_state"], event["to_state"]) == (None, "pending")
        # Claims and finishes (which send no NOTIFY) arrive as well.
        done = run_cli(backend_url, "handoff", "fail", "other process", "gave up")
        assert done.returncode == 0, done.stderr
        event = read_event(lines, "other process")
        assert (event["to_state"], event["detail"]) == ("failed", "gave up")
    print(f"request -> event: {latency:.3f} s including the CLI's start")


# -- the command ----------------------------------------------------------------------------


def test_non_loopback_without_a_token_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERMES_STATE_DASHBOARD_TOKEN", raising=False)
    assert main(["dashboard", "--host", "0.0.0.0"]) == 2
    error = capsys.readouterr().err
    assert "without a token" in error
    assert error.count("\n") == 1
    assert main(["dashboard", "--port", "70000"]) == 2


def test_a_port_in_use_is_a_one_line_refusal(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(tmp_path / "state.db", "dashboard", "--port", str(port))
    assert done.returncode == 1
    assert done.stderr.startswith("hermes-state: cannot listen on 127.0.0.1:")
    assert "choose another --port" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_extra_names_the_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    assert main(["dashboard"]) == 1
    error = capsys.readouterr().err
    assert "pip install 'hermes-state[dashboard]'" in error
    assert error.count("\n") == 1


def test_help_shows_the_environment_twins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for variable in ("HOST", "PORT", "TOKEN"):
        assert f"HERMES_STATE_DASHBOARD_{variable}" in text


def test_the_dashboard_serves_its_static_files(tmp_path: Path) -> None:
    SessionDB(tmp_path / "state.db").close()  # only `db upgrade` or the library creates one
    with DashboardProcess(tmp_path / "state.db") as dashboard:
        for name in ("dashboard.js", "dashboard.css"):
            with urllib.request.urlopen(f"{dashboard.base}/static/{name}") as response:
                assert response.status == 200
                assert len(response.read()) > 500
        with urllib.request.urlopen(dashboard.base + "/") as response:
            assert "hermes-state" in response.read().decode()


# -- the watcher's metrics ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def serving_or_gone(watcher: Watcher, port: int) -> Callable[[], bool]:
    serving = f"metrics on http://127.0.0.1:{port}/metrics"
    return lambda: serving in watcher.log or watcher.process.poll() is not None


def watch_with_metrics(argv: list[str]) -> tuple[Watcher, int]:
    """The watcher serving its metrics on a free port, and the port. A port found free can be
    bound by another process before the watcher binds it (the other xdist worker's servers
    ask for free ports too), so a watcher that says so is started again on another port, a
    few times at most. (Waiting for the line "metrics on" alone would also have matched the
    error "cannot serve metrics on ...".)"""
    for _ in range(5):
        port = free_port()
        env = {**__import__("os").environ, "HERMES_STATE_WATCH_METRICS_PORT": str(port)}
        watcher = Watcher(argv, env)
        wait_until(serving_or_gone(watcher, port), "the watcher to serve its metrics or exit")
        if watcher.process.poll() is None:
            return watcher, port
        watcher.kill()
        assert f"cannot serve metrics on 127.0.0.1:{port}" in watcher.log, watcher.log
    pytest.fail("five free ports in a row were taken before the watcher could bind them")


def test_watch_exposes_its_counters_and_histograms(tmp_path: Path) -> None:
    database = tmp_path / "state.db"
    with SessionDB(database) as store:
        put(store, "ok", "pending")
        put(store, "bad", "pending")
    command = 'test "$HERMES_SESSION_ID" = ok'
    argv = cli_argv(database, "watch", "--exec", command, "--interval", "0.05")
    watcher, port = watch_with_metrics(argv)
    try:

        def delivered() -> bool:
            samples = scrape(port)
            return samples.get("hermes_state_watch_delivery_duration_seconds_count") == 2.0

        wait_until(delivered, "two deliveries in the watcher's metrics")
        samples = scrape(port)
    finally:
        watcher.kill()
    assert samples["hermes_state_watch_claims_total"] == 2.0
    assert samples['hermes_state_watch_deliveries_total{outcome="completed"}'] == 1.0
    assert samples['hermes_state_watch_deliveries_total{outcome="failed"}'] == 1.0
    assert samples["hermes_state_watch_claim_latency_seconds_count"] == 2.0
    assert samples["hermes_state_watch_tick_duration_seconds_count"] >= 1.0


def test_watch_metrics_port_bad_input(tmp_path: Path) -> None:
    done = run_cli(tmp_path / "s.db", "watch", "--exec", "true", "--metrics-port", "70000")
    assert done.returncode == 2
    assert "--metrics-port" in done.stderr


def test_module_constants_are_sane() -> None:
    assert dashboard_app.ACTOR == "dashboard"


def test_the_dashboard_never_creates_or_migrates_a_database(tmp_path: Path) -> None:
    """Without a token it only reads: a missing file is refused, not created; a file behind
    head is shown as it is, through the read-only lens, and left byte for byte as it was."""
    missing = tmp_path / "typo.db"
    done = run_cli(missing, "dashboard", "--port", "0", timeout=60)
    assert done.returncode == 1
    assert f"hermes-state db upgrade --url {missing}" in done.stderr
    assert not missing.exists()

    behind = tmp_path / "behind" / "state.db"
    behind.parent.mkdir()
    assert run_cli(behind, "db", "upgrade", "0005_session_turn_leases").returncode == 0
    before = behind.read_bytes()
    with DashboardProcess(behind) as dashboard:
        assert httpx.get(dashboard.base + "/api/stats").is_success
    assert behind.read_bytes() == before
    assert run_cli(behind, "db", "current").stdout.startswith("0005_session_turn_leases")


def test_the_dashboard_shows_an_upstream_file_not_adopted_yet(tmp_path: Path) -> None:
    """The real upstream file, never migrated: its sessions, handoffs and tool calls are on
    the pages, and the file is byte for byte as it was."""
    path = tmp_path / "state.db"
    path.write_bytes((FIXTURES / "upstream-schema30-state.db").read_bytes())
    before = path.read_bytes()
    with DashboardProcess(path) as dashboard:
        overview = httpx.get(dashboard.base + "/")
        assert overview.is_success
        assert "20250412_191723_c4fb3a" in overview.text  # its pending handoff
        page = httpx.get(dashboard.base + session_path("20250402_090713_0345a8"))
        assert page.is_success
        assert '<span class="tool-name">read_file</span>' in page.text
        assert str(escape('"path": "tests/test_parser.py"')) in page.text
        assert "read_file (call_cb5c3e1f46ce)" in page.text  # the result names its tool
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]


# -- message search ---------------------------------------------------------------------------


def test_search_page_lists_hits_linking_to_their_session(db: SessionDB) -> None:
    put(db, "talk/1", None)
    first = db.append_message("talk/1", "user", "where is the <zanzibar> ledger?")
    db.append_message("talk/1", "assistant", "nothing to see")
    with client_for(db) as client:
        home = client.get("/")
        assert 'action="/search"' in home.text  # the box is on every page
        page = client.get("/search", params={"q": "zanzibar"})
        assert page.status_code == 200
        assert f'href="{session_path("talk/1")}#message-{first}"' in page.text
        assert "<mark>zanzibar</mark>" in page.text
        assert "&lt;" in page.text
        assert "<zanzibar>" not in page.text
        session = client.get(session_path("talk/1"))
        assert f'id="message-{first}"' in session.text
        none = client.get("/search", params={"q": "quokka"})
        assert 'id="no-hits"' in none.text
        assert 'id="hits"' not in client.get("/search").text


def test_search_api_is_search_messages(db: SessionDB) -> None:
    put(db, "s1", None)
    db.append_message("s1", "user", "大别山项目 deploy")
    with client_for(db) as client:
        found = client.get("/api/search", params={"q": "大别山"}).json()
        assert found["q"] == "大别山"
        [hit] = found["hits"]
        assert hit["session_id"] == "s1"
        assert set(hit) >= {"id", "snippet", "context", "source", "session_started"}
        assert client.get("/api/search", params={"q": "!!!"}).json()["hits"] == []
        bad = client.get("/api/search", params={"q": "deploy", "limit": "0"})
        assert bad.status_code == 400
        assert "between 1 and 500" in bad.json()["error"]
        assert client.get("/search", params={"q": "x", "limit": "many"}).status_code == 400
