"""docs/sql/: the SQL each store operation sends, per dialect, rendered from the builders.

The files must be what ``python -m hermes_state.sql_docs`` renders now, one set per operation
and dialect, each naming its builder and operation. The rendering must be honest: only
whitespace and the parameter style differ from the text a store compiles, and the catalog of
which builders an operation runs must be what a store really sends, on every backend
configured. The delivery-holder rule is defined once (``statements.DELIVERY_HOLDER``): the
Python form and the SQL form the claim of the next rows computes both come from it, and
PostgreSQL computes the same holders Python does.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import String, bindparam, create_engine, literal_column, select
from sqlalchemy.engine import URL
from sqlalchemy.sql.elements import ClauseElement

from hermes_state import CompressionSessionClosedError, SessionDB, plans, sql_docs, statements
from hermes_state.engine import resolve_url, with_driver
from hermes_state.plans import Plan
from hermes_state.statements import Capabilities
from tests.conftest import empty_tables, require_server
from tests.support.digest import cached_engine
from tests.support.stores import HandClock, make_pending, put
from tests.support.wire import driver_wire

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql"
REGENERATE = "python -m hermes_state.sql_docs"
FLAVOURS = {flavour.key: flavour for flavour in sql_docs.FLAVOURS}


def body(text: str) -> str:
    """A file's SQL: its comment header and the closing semicolon left out."""
    lines = [line for line in text.splitlines() if not line.startswith("--")]
    return "\n".join(lines).strip().removesuffix(";")


def squashed(sql: str) -> str:
    return re.sub(r"\s+", "", sql)


# -- the files are current, complete and listed ------------------------------------------------


def test_the_files_are_what_the_builders_render_now() -> None:
    wanted = sql_docs.render()
    present = {path.relative_to(DOCS) for path in DOCS.glob("*/*.sql")} | {Path("index.md")}
    missing = sorted(str(path) for path in wanted.keys() - present)
    extra = sorted(str(path) for path in present - wanted.keys())
    stale = sorted(
        str(path)
        for path in wanted.keys() & present
        if (DOCS / path).read_text(encoding="utf-8") != wanted[path]
    )
    problems = [*(f"{p}: missing" for p in missing), *(f"{p}: stale" for p in stale)]
    problems += [f"{p}: no operation sends it any more" for p in extra]
    assert problems == [], f"docs/sql is out of date; run `{REGENERATE}`"


# Two interpreters rendering every file: in the full matrix; the default run renders them here.
@pytest.mark.full
@pytest.mark.parametrize("seed", ["1", "4242"])
def test_the_command_renders_the_same_files_in_any_process(seed: str) -> None:
    """Nothing depends on hash order, addresses or the clock: ``--check`` in a process with
    another hash seed finds the files current."""
    done = subprocess.run(
        [sys.executable, "-m", "hermes_state.sql_docs", str(DOCS), "--check"],
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, ""), done.stdout + done.stderr


@pytest.mark.parametrize("flavour", sql_docs.FLAVOURS, ids=lambda flavour: flavour.key)
def test_every_operation_has_its_files_on_every_dialect(flavour: sql_docs.Flavour) -> None:
    assert flavour.directory in ("sqlite", "postgresql", "mysql")
    steps = sql_docs.catalog().steps
    for operation in sql_docs.OPERATIONS:
        docs = steps[operation.slug, flavour.key]
        assert docs, f"{flavour.server}: no file for {operation.call}"
        for n, doc in enumerate(docs, start=1):
            path = DOCS / doc.path
            assert path.parent.name == flavour.directory, path
            assert path.is_file(), f"{path} is missing; run `{REGENERATE}`"
            first, second = path.read_text(encoding="utf-8").splitlines()[:2]
            assert first.startswith(f"-- {doc.sent.call}, sent by {operation.call}"), first
            assert flavour.server in second, (path, second)
            assert (f"step {n} of {len(docs)}" if len(docs) > 1 else "one statement") in second


def test_each_file_names_a_builder_that_exists_and_shows_parameters_by_name() -> None:
    for path in sorted(DOCS.glob("*/*.sql")):
        text = path.read_text(encoding="utf-8")
        builder = re.match(r"-- statements\.(\w+)\(", text)
        assert builder, path
        assert callable(getattr(statements, builder[1], None)), (path, builder[1])
        sql = body(text)
        assert "%(" not in sql, f"{path}: a parameter not shown by name"
        assert "?" not in sql, f"{path}: a parameter not shown by name"
        assert "POSTCOMPILE" not in sql, path
        assert not re.search(r"0x[0-9a-f]{6,}", text), f"{path}: a memory address"


def test_the_index_links_every_file_and_only_files_that_exist() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    links = set(re.findall(r"\]\(([^)]+)\)", index))
    assert links, "the index links nothing"
    for link in links:
        assert not link.startswith(("/", "http")), link
        assert (DOCS / link).is_file(), f"index.md links {link}, which does not exist"
    files = {path.relative_to(DOCS).as_posix() for path in DOCS.glob("*/*.sql")}
    assert files - links == set(), "files the index does not list"
    for operation in sql_docs.OPERATIONS:
        assert f"### `{operation.call}`" in index, operation.call


def test_every_builder_is_documented_or_said_to_be_sent_by_nothing() -> None:
    modules = [
        importlib.import_module(f"{statements.__name__}.{found.name}")
        for found in pkgutil.iter_modules(statements.__path__)
    ]
    builders = {
        name
        for module in modules
        for name, value in vars(module).items()
        # The builders are the package's own functions, cached (functools.cache).
        if inspect.isfunction(getattr(value, "__wrapped__", None))
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    documented = {doc.sent.builder for doc in sql_docs.catalog().documents}
    assert set(sql_docs.NOT_SENT) <= builders
    assert builders - documented == set(sql_docs.NOT_SENT), (
        "a builder of hermes_state/statements/ is in no operation of sql_docs/operations.py"
    )


def test_check_says_what_is_stale_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "sql"
    assert sql_docs.main([str(target), "--check"]) == 1
    assert not target.exists()
    assert "index.md: missing" in capsys.readouterr().out

    assert sql_docs.main([str(target)]) == 0
    assert sql_docs.main([str(target), "--check"]) == 0
    one = target / "postgresql" / "claim_next_handoffs.turns.sql"
    one.write_text(one.read_text(encoding="utf-8") + "-- edited by hand\n", encoding="utf-8")
    (target / "sqlite" / "gone.sql").write_text("SELECT 1;\n", encoding="utf-8")
    capsys.readouterr()

    assert sql_docs.main([str(target), "--check"]) == 1
    out = capsys.readouterr().out
    assert "claim_next_handoffs.turns.sql: out of date" in out
    assert "gone.sql: no operation sends it any more" in out
    assert REGENERATE in out
    assert one.read_text(encoding="utf-8").endswith("-- edited by hand\n")  # not rewritten

    assert sql_docs.main([str(target)]) == 0
    assert not (target / "sqlite" / "gone.sql").exists()
    assert sql_docs.main([str(target), "--check"]) == 0


# -- the rendering is the text the store sends -------------------------------------------------


def _store_dialect(backend: str) -> Any:
    """The dialect a store on ``backend`` compiles with (its engine's, not connected)."""
    url = resolve_url("sqlite:///state.db" if backend == "sqlite" else f"{backend}://u@h/db")
    return create_engine(with_driver(url, asyncio=False)).dialect


def _as_sent(sql: str, backend: str) -> str:
    """A file's ``:name`` parameters written as the store's driver is sent them."""
    if backend == "sqlite":
        return re.sub(r"(?<![:\w]):(\w+)", "?", sql)
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql.replace("%", "%%"))


def _pg_claim_next() -> sql_docs.Document:
    (doc,) = [
        doc
        for doc in sql_docs.catalog().documents
        if doc.path == Path("postgresql", "claim_next_handoffs.turns.sql")
    ]
    return doc


def test_the_claim_of_the_next_rows_is_the_text_postgresql_is_sent() -> None:
    doc = _pg_claim_next()
    assert doc.sent.statement is statements.claim_next(True)  # the object the plan sends
    sent = statements.claim_next(True).compile(dialect=_store_dialect("postgresql")).string
    rendered = body((DOCS / doc.path).read_text(encoding="utf-8"))
    assert squashed(_as_sent(rendered, "postgresql")) == squashed(sent)
    assert rendered.count("\n") > 50, "the file is one long line, not laid out"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_file_only_lays_out_what_the_store_compiles(backend: str) -> None:
    dialect = _store_dialect(backend)
    differ = []
    for doc in sql_docs.catalog().documents:
        if doc.path.parts[0] != backend:
            continue
        sent = doc.sent.statement.compile(dialect=dialect).string
        rendered = body((DOCS / doc.path).read_text(encoding="utf-8"))
        if squashed(_as_sent(rendered, backend)) != squashed(sent):
            differ.append(str(doc.path))
    assert differ == []


def test_postgresql_is_sent_the_claim_the_file_shows(migrated_servers: dict[str, URL]) -> None:
    url = migrated_servers["postgresql"]  # skips when not configured
    empty_tables(url)
    with SessionDB(url=url, owner="gw-1", lease_seconds=60.0) as db:
        make_pending(db, "a", "b")
        with driver_wire() as wire:
            batch = db.claim_next_handoffs(10, turn_gateway="gw")
    assert [row["id"] for row in batch.rows] == ["a", "b"]
    (sent,) = wire.statements
    rendered = body((DOCS / _pg_claim_next().path).read_text(encoding="utf-8"))
    assert squashed(_as_sent(rendered, "postgresql")) == squashed(sent.sql)


# -- the catalog is what a store sends ---------------------------------------------------------

Example = Callable[[SessionDB, HandClock], Callable[[], object]]


def _acquired(call: Callable[[SessionDB], object]) -> Example:
    def example(db: SessionDB, _clock: HandClock) -> Callable[[], object]:
        assert db.try_acquire_session_turn_lease("seg", "h", ttl_seconds=60.0) is True
        return lambda: call(db)

    return example


def _expired_lease(call: Callable[[SessionDB], object]) -> Example:
    """A write fenced on a lease its holder took and let expire (so it is revived)."""

    def example(db: SessionDB, clock: HandClock) -> Callable[[], object]:
        assert db.try_acquire_session_turn_lease("seg", "h", ttl_seconds=60.0) is True
        clock.advance(120.0)
        return lambda: call(db)

    return example


def _later(call: Callable[[SessionDB], object]) -> Example:
    def example(db: SessionDB, clock: HandClock) -> Callable[[], object]:
        clock.advance(120.0)  # past every claim lease
        return lambda: call(db)

    return example


def _now(call: Callable[[SessionDB], object]) -> Example:
    return lambda db, _clock: lambda: call(db)


def _after(setup: Callable[[SessionDB], object], call: Callable[[SessionDB], object]) -> Example:
    def example(db: SessionDB, _clock: HandClock) -> Callable[[], object]:
        setup(db)
        return lambda: call(db)

    return example


def _closed(call: Callable[[SessionDB], object]) -> Example:
    """A call refused because compression closed the session "closed"."""

    def example(db: SessionDB, _clock: HandClock) -> Callable[[], object]:
        db.create_session("closed", "cli", ended_at=1.0, end_reason="compression")

        def refused() -> None:
            with pytest.raises(CompressionSessionClosedError):
                call(db)

        return refused

    return example


def _prompted(db: SessionDB) -> None:
    db.update_system_prompt("idle", "the old prompt")


def _usage(absolute: bool) -> Callable[[SessionDB], object]:
    return lambda db: db.update_token_counts(
        "idle", 10, 2, "m-2", billing_provider="p", api_call_count=1, absolute=absolute
    )


def _anchored(call: Callable[[SessionDB, int], object]) -> Example:
    """A call given the id of the message ``_state`` appended to the session "idle"."""

    def example(db: SessionDB, _clock: HandClock) -> Callable[[], object]:
        anchor = db.get_messages("idle")[0]["id"]
        return lambda: call(db, anchor)

    return example


def _retired_bot_chat(db: SessionDB) -> None:
    """A Bot Chat retired: hidden, titled "Bot Chat", archived."""
    db.set_session_title("failed", "Bot Chat")
    db.set_session_hidden("failed", True)
    db.set_session_archived("failed", True)


def _claim_bot_chat(db: SessionDB) -> object:
    return db.set_session_title("idle", "Bot Chat")


def _old_conversation(db: SessionDB) -> None:
    """Two old ended segments of one conversation, which a prune by age takes."""
    db.create_session("old-root", "cli", started_at=1.0, ended_at=2.0, end_reason="compression")
    db.create_session("old-tip", "cli", parent_session_id="old-root", started_at=3.0)
    db.end_session("old-tip", "done")


#: A call of every operation of the catalog, by its slug, made on the state :func:`_state`
#: leaves; each must run every step the catalog lists for it.
EXAMPLES: dict[str, Example] = {
    # -- retention (issue 24)
    "prune_sessions": _after(_old_conversation, lambda db: db.prune_sessions(0)),
    "prune_report.dry_run": _after(_old_conversation, lambda db: db.prune_report(0, dry_run=True)),
    "list_prune_candidates": _after(
        _old_conversation, lambda db: db.list_prune_candidates(0, whole_lineages=True)
    ),
    # On an existing id: MySQL/MariaDB then fill it in with a second statement.
    "create_session": _now(lambda db: db.create_session("idle", "cli")),
    "create_session.prompt": _now(lambda db: db.create_session("idle", "cli", system_prompt="p")),
    "create_session.child": _now(
        lambda db: db.create_session("seg", "cli", parent_session_id="root")
    ),
    "end_session": _now(lambda db: db.end_session("idle", "user_exit")),
    "reopen_session": _now(lambda db: db.reopen_session("root")),
    "update_system_prompt": _after(_prompted, lambda db: db.update_system_prompt("idle", "new")),
    "update_session_model": _after(
        _prompted, lambda db: db.update_session_model("idle", "m-2", "openai")
    ),
    "update_token_counts": _now(_usage(absolute=False)),
    "update_token_counts.absolute": _now(_usage(absolute=True)),
    "append_message": _now(lambda db: db.append_message("idle", "user", "hi")),
    "get_messages": _now(lambda db: db.get_messages("idle")),
    "count_messages": _now(lambda db: db.count_messages("idle")),
    "get_transcripts": _now(lambda db: db.get_transcripts(["idle", "pending"])),
    "request_handoff": _now(lambda db: db.request_handoff("idle", "telegram")),
    "retry_handoff": _now(lambda db: db.retry_handoff("failed")),
    "claim_handoff": _now(lambda db: db.claim_handoff("pending")),
    "complete_handoff": _now(lambda db: db.complete_handoff("running")),
    "fail_handoff": _now(lambda db: db.fail_handoff("running", "boom")),
    "claim_pending_handoffs": _now(lambda db: db.claim_pending_handoffs(10)),
    "claim_pending_handoffs.platform": _now(
        lambda db: db.claim_pending_handoffs(10, platform="telegram")
    ),
    "claim_handoffs": _now(lambda db: db.claim_handoffs(["pending"])),
    "claim_handoffs.turns": _now(
        lambda db: db.claim_handoffs(["pending"], turn_holders={"pending": "h"})
    ),
    "claim_next_handoffs": _now(lambda db: db.claim_next_handoffs(10, exclude=["pending2"])),
    "claim_next_handoffs.turns": _now(
        lambda db: db.claim_next_handoffs(10, exclude=["pending2"], turn_gateway="gw")
    ),
    "complete_handoffs": _now(lambda db: db.complete_handoffs(["running"])),
    "fail_handoffs": _now(lambda db: db.fail_handoffs({"running": "boom"})),
    "finish_handoffs": _now(lambda db: db.finish_handoffs({"running": None, "running2": "x"})),
    "finish_handoffs.release_turns": _acquired(
        lambda db: db.finish_handoffs(
            {"running": None, "running2": "x"}, release_turns={"seg": "h"}
        )
    ),
    "renew_handoff_leases": _now(lambda db: db.renew_handoff_leases(["running"])),
    "reclaim_stale_running_handoffs": _now(lambda db: db.reclaim_stale_running_handoffs("gone")),
    "reclaim_expired_handoffs": _later(lambda db: db.reclaim_expired_handoffs("expired")),
    "reclaim_running_handoffs": _now(lambda db: db.reclaim_running_handoffs("all")),
    "preview_reclaim": _now(lambda db: db.preview_reclaim("stale")),
    "preview_reclaim.expired": _now(lambda db: db.preview_reclaim("expired")),
    "preview_reclaim.all": _now(lambda db: db.preview_reclaim("all")),
    # The lease _acquired takes is on "seg"'s conversation, whose expiry the clock passes.
    "append_message.fenced": _expired_lease(
        lambda db: db.append_message("seg", "user", "hi", turn_lease_holder="h")
    ),
    "append_messages_batch.fenced": _expired_lease(
        lambda db: db.append_messages_batch(
            "seg", [{"role": "user", "content": "hi"}], turn_lease_holder="h"
        )
    ),
    "has_live_session_turn_lease": _acquired(lambda db: db.has_live_session_turn_lease("seg")),
    "try_acquire_session_turn_lease": _now(
        lambda db: db.try_acquire_session_turn_lease("seg", "h", ttl_seconds=60.0)
    ),
    "refresh_session_turn_lease": _acquired(
        lambda db: db.refresh_session_turn_lease("seg", "h", ttl_seconds=60.0)
    ),
    "release_session_turn_lease": _acquired(lambda db: db.release_session_turn_lease("seg", "h")),
    "refresh_session_turn_leases": _acquired(
        lambda db: db.refresh_session_turn_leases({"seg": "h"}, ttl_seconds=60.0)
    ),
    "release_session_turn_leases": _acquired(
        lambda db: db.release_session_turn_leases({"seg": "h"})
    ),
    "handoff_history": _now(lambda db: db.handoff_history("running")),
    "prune_handoff_events": _now(lambda db: db.prune_handoff_events(3600.0)),
    "prune_handoff_events.dry_run": _now(lambda db: db.prune_handoff_events(3600.0, dry_run=True)),
    "handoff_events_after": _now(lambda db: db.handoff_events_after(0, limit=10)),
    "recent_handoff_failures": _now(lambda db: db.recent_handoff_failures(limit=5)),
    "last_handoff_event_id": _now(lambda db: db.last_handoff_event_id()),
    "list_pending_handoffs": _now(lambda db: db.list_pending_handoffs()),
    "list_handoffs": _now(lambda db: db.list_handoffs()),
    "list_handoffs.filtered": _now(
        lambda db: db.list_handoffs("failed", limit=10, after="failed", search="f")
    ),
    "list_sessions": _now(lambda db: db.list_sessions()),
    "list_sessions.filtered": _now(
        lambda db: db.list_sessions(source="cli", handoff_state="pending", since=0.0, limit=10)
    ),
    "get_session": _now(lambda db: db.get_session("idle")),
    "message_count": _now(lambda db: db.message_count()),
    "message_count.session": _now(lambda db: db.message_count("idle")),
    "set_session_title": _now(lambda db: db.set_session_title("idle", "a title")),
    "set_session_title.segment": _after(
        lambda db: db.set_session_title("root", "a title"),
        lambda db: db.set_session_title("seg", "a title"),
    ),
    "set_session_title.retired": _after(_retired_bot_chat, _claim_bot_chat),
    "get_session_title": _now(lambda db: db.get_session_title("idle")),
    "set_auto_title": _now(lambda db: db.set_auto_title("idle", "a title", source="llm")),
    "get_session_title_source": _now(lambda db: db.get_session_title_source("idle")),
    "set_session_title_source": _after(
        lambda db: db.set_session_title("idle", "a title"),
        lambda db: db.set_session_title_source("idle", "llm"),
    ),
    "get_session_by_title": _now(lambda db: db.get_session_by_title("a title")),
    "resolve_session_by_title": _now(lambda db: db.resolve_session_by_title("a title")),
    "get_next_title_in_lineage": _now(lambda db: db.get_next_title_in_lineage("a title #2")),
    "list_sessions_rich": _now(lambda db: db.list_sessions_rich()),
    "list_sessions_rich.filtered": _now(
        lambda db: db.list_sessions_rich(
            source="cli",
            exclude_sources=["tool"],
            session_key="agent:main:cli",
            cwd_prefix="/work",
            min_message_count=1,
            include_pinned=True,
        )
    ),
    "list_sessions_rich.by_activity": _now(
        lambda db: db.list_sessions_rich(
            order_by_last_active=True,
            id_query="seg",
            search_query="a-title",
            include_children=True,
            compact_rows=True,
        )
    ),
    "session_count": _now(lambda db: db.session_count()),
    "session_count.filtered": _now(
        lambda db: db.session_count("cli", exclude_children=True, include_archived=True)
    ),
    "session_count.own": _now(lambda db: db.session_count(scope="own", requester_user_id=42)),
    "session_count_ge": _now(lambda db: db.session_count_ge(2)),
    "session_count_by_source": _now(lambda db: db.session_count_by_source()),
    "search_sessions": _now(lambda db: db.search_sessions()),
    "search_sessions.filtered": _now(
        lambda db: db.search_sessions(source=["cli", "tui"], workspace_key="/work")
    ),
    # -- search (issue 24)
    # No word "deployscript" was written: the substring retry finds it.
    "search_messages": _after(
        lambda db: db.append_message("idle", "assistant", "the deployscripts ran"),
        lambda db: db.search_messages("deployscript"),
    ),
    # Past the ranked candidates (1,000 newest on SQLite, 200 on PostgreSQL).
    "search_messages.deep": _after(
        lambda db: db.append_messages_batch(
            "idle", [{"role": "user", "content": f"common {n}"} for n in range(1_010)]
        ),
        lambda db: db.search_messages("common", limit=5, offset=1_005),
    ),
    "search_messages.cjk": _after(
        lambda db: db.append_message("idle", "user", "去大别山项目现场"),
        lambda db: db.search_messages(
            "大别山项目",
            source_filter=["cli"],
            exclude_sources=["cron"],
            role_filter=["user"],
            sort="newest",
        ),
    ),
    "search_messages.scan": _after(
        lambda db: db.append_message("idle", "user", "广西的桂林"),
        lambda db: db.search_messages("广西 OR 桂林"),
    ),
    "search_sessions_by_id": _now(lambda db: db.search_sessions_by_id("pend")),
    "get_handoff_state": _now(lambda db: db.get_handoff_state("idle")),
    "has_pending_handoffs": _now(lambda db: db.has_pending_handoffs()),
    "handoff_stats": _now(lambda db: db.handoff_stats()),
    "set_session_archived": _now(lambda db: db.set_session_archived("seg", True)),
    "set_session_pinned": _now(lambda db: db.set_session_pinned("seg", True)),
    "set_session_hidden": _now(lambda db: db.set_session_hidden("seg", True)),
    "set_session_read": _now(lambda db: db.set_session_read("seg", False)),
    "resolve_session_id": _now(lambda db: db.resolve_session_id("pend")),
    "resolve_resume_session_id": _now(lambda db: db.resolve_resume_session_id("root")),
    "get_compression_chain": _now(lambda db: db.get_compression_chain("root")),
    "get_compression_tip": _now(lambda db: db.get_compression_tip("root")),
    "get_compression_lineage": _now(lambda db: db.get_compression_lineage("seg")),
    "delete_session": _now(lambda db: db.delete_session("idle")),
    "delete_sessions": _now(lambda db: db.delete_sessions(["idle", "failed", "ghost"])),
    "get_meta": _now(lambda db: db.get_meta("last_auto_archive")),
    "set_meta": _now(lambda db: db.set_meta("last_auto_archive", "1700000000.0")),
    # -- messages
    "append_message.closed": _closed(lambda db: db.append_message("closed", "user", "late")),
    "get_messages.paged": _now(lambda db: db.get_messages("idle", limit=10, offset=1)),
    "get_messages.latest": _now(lambda db: db.get_messages("idle", limit=10, latest=True)),
    "get_messages.after": _now(lambda db: db.get_messages("idle", limit=10, after_id=0)),
    "get_messages.inactive": _now(lambda db: db.get_messages("idle", include_inactive=True)),
    "get_messages.compacted": _now(lambda db: db.get_messages("idle", include_compacted=True)),
    "get_messages_around": _anchored(lambda db, anchor: db.get_messages_around("idle", anchor, 2)),
    "get_messages_as_conversation": _now(lambda db: db.get_messages_as_conversation("idle")),
    "get_messages_as_conversation.ancestors": _now(
        lambda db: db.get_messages_as_conversation("seg", include_ancestors=True)
    ),
    "clear_session_messages": _now(lambda db: db.clear_session_messages("idle")),
    "clear_session_messages.keep_last_n": _now(
        lambda db: db.clear_session_messages("idle", keep_last_n=1)
    ),
    "clear_session_messages.before_timestamp": _now(
        lambda db: db.clear_session_messages("idle", before_timestamp=0.0)
    ),
    "rewind_to_message": _anchored(lambda db, anchor: db.rewind_to_message("idle", anchor)),
    "rewind_to_message.expected": _anchored(
        lambda db, anchor: db.rewind_to_message("idle", anchor, expected_active_ids=[anchor])
    ),
    "append_messages_batch": _now(
        lambda db: db.append_messages_batch("idle", [{"role": "user", "content": "one"}] * 2)
    ),
    # -- export and import
    "export_session": _now(lambda db: db.export_session("idle")),
    "export_session_lineage": _now(lambda db: db.export_session_lineage("seg")),
    "export_all": _now(lambda db: db.export_all()),
    "assert_export_safe": _now(lambda db: db.assert_export_safe("idle", max_messages=10)),
    "import_sessions": _now(
        lambda db: db.import_sessions(
            [
                {
                    "id": "imported",
                    "title": "Imported",
                    "system_prompt": "p",
                    "parent_session_id": "root",
                    "messages": [{"role": "user", "content": "hi"}],
                }
            ]
        )
    ),
}


def test_every_operation_of_the_catalog_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(operation.slug for operation in sql_docs.OPERATIONS)


def _state(db: SessionDB) -> None:
    """A session of each kind: never requested (with a message), two pending, two running
    under this store's claims, one failed, and a conversation of two segments."""
    put(db, "idle", None)
    db.append_message("idle", "user", "hello")
    make_pending(db, "pending", "pending2", started_at=10.0)
    make_pending(db, "running", "running2", started_at=20.0)
    for session_id in ("running", "running2"):
        assert db.claim_handoff(session_id) is True
    put(db, "failed", "failed")
    db.create_session("root", "cli", end_reason="compression", cwd="/work")
    db.create_session("seg", "cli", parent_session_id="root")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[ClauseElement]:
    """Every statement a plan yields while the test runs, in order (seen where the stores
    start plans, so whatever runner executes them)."""
    seen: list[ClauseElement] = []
    start = Plan.start

    def watched(plan: Plan[Any], caps: Capabilities) -> Any:
        body = start(plan, caps)
        try:
            step = next(body)
            while True:
                assert isinstance(step.statement, ClauseElement)
                seen.append(step.statement)
                step = body.send((yield step))
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(Plan, "start", watched)
    return seen


def _flavour(url: URL) -> sql_docs.Flavour:
    """The flavour of the docs for the server ``url`` points at (MySQL or MariaDB told apart
    by the connected dialect), checked to choose as the store does."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return FLAVOURS["sqlite"]
    engine = cached_engine(url)
    with engine.connect():
        pass
    key = "mariadb" if getattr(engine.dialect, "is_mariadb", False) else backend
    flavour = FLAVOURS[key]
    assert Capabilities.of(engine.dialect) == flavour.caps, "the docs assume other capabilities"
    return flavour


def _distinct(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


@pytest.mark.parametrize("operation", sql_docs.OPERATIONS, ids=lambda op: op.slug)
def test_the_files_of_an_operation_are_the_statements_a_store_sends(
    backend_url: URL, sent: list[ClauseElement], operation: sql_docs.Operation
) -> None:
    flavour = _flavour(backend_url)
    clock = HandClock(1000.0)
    with SessionDB(url=backend_url, owner="gw-1", lease_seconds=60.0, clock=clock) as db:
        _state(db)
        call = EXAMPLES[operation.slug](db, clock)
        sent.clear()
        call()
    documented = [
        sql_docs.sql_text(one.statement, flavour) for one in operation.steps(flavour.caps)
    ]
    sent_now = [sql_docs.sql_text(statement, flavour) for statement in sent]
    assert sent_now, f"{operation.call} sent nothing"
    assert _distinct(sent_now) == _distinct(documented), (
        f"{operation.call} on {flavour.server} sends other statements than docs/sql lists"
    )


# -- the delivery-holder rule, defined once ----------------------------------------------------


def test_the_python_holder_is_the_rule_and_follows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rule = statements.DELIVERY_HOLDER
    assert plans.delivery_holder("gw", "s-1") == rule.name("gw", "s-1")
    assert plans.delivery_holder("gw", "s-1").startswith("handoff:")

    other = dataclasses.replace(rule, prefix="turn/", digest_chars=6, separator="@", length=20)
    monkeypatch.setattr(statements, "DELIVERY_HOLDER", other)
    held = plans.delivery_holder("a-gateway-with-a-long-name", "s-1")
    assert held == other.name("a-gateway-with-a-long-name", "s-1")
    assert held.startswith("turn/")
    assert held[11] == "@"  # after six hex digits
    assert len(held) == 20

    pg = FLAVOURS["postgresql"].dialect
    column = literal_column("roots.id", String())
    gateway = bindparam("turn_gateway", type_=String())
    sql = str(other.sql(column, gateway).compile(dialect=pg))
    for part in ("'turn/'", "'@'", ", 6)", ", 20)"):
        assert part in sql


def test_the_claim_of_the_next_rows_computes_the_holder_by_the_rule() -> None:
    pg = FLAVOURS["postgresql"].dialect
    column = literal_column("lineage_roots.id", String())
    gateway = bindparam("turn_gateway", type_=String())
    holder = str(statements.DELIVERY_HOLDER.sql(column, gateway).compile(dialect=pg))
    claim = str(statements.claim_next(True).compile(dialect=pg))
    assert claim.count(holder) == 1, holder
    rendered = body((DOCS / "postgresql" / "claim_next_handoffs.turns.sql").read_text("utf-8"))
    assert squashed(holder) in squashed(rendered)


@pytest.mark.parametrize(
    ("gateway", "session_id"),
    [
        ("gw", "root"),
        ("gateway-7", "sessión-ünïcode-✓-日本"),
        ("g" * 300, "s"),  # cut to the id length, by characters
        ("gw", "x" * 255),
    ],
)
def test_postgresql_computes_the_holders_python_does(gateway: str, session_id: str) -> None:
    url = require_server("postgresql")
    engine = create_engine(with_driver(url, asyncio=False))
    try:
        computed = select(
            statements.DELIVERY_HOLDER.sql(
                bindparam("session_id", type_=String()), bindparam("turn_gateway", type_=String())
            )
        )
        with engine.connect() as connection:
            found = connection.execute(
                computed, {"session_id": session_id, "turn_gateway": gateway}
            ).scalar_one()
    finally:
        engine.dispose()
    assert found == plans.delivery_holder(gateway, session_id)
