"""Session titles on every backend and every kind of store: cleaning, uniqueness, lookups by
title and the " #N" lineage numbering upstream's callers rely on."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy.engine import URL

from hermes_state import InvalidInputError, SessionDB
from hermes_state.titles import MAX_TITLE_LENGTH, sanitize_title
from tests.support.digest import database_digest
from tests.support.processes import DEADLINE


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("My Project", "My Project"),
        ("  hello   world  ", "hello world"),
        ("tab\tnew\nline\r", "tab new line"),
        ("nul\x00bell\x07del\x7f", "nulbelldel"),
        ("zero\u200bwidth\u200djoin", "zerowidthjoin"),
        ("\ufeffbom and \u202eoverride\u2066isolate\u2069", "bom and overrideisolate"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("🚀 東京 Résumé — PR #438 'auth'", "🚀 東京 Résumé — PR #438 'auth'"),
        ("", None),
        (" \t\n\u200b\ufeff ", None),
        (None, None),
        ("A" * MAX_TITLE_LENGTH, "A" * MAX_TITLE_LENGTH),
    ],
)
def test_a_title_is_cleaned_before_it_is_stored(typed: str | None, stored: str | None) -> None:
    assert sanitize_title(typed) == stored
    assert SessionDB.sanitize_title(typed) == stored


def test_a_title_too_long_after_cleaning_is_refused() -> None:
    assert sanitize_title(" " * 50 + "A" * MAX_TITLE_LENGTH + " " * 50) == "A" * MAX_TITLE_LENGTH
    with pytest.raises(InvalidInputError, match="too long"):
        sanitize_title("A" * (MAX_TITLE_LENGTH + 1))
    with pytest.raises(ValueError, match="101 characters"):
        sanitize_title("B" * 101)


def test_set_read_and_clear_a_title(any_store: SessionDB) -> None:
    any_store.create_session("s1", "cli")
    assert any_store.get_session_title("s1") is None
    assert any_store.set_session_title("s1", "  first\x00  draft ")
    assert any_store.get_session_title("s1") == "first draft"
    row = any_store.get_session("s1")
    assert row is not None
    assert (row["title"], row["title_source"]) == ("first draft", "user")
    assert any_store.set_session_title("s1", "first draft")  # its own title again: no conflict
    assert any_store.set_session_title("s1", "final")
    assert any_store.get_session_title("s1") == "final"
    assert any_store.set_session_title("s1", "")  # empty clears, provenance with it
    row = any_store.get_session("s1")
    assert row is not None
    assert (row["title"], row["title_source"]) == (None, None)
    assert any_store.set_session_title("ghost", "anything") is False
    assert any_store.get_session_title("ghost") is None


def test_titles_are_unique_and_a_taken_one_changes_nothing(
    any_store: SessionDB, backend_url: URL
) -> None:
    for session_id in ("s1", "s2", "s3"):
        any_store.create_session(session_id, "cli")
    assert any_store.set_session_title("s1", "my project")
    assert any_store.set_session_title("s2", "")  # untitled sessions never collide
    assert any_store.set_session_title("s3", "")
    before = database_digest(backend_url)
    with pytest.raises(InvalidInputError, match="already in use by session 's1'"):
        any_store.set_session_title("s2", "  my   project ")
    with pytest.raises(InvalidInputError, match="too long"):
        any_store.set_session_title("s2", "X" * 150)
    assert database_digest(backend_url) == before


def test_a_session_is_found_by_its_exact_title(any_store: SessionDB) -> None:
    any_store.create_session("s1", "cli", model="m-1")
    any_store.set_session_title("s1", "refactoring auth")
    found = any_store.get_session_by_title("refactoring auth")
    assert found is not None
    assert (found["id"], found["model"], found["title"]) == ("s1", "m-1", "refactoring auth")
    assert any_store.get_session_by_title("refactoring") is None
    assert any_store.get_session_by_title("Refactoring Auth") is None  # exact, case included


def test_a_title_resolves_to_its_newest_numbered_continuation(any_store: SessionDB) -> None:
    for number, session_id in enumerate(("s1", "s2", "s3", "other"), start=1):
        any_store.create_session(session_id, "cli", started_at=1000.0 + number)
    any_store.set_session_title("s1", "my project")
    any_store.set_session_title("s3", "my project #3")
    any_store.set_session_title("s2", "my project #2")
    any_store.set_session_title("other", "my projects")
    assert any_store.resolve_session_by_title("my project") == "s3"  # newest started, not #N
    assert any_store.resolve_session_by_title("my project #2") == "s2"
    assert any_store.resolve_session_by_title("my projects") == "other"
    assert any_store.resolve_session_by_title("nothing like it") is None


def test_like_wildcards_in_a_title_match_only_themselves(any_store: SessionDB) -> None:
    titles = {
        "a": "test_project",
        "b": "testXproject #2",
        "c": "100% done",
        "d": "100X done #2",
        "e": "slash/title",
    }
    for number, (session_id, title) in enumerate(titles.items()):
        any_store.create_session(session_id, "cli", started_at=2000.0 + number)
        any_store.set_session_title(session_id, title)
    assert any_store.resolve_session_by_title("test_project") == "a"
    assert any_store.resolve_session_by_title("100% done") == "c"
    assert any_store.resolve_session_by_title("slash/title") == "e"
    assert any_store.get_next_title_in_lineage("test_project") == "test_project #2"
    assert any_store.get_next_title_in_lineage("100% done") == "100% done #2"
    assert any_store.get_next_title_in_lineage("slash/title") == "slash/title #2"


def test_the_next_title_of_a_lineage(any_store: SessionDB) -> None:
    assert any_store.get_next_title_in_lineage("my project") == "my project"
    any_store.create_session("s1", "cli")
    any_store.set_session_title("s1", "my project")
    assert any_store.get_next_title_in_lineage("my project") == "my project #2"
    any_store.create_session("s2", "cli")
    any_store.set_session_title("s2", "my project #2")
    any_store.create_session("s5", "cli")
    any_store.set_session_title("s5", "my project #5")
    assert any_store.get_next_title_in_lineage("my project") == "my project #6"
    assert any_store.get_next_title_in_lineage("my project #2") == "my project #6"
    # A numbered title alone still starts from the base it names.
    any_store.create_session("t", "cli")
    any_store.set_session_title("t", "orphan #4")
    assert any_store.get_next_title_in_lineage("orphan") == "orphan #5"


def test_title_lookups_refuse_what_is_not_text(any_store: SessionDB) -> None:
    any_store.create_session("s1", "cli")
    for call in (
        lambda: any_store.set_session_title("s1", 42),  # type: ignore[arg-type]
        lambda: any_store.get_session_by_title(None),  # type: ignore[arg-type]
        lambda: any_store.resolve_session_by_title(b"bytes"),  # type: ignore[arg-type]
        lambda: any_store.get_next_title_in_lineage(["list"]),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError):
            call()
    assert any_store.get_session_title("s1") is None


def test_two_sessions_racing_for_one_title_leave_it_to_one(
    new_store: Callable[..., SessionDB],
) -> None:
    """Threads with stores of their own give one title to different sessions at once: one
    wins, every other is told the title is taken (by the check, or by the unique index when
    both checked before either wrote), and the title is on exactly one row."""
    setup = new_store()
    racers = [f"r{index}" for index in range(4)]
    for session_id in racers:
        setup.create_session(session_id, "cli")
    stores = {session_id: new_store() for session_id in racers}
    start = threading.Barrier(len(racers))
    outcomes: dict[str, object] = {}

    def race(session_id: str) -> None:
        start.wait(DEADLINE)
        try:
            outcomes[session_id] = stores[session_id].set_session_title(session_id, "the one")
        except InvalidInputError as refused:
            outcomes[session_id] = refused

    threads = [threading.Thread(target=race, args=(session_id,)) for session_id in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    winners = [session_id for session_id, outcome in outcomes.items() if outcome is True]
    assert len(outcomes) == len(racers)
    assert len(winners) == 1, outcomes
    assert all(isinstance(outcomes[s], InvalidInputError) for s in racers if s not in winners)
    assert [setup.get_session_title(session_id) for session_id in racers].count("the one") == 1
    assert setup.get_session_by_title("the one")["id"] == winners[0]  # type: ignore[index]
