"""The handoff state machine, operation by operation and state by state, on every backend and
every kind of store.

Rows are put into their starting state by driving the real transitions (never raw SQL), and
every refused transition is checked to have written nothing at all (a digest of the whole
database before and after).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hermes_state import SessionDB, UnknownSessionError
from hermes_state.models import sessions as sessions_table
from tests.support.digest import database_digest, table_rows
from tests.support.stores import TRANSCRIPT_KEYS

SID = "session-under-test"
FIRST_PLATFORM = "telegram"
SECOND_PLATFORM = "discord"
SETUP_ERROR = "the first attempt failed"
FAIL_ERROR = "delivery refused by the platform"
RECLAIM_ERROR = "the gateway stopped while delivering; run /handoff again"

STATES = [None, "pending", "running", "completed", "failed"]


@pytest.fixture
def store(any_store: SessionDB) -> SessionDB:
    """Every test here runs on each kind of store: SessionDB, the native asyncio store and
    AsyncSessionDB (the asyncio ones called through ``tests.support.stores.Blocking``)."""
    return any_store


def put_in_state(store: SessionDB, session_id: str, state: str | None) -> None:
    """Create the session and walk it to ``state`` through real transitions."""
    assert store.create_session(session_id, "cli") == session_id
    if state is None:
        return
    assert store.request_handoff(session_id, FIRST_PLATFORM) is True
    if state == "pending":
        return
    if state == "failed":
        # From running, the way a gateway's failure gets there.
        assert store.claim_handoff(session_id) is True
        assert store.fail_handoff(session_id, SETUP_ERROR) is True
        return
    assert store.claim_handoff(session_id) is True
    if state == "running":
        return
    assert state == "completed"
    assert store.complete_handoff(session_id) is True


def state_after_setup(state: str | None) -> dict[str, Any]:
    if state is None:
        return {"state": None, "platform": None, "error": None}
    error = SETUP_ERROR if state == "failed" else None
    return {"state": state, "platform": FIRST_PLATFORM, "error": error}


@dataclass(frozen=True)
class Operation:
    name: str
    call: Callable[[SessionDB, str], Any]
    #: starting state -> resulting handoff state; states absent here must be refused
    accepted: dict[str | None, dict[str, Any]]
    won: Any = True
    refused: Any = False


def _failed(error: str) -> dict[str, Any]:
    return {"state": "failed", "platform": FIRST_PLATFORM, "error": error}


OPERATIONS = [
    Operation(
        "request_handoff",
        lambda store, sid: store.request_handoff(sid, SECOND_PLATFORM),
        {
            state: {"state": "pending", "platform": SECOND_PLATFORM, "error": None}
            for state in (None, "completed", "failed")
        },
    ),
    Operation(
        "claim_handoff",
        lambda store, sid: store.claim_handoff(sid),
        {"pending": {"state": "running", "platform": FIRST_PLATFORM, "error": None}},
    ),
    Operation(
        "complete_handoff",
        lambda store, sid: store.complete_handoff(sid),
        {"running": {"state": "completed", "platform": FIRST_PLATFORM, "error": None}},
    ),
    Operation(
        "fail_handoff",
        lambda store, sid: store.fail_handoff(sid, FAIL_ERROR),
        {"pending": _failed(FAIL_ERROR), "running": _failed(FAIL_ERROR)},
    ),
    Operation(
        "fail_handoff_only_pending",
        lambda store, sid: store.fail_handoff(sid, FAIL_ERROR, only_states=("pending",)),
        {"pending": _failed(FAIL_ERROR)},
    ),
    Operation(
        "fail_handoff_only_running",
        lambda store, sid: store.fail_handoff(sid, FAIL_ERROR, only_states=("running",)),
        {"running": _failed(FAIL_ERROR)},
    ),
    Operation(
        "reclaim_stale_running_handoffs",
        lambda store, sid: store.reclaim_stale_running_handoffs(RECLAIM_ERROR),
        {"running": _failed(RECLAIM_ERROR)},
        won=[SID],
        refused=[],
    ),
]


@pytest.mark.parametrize("start", STATES, ids=lambda s: s or "never-requested")
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_transition_matrix(
    store: SessionDB, backend_url: URL, operation: Operation, start: str | None
) -> None:
    put_in_state(store, SID, start)
    assert store.get_handoff_state(SID) == state_after_setup(start)
    before = database_digest(backend_url)

    result = operation.call(store, SID)

    if start in operation.accepted:
        assert result == operation.won
        assert store.get_handoff_state(SID) == operation.accepted[start]
        assert database_digest(backend_url) != before
    else:
        assert result == operation.refused
        assert store.get_handoff_state(SID) == state_after_setup(start)
        assert database_digest(backend_url) == before, "a refused transition wrote something"


def test_only_the_owner_of_a_claimed_row_may_fail_it(store: SessionDB) -> None:
    """The CLI's waiter gives up with only_states=("pending",): a claimed row is left alone."""
    put_in_state(store, SID, "pending")
    assert store.claim_handoff(SID) is True
    assert store.fail_handoff(SID, "waiter timed out", only_states=("pending",)) is False
    assert store.get_handoff_state(SID)["state"] == "running"
    assert store.complete_handoff(SID) is True
    assert store.get_handoff_state(SID) == {
        "state": "completed",
        "platform": FIRST_PLATFORM,
        "error": None,
    }


def test_full_lifecycle_can_repeat(store: SessionDB) -> None:
    put_in_state(store, SID, None)
    for platform in ("telegram", "discord", "slack"):
        assert store.request_handoff(SID, platform) is True
        assert store.request_handoff(SID, "other") is False
        assert store.claim_handoff(SID) is True
        assert store.claim_handoff(SID) is False
        assert store.complete_handoff(SID) is True
        assert store.complete_handoff(SID) is False
        assert store.get_handoff_state(SID) == {
            "state": "completed",
            "platform": platform,
            "error": None,
        }


def test_reclaim_fails_every_running_row_and_only_those(store: SessionDB) -> None:
    layout = {
        "r-2": "running",
        "r-1": "running",
        "r-3": "running",
        "p-1": "pending",
        "c-1": "completed",
        "f-1": "failed",
        "n-1": None,
    }
    for session_id, state in layout.items():
        put_in_state(store, session_id, state)

    assert store.reclaim_stale_running_handoffs(RECLAIM_ERROR) == ["r-1", "r-2", "r-3"]

    for session_id, state in layout.items():
        expected = _failed(RECLAIM_ERROR) if state == "running" else state_after_setup(state)
        assert store.get_handoff_state(session_id) == expected, session_id
    assert store.reclaim_stale_running_handoffs(RECLAIM_ERROR) == []
    # A reclaimed session can be handed off again, and the old error goes.
    assert store.request_handoff("r-1", SECOND_PLATFORM) is True
    assert store.get_handoff_state("r-1") == {
        "state": "pending",
        "platform": SECOND_PLATFORM,
        "error": None,
    }


def test_concurrent_claimers_have_exactly_one_winner_per_row(
    new_any_store: Callable[..., SessionDB],
) -> None:
    """Four stores claim the same rows at once, from four threads (the asyncio stores: as
    concurrent coroutines on one loop): each row is won once, and its trail shows one claim."""
    setup = new_any_store()
    ids = [f"s-{index:02d}" for index in range(12)]
    for session_id in ids:
        put_in_state(setup, session_id, "pending")
    claimers = [new_any_store() for _ in range(4)]
    barrier = threading.Barrier(len(claimers))

    def claim_all(db: SessionDB) -> list[str]:
        barrier.wait(60)
        return [session_id for session_id in ids if db.claim_handoff(session_id)]

    with ThreadPoolExecutor(len(claimers)) as pool:
        won = [sid for result in pool.map(claim_all, claimers) for sid in result]
    assert sorted(won) == ids
    for session_id in ids:
        claims = [e for e in setup.handoff_history(session_id) if e["to_state"] == "running"]
        assert len(claims) == 1, claims


# -- errors --------------------------------------------------------------------------------------


class DeliveryError(Exception):
    pass


@pytest.mark.parametrize(
    "error",
    [
        DeliveryError("the platform said no: " + "x" * 1990),
        "é" * 300 + "x" * 1700,
        "🦊" * 2000,
        "short",
        KeyError("missing chat id"),
    ],
    ids=["exception", "2000-chars", "astral-chars", "short", "keyerror-repr"],
)
def test_errors_are_stored_as_str_truncated_to_500(store: SessionDB, error: object) -> None:
    expected = str(error)[:500]
    put_in_state(store, SID, "running")
    assert store.fail_handoff(SID, error) is True
    assert store.get_handoff_state(SID)["error"] == expected

    put_in_state(store, "reclaimed", "running")
    assert store.reclaim_stale_running_handoffs(error) == ["reclaimed"]
    assert store.get_handoff_state("reclaimed")["error"] == expected


def test_truncation_keeps_exactly_500_characters(store: SessionDB) -> None:
    error = "".join(chr(ord("a") + i % 26) for i in range(2000))
    put_in_state(store, SID, "pending")
    assert store.fail_handoff(SID, error, only_states=("pending",)) is True
    stored = store.get_handoff_state(SID)["error"]
    assert len(stored) == 500
    assert stored == error[:500]


def test_request_clears_the_previous_error(store: SessionDB) -> None:
    put_in_state(store, SID, "failed")
    assert store.get_handoff_state(SID)["error"] == SETUP_ERROR
    assert store.request_handoff(SID, SECOND_PLATFORM) is True
    assert store.get_handoff_state(SID) == {
        "state": "pending",
        "platform": SECOND_PLATFORM,
        "error": None,
    }


def test_an_error_with_nul_or_surrogates_is_still_recorded(store: SessionDB) -> None:
    """A failure must always be recordable, whatever the exception's text contains."""
    put_in_state(store, SID, "running")
    assert store.fail_handoff(SID, "before\x00after \ud800 end") is True
    state = store.get_handoff_state(SID)
    assert state["state"] == "failed"
    assert state["error"].startswith("before")
    assert state["error"].endswith(" end")


# -- unknown ids ---------------------------------------------------------------------------------

UNKNOWN = "no-such-session"

WRITES_ON_AN_ID: list[tuple[str, Callable[[SessionDB], Any]]] = [
    ("request_handoff", lambda s: s.request_handoff(UNKNOWN, "telegram")),
    ("claim_handoff", lambda s: s.claim_handoff(UNKNOWN)),
    ("complete_handoff", lambda s: s.complete_handoff(UNKNOWN)),
    ("fail_handoff", lambda s: s.fail_handoff(UNKNOWN, "boom")),
    ("fail_only_pending", lambda s: s.fail_handoff(UNKNOWN, "boom", only_states=("pending",))),
    ("fail_only_running", lambda s: s.fail_handoff(UNKNOWN, "boom", only_states=("running",))),
]


@pytest.mark.parametrize(("name", "call"), WRITES_ON_AN_ID, ids=[n for n, _ in WRITES_ON_AN_ID])
def test_unknown_ids_return_false_and_write_nothing(
    store: SessionDB, backend_url: URL, name: str, call: Callable[[SessionDB], Any]
) -> None:
    # Neighbours in every state, so a statement that forgot its WHERE on the id would show.
    for state in STATES:
        put_in_state(store, f"neighbour-{state}", state)
    before = database_digest(backend_url)
    assert call(store) is False
    assert database_digest(backend_url) == before
    assert store.get_handoff_state(UNKNOWN) is None


def test_unknown_id_reads(store: SessionDB) -> None:
    put_in_state(store, "known", "pending")
    assert store.get_handoff_state(UNKNOWN) is None
    assert store.get_messages(UNKNOWN) == []


# -- reads: the pending list and the probe -------------------------------------------------------

SESSION_COLUMNS = {column.name for column in sessions_table.columns}


def test_list_pending_handoffs_oldest_first_whole_rows(store: SessionDB) -> None:
    started = {"mid": 2000.5, "old": 1000.25, "new": 3000.75, "older": 500.0}
    for session_id, started_at in started.items():
        store.create_session(
            session_id,
            "cli",
            title=f"title of {session_id}",
            model="model-x",
            user_id="user-1",
            started_at=started_at,
        )
    # Requested in an order that is neither started_at order nor insertion order.
    for session_id in ("new", "older", "mid", "old"):
        assert store.request_handoff(session_id, FIRST_PLATFORM) is True
    # Rows in other states never show up in the list.
    put_in_state(store, "running-one", "running")
    put_in_state(store, "completed-one", "completed")
    put_in_state(store, "failed-one", "failed")
    put_in_state(store, "never", None)

    rows = store.list_pending_handoffs()

    assert [row["id"] for row in rows] == ["older", "old", "mid", "new"]
    for row in rows:
        assert set(row) == SESSION_COLUMNS
        assert row["source"] == "cli"
        assert row["title"] == f"title of {row['id']}"
        assert row["model"] == "model-x"
        assert row["user_id"] == "user-1"
        assert row["started_at"] == started[row["id"]]
        assert row["handoff_state"] == "pending"
        assert row["handoff_platform"] == FIRST_PLATFORM
        assert row["handoff_error"] is None
        assert row["handoff_requested_at"] is not None
        assert row["handoff_claimed_at"] is None

    assert store.claim_handoff("old") is True
    assert [row["id"] for row in store.list_pending_handoffs()] == ["older", "mid", "new"]


def test_has_pending_handoffs_follows_the_pending_rows(store: SessionDB) -> None:
    assert store.has_pending_handoffs() is False
    put_in_state(store, "never", None)
    put_in_state(store, "running", "running")
    put_in_state(store, "completed", "completed")
    put_in_state(store, "failed", "failed")
    assert store.has_pending_handoffs() is False

    put_in_state(store, SID, "pending")
    assert store.has_pending_handoffs() is True
    assert store.claim_handoff(SID) is True
    assert store.has_pending_handoffs() is False
    assert store.fail_handoff(SID, "x") is True
    assert store.request_handoff(SID, FIRST_PLATFORM) is True
    assert store.has_pending_handoffs() is True
    assert store.fail_handoff(SID, "waiter gave up", only_states=("pending",)) is True
    assert store.has_pending_handoffs() is False


# -- sessions and transcript ---------------------------------------------------------------------


def session_row(url: URL, session_id: str) -> dict[str, Any]:
    matches = [row for row in table_rows(url, "sessions") if row["id"] == session_id]
    assert len(matches) == 1, matches
    return matches[0]


def test_create_session_keeps_the_existing_row(store: SessionDB, backend_url: URL) -> None:
    assert (
        store.create_session(
            SID, "cli", title="first", model="m-1", user_id="u-1", started_at=100.0
        )
        == SID
    )
    assert store.request_handoff(SID, FIRST_PLATFORM) is True
    first = session_row(backend_url, SID)

    assert (
        store.create_session(
            SID,
            "telegram",
            title="second",
            model="m-2",
            user_id="u-2",
            started_at=200.0,
            ended_at=300.0,
            end_reason="done",
        )
        == SID
    )
    assert store.ensure_session(SID, "discord", title="third") == SID

    assert session_row(backend_url, SID) == first
    assert first["source"] == "cli"
    assert first["title"] == "first"
    assert first["started_at"] == 100.0
    assert store.get_handoff_state(SID)["state"] == "pending"
    assert len(table_rows(backend_url, "sessions")) == 1


def test_create_session_stores_its_fields(store: SessionDB, backend_url: URL) -> None:
    store.create_session(
        SID,
        "cli",
        user_id="user-7",
        title="A title with 'quotes' and ünïcode",
        model="gpt-x",
        parent_session_id="parent-1",
        started_at=1234.5,
        ended_at=2345.25,
        end_reason="user quit",
    )
    row = session_row(backend_url, SID)
    assert row["source"] == "cli"
    assert row["user_id"] == "user-7"
    assert row["title"] == "A title with 'quotes' and ünïcode"
    assert row["model"] == "gpt-x"
    assert row["parent_session_id"] == "parent-1"
    assert row["started_at"] == 1234.5
    assert row["ended_at"] == 2345.25
    assert row["end_reason"] == "user quit"
    assert row["handoff_state"] is None


def test_ensure_session_defaults_the_source(store: SessionDB, backend_url: URL) -> None:
    assert store.ensure_session(SID) == SID
    assert session_row(backend_url, SID)["source"] == "unknown"
    assert store.ensure_session("explicit", "gateway", title="t") == "explicit"
    row = session_row(backend_url, "explicit")
    assert (row["source"], row["title"]) == ("gateway", "t")
    assert store.get_handoff_state(SID) == {"state": None, "platform": None, "error": None}


def test_messages_come_back_in_append_order(store: SessionDB) -> None:
    store.create_session(SID, "cli")
    store.create_session("other", "cli")
    script = [
        ("user", "hello"),
        ("assistant", "hi — how can I help? 🦊"),
        ("tool", None),
        ("user", "'; DROP TABLE messages;--"),
        ("assistant", "x" * 100_000),
        ("user", ""),
    ]
    ids = []
    for index, (role, content) in enumerate(script):
        ids.append(store.append_message(SID, role, content))
        if index % 2 == 0:
            store.append_message("other", "user", f"interleaved {index}")

    assert all(isinstance(message_id, int) for message_id in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)

    messages = store.get_messages(SID)
    assert [(m["role"], m["content"]) for m in messages] == script
    assert [m["id"] for m in messages] == ids
    assert {m["session_id"] for m in messages} == {SID}
    # Every column of the table, as upstream's get_messages returns them.
    assert set(messages[0]) == TRANSCRIPT_KEYS
    assert all(isinstance(m["timestamp"], float) for m in messages)
    assert [m["content"] for m in store.get_messages("other")] == [
        "interleaved 0",
        "interleaved 2",
        "interleaved 4",
    ]


def test_append_message_to_an_unknown_session_raises(store: SessionDB, backend_url: URL) -> None:
    store.create_session(SID, "cli")
    store.append_message(SID, "user", "kept")
    before = database_digest(backend_url)
    with pytest.raises(UnknownSessionError):
        store.append_message(UNKNOWN, "user", "lost")
    assert issubclass(UnknownSessionError, LookupError)
    assert database_digest(backend_url) == before
    assert store.get_messages(UNKNOWN) == []


# -- hostile ids ---------------------------------------------------------------------------------

HOSTILE_IDS = [
    "plain",
    "it's",
    'say "hi"',
    "'; DROP TABLE sessions;--",
    "Robert'); DROP TABLE sessions;--",
    "' OR '1'='1",
    "%s",
    "%(session_id)s",
    "%%",
    "?",
    ":session_id",
    "$1",
    "back\\slash",
    "\\'",
    "trailing\\",
    "_%_",
    "🦊 emoji 🚀",
    "👩‍👩‍👧‍👦",
    "مرحبا بالعالم",
    "שלום\u202eevil",
    "e\u0301",  # e + combining acute: distinct from the precomposed é below
    "\u00e9",
    "zero\u200bwidth",
    "i" * 255,
    "🦊" * 255,
    "Case-Sensitive",
    "case-sensitive",
    "CASE-SENSITIVE",
    "trailing space ",
    "trailing space",
    " leading space",
    "leading space",
    "full\u3000width",
]


def test_hostile_ids_are_distinct_and_round_trip(store: SessionDB, backend_url: URL) -> None:
    assert len(set(HOSTILE_IDS)) == len(HOSTILE_IDS)
    for started_at, session_id in enumerate(HOSTILE_IDS):
        assert store.create_session(session_id, "cli", started_at=float(started_at)) == session_id
    stored = [row["id"] for row in table_rows(backend_url, "sessions")]
    assert sorted(stored) == sorted(HOSTILE_IDS), "ids were merged, altered or lost"

    for index, session_id in enumerate(HOSTILE_IDS):
        platform = f"platform-{index}"
        assert store.request_handoff(session_id, platform) is True, session_id
        assert store.get_handoff_state(session_id) == {
            "state": "pending",
            "platform": platform,
            "error": None,
        }, session_id

    assert [row["id"] for row in store.list_pending_handoffs()] == HOSTILE_IDS

    for session_id in HOSTILE_IDS:
        assert store.claim_handoff(session_id) is True, session_id
        assert store.claim_handoff(session_id) is False, session_id
    assert store.list_pending_handoffs() == []
    assert [row["id"] for row in store.list_handoffs("running")] == HOSTILE_IDS
    assert store.reclaim_stale_running_handoffs("gone") == sorted(HOSTILE_IDS)


@pytest.mark.parametrize(
    "group",
    [
        ["Session-A", "session-a", "SESSION-A"],
        ["with space ", "with space", "with space  "],
        ["e\u0301", "\u00e9", "E\u0301", "\u00c9"],
        ["ss", "ß", "SS"],
        ["a", "A", "\uff41"],  # fullwidth a
    ],
    ids=["case", "trailing-space", "normalisation", "sharp-s", "fullwidth"],
)
def test_ids_that_collations_confuse_stay_separate(store: SessionDB, group: list[str]) -> None:
    for session_id in group:
        store.create_session(session_id, "cli")
        store.append_message(session_id, "user", f"message of {session_id!r}")
    target = group[0]
    assert store.request_handoff(target, "telegram") is True
    assert store.claim_handoff(target) is True
    for session_id in group[1:]:
        assert store.get_handoff_state(session_id) == {
            "state": None,
            "platform": None,
            "error": None,
        }, session_id
        assert store.claim_handoff(session_id) is False, session_id
        assert [m["content"] for m in store.get_messages(session_id)] == [
            f"message of {session_id!r}"
        ]
    assert [row["id"] for row in store.list_handoffs("running")] == [target]


def test_hostile_platforms_round_trip(store: SessionDB) -> None:
    platforms = ["tele'gram", "'; DROP TABLE sessions;--", "%s?%%", "díscörd 🦊", "p" * 64]
    for index, platform in enumerate(platforms):
        session_id = f"s-{index}"
        store.create_session(session_id, "cli", started_at=float(index))
        assert store.request_handoff(session_id, platform) is True
        assert store.get_handoff_state(session_id)["platform"] == platform
    rows = store.list_pending_handoffs()
    assert [row["handoff_platform"] for row in rows] == platforms
