"""Bad input is refused at the library boundary, before anything is written.

Every case runs against a database that already holds sessions in every handoff state and a
transcript, so a write that slipped through would change the digest taken beforehand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hermes_state import (
    HermesStateError,
    InvalidInputError,
    InvalidInputTypeError,
    NativeAsyncSessionDB,
    SessionDB,
)
from tests.support.digest import database_digest

NULL_ID = "never-requested"
PENDING_ID = "pending"
RUNNING_ID = "running"

BAD_IDENTIFIERS: list[tuple[str, object, type[Exception]]] = [
    ("none", None, InvalidInputTypeError),
    ("int", 42, InvalidInputTypeError),
    ("float", 1.5, InvalidInputTypeError),
    ("bytes", b"session", InvalidInputTypeError),
    ("bytearray", bytearray(b"session"), InvalidInputTypeError),
    ("list", ["session"], InvalidInputTypeError),
    ("tuple", ("session",), InvalidInputTypeError),
    ("bool", True, InvalidInputTypeError),
    ("empty", "", InvalidInputError),
    ("blank", "   ", InvalidInputError),
    ("ideographic-space", "\u3000", InvalidInputError),
    ("too-long", "x" * 256, InvalidInputError),
    ("too-long-astral", "🦊" * 256, InvalidInputError),
    ("nul", "ab\x00cd", InvalidInputError),
    ("newline", "line\nbreak", InvalidInputError),
    ("carriage-return", "line\rbreak", InvalidInputError),
    ("tab", "tab\there", InvalidInputError),
    ("escape", "\x1b[31mred", InvalidInputError),
    ("delete", "del\x7f", InvalidInputError),
    ("c1-control", "csi\x9b", InvalidInputError),
    ("lone-surrogate", "half\ud83dpair", InvalidInputError),
    ("lone-low-surrogate", "\udc00", InvalidInputError),
]

BAD_PLATFORMS = [
    *[case for case in BAD_IDENTIFIERS if case[0] != "too-long"],
    ("too-long", "p" * 65, InvalidInputError),
]


def _ids(cases: list[tuple[str, object, type[Exception]]]) -> list[str]:
    return [name for name, _, _ in cases]


@pytest.fixture
def populated(store: SessionDB, backend_url: URL) -> tuple[SessionDB, URL]:
    """A store with sessions in every state and a transcript."""
    for session_id in (NULL_ID, PENDING_ID, RUNNING_ID, "completed", "failed"):
        store.create_session(session_id, "cli", title=f"title of {session_id}")
        store.append_message(session_id, "user", f"hello from {session_id}")
    for session_id in (PENDING_ID, RUNNING_ID, "completed", "failed"):
        assert store.request_handoff(session_id, "telegram") is True
    for session_id in (RUNNING_ID, "completed", "failed"):
        assert store.claim_handoff(session_id) is True
    assert store.complete_handoff("completed") is True
    assert store.fail_handoff("failed", "earlier failure") is True
    return store, backend_url


Case = tuple[str, Callable[[SessionDB], Any], type[Exception]]


def _problem(store: SessionDB, call: Callable[[SessionDB], Any], expected: type[Exception]) -> str:
    """What is wrong with how ``call`` was refused, or "" when it was refused as it should be."""
    try:
        result = call(store)
    except expected as exc:
        # The package's own classes, which are also the builtin ones callers catch.
        builtin = TypeError if issubclass(expected, TypeError) else ValueError
        if not isinstance(exc, HermesStateError) or not isinstance(exc, builtin):
            return f"raised {type(exc).__name__}, not a hermes-state {builtin.__name__}"
        if not str(exc):
            return "raised an error with an empty message"
        return ""
    except Exception as exc:
        return f"raised {type(exc).__name__}: {exc} instead of {expected.__name__}"
    return f"accepted, returned {result!r}"


def assert_all_refused(populated: tuple[SessionDB, URL], cases: list[Case]) -> None:
    """Each call raises ``expected`` and the database is byte for byte what it was."""
    store, url = populated
    before = database_digest(url)
    problems = []
    for label, call, expected in cases:
        problem = _problem(store, call, expected)
        if database_digest(url) != before:
            problems.append(f"{label}: {problem or 'refused'}, but the database changed")
            before = database_digest(url)
        elif problem:
            problems.append(f"{label}: {problem}")
    assert not problems, "\n".join(problems)


def _bind(call: Callable[..., Any], *args: object, **kwargs: object) -> Callable[[SessionDB], Any]:
    return lambda store: call(store, *args, **kwargs)


SESSION_ID_CALLS: list[tuple[str, Callable[..., Any]]] = [
    ("create_session", lambda s, bad: s.create_session(bad, "cli")),
    ("ensure_session", lambda s, bad: s.ensure_session(bad)),
    ("append_message", lambda s, bad: s.append_message(bad, "user", "hello")),
    ("get_messages", lambda s, bad: s.get_messages(bad)),
    ("request_handoff", lambda s, bad: s.request_handoff(bad, "telegram")),
    ("claim_handoff", lambda s, bad: s.claim_handoff(bad)),
    ("complete_handoff", lambda s, bad: s.complete_handoff(bad)),
    ("fail_handoff", lambda s, bad: s.fail_handoff(bad, "boom")),
    ("fail_only_pending", lambda s, bad: s.fail_handoff(bad, "boom", only_states=("pending",))),
    ("get_handoff_state", lambda s, bad: s.get_handoff_state(bad)),
]


@pytest.mark.parametrize(
    ("operation", "call"), SESSION_ID_CALLS, ids=[n for n, _ in SESSION_ID_CALLS]
)
def test_bad_session_ids_are_refused(
    populated: tuple[SessionDB, URL], operation: str, call: Callable[..., Any]
) -> None:
    cases = [(name, _bind(call, bad), expected) for name, bad, expected in BAD_IDENTIFIERS]
    assert_all_refused(populated, cases)


def test_bad_platforms_are_refused(populated: tuple[SessionDB, URL]) -> None:
    """Each of these sessions would accept a request with a good platform."""
    cases = [
        (f"{session_id}/{name}", _bind(SessionDB.request_handoff, session_id, bad), expected)
        for session_id in (NULL_ID, "completed", "failed")
        for name, bad, expected in BAD_PLATFORMS
    ]
    assert_all_refused(populated, cases)


def test_longest_valid_platform_and_id_are_accepted(populated: tuple[SessionDB, URL]) -> None:
    """The limits are inclusive: the refusals above are about the limit, not about long text."""
    store, _ = populated
    longest = "i" * 255
    store.create_session(longest, "s" * 64)
    assert store.request_handoff(longest, "p" * 64) is True
    assert store.get_handoff_state(longest)["platform"] == "p" * 64


def test_bad_sources_are_refused(populated: tuple[SessionDB, URL]) -> None:
    bad_sources = [
        *[case for case in BAD_IDENTIFIERS if case[0] != "too-long"],
        ("too-long", "s" * 65, InvalidInputError),
    ]
    cases = [
        (f"{session_id}/{name}", _bind(SessionDB.create_session, session_id, bad), expected)
        for session_id in ("brand-new", NULL_ID)
        for name, bad, expected in bad_sources
    ]
    assert_all_refused(populated, cases)


BAD_ONLY_STATES: list[tuple[str, object, type[Exception]]] = [
    ("bare-string", "pending", InvalidInputTypeError),
    ("bare-string-running", "running", InvalidInputTypeError),
    ("int", 1, InvalidInputTypeError),
    ("unknown-state", ("pending", "exploded"), InvalidInputError),
    ("completed", ("completed",), InvalidInputError),
    ("failed", ("failed",), InvalidInputError),
    ("none-inside", (None,), InvalidInputError),
    ("wrong-case", ("PENDING",), InvalidInputError),
    ("empty-tuple", (), InvalidInputError),
    ("empty-list", [], InvalidInputError),
]


def test_bad_only_states_are_refused(populated: tuple[SessionDB, URL]) -> None:
    """Both rows could be failed by a plain fail_handoff, so a lax check would write."""
    cases = [
        (
            f"{session_id}/{name}",
            _bind(SessionDB.fail_handoff, session_id, "boom", only_states=bad),
            expected,
        )
        for session_id in (PENDING_ID, RUNNING_ID)
        for name, bad, expected in BAD_ONLY_STATES
    ]
    assert_all_refused(populated, cases)


def test_only_states_accepts_any_sequence_of_valid_states(
    populated: tuple[SessionDB, URL],
) -> None:
    store, _ = populated
    assert store.fail_handoff(PENDING_ID, "a", only_states=["pending"]) is True
    assert store.fail_handoff(RUNNING_ID, "b", only_states=("pending", "running")) is True


BAD_FIELDS: list[tuple[str, dict[str, object], type[Exception]]] = [
    ("unknown-field", {"colour": "blue"}, InvalidInputTypeError),
    ("handoff-state", {"handoff_state": "running"}, InvalidInputTypeError),
    ("handoff-platform", {"handoff_platform": "telegram"}, InvalidInputTypeError),
    ("id-again", {"id": "other"}, InvalidInputTypeError),
    ("started-at-true", {"started_at": True}, InvalidInputTypeError),
    ("started-at-false", {"started_at": False}, InvalidInputTypeError),
    ("started-at-nan", {"started_at": float("nan")}, InvalidInputError),
    ("started-at-inf", {"started_at": float("inf")}, InvalidInputError),
    ("started-at-minus-inf", {"started_at": float("-inf")}, InvalidInputError),
    ("started-at-str", {"started_at": "1700000000"}, InvalidInputTypeError),
    ("started-at-none", {"started_at": None}, InvalidInputTypeError),
    ("ended-at-nan", {"ended_at": float("nan")}, InvalidInputError),
    ("ended-at-bool", {"ended_at": True}, InvalidInputTypeError),
    ("title-nul", {"title": "a\x00b"}, InvalidInputError),
    ("title-int", {"title": 7}, InvalidInputTypeError),
    ("title-surrogate", {"title": "\ud800"}, InvalidInputError),
    ("end-reason-nul", {"end_reason": "\x00"}, InvalidInputError),
    ("user-id-blank", {"user_id": " "}, InvalidInputError),
    ("model-control", {"model": "gpt\n4"}, InvalidInputError),
    ("parent-too-long", {"parent_session_id": "p" * 256}, InvalidInputError),
]


def test_bad_create_session_fields_are_refused(populated: tuple[SessionDB, URL]) -> None:
    cases = [
        (f"{method.__name__}/{session_id}/{name}", _bind(method, session_id, *extra, **fields), exp)
        for method, extra in ((SessionDB.create_session, ("cli",)), (SessionDB.ensure_session, ()))
        for session_id in ("brand-new", NULL_ID)
        for name, fields, exp in BAD_FIELDS
    ]
    assert_all_refused(populated, cases)


BAD_MESSAGES: list[tuple[str, tuple[object, object], type[Exception]]] = [
    ("content-nul", ("user", "before\x00after"), InvalidInputError),
    ("content-only-nul", ("user", "\x00"), InvalidInputError),
    ("content-int", ("user", 42), InvalidInputTypeError),
    ("content-bytes", ("user", b"hello"), InvalidInputTypeError),
    ("content-set", ("user", {"text"}), InvalidInputTypeError),
    ("content-parts-unserialisable", ("user", [object()]), InvalidInputTypeError),
    ("role-none", (None, "hi"), InvalidInputTypeError),
    ("role-empty", ("", "hi"), InvalidInputError),
    ("role-control", ("us\ter", "hi"), InvalidInputError),
    ("role-too-long", ("r" * 33, "hi"), InvalidInputError),
]


def test_bad_messages_are_refused(populated: tuple[SessionDB, URL]) -> None:
    cases = [
        (name, _bind(SessionDB.append_message, NULL_ID, *args), expected)
        for name, args, expected in BAD_MESSAGES
    ]
    assert_all_refused(populated, cases)


def test_bad_list_state_is_refused(populated: tuple[SessionDB, URL]) -> None:
    cases = [
        (repr(bad), _bind(SessionDB.list_handoffs, bad), InvalidInputError)
        for bad in ("exploded", "PENDING", "", 3)
    ]
    assert_all_refused(populated, cases)


def test_refusal_happens_before_the_store_touches_the_database(
    populated: tuple[SessionDB, URL],
) -> None:
    """Validation needs no connection: a closed store still reports bad input as bad input."""
    _, url = populated
    other = SessionDB(url=url)
    other.close()
    with pytest.raises(InvalidInputTypeError):
        other.claim_handoff(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        other.request_handoff(PENDING_ID, "")


# -- the native asyncio store validates the same way ---------------------------------------------

ASYNC_CASES: list[tuple[str, Callable[[NativeAsyncSessionDB], Any], type[Exception]]] = [
    ("id-int", lambda s: s.claim_handoff(7), InvalidInputTypeError),
    ("id-blank", lambda s: s.request_handoff("  ", "telegram"), InvalidInputError),
    ("id-control", lambda s: s.create_session("a\x00", "cli"), InvalidInputError),
    ("platform-long", lambda s: s.request_handoff(NULL_ID, "p" * 65), InvalidInputError),
    ("platform-none", lambda s: s.request_handoff(NULL_ID, None), InvalidInputTypeError),
    (
        "only-states-str",
        lambda s: s.fail_handoff(PENDING_ID, "e", only_states="pending"),
        TypeError,
    ),
    ("only-states-empty", lambda s: s.fail_handoff(PENDING_ID, "e", only_states=()), ValueError),
    ("field-unknown", lambda s: s.create_session("n", "cli", colour="red"), TypeError),
    ("started-at-bool", lambda s: s.create_session("n", "cli", started_at=True), TypeError),
    ("content-nul", lambda s: s.append_message(NULL_ID, "user", "\x00"), ValueError),
]


@pytest.mark.asyncio
async def test_native_async_store_refuses_the_same_input(
    populated: tuple[SessionDB, URL],
) -> None:
    _, url = populated
    before = database_digest(url)
    native = NativeAsyncSessionDB(url=url)
    problems = []
    try:
        for case, call, expected in ASYNC_CASES:
            try:
                await call(native)
            except expected as exc:
                if not isinstance(exc, HermesStateError):
                    problems.append(f"{case}: {type(exc).__name__} is not a hermes-state error")
            except Exception as exc:
                problems.append(f"{case}: raised {type(exc).__name__}: {exc}")
            else:
                problems.append(f"{case}: accepted")
    finally:
        await native.close()
    assert not problems, "\n".join(problems)
    assert database_digest(url) == before
