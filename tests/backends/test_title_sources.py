"""Who set a session's title, on every backend and every kind of store: automatic titles and
their ranks, the provenance read and rewritten, Bot Mode's canonical "Bot Chat" that keeps its
title, and a title handed down a compression lineage."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import update
from sqlalchemy.engine import URL

from hermes_state import InvalidInputError, InvalidInputTypeError, SessionDB
from hermes_state.models import sessions
from hermes_state.titles import (
    CANONICAL_BOT_CHAT_TITLE,
    TITLE_SOURCE_BRANCH,
    TITLE_SOURCE_BRANCH_FALLBACK,
    TITLE_SOURCE_DERIVED,
    TITLE_SOURCE_LLM,
    TITLE_SOURCE_USER,
    title_rank,
)
from tests.support.digest import database_digest
from tests.support.processes import DEADLINE

BOT_CHAT = CANONICAL_BOT_CHAT_TITLE


def _title_and_source(store: SessionDB, session_id: str) -> tuple[object, object]:
    row = store.get_session(session_id)
    assert row is not None
    return row["title"], row["title_source"]


def _titled(store: SessionDB, title: str) -> object:
    """The id of the session titled exactly ``title`` (None: no such session)."""
    row = store.get_session_by_title(title)
    return None if row is None else row["id"]


def _canonical_chat(store: SessionDB, session_id: str = "bot") -> str:
    """A bot's chat as Bot Mode makes it: titled "Bot Chat" by the user, then hidden."""
    store.create_session(session_id, "desktop")
    assert store.set_session_title(session_id, BOT_CHAT)
    assert store.set_session_hidden(session_id, True)
    return session_id


# -- ranks -----------------------------------------------------------------------------------


def test_the_ranks_of_the_provenances() -> None:
    assert [title_rank(s) for s in ("derived", "llm", "user")] == [0, 1, 2]
    assert title_rank(None) == 2  # a title from before provenance: only a user set those
    assert title_rank(TITLE_SOURCE_BRANCH) == title_rank(TITLE_SOURCE_BRANCH_FALLBACK) == 0
    assert title_rank("something newer") == 0
    assert SessionDB.TITLE_SOURCE_USER == TITLE_SOURCE_USER
    assert SessionDB.CANONICAL_BOT_CHAT_TITLE == "Bot Chat"


def test_an_automatic_title_replaces_only_a_lower_one(any_store: SessionDB) -> None:
    any_store.create_session("s1", "cli")
    assert any_store.set_auto_title("s1", "  first words ", source=TITLE_SOURCE_DERIVED)
    assert _title_and_source(any_store, "s1") == ("first words", "derived")
    assert not any_store.set_auto_title("s1", "other words", source=TITLE_SOURCE_DERIVED)
    assert any_store.set_auto_title("s1", "A model's title", source=TITLE_SOURCE_LLM)
    assert _title_and_source(any_store, "s1") == ("A model's title", "llm")
    # Running the titler again, or a lower source, changes nothing.
    assert not any_store.set_auto_title("s1", "A second try", source=TITLE_SOURCE_LLM)
    assert not any_store.set_auto_title("s1", "words again", source=TITLE_SOURCE_DERIVED)
    assert _title_and_source(any_store, "s1") == ("A model's title", "llm")
    # The user's title outranks every automatic one, and the user may always write.
    assert any_store.set_session_title("s1", "Mine")
    for source in (TITLE_SOURCE_LLM, TITLE_SOURCE_DERIVED, TITLE_SOURCE_BRANCH):
        assert not any_store.set_auto_title("s1", "not yours", source=source)
    assert _title_and_source(any_store, "s1") == ("Mine", "user")
    assert any_store.set_session_title("s1", "Mine, renamed")
    assert _title_and_source(any_store, "s1") == ("Mine, renamed", "user")


def test_branch_titles_rank_with_derived_ones(any_store: SessionDB) -> None:
    any_store.create_session("b1", "cli")
    assert any_store.set_auto_title("b1", "a branch", source=TITLE_SOURCE_BRANCH)
    assert any_store.get_session_title_source("b1") == "branch"
    assert not any_store.set_auto_title("b1", "fallback", source=TITLE_SOURCE_BRANCH_FALLBACK)
    assert not any_store.set_auto_title("b1", "derived", source=TITLE_SOURCE_DERIVED)
    assert any_store.set_auto_title("b1", "the model's", source=TITLE_SOURCE_LLM)
    assert _title_and_source(any_store, "b1") == ("the model's", "llm")
    any_store.create_session("b2", "cli")
    assert any_store.set_auto_title("b2", "fallback", source=TITLE_SOURCE_BRANCH_FALLBACK)
    assert _title_and_source(any_store, "b2") == ("fallback", "branch_fallback")


def test_a_title_without_provenance_is_the_users(any_store: SessionDB) -> None:
    any_store.create_session("old", "cli")
    assert any_store.set_session_title("old", "from long ago")
    statement = update(sessions).where(sessions.c.id == "old").values(title_source=None)
    any_store._execute_write(lambda conn: conn.execute(statement))
    assert any_store.get_session_title_source("old") is None
    assert not any_store.set_auto_title("old", "a model's idea", source=TITLE_SOURCE_LLM)
    assert _title_and_source(any_store, "old") == ("from long ago", None)


def test_an_automatic_title_follows_the_user_titles_rules(
    any_store: SessionDB, backend_url: URL
) -> None:
    for session_id in ("s1", "s2"):
        any_store.create_session(session_id, "cli")
    assert any_store.set_session_title("s1", "taken")
    before = database_digest(backend_url)
    with pytest.raises(InvalidInputError, match="already in use by session 's1'"):
        any_store.set_auto_title("s2", " taken ", source=TITLE_SOURCE_LLM)
    with pytest.raises(InvalidInputError, match="too long"):
        any_store.set_auto_title("s2", "x" * 101, source=TITLE_SOURCE_LLM)
    assert database_digest(backend_url) == before
    assert any_store.set_auto_title("ghost", "anything", source=TITLE_SOURCE_LLM) is False
    # An empty automatic title on an untitled session leaves it untitled, provenance none.
    assert any_store.set_auto_title("s2", " \u200b ", source=TITLE_SOURCE_DERIVED)
    assert _title_and_source(any_store, "s2") == (None, None)


def test_an_automatic_source_must_be_one_upstream_writes(
    any_store: SessionDB, backend_url: URL
) -> None:
    any_store.create_session("s1", "cli")
    before = database_digest(backend_url)
    for source in ("user", "cli", "", "LLM", None, 1):
        with pytest.raises(InvalidInputError, match="invalid automatic title source"):
            any_store.set_auto_title("s1", "a title", source=source)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid automatic title source: 'user'"):
        any_store.set_auto_title("s1", "a title", source="user")
    with pytest.raises(InvalidInputTypeError):
        any_store.set_auto_title(7, "a title", source="llm")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputTypeError):
        any_store.set_auto_title("s1", 7, source="llm")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        any_store.set_auto_title("s1", "a title", "llm")  # type: ignore[misc]
    assert database_digest(backend_url) == before


def test_racing_automatic_titles_leave_one(new_store: Callable[..., SessionDB]) -> None:
    """Titlers on stores of their own title one untitled session at once: the write compares
    what it read, so exactly one lands and the others are told False."""
    setup = new_store()
    setup.create_session("s1", "cli")
    names = [f"title {index}" for index in range(4)]
    stores = {name: new_store() for name in names}
    start = threading.Barrier(len(names))
    outcomes: dict[str, object] = {}

    def race(name: str) -> None:
        start.wait(DEADLINE)
        try:
            outcomes[name] = stores[name].set_auto_title("s1", name, source=TITLE_SOURCE_LLM)
        except Exception as failed:  # shown by the assertion below
            outcomes[name] = failed

    threads = [threading.Thread(target=race, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    winners = [name for name, outcome in outcomes.items() if outcome is True]
    assert len(winners) == 1, outcomes
    assert all(outcomes[name] is False for name in names if name not in winners), outcomes
    assert _title_and_source(setup, "s1") == (winners[0], "llm")


# -- the provenance ----------------------------------------------------------------------------


def test_the_provenance_is_read_and_rewritten(any_store: SessionDB, backend_url: URL) -> None:
    any_store.create_session("s1", "cli")
    assert any_store.get_session_title_source("s1") is None
    assert any_store.set_session_title_source("s1", "llm") is False  # untitled: nothing to mark
    assert _title_and_source(any_store, "s1") == (None, None)
    assert any_store.set_session_title("s1", "carried over")
    assert any_store.get_session_title_source("s1") == "user"
    assert any_store.set_session_title_source("s1", TITLE_SOURCE_DERIVED) is True
    assert _title_and_source(any_store, "s1") == ("carried over", "derived")
    assert any_store.set_session_title_source("s1", TITLE_SOURCE_DERIVED) is True  # the same
    # The rewritten provenance is what the next automatic title is ranked against.
    assert any_store.set_auto_title("s1", "the model's", source=TITLE_SOURCE_LLM)
    assert any_store.set_session_title_source("s1", TITLE_SOURCE_USER)
    assert not any_store.set_auto_title("s1", "again", source=TITLE_SOURCE_LLM)
    assert any_store.get_session_title_source("ghost") is None
    assert any_store.set_session_title_source("ghost", "user") is False
    before = database_digest(backend_url)
    for source in ("branch", "branch_fallback", "cli", None):
        with pytest.raises(InvalidInputError, match="invalid title source"):
            any_store.set_session_title_source("s1", source)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputTypeError):
        any_store.get_session_title_source(None)  # type: ignore[arg-type]
    assert database_digest(backend_url) == before


# -- the canonical Bot Chat ----------------------------------------------------------------------


def test_the_canonical_bot_chat_keeps_its_title(any_store: SessionDB, backend_url: URL) -> None:
    bot = _canonical_chat(any_store)
    before = database_digest(backend_url)
    for title in ("My cool chat", "", None, "Bot Chat #2", "bot chat"):
        with pytest.raises(InvalidInputError, match="canonical Bot Chat"):
            any_store.set_session_title(bot, title)
    assert not any_store.set_auto_title(bot, "Groceries", source=TITLE_SOURCE_LLM)
    assert database_digest(backend_url) == before
    assert _titled(any_store, BOT_CHAT) == bot
    # Writing the title it has is fine (Bot Mode re-asserts it on every creation path).
    assert any_store.set_session_title(bot, "  Bot   Chat ")
    assert _title_and_source(any_store, bot) == (BOT_CHAT, "user")


def test_the_guard_does_not_look_at_the_provenance(any_store: SessionDB) -> None:
    """A canonical chat whose title was derived would lose to a model's title on rank alone;
    the guard stops that write, not the ranks."""
    any_store.create_session("derived", "desktop")
    assert any_store.set_auto_title("derived", BOT_CHAT, source=TITLE_SOURCE_DERIVED)
    assert any_store.set_session_hidden("derived", True)
    assert not any_store.set_auto_title("derived", "Renamed", source=TITLE_SOURCE_LLM)
    assert _title_and_source(any_store, "derived") == (BOT_CHAT, "derived")
    with pytest.raises(InvalidInputError, match="canonical Bot Chat"):
        any_store.set_session_title("derived", "Renamed")


def test_a_visible_bot_chat_is_an_ordinary_session(any_store: SessionDB) -> None:
    any_store.create_session("plain", "cli")
    assert any_store.set_auto_title("plain", BOT_CHAT, source=TITLE_SOURCE_DERIVED)
    assert any_store.set_auto_title("plain", "Renamed by the model", source=TITLE_SOURCE_LLM)
    assert any_store.set_session_title("plain", BOT_CHAT)
    assert any_store.set_session_title("plain", "renamed away")
    assert _title_and_source(any_store, "plain") == ("renamed away", "user")
    # Once hidden again it is a canonical chat, and keeps the title from then on.
    assert any_store.set_session_title("plain", BOT_CHAT)
    assert any_store.set_session_hidden("plain", True)
    with pytest.raises(InvalidInputError, match="canonical Bot Chat"):
        any_store.set_session_title("plain", "renamed again")
    assert any_store.set_session_hidden("plain", False)
    assert any_store.set_session_title("plain", "renamed again")


def test_an_archived_hidden_bot_chat_gives_its_title_to_a_replacement(
    any_store: SessionDB,
) -> None:
    retired = _canonical_chat(any_store, "retired")
    assert any_store.set_session_archived(retired, True)
    any_store.create_session("replacement", "desktop")
    assert any_store.set_session_title("replacement", BOT_CHAT)
    assert any_store.set_session_hidden("replacement", True)
    row = any_store.get_session(retired)
    assert row is not None
    assert (row["archived"], row["hidden"], row["title"], row["title_source"]) == (1, 1, None, None)
    assert _titled(any_store, BOT_CHAT) == "replacement"
    assert any_store.resolve_session_by_title(BOT_CHAT) == "replacement"


def test_an_archived_visible_bot_chat_gives_its_title_only_to_a_hidden_claimant(
    any_store: SessionDB, backend_url: URL
) -> None:
    """A canonical chat from before chats were born hidden is archived but visible: the hidden
    chat replacing it takes the title, a visible session does not."""
    any_store.create_session("legacy", "desktop")
    assert any_store.set_session_title("legacy", BOT_CHAT)
    assert any_store.set_session_archived("legacy", True)
    any_store.create_session("visible", "cli")
    before = database_digest(backend_url)
    with pytest.raises(InvalidInputError, match="already in use by session 'legacy'"):
        any_store.set_session_title("visible", BOT_CHAT)
    with pytest.raises(InvalidInputError, match="already in use by session 'legacy'"):
        any_store.set_auto_title("visible", BOT_CHAT, source=TITLE_SOURCE_LLM)
    assert database_digest(backend_url) == before
    any_store.create_session("born-hidden", "desktop")
    assert any_store.set_session_hidden("born-hidden", True)
    assert any_store.set_session_title("born-hidden", BOT_CHAT)
    assert _title_and_source(any_store, "legacy") == (None, None)
    assert _title_and_source(any_store, "born-hidden") == (BOT_CHAT, "user")


def test_a_live_bot_chat_keeps_its_title_from_any_claimant(
    any_store: SessionDB, backend_url: URL
) -> None:
    _canonical_chat(any_store, "live")
    any_store.create_session("claimant", "desktop")
    assert any_store.set_session_hidden("claimant", True)
    # Archived or hidden is not enough alone: the title stays with the unarchived holder...
    before = database_digest(backend_url)
    with pytest.raises(InvalidInputError, match="already in use by session 'live'"):
        any_store.set_session_title("claimant", BOT_CHAT)
    assert database_digest(backend_url) == before
    # ...and only "Bot Chat" is released so: an archived hidden holder of another title keeps it.
    any_store.create_session("other", "cli")
    assert any_store.set_session_title("other", "Notes")
    assert any_store.set_session_hidden("other", True)
    assert any_store.set_session_archived("other", True)
    with pytest.raises(InvalidInputError, match="already in use by session 'other'"):
        any_store.set_session_title("claimant", "Notes")


def test_bot_chat_resolves_to_the_canonical_chat_not_a_numbered_one(any_store: SessionDB) -> None:
    canonical = _canonical_chat(any_store, "forever")
    any_store.create_session("branch", "desktop", parent_session_id=canonical, started_at=9e9)
    assert any_store.set_auto_title("branch", f"{BOT_CHAT} #2", source=TITLE_SOURCE_DERIVED)
    assert any_store.resolve_session_by_title(BOT_CHAT) == canonical
    assert any_store.resolve_session_by_title(f"{BOT_CHAT} #2") == "branch"
    # Other titles still prefer their newest numbered continuation.
    any_store.create_session("plain", "cli", started_at=1.0)
    any_store.create_session("plain2", "cli", started_at=2.0)
    assert any_store.set_session_title("plain", "My session")
    assert any_store.set_session_title("plain2", "My session #2")
    assert any_store.resolve_session_by_title("My session") == "plain2"


def test_without_the_exact_bot_chat_a_numbered_one_resolves(any_store: SessionDB) -> None:
    any_store.create_session("numbered", "desktop")
    assert any_store.set_session_title("numbered", f"{BOT_CHAT} #3")
    assert any_store.resolve_session_by_title(BOT_CHAT) == "numbered"


# -- a title handed down a compression lineage -------------------------------------------------


def test_a_continuation_takes_its_title_back_from_an_earlier_segment(any_store: SessionDB) -> None:
    any_store.create_session("root", "cli", end_reason="compression", started_at=1.0)
    any_store.create_session("mid", "cli", parent_session_id="root", started_at=2.0)
    any_store.end_session("mid", "compression")
    any_store.create_session("tip", "cli", parent_session_id="mid", started_at=3.0)
    assert any_store.set_session_title("root", "fingerprint-scanner")
    assert any_store.set_auto_title("tip", "fingerprint-scanner #2", source=TITLE_SOURCE_LLM)
    assert any_store.set_session_title("tip", "fingerprint-scanner")
    assert any_store.get_session_title("root") is None
    assert any_store.get_session_title_source("root") is None
    assert _title_and_source(any_store, "tip") == ("fingerprint-scanner", "user")
    assert _titled(any_store, "fingerprint-scanner") == "tip"


def test_only_an_earlier_compression_segment_gives_its_title_up(
    any_store: SessionDB, backend_url: URL
) -> None:
    any_store.create_session("ended", "cli", end_reason="user_exit")
    any_store.create_session("child", "cli", parent_session_id="ended")
    any_store.create_session("root", "cli", end_reason="compression")
    any_store.create_session("tip", "cli", parent_session_id="root")
    assert any_store.set_session_title("ended", "parent's")
    assert any_store.set_session_title("tip", "the tip's")
    before = database_digest(backend_url)
    # A parent that did not end by compression is another conversation.
    with pytest.raises(InvalidInputError, match="already in use by session 'ended'"):
        any_store.set_session_title("child", "parent's")
    # A later segment keeps its title from the earlier one.
    with pytest.raises(InvalidInputError, match="already in use by session 'tip'"):
        any_store.set_session_title("root", "the tip's")
    assert database_digest(backend_url) == before


def test_an_automatic_title_takes_the_title_of_an_earlier_segment_too(
    any_store: SessionDB,
) -> None:
    any_store.create_session("root", "cli", end_reason="compression")
    any_store.create_session("tip", "cli", parent_session_id="root")
    assert any_store.set_auto_title("root", "carried", source=TITLE_SOURCE_DERIVED)
    assert any_store.set_auto_title("tip", "carried", source=TITLE_SOURCE_LLM)
    assert any_store.get_session_title("root") is None
    assert _title_and_source(any_store, "tip") == ("carried", "llm")
