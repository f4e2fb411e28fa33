"""Bad input: hostile or malformed values through the library and the CLI.

Every case must get a clear error — one of hermes-state's own exceptions from the library; from
the CLI exit code 2 (1 where the input is well-formed but refused, like an unknown session) and
a single ``hermes-state...`` error line with no traceback — and must leave the database exactly
as it was (a digest of every row of every table, before and after). Files handed to
hermes-state that are not its databases must not be touched either.

The tests run as root, so "missing permissions" can only be shown with paths no permission bit
stops root from misusing: a directory where the file should be, and a path below a regular file.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hermes_state import (
    HermesStateError,
    InvalidInputError,
    InvalidInputTypeError,
    NotADatabaseError,
    SessionDB,
    schema,
)
from hermes_state.cli import main
from hermes_state.plans import UnknownSessionError
from tests.conftest import sqlite_url
from tests.support.digest import database_digest

MEGABYTE = 1024 * 1024


def populate(db: SessionDB) -> None:
    """Something for a stray write to damage: a session in flight with a transcript."""
    db.create_session("known", "cli", title="a title")
    db.append_message("known", "user", "hello")
    assert db.request_handoff("known", "telegram")
    db.create_session("idle", "cli")


# -- the library --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    call: Callable[[SessionDB, URL], Any]
    error: type[Exception]


def _case(name: str, error: type[Exception], call: Callable[[SessionDB, URL], Any]) -> Any:
    return pytest.param(Case(name, call, error), id=name)


SQL = "x'); DROP TABLE sessions; --"

LIBRARY_CASES = [
    # session ids: types, emptiness, size, characters
    _case("id int", InvalidInputTypeError, lambda db, _: db.create_session(42, "cli")),
    _case("id None", InvalidInputTypeError, lambda db, _: db.create_session(None, "cli")),
    _case("id bytes", InvalidInputTypeError, lambda db, _: db.create_session(b"s", "cli")),
    _case("id bool", InvalidInputTypeError, lambda db, _: db.get_handoff_state(True)),
    _case("id empty", InvalidInputError, lambda db, _: db.create_session("", "cli")),
    _case("id blank", InvalidInputError, lambda db, _: db.request_handoff("   ", "telegram")),
    _case("id 1 MB", InvalidInputError, lambda db, _: db.create_session("x" * MEGABYTE, "cli")),
    _case("id 256 chars", InvalidInputError, lambda db, _: db.claim_handoff("k" * 256)),
    _case("id NUL", InvalidInputError, lambda db, _: db.create_session("a\x00b", "cli")),
    _case("id newline", InvalidInputError, lambda db, _: db.complete_handoff("known\n")),
    _case("id ANSI escape", InvalidInputError, lambda db, _: db.create_session("\x1b[2J", "cli")),
    _case("id DEL", InvalidInputError, lambda db, _: db.fail_handoff("known\x7f", "e")),
    _case("id lone surrogate", InvalidInputError, lambda db, _: db.create_session("\ud800", "c")),
    _case("id list", InvalidInputTypeError, lambda db, _: db.get_messages(["known"])),
    _case("id None history", InvalidInputTypeError, lambda db, _: db.handoff_history(None)),
    # other names
    _case("source empty", InvalidInputError, lambda db, _: db.create_session("new", "")),
    _case("source 65 chars", InvalidInputError, lambda db, _: db.create_session("n", "s" * 65)),
    _case("source list", InvalidInputTypeError, lambda db, _: db.create_session("n", ["cli"])),
    _case("role empty", InvalidInputError, lambda db, _: db.append_message("known", "", "hi")),
    _case("role int", InvalidInputTypeError, lambda db, _: db.append_message("known", 1, "hi")),
    _case("platform empty", InvalidInputError, lambda db, _: db.request_handoff("idle", "")),
    _case("platform None", InvalidInputTypeError, lambda db, _: db.request_handoff("idle", None)),
    _case("platform tab", InvalidInputError, lambda db, _: db.request_handoff("idle", "te\tle")),
    _case("platform 65", InvalidInputError, lambda db, _: db.request_handoff("idle", "p" * 65)),
    _case("retry platform int", InvalidInputTypeError, lambda db, _: db.retry_handoff("known", 7)),
    # numbers: NaN, infinities, bools, strings
    _case(
        "started_at NaN",
        InvalidInputError,
        lambda db, _: db.create_session("n", "cli", started_at=math.nan),
    ),
    _case(
        "started_at -inf",
        InvalidInputError,
        lambda db, _: db.create_session("n", "cli", started_at=-math.inf),
    ),
    _case(
        "started_at bool",
        InvalidInputTypeError,
        lambda db, _: db.create_session("n", "cli", started_at=True),
    ),
    _case(
        "started_at str",
        InvalidInputTypeError,
        lambda db, _: db.create_session("n", "cli", started_at="yesterday"),
    ),
    _case(
        "unknown field",
        InvalidInputTypeError,
        lambda db, _: db.create_session("n", "cli", colour="red"),
    ),
    _case(
        "SQL as field name",
        InvalidInputTypeError,
        lambda db, _: db.create_session("n", "cli", **{"title = 'x' --": "y"}),
    ),
    _case("title int", InvalidInputTypeError, lambda db, _: db.create_session("n", "c", title=5)),
    _case("limit 0", InvalidInputError, lambda db, _: db.list_handoffs(limit=0)),
    _case("limit -1", InvalidInputError, lambda db, _: db.list_handoffs(limit=-1)),
    _case("limit bool", InvalidInputTypeError, lambda db, _: db.list_handoffs(limit=True)),
    _case("limit float", InvalidInputTypeError, lambda db, _: db.list_handoffs(limit=2.5)),
    _case("limit NaN", InvalidInputTypeError, lambda db, _: db.list_handoffs(limit=math.nan)),
    _case("prune -1", InvalidInputError, lambda db, _: db.prune_handoff_events(-1)),
    _case("prune NaN", InvalidInputError, lambda db, _: db.prune_handoff_events(math.nan)),
    _case("prune inf", InvalidInputError, lambda db, _: db.prune_handoff_events(math.inf)),
    _case("prune bool", InvalidInputTypeError, lambda db, _: db.prune_handoff_events(False)),
    _case("prune str", InvalidInputTypeError, lambda db, _: db.prune_handoff_events("7d")),
    # text: NUL, lone surrogates, types
    _case("content NUL", InvalidInputError, lambda db, _: db.append_message("known", "u", "\x00")),
    _case(
        "content float",
        InvalidInputTypeError,
        lambda db, _: db.append_message("known", "u", 1.5),
    ),
    _case(
        "content bytes", InvalidInputTypeError, lambda db, _: db.append_message("known", "u", b"hi")
    ),
    # states, scopes and lists
    _case("list unknown state", InvalidInputError, lambda db, _: db.list_handoffs("bogus")),
    _case("list state SQL", InvalidInputError, lambda db, _: db.list_handoffs("pending' OR '1")),
    _case("list state int", InvalidInputError, lambda db, _: db.list_handoffs(1)),
    _case("scope unknown", InvalidInputError, lambda db, _: db.preview_reclaim("sometimes")),
    _case(
        "only_states str",
        InvalidInputTypeError,
        lambda db, _: db.fail_handoff("known", "e", only_states="pending"),
    ),
    _case(
        "only_states completed",
        InvalidInputError,
        lambda db, _: db.fail_handoff("known", "e", only_states=("completed",)),
    ),
    _case(
        "only_states empty",
        InvalidInputError,
        lambda db, _: db.fail_handoff("known", "e", only_states=()),
    ),
    _case(
        "only_states SQL",
        InvalidInputError,
        lambda db, _: db.fail_handoff("known", "e", only_states=("pending' OR 1=1 --",)),
    ),
    _case("renew str", InvalidInputTypeError, lambda db, _: db.renew_handoff_leases("known")),
    # the watcher's batches
    _case(
        "claim given, holder missing",
        InvalidInputError,
        lambda db, _: db.claim_handoffs(["known", "idle"], turn_holders={"known": "h"}),
    ),
    _case(
        "claim given, holders a list",
        InvalidInputTypeError,
        lambda db, _: db.claim_handoffs(["known"], turn_holders=["h"]),  # type: ignore[arg-type]
    ),
    _case(
        "claim given, blank holder",
        InvalidInputError,
        lambda db, _: db.claim_handoffs(["known"], turn_holders={"known": " "}),
    ),
    _case(
        "claim given, too many",
        InvalidInputError,
        lambda db, _: db.claim_handoffs([f"s{n}" for n in range(10_001)]),
    ),
    _case(
        "claim given, bad seconds",
        InvalidInputError,
        lambda db, _: db.claim_handoffs(
            ["known"], turn_holders={"known": "h"}, turn_seconds=math.nan
        ),
    ),
    _case("claim next, zero", InvalidInputError, lambda db, _: db.claim_next_handoffs(0)),
    _case(
        "claim next, exclude str",
        InvalidInputTypeError,
        lambda db, _: db.claim_next_handoffs(5, exclude="known"),
    ),
    _case(
        "claim next, blank gateway",
        InvalidInputError,
        lambda db, _: db.claim_next_handoffs(5, turn_gateway=""),
    ),
    _case(
        "finish, a list",
        InvalidInputTypeError,
        lambda db, _: db.finish_handoffs(["known"]),  # type: ignore[arg-type]
    ),
    _case(
        "finish, releases a list",
        InvalidInputTypeError,
        lambda db, _: db.finish_handoffs({"known": None}, release_turns=["h"]),  # type: ignore[arg-type]
    ),
    _case(
        "refresh turns, bad seconds",
        InvalidInputError,
        lambda db, _: db.refresh_session_turn_leases({"known": "h"}, ttl_seconds=-math.inf),
    ),
    _case(
        "release turns, int holder",
        InvalidInputTypeError,
        lambda db, _: db.release_session_turn_leases({"known": 7}),  # type: ignore[dict-item]
    ),
    _case("transcripts, str", InvalidInputTypeError, lambda db, _: db.get_transcripts("known")),
    _case("renew ints", InvalidInputTypeError, lambda db, _: db.renew_handoff_leases([1, 2])),
    # SQL fragments are data: an id that is SQL is just an unknown session
    _case("append to SQL id", UnknownSessionError, lambda db, _: db.append_message(SQL, "u", "x")),
    # revisions
    _case("revision unknown", InvalidInputError, lambda _, url: schema.upgrade(url, "nonexistent")),
    _case(
        "revision SQL",
        InvalidInputError,
        lambda _, url: schema.upgrade(url, "head; DROP TABLE sessions"),
    ),
    _case("downgrade unknown", InvalidInputError, lambda _, url: schema.downgrade(url, "bogus")),
]


@pytest.mark.parametrize("case", LIBRARY_CASES)
def test_the_library_refuses_bad_input_and_writes_nothing(
    case: Case, store: SessionDB, backend_url: URL
) -> None:
    populate(store)
    before = database_digest(backend_url)
    with pytest.raises(case.error) as raised:
        case.call(store, backend_url)
    assert isinstance(raised.value, HermesStateError)
    message = str(raised.value)
    assert message.strip(), message
    assert len(message) < 2000, message
    assert database_digest(backend_url) == before
    # The store still works afterwards.
    assert store.get_handoff_state("known") == {
        "state": "pending",
        "platform": "telegram",
        "error": None,
    }


@pytest.mark.parametrize(
    ("name", "call", "unknown"),
    [
        ("request", lambda db: db.request_handoff(SQL, "telegram"), False),
        ("claim", lambda db: db.claim_handoff("known' OR '1'='1"), False),
        ("fail", lambda db: db.fail_handoff("%", "e"), False),
        ("state", lambda db: db.get_handoff_state("known' --"), None),
        ("messages", lambda db: db.get_messages("' UNION SELECT * FROM sessions --"), []),
        ("history", lambda db: db.handoff_history("_"), []),
    ],
)
def test_sql_fragments_are_treated_as_plain_ids(
    name: str,
    call: Callable[[SessionDB], Any],
    unknown: object,
    store: SessionDB,
    backend_url: URL,
) -> None:
    populate(store)
    before = database_digest(backend_url)
    # Exactly what the method answers for an unknown session, nothing more.
    result = call(store)
    assert type(result) is type(unknown), (name, result)
    assert result == unknown, name
    assert database_digest(backend_url) == before


def test_ten_megabytes_of_content_are_stored_intact(store: SessionDB, backend_url: URL) -> None:
    populate(store)
    piece = "ünïcödé 🚀 "
    content = piece * (10 * MEGABYTE // len(piece.encode()) + 1)
    assert len(content.encode()) >= 10 * MEGABYTE
    message_id = store.append_message("known", "assistant", content)
    assert store.get_messages("known")[-1]["id"] == message_id
    assert store.get_messages("known")[-1]["content"] == content


# -- stores opened on bad targets ---------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a store is pointed: ``place(folder)`` puts any files there and returns the target;
    ``open(target)`` opens (and closes) a store on it."""

    place: Callable[[Path], Any]
    open: Callable[[Any], Any]


def _open(target: Any, **options: Any) -> Target:
    def place(folder: Path) -> Any:
        return target(folder) if callable(target) else target

    return Target(place, lambda resolved: SessionDB(resolved, **options).close())


def _not_a_database(folder: Path) -> Path:
    path = folder / "notes.txt"
    path.write_text("hello, I am a shopping list, not a database\n")
    return path


def _corrupt(folder: Path) -> Path:
    path = folder / "corrupt.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    return path


TARGET_CASES = [
    pytest.param(_open(42), InvalidInputTypeError, id="target int"),
    pytest.param(_open(["state.db"]), InvalidInputTypeError, id="target list"),
    pytest.param(_open(""), InvalidInputError, id="path empty"),
    pytest.param(_open(":memory:"), InvalidInputError, id="path :memory:"),
    pytest.param(_open("sqlite://"), InvalidInputError, id="url in-memory"),
    pytest.param(_open("oracle://scott@db/x"), InvalidInputError, id="url unsupported"),
    pytest.param(_open("postgresql+mysqldb://u@h/d"), InvalidInputError, id="url wrong driver"),
    pytest.param(_open("postgresql://u:s3cret@[::1"), InvalidInputError, id="url malformed"),
    pytest.param(_open("://nothing"), InvalidInputError, id="url no scheme"),
    pytest.param(_open(_not_a_database), NotADatabaseError, id="file not a database"),
    pytest.param(_open(_corrupt), NotADatabaseError, id="file corrupt"),
    pytest.param(_open(lambda f: f), InvalidInputError, id="path is a directory"),
    pytest.param(
        _open(lambda f: _not_a_database(f) / "state.db"),
        InvalidInputError,
        id="path below a regular file",
    ),
    pytest.param(
        _open(lambda f: f / "s.db", busy_patience=math.nan), InvalidInputError, id="patience NaN"
    ),
    pytest.param(
        _open(lambda f: f / "s.db", busy_patience="30"), InvalidInputTypeError, id="patience str"
    ),
    pytest.param(_open(lambda f: f / "s.db", owner=""), InvalidInputError, id="owner empty"),
    pytest.param(_open(lambda f: f / "s.db", owner="gw\n"), InvalidInputError, id="owner newline"),
    pytest.param(
        _open(lambda f: f / "s.db", owner="gw", lease_seconds=0), InvalidInputError, id="lease 0"
    ),
    pytest.param(
        _open(lambda f: f / "s.db", owner="gw", lease_seconds=-5),
        InvalidInputError,
        id="lease negative",
    ),
    pytest.param(
        _open(lambda f: f / "s.db", owner="gw", lease_seconds=math.inf),
        InvalidInputError,
        id="lease inf",
    ),
    pytest.param(
        _open(lambda f: f / "s.db", owner="gw", lease_seconds=True),
        InvalidInputTypeError,
        id="lease bool",
    ),
    pytest.param(
        _open(lambda f: f / "s.db", lease_seconds=60), InvalidInputError, id="lease without owner"
    ),
    pytest.param(_open(lambda f: f / "s.db", actor=""), InvalidInputError, id="actor empty"),
    pytest.param(
        Target(lambda f: f, lambda f: SessionDB(f / "a.db", url=f"sqlite:///{f}/b.db").close()),
        InvalidInputError,
        id="path and url",
    ),
]


def files_in(folder: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize(("target", "error"), TARGET_CASES)
def test_bad_targets_are_refused_and_left_untouched(
    target: Target, error: type[Exception], tmp_path: Path
) -> None:
    folder = tmp_path / "place"
    folder.mkdir()
    main_db = tmp_path / "main" / "state.db"
    with SessionDB(main_db) as db:
        populate(db)
    before = database_digest(sqlite_url(main_db.parent))
    resolved = target.place(folder)
    placed = files_in(folder)
    with pytest.raises(error) as raised:
        target.open(resolved)
    message = str(raised.value)
    assert isinstance(raised.value, HermesStateError)
    assert message.strip(), message
    assert "\n" not in message.strip(), message
    assert "s3cret" not in message  # a password never shows
    # Nothing was created, changed or removed where it pointed, nor in the real database.
    assert files_in(folder) == placed
    assert database_digest(sqlite_url(main_db.parent)) == before


# -- the CLI ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliCase:
    argv: list[str]
    code: int = 2
    env: dict[str, str] = field(default_factory=dict)
    url: bool = True  # prepend --url <the test database>
    subprocess: bool = False  # through a real process, not main() in this one
    secret: str | None = None  # must not appear in the output


def _cli(name: str, *argv: str, **options: Any) -> Any:
    return pytest.param(CliCase(list(argv), **options), id=name)


BELOW_A_FILE = "{folder}/notes.txt/state.db"

CLI_CASES = [
    _cli("create empty id", "session", "create", ""),
    _cli("create blank id", "session", "create", "   "),
    _cli("create ANSI id", "session", "create", "evil\x1b[2Jid"),
    _cli("create 1 MB id", "session", "create", "x" * MEGABYTE),
    _cli("create surrogate id", "session", "create", "\udc80"),
    _cli("create empty source", "session", "create", "new", "--source", ""),
    _cli("request empty platform", "handoff", "request", "known", ""),
    _cli("request newline platform", "handoff", "request", "idle", "tele\ngram"),
    _cli("request SQL id", "handoff", "request", SQL, "telegram", code=1),
    _cli("show empty id", "handoff", "show", ""),
    _cli("show 300-char id", "handoff", "show", "s" * 300),
    _cli("fail empty id", "handoff", "fail", "", "because"),
    _cli("retry empty platform", "handoff", "retry", "known", "--platform", ""),
    _cli("list unknown state", "handoff", "list", "--state", "bogus"),
    _cli("list SQL state", "handoff", "list", "--state", "pending' OR '1'='1"),
    _cli("list negative limit", "handoff", "list", "--limit", "-5"),
    _cli("list word limit", "handoff", "list", "--limit", "ten"),
    _cli("prune NaN", "handoff", "prune-events", "--older-than", "nan"),
    _cli("prune inf", "handoff", "prune-events", "--older-than", "inf"),
    _cli("prune negative", "handoff", "prune-events", "--older-than", "-3"),
    _cli("watch no delivery", "watch", "--once"),
    _cli("watch unknown module", "watch", "--once", "--handler", "nosuch.module:deliver"),
    _cli("watch handler no colon", "watch", "--once", "--handler", "os"),
    _cli("watch handler missing", "watch", "--once", "--handler", "os:not_there"),
    _cli("watch interval NaN", "watch", "--once", "--exec", "true", "--interval", "nan"),
    _cli("watch lease 0", "watch", "--once", "--exec", "true", "--lease-seconds", "0"),
    _cli("watch concurrency 0", "watch", "--once", "--exec", "true", "--max-concurrency", "0"),
    _cli("watch concurrency 1.5", "watch", "--once", "--exec", "true", "--max-concurrency", "1.5"),
    _cli(
        "watch interval env",
        "watch",
        "--once",
        "--exec",
        "true",
        env={"HERMES_STATE_WATCH_INTERVAL": "soon"},
    ),
    _cli("db upgrade unknown", "db", "upgrade", "nonexistent", subprocess=True),
    _cli("db upgrade SQL", "db", "upgrade", "head; DROP TABLE sessions"),
    _cli("db downgrade unknown", "db", "downgrade", "bogus"),
    _cli(
        "url malformed",
        "--url",
        "postgresql://u:s3cret@[::1",
        "handoff",
        "show",
        "s",
        url=False,
        secret="s3cret",
    ),
    _cli("url unsupported", "--url", "oracle://scott@db/x", "handoff", "show", "s", url=False),
    _cli("url in-memory", "--url", ":memory:", "handoff", "show", "s", url=False),
    _cli(
        "url from env",
        "handoff",
        "show",
        "s",
        url=False,
        env={"HERMES_STATE_URL": "oracle://x/y"},
    ),
    _cli(
        "url not a database",
        "--url",
        "{folder}/notes.txt",
        "session",
        "create",
        "s",
        url=False,
        subprocess=True,
    ),
    _cli("url a directory", "--url", "{folder}", "session", "create", "s", url=False),
    _cli(
        "url below a file",
        "--url",
        BELOW_A_FILE,
        "session",
        "create",
        "s",
        url=False,
    ),
    _cli("unknown command", "frobnicate", subprocess=True),
]


@contextlib.contextmanager
def environment(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> Iterator[None]:
    with monkeypatch.context() as patch:
        for name, value in values.items():
            patch.setenv(name, value)
        yield


def run_cli(argv: list[str], case: CliCase, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """(exit code, everything printed)."""
    if case.subprocess:
        done = subprocess.run(
            [sys.executable, "-m", "hermes_state.cli", *argv],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **case.env},
        )
        return done.returncode, done.stderr + done.stdout
    out, err = io.StringIO(), io.StringIO()
    with (
        environment(monkeypatch, case.env),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(argv)
    return code, err.getvalue() + out.getvalue()


def assert_one_clear_error(printed: str) -> None:
    assert "Traceback" not in printed, printed
    lines = [line for line in printed.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("hermes-state")]
    assert len(errors) == 1, printed[:2000]
    if lines[0].startswith("usage: hermes-state"):
        # argparse's own errors: its usage block, then "hermes-state [command]: error: ...".
        assert ": error: " in errors[0], printed[:2000]
        assert lines[-1] == errors[0], printed[:2000]
    else:
        assert errors[0].startswith("hermes-state: "), printed[:2000]
        assert lines == errors, printed[:2000]
    assert len(errors[0]) < 1000, errors[0][:300]


@pytest.mark.parametrize("case", CLI_CASES)
def test_the_cli_refuses_bad_input_clearly_and_writes_nothing(
    case: CliCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "place"
    folder.mkdir()
    _not_a_database(folder)
    db_folder = tmp_path / "main"
    with SessionDB(db_folder / "state.db") as db:
        populate(db)
    url = sqlite_url(db_folder)
    before = database_digest(url)
    places_before = files_in(folder)

    argv = [arg.replace("{folder}", str(folder)) for arg in case.argv]
    if case.url:
        argv = ["--url", str(url.database), *argv]
    code, printed = run_cli(argv, case, monkeypatch)

    assert code == case.code, printed[:2000]
    assert_one_clear_error(printed)
    if case.secret:
        assert case.secret not in printed
    assert database_digest(url) == before
    assert files_in(folder) == places_before
