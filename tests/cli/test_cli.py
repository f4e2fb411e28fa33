"""The `hermes-state` command line (everything but `db`), through ``main([...])`` in-process.

Exit codes: 0 done, 1 refused or failed, 2 bad input; no command ever prints a traceback.
``handoff request --wait`` is driven by a fake clock: its sleep advances time and plays a
scripted gateway, so a 15-minute wait takes no real time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.cli import _build_parser, repeated
from hermes_state.cli import handoff as handoff_cli
from tests.conftest import CliResult
from tests.support.stores import put

# -- handlers for `watch --handler tests.cli.test_cli:...` ---------------------------------

DELIVERIES: list[dict[str, Any]] = []
NOT_CALLABLE = "a string is no handler"


def sync_deliver(row: dict[str, Any], profile_name: str | None) -> None:
    DELIVERIES.append(
        {
            "id": row["id"],
            "platform": row["handoff_platform"],
            "profile": profile_name,
            "kind": "sync",
            "main_thread": threading.current_thread() is threading.main_thread(),
        }
    )
    if row["id"].startswith("refuse"):
        raise RuntimeError(f"{row['handoff_platform']} refused {row['id']}")


async def async_deliver(row: dict[str, Any], profile_name: str | None) -> None:
    DELIVERIES.append(
        {
            "id": row["id"],
            "platform": row["handoff_platform"],
            "profile": profile_name,
            "kind": "async",
            "main_thread": threading.current_thread() is threading.main_thread(),
        }
    )
    if row["id"].startswith("refuse"):
        raise RuntimeError(f"{row['handoff_platform']} refused {row['id']}")


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_deliveries_yet() -> Iterator[None]:
    DELIVERIES.clear()
    yield
    DELIVERIES.clear()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db(db_path: Path) -> Iterator[SessionDB]:
    with SessionDB(db_path) as store:
        yield store


@pytest.fixture
def cli(cli: Callable[..., CliResult], db_path: Path) -> Callable[..., CliResult]:
    """conftest's ``cli`` with ``--url DB`` put first; ``url=False`` leaves --url out."""

    def run(*argv: str, url: bool = True) -> CliResult:
        return cli(*(["--url", str(db_path), *argv] if url else argv))

    return run


def column(db_path: Path, session_id: str, name: str) -> Any:
    with contextlib.closing(sqlite3.connect(db_path)) as raw:
        row = raw.execute(f"SELECT {name} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row[0]


# -- session create ----------------------------------------------------------------------------


def test_session_create_makes_a_new_session(cli: Callable[..., CliResult], db: SessionDB) -> None:
    result = cli("session", "create", "alpha", "--title", "Plants", "--source", "terminal")
    assert result.code == 0
    assert "created session 'alpha'" in result.out
    assert db.get_handoff_state("alpha") == {"state": None, "platform": None, "error": None}
    assert column(db.url.database, "alpha", "title") == "Plants"
    assert column(db.url.database, "alpha", "source") == "terminal"


def test_session_create_keeps_an_existing_session(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    assert cli("session", "create", "alpha", "--title", "first").code == 0
    result = cli("session", "create", "alpha", "--title", "second", "--json")
    assert result.code == 0
    assert result.json() == {"id": "alpha", "created": False}
    assert column(db.url.database, "alpha", "title") == "first"
    assert "already exists" in cli("session", "create", "alpha").out


def test_session_create_json_for_a_new_session(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    result = cli("session", "create", "beta", "--json")
    assert result.code == 0
    assert result.json() == {"id": "beta", "created": True}


def test_session_create_defaults_to_the_hermes_home_database(
    cli: Callable[..., CliResult], isolated_home: Path
) -> None:
    assert cli("db", "upgrade", url=False).code == 0
    assert cli("session", "create", "home-session", url=False).code == 0
    with SessionDB(isolated_home / "state.db") as store:
        assert store.get_handoff_state("home-session") is not None


@pytest.mark.parametrize("session_id", ["", "   ", "bell\x07", "tab\there", "x" * 1000])
def test_session_create_refuses_bad_ids(cli: Callable[..., CliResult], session_id: str) -> None:
    result = cli("session", "create", session_id)
    assert result.code == 2
    assert result.err.startswith("hermes-state: ")


# -- handoff request ---------------------------------------------------------------------------


def test_handoff_request_is_accepted(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "s1", None)
    result = cli("handoff", "request", "s1", "telegram")
    assert result.code == 0
    assert "requested" in result.out
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram", "error": None}


@pytest.mark.parametrize("state", ["completed", "failed"])
def test_handoff_request_again_after_an_outcome(
    cli: Callable[..., CliResult], db: SessionDB, state: str
) -> None:
    put(db, "s1", state)
    assert cli("handoff", "request", "s1", "discord").code == 0
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "discord", "error": None}


@pytest.mark.parametrize("state", ["pending", "running"])
def test_handoff_request_while_in_flight_is_refused(
    cli: Callable[..., CliResult], db: SessionDB, state: str
) -> None:
    put(db, "s1", state)
    result = cli("handoff", "request", "s1", "discord")
    assert result.code == 1
    assert "already in flight" in result.err
    assert db.get_handoff_state("s1") == {"state": state, "platform": "telegram", "error": None}


def test_handoff_request_for_an_unknown_session(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    result = cli("handoff", "request", "ghost", "telegram")
    assert result.code == 1
    assert "no session 'ghost'" in result.err
    assert db.get_handoff_state("ghost") is None


@pytest.mark.parametrize(
    ("session_id", "platform"),
    [("", "telegram"), ("bell\x07", "telegram"), ("s1", ""), ("s1", "new\nline")],
)
def test_handoff_request_refuses_bad_input(
    cli: Callable[..., CliResult], db: SessionDB, session_id: str, platform: str
) -> None:
    put(db, "s1", None)
    result = cli("handoff", "request", session_id, platform)
    assert result.code == 2
    assert result.err.startswith("hermes-state: ")
    assert db.get_handoff_state("s1") == {"state": None, "platform": None, "error": None}


# -- handoff show ------------------------------------------------------------------------------


def test_handoff_show(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "s1", "failed")
    result = cli("handoff", "show", "s1")
    assert result.code == 0
    assert "failed" in result.out
    assert "telegram" in result.out
    assert "the platform said no" in result.out

    as_json = cli("handoff", "show", "s1", "--json")
    assert as_json.code == 0
    document = as_json.json()
    assert isinstance(document, dict)
    assert {k: document[k] for k in ("state", "platform", "error")} == {
        "state": "failed",
        "platform": "telegram",
        "error": "the platform said no",
    }


def test_handoff_show_carries_the_whole_handoff(
    cli: Callable[..., CliResult], db: SessionDB, db_path: Path
) -> None:
    """Who holds it, which attempt, its lease and its times, in JSON and in the text view."""
    with SessionDB(db_path, owner="gw-7", lease_seconds=90) as gateway:
        gateway.create_session("s9", "cli")
        assert gateway.request_handoff("s9", "telegram")
        assert gateway.claim_handoff("s9")
    row = db.get_session("s9")
    assert row is not None
    document = cli("handoff", "show", "s9", "--json").json()
    assert document == {
        "id": "s9",
        "state": "running",
        "platform": "telegram",
        "error": None,
        "owner": "gw-7",
        "attempt": 1,
        "lease_expires_at": row["handoff_lease_expires_at"],
        "requested_at": row["handoff_requested_at"],
        "claimed_at": row["handoff_claimed_at"],
        "finished_at": None,
    }
    text = cli("handoff", "show", "s9").out
    assert "owner: gw-7" in text
    assert "attempt: 1" in text
    for label in ("lease expires at: ", "requested at: ", "claimed at: "):
        assert label in text
    assert "finished at" not in text


def test_handoff_show_of_a_session_never_handed_off(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    put(db, "s1", None)
    document = cli("handoff", "show", "s1", "--json").json()
    assert {k: document[k] for k in ("state", "platform", "error")} == {
        "state": None,
        "platform": None,
        "error": None,
    }


def test_handoff_show_of_an_unknown_session(cli: Callable[..., CliResult], db: SessionDB) -> None:
    result = cli("handoff", "show", "ghost", "--json")
    assert result.code == 1
    assert "ghost" in result.err
    assert result.json() == {"id": "ghost", "error": "unknown session"}


def test_handoff_show_without_a_database_creates_none(
    cli: Callable[..., CliResult], db_path: Path
) -> None:
    result = cli("handoff", "show", "s1")
    assert result.code == 1
    assert "db upgrade" in result.err
    assert not db_path.exists()


# -- handoff list ------------------------------------------------------------------------------


@pytest.fixture
def one_of_each(db: SessionDB) -> SessionDB:
    for state in ("pending", "running", "completed", "failed"):
        put(db, state, state)
    put(db, "never", None)
    return db


def test_handoff_list_shows_every_handed_off_session(
    cli: Callable[..., CliResult], one_of_each: SessionDB
) -> None:
    result = cli("handoff", "list")
    assert result.code == 0
    header, *lines = result.out.splitlines()
    assert header.split() == ["SESSION", "STATE", "PLATFORM", "OWNER", "ERROR"]
    listed = {line.split()[0] for line in lines}
    assert listed == {"pending", "running", "completed", "failed"}

    rows = cli("handoff", "list", "--json").json()
    assert isinstance(rows, list)
    assert all(isinstance(row, dict) for row in rows)
    assert {row["id"] for row in rows} == {"pending", "running", "completed", "failed"}


@pytest.mark.parametrize("state", ["pending", "running", "completed", "failed"])
def test_handoff_list_by_state(
    cli: Callable[..., CliResult], one_of_each: SessionDB, state: str
) -> None:
    result = cli("handoff", "list", "--state", state, "--json")
    assert result.code == 0
    assert [row["id"] for row in result.json()] == [state]


def test_handoff_list_limit_and_empty(
    cli: Callable[..., CliResult], one_of_each: SessionDB
) -> None:
    assert len(cli("handoff", "list", "--limit", "2", "--json").json()) == 2
    one_of_each.claim_handoff("pending")
    result = cli("handoff", "list", "--state", "pending")
    assert result.code == 0
    assert "no handoffs in state pending" in result.out
    assert cli("handoff", "list", "--state", "pending", "--json").json() == []


@pytest.mark.parametrize("argv", [["--state", "lost"], ["--state", ""], ["--limit", "-1"]])
def test_handoff_list_refuses_bad_input(
    cli: Callable[..., CliResult], one_of_each: SessionDB, argv: list[str]
) -> None:
    result = cli("handoff", "list", *argv)
    assert result.code == 2
    assert result.out == ""


# -- handoff fail ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["pending", "running"])
def test_handoff_fail(cli: Callable[..., CliResult], db: SessionDB, state: str) -> None:
    put(db, "s1", state)
    result = cli("handoff", "fail", "s1", "given up by the operator")
    assert result.code == 0
    assert "marked failed" in result.out
    assert db.get_handoff_state("s1") == {
        "state": "failed",
        "platform": "telegram",
        "error": "given up by the operator",
    }


def test_handoff_fail_only_pending_fails_a_pending_row(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    put(db, "s1", "pending")
    assert cli("handoff", "fail", "s1", "nobody came", "--only-pending").code == 0
    assert db.get_handoff_state("s1") == {
        "state": "failed",
        "platform": "telegram",
        "error": "nobody came",
    }


def test_handoff_fail_only_pending_refuses_a_running_row(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    put(db, "s1", "running")
    result = cli("handoff", "fail", "s1", "nobody came", "--only-pending")
    assert result.code == 1
    assert "not pending" in result.err
    assert db.get_handoff_state("s1") == {"state": "running", "platform": "telegram", "error": None}


@pytest.mark.parametrize("state", [None, "completed", "failed"])
def test_handoff_fail_refuses_a_row_not_in_flight(
    cli: Callable[..., CliResult], db: SessionDB, state: str | None
) -> None:
    put(db, "s1", state)
    before = db.get_handoff_state("s1")
    assert cli("handoff", "fail", "s1", "too late").code == 1
    assert db.get_handoff_state("s1") == before


def test_handoff_fail_unknown_and_bad_input(cli: Callable[..., CliResult], db: SessionDB) -> None:
    result = cli("handoff", "fail", "ghost", "why")
    assert result.code == 1
    assert "no session 'ghost'" in result.err
    assert cli("handoff", "fail", "", "why").code == 2


def test_handoff_fail_truncates_the_error(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "s1", "pending")
    assert cli("handoff", "fail", "s1", "e" * 2000).code == 0
    handoff = db.get_handoff_state("s1")
    assert handoff is not None
    assert handoff["error"] == "e" * 500


# -- handoff reclaim ---------------------------------------------------------------------------


def test_handoff_reclaim(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "run-b", "running")
    put(db, "run-a", "running")
    put(db, "waiting", "pending")
    result = cli("handoff", "reclaim", "--json")
    assert result.code == 0
    assert result.json() == {"reclaimed": ["run-a", "run-b"], "under_live_lease": []}
    for session_id in ("run-a", "run-b"):
        handoff = db.get_handoff_state(session_id)
        assert handoff is not None
        assert handoff["state"] == "failed"
        assert "/handoff" in handoff["error"]
    assert db.get_handoff_state("waiting") == {
        "state": "pending",
        "platform": "telegram",
        "error": None,
    }
    # The sessions can be handed off again.
    assert cli("handoff", "request", "run-a", "telegram").code == 0


def test_handoff_reclaim_text_and_nothing_to_do(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    put(db, "r1", "running")
    result = cli("handoff", "reclaim")
    assert result.code == 0
    assert "reclaimed 1 running handoff(s)" in result.out
    assert "r1" in result.out
    assert cli("handoff", "reclaim", "--json").json() == {"reclaimed": [], "under_live_lease": []}


def test_handoff_reclaim_leaves_a_live_lease_to_its_gateway_unless_all(
    cli: Callable[..., CliResult], db: SessionDB, db_path: Path
) -> None:
    with SessionDB(db_path, owner="gateway-1", lease_seconds=600) as gateway:
        put(gateway, "leased", "running")
    put(db, "unleased", "running")

    preview = cli("handoff", "reclaim", "--dry-run", "--json")
    assert preview.code == 0
    assert [row["id"] for row in preview.json()["would_reclaim"]] == ["unleased"]
    assert db.get_handoff_state("unleased")["state"] == "running"  # a dry run changes nothing
    assert "unleased" in cli("handoff", "reclaim", "--dry-run").out

    assert cli("handoff", "reclaim", "--json").json() == {
        "reclaimed": ["unleased"],
        "under_live_lease": ["leased"],
    }
    assert db.get_handoff_state("leased")["state"] == "running"

    assert cli("handoff", "reclaim", "--all", "--json").json() == {
        "reclaimed": ["leased"],
        "under_live_lease": [],
    }
    leased = db.get_handoff_state("leased")
    assert leased is not None
    assert leased["state"] == "failed"
    assert "/handoff" in leased["error"]


# -- handoff retry, history, prune-events --------------------------------------------------------


def test_handoff_retry(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "s1", "failed")
    result = cli("handoff", "retry", "s1")
    assert result.code == 0
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram", "error": None}

    db.claim_handoff("s1")
    db.fail_handoff("s1", "again")
    assert cli("handoff", "retry", "s1", "--platform", "discord").code == 0
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "discord", "error": None}


@pytest.mark.parametrize("state", [None, "pending", "running", "completed"])
def test_handoff_retry_only_retries_a_failed_handoff(
    cli: Callable[..., CliResult], db: SessionDB, state: str | None
) -> None:
    put(db, "s1", state)
    before = db.get_handoff_state("s1")
    result = cli("handoff", "retry", "s1")
    assert result.code == 1
    assert "only a failed handoff can be retried" in result.err
    assert db.get_handoff_state("s1") == before


def test_handoff_retry_unknown_and_bad_input(cli: Callable[..., CliResult], db: SessionDB) -> None:
    assert cli("handoff", "retry", "ghost").code == 1
    assert cli("handoff", "retry", "").code == 2
    put(db, "s1", "failed")
    assert cli("handoff", "retry", "s1", "--platform", "").code == 2
    assert db.get_handoff_state("s1")["state"] == "failed"


def test_handoff_history(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "s1", "failed")
    assert cli("handoff", "retry", "s1").code == 0
    result = cli("handoff", "history", "s1", "--json")
    assert result.code == 0
    events = result.json()
    assert [(e["from_state"], e["to_state"]) for e in events] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "failed"),
        ("failed", "pending"),
    ]
    assert events[-1]["actor"] == "cli"
    text = cli("handoff", "history", "s1")
    assert text.code == 0
    assert len(text.out.splitlines()) == 1 + 4  # the header and one row per event

    put(db, "quiet", None)
    assert cli("handoff", "history", "quiet", "--json").json() == []
    assert cli("handoff", "history", "ghost").code == 1


def test_handoff_prune_events(cli: Callable[..., CliResult], db: SessionDB, db_path: Path) -> None:
    ten_days_ago = time.time() - 10 * 86400
    with SessionDB(db_path, clock=lambda: ten_days_ago) as back_then:
        put(back_then, "old", "completed")
    put(db, "new", "completed")

    result = cli("handoff", "prune-events", "--older-than", "7", "--json")
    assert result.code == 0
    assert result.json() == {"deleted": 3}
    assert cli("handoff", "history", "old", "--json").json() == []
    assert len(cli("handoff", "history", "new", "--json").json()) == 3
    assert db.get_handoff_state("old")["state"] == "completed"  # only the trail goes


@pytest.mark.parametrize("days", ["0", "-1", "inf", "nan", "soon"])
def test_handoff_prune_events_refuses_bad_ages(
    cli: Callable[..., CliResult], db: SessionDB, days: str
) -> None:
    put(db, "s1", "completed")
    assert cli("handoff", "prune-events", "--older-than", days).code == 2
    assert len(cli("handoff", "history", "s1", "--json").json()) == 3


# -- handoff stats -----------------------------------------------------------------------------


def test_handoff_stats(cli: Callable[..., CliResult], db: SessionDB, db_path: Path) -> None:
    put(db, "p1", "pending")
    put(db, "p2", "pending")
    put(db, "r1", "running")
    put(db, "c1", "completed")
    put(db, "f1", "failed")
    put(db, "never", None)
    an_hour_ago = time.time() - 3600
    db._execute_write(
        lambda conn: conn.execute(
            "UPDATE sessions SET handoff_requested_at = ? WHERE id = ?", (an_hour_ago, "p1")
        )
    )

    stats = cli("handoff", "stats", "--json")
    assert stats.code == 0
    document = stats.json()
    assert document["counts"] == {"pending": 2, "running": 1, "completed": 1, "failed": 1}
    # Ages are seconds, measured from the oldest pending request (set an hour back above).
    assert 3600 <= document["oldest_pending_age_seconds"] < 2 * 3600

    text = cli("handoff", "stats")
    assert text.code == 0
    assert ["pending", "2"] in [line.split() for line in text.out.splitlines()]
    assert "oldest pending: " in text.out
    assert "s ago" in text.out


def test_handoff_stats_without_pending(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "c1", "completed")
    document = cli("handoff", "stats", "--json").json()
    assert document["counts"]["pending"] == 0
    assert document["counts"]["completed"] == 1
    assert document["oldest_pending_age_seconds"] is None
    assert "oldest pending: none" in cli("handoff", "stats").out


# -- watch: bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--once"],
        ["watch", "--once", "--exec", "true", "--handler", "tests.cli.test_cli:sync_deliver"],
        ["watch", "--once", "--exec", ""],
        ["watch", "--once", "--exec", "true", "--interval", "soon"],
        ["watch", "--once", "--exec", "true", "--interval", "-1"],
        ["watch", "--once", "--exec", "true", "--interval", "inf"],
        ["watch", "--once", "--exec", "true", "--interval", "nan"],
        ["watch", "--once", "--exec", "true", "--drain-timeout", "-0.5"],
        ["watch", "--once", "--exec", "true", "--profile", "no-equals-sign"],
        ["watch", "--once", "--exec", "true", "--profile", "=/srv/home"],
        ["watch", "--once", "--exec", "true", "--profile", "name="],
        ["watch", "--once", "--handler", "no_such_module_anywhere:deliver"],
        ["watch", "--once", "--handler", "tests.cli.test_cli"],
        ["watch", "--once", "--handler", "tests.cli.test_cli:no_such_function"],
        ["watch", "--once", "--handler", "tests.cli.test_cli:NOT_CALLABLE"],
    ],
    ids=lambda argv: " ".join(argv[2:]) or "nothing",
)
def test_watch_refuses_bad_input(
    cli: Callable[..., CliResult], db: SessionDB, argv: list[str]
) -> None:
    put(db, "s1", "pending")
    result = cli(*argv)
    assert result.code == 2
    assert result.err.strip() != ""
    assert DELIVERIES == []
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram", "error": None}


# -- watch --once --handler --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_watch_once_with_a_handler(cli: Callable[..., CliResult], db: SessionDB, kind: str) -> None:
    put(db, "alpha", "pending", platform="telegram")
    put(db, "refuse-bravo", "pending", platform="discord")
    put(db, "done", "completed")
    result = cli("watch", "--once", "--handler", f"tests.cli.test_cli:{kind}_deliver")
    assert result.code == 0

    assert sorted((d["id"], d["platform"], d["profile"], d["kind"]) for d in DELIVERIES) == [
        ("alpha", "telegram", None, kind),
        ("refuse-bravo", "discord", None, kind),
    ]
    # A sync handler runs in a worker thread, never on the event loop's thread.
    assert all(d["main_thread"] is (kind == "async") for d in DELIVERIES)
    assert db.get_handoff_state("alpha") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }
    assert db.get_handoff_state("refuse-bravo") == {
        "state": "failed",
        "platform": "discord",
        "error": "discord refused refuse-bravo",
    }
    assert db.get_handoff_state("done") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }


def test_watch_once_reclaims_before_it_polls(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "stranded", "running")
    assert cli("watch", "--once", "--handler", "tests.cli.test_cli:sync_deliver").code == 0
    assert DELIVERIES == []
    handoff = db.get_handoff_state("stranded")
    assert handoff is not None
    assert handoff["state"] == "failed"
    assert "/handoff" in handoff["error"]


# -- watch --once --exec -----------------------------------------------------------------------

RECORDING_COMMAND = (
    'cat > "$OUT_DIR/$HERMES_SESSION_ID.json"; '
    'printf \'%s|%s|%s\' "$HERMES_SESSION_ID" "$HERMES_HANDOFF_PLATFORM" "$HERMES_PROFILE" '
    '> "$OUT_DIR/$HERMES_SESSION_ID.env"'
)


@pytest.fixture
def out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    monkeypatch.setenv("OUT_DIR", str(folder))
    return folder


def test_watch_once_exec_gives_the_command_its_row_and_environment(
    cli: Callable[..., CliResult], db: SessionDB, out_dir: Path, tmp_path: Path
) -> None:
    put(db, "root-row", "pending", platform="telegram")
    db.append_message("root-row", "user", "hello from the terminal")
    profile_home = tmp_path / "profiles" / "work"
    with SessionDB(profile_home / "state.db") as profile_db:
        put(profile_db, "work-row", "pending", platform="slack")

    result = cli(
        "watch", "--once", "--exec", RECORDING_COMMAND, "--profile", f"work={profile_home}"
    )
    assert result.code == 0

    assert (out_dir / "root-row.env").read_text() == "root-row|telegram|"
    assert (out_dir / "work-row.env").read_text() == "work-row|slack|work"
    row = json.loads((out_dir / "root-row.json").read_text())
    assert row["id"] == "root-row"
    assert row["handoff_platform"] == "telegram"
    assert json.loads((out_dir / "work-row.json").read_text())["id"] == "work-row"

    assert db.get_handoff_state("root-row") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }
    with SessionDB(profile_home / "state.db") as profile_db:
        assert profile_db.get_handoff_state("work-row") == {
            "state": "completed",
            "platform": "slack",
            "error": None,
        }


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (
            'echo "first line" >&2; echo "discord said no" >&2; exit 3',
            "discord said no",  # the last line: what went wrong, not the progress before it
        ),
        ("exit 7", "exit 7"),
        ("cat > /dev/null; false", "exit 1"),
        ("head -c 1000 /dev/zero | tr '\\0' x >&2; exit 1", "x" * 400),
    ],
    ids=["stderr", "no-stderr", "false", "long-stderr"],
)
def test_watch_once_exec_failure(
    cli: Callable[..., CliResult], db: SessionDB, command: str, error: str
) -> None:
    put(db, "s1", "pending")
    assert cli("watch", "--once", "--exec", command).code == 0
    assert db.get_handoff_state("s1") == {"state": "failed", "platform": "telegram", "error": error}


def test_watch_once_exec_command_that_ignores_a_large_row(
    cli: Callable[..., CliResult], db: SessionDB
) -> None:
    db.create_session("big", "cli", title="t" * 1_000_000)  # far more than a pipe holds
    assert db.request_handoff("big", "telegram") is True
    assert cli("watch", "--once", "--exec", "exit 0").code == 0
    assert db.get_handoff_state("big") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }


def test_watch_once_with_nothing_pending(cli: Callable[..., CliResult], db: SessionDB) -> None:
    put(db, "done", "completed")
    result = cli("watch", "--once", "--exec", "exit 1")
    assert result.code == 0
    assert db.get_handoff_state("done") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }


# -- options and their environment twins -------------------------------------------------------


def all_parsers() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (command path, parser) of the CLI, the top level included."""
    pending: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), _build_parser())]
    while pending:
        path, parser = pending.pop(0)
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    pending.append(((*path, name), child))


def all_options() -> list[tuple[tuple[str, ...], str, str]]:
    return [
        (path, max(action.option_strings, key=len), action.help or "")
        for path, parser in all_parsers()
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
    ]


# Options that have no environment twin yet, although DESIGN.md asks one of every option.


@pytest.mark.parametrize(
    ("path", "option", "help_text"),
    [
        pytest.param(
            path,
            option,
            help_text,
            id=f"{' '.join(path) or 'hermes-state'} {option}",
        )
        for path, option, help_text in all_options()
    ],
)
def test_every_option_names_its_environment_twin(
    path: tuple[str, ...], option: str, help_text: str
) -> None:
    assert "[env: HERMES_" in help_text


# (command path, argv after the command, option, variable, value, attribute, parsed value)
TWINS: list[tuple[tuple[str, ...], list[str], str, str, str, str, Any]] = [
    ((), ["handoff", "stats"], "--url", "HERMES_STATE_URL", "/srv/x.db", "url", "/srv/x.db"),
    ((), ["handoff", "stats"], "--verbose", "HERMES_STATE_VERBOSE", "1", "verbose", True),
    (
        ("handoff", "show"),
        ["handoff", "show", "s"],
        "--json",
        "HERMES_STATE_JSON",
        "yes",
        "json",
        True,
    ),
    (
        ("handoff", "request"),
        ["handoff", "request", "s", "p"],
        "--wait",
        "HERMES_STATE_WAIT",
        "1",
        "wait",
        True,
    ),
    (
        ("watch",),
        ["watch"],
        "--exec",
        "HERMES_STATE_WATCH_EXEC",
        "deliver.sh",
        "exec",
        "deliver.sh",
    ),
    (("watch",), ["watch"], "--handler", "HERMES_STATE_WATCH_HANDLER", "m:f", "handler", "m:f"),
    (("watch",), ["watch"], "--interval", "HERMES_STATE_WATCH_INTERVAL", "0.25", "interval", 0.25),
    (
        ("watch",),
        ["watch"],
        "--drain-timeout",
        "HERMES_STATE_DRAIN_TIMEOUT",
        "7",
        "drain_timeout",
        7.0,
    ),
    (("watch",), ["watch"], "--once", "HERMES_STATE_WATCH_ONCE", "true", "once", True),
    (("watch",), ["watch"], "--owner", "HERMES_STATE_OWNER", "gw-1", "owner", "gw-1"),
    (
        ("watch",),
        ["watch"],
        "--lease-seconds",
        "HERMES_STATE_LEASE_SECONDS",
        "90",
        "lease_seconds",
        90.0,
    ),
    (
        ("watch",),
        ["watch"],
        "--max-concurrency",
        "HERMES_STATE_MAX_CONCURRENCY",
        "5",
        "max_concurrency",
        5,
    ),
]


@pytest.mark.parametrize(
    ("path", "argv", "option", "variable", "value", "attribute", "parsed"),
    TWINS,
    ids=[twin[3] for twin in TWINS],
)
def test_environment_twin_is_shown_in_help_and_is_used(
    cli: Callable[..., CliResult],
    monkeypatch: pytest.MonkeyPatch,
    path: tuple[str, ...],
    argv: list[str],
    option: str,
    variable: str,
    value: str,
    attribute: str,
    parsed: Any,
) -> None:
    shown = cli(*path, "--help", url=False)
    assert shown.code == 0
    assert f"[env: {variable}]" in " ".join(shown.out.split())
    assert option in shown.out

    assert getattr(_build_parser().parse_args(argv), attribute) != parsed
    monkeypatch.setenv(variable, value)
    assert getattr(_build_parser().parse_args(argv), attribute) == parsed


def test_profiles_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HERMES_STATE_WATCH_PROFILES", f"a={tmp_path / 'a'},b={tmp_path / 'b'}")
    args = _build_parser().parse_args(["watch"])
    assert repeated(args, "profile") == [("a", tmp_path / "a"), ("b", tmp_path / "b")]
    # Flags given on the command line replace the environment's list.
    args = _build_parser().parse_args(["watch", "--profile", f"c={tmp_path / 'c'}"])
    assert repeated(args, "profile") == [("c", tmp_path / "c")]


def test_the_url_and_json_twins_end_to_end(
    cli: Callable[..., CliResult], db: SessionDB, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(db, "s1", "pending")
    monkeypatch.setenv("HERMES_STATE_URL", str(db_path))
    monkeypatch.setenv("HERMES_STATE_JSON", "1")
    result = cli("handoff", "show", "s1", url=False)
    assert result.code == 0
    assert result.json()["state"] == "pending"


def test_the_watch_twins_end_to_end(
    cli: Callable[..., CliResult],
    db: SessionDB,
    out_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    put(db, "root-row", "pending")
    profile_home = tmp_path / "profiles" / "work"
    with SessionDB(profile_home / "state.db") as profile_db:
        put(profile_db, "work-row", "pending", platform="slack")
    monkeypatch.setenv("HERMES_STATE_WATCH_EXEC", RECORDING_COMMAND)
    monkeypatch.setenv("HERMES_STATE_WATCH_PROFILES", f"work={profile_home}")
    monkeypatch.setenv("HERMES_STATE_WATCH_ONCE", "1")
    monkeypatch.setenv("HERMES_STATE_WATCH_INTERVAL", "0.01")
    # Without --once from the environment this would serve forever: check before running.
    assert _build_parser().parse_args(["watch"]).once is True

    assert cli("watch").code == 0
    assert (out_dir / "root-row.env").read_text() == "root-row|telegram|"
    assert (out_dir / "work-row.env").read_text() == "work-row|slack|work"


def test_the_handler_twin_end_to_end(
    cli: Callable[..., CliResult], db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(db, "s1", "pending")
    monkeypatch.setenv("HERMES_STATE_WATCH_HANDLER", "tests.cli.test_cli:async_deliver")
    assert cli("watch", "--once").code == 0
    assert [d["id"] for d in DELIVERIES] == ["s1"]


MALFORMED = [
    ("HERMES_STATE_WATCH_INTERVAL", "often"),
    ("HERMES_STATE_WATCH_INTERVAL", "-3"),
    ("HERMES_STATE_DRAIN_TIMEOUT", "forever"),
    ("HERMES_STATE_MAX_CONCURRENCY", "0"),
    ("HERMES_STATE_WATCH_PROFILES", "no-equals"),
]


@pytest.mark.parametrize(("variable", "value"), MALFORMED)
def test_a_malformed_environment_value_is_bad_input(
    cli: Callable[..., CliResult],
    db: SessionDB,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    put(db, "s1", "pending")
    monkeypatch.setenv(variable, value)
    result = cli("watch", "--once", "--exec", "exit 0")
    assert result.code == 2
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram", "error": None}


@pytest.mark.parametrize(("variable", "value"), MALFORMED)
def test_a_malformed_watch_variable_leaves_other_commands_alone(
    cli: Callable[..., CliResult],
    db: SessionDB,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    put(db, "s1", "pending")
    monkeypatch.setenv(variable, value)
    result = cli("handoff", "show", "s1", "--json")
    assert result.code == 0
    assert result.json()["state"] == "pending"


def test_help_and_usage_errors(cli: Callable[..., CliResult]) -> None:
    top = cli("--help", url=False)
    assert top.code == 0
    for command in ("db", "session", "handoff", "watch", "demo"):
        assert command in top.out
    assert cli(url=False).code == 2
    assert cli("no-such-command").code == 2
    assert cli("handoff").code == 2
    assert cli("handoff", "request", "only-one-argument").code == 2


def test_a_file_that_is_not_a_database_is_bad_input(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database at all\n" * 10)
    result = cli("--url", str(notes), "session", "create", "s1", url=False)
    assert result.code == 2
    assert "not an SQLite database" in result.err
    assert notes.read_text() == "not a database at all\n" * 10


# -- handoff request --wait, on a fake clock ---------------------------------------------------


class FakeClock:
    """Replaces the waiter's ``monotonic`` and ``sleep``; a sleep advances time and plays the
    scripted gateway's moves that fall due (in a store of their own, like a real gateway)."""

    def __init__(self, gateway: SessionDB) -> None:
        self.now = 0.0
        self.gateway = gateway
        self.script: list[tuple[float, Callable[[SessionDB], Any]]] = []
        self.on_give_up: Callable[[SessionDB], Any] | None = None
        self.sleeps = 0

    def at(self, when: float, move: Callable[[SessionDB], Any]) -> None:
        self.script.append((when, move))
        self.script.sort(key=lambda entry: entry[0])

    def monotonic(self) -> float:
        if self.on_give_up is not None and self.now >= handoff_cli.PENDING_PATIENCE:
            move, self.on_give_up = self.on_give_up, None
            move(self.gateway)  # lands between the waiter's read and its decision
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps += 1
        self.now += seconds
        while self.script and self.script[0][0] <= self.now:
            _when, move = self.script.pop(0)
            assert move(self.gateway) is True


@pytest.fixture
def clock(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    with SessionDB(db_path) as gateway:
        fake = FakeClock(gateway)
        monkeypatch.setattr(handoff_cli, "monotonic", fake.monotonic)
        monkeypatch.setattr(handoff_cli, "sleep", fake.sleep)
        yield fake


def claim(store: SessionDB) -> bool:
    return store.claim_handoff("s1")


def complete(store: SessionDB) -> bool:
    return store.complete_handoff("s1")


def test_wait_follows_a_delivery_to_its_end(
    cli: Callable[..., CliResult], db: SessionDB, clock: FakeClock
) -> None:
    put(db, "s1", None)
    clock.at(30, claim)
    clock.at(200, complete)
    result = cli("handoff", "request", "s1", "telegram", "--wait")
    assert result.code == 0
    assert result.out.splitlines() == ["handoff of 's1' delivered to telegram"]
    assert result.err == ""  # the status line is for terminals only
    assert 200 <= clock.now < 201
    assert db.get_handoff_state("s1") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }


def test_wait_fails_a_request_nobody_claims(
    cli: Callable[..., CliResult], db: SessionDB, clock: FakeClock
) -> None:
    put(db, "s1", None)
    result = cli("handoff", "request", "s1", "telegram", "--wait")
    assert result.code == 3
    assert "no gateway claimed" in result.err
    assert handoff_cli.PENDING_PATIENCE <= clock.now < handoff_cli.PENDING_PATIENCE + 1
    handoff = db.get_handoff_state("s1")
    assert handoff is not None
    assert handoff["state"] == "failed"
    assert "gateway may be down" in handoff["error"]
    # The session can be handed off again once a gateway is up.
    assert db.request_handoff("s1", "telegram") is True


def test_wait_never_fails_a_row_claimed_as_it_gives_up(
    cli: Callable[..., CliResult], db: SessionDB, clock: FakeClock
) -> None:
    put(db, "s1", None)
    clock.on_give_up = claim
    clock.at(120, complete)
    result = cli("handoff", "request", "s1", "telegram", "--wait")
    assert clock.on_give_up is None, "the claim was never played"
    assert result.code == 0
    assert "delivered" in result.out
    assert db.get_handoff_state("s1") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }


def test_wait_gives_up_on_a_long_delivery_but_leaves_it_running(
    cli: Callable[..., CliResult], db: SessionDB, clock: FakeClock
) -> None:
    put(db, "s1", None)
    clock.at(10, claim)
    result = cli("handoff", "request", "s1", "telegram", "--wait")
    assert result.code == 3
    assert "still delivering after 900 s" in result.err
    assert clock.now >= 10 + handoff_cli.RUNNING_PATIENCE
    assert clock.now < 10 + handoff_cli.RUNNING_PATIENCE + 1
    assert db.get_handoff_state("s1") == {"state": "running", "platform": "telegram", "error": None}


def test_wait_reports_the_gateways_failure(
    cli: Callable[..., CliResult], db: SessionDB, clock: FakeClock
) -> None:
    put(db, "s1", None)
    clock.at(5, claim)
    clock.at(20, lambda store: store.fail_handoff("s1", "discord refused the message (HTTP 403)"))
    result = cli("handoff", "request", "s1", "telegram", "--wait")
    assert result.code == 1
    assert "discord refused the message (HTTP 403)" in result.err
    assert 20 <= clock.now < 21


def test_wait_on_a_refused_request_does_not_wait(
    cli: Callable[..., CliResult], db: SessionDB, clock: FakeClock
) -> None:
    put(db, "s1", "running")
    result = cli("handoff", "request", "s1", "telegram", "--wait")
    assert result.code == 1
    assert "already in flight" in result.err
    assert clock.sleeps == 0


def test_wait_from_the_environment(
    cli: Callable[..., CliResult],
    db: SessionDB,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    put(db, "s1", None)
    clock.at(1, claim)
    clock.at(2, complete)
    monkeypatch.setenv("HERMES_STATE_WAIT", "1")
    result = cli("handoff", "request", "s1", "telegram")
    assert result.code == 0
    assert "delivered" in result.out
    assert clock.sleeps > 0


# -- demo --------------------------------------------------------------------------------------


def test_demo(cli: Callable[..., CliResult]) -> None:
    result = cli("demo", url=False)
    assert result.code == 0, result.err
    final_table: dict[str, str] = {}
    for line in result.out.splitlines():
        words = line.split()
        if words and words[0] in ("alpha", "bravo", "charlie"):
            final_table[words[0]] = words[1]
    assert final_table == {"alpha": "completed", "bravo": "failed", "charlie": "completed"}
    last_row = [line for line in result.out.splitlines() if line.split()[:1] == ["charlie"]][-1]
    assert "completed" in last_row
