"""Writes to a session row, on every backend and store kind: create as an upsert with every
upstream field, inheritance from a parent, end and reopen, the prompt kept by hash, the model
switch, and usage accounting with its per-model rows."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from sqlalchemy import URL, create_engine, func, select

from hermes_state import InvalidInputError, InvalidInputTypeError, SessionDB
from hermes_state.models import session_model_usage, sessions, system_prompts
from tests.support.digest import cached_engine


def _prompts(url: URL) -> dict[str, str]:
    with cached_engine(url).connect() as connection:
        rows = connection.execute(select(system_prompts.c.hash, system_prompts.c.prompt))
        return {row.hash: row.prompt for row in rows}


def _raw(url: URL, session_id: str) -> dict[str, Any]:
    with cached_engine(url).connect() as connection:
        row = connection.execute(select(sessions).where(sessions.c.id == session_id)).one()
        return dict(row._mapping)


def test_every_upstream_field_is_stored(any_store: SessionDB) -> None:
    fields: dict[str, Any] = {
        "model": "gpt-5",
        "model_config": {"temperature": 0.2},
        "user_id": "u-7",
        "session_key": "agent:main:telegram:dm:42",
        "chat_id": 42,
        "chat_type": "dm",
        "thread_id": "t-1",
        "display_name": "Ada",
        "origin_json": '{"platform": "telegram"}',
        "cwd": "/home/ada/project",
        "git_repo_root": "/home/ada/project",
        "git_branch": "main",
        "profile_name": "main",
    }
    assert any_store.create_session("s1", "telegram", **fields) == "s1"
    row = any_store.get_session("s1")
    assert row is not None
    assert row["chat_id"] == "42"  # a platform's numeric id is stored as text, as upstream
    assert json.loads(row["model_config"]) == {"temperature": 0.2}
    for name, value in fields.items():
        if name not in ("chat_id", "model_config"):
            assert row[name] == value, name


def test_a_second_create_fills_only_what_is_missing(any_store: SessionDB) -> None:
    any_store.ensure_session("s1")  # a gateway's bare row: source 'unknown'
    any_store.create_session("s1", "discord", model="first", cwd="/a", chat_id="c-1")
    any_store.create_session("s1", "slack", model="second", cwd="/b", thread_id="t-9")
    row = any_store.get_session("s1")
    assert row is not None
    assert (row["source"], row["model"], row["cwd"]) == ("discord", "first", "/a")
    assert (row["chat_id"], row["thread_id"]) == ("c-1", "t-9")
    assert any_store.session_count() == 1


def test_ensure_session_takes_upstreams_defaults(any_store: SessionDB) -> None:
    assert any_store.ensure_session("s1", model="m-1") == "s1"
    row = any_store.get_session("s1")
    assert row is not None
    assert (row["source"], row["model"]) == ("unknown", "m-1")


def test_a_prompt_is_stored_once_by_its_hash(any_store: SessionDB, backend_url: URL) -> None:
    prompt = "You are terse. \u00e9\u4e2d"
    any_store.create_session("a", "cli", system_prompt=prompt)
    any_store.create_session("b", "cli", system_prompt=prompt)
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    assert _prompts(backend_url) == {digest: prompt}
    raw = _raw(backend_url, "a")
    assert (raw["system_prompt"], raw["system_prompt_hash"]) == (None, digest)
    assert any_store.get_session("b")["system_prompt"] == prompt  # type: ignore[index]
    # A later create keeps the first prompt; the one it brought is nobody's and is dropped.
    any_store.create_session("a", "cli", system_prompt="another")
    assert any_store.get_session("a")["system_prompt"] == prompt  # type: ignore[index]
    assert list(_prompts(backend_url).values()) == [prompt]


def test_update_system_prompt_replaces_and_collects(any_store: SessionDB, backend_url: URL) -> None:
    any_store.create_session("a", "cli", system_prompt="one")
    any_store.create_session("b", "cli", system_prompt="one")
    any_store.update_system_prompt("a", "two")
    assert any_store.get_session("a")["system_prompt"] == "two"  # type: ignore[index]
    assert sorted(_prompts(backend_url).values()) == ["one", "two"]  # b still uses "one"
    any_store.update_system_prompt("b", "two")
    assert sorted(_prompts(backend_url).values()) == ["two"]
    any_store.update_system_prompt("a", None)
    any_store.update_system_prompt("b", None)
    assert any_store.get_session("a")["system_prompt"] is None  # type: ignore[index]
    assert _prompts(backend_url) == {}
    any_store.update_system_prompt("ghost", "never stored")
    assert _prompts(backend_url) == {}
    assert any_store.get_session("ghost") is None


def test_a_child_inherits_place_and_profile(any_store: SessionDB) -> None:
    any_store.create_session(
        "parent",
        "telegram",
        cwd="/repo",
        git_repo_root="/repo",
        git_branch="dev",
        profile_name="work",
        session_key="agent:work:telegram:dm:1",
        chat_id="1",
    )
    any_store.create_session("delegate", "cli", parent_session_id="parent", git_branch="own")
    child = any_store.get_session("delegate")
    assert child is not None
    assert (child["cwd"], child["git_repo_root"], child["profile_name"]) == (
        "/repo",
        "/repo",
        "work",
    )
    assert child["git_branch"] == "own"  # its own value is never overwritten
    # Not a compression continuation: the gateway route is not taken.
    assert (child["session_key"], child["chat_id"]) == (None, None)


def test_a_compression_continuation_also_inherits_the_route(any_store: SessionDB) -> None:
    any_store.create_session(
        "root", "telegram", user_id="u", session_key="agent:main:tg:1", chat_id="1", cwd="/w"
    )
    any_store.end_session("root", "compression")
    any_store.create_session("next", "telegram", parent_session_id="root")
    row = any_store.get_session("next")
    assert row is not None
    assert (row["user_id"], row["session_key"], row["chat_id"], row["cwd"]) == (
        "u",
        "agent:main:tg:1",
        "1",
        "/w",
    )


def test_a_profile_is_not_inherited_across_key_namespaces(any_store: SessionDB) -> None:
    any_store.create_session(
        "parent", "telegram", profile_name="work", session_key="agent:work:tg:1"
    )
    any_store.create_session(
        "child", "telegram", parent_session_id="parent", session_key="agent:main:tg:1"
    )
    assert any_store.get_session("child")["profile_name"] is None  # type: ignore[index]
    any_store.create_session("keyless", "cli", parent_session_id="parent")
    assert any_store.get_session("keyless")["profile_name"] == "work"  # type: ignore[index]


def test_end_keeps_the_first_reason_until_reopened(any_store: SessionDB) -> None:
    any_store.create_session("s", "cli")
    any_store.end_session("s", "compression")
    first = any_store.get_session("s")
    assert first is not None
    assert first["end_reason"] == "compression"
    any_store.end_session("s", "user_exit")
    again = any_store.get_session("s")
    assert again is not None
    assert (again["end_reason"], again["ended_at"]) == ("compression", first["ended_at"])
    any_store.reopen_session("s")
    live = any_store.get_session("s")
    assert live is not None
    assert (live["ended_at"], live["end_reason"]) == (None, None)
    any_store.end_session("s", "user_exit")
    assert any_store.get_session("s")["end_reason"] == "user_exit"  # type: ignore[index]
    any_store.end_session("ghost", "x")  # nothing to end: no error, nothing created
    assert any_store.get_session("ghost") is None


def test_a_model_switch_merges_the_config_and_drops_the_prompt(
    any_store: SessionDB, backend_url: URL
) -> None:
    config = {"provider": "old", "browser_model_lock": {"model": "x"}, "_branched_from": "p"}
    any_store.create_session("s", "cli", model="m-1", model_config=config, system_prompt="P")
    any_store.update_session_model("s", "m-2", provider="anthropic")
    row = any_store.get_session("s")
    assert row is not None
    assert row["model"] == "m-2"
    assert json.loads(row["model_config"]) == {
        "provider": "anthropic",
        "model": "m-2",
        "_branched_from": "p",
    }
    assert row["system_prompt"] is None
    assert _prompts(backend_url) == {}
    any_store.update_session_model("s", "m-3")  # no provider: the stored one stays
    assert json.loads(any_store.get_session("s")["model_config"])["provider"] == "anthropic"  # type: ignore[index]
    any_store.update_session_model("ghost", "m-1")
    assert any_store.get_session("ghost") is None


def _usage_rows(url: URL) -> list[tuple[Any, ...]]:
    u = session_model_usage.c
    query = select(u.model, u.billing_provider, u.api_call_count, u.input_tokens, u.task)
    with cached_engine(url).connect() as connection:
        return sorted(tuple(row) for row in connection.execute(query))


def test_incremental_usage_adds_up(any_store: SessionDB, backend_url: URL) -> None:
    any_store.create_session("s", "cli", model="planned")
    for _ in range(2):
        any_store.update_token_counts(
            "s",
            input_tokens=100,
            output_tokens=20,
            cache_read_tokens=5,
            model="served",
            billing_provider="openai",
            estimated_cost_usd=0.25,
            api_call_count=1,
        )
    any_store.update_token_counts("s", actual_cost_usd=0.75, cost_status="billed")
    row = any_store.get_session("s")
    assert row is not None
    assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"]) == (200, 40, 10)
    assert (row["api_call_count"], row["estimated_cost_usd"], row["actual_cost_usd"]) == (
        2,
        0.5,
        0.75,
    )
    # The first accounted call's route replaced the planned one.
    assert (row["model"], row["billing_provider"], row["cost_status"]) == (
        "served",
        "openai",
        "billed",
    )
    assert _usage_rows(backend_url) == [("served", "openai", 2, 200, "")]


def test_absolute_usage_sets_totals_and_keeps_no_model_row(
    any_store: SessionDB, backend_url: URL
) -> None:
    any_store.create_session("s", "telegram")
    any_store.update_token_counts("s", input_tokens=10, output_tokens=1, api_call_count=1)
    any_store.update_token_counts(
        "s", input_tokens=500, output_tokens=50, api_call_count=7, absolute=True
    )
    row = any_store.get_session("s")
    assert row is not None
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (500, 50, 7)
    assert _usage_rows(backend_url) == [("unknown", "", 1, 10, "")]


def test_usage_for_a_missing_session_creates_it(any_store: SessionDB) -> None:
    any_store.update_token_counts("late", input_tokens=3, model="m")
    row = any_store.get_session("late")
    assert row is not None
    assert (row["source"], row["model"], row["input_tokens"]) == ("unknown", "m", 3)
    any_store.create_session("late", "cli")  # the real surface replaces the placeholder
    assert any_store.get_session("late")["source"] == "cli"  # type: ignore[index]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda db: db.create_session("s", "cli", colour="red"), InvalidInputTypeError),
        (lambda db: db.create_session("s", "cli", chat_id=["x"]), InvalidInputTypeError),
        (lambda db: db.create_session("s", "cli", profile_name=" "), InvalidInputError),
        (lambda db: db.create_session("s", "cli", cwd="/a\x00b"), InvalidInputError),
        (lambda db: db.end_session("s", 3), InvalidInputTypeError),
        (lambda db: db.update_system_prompt("s", b"bytes"), InvalidInputTypeError),
        (lambda db: db.update_session_model("s", ""), InvalidInputError),
        (lambda db: db.update_token_counts("s", input_tokens="10"), InvalidInputTypeError),
        (
            lambda db: db.update_token_counts("s", estimated_cost_usd=float("nan")),
            InvalidInputError,
        ),
        (lambda db: db.update_token_counts("s", absolute=1), InvalidInputTypeError),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    any_store: SessionDB, backend_url: URL, call: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        call(any_store)
    assert any_store.session_count() == 0
    assert _prompts(backend_url) == {}


def test_an_upstream_file_reads_what_we_wrote(tmp_path: Any) -> None:
    """The prompt by hash and the inherited columns are where upstream's own reader looks."""
    path = tmp_path / "state.db"
    with SessionDB(db_path=path) as db:
        db.create_session("p", "cli", cwd="/w", system_prompt="hello")
        db.create_session("c", "cli", parent_session_id="p")
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        joined = connection.execute(
            select(func.coalesce(system_prompts.c.prompt, sessions.c.system_prompt))
            .select_from(
                sessions.outerjoin(
                    system_prompts, system_prompts.c.hash == sessions.c.system_prompt_hash
                )
            )
            .where(sessions.c.id == "p")
        ).scalar_one()
        cwd = connection.execute(select(sessions.c.cwd).where(sessions.c.id == "c")).scalar_one()
    engine.dispose()
    assert (joined, cwd) == ("hello", "/w")
