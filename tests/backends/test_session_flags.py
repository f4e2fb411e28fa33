"""Session flags, ids and meta on every backend and every kind of store: the archive, pin,
hide and read flags set across a compression lineage."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, func, insert, select, update

from hermes_state import InvalidInputError, InvalidInputTypeError, SessionDB, SessionInUseError
from hermes_state.models import (
    messages,
    session_model_usage,
    session_turn_leases,
    sessions,
    system_prompts,
)
from tests.support.digest import database_digest
from tests.support.stores import HandClock, put

FLAGS = ("archived", "pinned", "hidden", "last_read_at")


def flags(db: SessionDB, session_id: str) -> dict[str, object]:
    row = db.get_session(session_id)
    assert row is not None, session_id
    return {name: row[name] for name in FLAGS}


def compressed(db: SessionDB, *segments: str, source: str = "cli") -> None:
    """One conversation that compression split into ``segments``, oldest first: every segment
    but the last ended by compression, each continued by the next."""
    parent = None
    for number, segment in enumerate(segments):
        ended = number < len(segments) - 1
        db.create_session(
            segment,
            source,
            parent_session_id=parent,
            started_at=100.0 + number,
            ended_at=100.5 + number if ended else None,
            end_reason="compression" if ended else None,
        )
        parent = segment


def test_archiving_any_segment_archives_the_whole_conversation(any_store: SessionDB) -> None:
    compressed(any_store, "root", "mid", "tip")
    any_store.create_session("other", "cli")
    assert any_store.set_session_archived("tip", True) is True
    assert [flags(any_store, s)["archived"] for s in ("root", "mid", "tip")] == [1, 1, 1]
    assert flags(any_store, "other")["archived"] == 0
    assert any_store.set_session_archived("mid", True) is True  # already archived: still True
    assert any_store.set_session_archived("root", False) is True
    assert [flags(any_store, s)["archived"] for s in ("root", "mid", "tip")] == [0, 0, 0]


def test_a_flag_follows_compression_edges_only(any_store: SessionDB) -> None:
    """A child of a session that did not end by compression (a branch, a subagent) is its own
    conversation; a child of a compressed segment is a continuation, whatever else it is."""
    any_store.create_session("live", "cli")
    any_store.create_session("branch", "cli", parent_session_id="live")
    compressed(any_store, "root", "tip")
    any_store.create_session("sibling", "cli", parent_session_id="root")
    assert any_store.set_session_hidden("live", True) is True
    assert (flags(any_store, "live")["hidden"], flags(any_store, "branch")["hidden"]) == (1, 0)
    assert any_store.set_session_hidden("branch", True) is True
    assert flags(any_store, "live")["hidden"] == 1  # its parent ended by no compression
    assert any_store.set_session_hidden("sibling", True) is True
    # Up from the session and down from it, not down again from its ancestors (upstream's
    # walk): the other continuation of root keeps its flag.
    assert [flags(any_store, s)["hidden"] for s in ("root", "tip", "sibling")] == [1, 0, 1]
    assert any_store.set_session_hidden("root", False) is True
    assert [flags(any_store, s)["hidden"] for s in ("root", "tip", "sibling")] == [0, 0, 0]


def test_pinning_unhides_except_the_canonical_bot_chat(any_store: SessionDB) -> None:
    compressed(any_store, "root", "tip")
    assert any_store.set_session_hidden("root", True)
    assert any_store.set_session_pinned("tip", True) is True
    assert [flags(any_store, s)["pinned"] for s in ("root", "tip")] == [1, 1]
    assert [flags(any_store, s)["hidden"] for s in ("root", "tip")] == [0, 0]
    assert any_store.set_session_hidden("tip", True)
    assert any_store.set_session_pinned("tip", False) is True  # unpinning leaves hidden alone
    assert (flags(any_store, "root")["pinned"], flags(any_store, "root")["hidden"]) == (0, 1)
    any_store.create_session("bot", "desktop")
    assert any_store.set_session_title("bot", "Bot Chat")
    assert any_store.set_session_hidden("bot", True)
    assert any_store.set_session_pinned("bot", True) is True
    assert (flags(any_store, "bot")["pinned"], flags(any_store, "bot")["hidden"]) == (1, 1)
    any_store.create_session("visible-bot", "desktop")
    assert any_store.set_session_title("visible-bot", "Bot Chat #2")
    assert any_store.set_session_hidden("visible-bot", True)
    assert any_store.set_session_pinned("visible-bot", True)
    assert flags(any_store, "visible-bot")["hidden"] == 0  # only the exact title is kept hidden


def test_read_is_a_watermark_across_the_lineage(
    new_any_store: Callable[..., SessionDB],
) -> None:
    clock = HandClock(5000.0)
    db = new_any_store(clock=clock)
    compressed(db, "root", "tip")
    assert flags(db, "tip")["last_read_at"] is None  # never tracked
    assert db.set_session_read("tip") is True
    assert [flags(db, s)["last_read_at"] for s in ("root", "tip")] == [5000.0, 5000.0]
    clock.advance(10.0)
    assert db.set_session_read("root", False) is True
    assert [flags(db, s)["last_read_at"] for s in ("root", "tip")] == [0.0, 0.0]
    assert db.set_session_read("root", read=True) is True
    assert flags(db, "tip")["last_read_at"] == 5010.0


def test_flags_of_an_unknown_session_change_nothing(any_store: SessionDB) -> None:
    any_store.create_session("s1", "cli")
    before = database_digest(any_store.url)
    assert any_store.set_session_archived("ghost", True) is False
    assert any_store.set_session_pinned("ghost", True) is False
    assert any_store.set_session_hidden("ghost", True) is False
    assert any_store.set_session_read("ghost") is False
    assert any_store.set_session_read("ghost", False) is False
    assert database_digest(any_store.url) == before


def test_a_lineage_that_loops_is_walked_once(any_store: SessionDB) -> None:
    any_store.create_session("a", "cli", end_reason="compression", parent_session_id="b")
    any_store.create_session("b", "cli", end_reason="compression", parent_session_id="a")
    assert any_store.set_session_archived("a", True) is True
    assert (flags(any_store, "a")["archived"], flags(any_store, "b")["archived"]) == (1, 1)


@pytest.mark.parametrize(
    "call",
    [
        lambda db: db.set_session_archived(7, True),
        lambda db: db.set_session_archived("s1", "yes"),
        lambda db: db.set_session_pinned("s1", None),
        lambda db: db.set_session_hidden("s1", 2),
        lambda db: db.set_session_read("s1", "no"),
    ],
)
def test_bad_flag_arguments_are_refused_before_any_write(
    any_store: SessionDB, call: Callable[[SessionDB], object]
) -> None:
    any_store.create_session("s1", "cli")
    before = database_digest(any_store.url)
    with pytest.raises(InvalidInputTypeError):
        call(any_store)
    assert database_digest(any_store.url) == before
    assert any_store.set_session_hidden("s1", 1) is True  # upstream's callers pass 1/0 too
    assert flags(any_store, "s1")["hidden"] == 1


# -- resolving an id from a prefix -------------------------------------------------------------


def test_an_id_resolves_exactly_then_by_unique_prefix(any_store: SessionDB) -> None:
    any_store.create_session("20260315_092437_c9a6ff", "cli", started_at=10.0)
    any_store.create_session("20260315X092437_c9a6ff", "cli", started_at=20.0)
    any_store.create_session("20260315_092437_c9a6", "cli", started_at=5.0)
    # An exact id wins over the longer ids it is a prefix of.
    assert any_store.resolve_session_id("20260315_092437_c9a6") == "20260315_092437_c9a6"
    assert any_store.resolve_session_id("20260315X") == "20260315X092437_c9a6ff"
    # "_" is a character of the prefix, not LIKE's any-character: one id starts with it.
    assert any_store.resolve_session_id("20260315_092437_c9a6f") == "20260315_092437_c9a6ff"
    assert any_store.resolve_session_id("20260315") is None  # three ids start so: ambiguous
    assert any_store.resolve_session_id("2026%") is None  # "%" matches only itself
    assert any_store.resolve_session_id("nothing") is None


def test_the_like_escape_character_is_an_ordinary_character(any_store: SessionDB) -> None:
    any_store.create_session("team/a%b_c", "cli")
    any_store.create_session("team-x", "cli")
    assert any_store.resolve_session_id("team/") == "team/a%b_c"
    assert any_store.resolve_session_id("team/a%b_") == "team/a%b_c"
    assert any_store.resolve_session_id("team") is None


def test_the_empty_prefix_resolves_only_the_only_session(any_store: SessionDB) -> None:
    assert any_store.resolve_session_id("") is None
    any_store.create_session("only", "cli")
    assert any_store.resolve_session_id("") == "only"
    any_store.create_session("second", "cli")
    assert any_store.resolve_session_id("") is None


@pytest.mark.parametrize(
    ("given", "error"),
    [(7, InvalidInputTypeError), (None, InvalidInputTypeError), ("a\x00b", InvalidInputError)],
)
def test_a_prefix_that_is_no_text_is_refused(
    any_store: SessionDB, given: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        any_store.resolve_session_id(given)  # type: ignore[arg-type]


# -- which session a resume loads --------------------------------------------------------------


def chain(db: SessionDB, *links: tuple[str, str | None]) -> None:
    """Sessions with parents, started one after the other, none ended."""
    for number, (session_id, parent) in enumerate(links):
        db.create_session(session_id, "cli", parent_session_id=parent, started_at=1000.0 + number)


def set_key(db: SessionDB, session_id: str, key: str) -> None:
    db._execute_write(
        lambda conn: conn.execute(
            update(sessions).where(sessions.c.id == session_id).values(session_key=key)
        )
    )


def test_a_resume_moves_from_empty_segments_to_the_deepest_with_messages(
    any_store: SessionDB,
) -> None:
    chain(any_store, ("head", None), ("m1", "head"), ("m2", "m1"), ("bulk", "m2"), ("tail", "bulk"))
    for text in ("one", "two"):
        any_store.append_message("bulk", "user", text)
    assert any_store.resolve_resume_session_id("head") == "bulk"
    assert any_store.resolve_resume_session_id("m2") == "bulk"
    any_store.append_message("tail", "user", "three")
    assert any_store.resolve_resume_session_id("head") == "tail"  # the deepest one wins
    assert any_store.resolve_resume_session_id("tail") == "tail"


def test_a_resume_stays_where_nothing_below_holds_messages(any_store: SessionDB) -> None:
    chain(any_store, ("root", None), ("c1", "root"), ("c2", "c1"))
    assert any_store.resolve_resume_session_id("root") == "root"
    any_store.append_message("root", "user", "hi")
    assert any_store.resolve_resume_session_id("root") == "root"
    any_store.create_session("alone", "cli")
    assert any_store.resolve_resume_session_id("alone") == "alone"
    assert any_store.resolve_resume_session_id("ghost") == "ghost"
    assert any_store.resolve_resume_session_id("") == ""
    assert any_store.resolve_resume_session_id(None) is None


def test_a_resume_follows_compression_past_a_parent_with_messages(any_store: SessionDB) -> None:
    any_store.create_session("root", "cli", started_at=10.0)
    any_store.append_message("root", "user", "before compression")
    any_store.end_session("root", "compression")
    any_store.create_session("cont", "cli", parent_session_id="root", started_at=20.0)
    any_store.append_message("cont", "assistant", "after compression")
    assert any_store.resolve_resume_session_id("root") == "cont"


def test_a_resume_never_enters_a_fork(any_store: SessionDB) -> None:
    any_store.create_session("conv", "cli", started_at=10.0)
    any_store.append_message("conv", "user", "parent turn")
    forks = {
        "delegate": {"model_config": {"_delegate_from": "conv"}},
        "branch": {"model_config": {"_branched_from": "conv"}},
        "reset": {"model_config": {"_reset_from": "conv"}},
    }
    for number, (fork, fields) in enumerate(forks.items()):
        any_store.create_session(
            fork, "cli", parent_session_id="conv", started_at=20.0 + number, **fields
        )
        any_store.append_message(fork, "assistant", "their own work")
    any_store.create_session("tool-run", "tool", parent_session_id="conv", started_at=30.0)
    any_store.append_message("tool-run", "tool", "output")
    assert any_store.resolve_resume_session_id("conv") == "conv"
    any_store.create_session("plain", "cli", parent_session_id="conv", started_at=5.0)
    any_store.append_message("plain", "user", "an unmarked child continues the conversation")
    assert any_store.resolve_resume_session_id("conv") == "plain"


def test_a_resume_stops_at_a_reset_written_before_markers(any_store: SessionDB) -> None:
    any_store.create_session(
        "before", "telegram", started_at=10.0, ended_at=15.0, end_reason="session_reset"
    )
    any_store.append_message("before", "user", "old conversation")
    any_store.create_session("after", "telegram", parent_session_id="before", started_at=20.0)
    any_store.append_message("after", "user", "new conversation")
    assert any_store.resolve_resume_session_id("before") == "after"  # no key: no reset child
    for session_id in ("before", "after"):
        set_key(any_store, session_id, "agent:main:telegram:dm:42")
    assert any_store.resolve_resume_session_id("before") == "before"


def test_a_resume_prefers_the_newest_of_two_children(any_store: SessionDB) -> None:
    chain(any_store, ("parent", None), ("older", "parent"), ("newer", "parent"))
    any_store.append_message("newer", "user", "x")
    assert any_store.resolve_resume_session_id("parent") == "newer"
    any_store.append_message("older", "user", "y")
    assert any_store.resolve_resume_session_id("parent") == "newer"  # the newest child is walked


def test_a_resume_survives_a_loop(any_store: SessionDB) -> None:
    any_store.create_session("a", "cli", parent_session_id="b", started_at=1.0)
    any_store.create_session("b", "cli", parent_session_id="a", started_at=2.0)
    any_store.append_message("a", "user", "x")
    assert any_store.resolve_resume_session_id("a") == "a"
    assert any_store.resolve_resume_session_id("b") == "a"


def test_a_resume_refuses_an_id_that_is_no_text(any_store: SessionDB) -> None:
    with pytest.raises(InvalidInputTypeError):
        any_store.resolve_resume_session_id(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        any_store.resolve_resume_session_id("   ")


# -- upstream's key/value bookkeeping ------------------------------------------------------------


def test_meta_values_are_stored_replaced_and_read(any_store: SessionDB) -> None:
    # Server databases are shared from test to test and keep state_meta: keys of this test only.
    run = uuid.uuid4().hex[:8]
    archive, stale, loop = f"last_auto_archive:{run}", f"fts_stale:{run}", f"loop:{run}"
    assert any_store.get_meta(archive) is None
    assert any_store.set_meta(archive, "1700000000.5") is None
    assert any_store.get_meta(archive) == "1700000000.5"
    any_store.set_meta(archive, "1700000100.0")  # an upsert: the newest value wins
    assert any_store.get_meta(archive) == "1700000100.0"
    any_store.set_meta(stale, "")
    assert any_store.get_meta(stale) == ""
    any_store.set_meta(stale, None)
    assert any_store.get_meta(stale) is None
    long = "x" * 100_000 + " 東京 \U0001f680"
    any_store.set_meta(loop, long)
    assert any_store.get_meta(loop) == long
    assert any_store.get_meta(loop.upper()) is None  # keys compare exactly
    assert any_store.get_meta(archive) == "1700000100.0"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda db: db.get_meta(7), InvalidInputTypeError),
        (lambda db: db.get_meta(" "), InvalidInputError),
        (lambda db: db.set_meta(None, "v"), InvalidInputTypeError),
        (lambda db: db.set_meta("k", 7), InvalidInputTypeError),
        (lambda db: db.set_meta("k", "nul\x00"), InvalidInputError),
        (lambda db: db.set_meta("k" * 1000, "v"), InvalidInputError),
    ],
)
def test_bad_meta_arguments_are_refused_before_any_write(
    any_store: SessionDB, call: Callable[[SessionDB], object], error: type[Exception]
) -> None:
    key = f"k:{uuid.uuid4().hex[:8]}"
    any_store.set_meta(key, "kept")
    before = database_digest(any_store.url)
    with pytest.raises(error):
        call(any_store)
    assert database_digest(any_store.url) == before
    assert any_store.get_meta(key) == "kept"


# -- compression chains and lineages -----------------------------------------------------------


def set_config(db: SessionDB, session_id: str, text: str) -> None:
    """Write ``model_config`` as it is, valid JSON or not (upstream's files hold both)."""
    db._execute_write(
        lambda conn: conn.execute(
            update(sessions).where(sessions.c.id == session_id).values(model_config=text)
        )
    )


def test_the_chain_walks_compression_to_the_live_tip(any_store: SessionDB) -> None:
    compressed(any_store, "root", "mid", "tip")
    forks = {
        "delegate": {"model_config": {"_delegate_from": "root"}},
        "branch": {"model_config": {"_branched_from": "root"}},
        "reset": {"model_config": {"_reset_from": "root"}},
    }
    for fork, fields in forks.items():
        any_store.create_session(fork, "cli", parent_session_id="root", started_at=500.0, **fields)
    any_store.create_session("tool-run", "tool", parent_session_id="root", started_at=500.0)
    assert any_store.get_compression_chain("root") == ["root", "mid", "tip"]
    assert any_store.get_compression_chain("mid") == ["mid", "tip"]
    assert any_store.get_compression_chain("tip") == ["tip"]
    assert any_store.get_compression_tip("root") == "tip"
    assert any_store.get_compression_tip("tip") == "tip"
    assert any_store.get_compression_tip("delegate") == "delegate"
    assert any_store.get_compression_chain("ghost") == ["ghost"]
    assert any_store.get_compression_tip("ghost") == "ghost"
    assert any_store.get_compression_chain("") == any_store.get_compression_chain(None) == []
    assert any_store.get_compression_tip("") == ""
    assert any_store.get_compression_tip(None) is None


def test_the_chain_prefers_the_real_continuation_among_siblings(any_store: SessionDB) -> None:
    any_store.create_session(
        "root", "cli", started_at=10.0, ended_at=11.0, end_reason="compression"
    )
    any_store.create_session(
        "real", "cli", parent_session_id="root", started_at=12.0, ended_at=13.0,
        end_reason="compression",
    )  # fmt: skip
    any_store.create_session("live", "cli", parent_session_id="real", started_at=14.0)
    # A stale socket's sibling, started later and closed by the orphan reaper.
    any_store.create_session(
        "orphan", "cli", parent_session_id="root", started_at=20.0, ended_at=21.0,
        end_reason="ws_orphan_reap",
    )  # fmt: skip
    assert any_store.get_compression_chain("root") == ["root", "real", "live"]
    assert any_store.resolve_resume_session_id("root") == "live"


def test_among_live_continuations_the_most_recently_active_wins(any_store: SessionDB) -> None:
    any_store.create_session(
        "root", "cli", started_at=10.0, ended_at=11.0, end_reason="compression"
    )
    any_store.create_session("early", "cli", parent_session_id="root", started_at=12.0)
    any_store.create_session("late", "cli", parent_session_id="root", started_at=13.0)
    assert any_store.get_compression_tip("root") == "late"  # no activity: the later start
    any_store.append_message("early", "user", "busy", timestamp=50.0)
    assert any_store.get_compression_tip("root") == "early"
    any_store.create_session(
        "ended", "cli", parent_session_id="root", started_at=99.0, ended_at=99.5,
        end_reason="user_exit",
    )  # fmt: skip
    assert any_store.get_compression_tip("root") == "early"  # a live one before an ended one


def test_unreadable_model_config_is_no_marker(any_store: SessionDB) -> None:
    any_store.create_session(
        "parent", "cli", started_at=1.0, ended_at=2.0, end_reason="compression"
    )
    any_store.create_session("child", "cli", parent_session_id="parent", started_at=3.0)
    for text in ("{not-json", "[]", '"scalar"', "5", "null", '{"_delegate_from": null}'):
        set_config(any_store, "child", text)
        assert any_store.get_compression_chain("parent") == ["parent", "child"], text
        assert any_store.get_compression_lineage("child") == ["parent", "child"], text


def test_the_lineage_reaches_from_any_segment_to_both_ends(any_store: SessionDB) -> None:
    compressed(any_store, "root", "mid", "tip")
    for segment in ("root", "mid", "tip"):
        assert any_store.get_compression_lineage(segment) == ["root", "mid", "tip"]
    any_store.create_session("later", "cli", parent_session_id="mid", started_at=900.0)
    assert any_store.get_compression_lineage("tip") == ["root", "mid", "tip"]  # earliest first
    assert any_store.get_compression_lineage("later") == ["later"]  # not on the walked path
    assert any_store.get_compression_lineage("ghost") == []
    assert any_store.get_compression_lineage("") == any_store.get_compression_lineage(None) == []


def test_a_fork_is_a_lineage_of_its_own(any_store: SessionDB) -> None:
    compressed(any_store, "root", "tip")
    any_store.create_session(
        "delegate", "subagent", parent_session_id="tip", model_config={"_delegate_from": "tip"}
    )
    assert any_store.get_compression_lineage("delegate") == ["delegate"]
    # A continuation copies its parent's model_config: a marker naming another session was
    # inherited, so the copy still belongs to the lineage it continues.
    any_store.create_session(
        "d-root", "subagent", started_at=1.0, ended_at=2.0, end_reason="compression",
        parent_session_id="tip", model_config={"_delegate_from": "tip"},
    )  # fmt: skip
    any_store.create_session(
        "d-cont", "subagent", started_at=3.0, parent_session_id="d-root",
        model_config={"_delegate_from": "tip"},
    )  # fmt: skip
    assert any_store.get_compression_lineage("d-cont") == ["d-root", "d-cont"]


def test_a_lineage_that_loops_is_walked_once_by_every_read(any_store: SessionDB) -> None:
    any_store.create_session("a", "cli", end_reason="compression", parent_session_id="b")
    any_store.create_session("b", "cli", end_reason="compression", parent_session_id="a")
    assert sorted(any_store.get_compression_chain("a")) == ["a", "b"]
    assert any_store.get_compression_tip("a") == "b"
    assert sorted(any_store.get_compression_lineage("a")) == ["a", "b"]


# -- deleting sessions -------------------------------------------------------------------------


def ids(db: SessionDB) -> set[str]:
    return {row["id"] for row in db.list_sessions()}


def parent_of(db: SessionDB, session_id: str) -> str | None:
    row = db.get_session(session_id)
    assert row is not None, session_id
    return row["parent_session_id"]  # type: ignore[no-any-return]


def count_rows(db: SessionDB, table: Table, **where: str) -> int:
    query = select(func.count()).select_from(table)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    return int(db._execute_write(lambda conn: conn.execute(query).scalar_one()))


def test_deleting_a_session_takes_its_messages_and_detaches_its_children(
    any_store: SessionDB,
) -> None:
    any_store.create_session("root", "cli")
    any_store.append_message("root", "user", "hello from root")  # before its compression
    compressed(any_store, "root", "tip")
    any_store.create_session("grandchild", "cli", parent_session_id="tip")
    any_store.create_session("other", "cli")
    for session_id in ("tip", "other"):
        any_store.append_message(session_id, "user", f"hello from {session_id}")
    assert any_store.delete_session("root") is True
    assert any_store.get_session("root") is None
    assert any_store.message_count("root") == 0
    assert count_rows(any_store, messages, session_id="root") == 0
    assert ids(any_store) == {"tip", "grandchild", "other"}
    assert parent_of(any_store, "tip") is None  # a continuation is detached, not deleted
    assert parent_of(any_store, "grandchild") == "tip"
    assert any_store.message_count("tip") == any_store.message_count("other") == 1
    before = database_digest(any_store.url)
    assert any_store.delete_session("root") is False
    assert any_store.delete_session("ghost") is False
    assert database_digest(any_store.url) == before


def test_delegate_runs_go_with_the_session_they_worked_for(any_store: SessionDB) -> None:
    any_store.create_session("parent", "cli")
    delegate = {"model_config": {"_delegate_from": "parent"}}
    any_store.create_session("by-marker", "subagent", **delegate)  # no parent_session_id
    any_store.create_session(
        "by-child", "subagent", parent_session_id="parent", model_config={"_delegate_from": "x"}
    )
    any_store.create_session(
        "nested", "subagent", parent_session_id="by-marker", model_config={"_delegate_from": "y"}
    )
    any_store.create_session("untagged", "cli", parent_session_id="by-child")
    any_store.create_session(
        "branch", "cli", parent_session_id="parent", model_config={"_branched_from": "parent"}
    )
    # A marker looping back to the session deleted takes nothing else along.
    any_store.create_session(
        "loop", "subagent", parent_session_id="nested", model_config={"_delegate_from": "parent"}
    )
    for session_id in ("by-marker", "nested", "untagged"):
        any_store.append_message(session_id, "assistant", "work")
    assert any_store.delete_session("parent") is True
    assert ids(any_store) == {"untagged", "branch"}
    assert parent_of(any_store, "untagged") is None
    assert parent_of(any_store, "branch") is None
    assert count_rows(any_store, messages, session_id="by-marker") == 0
    assert count_rows(any_store, messages, session_id="nested") == 0
    assert any_store.message_count("untagged") == 1


def test_the_expected_ids_fence_a_delete(any_store: SessionDB) -> None:
    any_store.create_session("parent", "cli")
    any_store.create_session("d1", "subagent", model_config={"_delegate_from": "parent"})
    assert any_store.delete_session("parent", expected_delete_ids=["parent"]) is False
    assert ids(any_store) == {"parent", "d1"}  # a delegate the caller did not expect: kept
    assert any_store.delete_session("parent", expected_delete_ids=("d1", "parent", "d1")) is True
    assert ids(any_store) == set()
    any_store.create_session("s1", "cli")
    assert any_store.delete_session("s1", expected_delete_ids=["s1", "ghost"]) is False
    assert ids(any_store) == {"s1"}


@pytest.mark.parametrize("state", ["pending", "running"])
def test_a_session_being_handed_off_is_not_deleted(any_store: SessionDB, state: str) -> None:
    put(any_store, "busy", state)
    any_store.create_session("helper", "subagent", model_config={"_delegate_from": "lead"})
    any_store.create_session("lead", "cli")
    put(any_store, "helper-busy", state)
    any_store.create_session("lead2", "cli")  # its delegate run is being handed off
    any_store._execute_write(
        lambda conn: conn.execute(
            update(sessions)
            .where(sessions.c.id == "helper-busy")
            .values(model_config='{"_delegate_from": "lead2"}')
        )
    )
    before = database_digest(any_store.url)
    with pytest.raises(SessionInUseError, match="handoff in flight"):
        any_store.delete_session("busy")
    with pytest.raises(SessionInUseError):
        any_store.delete_session("lead2")
    with pytest.raises(SessionInUseError):
        any_store.delete_sessions(["lead", "busy"])  # all or nothing
    assert database_digest(any_store.url) == before
    assert any_store.delete_sessions(["lead"]) == 1
    assert ids(any_store) == {"busy", "helper-busy", "lead2"}


def test_a_handed_off_session_is_deleted_and_its_audit_trail_kept(any_store: SessionDB) -> None:
    put(any_store, "done", "completed")
    put(any_store, "lost", "failed")
    events = any_store.handoff_history("done")
    assert events
    assert any_store.delete_sessions(["done", "lost"]) == 2
    assert any_store.handoff_history("done") == events


def test_a_live_turn_refuses_the_delete_an_expired_one_does_not(
    new_any_store: Callable[..., SessionDB],
) -> None:
    clock = HandClock(1000.0)
    db = new_any_store(clock=clock)
    compressed(db, "root", "tip")
    db.create_session("solo", "cli")
    assert db.try_acquire_session_turn_lease("tip", "cli:pid=1", ttl_seconds=60.0)
    assert db.try_acquire_session_turn_lease("solo", "cli:pid=2", ttl_seconds=60.0)
    before = database_digest(db.url)
    for session_id in ("tip", "root", "solo"):  # the lease of tip is keyed on root
        with pytest.raises(SessionInUseError, match="live turn lease"):
            db.delete_session(session_id)
    assert database_digest(db.url) == before
    clock.advance(61.0)
    assert db.delete_session("root") is True
    assert db.delete_session("solo") is True
    assert count_rows(db, session_turn_leases, conversation_id="root") == 0
    assert count_rows(db, session_turn_leases, conversation_id="solo") == 0
    assert ids(db) == {"tip"}
    assert db.try_acquire_session_turn_lease("tip", "cli:pid=3")  # tip is its own root now


def test_usage_rows_and_unused_prompts_go_with_the_session(any_store: SessionDB) -> None:
    run = uuid.uuid4().hex
    shared, own = f"shared-{run}"[:64], f"own-{run}"[:64]
    for session_id in ("gone", "kept"):
        any_store.create_session(session_id, "cli")

    def seed(conn: Any) -> None:
        conn.execute(insert(system_prompts), [{"hash": h, "prompt": h} for h in (shared, own)])
        for session_id, prompt in (("gone", own), ("kept", shared)):
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(system_prompt_hash=prompt)
            )
        conn.execute(insert(session_model_usage), [{"session_id": "gone", "model": "m"}])
        conn.execute(insert(session_model_usage), [{"session_id": "kept", "model": "m"}])

    any_store._execute_write(seed)
    assert any_store.delete_session("gone") is True
    assert count_rows(any_store, session_model_usage, session_id="gone") == 0
    assert count_rows(any_store, session_model_usage, session_id="kept") == 1
    assert count_rows(any_store, system_prompts, hash=own) == 0
    assert count_rows(any_store, system_prompts, hash=shared) == 1
    assert any_store.delete_session("kept") is True
    assert count_rows(any_store, system_prompts, hash=shared) == 0


def test_transcript_files_are_removed_after_the_delete(
    any_store: SessionDB, tmp_path: Path
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    names = ["s1.json", "s1.jsonl", "request_dump_s1_1.json", "request_dump_s1_2.json"]
    names += ["s10.json", "request_dump_s10_1.json", "s2.json", "d1.jsonl", "notes.txt"]
    for name in names:
        (folder / name).write_text("{}")
    any_store.create_session("s1", "cli")
    any_store.create_session("d1", "subagent", model_config={"_delegate_from": "s1"})
    any_store.create_session("s2", "cli")
    assert any_store.delete_session("s1", sessions_dir=folder) is True
    left = {"s10.json", "request_dump_s10_1.json", "s2.json", "notes.txt"}
    assert {p.name for p in folder.iterdir()} == left
    assert any_store.delete_sessions(["s2", "ghost"], sessions_dir=str(folder)) == 1
    assert {p.name for p in folder.iterdir()} == left - {"s2.json"}
    any_store.create_session("../notes.txt", "cli")  # an id naming another folder
    assert any_store.delete_session("../notes.txt", sessions_dir=folder / "x") is True
    assert (folder / "notes.txt").exists()


def test_bulk_delete_skips_what_is_no_id(any_store: SessionDB) -> None:
    for session_id in ("a", "b", "c"):
        any_store.create_session(session_id, "cli")
    assert any_store.delete_sessions(None) == 0  # type: ignore[arg-type]
    assert any_store.delete_sessions([]) == 0
    assert any_store.delete_sessions(["a", "a", "", None, 7, "ghost"]) == 1  # type: ignore[list-item]
    assert ids(any_store) == {"b", "c"}
    assert any_store.delete_sessions(iter(["b", "c"])) == 2
    assert ids(any_store) == set()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda db: db.delete_session(7), InvalidInputTypeError),
        (lambda db: db.delete_session(" "), InvalidInputError),
        (lambda db: db.delete_session("s1", sessions_dir=7), InvalidInputTypeError),
        (lambda db: db.delete_session("s1", expected_delete_ids="s1"), InvalidInputTypeError),
        (lambda db: db.delete_sessions("s1"), InvalidInputTypeError),
        (lambda db: db.delete_sessions(["s1", "bad\x00id"]), InvalidInputError),
    ],
)
def test_bad_delete_arguments_delete_nothing(
    any_store: SessionDB, call: Callable[[SessionDB], object], error: type[Exception]
) -> None:
    any_store.create_session("s1", "cli")
    with pytest.raises(error):
        call(any_store)
    assert ids(any_store) == {"s1"}
