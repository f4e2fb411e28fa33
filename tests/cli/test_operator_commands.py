"""The operator commands through ``hermes_state.cli.main``, on every backend.

``handoff history``, ``prune-events``, ``reclaim --dry-run``/``--all``, ``retry`` and ``stats``
run against SQLite always and against PostgreSQL and MariaDB when configured; ``db check`` and
``db history`` against a throwaway database of each. Rows are put in place through real
stores (with clocks set in the past where an age matters), never by raw SQL, and every command
is checked for its exit code, its output and, where it must change nothing, a digest of the
whole database. No command may print a traceback.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hermes_state import SessionDB, schema
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import CliResult, database_at_head, sqlite_url, url_arg
from tests.support.digest import database_digest, sync_url
from tests.support.stores import put

HEAD = schema.HEAD_REVISION
PREVIOUS = "0002_handoff_leases"


@pytest.fixture
def stores(new_store: Callable[..., SessionDB]) -> Callable[..., SessionDB]:
    """Open stores on the test's database (closed at the end); ``ago`` sets the clock back."""

    def make(*, ago: float = 0.0, **options: Any) -> SessionDB:
        clock = (lambda: time.time() - ago) if ago else time.time
        return new_store(clock=clock, **options)

    return make


@pytest.fixture
def on(backend_url: URL, cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    """``hermes-state --url <the test's database> ARGS...``."""
    target = url_arg(backend_url)
    return lambda *argv: cli("--url", target, *argv)


# -- handoff history ---------------------------------------------------------------------------


def test_history_oldest_first(
    stores: Callable[..., SessionDB], on: Callable[..., CliResult]
) -> None:
    api = stores(ago=60)
    put(api, "s1", "failed", error="the platform said no")
    put(api, "quiet", None)
    assert on("handoff", "retry", "s1").code == 0

    result = on("handoff", "history", "s1", "--json")
    assert result.code == 0, result.err
    events = result.json()
    assert [(e["from_state"], e["to_state"], e["actor"]) for e in events] == [
        (None, "pending", "api"),
        ("pending", "running", "api"),
        ("running", "failed", "api"),
        ("failed", "pending", "cli"),
    ]
    assert [e["detail"] for e in events] == [
        "requested for telegram",
        None,
        "the platform said no",
        "retry for telegram",
    ]
    assert [e["attempt"] for e in events] == [0, 1, 1, 1]
    ats = [e["at"] for e in events]
    assert ats == sorted(ats)
    assert ats[0] < ats[-1]  # the store's clock is a minute behind the CLI's

    plain = on("handoff", "history", "s1")
    assert plain.code == 0
    header, *lines = plain.out.splitlines()
    assert header.split() == ["WHEN", "FROM", "TO", "BY", "ATTEMPT", "DETAIL"]
    assert len(lines) == 4
    for line, event in zip(lines, events, strict=True):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event["at"]))
        assert line.startswith(when)
        cells = line[len(when) :].split()
        assert cells[:4] == [
            event["from_state"] or "-",
            event["to_state"],
            event["actor"],
            str(event["attempt"]),
        ]
        assert (event["detail"] or "-") in line

    quiet = on("handoff", "history", "quiet", "--json")
    assert quiet.code == 0
    assert quiet.json() == []
    assert "no recorded handoff events" in on("handoff", "history", "quiet").out

    unknown = on("handoff", "history", "ghost")
    assert unknown.code == 1
    assert "ghost" in unknown.err
    assert unknown.out == ""
    assert on("handoff", "history", "ghost", "--json").code == 1
    assert on("handoff", "history", "ghost", "--json").json()["error"] == "unknown session"


def test_history_of_pruned_session_is_empty_not_unknown(
    stores: Callable[..., SessionDB], on: Callable[..., CliResult]
) -> None:
    put(stores(ago=30 * 86400), "old", "completed")
    assert on("handoff", "prune-events", "--older-than", "1").code == 0
    result = on("handoff", "history", "old", "--json")
    assert result.code == 0
    assert result.json() == []


# -- handoff prune-events ----------------------------------------------------------------------


def test_prune_events(stores: Callable[..., SessionDB], on: Callable[..., CliResult]) -> None:
    put(stores(ago=10 * 86400), "old", "completed")  # three events ten days back
    put(stores(ago=3 * 86400), "middle", "failed", error="it broke")  # three events three days back
    put(stores(), "new", "pending")  # one event now

    kept = on("handoff", "prune-events", "--older-than", "20", "--json")
    assert kept.code == 0, kept.err
    assert kept.json() == {"deleted": 0}

    reader = stores()
    before_sessions = {sid: reader.get_handoff_state(sid) for sid in ("old", "middle", "new")}
    pruned = on("handoff", "prune-events", "--older-than", "7", "--json")
    assert pruned.code == 0
    assert pruned.json() == {"deleted": 3}
    assert on("handoff", "history", "old", "--json").json() == []
    assert len(on("handoff", "history", "middle", "--json").json()) == 3

    plain = on("handoff", "prune-events", "--older-than", "0.5")
    assert plain.code == 0
    assert "deleted 3 event(s) older than 0.5 day(s)" in plain.out
    assert [e["to_state"] for e in on("handoff", "history", "new", "--json").json()] == ["pending"]
    # Sessions keep their states: only the trail is pruned.
    after_sessions = {sid: reader.get_handoff_state(sid) for sid in ("old", "middle", "new")}
    assert after_sessions == before_sessions


@pytest.mark.parametrize("days", ["0", "-1", "abc"])
def test_prune_events_refuses_bad_ages(
    stores: Callable[..., SessionDB], on: Callable[..., CliResult], backend_url: URL, days: str
) -> None:
    put(stores(ago=10 * 86400), "old", "completed")
    before = database_digest(backend_url)
    result = on("handoff", "prune-events", "--older-than", days)
    assert result.code == 2
    assert result.err.strip()
    assert result.out == ""
    assert database_digest(backend_url) == before


def test_prune_events_needs_an_age(
    on: Callable[..., CliResult], stores: Callable[..., SessionDB]
) -> None:
    stores()  # the database exists
    result = on("handoff", "prune-events")
    assert result.code == 2
    assert "--older-than" in result.err


# -- handoff reclaim ---------------------------------------------------------------------------

EXPIRED_AGO = 1000.0
EXPIRED_LEASE = 30.0


@pytest.fixture
def running_rows(stores: Callable[..., SessionDB]) -> None:
    """unleased: claimed by a gateway without leases; expired: its lease ended 970 s ago;
    live: under a lease for an hour more; plus a pending and a completed row."""
    put(stores(), "unleased", "running")
    put(stores(ago=EXPIRED_AGO, owner="gw-dead", lease_seconds=EXPIRED_LEASE), "expired", "running")
    put(stores(owner="gw-live", lease_seconds=3600), "live", "running")
    put(stores(), "waiting", "pending")
    put(stores(), "done", "completed")


@pytest.mark.usefixtures("running_rows")
def test_reclaim_dry_run_lists_and_changes_nothing(
    on: Callable[..., CliResult], backend_url: URL
) -> None:
    before = database_digest(backend_url)

    preview = on("handoff", "reclaim", "--dry-run", "--json")
    assert preview.code == 0, preview.err
    document = preview.json()
    assert document["dry_run"] is True
    rows = {row["id"]: row for row in document["would_reclaim"]}
    assert list(rows) == ["expired", "unleased"]
    assert rows["expired"]["owner"] == "gw-dead"
    assert rows["unleased"]["owner"] is None
    assert rows["unleased"]["lease_expires_at"] is None
    assert rows["unleased"]["reason"].startswith("no lease")
    expired_for = re.fullmatch(r"lease expired (\d+) s ago", rows["expired"]["reason"])
    assert expired_for is not None, rows["expired"]["reason"]
    # The lease ended EXPIRED_AGO - EXPIRED_LEASE seconds before the row was set up.
    assert int(expired_for.group(1)) >= EXPIRED_AGO - EXPIRED_LEASE - 1
    assert rows["expired"]["lease_expires_at"] < time.time() - (EXPIRED_AGO - EXPIRED_LEASE) + 1
    assert {row["attempt"] for row in rows.values()} == {1}

    plain = on("handoff", "reclaim", "--dry-run")
    assert plain.code == 0
    assert "a reclaim would fail 2 running handoff(s)" in plain.out
    assert re.search(r"expired\s+gw-dead\s+lease expired \d+ s ago", plain.out)
    assert re.search(r"unleased\s+-\s+no lease", plain.out)
    # The row under a live lease is listed apart, with its owner and expiry, naming --all.
    assert "1 running handoff(s) are under a live lease" in plain.out
    assert "only --all would fail them" in plain.out
    assert re.search(r"\nlive\s+gw-live\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", plain.out)
    assert [row["id"] for row in document["under_live_lease"]] == ["live"]
    assert document["under_live_lease"][0]["owner"] == "gw-live"
    assert document["under_live_lease"][0]["lease_expires_at"] > time.time()

    everything = on("handoff", "reclaim", "--dry-run", "--all", "--json")
    assert everything.code == 0
    rows = {row["id"]: row for row in everything.json()["would_reclaim"]}
    assert sorted(rows) == ["expired", "live", "unleased"]
    assert rows["live"]["owner"] == "gw-live"
    assert "--all" in rows["live"]["reason"]
    assert "live" in on("handoff", "reclaim", "--dry-run", "--all").out
    assert everything.json()["under_live_lease"] == []

    assert database_digest(backend_url) == before


@pytest.mark.usefixtures("running_rows")
def test_reclaim_leaves_live_leases_alone_unless_all(
    on: Callable[..., CliResult], stores: Callable[..., SessionDB]
) -> None:
    reader = stores()
    reclaimed = on("handoff", "reclaim", "--json")
    assert reclaimed.code == 0, reclaimed.err
    assert reclaimed.json() == {"reclaimed": ["expired", "unleased"], "under_live_lease": ["live"]}
    for session_id in ("expired", "unleased"):
        assert reader.get_handoff_state(session_id) == {
            "state": "failed",
            "platform": "telegram",
            "error": STRANDED_ERROR,
        }
        last = reader.handoff_history(session_id)[-1]
        assert (last["from_state"], last["to_state"], last["actor"], last["detail"]) == (
            "running",
            "failed",
            "cli",
            STRANDED_ERROR,
        )
    assert reader.get_handoff_state("live")["state"] == "running"
    assert reader.get_handoff_state("waiting")["state"] == "pending"
    assert reader.get_handoff_state("done")["state"] == "completed"

    again = on("handoff", "reclaim")
    assert again.code == 0
    assert "reclaimed 0 running handoff(s)" in again.out
    assert "1 running handoff(s) are under a live lease" in again.out
    assert reader.get_handoff_state("live")["state"] == "running"

    forced = on("handoff", "reclaim", "--all")
    assert forced.code == 0
    assert "reclaimed 1 running handoff(s)" in forced.out
    assert "live" in forced.out
    assert reader.get_handoff_state("live")["state"] == "failed"
    assert reader.get_handoff_state("waiting")["state"] == "pending"
    assert on("handoff", "reclaim", "--all", "--json").json() == {
        "reclaimed": [],
        "under_live_lease": [],
    }


# -- handoff retry -----------------------------------------------------------------------------


def test_retry(
    stores: Callable[..., SessionDB], on: Callable[..., CliResult], backend_url: URL
) -> None:
    db = stores()
    put(db, "s1", "failed", error="it broke")

    result = on("handoff", "retry", "s1")
    assert result.code == 0, result.err
    assert "requested again for telegram" in result.out
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram", "error": None}
    last = db.handoff_history("s1")[-1]
    assert (last["from_state"], last["to_state"], last["actor"], last["detail"]) == (
        "failed",
        "pending",
        "cli",
        "retry for telegram",
    )

    # From a state other than failed: refused, nothing written.
    before = database_digest(backend_url)
    refused = on("handoff", "retry", "s1")
    assert refused.code == 1
    assert "only a failed handoff" in refused.err
    assert database_digest(backend_url) == before

    assert db.claim_handoff("s1")
    assert db.fail_handoff("s1", "again")
    moved = on("handoff", "retry", "s1", "--platform", "discord")
    assert moved.code == 0
    assert "requested again for discord" in moved.out
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "discord", "error": None}
    assert db.handoff_history("s1")[-1]["detail"] == "retry for discord"

    unknown = on("handoff", "retry", "ghost")
    assert unknown.code == 1
    assert "ghost" in unknown.err

    assert db.claim_handoff("s1")
    assert db.fail_handoff("s1", "once more")
    before = database_digest(backend_url)
    bad = on("handoff", "retry", "s1", "--platform", "")
    assert bad.code == 2
    assert database_digest(backend_url) == before


@pytest.mark.parametrize("state", [None, "pending", "running", "completed"])
def test_retry_from_a_state_that_is_not_failed(
    stores: Callable[..., SessionDB],
    on: Callable[..., CliResult],
    backend_url: URL,
    state: str | None,
) -> None:
    put(stores(), "s1", state)
    before = database_digest(backend_url)
    result = on("handoff", "retry", "s1", "--platform", "discord")
    assert result.code == 1
    assert "s1" in result.err
    assert database_digest(backend_url) == before


# -- handoff stats -----------------------------------------------------------------------------


def test_stats(stores: Callable[..., SessionDB], on: Callable[..., CliResult]) -> None:
    put(stores(ago=500), "p-old", "pending")
    put(stores(), "p-new", "pending")
    live = stores(owner="gw-live", lease_seconds=3600)
    put(live, "r-live-1", "running")
    put(live, "r-live-2", "running")
    put(stores(ago=EXPIRED_AGO, owner="gw-dead", lease_seconds=EXPIRED_LEASE), "r-dead", "running")
    put(stores(owner="gw-unleased"), "r-owner-no-lease", "running")
    put(stores(), "r-nobody", "running")
    put(stores(), "c1", "completed")
    for session_id in ("f1", "f2", "f3"):
        put(stores(), session_id, "failed", error="telegram: chat not found")
    put(stores(), "f4", "failed", error="discord: rate limited")
    put(stores(ago=2 * 3600), "f-old", "failed", error="an error from two hours ago")
    put(stores(), "never", None)

    result = on("handoff", "stats", "--json")
    assert result.code == 0, result.err
    stats = result.json()
    assert stats["counts"] == {"pending": 2, "running": 5, "completed": 1, "failed": 5}
    assert 500 <= stats["oldest_pending_age_seconds"] < 500 + 600
    by_owner = {row["owner"]: row for row in stats["running_by_owner"]}
    assert by_owner == {
        "gw-live": {
            "owner": "gw-live",
            "running": 2,
            "live_leases": 2,
            "expired_leases": 0,
            "no_lease": 0,
        },
        "gw-dead": {
            "owner": "gw-dead",
            "running": 1,
            "live_leases": 0,
            "expired_leases": 1,
            "no_lease": 0,
        },
        "gw-unleased": {
            "owner": "gw-unleased",
            "running": 1,
            "live_leases": 0,
            "expired_leases": 0,
            "no_lease": 1,
        },
        None: {"owner": None, "running": 1, "live_leases": 0, "expired_leases": 0, "no_lease": 1},
    }
    assert len(stats["running_by_owner"]) == 4
    assert stats["failures_last_hour"] == {
        "count": 4,
        "top_errors": [
            {"error": "telegram: chat not found", "count": 3},
            {"error": "discord: rate limited", "count": 1},
        ],
    }

    plain = on("handoff", "stats")
    assert plain.code == 0
    lines = [line.strip() for line in plain.out.splitlines()]
    cells = [line.split() for line in lines]
    assert ["STATE", "COUNT"] in cells
    for state, count in stats["counts"].items():
        assert [state, str(count)] in cells
    assert re.search(r"oldest pending: \d+ s ago", plain.out)
    assert ["OWNER", "RUNNING", "LIVE", "LEASES", "EXPIRED", "NO", "LEASE"] in cells
    assert ["gw-live", "2", "2", "0", "0"] in cells
    assert ["gw-dead", "1", "0", "1", "0"] in cells
    assert ["(no", "owner)", "1", "0", "0", "1"] in cells
    assert "failures in the last hour: 4" in lines
    assert ["3", "telegram:", "chat", "not", "found"] in cells
    assert "two hours ago" not in plain.out


def test_stats_of_an_idle_database(
    stores: Callable[..., SessionDB], on: Callable[..., CliResult]
) -> None:
    put(stores(), "never", None)
    stats = on("handoff", "stats", "--json").json()
    assert stats == {
        "counts": {"pending": 0, "running": 0, "completed": 0, "failed": 0},
        "oldest_pending_age_seconds": None,
        "running_by_owner": [],
        "failures_last_hour": {"count": 0, "top_errors": []},
    }
    assert "oldest pending: none" in on("handoff", "stats").out


# -- db check and db history on a database of their own -----------------------------------------


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def own_database(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[URL]:
    """A database at head that this test alone uses (its schema is changed)."""
    with database_at_head(request.param, tmp_path) as url:
        yield url


def _alter(url: URL, *statements: str) -> None:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement)
    finally:
        engine.dispose()


def test_check_names_each_difference(own_database: URL, cli: Callable[..., CliResult]) -> None:
    target = url_arg(own_database)
    clean = cli("--url", target, "db", "check")
    assert clean.code == 0, clean.out + clean.err
    assert HEAD in clean.out

    mysql = own_database.get_backend_name() in ("mysql", "mariadb")
    _alter(
        own_database,
        "DROP INDEX ix_handoff_events_at" + (" ON handoff_events" if mysql else ""),
        "ALTER TABLE handoff_events DROP COLUMN detail",
    )
    drift = cli("--url", target, "db", "check")
    assert drift.code == 1
    assert "ix_handoff_events_at" in drift.out
    assert "handoff_events.detail" in drift.out

    report = cli("--url", target, "db", "check", "--json")
    assert report.code == 1
    document = report.json()
    assert document["in_sync"] is False
    found = {(d["kind"], d["detail"].split()[0]) for d in document["differences"]}
    assert found == {("add index", "ix_handoff_events_at"), ("add column", "handoff_events.detail")}


def test_check_ignores_columns_the_models_do_not_know(
    own_database: URL, cli: Callable[..., CliResult]
) -> None:
    # Adopted state.db files carry columns of older hermes versions: not drift (DESIGN.md).
    _alter(own_database, "ALTER TABLE sessions ADD COLUMN operator_note VARCHAR(40)")
    result = cli("--url", url_arg(own_database), "db", "check", "--json")
    assert result.code == 0, result.out
    assert result.json()["differences"] == []


def test_history_marks_the_current_revision(
    own_database: URL, cli: Callable[..., CliResult]
) -> None:
    target = url_arg(own_database)

    at_head = cli("--url", target, "db", "history")
    assert at_head.code == 0
    marked = [line for line in at_head.out.splitlines() if line.startswith("*")]
    assert len(marked) == 1
    assert marked[0].startswith(f"* {HEAD} (current, head)")

    schema.downgrade(own_database, PREVIOUS)
    behind = cli("--url", target, "db", "history", "--json")
    assert behind.code == 0
    entries = {entry["revision"]: entry for entry in behind.json()}
    assert [rev for rev, entry in entries.items() if entry["current"]] == [PREVIOUS]
    assert [rev for rev, entry in entries.items() if entry["head"]] == [HEAD]

    plain = cli("--url", target, "db", "history")
    lines = plain.out.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("*")] == [PREVIOUS]
    assert any(line.startswith(f"  {HEAD} (head)") for line in lines)
    # Drift check says the database is behind.
    behind_check = cli("--url", target, "db", "check", "--json")
    assert behind_check.code == 1
    assert "revision" in {d["kind"] for d in behind_check.json()["differences"]}


def test_stats_ages_a_pending_row_written_by_an_older_writer(
    tmp_path: Any, cli: Callable[..., CliResult]
) -> None:
    # DESIGN.md: writers that do not know the new columns (older hermes, raw SQL) keep working
    # on an adopted file. Such a writer requests a handoff by setting the state alone.
    url = sqlite_url(tmp_path)
    with SessionDB(url=url, clock=lambda: time.time() - 500) as db:
        db.create_session("legacy", "cli")
        db._execute_write(
            lambda conn: conn.execute(
                "UPDATE sessions SET handoff_state = 'pending', handoff_platform = 'telegram' "
                "WHERE id = ?",
                ("legacy",),
            )
        )
    stats = cli("--url", url_arg(url), "handoff", "stats", "--json").json()
    assert stats["counts"]["pending"] == 1
    assert stats["oldest_pending_age_seconds"] is not None
