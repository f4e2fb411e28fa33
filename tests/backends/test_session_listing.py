"""Session listings on every backend and every kind of store: ``list_sessions_rich`` (its
filters, previews, recency, kinds of child, compression tips, activity order and searches),
``session_count``, ``session_count_by_source`` and ``search_sessions``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.errors import InvalidInputError, InvalidInputTypeError
from hermes_state.models import sessions
from hermes_state.statements.session_terms import (
    MERGED_PRIOR_HEADER,
    MERGED_SUMMARY_DELIMITER,
    SUMMARY_END_MARKER,
    SUMMARY_OPENINGS,
)
from hermes_state_session_scope import session_row_is_own_dm
from tests.support.digest import database_digest
from tests.support.stores import HandClock


@pytest.fixture
def db(new_any_store: Callable[..., SessionDB]) -> SessionDB:
    return new_any_store(clock=HandClock(5_000.0))


def ids(rows: list[dict[str, Any]]) -> list[Any]:
    return [row["id"] for row in rows]


def set_columns(db: SessionDB, session_id: str, **values: Any) -> None:
    """Write columns the store's own operations do not set (flags, routing, activity)."""
    statement = update(sessions).where(sessions.c.id == session_id).values(**values)
    db._execute_write(lambda conn: conn.execute(statement))


def say(db: SessionDB, session_id: str, role: str, text: str, at: float, **fields: Any) -> None:
    db.append_message(session_id, role, text, timestamp=at, **fields)


# -- rows, previews and recency ----------------------------------------------------------------


def test_a_row_is_the_whole_session_with_its_preview_recency_and_read_state(
    db: SessionDB,
) -> None:
    db.create_session("s1", "cli", started_at=1_000.0, model="m-1", system_prompt="be brief")
    say(db, "s1", "system", "You are a helpful assistant.", 1_001.0)
    say(db, "s1", "user", "Refactor the\nauth module, please", 1_002.0)
    say(db, "s1", "assistant", "Sure.", 1_003.0)
    [row] = db.list_sessions_rich()
    whole = db.get_session("s1")
    assert whole is not None
    assert {key: row[key] for key in whole} == whole  # every column, the prompt resolved
    assert row["system_prompt"] == "be brief"
    assert row["preview"] == "Refactor the auth module, please"
    assert row["last_active"] == 1_003.0
    assert row["unread"] is False  # never read: nothing to mark
    assert list(row)[-3:] == ["last_active", "preview", "unread"]


def test_a_preview_is_cut_at_sixty_characters_and_empty_without_a_user_message(
    db: SessionDB,
) -> None:
    db.create_session("long", "cli", started_at=2.0)
    say(db, "long", "user", "A" * 100, 10.0)
    db.create_session("quiet", "cli", started_at=1.0)
    say(db, "quiet", "system", "only a prompt", 11.0)
    db.create_session("blank", "cli", started_at=0.5)
    say(db, "blank", "user", "   \n  ", 12.0)
    rows = {row["id"]: row for row in db.list_sessions_rich()}
    assert rows["long"]["preview"] == "A" * 60 + "..."
    assert rows["quiet"]["preview"] == rows["blank"]["preview"] == ""


def test_recency_is_the_latest_heartbeat_or_message_else_the_start(db: SessionDB) -> None:
    db.create_session("new", "cli", started_at=100.0)
    db.create_session("chatty", "cli", started_at=90.0)
    say(db, "chatty", "user", "hello", 150.0)
    db.create_session("busy", "cli", started_at=80.0)
    say(db, "busy", "user", "hello", 120.0)
    set_columns(db, "busy", last_activity_at=170.0)  # a heartbeat after the last message
    db.create_session("stale", "cli", started_at=70.0)
    say(db, "stale", "user", "hello", 160.0)
    set_columns(db, "stale", last_activity_at=130.0)  # heartbeats lag messages
    db.create_session("garbled", "cli", started_at=60.0)
    say(db, "garbled", "user", "hello", 140.0)
    set_columns(db, "garbled", last_activity_at=5e246)  # a damaged cell never counts
    recency = {row["id"]: row["last_active"] for row in db.list_sessions_rich()}
    assert recency == {
        "new": 100.0,
        "chatty": 150.0,
        "busy": 170.0,
        "stale": 160.0,
        "garbled": 140.0,
    }


def test_unread_means_active_after_it_was_last_read(db: SessionDB) -> None:
    for session_id, read_at in (("read", 300.0), ("unread", 100.0), ("untracked", None)):
        db.create_session(session_id, "cli", started_at=50.0)
        say(db, session_id, "user", "hello", 200.0)
        set_columns(db, session_id, last_read_at=read_at)
    db.create_session("marked", "cli", started_at=40.0)
    set_columns(db, "marked", last_read_at=0.0)  # marked unread by hand
    unread = {row["id"]: row["unread"] for row in db.list_sessions_rich()}
    assert unread == {"read": False, "unread": True, "untracked": False, "marked": True}


def test_a_preview_shows_the_users_words_not_a_compaction_summary(db: SessionDB) -> None:
    opening, legacy = SUMMARY_OPENINGS
    db.create_session("standalone", "cli", started_at=5.0)
    carrier = f"{opening}## Summary\nlots of history\n{SUMMARY_END_MARKER}\n\nwhat next?"
    say(db, "standalone", "user", carrier, 10.0)
    db.create_session("pure", "cli", started_at=4.0)
    say(db, "pure", "user", f"  {legacy} only history", 10.0)  # no words of the user's own
    say(db, "pure", "user", f"{opening}history\n{SUMMARY_END_MARKER}\n \n", 11.0)
    say(db, "pure", "user", "the real question", 12.0)
    db.create_session("merged", "cli", started_at=3.0)
    merged = f"{MERGED_PRIOR_HEADER}\n  my own text \n{MERGED_SUMMARY_DELIMITER}\n{legacy} gist"
    say(db, "merged", "user", merged, 10.0)
    db.create_session("hidden", "cli", started_at=2.0)
    say(db, "hidden", "user", "scaffolding", 10.0, display_kind="hidden")
    say(db, "hidden", "user", "visible words", 11.0)
    db.create_session("labelled", "cli", started_at=1.0)
    say(db, "labelled", "user", "[CONTEXT COMPACTION — REFERENCE ONLY] is what I saw", 10.0)
    previews = {row["id"]: row["preview"] for row in db.list_sessions_rich()}
    assert previews == {
        "standalone": "what next?",
        "pure": "the real question",
        "merged": "my own text",
        "hidden": "visible words",
        "labelled": "[CONTEXT COMPACTION — REFERENCE ONLY] is what I saw",
    }


# -- filters -----------------------------------------------------------------------------------


def test_pages_come_newest_first_under_limit_and_offset(db: SessionDB) -> None:
    for number in range(5):
        db.create_session(f"s{number}", "cli", started_at=100.0 + number)
    assert ids(db.list_sessions_rich()) == ["s4", "s3", "s2", "s1", "s0"]
    assert ids(db.list_sessions_rich(limit=2)) == ["s4", "s3"]
    assert ids(db.list_sessions_rich(limit=2, offset=2)) == ["s2", "s1"]
    assert db.list_sessions_rich(limit=0) == []
    assert db.list_sessions_rich(offset=9) == []


def test_sources_and_session_keys_filter_before_the_page_is_cut(db: SessionDB) -> None:
    db.create_session("cli-1", "cli", started_at=1.0)
    db.create_session("tool-1", "tool", started_at=2.0)
    db.create_session("cron-1", "cron", started_at=3.0)
    db.create_session("tg-lane-old", "telegram", started_at=4.0)
    db.create_session("tg-lane-new", "telegram", started_at=5.0)
    for number in range(6):
        db.create_session(f"tg-other-{number}", "telegram", started_at=10.0 + number)
        set_columns(db, f"tg-other-{number}", session_key=f"agent:main:telegram:dm:{number}")
    for session_id in ("tg-lane-old", "tg-lane-new"):
        set_columns(db, session_id, session_key="agent:main:telegram:dm:lane")
    assert ids(db.list_sessions_rich(source="cli")) == ["cli-1"]
    assert ids(db.list_sessions_rich(sources=["cli", "cron"])) == ["cron-1", "cli-1"]
    assert ids(db.list_sessions_rich(source="tool", sources=["cli"])) == ["tool-1"]
    excluded = ids(db.list_sessions_rich(exclude_sources=["tool", "telegram"]))
    assert excluded == ["cron-1", "cli-1"]
    lane = db.list_sessions_rich(
        source="telegram", session_key="agent:main:telegram:dm:lane", limit=2
    )
    assert ids(lane) == ["tg-lane-new", "tg-lane-old"]
    assert ids(db.list_sessions_rich(source="", sources=[], exclude_sources=[], limit=3)) == [
        "tg-other-5",
        "tg-other-4",
        "tg-other-3",
    ]


def test_a_directory_filter_takes_the_directory_and_below_it_literally(db: SessionDB) -> None:
    directories = {
        "root": "/work/my_app",
        "below": "/work/my_app/src",
        "windows": "C:\\work\\my_app\\src",
        "windows-root": "C:\\work\\my_app",
        "sibling": "/work/my_app2",
        "wildcard": "/work/myXapp/src",
        "elsewhere": "/home/me",
        "nowhere": None,
    }
    for number, (session_id, cwd) in enumerate(directories.items()):
        db.create_session(session_id, "cli", started_at=float(number))
        set_columns(db, session_id, cwd=cwd)
    assert sorted(ids(db.list_sessions_rich(cwd_prefix="/work/my_app/"))) == ["below", "root"]
    assert sorted(ids(db.list_sessions_rich(cwd_prefix="C:\\work\\my_app"))) == [
        "windows",
        "windows-root",
    ]
    assert ids(db.list_sessions_rich(cwd_prefix="/work/100%")) == []


def test_message_counts_archived_and_hidden_sessions(db: SessionDB) -> None:
    db.create_session("busy", "cli", started_at=4.0)
    for number in range(3):
        say(db, "busy", "user", f"message {number}", 10.0 + number)
    db.create_session("idle", "cli", started_at=3.0)
    db.create_session("archived", "cli", started_at=2.0)
    set_columns(db, "archived", archived=1)
    db.create_session("hidden", "cli", started_at=1.0)
    set_columns(db, "hidden", hidden=1)
    db.create_session("both", "cli", started_at=0.0)
    set_columns(db, "both", archived=1, hidden=1)
    assert ids(db.list_sessions_rich(min_message_count=2)) == ["busy"]
    assert ids(db.list_sessions_rich()) == ["busy", "idle"]
    assert ids(db.list_sessions_rich(include_archived=True)) == ["busy", "idle", "archived"]
    assert ids(db.list_sessions_rich(include_hidden=True)) == ["busy", "idle", "hidden"]
    # The archived view finds what every other list hides, hidden or not.
    assert ids(db.list_sessions_rich(archived_only=True)) == ["archived", "both"]
    assert db.session_count() == 3  # hidden rows count; archived ones only when asked
    assert db.session_count(include_archived=True) == 5
    assert db.session_count(archived_only=True) == 2
    assert db.session_count(min_message_count=1) == 1


# -- kinds of child ----------------------------------------------------------------------------


def _family(db: SessionDB) -> None:
    """A root with one child of every kind, and a few rows of their own."""
    db.create_session("root", "cli", started_at=10.0)
    db.create_session("subagent", "cli", parent_session_id="root", started_at=11.0)
    db.create_session(
        "delegate",
        "cli",
        parent_session_id="root",
        started_at=12.0,
        model_config={"_delegate_from": "root"},
    )
    db.create_session("orphaned-delegate", "cli", started_at=13.0)
    set_columns(db, "orphaned-delegate", model_config=json.dumps({"_delegate_from": "gone"}))
    db.create_session(
        "branch",
        "cli",
        parent_session_id="root",
        started_at=14.0,
        model_config={"_branched_from": "root"},
    )
    db.create_session("old-parent", "cli", started_at=20.0, ended_at=21.0, end_reason="branched")
    db.create_session("old-branch", "cli", parent_session_id="old-parent", started_at=22.0)
    db.create_session("early-child", "cli", parent_session_id="old-parent", started_at=20.5)
    db.create_session(
        "reset", "telegram", parent_session_id="root", model_config={"_reset_from": "root"}
    )
    set_columns(db, "reset", started_at=15.0)
    db.create_session("lane-old", "telegram", started_at=30.0, end_reason="session_reset")
    db.create_session("lane-new", "telegram", parent_session_id="lane-old", started_at=31.0)
    db.create_session("lane-tool", "tool", parent_session_id="lane-old", started_at=32.0)
    for session_id in ("lane-old", "lane-new"):
        set_columns(db, session_id, session_key="agent:main:telegram:dm:lane")
    set_columns(db, "lane-tool", session_key="delegate:other")


def test_pickers_show_roots_branches_and_resets_but_not_sub_agent_runs(db: SessionDB) -> None:
    _family(db)
    shown = set(ids(db.list_sessions_rich()))
    assert shown == {"root", "branch", "reset", "old-parent", "old-branch", "lane-old", "lane-new"}
    everything = set(ids(db.list_sessions_rich(include_children=True)))
    assert everything == shown | {
        "subagent",
        "delegate",
        "orphaned-delegate",
        "early-child",
        "lane-tool",
    }
    assert db.session_count(exclude_children=True) == len(shown)
    assert db.session_count() == len(everything)
    assert db.session_count_by_source(exclude_children=True) == {"cli": 4, "telegram": 3}


@pytest.mark.parametrize("config", ["{not-json", "[]", '"scalar"', "5", "null", ""])
def test_a_model_config_that_is_no_json_object_is_just_unmarked(db: SessionDB, config: str) -> None:
    db.create_session("root", "cli", started_at=1.0)
    db.create_session("parent", "cli", started_at=2.0, end_reason="compression")
    db.create_session("continuation", "cli", parent_session_id="parent", started_at=3.0)
    for session_id in ("root", "continuation"):
        set_columns(db, session_id, model_config=config)
    assert ids(db.list_sessions_rich()) == ["continuation", "root"]
    assert ids(db.list_sessions_rich(order_by_last_active=True)) == ["continuation", "root"]
    assert db.session_count(exclude_children=True) == 2


# -- compressed conversations ------------------------------------------------------------------


def _compressed(db: SessionDB, prefix: str, start: float) -> None:
    """root -> mid -> tip by compression, the root with a sub-agent run and a stale sibling
    of the tip that was reaped."""
    db.create_session(f"{prefix}root", "cli", started_at=start, title=f"{prefix}talk")
    say(db, f"{prefix}root", "user", "help me refactor auth", start + 1)
    db.create_session(f"{prefix}sub", "cli", parent_session_id=f"{prefix}root")
    set_columns(db, f"{prefix}sub", started_at=start + 2, ended_at=start + 3)
    set_columns(db, f"{prefix}root", ended_at=start + 10, end_reason="compression")
    db.create_session(f"{prefix}mid", "cli", parent_session_id=f"{prefix}root")
    set_columns(db, f"{prefix}mid", started_at=start + 11)
    say(db, f"{prefix}mid", "user", "continuing", start + 12)  # before compression ends it
    set_columns(db, f"{prefix}mid", ended_at=start + 20, end_reason="compression")
    db.create_session(f"{prefix}tip", "cli", parent_session_id=f"{prefix}mid")
    set_columns(db, f"{prefix}tip", started_at=start + 21, model="m-tip", cwd="/tip")
    say(db, f"{prefix}tip", "user", "latest message", start + 22)
    db.create_session(f"{prefix}reaped", "cli", parent_session_id=f"{prefix}mid")
    set_columns(db, f"{prefix}reaped", started_at=start + 23, ended_at=start + 24)
    set_columns(db, f"{prefix}reaped", end_reason="ws_orphan_reap")


def test_a_compressed_conversation_is_shown_as_its_live_tip(db: SessionDB) -> None:
    _compressed(db, "a-", 1_000.0)
    _compressed(db, "b-", 2_000.0)
    db.create_session("between", "cli", started_at=1_500.0)
    rows = db.list_sessions_rich()
    assert ids(rows) == ["b-tip", "between", "a-tip"]  # each in its root's place
    tip = rows[2]
    assert tip["_lineage_root_id"] == "a-root"
    assert tip["_lineage_ids"] == ["a-root", "a-mid", "a-tip"]
    assert (tip["started_at"], tip["title"]) == (1_000.0, "a-talk")  # root's, tip untitled
    assert (tip["ended_at"], tip["end_reason"], tip["model"], tip["cwd"]) == (
        None,
        None,
        "m-tip",
        "/tip",
    )
    assert (tip["preview"], tip["last_active"], tip["message_count"]) == (
        "latest message",
        1_022.0,
        1,
    )
    assert "_lineage_ids" not in rows[1]
    raw = db.list_sessions_rich(project_compression_tips=False)
    assert ids(raw) == ["b-root", "between", "a-root"]
    assert raw[2]["end_reason"] == "compression"
    assert "_lineage_root_id" not in raw[2]


def test_a_broken_or_looping_chain_never_stops_a_listing(db: SessionDB) -> None:
    db.create_session("broken", "cli", started_at=1.0, end_reason="compression")
    db.create_session("loop-a", "cli", started_at=2.0, end_reason="compression")
    db.create_session("loop-b", "cli", parent_session_id="loop-a", end_reason="compression")
    set_columns(db, "loop-b", started_at=3.0)
    set_columns(db, "loop-a", parent_session_id="loop-b")  # written by hand: a cycle
    [broken] = db.list_sessions_rich()  # the looped pair are each other's children
    assert (broken["id"], broken["end_reason"]) == ("broken", "compression")
    assert "_lineage_ids" not in broken
    walked = db.list_sessions_rich(include_children=True, order_by_last_active=True)
    assert ids(walked) == ["loop-b", "loop-a", "broken"]


def test_a_chain_is_cut_before_a_segment_it_already_holds() -> None:
    from hermes_state.plans.session_listing import _chains

    walk = [("a", "a"), ("a", "b"), ("a", "a"), ("a", "b"), ("c", "c"), ("c", "d")]
    rows = [{"root_id": root, "cur_id": segment} for root, segment in walk]
    assert _chains(rows) == {"a": ["a", "b"], "c": ["c", "d"]}


def test_the_activity_order_follows_each_conversations_latest_segment(db: SessionDB) -> None:
    _compressed(db, "a-", 1_000.0)  # its latest segment started at 1023
    db.create_session("newer", "cli", started_at=1_500.0)
    db.create_session("touched", "cli", started_at=900.0)
    set_columns(db, "touched", last_activity_at=1_600.0)
    rows = db.list_sessions_rich(order_by_last_active=True)
    assert ids(rows) == ["touched", "newer", "a-tip"]
    assert "_effective_last_active" not in rows[0]
    assert ids(db.list_sessions_rich(order_by_last_active=True, limit=1, offset=1)) == ["newer"]


def test_searches_look_through_the_whole_chain_in_the_activity_order(db: SessionDB) -> None:
    _compressed(db, "a-", 1_000.0)
    set_columns(db, "a-tip", title="Needle: AN-94 rifle")
    db.create_session("plain_one", "cli", started_at=3_000.0, title="Other")
    db.create_session("100%", "cli", started_at=3_001.0)

    def found(**search: str) -> list[Any]:
        return ids(db.list_sessions_rich(order_by_last_active=True, **search))

    assert found(search_query="  NEEDLE ") == ["a-tip"]
    assert found(search_query="an94") == ["a-tip"]  # separators ignored in titles
    assert found(id_query="a-mid") == ["a-tip"]  # a middle segment's id finds its conversation
    assert found(id_query="plain_") == ["plain_one"]
    assert found(id_query="plain%") == []
    assert found(search_query="100%") == ["100%"]
    assert found(search_query="other", id_query="a-") == []
    # The started_at order does not search (as upstream).
    assert len(db.list_sessions_rich(search_query="needle")) == 3


# -- pins, compact rows ------------------------------------------------------------------------


def test_pinned_sessions_the_page_missed_follow_it(db: SessionDB) -> None:
    for number in range(4):
        db.create_session(f"s{number}", "cli", started_at=float(number))
    set_columns(db, "s0", pinned=1)
    set_columns(db, "s3", pinned=1)
    db.create_session("pinned-tool", "tool", started_at=9.0)
    set_columns(db, "pinned-tool", pinned=1)
    page = db.list_sessions_rich(limit=2, include_pinned=True, exclude_sources=["tool"])
    assert ids(page) == ["s3", "s2", "s0"]
    assert page[2]["preview"] == ""
    assert page[2]["unread"] is False


def test_compact_rows_leave_the_prompt_out(db: SessionDB) -> None:
    db.create_session("s1", "cli", system_prompt="a long prompt")
    [compact] = db.list_sessions_rich(compact_rows=True)
    [full] = db.list_sessions_rich()
    left_out = {"system_prompt", "system_prompt_hash", "git_metadata_generation"}
    assert set(full) - set(compact) == left_out
    assert {key: full[key] for key in compact} == compact


# -- own direct messages, counting to a threshold ----------------------------------------------


def test_the_own_scope_lists_only_the_requesters_telegram_direct_messages(db: SessionDB) -> None:
    db.create_session("mine", "telegram", user_id="42", chat_id=42, chat_type="dm")
    db.create_session("theirs", "telegram", user_id="99", chat_id="99", chat_type="dm")
    db.create_session("group", "telegram", chat_id="42", chat_type="group")
    db.create_session("legacy", "telegram", user_id="42", chat_type="dm")  # no chat id: unproven
    db.create_session("elsewhere", "cli", chat_id="42", chat_type="dm")
    db.create_session("pinned-theirs", "telegram", chat_id="99", chat_type="dm")
    set_columns(db, "pinned-theirs", pinned=1)
    for session_id, started in (("mine", 5.0), ("theirs", 4.0), ("group", 3.0)):
        set_columns(db, session_id, started_at=started)
    own = db.list_sessions_rich(scope="own", requester_user_id="42", include_pinned=True)
    assert ids(own) == ["mine"]
    assert ids(db.list_sessions_rich(scope="own", requester_user_id=99)) == [
        "pinned-theirs",
        "theirs",
    ]
    assert len(db.list_sessions_rich(scope="admin")) == len(db.list_sessions_rich()) == 6
    assert db.session_count(scope="own", requester_user_id=42) == 1
    for row in db.list_sessions_rich(include_children=True):
        assert session_row_is_own_dm(row, "42") is (row["id"] == "mine"), row["id"]
    dm = {"source": "telegram", "chat_type": "dm", "chat_id": "42"}
    assert session_row_is_own_dm(dm, 42)
    assert not session_row_is_own_dm(dm, "")  # no requester: nothing is theirs
    assert not session_row_is_own_dm({**dm, "chat_id": ""}, "")
    for call in (
        lambda: db.list_sessions_rich(scope="own"),
        lambda: db.session_count(scope="own", requester_user_id=""),
        lambda: db.list_sessions_rich(scope="everyone"),
        lambda: db.session_count(scope="own", requester_user_id=True),
    ):
        with pytest.raises(ValueError, match="scope"):
            call()


def test_whether_enough_sessions_exist_reads_only_that_many(db: SessionDB) -> None:
    assert db.session_count_ge() is False
    assert db.session_count_ge(0) is True
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    set_columns(db, "s2", archived=1)  # counted too
    assert (db.session_count_ge(1), db.session_count_ge(2), db.session_count_ge(3)) == (
        True,
        True,
        False,
    )
    with pytest.raises(InvalidInputTypeError):
        db.session_count_ge("2")  # type: ignore[arg-type]


# -- search_sessions ---------------------------------------------------------------------------


def test_search_sessions_lists_whole_rows_most_recently_active_first(db: SessionDB) -> None:
    db.create_session("old-busy", "cli", started_at=1.0, title="Debugging")
    say(db, "old-busy", "user", "still going", 50.0)
    db.create_session("new-idle", "telegram", started_at=20.0)
    db.create_session("tie-a", "cli", started_at=10.0)
    db.create_session("tie-b", "cli", started_at=10.0)
    db.create_session("archived", "acp", started_at=5.0)
    set_columns(db, "archived", archived=1, hidden=1)
    rows = db.search_sessions()
    assert ids(rows) == ["old-busy", "new-idle", "tie-b", "tie-a", "archived"]
    assert rows[0]["title"] == "Debugging"
    assert rows[0]["last_active"] == 50.0
    assert "preview" not in rows[0]
    assert ids(db.search_sessions(source="cli")) == ["old-busy", "tie-b", "tie-a"]
    assert ids(db.search_sessions(source=("acp", "telegram"))) == ["new-idle", "archived"]
    assert ids(db.search_sessions(limit=2, offset=1)) == ["new-idle", "tie-b"]
    assert ids(db.search_sessions(source=[])) == ids(rows)


def test_search_sessions_scopes_to_a_workspace(db: SessionDB) -> None:
    workspaces = {
        "in-repo": ("/repo/sub", "/repo"),
        "other-repo-here": ("/repo", "/elsewhere"),
        "legacy-below": ("/repo/pkg", None),
        "legacy-blank": ("/repo", ""),
        "legacy-sibling": ("/repo2", None),
    }
    for number, (session_id, (cwd, root)) in enumerate(workspaces.items()):
        db.create_session(session_id, "cli", started_at=float(number))
        set_columns(db, session_id, cwd=cwd, git_repo_root=root)
    assert sorted(ids(db.search_sessions(workspace_key="/repo/"))) == [
        "in-repo",
        "legacy-below",
        "legacy-blank",
    ]


# -- bad input ---------------------------------------------------------------------------------


def test_listings_refuse_what_they_cannot_mean_and_change_nothing(
    db: SessionDB, backend_url: URL
) -> None:
    db.create_session("s1", "cli")
    before = database_digest(backend_url)
    for call in (
        lambda: db.list_sessions_rich(limit="5"),  # type: ignore[arg-type]
        lambda: db.list_sessions_rich(sources="cli"),  # type: ignore[arg-type]
        lambda: db.list_sessions_rich(include_children=1),  # type: ignore[arg-type]
        lambda: db.list_sessions_rich(source=7),  # type: ignore[arg-type]
        lambda: db.session_count(exclude_sources="tool"),  # type: ignore[arg-type]
        lambda: db.session_count_by_source(archived_only="yes"),  # type: ignore[arg-type]
        lambda: db.search_sessions(source=7),  # type: ignore[arg-type]
        lambda: db.search_sessions(workspace_key=b"/x"),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidInputTypeError):
            call()
    for call in (
        lambda: db.list_sessions_rich(limit=-1),
        lambda: db.list_sessions_rich(offset=-3),
        lambda: db.search_sessions(limit=-1),
        lambda: db.session_count(min_message_count=-1),
        lambda: db.list_sessions_rich(search_query="nul\x00"),
    ):
        with pytest.raises(InvalidInputError):
            call()
    assert database_digest(backend_url) == before


def test_an_empty_database_lists_and_counts_nothing(db: SessionDB) -> None:
    assert db.list_sessions_rich(include_pinned=True, order_by_last_active=True) == []
    assert db.search_sessions(workspace_key="/repo") == []
    assert db.session_count(exclude_children=True) == 0
    assert db.session_count_by_source() == {}


def test_the_sqlite_page_reads_the_start_index(store: SessionDB, backend_url: URL) -> None:
    if backend_url.get_backend_name() != "sqlite":
        pytest.skip("a query plan of SQLite's")
    from sqlalchemy.dialects import sqlite

    from hermes_state import statements

    chosen = statements.SessionFilter(listable_only=True, visible_only=True)
    page = statements.rich_sessions("sqlite", chosen, False)
    sql = str(page.compile(dialect=sqlite.dialect()))
    compiled = page.compile(dialect=sqlite.dialect())
    params = [
        {"limit": 20, "offset": 0}.get(name, compiled.binds[name].value)
        for name in compiled.positiontup or ()
    ]
    plan = store._conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    details = " ".join(str(row[-1]) for row in plan)
    assert "idx_sessions_started" in details, details
    assert "TEMP B-TREE FOR ORDER BY" not in details, details
    assert "idx_messages_session" in details, details  # previews and recency: seeks
